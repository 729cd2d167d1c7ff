"""A pod waiting for a device is retried as soon as the claim holding it is released, not when its
backoff ends (kube-scheduler's SchedulerPopFromBackoffQ): four one-device pods on a node with two
devices, under an operator whose backoff (600 s) is far longer than the test may run."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane

from .embedded import long_backoff_operator
from .helpers import eventually, pod

BACKOFF = 600.0
SCHEDULER = "draxr-long-backoff"


@pytest.fixture(scope="module")
async def long_backoff(control_plane: ControlPlane) -> AsyncIterator[tuple[Kube, Operator]]:
    async with long_backoff_operator(str(control_plane.kubeconfig), SCHEDULER, BACKOFF) as running:
        yield running


async def test_waiting_pods_are_bound_when_a_claim_is_released_not_after_their_backoff(
    long_backoff: tuple[Kube, Operator], kube: Kube, namespace: str
) -> None:
    fleet = fakedriver.Fleet(
        prefix=namespace,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{namespace}.example.com",
        classes={f"{namespace}-gpu": f"{namespace}.example.com/gpu"},
    )
    resource = f"{namespace}.example.com/gpu"
    names = [f"job-{i}" for i in range(4)]
    bound: dict[str, float] = {}  # pod -> when the test first saw it bound (monotonic)
    released: list[float] = []  # when the test saw a claim go
    most_claims = 0
    at_most: list[dict[str, object]] = []  # the allocated claims when there were most
    async with fakedriver.deployed(kube, fleet):
        for name in names:
            body = pod(name, {resource: "1"}, scheduler=SCHEDULER, annotations={RUN_FOR_ANNOTATION: "2s"})
            await kube.create(PODS, body, namespace)
        claims: set[str] = set()

        async def all_succeeded() -> bool:
            nonlocal claims, most_claims
            now = time.monotonic()
            pods = {p["metadata"]["name"]: p for p in await kube.list(PODS, namespace)}
            # Allocated claims: a released one may linger deallocated until it is deleted.
            allocated = [
                c for c in await kube.list(RESOURCE_CLAIMS, namespace) if (c.get("status") or {}).get("allocation")
            ]
            current = {c["metadata"]["name"] for c in allocated}
            released.extend(now for _ in claims - current)
            claims = current
            if len(current) > most_claims:
                most_claims = len(current)
                at_most[:] = [_summary(c) for c in allocated]
            for name, p in pods.items():
                if p["spec"].get("nodeName"):
                    bound.setdefault(name, now)
            return all(p["status"].get("phase") == "Succeeded" for p in pods.values())

        await eventually(all_succeeded, timeout=120, interval=0.1)

    assert most_claims <= 2, at_most  # never more devices allocated than the node has
    first, later = sorted(bound.values())[:2], sorted(bound.values())[2:]
    assert len(later) == 2
    # The two pods that had to wait were unschedulable at least once (both devices were taken), so
    # their next try had to come from a release: a backoff retry could not come before 600 s.
    assert released, "no claim release was seen"
    waits = [t - max(r for r in released if r <= t) for t in later]
    assert all(w < BACKOFF / 10 for w in waits), waits
    assert max(first) < min(later)


def _summary(claim: dict[str, Any]) -> dict[str, object]:
    status = claim.get("status") or {}
    return {
        "name": claim["metadata"]["name"],
        "deleting": bool(claim["metadata"].get("deletionTimestamp")),
        "devices": [r["device"] for r in status["allocation"]["devices"]["results"]],
        "reserved": [r.get("name") for r in status.get("reservedFor") or ()],
    }
