"""Device plugin → DRA on a live node, the leader's side, on the real control plane (kube-apiserver,
kube-controller-manager, kube-scheduler 1.37.2, kwok nodes): a pod that got a device from the
device plugin runs on a node whose DRA driver now publishes the same devices.

* Until its devices are adopted, draxr allocates none of the class's devices on that node (a
  true FailedScheduling reason), so none can go twice.
* Once the node's DevicePluginRecord names the pod's device ID, draxr writes the adoption claim:
  allocated with exactly that device, reserved for the record, left alone by
  kube-controller-manager. New pods, from draxr and from kube-scheduler, fill the node with the
  other devices only.
* The pod ends: its claim goes at once and the device is handed out.

draxr runs as the session operator with the manifests' ServiceAccount (devicepluginrecords
list/watch, claims create/delete and status: RBAC is exercised).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from draxr import kubectl_plugin
from draxr.core.migration import ADOPTION_LABEL, FENCE_KEY, FENCE_NODE_ANNOTATION, ID_ATTRIBUTE_ANNOTATION
from draxr.core.plugins.dynamic_resources import NOT_ADOPTED
from draxr.kube import EVENTS, PODS, RESOURCE_CLAIMS, Kube
from draxr.migrator import DEVICE_TAINT_RULES, FENCE_SELECTOR, RECORDS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane
from draxr_dev.devcluster.records import fake_record

from . import manifests
from .helpers import SCHEDULER, eventually, pod

JSON = dict[str, Any]
CRD = Path(__file__).resolve().parents[2] / "crds" / "devicepluginrecords.draxr.io.yaml"
TAINT = "draxr.io/migration-test"


@pytest.fixture(scope="module")
def record_crd(control_plane: ControlPlane) -> None:
    out = manifests.kubectl(control_plane, "apply", "-f", str(CRD))
    assert out.returncode == 0, out.stderr
    done = manifests.kubectl(
        control_plane, "wait", "--for=condition=Established", "crd/devicepluginrecords.draxr.io", "--timeout=60s"
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture
async def migrating(kube: Kube, names: str, record_crd: None) -> AsyncIterator[tuple[fakedriver.Fleet, str, str]]:
    """One DRA node of 4 devices whose class declares the device plugin's identity (``uuid``)."""
    prefix = names[:40]
    cls, ext = f"{prefix}-gpu", f"{prefix}.example.com/gpu"
    fleet = fakedriver.Fleet(
        prefix=prefix,
        dra_nodes=1,
        devices_per_node=4,
        driver=f"{prefix}.example.com",
        classes={cls: ext},
        node_taints=[{"key": TAINT, "value": prefix, "effect": "NoSchedule"}],
    )
    objs = fleet.manifests()
    for o in objs:
        if o["kind"] == "DeviceClass":
            o["metadata"].setdefault("annotations", {})[ID_ATTRIBUTE_ANNOTATION] = "uuid"
    await fakedriver.apply(kube, objs)
    await fakedriver.wait_nodes_ready(kube, fleet.node_names())
    yield fleet, cls, ext
    await kube.delete_if_exists(RECORDS, fleet.node_names()[0])
    await fakedriver.delete(kube, objs)


def device_uuid(node: str, index: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.gpu-{index}"))


def body(name: str, ext: str, count: int, scheduler: str, node: str = "") -> JSON:
    p = pod(name, {ext: str(count)}, scheduler=scheduler)
    p["spec"]["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    p["spec"]["terminationGracePeriodSeconds"] = 0
    if node:
        p["spec"]["nodeName"] = node  # what a device-plugin node ran before: no claim, no scheduler
    return p


def record(node: str, namespace: str, pod_name: str, ext: str, ids: list[str]) -> JSON:
    return fake_record(node, {(namespace, pod_name): {ext: ids}}, refresh_seconds=300)


async def devices_of(kube: Kube, namespace: str, pod_name: str) -> list[str] | None:
    p = await kube.get(PODS, pod_name, namespace)
    status = p.get("status", {}).get("extendedResourceClaimStatus")
    if not p["spec"].get("nodeName") or not status:
        return None
    claim = await kube.get(RESOURCE_CLAIMS, status["resourceClaimName"], namespace)
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return sorted(r["device"] for r in results) or None


async def adoption_claims(kube: Kube, namespace: str) -> list[JSON]:
    return [
        c
        for c in await kube.list(RESOURCE_CLAIMS, namespace)
        if (c["metadata"].get("labels") or {}).get(ADOPTION_LABEL)
    ]


async def allocated_adoption_claims(kube: Kube, namespace: str) -> list[JSON]:
    """(Created first, then their status written.)"""
    return [c for c in await adoption_claims(kube, namespace) if (c.get("status") or {}).get("allocation")]


@pytest.mark.timeout(300)
async def migration(control_plane: ControlPlane, node: str) -> JSON:
    """``kubectl draxr migration NODE -o json``, in-process."""
    out = await kubectl_plugin.run(["migration", node, "--kubeconfig", str(control_plane.kubeconfig), "-o", "json"])
    [found] = json.loads(out)
    return dict(found)


async def test_running_device_plugin_pods_keep_their_devices_through_the_move(
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    operator: object,
    migrating: tuple[fakedriver.Fleet, str, str],
) -> None:
    fleet, _, ext = migrating
    [node] = fleet.node_names()
    old = await kube.create(PODS, body("old", ext, 1, SCHEDULER, node=node), namespace)

    async def old_running() -> bool:
        return (await kube.get(PODS, "old", namespace)).get("status", {}).get("phase") == "Running"

    await eventually(old_running, timeout=60)

    # No record yet: draxr hands out none of the node's devices of the class.
    await kube.create(PODS, body("first", ext, 1, SCHEDULER), namespace)

    async def refused() -> list[str]:
        return [
            e["note"]
            for e in await kube.list(EVENTS, namespace)
            if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == "first" and NOT_ADOPTED in e["note"]
        ]

    notes = await eventually(refused, timeout=60)
    assert f"1 {NOT_ADOPTED}" in notes[0]
    before = await migration(control_plane, node)
    assert (before["safe"], before["record"]) == (False, "missing")
    assert before["pods"] == [{"pod": f"{namespace}/old", "resources": [ext], "adoptionClaim": ""}]

    # The node agent's record: "old" holds gpu-2.
    await kube.create(RECORDS, record(node, namespace, "old", ext, [device_uuid(node, 2)]))
    [claim] = await eventually(lambda: allocated_adoption_claims(kube, namespace), timeout=60)
    allocation = claim["status"]["allocation"]
    assert [(r["pool"], r["device"]) for r in allocation["devices"]["results"]] == [(node, "gpu-2")]
    assert claim["status"]["reservedFor"][0]["resource"] == "devicepluginrecords"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == old["metadata"]["uid"]
    after = await migration(control_plane, node)
    assert after["safe"] is True
    assert after["record"].startswith("fresh")
    assert after["pods"][0]["adoptionClaim"] == f"{namespace}/{claim['metadata']['name']}"

    # Now draxr places "first" and fills the node with the other devices, kube-scheduler too.
    # (One after the other: two schedulers allocating on one node at once can race each other.)
    taken = list(await eventually(lambda: devices_of(kube, namespace, "first"), timeout=60))
    for name, scheduler in (("second", SCHEDULER), ("by-kube-scheduler", "default-scheduler")):
        await kube.create(PODS, body(name, ext, 1, scheduler), namespace)
        taken += await eventually(lambda n=name: devices_of(kube, namespace, n), timeout=60)  # type: ignore[misc]
    assert sorted(taken) == ["gpu-0", "gpu-1", "gpu-3"]
    await kube.create(PODS, body("last", ext, 1, "default-scheduler"), namespace)
    await asyncio.sleep(10)  # kube-controller-manager had time to deallocate it, were it to
    [still] = await adoption_claims(kube, namespace)
    assert still["status"]["allocation"] == allocation
    assert await devices_of(kube, namespace, "last") is None  # nothing left but the adopted device

    # "old" ends: its claim goes, and its device is handed out.
    await kube.delete(PODS, "old", namespace, gracePeriodSeconds=0)

    async def released() -> bool:
        return not await adoption_claims(kube, namespace)

    await eventually(released, timeout=60)
    assert await eventually(lambda: devices_of(kube, namespace, "last"), timeout=90) == ["gpu-2"]


@pytest.mark.timeout(180)
async def test_an_id_that_matches_no_device_is_reported_never_guessed(
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    operator: object,
    migrating: tuple[fakedriver.Fleet, str, str],
) -> None:
    fleet, _, ext = migrating
    [node] = fleet.node_names()
    await kube.create(PODS, body("odd", ext, 1, SCHEDULER, node=node), namespace)
    await kube.create(RECORDS, record(node, namespace, "odd", ext, ["GPU-not-on-this-node::3"]))

    async def warned() -> list[JSON]:
        events = await kube.list(EVENTS, "default")
        return [e for e in events if e["reason"] == "DevicePluginIDUnmatched" and e["regarding"]["name"] == node]

    [event] = await eventually(warned, timeout=60)
    assert event["type"] == "Warning"
    assert f"device GPU-not-on-this-node on node {node} matches no device of DeviceClass" in event["note"]
    found = await migration(control_plane, node)
    assert found["safe"] is False
    assert [u["deviceID"] for u in found["unmatched"]] == ["GPU-not-on-this-node"]
    assert found["pods"] == [{"pod": f"{namespace}/odd", "resources": [ext], "adoptionClaim": ""}]
    assert await adoption_claims(kube, namespace) == []


async def fence_rules(kube: Kube, node: str) -> list[JSON]:
    """draxr's DeviceTaintRules over the devices of ``node``."""
    rules = await kube.list(DEVICE_TAINT_RULES, labelSelector=FENCE_SELECTOR)
    return [r for r in rules if r["metadata"]["annotations"][FENCE_NODE_ANNOTATION] == node]


async def node_events(kube: Kube, node: str, reason: str) -> list[JSON]:
    return [e for e in await kube.list(EVENTS, "default") if e["reason"] == reason and e["regarding"]["name"] == node]


@pytest.mark.timeout(300)
async def test_a_node_not_yet_safe_is_fenced_so_that_kube_scheduler_hands_out_none_of_its_devices(
    kube: Kube,
    control_plane: ControlPlane,
    namespace: str,
    operator: object,
    migrating: tuple[fakedriver.Fleet, str, str],
) -> None:
    """Issue 39: without a record, draxr held back its own pods but kube-scheduler gave a device the
    running device-plugin pod holds to a new pod. Now, while the pod is not adopted, draxr's
    DeviceTaintRules taint every device of the class on the node (it cannot tell which the pod
    holds) and kube-scheduler's pod waits; once the record comes and the pod is adopted, the rules
    go and kube-scheduler's pod gets a device the old pod does not hold."""
    fleet, _, ext = migrating
    [node] = fleet.node_names()
    await kube.create(PODS, body("old", ext, 1, SCHEDULER, node=node), namespace)

    async def fenced() -> list[JSON]:
        rules = await fence_rules(kube, node)
        return rules if len(rules) == 4 else []

    rules = await eventually(fenced, timeout=60)
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in rules) == [f"gpu-{i}" for i in range(4)]
    for r in rules:
        assert r["spec"]["taint"]["key"] == FENCE_KEY
        assert r["spec"]["taint"]["effect"] == "NoSchedule"
        assert r["spec"]["deviceSelector"]["pool"] == node
        assert r["metadata"]["name"].startswith(f"draxr-fence-{node}-gpu-")
        assert r["metadata"]["ownerReferences"][0]["kind"] == "Node"
    [event] = await eventually(lambda: node_events(kube, node, "DevicesFenced"), timeout=60)
    assert event["type"] == "Warning"
    assert "no DevicePluginRecord" in event["note"]
    seen = await migration(control_plane, node)
    assert seen["safe"] is False
    assert seen["fence"]["served"] is True
    assert sorted(seen["fence"]["rules"]) == sorted(r["metadata"]["name"] for r in rules)
    written = {r["metadata"]["uid"] for r in rules}

    # kube-scheduler's pod: no device it may take on the node.
    await kube.create(PODS, body("by-kube-scheduler", ext, 1, "default-scheduler"), namespace)

    async def refused() -> list[str]:
        return [
            e["note"]
            for e in await kube.list(EVENTS, namespace)
            if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == "by-kube-scheduler"
        ]

    await eventually(refused, timeout=60)
    assert await devices_of(kube, namespace, "by-kube-scheduler") is None
    assert {r["metadata"]["uid"] for r in await fence_rules(kube, node)} == written  # written once

    # The record: "old" holds gpu-2. Adopted, the node is safe, the fence goes.
    await kube.create(RECORDS, record(node, namespace, "old", ext, [device_uuid(node, 2)]))
    await eventually(lambda: allocated_adoption_claims(kube, namespace), timeout=60)

    async def lifted() -> bool:
        return not await fence_rules(kube, node)

    await eventually(lifted, timeout=60)
    [event] = await eventually(lambda: node_events(kube, node, "FenceLifted"), timeout=60)
    assert event["type"] == "Normal"
    got = await eventually(lambda: devices_of(kube, namespace, "by-kube-scheduler"), timeout=120)
    assert len(got) == 1
    assert got != ["gpu-2"]
    assert (await migration(control_plane, node))["fence"]["rules"] == []
