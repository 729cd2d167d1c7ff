"""Kueue v0.17.0 as a real client of draxr (issue 29 item 1).

Kueue's manager (hack/build-kueue.sh: built from the Go module proxy; its CRDs and webhook
configurations from the same module zip) runs as a local process beside the session's control plane
(draxr_dev.devcluster.kueue). Kueue admits Workloads against a ClusterQueue's quota; the pods it lets
go are scheduled by the session's draxr (namespaces opted in with ``draxr.io/enabled``: draxr's
webhook steers them, the Job manifests are otherwise unchanged), which writes their special claims.
Pods "finish" when the test patches their status to Succeeded (kwok runs nothing).

* quota: Jobs of 2-GPU pods, one admitted at a time; the next admitted when one finishes and its
  pods bound once the claims of the finished pods are released; the ClusterQueue's usage never over
  the quota and equal to the devices the special claims hold. The same Jobs through kube-scheduler
  1.37.2, and the admission timeline of both runs printed side by side;
* Kueue's preemption by WorkloadPriorityClass: the evicted workload's pods go with their special
  claims, the preempting workload's pods bind on the devices they held;
* a plain pod held by Kueue's scheduling gate is bound by draxr only once the gate is gone, on the
  node the ResourceFlavor's nodeLabels select;
* Kueue's own DRA accounting (feature gates DynamicResourceAllocation and DRAExtendedResources,
  ``deviceClassMappings``) next to draxr's special claims: each device charged once;
* docs/guides/kueue.md: its bash blocks, run as they are written.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from draxr.kube import NAMESPACES, PODS, RESOURCE_CLAIMS, STRATEGIC_MERGE_PATCH, ApiException, Kube, Resource
from draxr.webhook_tls import MUTATING_WEBHOOKS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.kueue import (
    ADMISSION_GATE,
    NAMESPACE_LABEL,
    PRIORITY_LABEL,
    QUEUE_LABEL,
    KueueProcess,
    ensure_kueue,
)
from draxr_dev.devcluster.kueue import manifests as kueue_manifests

from ..doc_commands import Block, bash_blocks, blocks
from .helpers import EXTENDED_CLAIM_ANNOTATION, SCHEDULER, eventually
from .manifests import kubectl

JSON = dict[str, Any]
KUEUE = "kueue.x-k8s.io"
RESOURCE_FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", False)
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", False)
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues", True)
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads", True)
WORKLOAD_PRIORITY_CLASSES = Resource(KUEUE, "v1beta2", "workloadpriorityclasses", False)
JOBS = Resource("batch", "v1", "jobs", True)
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io", "v1", "resourceclaimtemplates", True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", False)
KUBE_SCHEDULER = "default-scheduler"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
IMAGE = "registry.invalid/trainer:1"
GUIDE = "docs/guides/kueue.md"


# ---- Kueue: installed once per module, one manager per test --------------------------------------


@dataclass(frozen=True)
class Installed:
    directory: Path
    webhook_port: int


@dataclass(frozen=True)
class KueueConfig:
    """One manager's configuration: ``--feature-gates`` and what goes into its Configuration."""

    feature_gates: dict[str, bool] = field(default_factory=dict)
    extra: JSON = field(default_factory=dict)


def guide_configurations() -> list[JSON]:
    """The Kueue Configurations of docs/guides/kueue.md (its yaml blocks of that kind): the one it
    recommends, then the one with Kueue's DRA accounting."""
    found = []
    for block in blocks(GUIDE):
        if block.info.split(" ", 1)[0] == "yaml":
            doc = yaml.safe_load(block.text)
            if isinstance(doc, dict) and doc.get("kind") == "Configuration":
                found.append(doc)
    assert len(found) == 2, f"{GUIDE}: expected two Kueue Configurations, found {len(found)}"
    return found


def recommended() -> KueueConfig:
    """The guide's recommended configuration (its waitForPodsReady and integrations)."""
    cfg = guide_configurations()[0]
    return KueueConfig(extra={k: cfg[k] for k in ("waitForPodsReady", "integrations")})


@pytest.fixture(scope="module")
async def kueue_installed(control_plane: ControlPlane, kube: Kube) -> AsyncIterator[Installed]:
    """Kueue's CRDs and webhook configurations (from its module zip: see draxr_dev.devcluster.kueue),
    applied server-side (the Workload CRD is too large for client-side apply); removed afterwards."""
    directory = await asyncio.to_thread(ensure_kueue)
    port = free_port()
    objs = await asyncio.to_thread(kueue_manifests, control_plane, directory, port)
    stdin = yaml.safe_dump_all(objs)
    out = await asyncio.to_thread(
        kubectl, control_plane, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=stdin
    )
    assert out.returncode == 0, out.stdout + out.stderr
    crds = [o["metadata"]["name"] for o in objs if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) >= 10, crds
    done = await asyncio.to_thread(
        kubectl, control_plane, "wait", "--for=condition=Established", *[f"crd/{c}" for c in crds], "--timeout=60s"
    )
    assert done.returncode == 0, done.stderr
    try:
        yield Installed(directory, port)
    finally:
        for o in objs:
            if o["kind"] == "MutatingWebhookConfiguration":
                await kube.delete_if_exists(MUTATING_WEBHOOKS, o["metadata"]["name"])
            elif o["kind"] == "ValidatingWebhookConfiguration":
                await kube.delete_if_exists(VALIDATING_WEBHOOKS, o["metadata"]["name"])
        for name in crds:
            await kube.delete_if_exists(CRDS, name)


@pytest.fixture
async def kueue(
    request: pytest.FixtureRequest, control_plane: ControlPlane, kueue_installed: Installed, tmp_path: Path, names: str
) -> AsyncIterator[KueueProcess]:
    """Kueue's manager for one test: the guide's configuration, or with the indirect parameter "dra"
    the DRA accounting's (``dra_config``)."""
    param = getattr(request, "param", None)
    config = dra_config(names) if param == "dra" else recommended()
    proc = KueueProcess(
        control_plane,
        kueue_installed.directory,
        tmp_path / "kueue",
        kueue_installed.webhook_port,
        feature_gates=config.feature_gates,
        extra=config.extra,
    )
    await asyncio.to_thread(proc.start)
    try:
        yield proc
    finally:
        alive = proc.alive()
        await asyncio.to_thread(proc.stop)
        if not alive or os.environ.get("DRAXR_KUEUE_LOG"):
            print(f"\n--- kueue log tail ---\n{proc.text()[-6000:]}", file=sys.__stderr__)
    assert alive, "Kueue's manager ended during the test"


class Queues:
    """The test's cluster-scoped Kueue objects, deleted (and waited for: a ClusterQueue keeps its
    finalizer until its workloads are gone) while Kueue still runs."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.made: list[tuple[Resource, str]] = []

    async def create(self, res: Resource, body: JSON) -> JSON:
        obj = await self.kube.create(res, body)
        self.made.append((res, obj["metadata"]["name"]))
        return obj

    async def flavor(self, name: str, node_labels: dict[str, str] | None = None) -> None:
        spec: JSON = {"nodeLabels": node_labels} if node_labels else {}
        await self.create(RESOURCE_FLAVORS, {"apiVersion": f"{KUEUE}/v1beta2", "kind": "ResourceFlavor",
                                             "metadata": {"name": name}, "spec": spec})  # fmt: skip

    async def cluster_queue(self, name: str, flavor: str, quota: dict[str, int], **spec: Any) -> None:
        body = {
            "apiVersion": f"{KUEUE}/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(quota),
                        "flavors": [
                            {"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in quota.items()]}
                        ],
                    }
                ],
                **spec,
            },
        }
        await self.create(CLUSTER_QUEUES, body)

    async def priority(self, name: str, value: int) -> None:
        await self.create(WORKLOAD_PRIORITY_CLASSES, {"apiVersion": f"{KUEUE}/v1beta2", "kind": "WorkloadPriorityClass",
                                                      "metadata": {"name": name}, "value": value})  # fmt: skip

    async def delete(self) -> None:
        for res, name in reversed(self.made):
            await self.kube.delete_if_exists(res, name)

        async def gone() -> bool:
            for res, name in self.made:
                try:
                    await self.kube.get(res, name)
                    return False
                except ApiException as e:
                    if e.status != 404:
                        raise
            return True

        await eventually(gone, timeout=60)


@pytest.fixture
async def queues(kube: Kube, kueue: KueueProcess) -> AsyncIterator[Queues]:
    q = Queues(kube)
    try:
        yield q
    finally:
        await q.delete()


@asynccontextmanager
async def kueue_namespace(
    kube: Kube, name: str, cluster_queue: str | None, *, draxr: bool, active: bool = True
) -> AsyncIterator[str]:
    """A namespace Kueue's webhooks serve, with a LocalQueue ``lq`` of ``cluster_queue`` (None: none),
    waited for to be Active unless ``active`` is False; opted in to draxr (``draxr.io/enabled``) or
    not (its pods then go to kube-scheduler). Deleted afterwards, and waited for while Kueue runs (its
    Workloads' finalizers)."""
    labels = {NAMESPACE_LABEL: "true", **({"draxr.io/enabled": "true"} if draxr else {})}
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    try:
        if cluster_queue is not None:
            await kube.create(LOCAL_QUEUES, local_queue("lq", cluster_queue), name)

            async def lq_active() -> bool:  # (its ClusterQueue active too: the Jobs' wait starts at 0)
                return is_true(await kube.get(LOCAL_QUEUES, "lq", name), "Active")

            if active:  # (a held ClusterQueue's LocalQueue is not)
                await eventually(lq_active, timeout=60)
        yield name
    finally:
        await kube.delete_if_exists(NAMESPACES, name)

        async def gone() -> bool:
            try:
                await kube.get(NAMESPACES, name)
                return False
            except ApiException as e:
                if e.status != 404:
                    raise
                return True

        await eventually(gone, timeout=120)


def local_queue(name: str, cluster_queue: str) -> JSON:
    return {"apiVersion": f"{KUEUE}/v1beta2", "kind": "LocalQueue", "metadata": {"name": name},
            "spec": {"clusterQueue": cluster_queue}}  # fmt: skip


def job(name: str, resource: str, *, pods: int, devices: int, priority: str | None = None) -> JSON:
    """A batch/v1 Job for LocalQueue ``lq``: ``pods`` pods at once, each asking ``devices`` of
    ``resource`` (nothing else: the ClusterQueue covers only that)."""
    labels = {QUEUE_LABEL: "lq", **({PRIORITY_LABEL: priority} if priority else {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {resource: str(devices)}}}],
                }
            },
        },
    }


# ---- reading Kueue's and the pods' state ----------------------------------------------------------


def condition(obj: JSON, kind: str) -> JSON | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == kind:
            return dict(c)
    return None


def is_true(obj: JSON, kind: str) -> bool:
    c = condition(obj, kind)
    return c is not None and c["status"] == "True"


def usage(cq: JSON, resource: str, key: str = "flavorsUsage") -> int:
    """The ClusterQueue's usage (or, with ``key="flavorsReservation"``, reservation) of ``resource``
    over all flavors."""
    total = 0
    for flavor in (cq.get("status") or {}).get(key) or ():
        for r in flavor.get("resources") or ():
            if r["name"] == resource:
                total += int(r["total"])
    return total


def owner_job(wl: JSON) -> str | None:
    for ref in wl["metadata"].get("ownerReferences") or ():
        if ref["kind"] == "Job":
            return str(ref["name"])
    return None


def claim_devices(claim: JSON) -> int:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return len((alloc.get("devices") or {}).get("results") or ())


async def special_claims(kube: Kube, namespace: str) -> dict[str, JSON]:
    """The namespace's special claims that hold devices, by the pod they are reserved for."""
    out: dict[str, JSON] = {}
    for c in await kube.list(RESOURCE_CLAIMS, namespace):
        if (c["metadata"].get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true":
            continue
        for r in (c.get("status") or {}).get("reservedFor") or ():
            if claim_devices(c):
                out[r["name"]] = c
    return out


async def finish(kube: Kube, namespace: str, pod: JSON) -> None:
    """What kubelet reports when the pod's container exits 0 (kwok runs nothing)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": now}
    status = {
        "phase": "Succeeded",
        "conditions": [done, {**done, "type": "ContainersReady"}],
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}},
            }
            for c in pod["spec"]["containers"]
        ],
    }
    name = pod["metadata"]["name"]
    await kube.patch(
        PODS, name, {"status": status}, namespace, subresource="status", content_type=STRATEGIC_MERGE_PATCH
    )


async def describe(kube: Kube, namespace: str) -> str:
    """The namespace's workloads, pods and events, for a failure message."""
    out = []
    for w in await kube.list(WORKLOADS, namespace):
        conds = [
            (c["type"], c["status"], c.get("reason"), c.get("message", "")[:120])
            for c in w["status"].get("conditions", [])
        ]
        out.append(f"workload {w['metadata']['name']}: {conds}")
    for p in await kube.list(PODS, namespace):
        out.append(f"pod {p['metadata']['name']}: {p['spec'].get('schedulerName')} {p['spec'].get('nodeName')} "
                   f"{p['status'].get('phase')} gates={p['spec'].get('schedulingGates')}")  # fmt: skip
    for e in await kube.list(Resource("", "v1", "events", True), namespace):
        out.append(
            f"event {e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: {e['message'][:200]}"
        )
    return "\n".join(out)


def check_bound(pod: JSON, claim: JSON | None, resource: str, devices: int, scheduler: str) -> None:
    """The pod is bound by ``scheduler`` and holds its special claim as kube-scheduler 1.37 writes it."""
    name = pod["metadata"]["name"]
    assert pod["spec"]["schedulerName"] == scheduler, name
    status = pod["status"].get("extendedResourceClaimStatus")
    assert status, f"{name}: no extendedResourceClaimStatus"
    assert claim is not None, f"{name}: no special claim holds devices"
    assert status["resourceClaimName"] == claim["metadata"]["name"]
    assert [m["resourceName"] for m in status["requestMappings"]] == [resource]
    assert claim_devices(claim) == devices
    [owner] = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", name, pod["metadata"]["uid"])
    pools = {r["pool"] for r in claim["status"]["allocation"]["devices"]["results"]}
    assert pools == {pod["spec"]["nodeName"]}


# ---- (a) quota: one Job at a time, the next when one finishes -----------------------------------


@dataclass
class Timeline:
    """What one run saw, in seconds since the Jobs were created, from polling every 0.1 s."""

    scheduler: str
    order: list[str] = field(default_factory=list)  # the Jobs in the order Kueue admitted them
    events: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> event -> seconds
    most_usage: int = 0  # the ClusterQueue's usage
    most_admitted: int = 0  # workloads admitted at once
    most_devices: int = 0  # devices held by special claims at once
    usage_vs_devices: list[tuple[int, int]] = field(default_factory=list)  # (usage, devices) while one runs

    def mark(self, job_name: str, event: str, t: float) -> None:
        self.events.setdefault(job_name, {}).setdefault(event, t)


async def quota_run(
    kube: Kube, namespace: str, cluster_queue: str, resource: str, scheduler: str, jobs: list[str], quota: int
) -> Timeline:
    """Creates the Jobs (2 pods of 2 devices each: the whole quota), then, job by job: waits until
    Kueue has admitted it and all its pods are bound and Running, and finishes them. Every poll
    checks that the quota is not over-used and that only one workload is admitted at a time."""
    line = Timeline(scheduler)
    t0 = time.monotonic()
    for name in jobs:
        await kube.create(JOBS, job(name, resource, pods=2, devices=2), namespace)
        line.mark(name, "created", time.monotonic() - t0)

    async def sample() -> tuple[dict[str, JSON], dict[str, list[JSON]]]:
        now = time.monotonic() - t0
        cq = await kube.get(CLUSTER_QUEUES, cluster_queue)
        wls = {owner_job(w) or "": w for w in await kube.list(WORKLOADS, namespace)}
        pods: dict[str, list[JSON]] = {}
        for p in await kube.list(PODS, namespace):
            pods.setdefault(p["metadata"]["labels"].get(JOB_NAME_LABEL, ""), []).append(p)
        claims = await special_claims(kube, namespace)
        held = sum(claim_devices(c) for c in claims.values())
        used = max(usage(cq, resource), usage(cq, resource, "flavorsReservation"))
        # Admitted and not done: Kueue may hand a finished Job's quota on (its reclaimable pods)
        # before it marks the workload Finished.
        admitted = [
            j
            for j, w in wls.items()
            if is_true(w, "Admitted")
            and not is_true(w, "Finished")
            and not (pods.get(j) and all(p["status"].get("phase") in ("Succeeded", "Failed") for p in pods[j]))
        ]
        line.most_usage = max(line.most_usage, used)
        line.most_admitted = max(line.most_admitted, len(admitted))
        line.most_devices = max(line.most_devices, held)
        for j in admitted:
            line.mark(j, "admitted", now)
            ps = pods.get(j, [])
            if len(ps) == 2 and all(p["spec"].get("nodeName") for p in ps):
                line.mark(j, "bound", now)
        for j, w in wls.items():
            if is_true(w, "PodsReady"):
                line.mark(j, "pods ready", now)
            if is_true(w, "Finished"):
                line.mark(j, "workload finished", now)
        assert used <= quota, f"ClusterQueue usage {used} over the quota {quota}"
        assert len(admitted) <= 1, f"admitted at once: {admitted}"
        return wls, pods

    for _ in jobs:
        # Kueue's order among Jobs created within the same second is its own (creationTimestamp has
        # seconds): the next is whichever it admits.
        async def running() -> tuple[str, list[JSON]] | None:
            wls, pods = await sample()
            for j, w in wls.items():
                ps = pods.get(j, [])
                if j in line.order or not is_true(w, "Admitted") or len(ps) != 2:
                    continue
                if all(p["status"].get("phase") == "Running" for p in ps):
                    return j, ps
            return None

        try:
            name, ps = await eventually(running, timeout=120, interval=0.1)
        except pytest.fail.Exception as e:
            pytest.fail(f"{e}\n{await describe(kube, namespace)}")
        line.order.append(name)

        # The ClusterQueue's status follows admissions in batches (Kueue: UpdatesBatchPeriod, 1 s).
        async def charged() -> int | None:
            await sample()
            return usage(await kube.get(CLUSTER_QUEUES, cluster_queue), resource) or None

        used = await eventually(charged, timeout=30, interval=0.1)
        claims = await special_claims(kube, namespace)
        for p in ps:
            check_bound(p, claims.get(p["metadata"]["name"]), resource, 2, scheduler)
        line.usage_vs_devices.append((used, sum(claim_devices(claims[p["metadata"]["name"]]) for p in ps)))

        # WaitForPodsReady: Kueue marks the workload PodsReady once it sees the pods Ready. Finished
        # before that, a loaded box's Kueue never set it (CI of 7575e0b): wait for it first.
        async def pods_ready(name: str = name) -> bool:
            wls, _ = await sample()
            return is_true(wls.get(name, {}), "PodsReady")

        await eventually(pods_ready, timeout=60, interval=0.1)
        for p in ps:
            await finish(kube, namespace, p)
        line.mark(name, "finished", time.monotonic() - t0)

    async def all_done() -> bool:
        wls, _ = await sample()
        return all(is_true(wls.get(j, {}), "Finished") for j in jobs)

    await eventually(all_done, timeout=120, interval=0.1)
    return line


async def test_kueue_admits_what_the_quota_allows_and_draxr_binds_each_job_in_turn(
    kube: Kube,
    kueue: KueueProcess,
    queues: Queues,
    webhook_ready: object,
    names: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Quota 4 devices = the fleet's 4 devices; three Jobs of two 2-device pods. Kueue admits one
    at a time, draxr binds its pods with their special claims, the next is admitted when it
    finishes and its pods bind on the devices the finished pods' claims held. The same Jobs then
    through kube-scheduler; both timelines printed."""
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=2, devices_per_node=2, driver=f"{names}.example.com",
                             classes={f"{names}-gpu": f"{names}.example.com/gpu"})  # fmt: skip
    resource = f"{names}.example.com/gpu"
    quota = 4
    jobs = ["train-1", "train-2", "train-3"]
    lines: list[Timeline] = []
    async with fakedriver.deployed(kube, fleet):
        await queues.flavor(f"{names}-flavor")
        await queues.cluster_queue(f"{names}-cq", f"{names}-flavor", {resource: quota})
        for scheduler, opted_in in ((SCHEDULER, True), (KUBE_SCHEDULER, False)):
            async with kueue_namespace(kube, f"{names}-{scheduler[:5]}", f"{names}-cq", draxr=opted_in) as ns:
                line = await quota_run(kube, ns, f"{names}-cq", resource, scheduler, jobs, quota)
                lines.append(line)
                # Every workload ran, one after another: each admitted after the one before finished.
                assert sorted(line.order) == jobs, line.order
                for before, after in itertools.pairwise(line.order):
                    assert line.events[after]["admitted"] >= line.events[before]["finished"], line.events
                wls = await kube.list(WORKLOADS, ns)
                assert len(wls) == 3
                assert all(is_true(w, "Finished") for w in wls)
                # WaitForPodsReady (the guide's configuration): Kueue saw each workload's pods Ready.
                assert all("pods ready" in line.events[j] for j in jobs), line.events
                # The quota was used in full, never over; what Kueue charged is what the claims held.
                assert (line.most_usage, line.most_admitted, line.most_devices) == (quota, 1, quota)
                assert line.usage_vs_devices
                assert all(u == d == quota for u, d in line.usage_vs_devices), line.usage_vs_devices
                # Released: no special claim of a finished pod holds a device any more.
                assert await special_claims(kube, ns) == {}

                async def uncharged() -> bool:
                    return usage(await kube.get(CLUSTER_QUEUES, f"{names}-cq"), resource) == 0

                await eventually(uncharged, timeout=30)
    with capsys.disabled():  # (shown in every run, not only on failure)
        print_timelines(lines)


def print_timelines(lines: list[Timeline]) -> None:
    """The runs side by side, Job by Job in the order Kueue admitted them (1st, 2nd, 3rd)."""
    events = ("created", "admitted", "bound", "pods ready", "finished", "workload finished")
    out = ["", "[kueue] admission timeline (s since the Jobs were created; polled every 0.1 s)"]
    out.append(f"{'job':18} {'event':18} " + " ".join(f"{line.scheduler:>18}" for line in lines))
    for k in range(len(lines[0].order)):
        for e in events:
            cells = [line.events[line.order[k]].get(e) for line in lines]
            label = f"{k + 1}." + "/".join(dict.fromkeys(line.order[k] for line in lines))
            out.append(f"{label:18} {e:18} " + " ".join(f"{c:18.2f}" if c is not None else f"{'-':>18}" for c in cells))
    for line in lines:
        ev = line.events
        gaps = [ev[b]["admitted"] - ev[a]["finished"] for a, b in itertools.pairwise(line.order)]
        binds = [ev[j]["bound"] - ev[j]["admitted"] for j in line.order]
        out.append(f"{line.scheduler}: finished -> next admitted {', '.join(f'{g:.2f}' for g in gaps)} s; "
                   f"admitted -> all pods bound {', '.join(f'{b:.2f}' for b in binds)} s")  # fmt: skip
    print("\n".join(out), flush=True)


# ---- (b) Kueue's preemption by WorkloadPriorityClass ---------------------------------------------


async def test_kueue_preemption_evicts_the_low_priority_workload_and_draxr_binds_the_preemptor(
    kube: Kube, kueue: KueueProcess, queues: Queues, webhook_ready: object, names: str
) -> None:
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=2, devices_per_node=2, driver=f"{names}.example.com",
                             classes={f"{names}-gpu": f"{names}.example.com/gpu"})  # fmt: skip
    resource = f"{names}.example.com/gpu"
    async with fakedriver.deployed(kube, fleet):
        await queues.flavor(f"{names}-flavor")
        await queues.priority(f"{names}-low", 10)
        await queues.priority(f"{names}-high", 1000)
        await queues.cluster_queue(f"{names}-cq", f"{names}-flavor", {resource: 4},
                                   preemption={"withinClusterQueue": "LowerPriority"})  # fmt: skip
        async with kueue_namespace(kube, names, f"{names}-cq", draxr=True) as ns:
            await kube.create(JOBS, job("low", resource, pods=2, devices=2, priority=f"{names}-low"), ns)

            async def pods_running(job_name: str) -> list[JSON] | None:
                ps = await kube.list(PODS, ns, labelSelector=f"{JOB_NAME_LABEL}={job_name}")
                live = [p for p in ps if not p["metadata"].get("deletionTimestamp")]
                ok = len(live) == 2 and all(p["status"].get("phase") == "Running" for p in live)
                return live if ok else None

            low = await eventually(lambda: pods_running("low"), timeout=120)
            claims = await special_claims(kube, ns)
            for p in low:
                check_bound(p, claims.get(p["metadata"]["name"]), resource, 2, SCHEDULER)
            low_claims = {claims[p["metadata"]["name"]]["metadata"]["name"] for p in low}
            low_devices = {
                (r["pool"], r["device"])
                for p in low
                for r in claims[p["metadata"]["name"]]["status"]["allocation"]["devices"]["results"]
            }
            assert len(low_devices) == 4  # every device of the fleet

            await kube.create(JOBS, job("high", resource, pods=2, devices=2, priority=f"{names}-high"), ns)
            high = await eventually(lambda: pods_running("high"), timeout=120)

            # The evicted workload: preempted by Kueue, not admitted any more, its pods and claims gone.
            [low_wl] = [w for w in await kube.list(WORKLOADS, ns) if owner_job(w) == "low"]
            evicted = condition(low_wl, "Evicted")
            assert evicted is not None, low_wl["status"]
            assert evicted["reason"] == "Preempted", evicted
            assert not is_true(low_wl, "Admitted")
            assert not is_true(low_wl, "QuotaReserved")
            left = await kube.list(PODS, ns, labelSelector=f"{JOB_NAME_LABEL}=low")
            assert all(p["status"].get("phase") in ("Failed", "Succeeded") or p["metadata"].get("deletionTimestamp")
                       for p in left), left  # fmt: skip
            existing = {c["metadata"]["name"]: c for c in await kube.list(RESOURCE_CLAIMS, ns)}
            assert all(claim_devices(existing[c]) == 0 for c in low_claims if c in existing), "a victim's claim holds"
            # The preemptor: bound by draxr on exactly the devices the victims held.
            claims = await special_claims(kube, ns)
            for p in high:
                check_bound(p, claims.get(p["metadata"]["name"]), resource, 2, SCHEDULER)
            high_devices = {
                (r["pool"], r["device"])
                for p in high
                for r in claims[p["metadata"]["name"]]["status"]["allocation"]["devices"]["results"]
            }
            assert high_devices == low_devices

            async def charged() -> bool:  # (the status follows in batches of 1 s)
                return usage(await kube.get(CLUSTER_QUEUES, f"{names}-cq"), resource) == 4

            await eventually(charged, timeout=30)
            [high_wl] = [w for w in await kube.list(WORKLOADS, ns) if owner_job(w) == "high"]
            assert is_true(high_wl, "Admitted")


# ---- (c) a plain pod behind Kueue's scheduling gate ----------------------------------------------


async def test_a_kueue_gated_pod_is_bound_only_after_admission_on_the_flavors_node(
    kube: Kube, kueue: KueueProcess, queues: Queues, webhook_ready: object, names: str
) -> None:
    """Pod integration: Kueue's webhook gates the pods (``kueue.x-k8s.io/admission``); the
    ClusterQueue holds admission (stopPolicy Hold) until the test lets it go. draxr leaves the gated
    pods alone; once Kueue removes the gate and injects the flavor's nodeSelector, both pods bind on
    the one node of three that the flavor's nodeLabels select."""
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=3, devices_per_node=4, driver=f"{names}.example.com",
                             classes={f"{names}-gpu": f"{names}.example.com/gpu"})  # fmt: skip
    resource = f"{names}.example.com/gpu"
    pool_label = "draxr.io/kueue-pool"
    objs = fleet.manifests()
    chosen = fleet.node_names()[1]
    for o in objs:
        if o["kind"] == "Node" and o["metadata"]["name"] == chosen:
            o["metadata"]["labels"][pool_label] = names
    await fakedriver.apply(kube, objs)
    try:
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())
        await queues.flavor(f"{names}-flavor", {pool_label: names})
        await queues.cluster_queue(f"{names}-cq", f"{names}-flavor", {resource: 8}, stopPolicy="Hold")
        async with kueue_namespace(kube, names, f"{names}-cq", draxr=True, active=False) as ns:
            for i in range(2):
                body = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"worker-{i}", "labels": {QUEUE_LABEL: "lq"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {resource: "2"}}}],
                    },
                }
                created = await kube.create(PODS, body, ns)
                assert created["spec"]["schedulerName"] == SCHEDULER  # draxr's webhook steered it
                assert {"name": ADMISSION_GATE} in created["spec"].get("schedulingGates", [])  # Kueue's gated it

            # Held: Kueue has its workloads but admits nothing; draxr binds nothing while the gate is on.
            async def workloads_pending() -> bool:
                wls = await kube.list(WORKLOADS, ns)
                return len(wls) == 2 and not any(is_true(w, "QuotaReserved") for w in wls)

            await eventually(workloads_pending, timeout=60)
            await asyncio.sleep(3)  # room for a wrong binding
            for p in await kube.list(PODS, ns):
                assert not p["spec"].get("nodeName"), p["metadata"]["name"]
                assert {"name": ADMISSION_GATE} in p["spec"]["schedulingGates"]
            assert await special_claims(kube, ns) == {}

            await kube.patch(CLUSTER_QUEUES, f"{names}-cq", {"spec": {"stopPolicy": "None"}})

            async def bound() -> list[JSON] | None:
                ps = await kube.list(PODS, ns)
                return ps if len(ps) == 2 and all(p["spec"].get("nodeName") for p in ps) else None

            pods = await eventually(bound, timeout=120)
            claims = await special_claims(kube, ns)
            for p in pods:
                assert not p["spec"].get("schedulingGates"), p["spec"].get("schedulingGates")
                assert p["spec"]["nodeSelector"][pool_label] == names  # injected by Kueue from the flavor
                assert p["spec"]["nodeName"] == chosen
                check_bound(p, claims.get(p["metadata"]["name"]), resource, 2, SCHEDULER)
            wls = await kube.list(WORKLOADS, ns)
            assert len(wls) == 2
            assert all(is_true(w, "Admitted") for w in wls)
    finally:
        await fakedriver.delete(kube, objs)


# ---- (d) Kueue's DRA accounting next to extended-resource pods ------------------------------------

# Kueue v0.17.0 (pkg/features): DynamicResourceAllocation (alpha, off) counts the devices of
# ResourceClaimTemplates under the logical names of resources.deviceClassMappings; DRAExtendedResources
# (alpha, off, needs the first) turns an extended-resource request that a DeviceClass serves into that
# class's logical name, and drops the extended-resource request itself (pkg/workload: "replaced").
# The guide's mapping names the extended resource itself, the case where charging both would double it.


def dra_config(names: str) -> KueueConfig:
    """The guide's recommended configuration plus its DRA one (feature gates, the mapping), with the
    test's DeviceClass and extended resource in place of gpu.example.com and example.com/gpu."""
    base = recommended()
    dra = guide_configurations()[1]
    gates = dra["featureGates"]
    assert gates == {"DynamicResourceAllocation": True, "DRAExtendedResources": True}, gates
    [mapping] = dra["resources"]["deviceClassMappings"]
    assert mapping == {"name": "example.com/gpu", "deviceClassNames": ["gpu.example.com"]}, mapping
    ours = [{"name": f"{names}.example.com/gpu", "deviceClassNames": [f"{names}-gpu"]}]
    return KueueConfig(feature_gates=gates, extra={**base.extra, "resources": {"deviceClassMappings": ours}})


@pytest.mark.parametrize("kueue", ["dra"], indirect=True)
async def test_kueue_dra_accounting_charges_each_device_once(
    kube: Kube, kueue: KueueProcess, queues: Queues, webhook_ready: object, names: str
) -> None:
    """Kueue with DynamicResourceAllocation and DRAExtendedResources on, the class mapped: a Job of
    two 2-device pods is charged 4 (not 8: counted twice it would never fit the quota of 4), the
    special claims draxr writes hold those 4 devices; a 2-device Job of the extended resource and
    one of a ResourceClaimTemplate of the same class wait for the same quota (charged 0, they would
    be admitted at once) until the first finishes, then run side by side, 2 + 2. The fleet has 8
    devices: only the quota holds them back."""
    assert kueue.feature_gates["DRAExtendedResources"]
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=2, devices_per_node=4, driver=f"{names}.example.com",
                             classes={f"{names}-gpu": f"{names}.example.com/gpu"})  # fmt: skip
    resource = f"{names}.example.com/gpu"
    async with fakedriver.deployed(kube, fleet):
        await queues.flavor(f"{names}-flavor")
        await queues.cluster_queue(f"{names}-cq", f"{names}-flavor", {resource: 4})
        async with kueue_namespace(kube, names, f"{names}-cq", draxr=True) as ns:
            await kube.create(JOBS, job("big", resource, pods=2, devices=2), ns)

            async def running(job_name: str, count: int) -> list[JSON] | None:
                ps = await kube.list(PODS, ns, labelSelector=f"{JOB_NAME_LABEL}={job_name}")
                ok = len(ps) == count and all(p["status"].get("phase") == "Running" for p in ps)
                return ps if ok else None

            big = await eventually(lambda: running("big", 2), timeout=120)
            [wl] = await kube.list(WORKLOADS, ns)
            assert is_true(wl, "Admitted")
            [assignment] = wl["status"]["admission"]["podSetAssignments"]
            assert assignment["resourceUsage"] == {resource: "4"}, assignment  # 2 pods x 2 devices, once
            claims = await special_claims(kube, ns)
            for p in big:
                check_bound(p, claims.get(p["metadata"]["name"]), resource, 2, SCHEDULER)
            assert sum(claim_devices(c) for c in claims.values()) == 4

            async def charged() -> int:
                return usage(await kube.get(CLUSTER_QUEUES, f"{names}-cq"), resource)

            assert await eventually(charged, timeout=30) == 4  # (the status follows in batches of 1 s)

            # Two more Jobs of 2 devices: one through the extended resource, one through a
            # ResourceClaimTemplate of the same class (its pods name draxr themselves: draxr's webhook
            # steers only extended-resource pods). Both charged to the one quota, both wait for it.
            await kube.create(JOBS, job("small", resource, pods=1, devices=2), ns)
            await kube.create(RESOURCE_CLAIM_TEMPLATES, template(f"{names}-gpu", 2), ns)
            await kube.create(JOBS, template_job(), ns)

            async def held_for_quota() -> dict[str, JSON] | None:
                held = {}
                for w in await kube.list(WORKLOADS, ns):
                    reserved = condition(w, "QuotaReserved")
                    if reserved and reserved["status"] == "False":
                        held[owner_job(w) or ""] = reserved
                return held if set(held) == {"small", "claims"} else None

            for reserved in (await eventually(held_for_quota, timeout=60)).values():
                assert f"insufficient unused quota for {resource}" in reserved["message"], reserved
                assert "2 more needed" in reserved["message"], reserved  # 4 of 4 charged to the first Job
            assert [p for p in await kube.list(PODS, ns) if "big" not in p["metadata"]["name"]] == []

            for p in big:
                await finish(kube, ns, p)
            [small] = await eventually(lambda: running("small", 1), timeout=120)
            [claimer] = await eventually(lambda: running("claims", 1), timeout=120)
            claims = await special_claims(kube, ns)
            check_bound(small, claims.get(small["metadata"]["name"]), resource, 2, SCHEDULER)
            assert set(claims) == {small["metadata"]["name"]}  # the finished pods' claims released
            assert claimer["spec"]["schedulerName"] == SCHEDULER
            [own] = claimer["status"]["resourceClaimStatuses"]
            own_claim = await kube.get(RESOURCE_CLAIMS, own["resourceClaimName"], ns)
            assert claim_devices(own_claim) == 2
            wls = {owner_job(w): w for w in await kube.list(WORKLOADS, ns)}
            [assignment] = wls["claims"]["status"]["admission"]["podSetAssignments"]
            assert assignment["resourceUsage"] == {resource: "2"}, assignment

            async def charged_four_again() -> bool:  # 2 + 2: both Jobs in the one quota
                return await charged() == 4

            await eventually(charged_four_again, timeout=60)


def template(device_class: str, count: int) -> JSON:
    """A ResourceClaimTemplate ``gpus`` of ``count`` devices of ``device_class``."""
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "allocationMode": "ExactCount",
                                          "count": count}}  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpus"},
            "spec": {"spec": {"devices": {"requests": [request]}}}}  # fmt: skip


def template_job() -> JSON:
    """Job ``claims``: one pod whose container uses a claim from the template ``gpus``."""
    body = job("claims", "unused", pods=1, devices=0)
    spec = body["spec"]["template"]["spec"]
    spec["schedulerName"] = SCHEDULER
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpus"}]
    spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return body


# ---- docs/guides/kueue.md ------------------------------------------------------------------------


async def test_the_guides_commands_run_as_written(
    kube: Kube, kueue: KueueProcess, webhook_ready: object, control_plane: ControlPlane, names: str
) -> None:
    """The guide's bash blocks, unchanged, with KUBECONFIG and PATH (kubectl) set: in namespace
    team-a (which the guide assumes exists), with the DeviceClass gpu.example.com serving
    example.com/gpu (fakedriver's defaults) on two nodes of 2 devices."""
    fleet = fakedriver.Fleet(prefix=names, dra_nodes=2, devices_per_node=2)
    assert fleet.classes == {"gpu.example.com": "example.com/gpu"}
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")},
        "KUBECONFIG": str(control_plane.kubeconfig),
        "PATH": f"{ensure_binaries()}:{os.environ.get('PATH', '')}",
    }
    commands = bash_blocks(GUIDE)
    assert len(commands) == 5, [b.where for b in commands]
    label, queue_objs, create, watch, clean = commands

    async def run(block: Block) -> str:
        out = await asyncio.to_thread(
            subprocess.run, ["bash", "-euo", "pipefail", "-c", block.text],
            env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, f"{block.where} failed:\n{block.text}\n{out.stdout}\n{out.stderr}"
        return out.stdout

    async with fakedriver.deployed(kube, fleet), kueue_namespace(kube, "team-a", None, draxr=False) as ns:
        for block in (label, queue_objs, create):
            await run(block)
        shown = await run(watch)
        pods = await kube.list(PODS, ns)
        assert len(pods) == 2
        claims = await special_claims(kube, ns)
        for p in pods:
            check_bound(p, claims.get(p["metadata"]["name"]), "example.com/gpu", 2, SCHEDULER)
            assert p["metadata"]["name"] in shown
            assert claims[p["metadata"]["name"]]["metadata"]["name"] in shown
        assert shown.count(" draxr ") == 2, shown
        assert '"name":"example.com/gpu","total":"4"' in shown.replace('"borrowed":"0",', ""), shown
        cq = await kube.get(CLUSTER_QUEUES, "gpu-queue")
        assert usage(cq, "example.com/gpu") == 4
        await run(clean)
        for res, name in ((CLUSTER_QUEUES, "gpu-queue"), (RESOURCE_FLAVORS, "gpu-flavor")):
            with pytest.raises(ApiException) as gone:
                await kube.get(res, name)
            assert gone.value.status == 404
