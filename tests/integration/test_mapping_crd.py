"""The ExtendedResourceMapping CRD (crds/): API validation, scheduling through a mapping CR (ordered
classes, precedence over DeviceClass.extendedResourceName, nodeSelector, selectors), conditions,
live capacity in status (and `kubectl get`), and `draxr capacity`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.kube import DEVICE_CLASSES, PODS, Kube, Resource
from draxr.mapping_status import MAPPINGS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import SCHEDULER, bound_with_status, eventually, pod
from .manifests import kubectl

CRD = Path(__file__).resolve().parents[2] / "crds" / "extendedresourcemappings.draxr.io.yaml"
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
CRD_NAME = "extendedresourcemappings.draxr.io"


@pytest.fixture(scope="module")
def crd(control_plane: ControlPlane) -> Iterator[None]:
    """The CRD applied with kubectl (left in place if it was there already, else deleted after)."""
    existed = kubectl(control_plane, "get", "crd", CRD_NAME).returncode == 0
    out = kubectl(control_plane, "apply", "-f", str(CRD))
    assert out.returncode == 0, out.stderr
    done = kubectl(control_plane, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    assert done.returncode == 0, done.stderr
    yield
    if not existed:
        kubectl(control_plane, "delete", "crd", CRD_NAME, "--ignore-not-found", "--wait=false")


def mapping(name: str, resource: str, classes: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "draxr.io/v1alpha1",
        "kind": "ExtendedResourceMapping",
        "metadata": {"name": name},
        "spec": {"extendedResourceName": resource, "deviceClassNames": classes, **spec},
    }


def numa_class(name: str, driver: str, numa: int) -> dict[str, Any]:
    return fakedriver.device_class(
        name, driver=driver, extra_selectors=[f'device.attributes["{driver}"].numa == {numa}']
    )


async def condition(kube: Kube, name: str, ctype: str) -> dict[str, Any] | None:
    obj = await kube.get(MAPPINGS, name)
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == ctype:
            return dict(c)
    return None


async def unschedulable(kube: Kube, name: str, namespace: str) -> str | None:
    p = await kube.get(PODS, name, namespace)
    for c in p.get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c["message"])
    return None


async def claim_of(kube: Kube, p: dict[str, Any]) -> dict[str, Any]:
    from draxr.kube import RESOURCE_CLAIMS

    name = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    return await kube.get(RESOURCE_CLAIMS, name, p["metadata"]["namespace"])


async def test_invalid_mappings_are_rejected_with_actionable_messages(control_plane: ControlPlane, crd: None) -> None:
    cases = [
        ({"extendedResourceName": "kubernetes.io/gpu"}, "must not be in the kubernetes.io/ namespace"),
        ({"extendedResourceName": "requests.example.com/gpu"}, 'must not start with "requests."'),
        ({"extendedResourceName": "gpu"}, "must be a lower-case DNS domain, a slash and a name"),
        ({"deviceClassNames": []}, "deviceClassNames needs at least one DeviceClass name"),
        ({"deviceClassNames": ["a", "a"]}, "lists a DeviceClass more than once"),
        ({"selectors": [{"cel": {"expression": "  "}}]}, "selectors[].cel.expression must not be empty"),
    ]
    for change, message in cases:
        body = mapping("invalid-mapping", "example.com/gpu", ["a"])
        body["spec"].update(change)
        out = await asyncio.to_thread(kubectl, control_plane, "create", "-f", "-", stdin=json.dumps(body))
        assert out.returncode != 0, change
        assert message in out.stderr, out.stderr


async def test_ordered_classes_beat_the_device_class_and_status_counts_the_claims(
    kube: Kube, control_plane: ControlPlane, operator: Operator, crd: None, namespace: str, names: str
) -> None:
    driver, ext = f"{names}.example.com", f"{names}.example.com/gpu"
    # The fleet's own DeviceClass maps ext to all 4 devices; the CR maps it to numa 0, then numa 1.
    fleet = fakedriver.Fleet(
        prefix=names, dra_nodes=1, devices_per_node=4, driver=driver, classes={f"{names}-all": ext}
    )
    objs = fleet.manifests()
    classes = [numa_class(f"{names}-a", driver, 0), numa_class(f"{names}-b", driver, 1)]
    await fakedriver.apply(kube, objs)
    try:
        for c in classes:
            await kube.create(DEVICE_CLASSES, c)
        await kube.create(MAPPINGS, mapping(names, ext, [f"{names}-a", f"{names}-b"]))
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        ready = await eventually(lambda: condition(kube, names, "Ready"))
        assert ready["status"] == "True", ready

        got: dict[str, list[str]] = {}
        for p in ("first", "second"):  # one after the other: the first takes class a's devices
            await kube.create(PODS, pod(p, {ext: "2"}, scheduler=SCHEDULER), namespace)
            bound = await eventually(lambda p=p: bound_with_status(kube, p, namespace))  # type: ignore[misc]
            claim = await claim_of(kube, bound)
            [request] = claim["spec"]["devices"]["requests"]
            assert set(request["exactly"]) == {"deviceClassName", "allocationMode", "count"}
            got[request["exactly"]["deviceClassName"]] = sorted(
                r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
            )
        assert got == {f"{names}-a": ["gpu-0", "gpu-1"], f"{names}-b": ["gpu-2", "gpu-3"]}

        async def capacity(total: int, allocated: int) -> dict[str, Any] | None:
            cap = ((await kube.get(MAPPINGS, names)).get("status") or {}).get("capacity") or {}
            want = {"total": total, "allocated": allocated, "free": total - allocated, "nodes": 1}
            return cap if cap == want else None

        await eventually(lambda: capacity(4, 4), timeout=30)
        out = await asyncio.to_thread(kubectl, control_plane, "get", "extendedresourcemappings", names)
        assert out.returncode == 0, out.stderr
        header, row = out.stdout.splitlines()
        assert header.split() == ["NAME", "RESOURCE", "CLASSES", "TOTAL", "ALLOCATED", "READY", "AGE"]
        assert row.split()[:6] == [names, ext, f'["{names}-a","{names}-b"]', "4", "4", "True"]

        text = await asyncio.to_thread(capacity_cli, control_plane, ext)
        rows = [line.split() for line in text.splitlines()]
        assert [ext, fleet.node_names()[0], "DRA", "4", "4", "0", f"{names}-a,{names}-b"] in rows, text

        # Live: the first pod goes away, its claim is released, ALLOCATED follows.
        await kube.delete(PODS, "first", namespace)
        await eventually(lambda: capacity(4, 2), timeout=30)
    finally:
        await kube.delete_if_exists(MAPPINGS, names)
        for c in classes:
            await kube.delete_if_exists(DEVICE_CLASSES, c["metadata"]["name"])
        await fakedriver.delete(kube, objs)


def capacity_cli(cp: ControlPlane, resource: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "draxr", "capacity", "--kubeconfig", str(cp.kubeconfig), "--resource", resource],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_conflict_and_invalid_selector_conditions(
    kube: Kube, operator: Operator, crd: None, namespace: str, names: str
) -> None:
    driver, ext = f"{names}.example.com", f"{names}.example.com/gpu"
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=1, devices_per_node=3, driver=driver, classes={f"{names}-c": ext})
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    older, newer, broken = f"{names}-old", f"{names}-new", f"{names}-bad"
    try:
        await kube.create(MAPPINGS, mapping(older, f"{names}.example.com/other", [f"{names}-c"]))
        await asyncio.sleep(1.1)  # creationTimestamp has second resolution
        await kube.create(MAPPINGS, mapping(newer, f"{names}.example.com/other", [f"{names}-c"]))
        await kube.create(
            MAPPINGS,
            mapping(
                broken, f"{names}.example.com/broken", [f"{names}-c"], selectors=[{"cel": {"expression": "device."}}]
            ),
        )

        async def has(name: str, ctype: str, status: str) -> dict[str, Any] | None:
            c = await condition(kube, name, ctype)
            return c if c is not None and c["status"] == status else None

        conflict = await eventually(lambda: has(newer, "Conflict", "True"), timeout=30)
        assert older in conflict["message"]
        assert conflict["observedGeneration"] == 1
        await eventually(lambda: has(newer, "Ready", "False"))
        await eventually(lambda: has(older, "Ready", "True"))
        await eventually(lambda: has(older, "Conflict", "False"))
        invalid = await eventually(lambda: has(broken, "InvalidSelector", "True"))
        assert invalid["message"].startswith("selectors[0]: ")

        # The broken mapping keeps only its own pods Pending; everything else is scheduled.
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await kube.create(PODS, pod("bad", {f"{names}.example.com/broken": "1"}, scheduler=SCHEDULER), namespace)
        await kube.create(PODS, pod("good", {ext: "1"}, scheduler=SCHEDULER), namespace)
        await kube.create(PODS, pod("other", {f"{names}.example.com/other": "1"}, scheduler=SCHEDULER), namespace)
        await eventually(lambda: bound_with_status(kube, "good", namespace))
        await eventually(lambda: bound_with_status(kube, "other", namespace))
        message = await eventually(lambda: unschedulable(kube, "bad", namespace))
        assert f"ExtendedResourceMapping {broken}" in message
        assert "invalid selector" in message

        # Fixing the selector: Ready, and the waiting pod is scheduled.
        await kube.patch(MAPPINGS, broken, {"spec": {"selectors": [{"cel": {"expression": "true"}}]}})
        fixed = await eventually(lambda: has(broken, "Ready", "True"), timeout=30)
        assert fixed["observedGeneration"] == 2
        await eventually(lambda: bound_with_status(kube, "bad", namespace), timeout=90)
    finally:
        for name in (older, newer, broken):
            await kube.delete_if_exists(MAPPINGS, name)
        await fakedriver.delete(kube, objs)


async def test_node_selector_limits_dra_to_matching_nodes(
    kube: Kube, operator: Operator, crd: None, namespace: str, names: str
) -> None:
    driver, ext = f"{names}.example.com", f"{names}.example.com/gpu"
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=2, devices_per_node=2, driver=driver, classes={f"{names}-c": None})
    objs = fleet.manifests()
    migrated, legacy = fleet.node_names()
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [migrated]}]}
        ]
    }
    await fakedriver.apply(kube, objs)
    try:
        await kube.create(MAPPINGS, mapping(names, ext, [f"{names}-c"], nodeSelector=selector))
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())

        async def counted() -> dict[str, Any] | None:
            cap = ((await kube.get(MAPPINGS, names)).get("status") or {}).get("capacity")
            return cap if cap and cap["nodes"] == 1 else None

        assert (await eventually(counted, timeout=30))["total"] == 2  # only the selected node counts
        for p in ("a", "b"):
            await kube.create(PODS, pod(p, {ext: "1"}, scheduler=SCHEDULER), namespace)
        for p in ("a", "b"):
            bound = await eventually(lambda p=p: bound_with_status(kube, p, namespace))  # type: ignore[misc]
            assert bound["spec"]["nodeName"] == migrated
        pinned = pod("pinned", {ext: "1"}, scheduler=SCHEDULER)
        pinned["spec"]["nodeSelector"] = {"kubernetes.io/hostname": legacy}
        await kube.create(PODS, pinned, namespace)
        message = await eventually(lambda: unschedulable(kube, "pinned", namespace))
        assert f"Insufficient {ext}" in message
    finally:
        await kube.delete_if_exists(MAPPINGS, names)
        await fakedriver.delete(kube, objs)
