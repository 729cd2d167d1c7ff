"""Devices reused on a real node, and a kubelet restart under a running pod.

- A Job of 4 one-device pods on a class of only 2 of the node's devices: all complete, no device is
  ever in two allocated claims, never more than 2 are allocated, and each waiting pod is bound as
  soon as a claim release frees a device. The operator here backs off for 600 s, so a retry that
  came from the backoff timer could not come within the test (kube-scheduler's
  SchedulerPopFromBackoffQ behaviour, see draxr.queue).
- kubelet restarted while a draxr pod runs: the pod keeps running and Succeeds, the plugin prepared
  its claim exactly once, and the claim stays allocated until the pod is done.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, Kube, Resource
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.realnode import RealNode

from ..integration.embedded import long_backoff_operator
from ..integration.helpers import bound_with_status, eventually
from .test_kubelet_runs_pods import container, node_pod

JOBS = Resource("batch", "v1", "jobs", True)
BACKOFF = 86_400.0  # a day: a pod bound within the test was woken by an event, never by its backoff
SCHEDULER = "draxr-real-long-backoff"
PAIR_CLASS = "draxr-real-pair"
PAIR_RESOURCE = "draxr.dev/real-pair"
JSON = dict[str, Any]


@pytest.fixture(scope="module")
async def long_backoff(control_plane: ControlPlane) -> AsyncIterator[tuple[Kube, Operator]]:
    async with long_backoff_operator(str(control_plane.kubeconfig), SCHEDULER, BACKOFF) as running:
        yield running


@pytest.fixture
async def pair_class(kube: Kube, real_node: RealNode) -> AsyncIterator[str]:
    """A DeviceClass of the node's first two devices, served as an extended resource."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": PAIR_CLASS},
        "spec": {
            "extendedResourceName": PAIR_RESOURCE,
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{realnode.DRIVER}" && '
                        f'device.attributes["{realnode.DRIVER}"].index < 2'
                    }
                }
            ],
        },
    }
    await kube.create(DEVICE_CLASSES, body)
    yield PAIR_RESOURCE
    await kube.delete_if_exists(DEVICE_CLASSES, PAIR_CLASS)


def _allocated(claims: list[JSON]) -> dict[str, list[str]]:
    out = {}
    for c in claims:
        allocation = (c.get("status") or {}).get("allocation")
        if allocation:
            out[c["metadata"]["name"]] = [r["device"] for r in allocation["devices"]["results"]]
    return out


async def test_a_job_reuses_two_devices_and_waiting_pods_follow_each_release(
    long_backoff: tuple[Kube, Operator], kube: Kube, namespace: str, pair_class: str
) -> None:
    template = node_pod("unused", [container("main", 0, "env | sort; sleep 2")], scheduler=SCHEDULER)
    template["spec"]["containers"][0]["resources"] = {"limits": {pair_class: "1"}}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "four"},
        "spec": {
            "completions": 4,
            "parallelism": 4,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"job": "four"}}, "spec": template["spec"]},
        },
    }
    await kube.create(JOBS, job, namespace)
    bound: dict[str, float] = {}
    released: list[float] = []
    previous: dict[str, list[str]] = {}
    most = 0
    shared: list[dict[str, list[str]]] = []  # moments when a device was in two allocated claims

    async def done() -> bool:
        nonlocal previous, most
        now = time.monotonic()
        allocated = _allocated(await kube.list(RESOURCE_CLAIMS, namespace))
        released.extend(now for _ in previous.keys() - allocated.keys())
        previous = allocated
        most = max(most, len(allocated))
        devices = [d for ds in allocated.values() for d in ds]
        if len(devices) != len(set(devices)):
            shared.append(allocated)
        for p in await kube.list(PODS, namespace):
            if p["spec"].get("nodeName"):
                bound.setdefault(p["metadata"]["name"], now)
        j = await kube.get(JOBS, "four", namespace)
        return (j.get("status") or {}).get("succeeded") == 4

    await eventually(done, timeout=240, interval=0.1)
    assert shared == []
    assert most == 2  # both devices were used at once, never more
    assert len(bound) == 4
    later = sorted(bound.values())[2:]
    waits = [t - max((r for r in released if r <= t), default=float("-inf")) for t in later]
    # Each waiting pod was bound after a release (and, with a day's backoff, because of it).
    assert all(w >= 0 for w in waits), (waits, released, bound)
    print(f"\n[draxr] release -> bind of the waiting pods: {', '.join(f'{w:.2f}s' for w in waits)}")


async def test_kubelet_restart_keeps_a_running_pods_devices(
    operator: Operator, kube: Kube, namespace: str, real_node: RealNode, tmp_path: Path
) -> None:
    # The container runs until the test creates /signal/finish (a hostPath of the test's directory),
    # after the restart: not a sleep that must outlast it.
    signal_dir = tmp_path / "signal"
    signal_dir.mkdir()
    body = node_pod("survivor", [container("main", 1, "env | sort; while [ ! -e /signal/finish ]; do sleep 1; done")])
    body["spec"]["volumes"] = [{"name": "signal", "hostPath": {"path": str(signal_dir), "type": "Directory"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "signal", "mountPath": "/signal"}]
    await kube.create(PODS, body, namespace)
    pod = await eventually(lambda: bound_with_status(kube, "survivor", namespace))
    claim_name = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

    async def running() -> bool:
        p = await kube.get(PODS, "survivor", namespace)
        return p["status"].get("phase") == "Running"

    await eventually(running, timeout=60)
    claim = await kube.get(RESOURCE_CLAIMS, claim_name, namespace)
    uid = claim["metadata"]["uid"]
    real_node.restart_kubelet()
    after = await kube.get(RESOURCE_CLAIMS, claim_name, namespace)
    assert after["status"]["allocation"] == claim["status"]["allocation"]  # still allocated, unchanged
    assert (await kube.get(PODS, "survivor", namespace))["status"]["phase"] == "Running"
    (signal_dir / "finish").touch()

    async def finished() -> JSON | None:
        p = await kube.get(PODS, "survivor", namespace)
        return p if p["status"].get("phase") in ("Succeeded", "Failed") else None

    final = await eventually(finished, timeout=120)
    assert final["status"]["phase"] == "Succeeded", final["status"]
    restarts = [s.get("restartCount", 0) for s in final["status"]["containerStatuses"]]
    assert restarts == [0]  # the same container ran through the restart

    async def unprepared() -> bool:
        return any(e["event"] == "unprepare" and e["claim"]["uid"] == uid for e in real_node.plugin_events())

    await eventually(unprepared, timeout=60)
    prepared = [e for e in real_node.plugin_events() if e["event"] == "prepare" and e["claim"]["uid"] == uid]
    assert len(prepared) == 1, prepared  # kubelet's checkpoint: not prepared again after its restart
