"""Carries out what core.preemption decided, off the scheduling loop (upstream's async preemption,
``preemption/executor.go``): each victim gets the DisruptionTarget condition (reason
PreemptionByScheduler), a graceful delete and a Preempted event; lower-priority pods nominated to
the node lose their nomination. While it runs the preemptor is not scheduled again (upstream's
PreEnqueue); the devices the dry run found are held for it in the state meanwhile and until it
binds (``claims.held_claim_key``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp

from draxr import logs, metrics
from draxr.core.claims import held_claim_key, rfc3339
from draxr.core.preemption import Candidate, Releasing, lower_nominated, releasing_of
from draxr.core.state import ClusterState, PodInfo
from draxr.events import Recorder
from draxr.kube import PODS, STRATEGIC_MERGE_PATCH, ApiException, Kube

log = logs.get("draxr.preemptor")


class Preemptor:
    def __init__(self, kube: Kube, state: ClusterState, recorder: Recorder, scheduler_name: str) -> None:
        self.kube, self.state, self.recorder, self.scheduler_name = kube, state, recorder, scheduler_name
        self.running: set[str] = set()  # preemptors whose victims are being evicted
        # Preemptor -> its victims' devices, which it waits for (core.preemption.Releasing).
        self.releasing: dict[str, Releasing] = {}

    def hold(self, pod: PodInfo, allocation: Mapping[str, Any] | None) -> None:
        """Keep the devices the dry run freed for ``pod`` (replacing an earlier hold; None: none)."""
        if allocation is None:
            self.release(pod.uid)
        else:
            self.state.assume_allocation(held_claim_key(pod.uid), allocation)

    def chose(self, pod: PodInfo, chosen: Candidate) -> None:
        """Hold the devices of ``chosen`` for the pod, and remember which claims it waits for."""
        self.hold(pod, chosen.held)
        self.releasing[pod.uid] = releasing_of(chosen.victims, self.state)

    def release(self, uid: str) -> None:
        """The pod bound, went away or lost its nomination: its held devices are free."""
        self.releasing.pop(uid, None)
        key = held_claim_key(uid)
        if self.state.tracker.is_assumed(key):
            self.state.forget_allocation(key)

    async def actuate(self, pod: PodInfo, chosen: Candidate, evicted: Callable[[], None] = lambda: None) -> None:
        """Evict the victims (those not yet being deleted), all at once; once every deletion has
        started (or failed), the preemptor may be tried again (``evicted``: upstream's
        IsPodRunningPreemption turns false when the last victim has its deletionTimestamp). Then
        the Preempted events, and the lower-priority pods nominated to the node lose their
        nomination (in the state at once, as upstream's API cacher). Errors are logged; the
        preemptor is tried again either way."""
        self.running.add(pod.uid)
        lower = lower_nominated(pod, chosen.node, self.state)
        for other in lower:
            self.state.nominate(other.uid, "")
            self.release(other.uid)  # no nomination, nothing held: its devices are free again
        victims = [v for v in chosen.victims if not v.deleting]
        try:
            metrics.PREEMPTION_VICTIMS.observe(len(chosen.victims))
            results = await asyncio.gather(*(self._delete(pod, v) for v in victims), return_exceptions=True)
        finally:
            self.running.discard(pod.uid)
            evicted()
        preempted = []
        failed: set[str] = set()
        for victim, result in zip(victims, results, strict=True):
            if isinstance(result, BaseException):
                log.warning(
                    "victim not preempted", preemptor=pod.key, victim=victim.key, node=chosen.node, error=repr(result)
                )
                self.state.mark_preempted((victim.uid,), preempted=False)
                failed.add(victim.uid)
            elif result:
                log.info("pod preempted", preemptor=pod.key, victim=victim.key, node=chosen.node)
                preempted.append(victim)
        if failed and pod.uid in self.releasing:
            # A victim left running frees nothing: waiting for its claims blocked every later
            # attempt (upstream's preemption fails with it, and the next attempt may preempt again).
            kept = [v for v in chosen.victims if v.uid not in failed]
            self.releasing[pod.uid] = releasing_of(kept, self.state)
        note = f"Preempted by pod {pod.uid} on node {chosen.node}"
        await asyncio.gather(
            *(self.recorder.pod_event(v, reason="Preempted", action="Preempting", note=note) for v in preempted)
        )
        for other in lower:
            await self._clear_nomination(other)

    async def _delete(self, preemptor: PodInfo, victim: PodInfo) -> bool:
        """The DisruptionTarget condition, then a graceful delete; False when the victim was gone
        already."""
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{preemptor.scheduler_name}: preempting to accommodate a higher priority pod",
            "lastTransitionTime": rfc3339(datetime.now(UTC)),
        }
        try:
            await self.kube.patch(
                PODS,
                victim.name,
                {"status": {"conditions": [condition]}},
                victim.namespace,
                subresource="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
            # Graceful, as upstream's DeletePod; the uid precondition spares a pod recreated under
            # the same name meanwhile.
            await self.kube.request(
                "DELETE",
                PODS.path(victim.namespace, victim.name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": victim.uid}},
            )
        except ApiException as e:
            if e.status in (404, 409):  # gone already (or replaced): nothing to preempt
                log.info("victim already gone", preemptor=preemptor.key, victim=victim.key)
                return False
            raise
        return True

    async def _clear_nomination(self, pod: PodInfo) -> None:
        try:
            await self.kube.patch(
                PODS,
                pod.name,
                {"status": {"nominatedNodeName": None}},
                pod.namespace,
                subresource="status",
                content_type=STRATEGIC_MERGE_PATCH,
            )
        except (ApiException, aiohttp.ClientError, OSError, TimeoutError) as e:  # not critical, as upstream
            log.warning("nomination not cleared", pod=pod.key, error=repr(e))
