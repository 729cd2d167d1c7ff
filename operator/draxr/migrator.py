"""The leader's side of moving nodes from a device plugin to DRA (core.migration): from each node's
DevicePluginRecord (written by ``draxr node-agent``), the adoption claims of the running
device-plugin pods, and their removal the moment a pod ends.

A pass (every ``interval`` seconds, and soon after a record, pod or claim event nudges it):
for a node with a fresh, readable record, core.migration.plan decides; for the others (no
record, a stale or unreadable one) only the claims of pods that ended or went are deleted: the
rest stay, since nobody can tell the devices are free. An adoption claim is created, then its
status written (allocation, reservedFor the record); if the status write fails the claim is
deleted again, so no half-written claim stays behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from draxr import logs, metrics
from draxr.core.allocator import DEFAULT_FEATURES, Allocator, Features
from draxr.core.allocator.model import DeviceId, DeviceInfo
from draxr.core.migration import (
    FENCE_KEY,
    FENCE_LABEL,
    FENCE_VALUE,
    GROUP,
    RECORD_PLURAL,
    AdoptionClaim,
    Fence,
    NodeRecord,
    Plan,
    PodRef,
    Unadopted,
    Unmatched,
    epoch,
    fence_from_api,
    fenced,
    node_devices,
    plan,
)
from draxr.core.plugins.dynamic_resources import got_dra_devices, unadopted_classes
from draxr.core.state import ClusterState
from draxr.events import Recorder
from draxr.kube import RESOURCE_CLAIMS, ApiException, Kube, Resource, api_message
from draxr.loops import GuardedLoop

log = logs.get("draxr.migrator")

RECORDS = Resource(GROUP, "v1alpha1", RECORD_PLURAL, False)
DEVICE_TAINT_RULES = Resource("resource.k8s.io", "v1", "devicetaintrules", False)
FENCE_SELECTOR = f"{FENCE_LABEL}={FENCE_VALUE}"
FENCE_ON = (
    "DeviceTaintRules served (resource.k8s.io/v1): on a node whose device-plugin pods are not all adopted, "
    f"draxr taints the devices they may hold (NoSchedule, key {FENCE_KEY}) so that no scheduler hands them out"
)
FENCE_NOT_SERVED = (
    "DeviceTaintRules are not served (resource.k8s.io/v1: Kubernetes 1.37 serves them by default, 1.34-1.36 "
    "do not): on a node whose device-plugin pods are not all adopted draxr holds back its own pods only, and "
    "other schedulers, kube-scheduler included, may hand out devices those pods hold; keep the node agent "
    "running and the node safe (kubectl draxr migration) before a device plugin stops (docs/guides/migration.md)"
)
RECORD_CRD_MISSING = (
    f"the DevicePluginRecord CRD ({RECORD_PLURAL}.{GROUP}) is not installed: no node agent can write a record, "
    "so no device-plugin pod is adopted; install it with `kubectl apply -k crds/` (or the Helm chart) and the "
    "node agent"
)


class Inputs:
    """Everything ``plan`` reads of one node: the node's stamp (drawn afresh when its object, its
    pods (placed, finished, gone), its slices or the allocations in its pools change) and, by
    identity (replaced on every change), the record, the mapping (rebuilt when a class changes) and
    the node's adoption claims (one whose status was never written allocates nothing: no new
    stamp). tests/unit/test_migration_memo.py fails without any one of them."""

    __slots__ = ("_objects", "_values")

    def __init__(self, objects: tuple[object, ...], values: tuple[object, ...]) -> None:
        self._objects, self._values = objects, values

    def same(self, other: Inputs) -> bool:
        return (
            len(self._objects) == len(other._objects)
            and all(a is b for a, b in zip(self._objects, other._objects, strict=True))
            and self._values == other._values
        )


# node -> the inputs of its last plan and that plan, kept while it had nothing to write
Memo = dict[str, tuple[Inputs, Plan]]


def plans(
    state: ClusterState, now: float, features: Features = DEFAULT_FEATURES, memo: Memo | None = None
) -> dict[str, Plan]:
    """Per node with a record or adoption claims, what to write now. With ``memo``, a node whose
    inputs are those of its last plan, and that plan wrote nothing, is not planned again (the
    periodic passes over hundreds of settled nodes cost next to nothing)."""
    ids = state.identities()
    claims = state.adoption.claims_by_node()
    holds = _holds(state)
    out: dict[str, Plan] = {}
    nodes = sorted(set(claims) | set(state.adoption.records))
    for node in nodes:
        node_claims = claims.get(node, {})
        existing = {key: c.adoption for key, c in node_claims.items()}
        record = state.adoption.records.get(node)
        if isinstance(record, NodeRecord) and not record.stale(now) and node in state.nodes:
            inputs = Inputs(
                (record, state.mapping, *node_claims.values()),
                (state.node_stamps.get(node), tuple(node_claims)),
            )
            last = memo.get(node) if memo is not None else None
            if last is not None and last[0].same(inputs):
                out[node] = last[1]
                continue
            pods = _pods(state, record)
            out[node] = plan(record, pods, ids, _devices(state, node, ids, features), existing, holds)
            if memo is not None:
                if out[node].create or out[node].delete:
                    memo.pop(node, None)  # a write may fail: plan it again next pass
                else:
                    memo[node] = (inputs, out[node])
        else:
            out[node] = Plan(delete=[k for k, c in existing.items() if c is not None and _ended(state, c)])
            if memo is not None:
                memo.pop(node, None)
    if memo is not None:
        for gone in set(memo) - set(nodes):
            del memo[gone]
    return out


def _pods(state: ClusterState, record: NodeRecord) -> dict[tuple[str, str], PodRef]:
    """The record's pods among those placed on its node (a pod that ended is not placed: gone)."""
    placed = (state.pods[uid] for uid in state.placed.get(record.node, ()))
    by_name = {(p.namespace, p.name): p for p in placed if p.node_name == record.node}
    return {
        key: PodRef(p.uid, p.node_name, not p.terminal, epoch(p.created))
        for key in record.pods()
        if (p := by_name.get(key)) is not None
    }


def _holds(state: ClusterState) -> Callable[[str], bool]:
    def holds(uid: str) -> bool:
        pod = state.pods.get(uid)
        return pod is not None and not pod.terminal

    return holds


def _ended(state: ClusterState, claim: AdoptionClaim) -> bool:
    """Its pod finished or is gone (a pod being deleted holds its devices until it stops)."""
    pod = state.pods.get(claim.pod_uid)
    return pod is None or pod.terminal


def _devices(
    state: ClusterState, node: str, ids: Mapping[str, tuple[Any, str]], features: Features
) -> dict[str, list[DeviceInfo]]:
    raw = state.nodes[node].raw
    allocator = Allocator(state.inventory, state.allocated(), features)
    by_id: dict[DeviceId, DeviceInfo] = {d.id: d for sl in state.inventory.slices_for_node(node) for d in sl.devices}
    classes = {cls for _, cls in ids.values()}
    return node_devices(by_id, {cls: allocator.matching_devices(raw, cls) for cls in classes})


def fences(
    state: ClusterState, now: float, features: Features = DEFAULT_FEATURES
) -> dict[str, tuple[frozenset[DeviceId], tuple[str, ...]]]:
    """Per node whose device-plugin pods are not all adopted: the devices to fence and why
    (core.migration.fenced). Only nodes with such pods are looked at (DynamicResources' cached
    unadopted_classes), and none when no DeviceClass declares an identity."""
    ids = state.identities()
    out: dict[str, tuple[frozenset[DeviceId], tuple[str, ...]]] = {}
    if not ids:
        return out
    for node in sorted(state.placed):
        if node not in state.nodes or not unadopted_classes(state, node):
            continue
        unadopted: list[Unadopted] = []
        for uid in state.placed[node]:
            pod = state.pods[uid]
            if got_dra_devices(state, pod):
                continue
            adopted = state.adoption.adopted.get(uid)
            for resource in ids:
                if pod.units.get(resource) and (adopted is None or resource not in adopted):
                    unadopted.append(Unadopted(pod.namespace, pod.name, resource, epoch(pod.created)))
        record = state.adoption.records.get(node)
        devices, why = fenced(node, record, now, unadopted, ids, _devices(state, node, ids, features))
        if devices:
            out[node] = (devices, why)
    return out


@dataclass(frozen=True)
class HeldPod:
    pod: str  # namespace/name
    resources: tuple[str, ...]
    claim: str  # its adoption claim's key, "" while not adopted


@dataclass(frozen=True)
class NodeReport:
    """``kubectl draxr migration``: one node's state of the move."""

    node: str
    record: str  # fresh / stale / missing / unreadable: why
    pods: tuple[HeldPod, ...]  # running device-plugin pods holding resources with an identity
    unmatched: tuple[Unmatched, ...]
    safe: bool  # every such pod's devices are adopted: DRA hands out none of them
    fence: tuple[str, ...] = ()  # draxr's DeviceTaintRules on the node's devices (names)
    fenced: tuple[str, ...] = ()  # their devices, driver/pool/device
    fence_why: tuple[str, ...] = ()  # why the node's devices are to be fenced (as draxr sees it now)
    fence_served: bool | None = None  # DeviceTaintRules served (None: not asked)

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "record": self.record,
            "safe": self.safe,
            "fence": {
                "served": self.fence_served,
                "rules": list(self.fence),
                "devices": list(self.fenced),
                "why": list(self.fence_why),
            },
            "pods": [{"pod": p.pod, "resources": list(p.resources), "adoptionClaim": p.claim} for p in self.pods],
            "unmatched": [
                {"resource": u.resource, "deviceID": u.device_id, "reason": u.reason} for u in self.unmatched
            ],
        }


def report(
    state: ClusterState,
    now: float,
    features: Features = DEFAULT_FEATURES,
    *,
    records_installed: bool = True,
    rules: list[dict[str, Any]] | None = None,
) -> list[NodeReport]:
    """Per node with device-plugin pods holding a resource whose class declares an identity, or
    with a record, adoption claims or draxr's DeviceTaintRules: what holds which devices, whether
    the node is safe, and its fence. ``records_installed``: the DevicePluginRecord CRD is served
    (else a missing record says why); ``rules``: draxr's DeviceTaintRules (None: not served)."""
    ids = state.identities()
    adopted_by: dict[str, str] = {}
    for claims in state.adoption.claims_by_node().values():
        for key, c in claims.items():
            if c.adopts is not None:
                adopted_by[c.adopts[0]] = key
    held: dict[str, list[HeldPod]] = {}
    for node, uids in state.placed.items():
        for uid in uids:
            p = state.pods[uid]
            if got_dra_devices(state, p):
                continue
            resources = tuple(r for r in sorted(ids) if p.units.get(r))
            if resources:
                held.setdefault(node, []).append(HeldPod(p.key, resources, adopted_by.get(uid, "")))
    per_node = plans(state, now, features)
    to_fence = fences(state, now, features)
    rules_on: dict[str, list[Fence]] = {}
    for rule in rules or ():
        found = fence_from_api(rule)
        if found is not None:
            rules_on.setdefault(found.node, []).append(found)
    out: list[NodeReport] = []
    for node in sorted(set(held) | set(per_node) | set(rules_on)):
        record = state.adoption.records.get(node)
        if record is None:
            seen = "missing" if records_installed else f"missing: {RECORD_CRD_MISSING}"
        elif isinstance(record, str):
            seen = f"unreadable: {record}"
        else:
            age, fresh = max(0, round(now - record.observed)), "stale" if record.stale(now) else "fresh"
            seen = f"{fresh} (observed {age}s ago, refresh {record.refresh_seconds:g}s)"
        pods = tuple(sorted(held.get(node, ()), key=lambda h: h.pod))
        unmatched = tuple(per_node[node].unmatched) if node in per_node else ()
        fence = sorted(rules_on.get(node, ()), key=lambda f: f.device)
        out.append(
            NodeReport(
                node,
                seen,
                pods,
                unmatched,
                all(h.claim for h in pods),
                tuple(f.name for f in fence),
                tuple("/".join(f.device) for f in fence),
                to_fence.get(node, (frozenset(), ()))[1],
                rules is not None,
            )
        )
    return out


async def _unbounded(write: Awaitable[bool]) -> bool:
    return await write


class Migrator:
    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        recorder: Recorder,
        *,
        features: Features = DEFAULT_FEATURES,
        interval: float = 5.0,
        clock: Callable[[], float] = time.time,
        writers: int = 16,
    ) -> None:
        self.kube, self.state, self.recorder = kube, state, recorder
        self.features, self.interval, self.clock = features, interval, clock
        self._wake = asyncio.Event()
        self._reported: set[Unmatched] = set()  # unmatched IDs already announced by an Event
        self.writers = writers
        self._tasks: set[asyncio.Task[None]] = set()
        self.on_unmatched_change: Callable[[], None] | None = None  # (the mapping CRs' status)
        self._memo: Memo = {}  # (plans: settled nodes are not planned again)
        self.records_served: Callable[[], bool] = lambda: True  # (the records informer: not ABSENT)
        # The fence (DeviceTaintRules): served or not (None: not asked yet), asked again every
        # ``rediscover_seconds`` while not; draxr's rules as listed and written (None: to list),
        # listed again every ``fence_resync_seconds`` (an admin may delete one).
        self.fence_served: bool | None = None
        self.rediscover_seconds, self.fence_resync_seconds = 300.0, 60.0
        self._asked_at = self._listed_at = float("-inf")
        self._rules: dict[str, Fence] | None = None
        self._strays: set[str] = set()  # draxr's rules that read otherwise (edited): deleted
        self._announced: dict[str, frozenset[DeviceId]] = {}  # node -> its fence as last announced
        self._said_refused = False
        self._said_missing = False  # RECORD_CRD_MISSING logged since the CRD was last seen served

    def unmatched(self, resource: str) -> list[str]:
        """The unmatched IDs of ``resource`` as the last pass found them, described."""
        return [
            f"{u.device_id} on {u.node} {u.reason}" for u in sorted(self._reported, key=str) if u.resource == resource
        ]

    def nudge(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        async def step() -> None:
            self._wake.clear()
            await self.pass_once()

        async def pause() -> None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):  # (not wait_for: see SchedulingQueue.pop)
                    await self._wake.wait()

        await GuardedLoop("device-plugin-migration").run(step, pause)

    async def pass_once(self) -> Plan:
        """One pass over every node, deletions first, at most ``writers`` writes in flight;
        returns what was done, summed."""
        self._check_records_crd()
        planned = list(plans(self.state, self.clock(), self.features, self._memo).values())
        done = Plan()
        gate = asyncio.Semaphore(self.writers)

        async def bounded(write: Awaitable[bool]) -> bool:
            async with gate:
                return await write

        deleted = await asyncio.gather(*(bounded(self._delete(k)) for p in planned for k in p.delete))
        done.delete = [k for k, ok in zip((k for p in planned for k in p.delete), deleted, strict=True) if ok]
        creates = [c for p in planned for c in p.create]
        created = await asyncio.gather(*(bounded(self._create(c)) for c in creates))
        done.create = [c for c, ok in zip(creates, created, strict=True) if ok]
        for p in planned:
            done.unmatched += p.unmatched
            done.waiting += p.waiting
        await self._announce(done.unmatched)
        self._publish(done.unmatched)
        await self.fence(bounded)  # (after the claims: a node adopted in this pass is safe now)
        return done

    # ---- the fence ---------------------------------------------------------------------------------
    async def fence(self, bounded: Callable[[Awaitable[bool]], Awaitable[bool]] | None = None) -> None:
        """Keep one DeviceTaintRule per device to fence (``fences``), each written once: created
        when a device is to be fenced, deleted when it is not; nothing where the API is not served."""
        now = self.clock()
        if self.fence_served is not True and now - self._asked_at >= self.rediscover_seconds:
            self._asked_at = now
            await self._discover()
        if not self.fence_served:
            return
        if self._rules is None or now - self._listed_at >= self.fence_resync_seconds:
            await self._list_rules(now)
        assert self._rules is not None
        per_node = fences(self.state, now, self.features)
        wanted = {f.name: f for node, (devices, _) in per_node.items() for f in (Fence(node, d) for d in devices)}
        create = [f for name, f in sorted(wanted.items()) if name not in self._rules]
        delete = sorted({name for name in self._rules if name not in wanted} | self._strays)
        if bounded is None:
            bounded = _unbounded
        await asyncio.gather(*(bounded(self._create_rule(f)) for f in create))
        await asyncio.gather(*(bounded(self._delete_rule(name)) for name in delete))
        await self._announce_fences(per_node)

    async def _discover(self) -> None:
        """Discovery: does resource.k8s.io/v1 serve devicetaintrules? Said at start, and on a change."""
        try:
            group = await self.kube.request("GET", f"/apis/{DEVICE_TAINT_RULES.group}/{DEVICE_TAINT_RULES.version}")
            served = any(r.get("name") == DEVICE_TAINT_RULES.plural for r in group.get("resources") or ())
        except ApiException as e:
            if e.status != 404:
                raise
            served = False
        if served != self.fence_served:
            if served:
                log.info(FENCE_ON)
            else:
                log.warning(FENCE_NOT_SERVED)
                self._rules = None
        self.fence_served = served

    async def _list_rules(self, now: float) -> None:
        try:
            listed = await self.kube.list(DEVICE_TAINT_RULES, labelSelector=FENCE_SELECTOR)
        except ApiException as e:
            self._refused(e, "list")
            if e.status == 404:
                self.fence_served = None
            raise
        self._rules, self._strays = {}, set()
        for rule in listed:
            found = fence_from_api(rule)
            if found is None:
                self._strays.add(str(rule["metadata"]["name"]))
            else:
                self._rules[found.name] = found
        self._listed_at = now

    async def _create_rule(self, fence: Fence) -> bool:
        try:
            await self.kube.create(DEVICE_TAINT_RULES, fence.body(self._node_uid(fence.node)))
        except ApiException as e:
            if e.status == 409:  # (made by a predecessor, or edited: the next list reads it)
                self._listed_at = float("-inf")
            else:
                self._refused(e, "create")
                log.warning("DeviceTaintRule not created", rule=fence.name, error=api_message(e))
            return False
        assert self._rules is not None
        self._rules[fence.name] = fence
        log.info("devices fenced", rule=fence.name, node=fence.node, device="/".join(fence.device))
        return True

    async def _delete_rule(self, name: str) -> bool:
        try:
            await self.kube.delete(DEVICE_TAINT_RULES, name)
        except ApiException as e:
            if e.status != 404:
                self._refused(e, "delete")
                log.warning("DeviceTaintRule not deleted", rule=name, error=api_message(e))
                return False
        assert self._rules is not None
        gone = self._rules.pop(name, None)
        self._strays.discard(name)
        log.info("fence lifted", rule=name, node=gone.node if gone else "")
        return True

    def _refused(self, e: ApiException, verb: str) -> None:
        """A refused request on DeviceTaintRules is said plainly, once."""
        if e.status in (401, 403) and not self._said_refused:
            self._said_refused = True
            log.error(
                f"DeviceTaintRule {verb} refused: draxr's ClusterRole needs list, create and delete of "
                "resource.k8s.io devicetaintrules (manifests/clusterrole.yaml, the Helm chart's ClusterRole): "
                "until then kube-scheduler may hand out devices device-plugin pods hold",
                error=api_message(e),
            )

    async def _announce_fences(self, per_node: Mapping[str, tuple[frozenset[DeviceId], tuple[str, ...]]]) -> None:
        """An Event on the node when its fence (as written) changes: Warning while fenced, Normal once lifted."""
        assert self._rules is not None
        now: dict[str, set[DeviceId]] = {}
        for f in self._rules.values():
            now.setdefault(f.node, set()).add(f.device)
        for node in sorted(set(now) | set(self._announced)):
            devices = frozenset(now.get(node, ()))
            if devices == self._announced.get(node, frozenset()):
                continue
            regarding = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": self._node_uid(node)}
            if devices:
                self._announced[node] = devices
                names = ", ".join(d[2] for d in sorted(devices))
                why = "; ".join(per_node.get(node, (frozenset(), ()))[1]) or "its device-plugin pods are not adopted"
                await self.recorder.object_event(
                    regarding,
                    reason="DevicesFenced",
                    action="Fence",
                    note=f"devices {names} of node {node} tainted NoSchedule ({FENCE_KEY}) by draxr's DeviceTaintRules "
                    f"(draxr-fence-{node}-*) until its device-plugin pods are adopted: {why}",
                )
            else:
                del self._announced[node]
                await self.recorder.object_event(
                    regarding,
                    reason="FenceLifted",
                    action="Fence",
                    note=f"node {node} is safe (its device-plugin pods' devices are adopted, or they ended): "
                    "draxr's DeviceTaintRules on its devices are deleted",
                    warning=False,
                )

    def _check_records_crd(self) -> None:
        """A DeviceClass declares an identity but the records' CRD is not installed: said once, plainly."""
        if self.records_served():
            self._said_missing = False
        elif self.state.identities() and not self._said_missing:
            self._said_missing = True
            log.error(RECORD_CRD_MISSING, classes=sorted({cls for _, cls in self.state.identities().values()}))

    def pod_ended(self, uid: str) -> None:
        """A pod with adoption claims finished or went: its claims go now, not after the pass in
        progress (which may be writing thousands of others)."""
        keys = [
            k
            for claims in self.state.adoption.claims_by_node().values()
            for k, c in claims.items()
            if c.adopts and c.adopts[0] == uid
        ]
        if keys:
            task = asyncio.get_running_loop().create_task(self._delete_all(keys))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        """Leadership lost: no write of ours may land afterwards."""
        for task in list(self._tasks):
            task.cancel()

    async def _delete_all(self, keys: list[str]) -> None:
        for key in keys:
            try:
                await self._delete(key)
            except Exception:  # the next pass deletes it
                log.exception("adoption claim not deleted", claim=key)

    # ---- writes ------------------------------------------------------------------------------------
    async def _delete(self, key: str) -> bool:
        namespace, name = key.split("/", 1)
        claim = self.state.claims.get(key)
        try:
            await self.kube.delete(RESOURCE_CLAIMS, name, namespace)
        except ApiException as e:
            if e.status != 404:
                log.warning("adoption claim not deleted", claim=key, error=api_message(e))
                return False
        self.state.remove_claim(namespace, name)
        log.info("adoption claim deleted", claim=key, node=claim.adoption_node if claim else "")
        return True

    async def _create(self, claim: AdoptionClaim) -> bool:
        if _ended(self.state, claim):
            return False  # ended since the plan: nothing to hold
        try:
            created = await self.kube.create(RESOURCE_CLAIMS, claim.body(), claim.namespace)
        except ApiException as e:
            if e.status != 409:  # 409: it exists, the watch brings it (and the next pass reads it)
                log.warning("adoption claim not created", claim=claim.key, error=api_message(e))
            return False
        uid = str(created["metadata"]["uid"])
        try:
            body = {"metadata": {"uid": uid, "resourceVersion": created["metadata"]["resourceVersion"]}}
            written = await self.kube.patch(
                RESOURCE_CLAIMS, claim.name, {**body, "status": claim.status()}, claim.namespace, subresource="status"
            )
        except ApiException as e:
            log.warning("adoption claim status not written: deleting the claim", claim=claim.key, error=api_message(e))
            with contextlib.suppress(ApiException):
                await self.kube.delete(RESOURCE_CLAIMS, claim.name, claim.namespace)
            return False
        self.state.upsert_claim(written)
        pod = self.state.pods.get(claim.pod_uid)
        devices = ", ".join("/".join(d) for d in claim.devices)
        log.info(
            "device-plugin devices adopted", claim=claim.key, pod=f"{claim.namespace}/{claim.pod}", devices=devices
        )
        if pod is not None:
            await self.recorder.pod_event(
                pod,
                reason="DevicesAdopted",
                action="Adopt",
                note=f"its device-plugin devices ({devices}) are held for it by ResourceClaim {claim.key}",
                later=True,
            )
        return True

    async def _announce(self, unmatched: list[Unmatched]) -> None:
        """A Warning Event per unmatched device ID (once while it stays unmatched)."""
        now = set(unmatched)
        for u in sorted(now - self._reported, key=lambda u: (u.node, u.resource, u.device_id)):
            log.warning(
                "device-plugin ID without exactly one DRA device",
                node=u.node,
                resource=u.resource,
                device_id=u.device_id,
                reason=u.reason,
            )
            await self.recorder.object_event(
                {"apiVersion": "v1", "kind": "Node", "name": u.node, "uid": self._node_uid(u.node)},
                reason="DevicePluginIDUnmatched",
                action="Adopt",
                note=f"{u.resource} device {u.device_id} on node {u.node} {u.reason}: its pod is not adopted",
            )
        changed = now != self._reported
        self._reported = now
        if changed and self.on_unmatched_change is not None:
            self.on_unmatched_change()

    def _node_uid(self, node: str) -> str:
        info = self.state.nodes.get(node)
        return str((info.raw.get("metadata") or {}).get("uid") or "") if info is not None else ""

    def _publish(self, unmatched: list[Unmatched]) -> None:
        adopted: Counter[str] = Counter()
        for claims in self.state.adoption.claims_by_node().values():
            for c in claims.values():
                if c.adoption is not None:
                    for resource, _, devs in c.adoption.requests:
                        adopted[resource] += len(devs)
        names = set(self.state.identities())
        for resource in set(adopted) | names:
            metrics.ADOPTED_DEVICES.labels(resource=resource).set(adopted.get(resource, 0))
        missing = Counter(u.resource for u in unmatched)
        for resource in set(missing) | names:
            metrics.UNMATCHED_DEVICE_IDS.labels(resource=resource).set(missing.get(resource, 0))
