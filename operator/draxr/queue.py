"""The scheduling queue: priority then age, exponential backoff, and parking of unschedulable pods
until the cluster changes (or a flush interval passes), like kube-scheduler's active, backoff and
unschedulable queues.

Heaps, not a scan: a burst of tens of thousands of pending pods must not cost O(pending) per pop.
Heap items are invalidated lazily: each carries the entry's ``version`` at push time, and any later
change of the entry (re-added, failed, removed) makes older items stale."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from draxr.core.requeue import ANY, ChangeLog


async def _wait_event(event: asyncio.Event, timeout: float | None) -> None:
    """Until ``event`` is set or ``timeout`` passes. asyncio.timeout, not wait_for: on Python 3.11
    wait_for drops a cancellation that arrives in the turn the event is set, and the loop of a
    replica that lost its lease would go on scheduling. (The queue's tests inject a wait on
    their fake clock.)"""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()


@dataclass
class _Entry:
    attempts: int = 0
    ready_at: float = 0.0
    parked_generation: int | None = None  # unschedulable at this cluster generation
    interest: int = ANY  # the kinds of change (core.requeue.Change) its rejecting plugins wait for
    parked_at: float = 0.0
    unresolvable: bool = False
    stamp: object = None  # unresolvable until the inventory changes: the inventory it failed against
    rejected: bool = False  # its last attempt was unschedulable (a filter said no), not an error
    # An event that moves the pod (its own update, a claim it names) came while it was in flight:
    # its attempt saw the state before it, so it is not parked (upstream's inFlightEvents).
    moved: bool = False
    # Refused at PreEnqueue (its preemption's evictions are running): waits for ``ungate`` alone,
    # no attempt counted, as upstream's gated pods in unschedulablePods.
    gated: bool = False
    # Its backoff waived when it comes back (``activate`` while it was in flight or gated).
    activated: bool = False
    version: int = 0


@dataclass
class SchedulingQueue:
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    flush_after: float = 60.0
    # Injected so tests run the queue on a fake clock without patching the module (another
    # queue in the same event loop keeps the real one).
    clock: Callable[[], float] = time.monotonic
    wait_event: Callable[[asyncio.Event, float | None], Awaitable[None]] = _wait_event
    # Which kinds of change came after a generation: a parked pod is released by a change of a kind
    # it waits for (``interest``). Without it, by any change.
    changes: ChangeLog | None = None
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _order: dict[str, tuple[int, str]] = field(default_factory=dict)  # uid -> (-priority, created)
    _in_flight: set[str] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _active: list[tuple[tuple[int, str], str, int]] = field(default_factory=list)  # (order, uid, version)
    _backoff: list[tuple[float, str, int]] = field(default_factory=list)  # (ready_at, uid, version)
    _flush: list[tuple[float, str, int]] = field(default_factory=list)  # parked: (flush at, uid, version)
    # Backing-off pods whose last attempt was unschedulable, in the order they may be taken early
    # when nothing is active: (ready_at, order, uid, version).
    _rejected: list[tuple[float, tuple[int, str], str, int]] = field(default_factory=list)
    # Parked pods a cluster change releases, by the generation they were parked at and the kinds
    # of change they wait for (the unresolvable ones wait for the flush or their own update only).
    _parked: dict[tuple[int, int], set[str]] = field(default_factory=dict)
    _scanned: int | None = None  # the generation ``_parked`` was last scanned at (None: scan again)
    # Unresolvable pods that an inventory change (classes, slices, mappings) may heal.
    _stamped: set[str] = field(default_factory=set)
    _stamp: object = None  # the inventory stamp seen at the last promotion

    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    waiting: bool = False  # pop() is waiting: nothing is ready
    woke_at: float = 0.0  # when pop() last returned from waiting (the loop was handed back then)

    def _next_version(self) -> int:
        """Queue-wide, never reused: a pod removed and added again must not revive its old items."""
        return next(self._versions)

    # ---- placing an entry in one of the queues ----------------------------------------------------
    def _place(self, uid: str, entry: _Entry, now: float) -> None:
        entry.version = self._next_version()
        if uid in self._in_flight or entry.gated:
            return  # placed again when it comes back (failed), is ungated, or forgotten (done)
        if entry.parked_generation is not None:
            if not entry.unresolvable:
                self._parked.setdefault((entry.parked_generation, entry.interest), set()).add(uid)
                self._scanned = None
            elif entry.stamp is not None:
                self._stamped.add(uid)
            heapq.heappush(self._flush, (entry.parked_at + self.flush_after, uid, entry.version))
        else:
            self._release(uid, entry, now)

    def _release(self, uid: str, entry: _Entry, now: float) -> None:
        """To the backoff heap, or straight to the active one. A released parked pod keeps its
        ``parked_generation``: the eligibility rule (``_eligible``) reads it."""
        entry.version = self._next_version()
        if entry.ready_at > now:
            heapq.heappush(self._backoff, (entry.ready_at, uid, entry.version))
            if entry.rejected:
                heapq.heappush(self._rejected, (entry.ready_at, self._order.get(uid, (0, "")), uid, entry.version))
        else:
            heapq.heappush(self._active, (self._order.get(uid, (0, "")), uid, entry.version))

    def _current(self, uid: str, version: int) -> _Entry | None:
        entry = self._entries.get(uid)
        return entry if entry is not None and entry.version == version and uid not in self._in_flight else None

    # ---- the API ------------------------------------------------------------------------------------
    def add(self, uid: str, priority: int, created: str) -> None:
        """A pending pod appeared or changed: make it eligible now (its backoff still applies). A
        pod in flight is marked ``moved`` instead: its attempt, if unschedulable, does not park it."""
        self._order[uid] = (-priority, created)
        entry = self._entries.setdefault(uid, _Entry())
        if uid in self._in_flight:
            entry.moved = True
        entry.parked_generation = None
        entry.unresolvable = False
        entry.stamp = None
        self._place(uid, entry, self.clock())
        self._wake.set()

    def uids(self) -> list[str]:
        """Every pod in the queue: waiting, backing off, parked or being bound."""
        return list(self._entries)

    def known(self, uid: str) -> bool:
        return uid in self._entries

    def remove(self, uid: str) -> None:
        self._entries.pop(uid, None)
        self._order.pop(uid, None)

    def done(self, uid: str) -> None:
        """Bound: forget it."""
        self._in_flight.discard(uid)
        self.remove(uid)

    def in_flight(self) -> frozenset[str]:
        """A copy: for callers that keep it (the per-event checks ask ``is_in_flight``)."""
        return frozenset(self._in_flight)

    def is_in_flight(self, uid: str) -> bool:
        """Taken by ``pop`` and not yet back (failed) or forgotten (done): being bound."""
        return uid in self._in_flight

    def failed(
        self,
        uid: str,
        generation: int,
        *,
        unschedulable: bool,
        unresolvable: bool = False,
        stamp: object = None,
        interest: int = ANY,
    ) -> None:
        """Back off; an unschedulable pod also waits for a cluster change of a kind in ``interest``
        (core.requeue: what its rejecting plugins registered for), or its own update. An
        unresolvable one waits for its own update, or, given the inventory ``stamp`` it failed
        against, for a different stamp (see ``pop``)."""
        self._in_flight.discard(uid)
        entry = self._entries.get(uid)
        if entry is None:
            return
        entry.attempts += 1
        now = self.clock()
        entry.ready_at = now + min(self.backoff_max, self.backoff_initial * 2 ** (entry.attempts - 1))
        if entry.activated:  # (upstream's ForceActivate event in flight: to activeQ)
            entry.ready_at, entry.activated, entry.moved = now, False, True
        # Moved while in flight: to backoff at once, as upstream's queueing hint for an in-flight
        # event (the unresolvable ones too: their own update is what heals them).
        parks = unschedulable and not entry.moved
        entry.moved = False
        entry.parked_generation = generation if parks else None
        entry.interest = interest
        entry.rejected = unschedulable
        entry.parked_at = now
        entry.unresolvable = unresolvable and parks
        entry.stamp = stamp if entry.unresolvable else None
        self._place(uid, entry, now)
        self._wake.set()

    def gate(self, uid: str) -> None:
        """Popped, but its PreEnqueue refuses it (its preemption's evictions are running): back
        without an attempt counted, eligible again only after ``ungate``."""
        self._in_flight.discard(uid)
        entry = self._entries.get(uid)
        if entry is None:
            return
        entry.moved = False
        entry.gated = True
        entry.parked_generation, entry.unresolvable, entry.stamp = None, False, None
        entry.version = self._next_version()  # (its older heap items are stale)

    def ungate(self, uid: str) -> None:
        """What refused it at PreEnqueue is over: back to the queues, its backoff still applies
        (upstream's pod leaves unschedulablePods when the last victim's deletion is seen). A pod
        that was not gated is left as it is."""
        entry = self._entries.get(uid)
        if entry is None or not entry.gated:
            return
        entry.gated = False
        now = self.clock()
        if entry.activated:
            entry.ready_at, entry.activated = now, False
        self._place(uid, entry, now)
        self._wake.set()

    def activate(self, uid: str) -> None:
        """Retry it now, its backoff waived (upstream's Activate): for a preemptor once the room it
        preempted for is free. kube-scheduler retries such a pod at once in effect (its active
        queue is empty then, and it pops from backoff); draxr's cycles are slower and its active
        queue may not be. In flight or gated: when it comes back."""
        entry = self._entries.get(uid)
        if entry is None:
            return
        if uid in self._in_flight or entry.gated:
            entry.activated = True
            return
        now = self.clock()
        entry.ready_at = now
        entry.parked_generation, entry.unresolvable, entry.stamp = None, False, None
        self._place(uid, entry, now)
        self._wake.set()

    def cluster_changed(self) -> None:
        self._wake.set()

    def pending(self) -> dict[str, int]:
        counts = {"active": 0, "backoff": 0, "unschedulable": 0, "binding": len(self._in_flight)}
        now = self.clock()
        for uid, e in self._entries.items():
            if uid in self._in_flight:
                continue
            if e.gated or e.parked_generation is not None:
                counts["unschedulable"] += 1
            elif e.ready_at > now:
                counts["backoff"] += 1
            else:
                counts["active"] += 1
        return counts

    def _eligible(self, e: _Entry, now: float, generation: int) -> bool:
        if e.gated or e.ready_at > now:
            return False
        if e.parked_generation is None:
            return True
        if now - e.parked_at >= self.flush_after:
            return True
        if e.unresolvable:
            return e.stamp is not None and e.stamp != self._stamp
        return self._changed_for(e.parked_generation, e.interest, generation)

    def _changed_for(self, parked_at: int, interest: int, generation: int) -> bool:
        """A change the pod parked at ``parked_at`` waits for came since."""
        if generation == parked_at:
            return False
        return self.changes is None or bool(self.changes.since(parked_at) & interest)

    def _promote(self, now: float, generation: int, stamp: object = None) -> None:
        """Move what became eligible towards the active heap: parked pods after a cluster change
        (the unresolvable ones only after an inventory change, when they failed against one),
        parked pods whose flush interval is over, and pods whose backoff is over."""
        if stamp is not None and stamp != self._stamp:
            self._stamp = stamp
            for uid in list(self._stamped):
                e = self._entries.get(uid)
                if e is None or not e.unresolvable or e.stamp is None or uid in self._in_flight:
                    self._stamped.discard(uid)  # re-added, failed otherwise since, or gone
                elif e.stamp != stamp:
                    self._stamped.discard(uid)
                    self._release(uid, e, now)
        if self._scanned != generation:  # (nothing parked since, no change since: nothing to release)
            self._scanned = generation
            if len(self._parked) > 2 * len(self._entries) + 1024:
                self._reindex_parked()
            for key in [k for k in self._parked if self._changed_for(k[0], k[1], generation)]:
                for uid in self._parked.pop(key):
                    e = self._entries.get(uid)  # the sets hold no versions: is it still parked there?
                    if (
                        e is not None
                        and (e.parked_generation, e.interest) == key
                        and not e.unresolvable
                        and uid not in self._in_flight
                    ):
                        self._release(uid, e, now)
        while self._flush and self._flush[0][0] <= now:
            _, uid, version = heapq.heappop(self._flush)
            flushed = self._current(uid, version)
            if flushed is not None:
                self._release(uid, flushed, now)
        while self._backoff and self._backoff[0][0] <= now:
            _, uid, version = heapq.heappop(self._backoff)
            ready = self._current(uid, version)
            if ready is not None:
                self._release(uid, ready, now)

    def _reindex_parked(self) -> None:
        """Rebuilt from the entries: a group waiting for a kind of change that does not come keeps
        the uids of pods flushed, re-added or gone since."""
        self._parked = {}
        for uid, e in self._entries.items():
            if e.parked_generation is not None and not e.unresolvable and not e.gated and uid not in self._in_flight:
                self._parked.setdefault((e.parked_generation, e.interest), set()).add(uid)

    def _take(self, uid: str, entry: _Entry) -> str:
        """In flight from now: the events that move it are recorded (``moved``) until it is back."""
        self._in_flight.add(uid)
        entry.moved = False
        return uid

    def next_ready(self, generation: int, stamp: object = None) -> tuple[str | None, float | None]:
        """The best eligible pod, or how long until one may become eligible by time alone.

        With nothing eligible, a pod that is still backing off after an unschedulable attempt (a
        cluster change or its own update released it) is taken at once, the one whose backoff ends
        first: kube-scheduler's SchedulerPopFromBackoffQ (on since 1.33), so that a pod waiting for
        a device is retried as soon as the claim that held it is released, not seconds later.
        Pods backing off after an error still wait out their backoff."""
        now = self.clock()
        self._promote(now, generation, stamp)
        while self._active:
            _, uid, version = heapq.heappop(self._active)
            if (taken := self._current(uid, version)) is not None:
                return self._take(uid, taken), None
        while self._rejected:
            _, _, uid, version = heapq.heappop(self._rejected)
            if (taken := self._current(uid, version)) is not None:
                return self._take(uid, taken), None
        tops = [heap[0][0] - now for heap in (self._backoff, self._flush) if heap]
        # A stale top only makes the wait shorter (a spurious wake-up), never longer.
        return None, (max(min(tops), 0.0) if tops else None)

    async def pop(self, generation: Callable[[], int], stamp: Callable[[], object] | None = None) -> str:
        """The next pod to schedule. ``stamp`` reads the current inventory stamp (classes, slices,
        mappings): pods parked as unresolvable against another stamp are retried."""
        while True:
            uid, wait = self.next_ready(generation(), stamp() if stamp is not None else None)
            if uid is not None:
                return uid
            self._wake.clear()
            self.waiting = True
            try:
                await self.wait_event(self._wake, None if wait is None else max(wait, 0.01))
            finally:
                self.waiting = False
                self.woke_at = self.clock()


__all__ = ["SchedulingQueue"]
