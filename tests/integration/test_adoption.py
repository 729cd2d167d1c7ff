"""Adoption mode: default-scheduler pods that a kube-scheduler without DRAExtendedResource gave up on.

Refused on the session's 1.37 cluster (kube-scheduler schedules these pods in-tree there). Tested on a
Kubernetes 1.35.4 control plane with the gate on in kube-apiserver and kube-controller-manager and
off in kube-scheduler (its default in 1.35): the cluster the mode exists for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from draxr.app import AdoptionRefused, Operator, connect
from draxr.core.steering import unschedulable_by_default_scheduler
from draxr.kube import EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS, Kube
from draxr.settings import Settings
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane, Options

from .clusters import extra_control_plane
from .embedded import embedded_operator, fast_settings
from .helpers import eventually

K8S_1_35 = "v1.35.4"


async def test_adoption_is_refused_where_kube_scheduler_owns_these_pods(control_plane: ControlPlane) -> None:
    settings = Settings(
        kubeconfig=str(control_plane.kubeconfig), adopt_unschedulable=True, metrics_port=0, health_port=0
    )
    kube, cfg = await connect(settings)
    try:
        with pytest.raises(AdoptionRefused) as refused:
            await Operator(settings, kube, cfg).run(asyncio.Event())
    finally:
        await kube.close()
    message = str(refused.value)
    assert "--adopt-unschedulable refused" in message
    assert "v1.37" in message
    assert "schedulerName or the namespace label" in message


@pytest.fixture(scope="module")
def cluster_1_35() -> Iterator[ControlPlane]:
    gates = Options(scheduler=True, kwok=True, feature_gates="DRAExtendedResource=true", scheduler_feature_gates="")
    with extra_control_plane("1.35", gates, K8S_1_35) as cp:
        yield cp


@pytest.fixture(scope="module")
async def kube_1_35(cluster_1_35: ControlPlane) -> AsyncIterator[Kube]:
    async with await Kube.from_kubeconfig(cluster_1_35.kubeconfig) as k:
        version = await k.request("GET", "/version")
        assert version["minor"].startswith("35"), version
        yield k


@dataclass
class Adopting:
    kube: Kube
    fleet: fakedriver.Fleet
    resource: str
    namespace: str
    op: Operator


@pytest.fixture
async def adopting(cluster_1_35: ControlPlane, kube_1_35: Kube, names: str) -> AsyncIterator[Adopting]:
    """Two DRA nodes (2 devices each) and a class mapping ``<names>.example.com/gpu`` on the 1.35
    cluster, a namespace, and draxr in adoption mode."""
    kube = kube_1_35
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    [resource] = [r for r in fleet.classes.values() if r]
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    settings = fast_settings(
        kubeconfig=str(cluster_1_35.kubeconfig),
        adopt_unschedulable=True,
        leader_elect=False,
        backoff_max_seconds=2,
        unschedulable_flush_seconds=5,
    )
    try:
        async with fakedriver.deployed(kube, fleet), embedded_operator(settings) as (_, op):
            yield Adopting(kube, fleet, resource, names, op)
    finally:
        await kube.delete_if_exists(NAMESPACES, names)


def gpu_pod(name: str, resources: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {  # no schedulerName: the default scheduler's pod
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": resources}}],
        },
    }


async def test_adopts_pods_kube_scheduler_1_35_cannot_place(adopting: Adopting) -> None:
    kube, names, resource = adopting.kube, adopting.namespace, adopting.resource
    fleet, op = adopting.fleet, adopting.op
    adopted = await kube.create(PODS, gpu_pod("adopted", {resource: "1"}), names)
    unmapped = await kube.create(PODS, gpu_pod("unmapped", {"nvidia.com/gpu": "1"}), names)

    async def bound() -> dict[str, Any] | None:
        p = await kube.get(PODS, "adopted", names)
        ercs = (p.get("status") or {}).get("extendedResourceClaimStatus") or {}
        return p if p["spec"].get("nodeName") and ercs.get("resourceClaimName") else None

    p = await eventually(bound, timeout=90)
    assert p["spec"]["schedulerName"] == "default-scheduler"  # adopted, not renamed
    assert p["spec"]["nodeName"] in fleet.node_names()
    claim = await kube.get(RESOURCE_CLAIMS, p["status"]["extendedResourceClaimStatus"]["resourceClaimName"], names)
    assert claim["metadata"]["ownerReferences"][0]["uid"] == adopted["metadata"]["uid"]
    assert claim["status"]["allocation"]["devices"]["results"][0]["driver"] == fleet.driver
    assert p["status"]["extendedResourceClaimStatus"]["requestMappings"] == [
        {"containerName": "main", "resourceName": resource, "requestName": "container-0-request-0"}
    ]

    # kube-scheduler had tried first and given up: its FailedScheduling names the resource.
    async def kube_scheduler_gave_up() -> list[dict[str, Any]]:
        events = await kube.list(EVENTS, names, fieldSelector="regarding.name=adopted")
        return [
            e
            for e in events
            if e.get("reason") == "FailedScheduling" and e.get("reportingController") == "default-scheduler"
        ]

    [failed, *_] = await eventually(kube_scheduler_gave_up, timeout=30)
    assert f"Insufficient {resource}" in failed["note"]

    # A default-scheduler pod asking only for an unmapped (device-plugin) resource is not ours.
    async def marked() -> dict[str, Any] | None:
        p = await kube.get(PODS, "unmapped", names)
        return p if unschedulable_by_default_scheduler(p) else None

    given_up = int((await eventually(marked, timeout=30))["metadata"]["resourceVersion"])

    async def seen_by_draxr() -> bool:  # its watch delivered that version: the decision on it is made
        info = op.state.pods.get(unmapped["metadata"]["uid"])
        return info is not None and int(info.resource_version or 0) >= given_up

    await eventually(seen_by_draxr, timeout=30)
    still = await kube.get(PODS, "unmapped", names)
    assert not still["spec"].get("nodeName")
    assert unmapped["metadata"]["uid"] not in {
        (c["metadata"].get("ownerReferences") or [{}])[0].get("uid") for c in await kube.list(RESOURCE_CLAIMS, names)
    }
    assert op.scheduler.queue.known(unmapped["metadata"]["uid"]) is False


async def test_a_lost_binding_race_rolls_the_claim_back_and_clears_the_pod_status(adopting: Adopting) -> None:
    """kube-scheduler binds the pod between draxr's pod-status write and its Binding (forced here by
    binding it from the test at that moment): the Binding API refuses draxr's, and draxr deletes its
    claim and removes the extendedResourceClaimStatus it wrote."""
    kube, names, resource = adopting.kube, adopting.namespace, adopting.resource
    fleet, op = adopting.fleet, adopting.op
    binder = op.scheduler.binder
    real_patch = binder._patch_pod_status
    raced: list[str] = []

    async def patch_then_lose_the_race(pod: Any, claim_name: str, decision: Any) -> None:
        await real_patch(pod, claim_name, decision)
        if pod.name == "raced" and not raced:
            other = next(n for n in fleet.node_names() if n != decision.node)
            await kube.create(
                PODS,
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace},
                    "target": {"kind": "Node", "name": other},
                },
                pod.namespace,
                name=pod.name,
                subresource="binding",
            )
            raced.append(claim_name)

    binder._patch_pod_status = patch_then_lose_the_race  # type: ignore[method-assign]
    await kube.create(PODS, gpu_pod("raced", {resource: "1"}), names)

    async def rolled_back() -> dict[str, Any] | None:
        if not raced:
            return None
        claims = {c["metadata"]["name"] for c in await kube.list(RESOURCE_CLAIMS, names)}
        p = await kube.get(PODS, "raced", names)
        cleared = "extendedResourceClaimStatus" not in (p.get("status") or {})
        return p if raced[0] not in claims and cleared else None

    p = await eventually(rolled_back, timeout=90)
    assert p["spec"]["nodeName"]  # bound by "kube-scheduler", once
    assert not await kube.list(RESOURCE_CLAIMS, names)
