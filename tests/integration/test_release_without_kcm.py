"""Claim release (kubernetes#134311) when kube-controller-manager's resourceclaim controller is off:
draxr alone frees the devices. (With the controller on, the session cluster covers it.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
from prometheus_client import REGISTRY

from draxr.app import Operator
from draxr.devcluster import fakedriver
from draxr.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, Options
from draxr.kube import NAMESPACES, PODS, RESOURCE_CLAIMS, Kube
from draxr.settings import Settings

from .clusters import extra_control_plane
from .embedded import embedded_operator
from .test_platform import eventually, pod

NO_CLAIM_CONTROLLER = "*,-resourceclaim-controller"


@pytest.fixture(scope="module")
def bare_cluster() -> Iterator[ControlPlane]:
    with extra_control_plane("noclaimctl", Options(kwok=True, kcm_controllers=NO_CLAIM_CONTROLLER)) as cp:
        yield cp


@pytest.fixture(scope="module")
async def bare(bare_cluster: ControlPlane) -> AsyncIterator[tuple[Kube, Operator]]:
    settings = Settings(
        kubeconfig=str(bare_cluster.kubeconfig),
        metrics_port=0,
        health_port=0,
        backoff_initial_seconds=0.2,
        release_sweep_seconds=5,
        log_format="console",
    )
    async with embedded_operator(settings) as running:
        yield running


def _errors(operation: str) -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "draxr_api_errors":
            total += sum(
                s.value for s in metric.samples if s.labels.get("operation") == operation and s.name.endswith("_total")
            )
    return total


async def _run_to_completion(kube: Kube, namespace: str, scheduler: str = "draxr") -> tuple[str, list[str]]:
    """A pod that holds two devices for 2 s; returns its claim name and the claims left afterwards."""
    fleet = fakedriver.Fleet(
        prefix=namespace,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{namespace}.example.com",
        classes={f"{namespace}-gpu": f"{namespace}.example.com/gpu"},
    )
    async with fakedriver.deployed(kube, fleet):
        body = pod(
            "job", {f"{namespace}.example.com/gpu": "2"}, scheduler=scheduler, annotations={RUN_FOR_ANNOTATION: "2s"}
        )
        await kube.create(PODS, body, namespace)

        async def claim_name() -> str | None:
            p = await kube.get(PODS, "job", namespace)
            return (p.get("status", {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")

        name = await eventually(claim_name)

        async def finished_and_released() -> bool:
            p = await kube.get(PODS, "job", namespace)
            left = [c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, namespace)]
            return p["status"].get("phase") == "Succeeded" and name not in left

        await eventually(finished_and_released, timeout=60)
        return name, [c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, namespace)]


async def test_draxr_releases_claims_without_the_kcm_controller(
    bare: tuple[Kube, Operator], bare_cluster: ControlPlane, names: str
) -> None:
    kube, _ = bare
    assert "Starting resource claim controller" not in bare_cluster.log_path("kube-controller-manager").read_text()
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    _, left = await _run_to_completion(kube, names)
    assert left == []
    # The pod object is still there (Succeeded): nothing but draxr released the claim.
    assert (await kube.get(PODS, "job", names))["status"]["phase"] == "Succeeded"


async def test_release_races_the_kcm_controller_without_errors(kube: Kube, operator: Operator, namespace: str) -> None:
    before = _errors("claim-release")
    _, left = await _run_to_completion(kube, namespace)
    assert left == []
    await asyncio.sleep(6)  # one more sweep: nothing left to do, nothing retried
    assert _errors("claim-release") == before
