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
from collections.abc import Callable
from typing import Any

from draxr import logs, metrics
from draxr.core.allocator import DEFAULT_FEATURES, Allocator, Features
from draxr.core.allocator.model import DeviceId, DeviceInfo
from draxr.core.migration import (
    GROUP,
    RECORD_PLURAL,
    AdoptionClaim,
    NodeRecord,
    Plan,
    PodRef,
    Unmatched,
    adoption_claim_from_api,
    node_devices,
    plan,
)
from draxr.core.state import ClusterState
from draxr.events import Recorder
from draxr.kube import RESOURCE_CLAIMS, ApiException, Kube, Resource, api_message
from draxr.loops import GuardedLoop

log = logs.get("draxr.migrator")

RECORDS = Resource(GROUP, "v1alpha1", RECORD_PLURAL, False)


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
    ) -> None:
        self.kube, self.state, self.recorder = kube, state, recorder
        self.features, self.interval, self.clock = features, interval, clock
        self._wake = asyncio.Event()
        self._reported: set[Unmatched] = set()  # unmatched IDs already announced by an Event

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

    # ---- one pass --------------------------------------------------------------------------------
    def plans(self) -> dict[str, Plan]:
        """Per node with a record or adoption claims, what to write now."""
        state, now = self.state, self.clock()
        ids = state.identities()
        claims = state.adoption_claims()
        out: dict[str, Plan] = {}
        for node in sorted(set(claims) | set(state.device_plugin_records)):
            existing = {key: adoption_claim_from_api(c.object()) for key, c in claims.get(node, {}).items()}
            record = state.device_plugin_records.get(node)
            if isinstance(record, NodeRecord) and not record.stale(now) and node in state.nodes:
                out[node] = plan(record, self._pods(record), ids, self._devices(node, ids), existing)
            else:
                out[node] = Plan(delete=[key for key, c in existing.items() if c is not None and self._ended(c)])
        return out

    def _pods(self, record: NodeRecord) -> dict[tuple[str, str], PodRef]:
        by_name = {(p.namespace, p.name): p for p in self.state.pods.values() if p.node_name == record.node}
        return {
            key: PodRef(p.uid, p.node_name, not (p.terminal or p.deleting))
            for key in record.pods()
            if (p := by_name.get(key)) is not None
        }

    def _ended(self, claim: AdoptionClaim) -> bool:
        pod = self.state.pods.get(claim.pod_uid)
        return pod is None or pod.terminal or pod.deleting

    def _devices(self, node: str, ids: dict[str, Any]) -> dict[str, list[DeviceInfo]]:
        raw = self.state.nodes[node].raw
        allocator = Allocator(self.state.inventory, self.state.allocated(), self.features)
        by_id: dict[DeviceId, DeviceInfo] = {
            d.id: d for sl in self.state.inventory.slices_for_node(node) for d in sl.devices
        }
        classes = {cls for _, cls in ids.values()}
        return node_devices(by_id, {cls: allocator.matching_devices(raw, cls) for cls in classes})

    async def pass_once(self) -> Plan:
        """One pass over every node; returns what was done, summed."""
        done = Plan()
        for p in self.plans().values():
            for key in p.delete:
                if await self._delete(key):
                    done.delete.append(key)
            for claim in p.create:
                if await self._create(claim):
                    done.create.append(claim)
            done.unmatched += p.unmatched
            done.waiting += p.waiting
        await self._announce(done.unmatched)
        self._publish(done.unmatched)
        return done

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
        self._reported = now

    def _node_uid(self, node: str) -> str:
        info = self.state.nodes.get(node)
        return str((info.raw.get("metadata") or {}).get("uid") or "") if info is not None else ""

    def _publish(self, unmatched: list[Unmatched]) -> None:
        adopted: Counter[str] = Counter()
        for claims in self.state.adoption_claims().values():
            for c in claims.values():
                found = adoption_claim_from_api(c.object())
                if found is not None:
                    for resource, _, devs in found.requests:
                        adopted[resource] += len(devs)
        for resource in set(adopted) | {r for r, _ in self.state.identities().items()}:
            metrics.ADOPTED_DEVICES.labels(resource=resource).set(adopted.get(resource, 0))
        missing = Counter(u.resource for u in unmatched)
        for resource in set(missing) | {r for r, _ in self.state.identities().items()}:
            metrics.UNMATCHED_DEVICE_IDS.labels(resource=resource).set(missing.get(resource, 0))
