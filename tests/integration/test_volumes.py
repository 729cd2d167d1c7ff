"""Pods with PersistentVolumeClaims and generic ephemeral volumes on a real control plane: draxr's
VolumeBinding (Reserve, PreBind: PV claimRef, selected-node, wait until Bound, then the special
claim and the Binding) with kube-controller-manager's PV binder, ephemeral volume and StatefulSet
controllers, and a fake CSI-style provisioner running in the test process (``Provisioner``).

Every pod asks for one device of the test's fleet, so it can only land on the fleet's nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from draxr.app import Operator
from draxr.core.steering import STEERED_ANNOTATION
from draxr.core.storage import ANN_SELECTED_NODE
from draxr.faults import VOLUME_STEPS
from draxr.kube import (
    CSI_NODES,
    EVENTS,
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    RESOURCE_CLAIMS,
    STATEFUL_SETS,
    STORAGE_CLASSES,
    ApiException,
    Kube,
)
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane

from .helpers import Draxr, eventually, pod

JSON = dict[str, Any]
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
TIMED_OUT = 'running PreBind plugin "VolumeBinding": binding volumes: context deadline exceeded'


# ---- bodies ---------------------------------------------------------------------------------------


def storage_class(name: str, provisioner: str = NO_PROVISIONER, mode: str = "WaitForFirstConsumer") -> JSON:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "reclaimPolicy": "Delete",
    }


def host_affinity(node: str) -> JSON:
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def persistent_volume(
    name: str,
    cls: str,
    *,
    node: str | None = None,
    size: str = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    labels: dict[str, str] | None = None,
    driver: str = "fake.csi.example.com",
    claim: JSON | None = None,
) -> JSON:
    spec: JSON = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": cls,
        "persistentVolumeReclaimPolicy": "Retain",
        "csi": {"driver": driver, "volumeHandle": name},
    }
    if node is not None:
        spec["nodeAffinity"] = host_affinity(node)
    if claim is not None:
        spec["claimRef"] = claim
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def claim_spec(cls: str, size: str = "1Gi", modes: tuple[str, ...] = ("ReadWriteOnce",)) -> JSON:
    return {"accessModes": list(modes), "storageClassName": cls, "resources": {"requests": {"storage": size}}}


def persistent_volume_claim(name: str, cls: str, **kw: Any) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": claim_spec(cls, **kw),
    }


def volume_pod(name: str, fleet: fakedriver.Fleet, *claims: str, scheduler: str = "draxr", **volumes: JSON) -> JSON:
    """One device of the fleet, the claims as persistentVolumeClaim volumes, ``volumes`` as given."""
    [resource] = [r for r in fleet.classes.values() if r]
    body = pod(name, {resource: "1"}, scheduler=scheduler)
    vols = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    vols += [{"name": k, **v} for k, v in volumes.items()]
    body["spec"]["volumes"] = vols
    return body


# ---- cluster-scoped objects, removed after the test -------------------------------------------------


class Objects:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.made: list[tuple[Any, str]] = []

    async def create(self, res: Any, body: JSON) -> JSON:
        made = await self.kube.create(res, body)
        self.made.append((res, body["metadata"]["name"]))
        return made

    async def remove(self) -> None:
        for res, name in reversed(self.made):
            with contextlib.suppress(ApiException):
                await self.kube.delete_if_exists(res, name)


@pytest.fixture
async def cluster_objects(kube: Kube) -> AsyncIterator[Objects]:
    objs = Objects(kube)
    yield objs
    await objs.remove()


# ---- the fake provisioner ---------------------------------------------------------------------------


class Provisioner:
    """Like a CSI local-volume driver with its external-provisioner: for each claim of
    ``class_name`` that carries the selected-node annotation and no volume yet, after ``delay``,
    a PV of the claim's size with node affinity to that node, bound to the claim by claimRef (the
    PV controller then binds the claim). Polls; a claim it served is not served again."""

    def __init__(self, kube: Kube, objects: Objects, class_name: str, provisioner: str, delay: float = 0.0) -> None:
        self.kube, self.objects = kube, objects
        self.class_name, self.provisioner, self.delay = class_name, provisioner, delay
        self.provisioned: dict[str, str] = {}  # namespace/claim -> node
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            for c in await self.kube.list(PERSISTENT_VOLUME_CLAIMS):
                meta, spec = c["metadata"], c["spec"]
                key = f"{meta['namespace']}/{meta['name']}"
                node = (meta.get("annotations") or {}).get(ANN_SELECTED_NODE)
                if spec.get("storageClassName") != self.class_name or not node or spec.get("volumeName"):
                    continue
                if key in self.provisioned:
                    continue
                self.provisioned[key] = node
                await asyncio.sleep(self.delay)
                ref = {
                    "kind": "PersistentVolumeClaim",
                    "apiVersion": "v1",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
                body = persistent_volume(
                    f"pvc-{meta['uid']}",
                    self.class_name,
                    node=node,
                    size=spec["resources"]["requests"]["storage"],
                    modes=tuple(spec["accessModes"]),
                    driver=self.provisioner,
                    claim=ref,
                )
                body["metadata"]["annotations"] = {"pv.kubernetes.io/provisioned-by": self.provisioner}
                await self.objects.create(PERSISTENT_VOLUMES, body)
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def provisioner(
    kube: Kube, objects: Objects, class_name: str, name: str, delay: float = 0.0
) -> AsyncIterator[Provisioner]:
    p = Provisioner(kube, objects, class_name, name, delay)
    p.start()
    try:
        yield p
    finally:
        await p.stop()


# ---- reading back -----------------------------------------------------------------------------------


async def bound_pod(kube: Kube, name: str, namespace: str) -> JSON | None:
    p = await kube.get(PODS, name, namespace)
    return p if p["spec"].get("nodeName") else None


async def claim_of(kube: Kube, name: str, namespace: str) -> JSON:
    return await kube.get(PERSISTENT_VOLUME_CLAIMS, name, namespace)


async def bound_claim(kube: Kube, name: str, namespace: str) -> JSON | None:
    c = await claim_of(kube, name, namespace)
    return c if (c.get("status") or {}).get("phase") == "Bound" else None


def pv_node(pv: JSON) -> str:
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    [expr] = term["matchExpressions"]
    return str(expr["values"][0])


async def pending_message(kube: Kube, name: str, namespace: str) -> str | None:
    p = await kube.get(PODS, name, namespace)
    for c in (p.get("status") or {}).get("conditions") or ():
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("message"):
            return str(c["message"])
    return None


async def event_note(kube: Kube, name: str, namespace: str, contains: str) -> str | None:
    for e in await kube.list(EVENTS, namespace):
        if e["regarding"]["name"] == name and e["reason"] == "FailedScheduling" and contains in (e.get("note") or ""):
            return str(e["note"])
    return None


def until(check: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Awaitable[Any]:
    return eventually(check, timeout=timeout)


# ---- scenarios ----------------------------------------------------------------------------------------


async def test_static_pv_with_node_affinity_puts_the_pod_on_its_node_as_kube_scheduler_does(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls = f"{names}-local"
    target = fleet.node_names()[1]
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls))
    await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-a", cls, node=target))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
    await kube.create(PODS, volume_pod("p", fleet, "data"), namespace)
    bound = await until(lambda: bound_pod(kube, "p", namespace))
    assert bound["spec"]["nodeName"] == target
    claim = await until(lambda: bound_claim(kube, "data", namespace))
    assert claim["spec"]["volumeName"] == f"{names}-a"
    pv = await kube.get(PERSISTENT_VOLUMES, f"{names}-a")
    assert pv["spec"]["claimRef"]["uid"] == claim["metadata"]["uid"]
    assert bound["status"].get("extendedResourceClaimStatus")  # the device too

    # The same pod through kube-scheduler, with its own PV on the same node.
    await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-b", cls, node=target))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data-k", cls), namespace)
    await kube.create(PODS, volume_pod("k", fleet, "data-k", scheduler="default-scheduler"), namespace)
    theirs = await until(lambda: bound_pod(kube, "k", namespace))
    assert theirs["spec"]["nodeName"] == target
    assert (await until(lambda: bound_claim(kube, "data-k", namespace)))["spec"]["volumeName"] == f"{names}-b"


async def test_wait_for_first_consumer_provisioning_binds_the_pod_after_its_claim(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls, driver = f"{names}-wffc", f"{names}.csi.example.com"
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, driver))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
    async with provisioner(kube, cluster_objects, cls, driver, delay=2.0):
        await kube.create(PODS, volume_pod("p", fleet, "data"), namespace)

        async def selected() -> str | None:
            return ((await claim_of(kube, "data", namespace))["metadata"].get("annotations") or {}).get(
                ANN_SELECTED_NODE
            )

        node = await until(selected)
        assert node in fleet.node_names()
        # The provisioner takes 2 s: the pod must not be bound before its claim is.
        assert await bound_pod(kube, "p", namespace) is None
        bound = await until(lambda: bound_pod(kube, "p", namespace))
        claim = await bound_claim(kube, "data", namespace)
        assert claim is not None
        pv = await kube.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
        assert bound["spec"]["nodeName"] == node == pv_node(pv)


async def test_provisioner_down_keeps_the_pod_pending_with_nothing_half_written(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls, driver = f"{names}-down", f"{names}.csi.example.com"
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, driver))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
    await kube.create(PODS, volume_pod("p", fleet, "data"), namespace)
    # The session operator waits 10 s for the claims (--volume-bind-timeout-seconds; upstream 600).
    note = await until(lambda: event_note(kube, "p", namespace, "binding volumes"), timeout=60)
    assert TIMED_OUT in note, note
    assert await bound_pod(kube, "p", namespace) is None
    assert not await kube.list(RESOURCE_CLAIMS, namespace)  # no special claim left behind
    claim = await claim_of(kube, "data", namespace)
    assert not claim["spec"].get("volumeName")
    # As upstream, the selected node stays (the provisioner would clear it if it could not serve).
    assert claim["metadata"]["annotations"][ANN_SELECTED_NODE] in fleet.node_names()
    # The provisioner comes up: the next attempt binds the pod where the claim was provisioned.
    async with provisioner(kube, cluster_objects, cls, driver):
        bound = await until(lambda: bound_pod(kube, "p", namespace), timeout=90)
        claim = await until(lambda: bound_claim(kube, "data", namespace))
        pv = await kube.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
        assert bound["spec"]["nodeName"] == pv_node(pv)
        assert len(await kube.list(RESOURCE_CLAIMS, namespace)) == 1


async def test_unbound_immediate_claim_waits_then_binds_when_a_pv_appears(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls = f"{names}-imm"
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, mode="Immediate"))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data-k", cls), namespace)
    await kube.create(PODS, volume_pod("p", fleet, "data"), namespace)
    await kube.create(PODS, volume_pod("k", fleet, "data-k", scheduler="default-scheduler"), namespace)
    ours = await until(lambda: pending_message(kube, "p", namespace))
    theirs = await until(lambda: pending_message(kube, "k", namespace))
    assert UNBOUND_IMMEDIATE in ours, ours
    assert UNBOUND_IMMEDIATE in theirs, theirs  # kube-scheduler's words for the same pod
    assert ours == theirs  # the whole message, preemption's part included
    # A PV appears (pre-bound to our claim by name, so the PV controller cannot give it to
    # kube-scheduler's); the PV controller binds the claim; the claim's update wakes the pod.
    target = fleet.node_names()[0]
    ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace, "name": "data"}
    await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-a", cls, node=target, claim=ref))
    bound = await until(lambda: bound_pod(kube, "p", namespace), timeout=90)
    assert bound["spec"]["nodeName"] == target
    assert (await bound_claim(kube, "data", namespace)) is not None


async def test_an_unmodified_statefulset_with_volume_claim_templates_in_an_opted_in_namespace(
    kube: Kube, webhook_ready: Operator, fleet: fakedriver.Fleet, names: str, cluster_objects: Objects
) -> None:
    cls, driver = f"{names}-sts", f"{names}.csi.example.com"
    [resource] = [r for r in fleet.classes.values() if r]
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, driver))
    ns = f"{names}-sts"
    await kube.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"draxr.io/enabled": "true"}}},
    )
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {
            "replicas": 3,
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {
                    "containers": [
                        {
                            "name": "db",
                            "image": "registry.invalid/db:1",
                            "resources": {"limits": {resource: "1"}},
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ]
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim_spec(cls)}],
        },
    }
    try:
        async with provisioner(kube, cluster_objects, cls, driver):
            await kube.create(STATEFUL_SETS, sts, ns)

            async def running() -> list[JSON] | None:
                pods = await kube.list(PODS, ns, labelSelector="app=db")
                ok = [
                    p for p in pods if p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") == "Running"
                ]
                return pods if len(ok) == 3 else None

            pods = await until(running, timeout=180)
            for p in pods:
                assert p["spec"]["schedulerName"] == "draxr"
                assert STEERED_ANNOTATION in p["metadata"]["annotations"]
                assert p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]  # a DRA device
                claim = await bound_claim(kube, f"data-{p['metadata']['name']}", ns)
                assert claim is not None
                pv = await kube.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
                assert pv_node(pv) == p["spec"]["nodeName"]
                assert claim["metadata"]["annotations"][ANN_SELECTED_NODE] == p["spec"]["nodeName"]
    finally:
        await kube.delete_if_exists(NAMESPACES, ns)


async def test_read_write_once_pod_claim_in_use_keeps_a_second_pod_out_until_the_first_goes(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls = f"{names}-rwop"
    rwop = ("ReadWriteOncePod",)
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls))
    await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-a", cls, modes=rwop))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls, modes=rwop), namespace)
    await kube.create(PODS, volume_pod("first", fleet, "data"), namespace)
    await until(lambda: bound_pod(kube, "first", namespace))
    await kube.create(PODS, volume_pod("second", fleet, "data"), namespace)
    message = await until(lambda: pending_message(kube, "second", namespace))
    assert "ReadWriteOncePod access mode already in-use by another pod" in message, message
    await kube.delete(PODS, "first", namespace, gracePeriodSeconds=0)
    await until(lambda: bound_pod(kube, "second", namespace), timeout=90)


async def test_zone_labelled_pv_puts_the_pod_in_its_zone(
    kube: Kube, operator: Operator, namespace: str, names: str, cluster_objects: Objects
) -> None:
    fleet = fakedriver.Fleet(
        prefix=f"{names}-z",
        dra_nodes=2,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
        zones=("z1", "z2"),
    )
    objs = fleet.manifests()
    await fakedriver.apply(kube, objs)
    try:
        cls = f"{names}-zoned"
        await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, mode="Immediate"))
        await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-a", cls, labels={ZONE: "z2"}))
        await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
        await until(lambda: bound_claim(kube, "data", namespace), timeout=60)  # the PV controller binds it
        await kube.create(PODS, volume_pod("p", fleet, "data"), namespace)
        bound = await until(lambda: bound_pod(kube, "p", namespace))
        assert bound["spec"]["nodeName"] == fleet.node_names()[1]  # the z2 node
    finally:
        await fakedriver.delete(kube, objs)


async def test_a_csinode_limit_reached_keeps_the_next_pod_off_the_node(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls, driver = f"{names}-lim", f"{names}.csi.example.com"
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, mode="Immediate"))
    for node in fleet.node_names():
        csinode = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {"name": node},
            "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": 1}}]},
        }
        await cluster_objects.create(CSI_NODES, csinode)
    for c in ("a", "b", "c"):
        await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-{c}", cls, driver=driver))
        await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim(f"data-{c}", cls), namespace)
    for c in ("a", "b", "c"):
        await until(lambda c=c: bound_claim(kube, f"data-{c}", namespace), timeout=60)
    await kube.create(PODS, volume_pod("a", fleet, "data-a"), namespace)
    a = await until(lambda: bound_pod(kube, "a", namespace))
    await kube.create(PODS, volume_pod("b", fleet, "data-b"), namespace)
    b = await until(lambda: bound_pod(kube, "b", namespace))
    assert {a["spec"]["nodeName"], b["spec"]["nodeName"]} == set(fleet.node_names())  # one volume per node
    await kube.create(PODS, volume_pod("c", fleet, "data-c"), namespace)
    message = await until(lambda: pending_message(kube, "c", namespace))
    assert "2 node(s) exceed max volume count" in message, message


async def test_a_generic_ephemeral_volume_waits_for_its_claim_then_is_provisioned(
    kube: Kube, operator: Operator, fleet: fakedriver.Fleet, namespace: str, names: str, cluster_objects: Objects
) -> None:
    cls, driver = f"{names}-eph", f"{names}.csi.example.com"
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls, driver))
    scratch = {"ephemeral": {"volumeClaimTemplate": {"spec": claim_spec(cls)}}}
    async with provisioner(kube, cluster_objects, cls, driver):
        made = await kube.create(PODS, volume_pod("p", fleet, scratch=scratch), namespace)
        bound = await until(lambda: bound_pod(kube, "p", namespace), timeout=90)
        claim = await bound_claim(kube, "p-scratch", namespace)  # made by KCM's ephemeral volume controller
        assert claim is not None
        [owner] = claim["metadata"]["ownerReferences"]
        assert owner["uid"] == made["metadata"]["uid"]
        pv = await kube.get(PERSISTENT_VOLUMES, claim["spec"]["volumeName"])
        assert bound["spec"]["nodeName"] == pv_node(pv)


# ---- crash safety -------------------------------------------------------------------------------------

LEASE = ["--lease-duration-seconds", "3", "--renew-deadline-seconds", "2", "--retry-period-seconds", "0.5"]


@pytest.mark.parametrize("step", VOLUME_STEPS)
async def test_sigkill_between_the_volume_writes_and_the_binding(
    kube: Kube,
    control_plane: ControlPlane,
    fleet: fakedriver.Fleet,
    namespace: str,
    names: str,
    cluster_objects: Objects,
    step: str,
    tmp_path: Path,
) -> None:
    scheduler = f"draxr-{names}"
    cls = f"{names}-crash"
    target = fleet.node_names()[1]
    await cluster_objects.create(STORAGE_CLASSES, storage_class(cls))
    await cluster_objects.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-a", cls, node=target))
    await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), namespace)
    log = tmp_path / "draxr.log"
    proc = Draxr(control_plane, None, scheduler, log, extra=LEASE, env={"DRAXR_CRASH_AFTER": step})
    try:
        await kube.create(PODS, volume_pod("p", fleet, "data", scheduler=scheduler), namespace)
        rc = await asyncio.get_running_loop().run_in_executor(None, proc.proc.wait, 90)
        assert rc == -signal.SIGKILL, log.read_text()[-3000:]
        assert await bound_pod(kube, "p", namespace) is None  # killed before the Binding
        pv = await kube.get(PERSISTENT_VOLUMES, f"{names}-a")
        assert pv["spec"]["claimRef"]["name"] == "data"  # the PV write happened

        proc = Draxr(control_plane, None, scheduler, log, extra=LEASE)
        bound = await proc.until(lambda: bound_pod(kube, "p", namespace), timeout=90)
        assert bound["spec"]["nodeName"] == target
        claim = await until(lambda: bound_claim(kube, "data", namespace))
        assert claim["spec"]["volumeName"] == f"{names}-a"
        [special] = await kube.list(RESOURCE_CLAIMS, namespace)  # one claim, the used one
        assert special["metadata"]["name"] == bound["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        # The PV is not lost to another pod: a second claim of the class finds no PV.
        await kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("other", cls), namespace)
        await kube.create(PODS, volume_pod("q", fleet, "other", scheduler=scheduler), namespace)
        message = await proc.until(lambda: pending_message(kube, "q", namespace))
        assert "didn't find available persistent volumes to bind" in message, message
    finally:
        proc.stop()
