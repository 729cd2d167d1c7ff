"""The version matrix (docs/reference/versions.md): every mode of draxr on a control plane of each
supported Kubernetes minor, 1.34 to 1.37, one parametrized module.

Per version, one control plane of that release (etcd, kube-apiserver, kube-controller-manager without
its resourceclaim controller, kwok; kube-scheduler only where adoption mode needs one), the install
base applied with kubectl (manifests/, the webhook pointed at loopback), and ``draxr run`` as a process
with the manifests' ServiceAccount token, as its Deployment's pod runs it. On 1.34 and 1.35 the
cluster is the one the KEP-5004 alpha needs: ``DRAExtendedResource=true`` on kube-apiserver and
kube-controller-manager, off in kube-scheduler (its default there), and draxr runs in adoption mode.
On 1.36 and 1.37 no gate is set (beta on by default, GA) and adoption is refused at start.

Each test is one cell of the table: the mode's outcome on that version (the pod bound, the special
claim and the pod status in the API's shape, what is released and by whom), or its clean refusal
(adoption on 1.36+; a kube-apiserver without the gate, on a second control plane of that version). The Kubernetes
binaries of 1.34 and 1.36 are built without kubectl (the default version's applies the manifests),
1.36's without kube-scheduler too (hack/build-control-plane.sh K8S_BINARIES).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import (
    DEVICE_CLASSES,
    EVENTS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODS,
    RESOURCE_CLAIMS,
    STORAGE_CLASSES,
    Kube,
    Resource,
)
from draxr.webhook_tls import MUTATING_WEBHOOKS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import KUBERNETES_BINARIES
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, ControlPlaneError, Options, free_port

from ..conftest import unique
from . import manifests
from .clusters import extra_control_plane, service_account_dir
from .helpers import (
    DELETE_PROTECTION,
    EXTENDED_CLAIM_ANNOTATION,
    NAMESPACE,
    Draxr,
    eventually,
    exact_request,
    get_or_none,
    pod,
)
from .test_pod_claims import claim_pod
from .test_volumes import persistent_volume, persistent_volume_claim, storage_class, volume_pod

JSON = dict[str, Any]
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", True)
NO_CLAIM_CONTROLLER = "*,-resourceclaim-controller"  # so that a released claim was released by draxr
SCHEDULER = "draxr"
GATE = "DRAExtendedResource=true"
APISERVER_KCM = ("kube-apiserver", "kube-controller-manager")


@dataclass(frozen=True)
class Version:
    """One column of the matrix: the release, what its cluster runs, what its API keeps."""

    release: str  # a patch release the Go module proxy serves
    gates: str  # kube-apiserver's and kube-controller-manager's --feature-gates
    adoption: bool  # kube-scheduler without the gate runs, and draxr adopts what it gives up on
    kubernetes: tuple[str, ...]  # the binaries built for it
    allocation_timestamp: bool  # the API server keeps status.allocation.allocationTimestamp

    @property
    def minor(self) -> str:
        return self.release.split(".")[1]

    @property
    def build(self) -> str | None:
        return None if self.release == "v1.37.2" else self.release  # None: the session's (DRAXR_BIN_DIR)


VERSIONS = (
    Version("v1.34.4", GATE, True, (*APISERVER_KCM, "kube-scheduler"), False),
    Version("v1.35.4", GATE, True, KUBERNETES_BINARIES, True),  # (built whole for test_adoption)
    Version("v1.36.3", "", False, APISERVER_KCM, True),
    Version("v1.37.2", "", False, KUBERNETES_BINARIES, True),
)


@dataclass
class Site:
    version: Version
    cp: ControlPlane
    kube: Kube  # the admin's, for the test's own writes and reads
    draxr: Draxr
    sa_dir: Path


@pytest.fixture
def names(request: pytest.FixtureRequest) -> str:
    """conftest's, without the version's id (brackets are no name)."""
    return unique(request.node.originalname.removeprefix("test_").replace("_", "-")[:20].strip("-"))


@pytest.fixture(scope="module", params=VERSIONS, ids=lambda v: f"1.{v.minor}")
def version_cluster(request: pytest.FixtureRequest) -> Iterator[tuple[Version, ControlPlane]]:
    v: Version = request.param
    options = Options(
        scheduler=v.adoption,
        kwok=True,
        kcm_controllers=NO_CLAIM_CONTROLLER,
        feature_gates=v.gates,
        scheduler_feature_gates="",
    )
    with extra_control_plane(f"v1.{v.minor}", options, v.build, v.kubernetes) as cp:
        yield v, cp


@pytest.fixture(scope="module")
async def site(
    version_cluster: tuple[Version, ControlPlane], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Site]:
    v, cp = version_cluster
    async with await Kube.from_kubeconfig(cp.kubeconfig) as kube:
        served = await kube.request("GET", "/version")
        assert served["gitVersion"] == v.release, served
        tmp = tmp_path_factory.mktemp(f"v1.{v.minor}")
        sa_dir, draxr = await install(cp, kube, tmp, adopt=v.adoption)
        try:

            async def trusted() -> bool:
                config = await kube.get(MUTATING_WEBHOOKS, "draxr")
                return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

            await draxr.until(trusted, timeout=90)
            yield Site(v, cp, kube, draxr, sa_dir)
            refused = [line for line in draxr.lines() if line.get("event") == "api request refused"]
            assert not refused, refused  # the ServiceAccount's RBAC covers every mode on this version
        finally:
            draxr.stop()


async def install(cp: ControlPlane, kube: Kube, tmp: Path, *, adopt: bool) -> tuple[Path, Draxr]:
    """manifests/ applied (the webhook pointed at a loopback port), and ``draxr run`` serving it with
    the ServiceAccount's token; returns the token's directory and the process."""
    port = free_port()
    applied = await asyncio.to_thread(manifests.apply, cp, url=manifests.webhook_url(port))
    assert applied.returncode == 0, applied.stdout + applied.stderr
    # The Deployment's own (fake) pods are not the test's: none, so nothing lands on the fleets.
    scaled = await asyncio.to_thread(
        manifests.kubectl, cp, "-n", NAMESPACE, "scale", "deployment/draxr", "--replicas=0"
    )
    assert scaled.returncode == 0, scaled.stderr
    sa_dir = await service_account_dir(kube, cp, NAMESPACE, "draxr", tmp / "sa")
    extra = [
        "--webhook-port", str(port),
        "--webhook-namespace", NAMESPACE,
        "--webhook-extra-hosts", "127.0.0.1",
        "--backoff-max-seconds", "2",
        "--unschedulable-flush-seconds", "5",
        *(["--adopt-unschedulable", "true"] if adopt else []),
    ]  # fmt: skip
    return sa_dir, Draxr(cp, sa_dir, SCHEDULER, tmp / "draxr.log", extra=extra)


@dataclass
class Scene:
    kube: Kube
    namespace: str
    fleet: fakedriver.Fleet
    resource: str
    device_class: str


@contextlib.asynccontextmanager
async def scene(
    site: Site, names: str, *, nodes: int = 2, devices: int = 2, label: bool = False
) -> AsyncIterator[Scene]:
    """A namespace (labelled for the webhook with ``label``) and a fleet of the test's own."""
    kube = site.kube
    meta: JSON = {"name": names, **({"labels": {"draxr.io/enabled": "true"}} if label else {})}
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=nodes,
        devices_per_node=devices,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    try:
        async with fakedriver.deployed(kube, fleet):
            yield Scene(kube, names, fleet, f"{names}.example.com/gpu", f"{names}-gpu")
    finally:
        await kube.request("DELETE", PODS.path(names), query={"gracePeriodSeconds": 0})
        await kube.delete_if_exists(NAMESPACES, names)


async def bound(s: Scene, name: str) -> JSON | None:
    """The pod once it is bound with its extendedResourceClaimStatus."""
    p = await s.kube.get(PODS, name, s.namespace)
    return p if p["spec"].get("nodeName") and (p.get("status") or {}).get("extendedResourceClaimStatus") else None


async def special_claim_of(site: Site, s: Scene, p: JSON, count: int) -> JSON:
    """The pod's special claim, checked field by field against what kube-scheduler writes (contract
    §2.4) in this version's API: resource.k8s.io/v1, the pod status naming it."""
    status = p["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "main", "resourceName": s.resource, "requestName": "container-0-request-0"}
    ]
    claim = await s.kube.get(RESOURCE_CLAIMS, status["resourceClaimName"], s.namespace)
    meta = claim["metadata"]
    assert claim["apiVersion"] == "resource.k8s.io/v1"
    assert meta["annotations"] == {EXTENDED_CLAIM_ANNOTATION: "true"}
    assert meta["generateName"] == f"{p['metadata']['name']}-extended-resources-"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": p["metadata"]["name"],
            "uid": p["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert meta["finalizers"] == [DELETE_PROTECTION]
    assert claim["spec"]["devices"]["requests"] == [exact_request("container-0-request-0", s.device_class, count)]
    allocation = claim["status"]["allocation"]
    results = allocation["devices"]["results"]
    assert len(results) == count
    assert {(r["request"], r["driver"], r["pool"]) for r in results} == {
        ("container-0-request-0", s.fleet.driver, p["spec"]["nodeName"])
    }
    [term] = allocation["nodeSelector"]["nodeSelectorTerms"]
    assert p["spec"]["nodeName"] in str(term)
    assert ("allocationTimestamp" in allocation) is site.version.allocation_timestamp, allocation
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
    ]
    return claim


async def gone(kube: Kube, res: Resource, name: str, namespace: str) -> bool:
    return await get_or_none(kube, res, name, namespace) is None


def released_by_draxr(site: Site, namespace: str, claim: str) -> bool:
    return any(
        line.get("event") == "claim released" and line.get("claim") == f"{namespace}/{claim}"
        for line in site.draxr.lines()
    )


# ---- the cells ----------------------------------------------------------------------------------


async def test_api(site: Site) -> None:
    """What the version serves: resource.k8s.io/v1 only (GA from 1.34, the only version draxr speaks),
    and DeviceClass.spec.extendedResourceName kept (the gate is on where it is not the default)."""
    groups = await site.kube.request("GET", "/apis/resource.k8s.io")
    assert [g["version"] for g in groups["versions"]] == ["v1"]  # (the betas are off by default in all four)
    assert groups["preferredVersion"]["version"] == "v1"
    fleet = fakedriver.Fleet(prefix="api", dra_nodes=0, classes={"api-gpu": "api.example.com/gpu"})
    async with fakedriver.deployed(site.kube, fleet, ready=False):
        cls = await site.kube.get(DEVICE_CLASSES, "api-gpu")
        assert cls["spec"]["extendedResourceName"] == "api.example.com/gpu"


async def test_named_scheduler(site: Site, names: str) -> None:
    """``schedulerName: draxr``: bound, the special claim and the pod status in the API's shape."""
    async with scene(site, names) as s:
        await s.kube.create(PODS, pod("p", {s.resource: "2"}, scheduler=SCHEDULER), s.namespace)
        p = await site.draxr.until(lambda: bound(s, "p"))
        assert p["spec"]["nodeName"] in s.fleet.node_names()
        await special_claim_of(site, s, p, 2)


async def test_webhook_steering(site: Site, names: str) -> None:
    """An unmodified pod in a labelled namespace: the webhook names draxr, draxr binds it."""
    async with scene(site, names, label=True) as s:
        body = pod("p", {s.resource: "1"}, scheduler="default-scheduler")
        del body["spec"]["schedulerName"]

        async def create_steered() -> JSON | None:
            # The API server may call the webhook only once it reads the caBundle: retry until steered.
            p = await s.kube.create(PODS, body, s.namespace)
            if p["spec"].get("schedulerName") == SCHEDULER:
                return p
            await s.kube.request("DELETE", PODS.path(s.namespace) + "/p", query={"gracePeriodSeconds": 0})
            await eventually(lambda: gone(s.kube, PODS, "p", s.namespace), timeout=30)
            return None

        created = await site.draxr.until(create_steered, timeout=60)
        why = created["metadata"]["annotations"][STEERED_ANNOTATION]
        assert f"{s.resource} -> DeviceClass {s.device_class} (explicit)" in why, why
        p = await site.draxr.until(lambda: bound(s, "p"))
        await special_claim_of(site, s, p, 1)


async def test_adoption_mode(site: Site, names: str, tmp_path: Path) -> None:
    """1.34/1.35: a default-scheduler pod that kube-scheduler (gate off) marks Unschedulable is
    bound by draxr, unrenamed. 1.36+: draxr refuses to start with the mode on, before any write."""
    if site.version.adoption:
        async with scene(site, names) as s:
            body = pod("p", {s.resource: "1"}, scheduler="default-scheduler")
            await s.kube.create(PODS, body, s.namespace)
            p = await site.draxr.until(lambda: bound(s, "p"), timeout=90)
            assert p["spec"]["schedulerName"] == "default-scheduler"
            await special_claim_of(site, s, p, 1)
            events = await s.kube.list(EVENTS, s.namespace, fieldSelector="regarding.name=p")
            gave_up = [e for e in events if e.get("reportingController") == "default-scheduler"]
            assert any(f"Insufficient {s.resource}" in e.get("note", "") for e in gave_up), events
        return
    scheduler = f"adopt-{names}"
    draxr = Draxr(site.cp, site.sa_dir, scheduler, tmp_path / "draxr.log", extra=["--adopt-unschedulable", "true"])
    try:
        rc = await asyncio.to_thread(draxr.proc.wait, 60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"draxr did not refuse adoption mode:\n{draxr.text()[-4000:]}")
    finally:
        draxr.stop()
    text = draxr.text()
    assert rc != 0, text[-4000:]
    assert f"--adopt-unschedulable refused: the cluster runs Kubernetes {site.version.release}" in text
    assert "Traceback" not in text, text[-4000:]
    leases = await site.kube.list(LEASES, NAMESPACE)
    assert scheduler not in [lease["metadata"]["name"] for lease in leases]  # never got as far as electing


async def test_claim_release_without_kcm(site: Site, names: str) -> None:
    """The pod completes and stays (Succeeded); no resourceclaim controller runs (and 1.34's would not
    release a special claim: kubernetes#134311): draxr releases the claim, and the next pod gets
    the devices."""
    async with scene(site, names, nodes=1) as s:
        body = pod("job", {s.resource: "2"}, scheduler=SCHEDULER, annotations={RUN_FOR_ANNOTATION: "2s"})
        await s.kube.create(PODS, body, s.namespace)
        p = await site.draxr.until(lambda: bound(s, "job"))
        claim = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]

        async def released() -> bool:
            p = await s.kube.get(PODS, "job", s.namespace)
            left = [c["metadata"]["name"] for c in await s.kube.list(RESOURCE_CLAIMS, s.namespace)]
            return p["status"].get("phase") == "Succeeded" and claim not in left

        await site.draxr.until(released)
        assert released_by_draxr(site, s.namespace, claim)
        await s.kube.create(PODS, pod("next", {s.resource: "2"}, scheduler=SCHEDULER), s.namespace)
        await special_claim_of(site, s, await site.draxr.until(lambda: bound(s, "next")), 2)


async def test_volumes(site: Site, names: str) -> None:
    """A PVC of a WaitForFirstConsumer class with a static PV on the second node: the pod lands
    there, the PV binder binds the claim to that PV after draxr's PreBind, then the device's claim."""
    cls = f"{names}-local"
    async with scene(site, names) as s:
        target = s.fleet.node_names()[1]
        await s.kube.create(STORAGE_CLASSES, storage_class(cls))
        try:
            await s.kube.create(PERSISTENT_VOLUMES, persistent_volume(f"{names}-pv", cls, node=target))
            await s.kube.create(PERSISTENT_VOLUME_CLAIMS, persistent_volume_claim("data", cls), s.namespace)
            await s.kube.create(PODS, volume_pod("p", s.fleet, "data", scheduler=SCHEDULER), s.namespace)
            p = await site.draxr.until(lambda: bound(s, "p"))
            assert p["spec"]["nodeName"] == target
            await special_claim_of(site, s, p, 1)

            async def claim_bound() -> JSON | None:
                c = await s.kube.get(PERSISTENT_VOLUME_CLAIMS, "data", s.namespace)
                return c if (c.get("status") or {}).get("phase") == "Bound" else None

            c = await site.draxr.until(claim_bound)
            assert c["spec"]["volumeName"] == f"{names}-pv"
        finally:
            await s.kube.delete_if_exists(PERSISTENT_VOLUMES, f"{names}-pv")
            await s.kube.delete_if_exists(STORAGE_CLASSES, cls)


async def test_pod_claims(site: Site, names: str) -> None:
    """The pod's own ResourceClaim (by name) and an extended resource: both allocated on one node,
    the pod's claim written as DynamicResources' PreBind does (finalizer, allocation, reservedFor)."""
    async with scene(site, names) as s:
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "mine"},
            "spec": {"devices": {"requests": [exact_request("gpu", s.device_class, 1)]}},
        }
        await s.kube.create(RESOURCE_CLAIMS, claim, s.namespace)
        await s.kube.create(PODS, claim_pod("p", SCHEDULER, claim="mine", ext=s.resource), s.namespace)
        p = await site.draxr.until(lambda: bound(s, "p"))
        await special_claim_of(site, s, p, 1)
        own = await s.kube.get(RESOURCE_CLAIMS, "mine", s.namespace)
        assert own["metadata"]["finalizers"] == [DELETE_PROTECTION]
        [result] = own["status"]["allocation"]["devices"]["results"]
        assert (result["request"], result["pool"]) == ("gpu", p["spec"]["nodeName"])
        assert own["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": p["metadata"]["uid"]}]
        special = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        special_devices = (await s.kube.get(RESOURCE_CLAIMS, special, s.namespace))["status"]["allocation"]
        assert result["device"] not in [r["device"] for r in special_devices["devices"]["results"]]


async def test_preemption(site: Site, names: str) -> None:
    """Devices: a node whose 2 devices two low-priority pods hold, a high-priority pod asking for
    both. draxr evicts the two (Preempted events), and the preemptor gets exactly their devices."""
    async with scene(site, names, nodes=1) as s:
        low, high = f"{names}-low", f"{names}-high"
        for name, value in ((low, 0), (high, 100000)):
            prio = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
            await s.kube.create(PRIORITY_CLASSES, {**prio, "value": value})
        try:
            victims = [f"v{i}" for i in range(2)]
            for v in victims:
                body = pod(v, {s.resource: "1"}, scheduler=SCHEDULER)
                body["spec"]["priorityClassName"] = low
                await s.kube.create(PODS, body, s.namespace)
            before = set()
            for v in victims:
                p = await site.draxr.until(lambda v=v: bound(s, v))  # type: ignore[misc]
                claim = await s.kube.get(
                    RESOURCE_CLAIMS, p["status"]["extendedResourceClaimStatus"]["resourceClaimName"], s.namespace
                )
                before |= {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]}
            body = pod("hi", {s.resource: "2"}, scheduler=SCHEDULER)
            body["spec"]["priorityClassName"] = high
            await s.kube.create(PODS, body, s.namespace)
            p = await site.draxr.until(lambda: bound(s, "hi"), timeout=90)
            claim = await special_claim_of(site, s, p, 2)
            assert {r["device"] for r in claim["status"]["allocation"]["devices"]["results"]} == before
            left = {q["metadata"]["name"] for q in await s.kube.list(PODS, s.namespace)}
            assert not left & set(victims)
            events = await s.kube.list(EVENTS, s.namespace)
            preempted = sorted(e["regarding"]["name"] for e in events if e["reason"] == "Preempted")
            assert preempted == victims
            assert all(e["reportingController"] == SCHEDULER for e in events if e["reason"] == "Preempted")
        finally:
            for name in (low, high):
                await s.kube.delete_if_exists(PRIORITY_CLASSES, name)


async def test_migration_fence(site: Site, names: str) -> None:
    """A device-plugin pod on a node whose DeviceClass declares the device plugin's identity, with no
    DevicePluginRecord: draxr's own pods wait (every version). 1.37 serves DeviceTaintRules: draxr
    fences the node's devices of the class with one rule each, and lifts the fence once the pod is
    gone. 1.34-1.36 do not: draxr says so at start and writes none (today's behaviour)."""
    from draxr.core.migration import FENCE_NODE_ANNOTATION, ID_ATTRIBUTE_ANNOTATION
    from draxr.core.plugins.dynamic_resources import NOT_ADOPTED
    from draxr.migrator import DEVICE_TAINT_RULES, FENCE_NOT_SERVED, FENCE_ON, FENCE_SELECTOR

    served = site.version.minor == "37"
    group = await site.kube.request("GET", "/apis/resource.k8s.io/v1")
    assert ("devicetaintrules" in {r["name"] for r in group["resources"]}) is served
    said = FENCE_ON if served else FENCE_NOT_SERVED
    assert await site.draxr.until(lambda: _said(site, said))
    async with scene(site, names, nodes=1) as s:
        [node] = s.fleet.node_names()
        meta = {"annotations": {ID_ATTRIBUTE_ANNOTATION: "uuid"}}
        await s.kube.patch(DEVICE_CLASSES, s.device_class, {"metadata": meta})
        old = pod("old", {s.resource: "1"}, scheduler=SCHEDULER)
        old["spec"]["nodeName"] = node  # what a device-plugin node ran before: no claim
        await s.kube.create(PODS, old, s.namespace)
        await s.kube.create(PODS, pod("new", {s.resource: "1"}, scheduler=SCHEDULER), s.namespace)

        async def waits() -> bool:
            events = await s.kube.list(EVENTS, s.namespace)
            return any(e["regarding"]["name"] == "new" and NOT_ADOPTED in e["note"] for e in events)

        await site.draxr.until(waits)
        if not served:
            return

        async def rules(count: int) -> list[JSON] | None:
            found = await s.kube.list(DEVICE_TAINT_RULES, labelSelector=FENCE_SELECTOR)
            mine = [r for r in found if r["metadata"]["annotations"][FENCE_NODE_ANNOTATION] == node]
            return mine if len(mine) == count else None

        fence = await site.draxr.until(lambda: rules(2))
        assert sorted(r["spec"]["deviceSelector"]["device"] for r in fence) == ["gpu-0", "gpu-1"]
        await s.kube.delete(PODS, "old", s.namespace, gracePeriodSeconds=0)

        async def lifted() -> bool:
            return await rules(0) is not None

        await site.draxr.until(lifted)
        await site.draxr.until(lambda: bound(s, "new"))


async def _said(site: Site, message: str) -> bool:
    return any(line.get("event") == message for line in site.draxr.lines())


def test_hack_test_sh_builds_each_version_the_matrix_runs() -> None:
    """hack/test.sh builds every version of the matrix (hack/build-late.sh, in the background; this
    module waits for it outside its tests' timeouts: a cold build inside a test would outlast one),
    with exactly the binaries its cluster runs (no more to build)."""
    script = (Path(__file__).resolve().parents[2] / "hack" / "build-late.sh").read_text()
    built: dict[str, set[tuple[str, ...]]] = {}
    for m in re.finditer(r'K8S_VERSION=(v[0-9.]+)(?: K8S_BINARIES="([^"]*)")?', script):
        built.setdefault(m.group(1), set()).add(tuple(m.group(2).split()) if m.group(2) else KUBERNETES_BINARIES)
    for v in VERSIONS:
        if v.build is not None:
            assert built.get(v.release) == {v.kubernetes}, (v, built)


async def test_gate_off_is_refused_cleanly(site: Site, names: str, tmp_path: Path) -> None:
    """kube-apiserver without DRAExtendedResource (1.34/1.35's default; 1.36 can turn it off) drops
    DeviceClass.spec.extendedResourceName and pod.status.extendedResourceClaimStatus without an
    error. A pod asking for a class's implicit name would be bound without the status (and run
    without its devices): draxr fails the binding instead, deletes the claim, leaves the pod
    Pending with a FailedScheduling event that names the gate; from then on it schedules as
    kube-scheduler does with the gate off (extended resources are nodes' own: upstream's exact
    Unschedulable condition, for the implicit and the explicit name). 1.37: the gate is locked on."""
    v = site.version
    gates = "DRAExtendedResource=false" if not v.gates else ""
    options = Options(scheduler=False, kwok=True, kcm_controllers=NO_CLAIM_CONTROLLER, feature_gates=gates)
    if v.minor == "37":
        locked = pytest.raises(ControlPlaneError, match="DRAExtendedResource")
        with locked, extra_control_plane(f"v1.{v.minor}-gate-off", options, v.build, v.kubernetes):
            pass
        return
    with extra_control_plane(f"v1.{v.minor}-gate-off", options, v.build, v.kubernetes) as cp:
        async with await Kube.from_kubeconfig(cp.kubeconfig) as kube:
            _, draxr = await install(cp, kube, tmp_path, adopt=False)
            try:
                await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
                fleet = fakedriver.Fleet(
                    prefix=names,
                    dra_nodes=1,
                    devices_per_node=2,
                    driver=f"{names}.example.com",
                    classes={f"{names}-gpu": f"{names}.example.com/gpu"},
                )
                async with fakedriver.deployed(kube, fleet):
                    cls = await kube.get(DEVICE_CLASSES, f"{names}-gpu")
                    assert "extendedResourceName" not in cls["spec"]  # dropped
                    implicit = f"deviceclass.resource.kubernetes.io/{names}-gpu"
                    await kube.create(PODS, pod("p", {implicit: "1"}, scheduler=SCHEDULER), names)

                    async def refused() -> list[JSON]:
                        events = await kube.list(EVENTS, names, fieldSelector="regarding.name=p")
                        return [e for e in events if "dropped status.extendedResourceClaimStatus" in e.get("note", "")]

                    [event] = await draxr.until(refused)
                    assert event["reason"] == "FailedScheduling"
                    assert "DRAExtendedResource feature gate" in event["note"]
                    p = await kube.get(PODS, "p", names)
                    assert not p["spec"].get("nodeName")
                    assert "extendedResourceClaimStatus" not in p["status"]

                    async def rolled_back() -> bool:
                        return not await kube.list(RESOURCE_CLAIMS, names)

                    await draxr.until(rolled_back)
                    # Then as kube-scheduler with the gate off (test/integration/dra/extendedresource.go):
                    # the implicit and the explicit name are a node's own resources, which no node has.
                    explicit = f"{names}.example.com/gpu"
                    await kube.create(PODS, pod("q", {explicit: "1"}, scheduler=SCHEDULER), names)
                    n = len(await kube.list(NODES))
                    for name, resource in (("p", implicit), ("q", explicit)):
                        want = (
                            f"0/{n} nodes are available: {n} Insufficient {resource}. preemption: 0/{n} nodes "
                            f"are available: {n} Preemption is not helpful for scheduling."
                        )

                        async def unschedulable(name: str = name, want: str = want) -> bool:
                            got = await kube.get(PODS, name, names)
                            return any(
                                (c["type"], c["status"], c.get("reason"), c.get("message"))
                                == ("PodScheduled", "False", "Unschedulable", want)
                                for c in got["status"].get("conditions") or ()
                            )

                        await draxr.until(unschedulable)
            finally:
                draxr.stop()
