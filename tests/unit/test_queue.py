"""draxr.queue.SchedulingQueue: priority then age, exponential backoff, parking of unschedulable
pods until the cluster changes (or a flush interval passes), no pod handed out twice."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.requeue import ANY, Change, ChangeLog, interest
from draxr.queue import SchedulingQueue


class Clock:
    """draxr.queue's clock, and its timed waits on that clock: a wait with a timeout ends when the
    queue's wake-up event is set or when the test advances the clock past the timeout, never by
    itself. Records each timeout the queue waits with (None: no timeout)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.waits: list[float | None] = []
        self.checks = 0  # how often a wait looked at the clock
        self._ticked = asyncio.Event()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._ticked.set()
        self._ticked = asyncio.Event()

    async def wait_for(self, aw: Awaitable[object], timeout: float | None) -> object:
        """asyncio.wait_for on this clock."""
        self.waits.append(timeout)
        task = asyncio.ensure_future(aw)
        deadline = None if timeout is None else self.now + timeout
        try:
            while not task.done():
                self.checks += 1
                if deadline is not None and self.now >= deadline:
                    raise TimeoutError
                tick = asyncio.ensure_future(self._ticked.wait())
                await asyncio.wait([task, tick], return_when=asyncio.FIRST_COMPLETED)
                tick.cancel()
            return task.result()
        finally:
            task.cancel()

    async def wait_event(self, event: asyncio.Event, timeout: float | None) -> None:
        """The queue's timed wait for its wake-up event, on this clock."""
        with contextlib.suppress(TimeoutError):
            await self.wait_for(event.wait(), timeout)


@pytest.fixture
def clock() -> Clock:
    """The queue's view of time and its timed waits (the event loop keeps the real clock, but
    nothing here waits on it). Injected, not patched into draxr.queue: a queue that another test
    left running in the session's event loop must not record its waits here."""
    return Clock()


def queue(clock: Clock, initial: float = 1.0, maximum: float = 8.0, flush: float = 60.0) -> SchedulingQueue:
    return SchedulingQueue(
        backoff_initial=initial, backoff_max=maximum, flush_after=flush, clock=clock, wait_event=clock.wait_event
    )


def drain(q: SchedulingQueue, generation: int = 0) -> list[str]:
    out = []
    while (uid := q.next_ready(generation)[0]) is not None:
        out.append(uid)
    return out


# --------------------------------------------------------------------------- order and hand-out


def test_priority_then_creation_then_uid(clock: Clock) -> None:
    q = queue(clock)
    q.add("old-low", 0, "2026-01-01T00:00:00Z")
    q.add("new-high", 10, "2026-01-01T00:00:09Z")
    q.add("old-high", 10, "2026-01-01T00:00:05Z")
    q.add("negative", -5, "2025-01-01T00:00:00Z")
    q.add("b-same", 0, "2026-01-01T00:00:03Z")
    q.add("a-same", 0, "2026-01-01T00:00:03Z")
    assert drain(q) == ["old-high", "new-high", "old-low", "a-same", "b-same", "negative"]


def test_add_again_updates_the_order(clock: Clock) -> None:
    q = queue(clock)
    q.add("a", 0, "2026-01-01T00:00:00Z")
    q.add("b", 0, "2026-01-01T00:00:01Z")
    q.add("b", 100, "2026-01-01T00:00:01Z")  # its priority was raised
    assert drain(q) == ["b", "a"]


def test_in_flight_pods_are_not_handed_out_twice(clock: Clock) -> None:
    q = queue(clock)
    q.add("a", 0, "t1")
    q.add("b", 0, "t2")
    assert q.next_ready(0) == ("a", None)
    assert q.in_flight() == {"a"}
    q.add("a", 0, "t1")  # an update while it is being scheduled or bound
    assert q.next_ready(0) == ("b", None)
    assert q.next_ready(0) == (None, None)  # everything in flight; nothing to wait for by time
    assert q.in_flight() == {"a", "b"}
    q.done("a")
    assert not q.known("a")
    assert q.in_flight() == {"b"}
    assert q.next_ready(0) == (None, None)


def test_remove_and_known(clock: Clock) -> None:
    q = queue(clock)
    assert not q.known("a")
    q.add("a", 0, "t")
    assert q.known("a")
    q.remove("a")
    assert not q.known("a")
    assert q.next_ready(0) == (None, None)
    q.remove("a")  # twice: fine


def test_pod_removed_while_in_flight(clock: Clock) -> None:
    q = queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.remove("a")  # deleted while binding
    assert q.pending()["binding"] == 1
    q.failed("a", 0, unschedulable=False)  # the binding then fails: nothing to requeue
    assert not q.known("a")
    assert q.in_flight() == frozenset()
    assert q.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "binding": 0}
    q.failed("never-seen", 0, unschedulable=True)  # unknown: ignored


# --------------------------------------------------------------------------- backoff


def test_backoff_doubles_up_to_max(clock: Clock) -> None:
    q = queue(clock, initial=1.0, maximum=8.0)
    q.add("a", 0, "t")
    waits = []
    for _ in range(6):
        assert q.next_ready(0)[0] == "a"
        q.failed("a", 0, unschedulable=False)
        uid, wait = q.next_ready(0)
        assert uid is None
        waits.append(wait)
        clock.advance(wait - 0.001)  # type: ignore[operator]
        assert q.next_ready(0) == (None, pytest.approx(0.001))
        clock.advance(0.001)
    assert waits == pytest.approx([1.0, 2.0, 4.0, 8.0, 8.0, 8.0])
    assert q.next_ready(0)[0] == "a"


def test_add_keeps_the_backoff(clock: Clock) -> None:
    q = queue(clock, initial=2.0)
    q.add("a", 0, "t")
    q.next_ready(0)
    q.failed("a", 0, unschedulable=False)
    q.add("a", 0, "t")  # the pod was updated: still backs off
    assert q.next_ready(0) == (None, pytest.approx(2.0))
    clock.advance(2.0)
    assert q.next_ready(0)[0] == "a"


def test_done_resets_attempts(clock: Clock) -> None:
    q = queue(clock, initial=1.0)
    q.add("a", 0, "t")
    for _ in range(3):
        q.next_ready(0)
        q.failed("a", 0, unschedulable=False)
        clock.advance(10)
    q.next_ready(0)
    q.done("a")
    q.add("a", 0, "t")  # the same uid comes back (e.g. the watch replays it)
    q.next_ready(0)
    q.failed("a", 0, unschedulable=False)
    assert q.next_ready(0) == (None, pytest.approx(1.0))


def test_error_failure_ignores_generation(clock: Clock) -> None:
    q = queue(clock, initial=1.0)
    q.add("a", 0, "t")
    q.next_ready(5)
    q.failed("a", 5, unschedulable=False)
    clock.advance(1.0)
    assert q.next_ready(5)[0] == "a"  # no cluster change needed


# --------------------------------------------------------------------------- parking


def test_unschedulable_waits_for_a_cluster_change(clock: Clock) -> None:
    q = queue(clock, initial=1.0, flush=60.0)
    q.add("a", 0, "t")
    q.next_ready(5)
    q.failed("a", 5, unschedulable=True)
    clock.advance(1.0)  # backoff over, but nothing changed
    assert q.next_ready(5) == (None, pytest.approx(59.0))
    assert q.next_ready(6)[0] == "a"


def test_a_parked_pod_waits_for_a_change_its_rejecting_plugins_registered_for(clock: Clock) -> None:
    """Upstream's queueing hints, by kind (core.requeue): a pod short of devices is not retried
    because a pod was deleted elsewhere, only when a claim is freed (or a slice, class, node
    changes); a pod short of cpu is retried on the deletion."""
    changes = ChangeLog()
    q = queue(clock, initial=1.0, flush=60.0)
    q.changes = changes
    q.add("devices", 0, "t1")
    q.add("cpu", 0, "t2")
    assert drain(q, changes.generation) == ["devices", "cpu"]
    q.failed("devices", changes.generation, unschedulable=True, interest=interest(["DynamicResources"]))
    q.failed("cpu", changes.generation, unschedulable=True, interest=interest(["NodeResourcesFit"]))
    clock.advance(2.0)  # both backoffs over
    changes.record(Change.POD_FREED)
    assert drain(q, changes.generation) == ["cpu"]
    changes.record(Change.POD_PLACED)  # (nothing either waits for)
    assert drain(q, changes.generation) == []
    changes.record(Change.CLAIM_FREED)
    assert drain(q, changes.generation) == ["devices"]


def test_a_change_while_a_pod_is_in_flight_releases_it_only_if_it_waits_for_that_kind(clock: Clock) -> None:
    """Parked at the generation its attempt started: a change of its kind that came meanwhile
    releases it at once; one of another kind does not."""
    changes = ChangeLog()
    q = queue(clock, initial=1.0, flush=60.0)
    q.changes = changes
    q.add("a", 0, "t1")
    q.add("b", 0, "t2")
    started = changes.generation
    assert drain(q, started) == ["a", "b"]
    changes.record(Change.SLICE)  # while both are in flight
    q.failed("a", started, unschedulable=True, interest=interest(["DynamicResources"]))
    q.failed("b", started, unschedulable=True, interest=interest(["NodeAffinity"]))
    clock.advance(2.0)
    assert drain(q, changes.generation) == ["a"]


def test_a_rejection_naming_no_known_plugin_waits_for_any_change(clock: Clock) -> None:
    assert interest([]) == interest(["SomeOutOfTreePlugin", "NodeResourcesFit"]) == ANY
    changes = ChangeLog()
    q = queue(clock, initial=1.0, flush=60.0)
    q.changes = changes
    q.add("a", 0, "t")
    assert drain(q, changes.generation) == ["a"]
    q.failed("a", changes.generation, unschedulable=True, interest=interest([]))
    clock.advance(2.0)
    changes.record(Change.NAMESPACE)
    assert drain(q, changes.generation) == ["a"]


def test_unschedulable_pod_released_by_a_change_is_taken_early_when_nothing_is_active(clock: Clock) -> None:
    """kube-scheduler's SchedulerPopFromBackoffQ: a pod a change released (a claim was freed) is
    retried at once when nothing else waits, not after its backoff."""
    q = queue(clock, initial=1.0, maximum=8.0)
    q.add("a", 0, "t")
    for gen in (1, 2, 3, 4):  # four unschedulable attempts: its backoff is 8 s now
        assert q.next_ready(gen)[0] == "a"
        q.failed("a", gen, unschedulable=True)
    assert q.next_ready(4)[0] is None  # parked: nothing changed since its last attempt
    assert q.next_ready(5) == ("a", None)  # released, backing off, nothing active: taken at once
    assert q.in_flight() == {"a"}


def test_active_pods_go_before_an_early_taken_one(clock: Clock) -> None:
    q = queue(clock, initial=4.0)
    q.add("waiting", 10, "t0")  # ranks higher than "new" in the active order
    q.next_ready(1)
    q.failed("waiting", 1, unschedulable=True)
    q.add("new", 0, "t1")
    assert q.next_ready(2)[0] == "new"  # the active pod first, whatever its rank
    assert q.next_ready(2)[0] == "waiting"  # then the backing-off one, early


def test_early_taking_goes_by_backoff_end_then_rank(clock: Clock) -> None:
    q = queue(clock, initial=2.0)
    for uid, prio in (("low", 0), ("high", 5), ("later", 9)):
        q.add(uid, prio, "t")
    assert [q.next_ready(1)[0] for _ in range(3)] == ["later", "high", "low"]  # by rank
    q.failed("low", 1, unschedulable=True)
    q.failed("high", 1, unschedulable=True)
    clock.advance(1.0)
    q.failed("later", 1, unschedulable=True)  # its backoff ends 1 s after the others'
    assert [q.next_ready(2)[0] for _ in range(3)] == ["high", "low", "later"]


def test_a_pod_backing_off_after_an_error_waits_its_backoff_out(clock: Clock) -> None:
    q = queue(clock, initial=1.0)
    q.add("a", 0, "t")
    q.next_ready(5)
    q.failed("a", 5, unschedulable=False)  # an API error, not a filter: no early retry
    assert q.next_ready(6) == (None, pytest.approx(1.0))
    clock.advance(1.0)
    assert q.next_ready(6)[0] == "a"


def test_a_rejected_pod_updated_while_backing_off_is_taken_early(clock: Clock) -> None:
    """Its own update releases it as a change would (upstream: backoffQ with its rejecting plugins)."""
    q = queue(clock, initial=4.0)
    q.add("a", 0, "t")
    q.next_ready(1)
    q.failed("a", 1, unschedulable=True)
    q.add("a", 0, "t")  # the pod changed
    assert q.next_ready(1) == ("a", None)


def test_unschedulable_is_flushed_after_the_interval(clock: Clock) -> None:
    q = queue(clock, initial=1.0, flush=30.0)
    q.add("a", 0, "t")
    q.next_ready(5)
    q.failed("a", 5, unschedulable=True)
    clock.advance(29.9)
    assert q.next_ready(5)[0] is None
    clock.advance(0.1)
    assert q.next_ready(5)[0] == "a"


def test_unschedulable_pod_update_makes_it_eligible(clock: Clock) -> None:
    q = queue(clock, initial=1.0)
    q.add("a", 0, "t")
    q.next_ready(5)
    q.failed("a", 5, unschedulable=True)
    clock.advance(1.0)
    q.add("a", 0, "t")
    assert q.next_ready(5)[0] == "a"


def test_unresolvable_waits_only_for_its_own_update_or_the_flush(clock: Clock) -> None:
    q = queue(clock, initial=1.0, flush=30.0)
    q.add("a", 0, "t")
    q.add("b", 0, "t")
    for uid in ("a", "b"):
        assert q.next_ready(5)[0] == uid
        q.failed(uid, 5, unschedulable=True, unresolvable=True)
    clock.advance(1.0)
    assert q.next_ready(6)[0] is None  # cluster changes do not help
    assert q.next_ready(99)[0] is None
    q.add("a", 0, "t")  # its own update
    assert q.next_ready(99)[0] == "a"
    assert q.next_ready(99)[0] is None
    clock.advance(29.0)
    assert q.next_ready(5)[0] == "b"


def test_pending_counts(clock: Clock) -> None:
    q = queue(clock, initial=1.0)
    assert q.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "binding": 0}
    for uid in ("a", "b", "c", "d", "e"):
        q.add(uid, 0, uid)
    assert q.pending() == {"active": 5, "backoff": 0, "unschedulable": 0, "binding": 0}
    assert drain(q) == ["a", "b", "c", "d", "e"]  # all five are now in flight
    assert q.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "binding": 5}
    q.failed("a", 0, unschedulable=False)
    q.failed("b", 0, unschedulable=True)
    q.failed("c", 0, unschedulable=True, unresolvable=True)
    q.done("d")
    assert q.pending() == {"active": 0, "backoff": 1, "unschedulable": 2, "binding": 1}
    clock.advance(1.0)
    assert q.pending() == {"active": 1, "backoff": 0, "unschedulable": 2, "binding": 1}


# --------------------------------------------------------------------------- property


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "next", "fail", "park", "done", "remove", "tick", "change"]),
            st.sampled_from("abcd"),
            st.integers(0, 3),
        ),
        max_size=40,
    )
)
def test_no_pod_is_handed_out_twice(ops: list[tuple[str, str, int]]) -> None:
    """Whatever happens, a pod handed out is not handed out again until done/failed, and the
    hand-out order is priority first, then creation."""
    clock = Clock()
    q = queue(clock, initial=1.0, maximum=4.0, flush=10.0)
    prio: dict[str, int] = {}
    out: set[str] = set()
    gen = 0
    for op, uid, n in ops:
        if op == "add":
            q.add(uid, n, f"t{uid}")
            prio[uid] = n
        elif op == "next":
            got, _ = q.next_ready(gen)
            if got is not None:
                assert got not in out
                assert got in prio
                # Nothing eligible that ranks strictly higher is left waiting.
                for other in list(prio):
                    if other not in out and other != got and q._eligible(q._entries[other], clock(), gen):
                        assert (-prio[got], f"t{got}", got) < (-prio[other], f"t{other}", other)
                out.add(got)
        elif op in ("fail", "park") and uid in out:
            q.failed(uid, gen, unschedulable=op == "park")
            out.discard(uid)
        elif op == "done" and uid in out:
            q.done(uid)
            out.discard(uid)
            prio.pop(uid, None)
        elif op == "remove":  # also while in flight (the pod was deleted)
            q.remove(uid)
            prio.pop(uid, None)
        elif op == "tick":
            clock.advance(n * 1.5)
        elif op == "change":
            gen += 1
        assert q.in_flight() == out
        assert sum(q.pending().values()) == len(prio) + len(out - set(prio))


# --------------------------------------------------------------------------- pop (on the fake clock)

GUARD = 10.0  # real seconds: only a hang guard, every wait below runs on the fake clock


async def _settle(q: SchedulingQueue, clock: Clock, waits: int) -> None:
    """Until pop() waits for the ``waits``-th time (it evaluated the queue again, and waits again)."""
    for _ in range(1000):
        if q.waiting and len(clock.waits) >= waits:
            return
        await asyncio.sleep(0)
    pytest.fail(f"pop() did not wait {waits} times: {clock.waits}, waiting={q.waiting}")


async def _advance(clock: Clock, seconds: float) -> None:
    """Advance the clock, and return once the waiting pop() has looked at it."""
    seen = clock.checks
    clock.advance(seconds)
    for _ in range(1000):
        if clock.checks > seen:
            return
        await asyncio.sleep(0)
    pytest.fail("nothing waited on the clock")


async def test_pop_returns_ready_pod_at_once(clock: Clock) -> None:
    q = queue(clock, initial=5.0)
    q.add("a", 0, "t")
    assert await asyncio.wait_for(q.pop(lambda: 0), GUARD) == "a"
    assert clock.waits == []  # never waited
    assert q.in_flight() == {"a"}


async def test_pop_waits_out_the_backoff(clock: Clock) -> None:
    q = queue(clock, initial=5.0, maximum=8.0)
    q.add("a", 0, "t")
    await q.pop(lambda: 0)
    q.failed("a", 0, unschedulable=False)
    task = asyncio.ensure_future(q.pop(lambda: 0))
    await _settle(q, clock, 1)
    assert clock.waits == [pytest.approx(5.0)]  # until the backoff is over, not longer
    await _advance(clock, 4.999)  # the wait sees it and goes on waiting: no new wait, no hand-out
    assert not task.done()
    assert clock.waits == [pytest.approx(5.0)]
    clock.advance(0.001)
    assert await asyncio.wait_for(task, GUARD) == "a"
    assert clock.now == pytest.approx(1005.0)
    assert clock.waits == [pytest.approx(5.0)]  # one wait, ended by its timeout


async def test_pop_wakes_on_add(clock: Clock) -> None:
    q = queue(clock)
    task = asyncio.ensure_future(q.pop(lambda: 0))
    await _settle(q, clock, 1)
    assert clock.waits == [None]  # nothing can become ready by time alone: no timeout
    assert not task.done()
    q.add("a", 0, "t")
    assert await asyncio.wait_for(task, GUARD) == "a"
    assert clock.now == 1000.0


async def test_pop_wakes_a_parked_pod_on_cluster_change(clock: Clock) -> None:
    q = queue(clock, initial=1.0, flush=60.0)
    q.add("a", 0, "t")
    await q.pop(lambda: 0)
    generation = [1]
    q.failed("a", 1, unschedulable=True)
    task = asyncio.ensure_future(q.pop(lambda: generation[0]))
    await _settle(q, clock, 1)
    assert clock.waits == [pytest.approx(60.0)]  # parked: by time alone, only the flush releases it
    q.cluster_changed()  # a wake-up without a new generation does not release it
    await _settle(q, clock, 2)
    assert clock.waits[1] == pytest.approx(60.0)
    assert not task.done()
    generation[0] = 2
    q.cluster_changed()  # released: backing off still, but nothing else waits, so taken at once
    assert await asyncio.wait_for(task, GUARD) == "a"
    assert clock.now == pytest.approx(1000.0)
    assert len(clock.waits) == 2


async def test_pop_flushes_unresolvable_pod_after_the_interval(clock: Clock) -> None:
    q = queue(clock, initial=1.0, flush=30.0)
    q.add("a", 0, "t")
    await q.pop(lambda: 0)
    generation = [0]
    q.failed("a", 0, unschedulable=True, unresolvable=True)
    task = asyncio.ensure_future(q.pop(lambda: generation[0]))
    await _settle(q, clock, 1)
    assert clock.waits == [pytest.approx(30.0)]
    generation[0] = 1
    q.cluster_changed()  # a cluster change does not help an unresolvable pod
    await _settle(q, clock, 2)
    assert clock.waits[1] == pytest.approx(30.0)
    assert not task.done()
    await _advance(clock, 29.999)  # the wait sees it and goes on waiting
    assert not task.done()
    assert len(clock.waits) == 2
    clock.advance(0.001)
    assert await asyncio.wait_for(task, GUARD) == "a"
    assert clock.now == pytest.approx(1030.0)


# --------------------------------------------------------------------------- against the old queue

_KINDS = (Change.POD_FREED, Change.CLAIM_FREED, Change.NODE_UPDATED, Change.SLICE)


@settings(max_examples=600, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(
                ["add", "next", "next", "fail", "park", "stuck", "done", "remove", "tick", "change", "gate", "ungate"]
            ),
            st.sampled_from("abc"),
            st.integers(0, 3),
        ),
        max_size=80,
    )
)
def test_hands_out_exactly_what_the_scanning_queue_did(ops: list[tuple[str, str, int]]) -> None:
    """The heap-based queue against the O(pending) one it replaced (tests/unit/reference_queue.py):
    the same pod (or none) at every step, under adds, failures, parking, removal, time and changes."""
    from tests.unit import reference_queue

    clock = Clock()
    saved = reference_queue.time
    reference_queue.time = SimpleNamespace(monotonic=clock)  # type: ignore[assignment]
    try:
        changes = ChangeLog()
        new = queue(clock, initial=1.0, maximum=4.0, flush=10.0)
        new.changes = changes
        old = reference_queue.SchedulingQueue(backoff_initial=1.0, backoff_max=4.0, flush_after=10.0, changes=changes)
        for op, uid, n in ops:
            if op == "add":
                new.add(uid, n, f"t{n % 2}")
                old.add(uid, n, f"t{n % 2}")
            elif op == "next":
                gen = changes.generation
                assert new.next_ready(gen)[0] == old.next_ready(gen)[0]
            elif op in ("fail", "park", "stuck") and uid in old.in_flight():
                # parked at the generation its attempt started (one change may have come since),
                # waiting for one or two kinds of change
                at = max(0, changes.generation - n % 2)
                wants = _KINDS[n] | (_KINDS[(n + 1) % 4] if uid == "c" else Change(0))
                new.failed(uid, at, unschedulable=op != "fail", unresolvable=op == "stuck", interest=wants)
                old.failed(uid, at, unschedulable=op != "fail", unresolvable=op == "stuck", interest=wants)
            elif op == "done" and uid in old.in_flight():
                new.done(uid)
                old.done(uid)
            elif op == "gate" and uid in old.in_flight():
                new.gate(uid)
                old.gate(uid)
            elif op == "ungate":
                new.ungate(uid)
                old.ungate(uid)
            elif op == "remove":
                new.remove(uid)
                old.remove(uid)
            elif op == "tick":
                clock.advance((n + 1) * 4.0)
            elif op == "change":
                changes.record(_KINDS[n])
            assert new.in_flight() == old.in_flight()
            assert new.pending() == old.pending()
    finally:
        reference_queue.time = saved  # type: ignore[assignment]


def test_a_pod_removed_and_added_again_is_ordered_by_its_new_priority(clock: Clock) -> None:
    """Found by the model test: the heap item of the removed pod (higher priority) must not count
    for the new entry."""
    q = queue(clock)
    q.add("a", 0, "t0")
    q.add("b", 1, "t1")
    q.remove("b")
    q.add("b", 0, "t0")
    assert drain(q) == ["a", "b"]


def test_a_stale_parking_does_not_release_an_unresolvable_pod(clock: Clock) -> None:
    """Found by fuzzing against the old queue: parked (resolvable), removed, added again, then
    parked as unresolvable at the same generation — a cluster change must not release it."""
    q = queue(clock, flush=10.0)
    q.add("c", 0, "t")
    assert drain(q) == ["c"]
    q.failed("c", 0, unschedulable=True)
    q.remove("c")
    q.add("c", 1, "t")
    assert drain(q) == ["c"]
    q.failed("c", 0, unschedulable=True, unresolvable=True)
    clock.advance(2.5)
    assert drain(q, generation=1) == []
    clock.advance(10)
    assert drain(q, generation=1) == ["c"]  # the flush still brings it back


def test_unresolvable_against_an_inventory_is_retried_when_the_inventory_changes(clock: Clock) -> None:
    """A broken class (a CEL runtime error, a mapping naming a missing class) parks its pods as
    unresolvable against the inventory stamp of that moment: a class, slice or mapping change
    retries them, as kube-scheduler requeues on DeviceClass events; an ordinary cluster change
    (a pod finishing) does not, and neither does a stamp-less unresolvable pod (unsupported fields)."""
    q = queue(clock, initial=1.0, flush=600.0)
    for uid in ("broken-class", "unsupported"):
        q.add(uid, 0, uid)
        assert q.next_ready(5, stamp=("inv", 1))[0] == uid
    q.failed("broken-class", 5, unschedulable=True, unresolvable=True, stamp=("inv", 1))
    q.failed("unsupported", 5, unschedulable=True, unresolvable=True)
    clock.advance(1.0)
    assert q.next_ready(6, stamp=("inv", 1))[0] is None  # cluster changed, inventory did not
    assert q.next_ready(7, stamp=("inv", 2))[0] == "broken-class"  # the class was repaired
    assert q.next_ready(7, stamp=("inv", 2))[0] is None
    q.failed("broken-class", 7, unschedulable=True, unresolvable=True, stamp=("inv", 2))
    clock.advance(2.0)  # past its backoff
    assert q.next_ready(8, stamp=("inv", 2))[0] is None  # still broken against the new stamp
    assert q.next_ready(8, stamp=("inv", 3))[0] == "broken-class"
    assert q.pending()["unschedulable"] == 1  # "unsupported" waits for its own update or the flush
    q.add("unsupported", 0, "unsupported")
    assert q.next_ready(8, stamp=("inv", 3))[0] == "unsupported"


async def test_pop_is_cancelled_even_when_a_pod_arrives_in_the_same_turn() -> None:
    """Cancelling the scheduling loop (leadership lost) must stop it, also when a watch event wakes
    the queue in the same event-loop turn. Python 3.11's asyncio.wait_for returns the inner result
    and drops the cancellation then: the loop of a replica that had lost its lease went on
    scheduling and binding (found by bench/chaos.py: SIGSTOP of the leader, devices in two claims)."""
    q = SchedulingQueue(backoff_initial=5.0)  # the real clock and wait
    q.add("backing-off", 0, "2026-01-01T00:00:00Z")
    assert await q.pop(lambda: 0) == "backing-off"
    q.failed("backing-off", 0, unschedulable=False)  # pop() now waits with a timeout (its backoff)
    popping = asyncio.create_task(q.pop(lambda: 0))
    await asyncio.sleep(0.01)
    assert q.waiting
    q.add("late", 0, "2026-01-01T00:00:00Z")  # wakes pop() ...
    popping.cancel()  # ... in the very turn it is cancelled
    with pytest.raises(asyncio.CancelledError):
        await popping
