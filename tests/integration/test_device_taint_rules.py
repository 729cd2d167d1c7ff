"""An admin's DeviceTaintRule (resource.k8s.io/v1, Kubernetes 1.37) keeps draxr's pods off the
devices it selects exactly as it keeps kube-scheduler's: the same pods through both schedulers on
the same node, and a claim whose request tolerates the taint gets the device.

draxr runs as the session operator with the manifests' ServiceAccount, so its watch of
devicetaintrules exercises the ClusterRole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from draxr.kube import EVENTS, PODS, RESOURCE_CLAIMS, Kube
from draxr.migrator import DEVICE_TAINT_RULES
from draxr_dev.devcluster import fakedriver

from .helpers import SCHEDULER, eventually, exact_request, pod

JSON = dict[str, Any]
NODE_TAINT = "draxr.io/taint-rule-test"  # keeps other tests' pods off the node
BROKEN = "example.com/broken"


@pytest.fixture
async def one_node(kube: Kube, names: str) -> AsyncIterator[tuple[fakedriver.Fleet, str, str]]:
    """One DRA node of 3 devices (gpu-0 .. gpu-2) that only this test's pods tolerate."""
    prefix = names[:40]
    cls, ext = f"{prefix}-gpu", f"{prefix}.example.com/gpu"
    fleet = fakedriver.Fleet(
        prefix=prefix,
        dra_nodes=1,
        devices_per_node=3,
        driver=f"{prefix}.example.com",
        classes={cls: ext},
        node_taints=[{"key": NODE_TAINT, "value": prefix, "effect": "NoSchedule"}],
    )
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    yield fleet, cls, ext
    await fakedriver.delete(kube, objs)


def tolerating(body: JSON) -> JSON:
    body["spec"]["tolerations"] = [{"key": NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    body["spec"]["terminationGracePeriodSeconds"] = 0
    return body


def ext_pod(name: str, ext: str, scheduler: str) -> JSON:
    return tolerating(pod(name, {ext: "1"}, scheduler=scheduler))


def claim_pod(name: str, claim: str) -> JSON:
    body = tolerating(pod(name, {}, scheduler=SCHEDULER))
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    container = body["spec"]["containers"][0]
    container["resources"] = {"claims": [{"name": "gpu"}]}
    return body


async def devices_of(kube: Kube, namespace: str, name: str, claim: str = "") -> list[str] | None:
    """The devices allocated to the pod (its special claim, or its own claim ``claim``) once bound."""
    p = await kube.get(PODS, name, namespace)
    if not p["spec"].get("nodeName"):
        return None
    if not claim:
        status = p.get("status", {}).get("extendedResourceClaimStatus")
        if not status:
            return None
        claim = status["resourceClaimName"]
    got = await kube.get(RESOURCE_CLAIMS, claim, namespace)
    results = ((got.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return sorted(r["device"] for r in results) or None


async def refused(kube: Kube, namespace: str, name: str) -> list[str]:
    return [
        e.get("note") or ""
        for e in await kube.list(EVENTS, namespace)
        if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == name
    ]


@pytest.mark.timeout(300)
async def test_an_admins_device_taint_rule_keeps_draxrs_pods_off_the_device_as_kube_schedulers(
    kube: Kube,
    namespace: str,
    names: str,
    operator: object,
    one_node: tuple[fakedriver.Fleet, str, str],
) -> None:
    fleet, cls, ext = one_node
    [node] = fleet.node_names()
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"{names}-broken"},
        "spec": {
            "deviceSelector": {"driver": fleet.driver, "pool": node, "device": "gpu-0"},
            "taint": {"key": BROKEN, "value": "fan", "effect": "NoSchedule"},
        },
    }
    await kube.create(DEVICE_TAINT_RULES, rule)
    try:
        # draxr first: without the rule its allocator would take gpu-0, the first free device.
        await kube.create(PODS, ext_pod("by-draxr", ext, SCHEDULER), namespace)
        mine = await eventually(lambda: devices_of(kube, namespace, "by-draxr"), timeout=60)
        await kube.create(PODS, ext_pod("by-kube-scheduler", ext, "default-scheduler"), namespace)
        theirs = await eventually(lambda: devices_of(kube, namespace, "by-kube-scheduler"), timeout=60)
        assert len(mine) == len(theirs) == 1
        assert sorted(mine + theirs) == ["gpu-1", "gpu-2"]

        # Only the tainted gpu-0 is free now: neither scheduler hands it out.
        await kube.create(PODS, ext_pod("by-draxr-2", ext, SCHEDULER), namespace)
        await kube.create(PODS, ext_pod("by-kube-scheduler-2", ext, "default-scheduler"), namespace)
        for name in ("by-draxr-2", "by-kube-scheduler-2"):
            notes = await eventually(lambda name=name: refused(kube, namespace, name), timeout=60)
            assert any("cannot allocate all claims" in note for note in notes), notes

        # A claim whose request tolerates the taint gets it (from draxr).
        request = exact_request("gpu", cls, 1)
        request["exactly"]["tolerations"] = [{"key": BROKEN, "operator": "Exists", "effect": "NoSchedule"}]
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "tolerant"},
            "spec": {"devices": {"requests": [request]}},
        }
        await kube.create(RESOURCE_CLAIMS, claim, namespace)
        await kube.create(PODS, claim_pod("tolerant", "tolerant"), namespace)
        got = await eventually(lambda: devices_of(kube, namespace, "tolerant", claim="tolerant"), timeout=60)
        assert got == ["gpu-0"]
        # The two refused pods were never bound (each has a FailedScheduling event and no node).
        for name in ("by-draxr-2", "by-kube-scheduler-2"):
            assert await devices_of(kube, namespace, name) is None
    finally:
        await kube.delete_if_exists(DEVICE_TAINT_RULES, rule["metadata"]["name"])
