"""The O(pending) scheduling queue that draxr.queue replaced, kept as the oracle of a model-based test:
the heap-based queue must hand out exactly the same pods in the same order."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from draxr.core.requeue import ANY, ChangeLog


@dataclass
class _Entry:
    attempts: int = 0
    ready_at: float = 0.0
    parked_generation: int | None = None  # unschedulable at this cluster generation
    parked_at: float = 0.0
    unresolvable: bool = False
    rejected: bool = False  # the last attempt was unschedulable
    moved: bool = False  # added while in flight: its unschedulable attempt does not park it
    gated: bool = False  # refused at PreEnqueue: waits for ungate
    interest: int = ANY  # the kinds of change it waits for


@dataclass
class SchedulingQueue:
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    flush_after: float = 60.0
    changes: ChangeLog | None = None
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _order: dict[str, tuple[int, str]] = field(default_factory=dict)  # uid -> (-priority, created)
    _in_flight: set[str] = field(default_factory=set)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, uid: str, priority: int, created: str) -> None:
        """A pending pod appeared or changed: make it eligible now (its backoff still applies)."""
        self._order[uid] = (-priority, created)
        entry = self._entries.setdefault(uid, _Entry())
        if uid in self._in_flight:
            entry.moved = True
        entry.parked_generation = None
        entry.unresolvable = False
        self._wake.set()

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
        return frozenset(self._in_flight)

    def failed(
        self, uid: str, generation: int, *, unschedulable: bool, unresolvable: bool = False, interest: int = ANY
    ) -> None:
        """Back off; an unschedulable pod also waits for a cluster change (or its own update)."""
        self._in_flight.discard(uid)
        entry = self._entries.get(uid)
        if entry is None:
            return
        entry.attempts += 1
        now = time.monotonic()
        entry.ready_at = now + min(self.backoff_max, self.backoff_initial * 2 ** (entry.attempts - 1))
        parks = unschedulable and not entry.moved
        entry.moved = False
        entry.parked_generation = generation if parks else None
        entry.interest = interest
        entry.rejected = unschedulable
        entry.parked_at = now
        entry.unresolvable = unresolvable and parks
        self._wake.set()

    def gate(self, uid: str) -> None:
        self._in_flight.discard(uid)
        entry = self._entries.get(uid)
        if entry is not None:
            entry.moved = False
            entry.gated = True
            entry.parked_generation, entry.unresolvable = None, False

    def ungate(self, uid: str) -> None:
        entry = self._entries.get(uid)
        if entry is not None and entry.gated:
            entry.gated = False
            self._wake.set()

    def cluster_changed(self) -> None:
        self._wake.set()

    def pending(self) -> dict[str, int]:
        counts = {"active": 0, "backoff": 0, "unschedulable": 0, "binding": len(self._in_flight)}
        now = time.monotonic()
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
        if e.ready_at > now:
            return False
        if e.parked_generation is None:
            return True
        if now - e.parked_at >= self.flush_after:
            return True
        return not e.unresolvable and self._changed(e, generation)

    def _changed(self, e: _Entry, generation: int) -> bool:
        if generation == e.parked_generation or e.parked_generation is None:
            return False
        return self.changes is None or bool(self.changes.since(e.parked_generation) & e.interest)

    def next_ready(self, generation: int) -> tuple[str | None, float | None]:
        """The best eligible pod, or how long until one may become eligible by time alone."""
        now = time.monotonic()
        best: tuple[tuple[int, str], str] | None = None
        wait: float | None = None
        for uid, e in self._entries.items():
            if uid in self._in_flight or e.gated:
                continue
            if self._eligible(e, now, generation):
                cand = (self._order.get(uid, (0, "")), uid)
                if best is None or cand < best:
                    best = cand
                continue
            until = e.ready_at - now if e.ready_at > now else e.parked_at + self.flush_after - now
            wait = until if wait is None else min(wait, until)
        if best is None:
            # Nothing eligible: the released pod backing off after an unschedulable attempt whose
            # backoff ends first (SchedulerPopFromBackoffQ).
            early = min(
                (
                    (e.ready_at, self._order.get(uid, (0, "")), uid)
                    for uid, e in self._entries.items()
                    if uid not in self._in_flight
                    and not e.gated
                    and e.rejected
                    and e.ready_at > now
                    and self._released(e, now, generation)
                ),
                default=None,
            )
            if early is None:
                return None, wait
            best = (early[1], early[2])
        self._in_flight.add(best[1])
        self._entries[best[1]].moved = False
        return best[1], None

    def _released(self, e: _Entry, now: float, generation: int) -> bool:
        """No longer parked: never parked since, flushed, or a cluster change came."""
        if e.parked_generation is None or now - e.parked_at >= self.flush_after:
            return True
        return not e.unresolvable and self._changed(e, generation)

    async def pop(self, generation: Callable[[], int]) -> str:
        while True:
            uid, wait = self.next_ready(generation())
            if uid is not None:
                return uid
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=None if wait is None else max(wait, 0.01))


__all__ = ["SchedulingQueue"]
