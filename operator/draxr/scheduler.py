"""The scheduling loop: one pod at a time against the in-memory state, decisions assumed at once,
bindings written concurrently (bounded)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Coroutine, Mapping
from typing import Any

from draxr import logs, metrics
from draxr.binder import Binder, BindingFailed
from draxr.core.allocator import DEFAULT_FEATURES, Features
from draxr.core.claims import assumed_claim_key
from draxr.core.gc import ClaimAction
from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.pod_claims import claim_key
from draxr.core.preemption import Candidate, Outcome, Releasing, preemption, rebuilt_hold
from draxr.core.requeue import Change, interest
from draxr.core.state import ClusterState, PodInfo
from draxr.core.steering import adoptable
from draxr.events import Recorder, set_unschedulable
from draxr.kube import Kube
from draxr.loops import GuardedLoop, classify, hand_back
from draxr.preemptor import Preemptor
from draxr.queue import SchedulingQueue
from draxr.releaser import Releaser
from draxr.settings import Settings

log = logs.get("draxr.scheduler")


def wants_us(pod: PodInfo, scheduler_name: str, adopt: ExtendedResourceMapping | None = None) -> bool:
    """Ours to schedule: unbound, alive, no scheduling gates left, and our scheduler name, or (in
    adoption mode, ``adopt`` being the current mapping) a default-scheduler pod kube-scheduler gave
    up on because of a mapped extended resource."""
    if not pod.schedulable or pod.gated:
        return False
    if pod.scheduler_name == scheduler_name:
        return True
    return adopt is not None and adoptable(pod.raw, adopt)


def _scheduling_input(pod: PodInfo) -> tuple[Any, ...]:
    """What a pod update must change to deserve an immediate retry (status-only updates, such as
    our own PodScheduled condition, do not; ``status.resourceClaimStatuses`` does: upstream's
    UpdatePodGeneratedResourceClaim event, kube-controller-manager naming a template's claim).
    Only for pods that want us, which keep their object."""
    meta = pod.raw.get("metadata") or {}
    statuses = (pod.raw.get("status") or {}).get("resourceClaimStatuses")
    return (pod.raw.get("spec"), meta.get("labels"), meta.get("annotations"), statuses)


def pod_claim_keys(pod: PodInfo) -> frozenset[str]:
    """The claims ("namespace/name") the pod's ``spec.resourceClaims`` name now (by name, or a
    template's claim as ``status.resourceClaimStatuses`` records it): upstream's
    podResourceClaimIndex, which its claim events' queueing hints look pods up by."""
    claims = pod.view.claims_input
    if claims is None:
        return frozenset()
    by_entry = {
        s.get("name"): s.get("resourceClaimName")
        for s in (claims.get("status") or {}).get("resourceClaimStatuses") or ()
    }
    keys: set[str] = set()
    for entry in (claims.get("spec") or {}).get("resourceClaims") or ():
        name = entry.get("resourceClaimName")
        if name is None and entry.get("resourceClaimTemplateName") is not None:
            name = by_entry.get(entry.get("name"))
        if name:
            keys.add(claim_key(pod.namespace, str(name)))
    return frozenset(keys)


class Scheduler:
    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        settings: Settings,
        recorder: Recorder,
        features: Features = DEFAULT_FEATURES,
    ) -> None:
        self.kube = kube
        self.state = state
        self.settings = settings
        self.recorder = recorder
        self.features = features
        self.queue = SchedulingQueue(
            settings.backoff_initial_seconds,
            settings.backoff_max_seconds,
            settings.unschedulable_flush_seconds,
            changes=state.changes,
        )
        self._bind_slots = asyncio.Semaphore(settings.bind_concurrency)
        self.binder = Binder(
            kube, state, recorder, slots=self._bind_slots, volume_bind_timeout=settings.volume_bind_timeout_seconds
        )
        self.releaser = Releaser(kube, state)
        self.preemptor = Preemptor(kube, state, recorder, settings.scheduler_name)
        self._tasks: set[asyncio.Task[None]] = set()
        self._start = 0
        self._adoption_scanned: ExtendedResourceMapping | None = None
        self._depth_published = 0.0
        # The claims each pending pod of ours names, and back: a claim event wakes the pods that
        # name it (DynamicResources' isSchedulableAfterClaimChange), not every parked pod.
        self._claims_of: dict[str, frozenset[str]] = {}
        self._pods_of_claim: dict[str, set[str]] = {}
        # Preemptors retried at once since their last choice (their room free), and the
        # generation the check last ran at (_activate_preemptors).
        self._activated: set[str] = set()
        self._freed_seen = 0
        self.heartbeat = time.monotonic()  # the loop last took a pod (or started)
        self._turn = self.heartbeat  # when the loop last handed the event loop back
        self.running = False  # run() is on (a new leader catches up and rolls back first)

    def wants(self, pod: PodInfo) -> bool:
        adopt = self.state.mapping if self.settings.adopt_unschedulable else None
        return wants_us(pod, self.settings.scheduler_name, adopt)

    def ours(self, pod: PodInfo) -> bool:
        """Named for us (adopted pods are kube-scheduler's to report on: it keeps their condition)."""
        return pod.scheduler_name == self.settings.scheduler_name

    # ---- fed by the watch handlers ---------------------------------------------------------------
    def _index_claims(self, uid: str, keys: frozenset[str]) -> None:
        before = self._claims_of.pop(uid, frozenset())
        if keys == before:
            if keys:
                self._claims_of[uid] = keys
            return
        for key in before - keys:
            uids = self._pods_of_claim.get(key)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._pods_of_claim[key]
        for key in keys - before:
            self._pods_of_claim.setdefault(key, set()).add(uid)
        if keys:
            self._claims_of[uid] = keys

    def named(self, key: str) -> bool:
        """Some pending pod of ours names the claim ``key``."""
        return key in self._pods_of_claim

    def claim_changed(self, key: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        """A claim was created, changed or deleted (``before``/``after``: its objects, None when it
        did not or does not exist). The pending pods naming it are retried when it was created or
        its status changed, as upstream's queueing hint; a claim that lost its allocation frees
        devices for every pod (ClusterState.generation)."""
        uids = self._pods_of_claim.get(key)
        if not uids:
            return
        if after is None:
            wake = True  # (the next claim of that name is an Add)
        elif before is None:
            wake = True
        else:
            wake = (before.get("status") or {}) != (after.get("status") or {}) or bool(
                (after.get("metadata") or {}).get("deletionTimestamp")
            ) != bool((before.get("metadata") or {}).get("deletionTimestamp"))
        if not wake:
            return
        for uid in list(uids):
            pod = self.state.pods.get(uid)
            # (a pod in flight is marked moved by the queue: the event is not lost)
            if pod is not None and uid not in self.state.assumed_nodes and self.wants(pod):
                self.queue.add(uid, pod.priority, pod.created)

    def pod_changed(self, pod: PodInfo, old: PodInfo | None = None) -> None:
        if self.wants(pod):
            self._index_claims(pod.uid, pod_claim_keys(pod))
            if not pod.nominated:
                # its nomination was cleared (a higher preemptor's, another writer's): nothing is
                # held for it any more (a stale hold kept the devices from every pod)
                self.preemptor.release(pod.uid)
            if pod.uid in self.state.assumed_nodes:
                return  # being bound, or bound by us and the watch is behind (a late event)
            # (an update of a pod in flight marks it moved in the queue: its attempt saw the old pod)
            fresh = old is None or not self.wants(old) or not self.queue.known(pod.uid)
            if fresh or _scheduling_input(old) != _scheduling_input(pod):  # type: ignore[arg-type]
                self.queue.add(pod.uid, pod.priority, pod.created)
        else:
            self._index_claims(pod.uid, frozenset())
            if not self.queue.is_in_flight(pod.uid):
                self.queue.remove(pod.uid)
            if pod.uid not in self.state.assumed_nodes:  # (ours bound: released when the binding ends)
                self.preemptor.release(pod.uid)

    def pod_deleted(self, uid: str) -> None:
        self.preemptor.release(uid)
        self._index_claims(uid, frozenset())
        self.queue.remove(uid)
        self.recorder.forget(uid)

    def cluster_changed(self) -> None:
        self.queue.cluster_changed()
        self._activate_preemptors()
        if self.settings.adopt_unschedulable and self.state.mapping is not self._adoption_scanned:
            # a new mapping may make pods kube-scheduler gave up on adoptable (or no longer so)
            self._adoption_scanned = self.state.mapping
            for pod in list(self.state.pods.values()):
                if pod.scheduler_name != self.settings.scheduler_name and not pod.node_name:
                    self.pod_changed(pod)

    def _activate_preemptors(self) -> None:
        """A preemptor whose victims are all gone (or ended) and their devices released is retried
        now, its backoff waived (SchedulingQueue.activate), once per choice: the room is there."""
        changes, releasing = self.state.changes, self.preemptor.releasing
        freed = changes.since(self._freed_seen) & (Change.POD_FREED | Change.CLAIM_FREED)
        self._freed_seen = changes.generation
        if not freed or not releasing:
            return
        self._activated &= releasing.keys()
        pods = self.state.pods
        for uid, waits_for in releasing.items():
            if uid in self._activated:
                continue
            if any((v := pods.get(victim)) is not None and not v.terminal for victim in waits_for.victims):
                continue
            if waits_for.pending(self.state):
                continue
            self._activated.add(uid)
            self.queue.activate(uid)

    def rebuild_holds(self) -> int:
        """A new leader: hold again, for the pods an earlier leader's preemption nominated, the
        devices their victims free (that leader held them in its memory), higher priority first.
        Returns how many holds were rebuilt."""
        nominated = [
            p
            for p in self.state.pods.values()
            if p.nominated and p.uid not in self.preemptor.releasing and self.ours(p) and self.wants(p)
        ]
        rebuilt = 0
        for pod in sorted(nominated, key=lambda p: (-p.priority, p.created, p.uid)):
            try:
                found = rebuilt_hold(pod, self.state, self.features)
            except Exception:  # a bug must not keep a new leader from leading: no hold, logged
                log.exception("hold not rebuilt", pod=pod.key, node=pod.nominated)
                continue
            if found is not None:
                self.preemptor.hold(pod, found[0])
                self.preemptor.releasing[pod.uid] = found[1]
                rebuilt += 1
                log.info("held again for a nominated pod", pod=pod.key, node=pod.nominated)
        return rebuilt

    # ---- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Cycles back to back while pods are ready, but never holds the event loop for longer than
        ``scheduler_turn_seconds``: the watches, the lease renewal and the health server share it.
        (``pop`` returns without suspending while a pod is ready, so the loop must hand it back.)"""
        guard = GuardedLoop("scheduling")
        self._turn = self.heartbeat = time.monotonic()

        async def step() -> None:
            uid = await self.queue.pop(lambda: self.state.generation, self._inventory_stamp)
            self.heartbeat = time.monotonic()
            self._turn = max(self._turn, self.queue.woke_at)
            self._publish_queue_depth()
            self.state.extended.recheck(self.heartbeat)
            pod = self.state.pods.get(uid)
            if pod is None or not self.wants(pod) or uid in self.state.assumed_nodes:
                self.queue.done(uid)
            else:
                preemption = self.cycle(pod)
                if preemption is not None:
                    await preemption
            await self._end_of_turn()

        async def go_on() -> None:
            pass

        self.running = True
        try:
            await guard.run(step, go_on)
        finally:
            self.running = False

    async def _end_of_turn(self) -> None:
        """Hand the event loop back once this turn has held it ``scheduler_turn_seconds``."""
        if time.monotonic() - self._turn >= self.settings.scheduler_turn_seconds:
            metrics.SCHEDULER_YIELDS.inc()
            await hand_back()
            self._turn = time.monotonic()

    def _inventory_stamp(self) -> object:
        """What a broken class, slice or mapping may be healed by: any change of those (and, for a
        pod a volume plugin's PreFilter turned away, a storage event: ClusterState.storage_changed)."""
        inv = self.state.inventory
        return (inv.revision, inv.class_revision, self.state.extended.overrides, self.state.storage_revision)

    def stalled_for(self) -> float:
        """Seconds since the loop last took a pod while pods may be ready; 0 while it waits for one,
        and before it runs (a new leader catching up and rolling back is no stalled loop)."""
        return 0.0 if self.queue.waiting or not self.running else time.monotonic() - self.heartbeat

    def cycle(self, pod: PodInfo) -> Coroutine[Any, Any, None] | None:
        """One scheduling cycle; for a pod no node fits, the PostFilter (preemption) to await:
        its dry runs hand the event loop back between nodes, the scheduling loop waits for it."""
        t0 = time.monotonic()
        generation = self.state.generation
        if pod.uid in self.preemptor.running:
            # Its victims are being evicted: not before that ends (upstream's PreEnqueue), when
            # _preempt ungates it.
            self.queue.gate(pod.uid)
            return None
        if self.state.special_claims.get(pod.uid):
            # A claim of an earlier attempt: never reused (as upstream); roll it back, then retry.
            self.queue.failed(pod.uid, generation, unschedulable=False)
            self._spawn(self._roll_back_stale(pod))
            return None
        try:
            result = schedule(
                pod,
                self.state,
                features=self.features,
                scoring=self.settings.scoring,
                start=self._start,
                percentage_of_nodes=self.settings.percentage_of_nodes_to_score,
                device_scoring=self.settings.device_scoring,
                binds_volumes=True,  # the binder's VolumeBinding PreBind
                binds_claims=True,  # the binder's DynamicResources PreBind for the pod's own claims
            )
        except Exception:  # a bug must not stop scheduling of every other pod
            log.exception("scheduling cycle failed", pod=pod.key)
            metrics.SCHEDULE_ATTEMPTS.labels(result="error").inc()
            self.queue.failed(pod.uid, generation, unschedulable=False)
            return None
        finally:
            metrics.CYCLE_SECONDS.observe(time.monotonic() - t0)
        if isinstance(result, Unschedulable):
            metrics.SCHEDULE_ATTEMPTS.labels(result="unschedulable").inc()
            if self.ours(pod) and (result.statuses or result.every_node is not None):
                return self._post_filter(pod, result, generation)  # a FitError: PostFilter runs
            self._unschedulable(pod, result, None, generation)
            return None
        self.preemptor.release(pod.uid)  # its decision's allocation is assumed instead
        self._start += result.nodes_evaluated
        self.state.assume_pod(pod.uid, result.node)
        if result.allocation is not None:
            self.state.assume_allocation(assumed_claim_key(pod.uid), result.allocation)
        for key, allocation in result.claim_allocations:
            # Reserve (SignalClaimPendingAllocation): under the claim's own key, so that the devices
            # are taken and other pods sharing the claim wait until its write is seen.
            self.state.assume_allocation(key, allocation)
        if result.volumes is not None and not result.volumes.empty:
            # Reserve (AssumePodVolumes): the next cycle cannot take these PVs or claims.
            self.state.storage.assume(result.volumes, result.node)
        self._spawn(self._bind(pod, result))
        return None

    async def _bind(self, pod: PodInfo, decision: Decision) -> None:
        # (the binder takes a write slot per write phase: a pod waiting for its volumes holds none)
        try:
            await self.binder.bind(pod, decision)
        except BindingFailed as failure:
            metrics.SCHEDULE_ATTEMPTS.labels(result="error").inc()
            self.state.forget_pod(pod.uid)
            log.warning("binding failed, pod requeued", pod=pod.key, node=decision.node, error=str(failure))
            if failure.pod_gone:
                self.queue.done(pod.uid)
            else:
                self.queue.failed(pod.uid, self.state.generation, unschedulable=False)
                await self.recorder.pod_event(
                    pod,
                    reason="FailedScheduling",
                    action="Scheduling",
                    note=f"Binding rejected: {failure}",
                    warning=True,
                )
            return
        except Exception:
            log.exception("binding crashed", pod=pod.key)
            self.state.forget_pod(pod.uid)
            if decision.volumes is not None:
                self.state.storage.forget(decision.volumes)
            self.queue.failed(pod.uid, self.state.generation, unschedulable=False)
            return
        metrics.SCHEDULE_ATTEMPTS.labels(result="scheduled").inc()
        if not self.ours(pod):
            metrics.ADOPTED_PODS.inc()
            log.info("default-scheduler pod adopted", pod=pod.key, node=decision.node)
        self.queue.done(pod.uid)

    async def _roll_back_stale(self, pod: PodInfo) -> None:
        actions = [
            ClaimAction(
                c.namespace,
                c.name,
                pod.name,
                pod.uid,
                "stale claim of an earlier attempt",
            )
            for c in self.state.special_claims_of(pod.uid)
        ]
        await self.releaser.run_all(actions, "rollback")
        self.queue.cluster_changed()

    def _unschedulable(self, pod: PodInfo, result: Unschedulable, outcome: Outcome | None, generation: int) -> None:
        stamp = self._inventory_stamp() if result.until_inventory_changes else None
        self.queue.failed(
            pod.uid,
            generation,
            unschedulable=True,
            unresolvable=result.unresolvable,
            stamp=stamp,
            interest=interest(result.rejecting_plugins()),
        )
        self._spawn(self._report_unschedulable(pod, result, outcome))

    async def _post_filter(self, pod: PodInfo, result: Unschedulable, generation: int) -> None:
        """PostFilter: preemption for a pod the filters turned away on every node (a FitError:
        not an error, an unsupported pod or a broken class). The dry runs hand the event loop
        back every ``scheduler_turn_seconds``; the evictions run in a task of their own; the
        devices freed are held for the pod meanwhile."""
        metrics.PREEMPTION_ATTEMPTS.inc()
        t0 = time.monotonic()
        steps = preemption(
            pod,
            self.state,
            result,
            features=self.features,
            budgets=list(self.state.budgets.values()),
            offset=random.randrange,
            releasing=self.preemptor.releasing.get(pod.uid, Releasing()),
        )
        outcome: Outcome | None = None
        try:
            while outcome is None:
                try:
                    next(steps)
                except StopIteration as done:
                    outcome = done.value
                    break
                await self._end_of_turn()
                self.heartbeat = time.monotonic()
        except Exception:  # a bug must not stop scheduling; the pod is retried
            log.exception("preemption failed", pod=pod.key)
        self.heartbeat = time.monotonic()
        current = self.state.pods.get(pod.uid)
        if current is None or not self.wants(current):
            self.queue.done(pod.uid)  # bound or gone meanwhile
            return
        if outcome is not None:
            self._act(pod, outcome, time.monotonic() - t0)
        self._unschedulable(pod, result, outcome, generation)

    def _act(self, pod: PodInfo, outcome: Outcome, seconds: float) -> None:
        chosen = outcome.chosen
        if chosen is not None:
            log.info(
                "preempting",
                pod=pod.key,
                node=chosen.node,
                victims=[v.key for v in chosen.victims],
                pdb_violations=chosen.pdb_violations,
                seconds=round(seconds, 4),
            )
            self.preemptor.chose(pod, chosen)
            self._activated.discard(pod.uid)
            # Counted on the node from now on, not when the status write comes back (upstream's
            # nominator): no pod of lower priority takes the room its victims free.
            self.state.nominate(pod.uid, chosen.node)
            self.state.mark_preempted(v.uid for v in chosen.victims)
            self.preemptor.running.add(pod.uid)  # (before the task starts: no cycle in between)
            self._spawn(self._preempt(pod, chosen))
        elif outcome.clear_nomination:
            self.preemptor.release(pod.uid)
            self.state.nominate(pod.uid, "")

    async def _preempt(self, pod: PodInfo, chosen: Candidate) -> None:
        """The evictions; once they have started, the pod back to the queue if it came by
        meanwhile (gated)."""
        await self.preemptor.actuate(pod, chosen, lambda: self.queue.ungate(pod.uid))

    async def _report_unschedulable(self, pod: PodInfo, result: Unschedulable, outcome: Outcome | None = None) -> None:
        message = result.message
        nominated: str | None = None  # unchanged
        if outcome is not None:
            if outcome.message:
                message = f"{message} {outcome.message}"
            if outcome.chosen is not None:
                nominated = outcome.chosen.node
            elif outcome.clear_nomination and pod.nominated:
                nominated = ""
        log.info("pod unschedulable", pod=pod.key, reason=message, fatal=result.fatal_kind)
        if not self.ours(pod):
            return  # adopted: kube-scheduler owns its PodScheduled condition and events
        await set_unschedulable(self.kube, pod, message, nominated)
        await self.recorder.pod_event(pod, reason="FailedScheduling", action="Scheduling", note=message, warning=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        """A write task that failed is logged and counted, never dropped in silence (the pod it
        was for is back in the queue already, or bound)."""
        self._tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        metrics.LOOP_ERRORS.labels(loop="scheduler-writes", kind=classify(error).value).inc()
        log.error("scheduler write task failed", task=getattr(task.get_coro(), "__qualname__", "?"), error=repr(error))

    def _publish_queue_depth(self) -> None:
        """At most once a second: counting is O(pending), popping is not."""
        now = time.monotonic()
        if now - self._depth_published < 1.0:
            return
        self._depth_published = now
        for queue, n in self.queue.pending().items():
            metrics.QUEUE_PENDING.labels(queue=queue).set(n)

    def cancel_writes(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self.recorder.cancel()

    async def drain(self) -> None:
        """Wait for the bindings and reports in flight, and the events queued (used on shutdown and
        in tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self.recorder.drain()
