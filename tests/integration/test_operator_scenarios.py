"""Operator scenarios beyond the happy path (issue: the operator; contract §7)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import DEVICE_CLASSES, EVENTS, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_QUOTAS, ApiException, Kube
from draxr_dev.devcluster import fakedriver

from .helpers import SCHEDULER, bound_with_status, claims_in, eventually, exact_request, pod, special_claim


def _fleet(names: str, **kw: Any) -> fakedriver.Fleet:
    kw.setdefault("classes", {f"{names}-gpu": f"{names}.example.com/gpu"})
    return fakedriver.Fleet(prefix=names, driver=f"{names}.example.com", **kw)


async def _condition(kube: Kube, name: str, namespace: str) -> dict[str, Any] | None:
    p = await kube.get(PODS, name, namespace)
    for c in p.get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return dict(c)
    return None


async def test_device_plugin_node_gets_no_claim_dra_node_gets_devices(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(
        names, dra_nodes=1, device_plugin_nodes=1, devices_per_node=4, device_plugin_resource=f"{names}.example.com/gpu"
    )
    async with fakedriver.deployed(kube, fleet):
        dra_node, dp_node = fleet.node_names()
        ext = f"{names}.example.com/gpu"
        for name, node in (("on-dp", dp_node), ("on-dra", dra_node)):
            body = pod(name, {ext: "2"}, scheduler=SCHEDULER)
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            await kube.create(PODS, body, namespace)

        async def dp_bound() -> dict[str, Any] | None:
            p = await kube.get(PODS, "on-dp", namespace)
            return p if p["spec"].get("nodeName") else None

        on_dp = await eventually(dp_bound)
        on_dra = await eventually(lambda: bound_with_status(kube, "on-dra", namespace))
        assert on_dp["spec"]["nodeName"] == dp_node
        assert "extendedResourceClaimStatus" not in on_dp["status"]
        assert on_dra["spec"]["nodeName"] == dra_node
        [claim] = await claims_in(kube, namespace)
        assert claim["metadata"]["ownerReferences"][0]["name"] == "on-dra"


async def test_more_than_32_devices_is_unschedulable_with_a_clear_reason(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=4)
    async with fakedriver.deployed(kube, fleet):  # Ready: the 32-device limit is the node's only reason
        await kube.create(PODS, pod("huge", {f"{names}.example.com/gpu": "33"}, scheduler=SCHEDULER), namespace)
        cond = await eventually(lambda: _condition(kube, "huge", namespace))
        assert cond["reason"] == "Unschedulable"
        assert "33 devices, more than the 32 allowed in one claim" in cond["message"]
        assert not await claims_in(kube, namespace)


async def test_invalid_cel_in_one_class_does_not_stop_other_pods(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    broken = fakedriver.device_class(
        f"{names}-broken",
        driver=f"{names}.example.com",
        extended_resource_name=f"{names}.example.com/broken",
        extra_selectors=['device.attributes["' + names + '.example.com"].doesNotExist == "x"'],
    )
    fleet = _fleet(names, dra_nodes=1, devices_per_node=2)
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    await kube.create(DEVICE_CLASSES, broken)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("bad", {f"{names}.example.com/broken": "1"}, scheduler=SCHEDULER), namespace)
        await kube.create(PODS, pod("good", {f"{names}.example.com/gpu": "1"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: bound_with_status(kube, "good", namespace))
        cond = await eventually(lambda: _condition(kube, "bad", namespace))
        assert "doesNotExist" in cond["message"]

        async def warning() -> list[dict[str, Any]]:
            # (An attempt before draxr saw the node lose its not-ready taint says so, truly.)
            return [
                e
                for e in await kube.list(EVENTS, namespace)
                if e["regarding"]["name"] == "bad"
                and e["reason"] == "FailedScheduling"
                and e["type"] == "Warning"
                and "no such key: doesNotExist" in e["note"]
            ]

        await eventually(warning)
    finally:
        await kube.delete_if_exists(DEVICE_CLASSES, f"{names}-broken")
        await fakedriver.delete(kube, objs)


async def test_stale_claim_of_an_earlier_attempt_is_rolled_back_not_reused(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=2)
    async with fakedriver.deployed(kube, fleet):
        ext, cls = f"{names}.example.com/gpu", f"{names}-gpu"
        # A scheduling gate holds the pod while the stale claim (as a crashed attempt leaves it) is planted.
        body = pod("p", {ext: "1"}, scheduler=SCHEDULER)
        body["spec"]["schedulingGates"] = [{"name": "draxr.io/test-hold"}]
        created = await kube.create(PODS, body, namespace)
        stale = await kube.create(
            RESOURCE_CLAIMS, special_claim(created, [exact_request("container-0-request-0", cls, 1)]), namespace
        )
        await kube.patch(PODS, "p", {"spec": {"schedulingGates": None}}, namespace)
        bound = await eventually(lambda: bound_with_status(kube, "p", namespace))
        used = bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        assert used != stale["metadata"]["name"]

        async def only_used_left() -> bool:
            return [c["metadata"]["name"] for c in await claims_in(kube, namespace)] == [used]

        assert await eventually(only_used_left) is True


async def test_quota_on_extended_and_class_keys_does_not_double_count_the_special_claim(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=4)
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    ext, cls = f"{names}.example.com/gpu", f"{names}-gpu"
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpus"},
        "spec": {"hard": {f"requests.{ext}": "2", f"{cls}.deviceclass.resource.k8s.io/devices": "2"}},
    }
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(RESOURCE_QUOTAS, quota, namespace)

        async def quota_ready() -> bool:
            q = await kube.get(RESOURCE_QUOTAS, "gpus", namespace)
            return bool(q.get("status", {}).get("hard"))

        await eventually(quota_ready)
        await kube.create(PODS, pod("two", {ext: "2"}, scheduler=SCHEDULER), namespace)
        bound = await eventually(lambda: bound_with_status(kube, "two", namespace))
        assert bound["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["resourceName"] == ext

        async def used() -> dict[str, str] | None:
            q = await kube.get(RESOURCE_QUOTAS, "gpus", namespace)
            u = q.get("status", {}).get("used", {})
            return u if u.get(f"{cls}.deviceclass.resource.k8s.io/devices") == "2" else None

        usage = await eventually(used)
        assert usage[f"requests.{ext}"] == "2"  # the pod pays; the claim is not charged again
        # The quota is full: one more device is refused at pod admission.
        with pytest.raises(ApiException) as err:
            await kube.create(PODS, pod("one-more", {ext: "1"}, scheduler=SCHEDULER), namespace)
        assert err.value.status == 403
        assert "exceeded quota" in err.value.body
    finally:
        await fakedriver.delete(kube, objs)


async def test_pods_deleted_while_being_scheduled_leave_no_claim(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=2, devices_per_node=4)
    async with fakedriver.deployed(kube, fleet):
        ext = f"{names}.example.com/gpu"
        for i in range(8):
            await kube.create(PODS, pod(f"short-{i}", {ext: "1"}, scheduler=SCHEDULER), namespace)
            if i % 2:
                await asyncio.sleep(0.05 * i)
            await kube.delete(PODS, f"short-{i}", namespace, gracePeriodSeconds=0)

        async def clean() -> bool:
            return not await claims_in(kube, namespace) and not await kube.list(PODS, namespace)

        assert await eventually(clean, timeout=60) is True
        # Every device is free again: a pod wanting all 4 devices of a node fits.
        await kube.create(PODS, pod("all", {ext: "4"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: bound_with_status(kube, "all", namespace))


async def test_pending_pod_is_scheduled_when_a_node_appears(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=2)
    objs = fleet.manifests()
    node_obj = next(o for o in objs if o["kind"] == "Node")
    await fakedriver.apply(kube, [o for o in objs if o["kind"] != "Node"])
    try:
        await kube.create(PODS, pod("waits", {f"{names}.example.com/gpu": "1"}, scheduler=SCHEDULER), namespace)
        cond = await eventually(lambda: _condition(kube, "waits", namespace))
        assert cond["reason"] == "Unschedulable"
        assert not await claims_in(kube, namespace)
        await fakedriver.apply(kube, [node_obj])
        bound = await eventually(lambda: bound_with_status(kube, "waits", namespace))
        assert bound["spec"]["nodeName"] == node_obj["metadata"]["name"]
    finally:
        await fakedriver.delete(kube, objs)


async def test_node_deleted_then_its_devices_are_not_used(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=2)
    async with fakedriver.deployed(kube, fleet):
        await kube.delete(NODES, fleet.node_names()[0])

        async def deletion_seen() -> bool:  # the watch delivered it
            return fleet.node_names()[0] not in operator.state.nodes

        await eventually(deletion_seen)
        await kube.create(PODS, pod("orphan", {f"{names}.example.com/gpu": "1"}, scheduler=SCHEDULER), namespace)
        cond = await eventually(lambda: _condition(kube, "orphan", namespace))
        assert cond["reason"] == "Unschedulable"
        assert not await claims_in(kube, namespace)


async def test_slice_generation_bump_while_pod_is_queued(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    fleet = _fleet(names, dra_nodes=1, devices_per_node=2)
    async with fakedriver.deployed(kube, fleet) as objs:
        ext = f"{names}.example.com/gpu"
        await kube.create(PODS, pod("big", {ext: "3"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: _condition(kube, "big", namespace))
        # The driver republishes the pool with a new generation and four devices.
        [slice_obj] = [o for o in objs if o["kind"] == "ResourceSlice"]
        node = fleet.node_names()[0]
        bigger = fakedriver.resource_slice(
            node,
            [fakedriver.device(f"gpu-{i}") for i in range(4)],
            driver=fleet.driver,
            generation=2,
            name=slice_obj["metadata"]["name"],
        )
        await fakedriver.apply(kube, [bigger])
        bound = await eventually(lambda: bound_with_status(kube, "big", namespace))
        [claim] = await claims_in(kube, namespace)
        results = claim["status"]["allocation"]["devices"]["results"]
        assert [r["device"] for r in results] == ["gpu-0", "gpu-1", "gpu-2"]
        assert bound["spec"]["nodeName"] == node


async def test_explicit_name_newest_class_wins_and_moving_the_name(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    """Two classes declare one name: the newer wins. Clearing it on the newer class moves the name back
    to the older one at once (upstream's incremental cache would leave it unmapped)."""
    ext = f"{names}.example.com/gpu"
    fleet = _fleet(names, dra_nodes=1, devices_per_node=4, classes={})
    objs = fleet.manifests()
    # Two classes over the same driver, told apart by the numa attribute of the devices.
    old = fakedriver.device_class(
        f"{names}-numa0",
        driver=fleet.driver,
        extended_resource_name=ext,
        extra_selectors=[f'device.attributes["{fleet.driver}"].numa == 0'],
    )
    new = fakedriver.device_class(
        f"{names}-numa1",
        driver=fleet.driver,
        extended_resource_name=ext,
        extra_selectors=[f'device.attributes["{fleet.driver}"].numa == 1'],
    )
    await fakedriver.apply(kube, objs)
    await kube.create(DEVICE_CLASSES, old)
    await asyncio.sleep(1.1)  # creationTimestamp has second precision
    await kube.create(DEVICE_CLASSES, new)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())

        async def devices_of(pod_name: str) -> list[str]:
            bound = await eventually(lambda: bound_with_status(kube, pod_name, namespace))
            claims = {c["metadata"]["name"]: c for c in await claims_in(kube, namespace)}
            claim = claims[bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
            assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] in (
                old["metadata"]["name"],
                new["metadata"]["name"],
            )
            return [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]]

        await kube.create(PODS, pod("first", {ext: "1"}, scheduler=SCHEDULER), namespace)
        assert await devices_of("first") == ["gpu-2"]  # numa 1: the newer class

        current = await kube.get(DEVICE_CLASSES, new["metadata"]["name"])
        del current["spec"]["extendedResourceName"]
        await kube.replace(DEVICE_CLASSES, current)

        async def moved() -> bool:  # the operator's mapping has seen the class change
            return operator.state.mapping.class_for(ext) == old["metadata"]["name"]

        await eventually(moved)
        await kube.create(PODS, pod("second", {ext: "1"}, scheduler=SCHEDULER), namespace)
        assert await devices_of("second") == ["gpu-0"]  # numa 0: the name moved to the older class
    finally:
        for c in (old, new):
            await kube.delete_if_exists(DEVICE_CLASSES, c["metadata"]["name"])
        await fakedriver.delete(kube, objs)


async def test_pod_whose_template_claim_is_missing_is_reported_loudly(
    kube: Kube, operator: Operator, namespace: str, names: str
) -> None:
    """The template does not exist, so kube-controller-manager makes no claim: DynamicResources'
    words, in the condition and a Warning event."""
    body = pod("mixed", {f"{names}.example.com/gpu": "1"}, scheduler=SCHEDULER)
    body["spec"]["resourceClaims"] = [{"name": "extra", "resourceClaimTemplateName": "some-template"}]
    await kube.create(PODS, body, namespace)
    cond = await eventually(lambda: _condition(kube, "mixed", namespace))
    assert f'pod "{namespace}/mixed": ResourceClaim not created yet' in cond["message"], cond

    async def event() -> list[dict[str, Any]]:
        return [e for e in await kube.list(EVENTS, namespace) if e["reason"] == "FailedScheduling"]

    [ev] = await eventually(event)
    assert ev["type"] == "Warning"
    assert ev["reportingController"] == SCHEDULER
    assert "ResourceClaim not created yet" in ev["note"]
