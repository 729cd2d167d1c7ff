"""What happens when events cross a pod's cycle (issue 34's two scenes, at unit size).

* An event that moves a pod (its own update, a claim it names) while it is in flight is not lost:
  the attempt saw the state before it, so an unschedulable result does not park the pod
  (upstream's in-flight events and queueing hints).
* A preemptor popped while its evictions run is gated (upstream's PreEnqueue) and comes back when
  they end, whatever the watches delivered meanwhile: before, it was parked at the generation of
  that moment, and when the victims' deletions had all been seen already nothing released it until
  the flush (60 s).
* A nomination counts on its node from the moment the PostFilter made it, not when the status
  write comes back (upstream's nominator): a lower-priority pod does not take the room its
  victims free.
"""

from __future__ import annotations

import asyncio
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.preemption import Candidate
from draxr.core.requeue import interest
from draxr.core.state import ClusterState, PodInfo
from draxr.queue import SchedulingQueue
from draxr.scheduler import Scheduler
from draxr.settings import Settings

from .cluster_builders import cluster, node, plain_claim, pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _queue(clock: Clock) -> SchedulingQueue:
    return SchedulingQueue(backoff_initial=1.0, backoff_max=8.0, flush_after=60.0, clock=clock)


def test_an_update_while_in_flight_is_not_lost() -> None:
    clock = Clock()
    q = _queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.add("a", 0, "t")  # its own update (or a claim it names) while its cycle runs
    q.failed("a", 0, unschedulable=True)
    assert q.pending()["unschedulable"] == 0  # not parked: backing off
    # Nothing else is ready: it is taken at once (SchedulerPopFromBackoffQ), no cluster change needed.
    assert q.next_ready(0)[0] == "a"
    # The mark is consumed: the next unschedulable attempt without an event parks it.
    q.failed("a", 0, unschedulable=True)
    assert q.pending()["unschedulable"] == 1
    assert q.next_ready(0)[0] is None


def test_without_the_event_the_same_attempt_parks_the_pod() -> None:
    """The control of the test above: an attempt that saw everything waits for a change."""
    clock = Clock()
    q = _queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.failed("a", 0, unschedulable=True)
    assert q.next_ready(0)[0] is None
    assert q.next_ready(1)[0] == "a"


def test_an_unresolvable_pod_updated_in_flight_is_not_parked_either() -> None:
    clock = Clock()
    q = _queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.add("a", 0, "t")
    q.failed("a", 0, unschedulable=True, unresolvable=True, stamp="inv-1")
    assert q.next_ready(0, "inv-1")[0] == "a"


def test_a_gated_pod_waits_for_its_gate_alone_and_no_attempt_is_counted() -> None:
    clock = Clock()
    q = _queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.failed("a", 0, unschedulable=True)  # the preemption attempt: backoff 1 s
    clock.now += 0.5
    assert q.next_ready(1)[0] == "a"  # (released by a change, taken early)
    q.gate("a")  # its evictions still run
    assert q.pending()["unschedulable"] == 1
    for generation in (2, 3):  # cluster changes do not release it
        assert q.next_ready(generation)[0] is None
    clock.now += 120  # nor does the flush
    assert q.next_ready(3)[0] is None
    q.add("a", 0, "t")  # nor its own update
    assert q.next_ready(3)[0] is None
    q.ungate("a")
    assert q.next_ready(3)[0] == "a"
    # One attempt counted (the preemption's), not two: the next backoff is 2 s.
    q.failed("a", 3, unschedulable=False)
    clock.now += 1.9
    assert q.next_ready(3)[0] is None
    clock.now += 0.2
    assert q.next_ready(3)[0] == "a"


def test_ungate_leaves_a_pod_that_was_not_gated_as_it_is() -> None:
    clock = Clock()
    q = _queue(clock)
    q.add("a", 0, "t")
    assert q.next_ready(0)[0] == "a"
    q.failed("a", 0, unschedulable=True)
    q.ungate("a")
    assert q.next_ready(0)[0] is None  # still parked: waits for a change as before
    assert q.next_ready(1)[0] == "a"


# ---------------------------------------------------------------- the scheduler's event routing


def _scheduler(state: ClusterState, clock: Clock) -> Scheduler:
    sched = Scheduler(None, state, Settings(), None)  # type: ignore[arg-type]  (nothing is written)
    sched.queue = _queue(clock)
    return sched


def _claim_pod() -> dict[str, Any]:
    p = pod("w", gpus=0)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    return p


def test_a_claim_created_while_its_pod_is_in_flight_moves_the_pod() -> None:
    clock = Clock()
    state = cluster({"n1": 2})
    sched = _scheduler(state, clock)
    info = state.upsert_pod(_claim_pod())
    sched.pod_changed(info)
    generation = state.generation
    assert sched.queue.next_ready(generation)[0] == info.uid  # in flight: "waiting for claim c"
    claim = plain_claim("c")
    state.upsert_claim(claim)  # (a new claim bumps no generation)
    sched.claim_changed("ns/c", None, claim)
    assert state.generation == generation
    sched.queue.failed(info.uid, generation, unschedulable=True)
    assert sched.queue.next_ready(state.generation)[0] == info.uid


def test_a_spec_update_while_in_flight_moves_the_pod_a_status_update_does_not() -> None:
    clock = Clock()
    state = cluster({"n1": 2})
    sched = _scheduler(state, clock)
    body = pod("w", gpus=1, rv="1")
    info = state.upsert_pod(body)
    sched.pod_changed(info)
    generation = state.generation
    assert sched.queue.next_ready(generation)[0] == info.uid
    # Our own status write (PodScheduled, the nomination) comes back: no reason to retry.
    body["metadata"]["resourceVersion"] = "2"
    body["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    old, info = info, state.upsert_pod(body)
    sched.pod_changed(info, old)
    sched.queue.failed(info.uid, generation, unschedulable=True)
    assert sched.queue.next_ready(state.generation)[0] is None
    # Popped again after a change; its tolerations change while it is in flight.
    assert sched.queue.next_ready(state.generation + 1)[0] == info.uid
    body["metadata"]["resourceVersion"] = "3"
    body["spec"]["tolerations"] = [{"operator": "Exists"}]
    old, info = info, state.upsert_pod(body)
    sched.pod_changed(info, old)
    sched.queue.failed(info.uid, state.generation, unschedulable=True)
    assert sched.queue.next_ready(state.generation)[0] == info.uid


class _Api:
    """The preemptor's API calls: the deletions answer at once; the Preempted events wait for
    ``events_written`` (an API server slow to take them)."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.events_written = asyncio.Event()

    async def patch(self, *_: Any, **__: Any) -> None:
        return None

    async def request(self, method: str, path: str, **_: Any) -> None:
        self.deleted.append(path.rsplit("/", 1)[-1])

    async def pod_event(self, *_: Any, **__: Any) -> None:
        await self.events_written.wait()


def _preemption_scene() -> tuple[Clock, ClusterState, Scheduler, _Api, list[PodInfo], PodInfo]:
    """Node n1 (16 cpus) full with two priority-0 pods of 8; a priority-100 pod of 16 popped, its
    preemption chosen (``running``, as Scheduler._act sets it before the task starts)."""
    clock = Clock()
    state = cluster({"n1": 0}, cpu="16")
    sched = _scheduler(state, clock)
    api = _Api()
    sched.preemptor.kube = sched.preemptor.recorder = api  # type: ignore[assignment]
    victims = [state.upsert_pod(pod(f"v{i}", requests={"cpu": "8"}, node_name="n1", priority=0)) for i in (0, 1)]
    hi = state.upsert_pod(pod("hi", requests={"cpu": "16"}, priority=100))
    sched.pod_changed(hi)
    assert sched.queue.next_ready(state.generation)[0] == hi.uid
    sched.preemptor.running.add(hi.uid)
    return clock, state, sched, api, victims, hi


async def test_a_preemptor_popped_while_its_evictions_run_is_scheduled_once_they_have_started() -> None:
    """Scene 1 of the issue, at unit size: the victims' deletions are all seen while the
    preemptor's evictions still run (their Preempted events being written); it is popped then and
    gated; it is back as soon as every deletion has started (upstream's IsPodRunningPreemption),
    without waiting for the events, and no flush is needed."""
    _, state, sched, api, victims, hi = _preemption_scene()
    assert sched.cycle(state.pods[hi.uid]) is None  # popped before the task started: gated
    task = asyncio.ensure_future(sched._preempt(hi, Candidate("n1", tuple(victims), 0)))
    for _ in range(20):  # (the deletions' tasks run; the events then wait)
        await asyncio.sleep(0)
    assert sorted(api.deleted) == ["v0", "v1"]
    for v in victims:  # the watch sees them go while the events are being written
        state.remove_pod(v.uid)
    assert not task.done()
    assert sched.queue.next_ready(state.generation)[0] == hi.uid  # not waiting for the events
    assert isinstance(schedule(state.pods[hi.uid], state, features=DEFAULT_FEATURES), Decision)
    api.events_written.set()
    await task


async def test_a_preemptor_gated_at_the_last_moment_comes_back_when_its_evictions_end() -> None:
    """The same without the early pop: gated just before the deletions end, back right after."""
    clock, state, sched, api, victims, hi = _preemption_scene()
    api.events_written.set()
    task = asyncio.ensure_future(sched._preempt(hi, Candidate("n1", tuple(victims), 0)))
    sched.queue.failed(hi.uid, state.generation, unschedulable=True)  # the preemption attempt
    for v in victims:
        state.remove_pod(v.uid)
    clock.now += 2
    assert sched.queue.next_ready(state.generation)[0] == hi.uid
    assert sched.cycle(state.pods[hi.uid]) is None  # its evictions have not run yet: gated
    assert sched.queue.next_ready(state.generation + 1)[0] is None
    await task
    assert sched.queue.next_ready(state.generation)[0] == hi.uid


# ---------------------------------------------------------------- nominations counted at once


def _room_for_one() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("a", cpu="8"))
    return state


def test_a_nomination_counts_before_its_status_write_comes_back() -> None:
    state = _room_for_one()
    hi = state.upsert_pod(pod("hi", requests={"cpu": "6"}, priority=100, rv="1"))
    low = state.upsert_pod(pod("low", requests={"cpu": "4"}, priority=0))
    assert isinstance(schedule(low, state, features=DEFAULT_FEATURES), Decision)
    state.nominate(hi.uid, "a")
    assert isinstance(schedule(low, state, features=DEFAULT_FEATURES), Unschedulable)
    # A watch event without the nomination (written before it) keeps it, as upstream's nominator.
    body = pod("hi", requests={"cpu": "6"}, priority=100, rv="2")
    state.upsert_pod(body)
    assert state.pods[hi.uid].nominated == "a"
    assert isinstance(schedule(low, state, features=DEFAULT_FEATURES), Unschedulable)
    # The API says it: the API's from now on; cleared there, cleared here.
    body["metadata"]["resourceVersion"] = "3"
    body["status"]["nominatedNodeName"] = "a"
    state.upsert_pod(body)
    body["metadata"]["resourceVersion"] = "4"
    body["status"]["nominatedNodeName"] = ""
    state.upsert_pod(body)
    assert state.pods[hi.uid].nominated == ""
    assert isinstance(schedule(low, state, features=DEFAULT_FEATURES), Decision)


def test_a_nomination_is_cleared_at_once_and_gone_with_its_pod() -> None:
    state = _room_for_one()
    hi = state.upsert_pod(pod("hi", requests={"cpu": "6"}, priority=100, rv="1"))
    low = state.upsert_pod(pod("low", requests={"cpu": "4"}, priority=0))
    state.nominate(hi.uid, "a")
    state.nominate(hi.uid, "")
    assert isinstance(schedule(low, state, features=DEFAULT_FEATURES), Decision)
    state.nominate(hi.uid, "a")
    state.upsert_pod(pod("hi", requests={"cpu": "6"}, priority=100, rv="2", node_name="a"))  # bound
    assert state.nominated_pods("a") == []
    state.remove_pod(hi.uid)
    state.upsert_pod(pod("hi", requests={"cpu": "6"}, priority=100, rv="3"))  # (a new pod, same uid)
    assert state.pods[hi.uid].nominated == ""


def test_a_victim_counts_as_terminating_from_the_moment_it_is_chosen() -> None:
    """The bench's multi-node preemptor: A evicted on node a and waits; B (same priority) then
    chose two more victims on a, whose evictions are slow to reach the API server. A, tried
    meanwhile, no longer fits on a (B's nomination counts there) and must wait for B's victims, not
    preempt again elsewhere: they count as terminating by preemption from B's choice on."""
    from draxr.core.preemption import TERMINATING, preempt

    state = ClusterState()
    for name in ("a", "b"):
        state.upsert_node(node(name, cpu="8"))
    for i in range(6):
        state.upsert_pod(pod(f"a{i}", requests={"cpu": "1"}, node_name="a", priority=0, phase="Running"))
    for i in range(8):
        state.upsert_pod(pod(f"b{i}", requests={"cpu": "1"}, node_name="b", priority=0, phase="Running"))
    first = pod("first", requests={"cpu": "2"}, priority=100)
    first["status"]["nominatedNodeName"] = "a"  # its victims are gone already
    a = state.upsert_pod(first)
    b = state.upsert_pod(pod("second", requests={"cpu": "2"}, priority=100))
    state.nominate(b.uid, "a")
    result = schedule(state.pods[a.uid], state, features=DEFAULT_FEATURES)
    assert isinstance(result, Unschedulable)  # 6 cpus placed + 2 nominated for the second
    before = preempt(state.pods[a.uid], state, result, features=DEFAULT_FEATURES)
    assert before.chosen is not None  # (without the mark it would evict again)
    state.mark_preempted(["uid-a4", "uid-a5"])
    after = preempt(state.pods[a.uid], state, result, features=DEFAULT_FEATURES)
    assert after.chosen is None
    assert after.message == f"preemption: {TERMINATING}"
    # The API shows the condition and the deletion: the API's from then on; a failed eviction unmarks.
    state.mark_preempted(["uid-a5"], preempted=False)
    assert not state.pods["uid-a5"].preempted
    assert state.pods["uid-a4"].preempted
    body = pod("a4", requests={"cpu": "1"}, node_name="a", priority=0, phase="Running", rv="9")
    state.upsert_pod(body)  # a late event without either: still marked
    assert state.pods["uid-a4"].preempted


def test_a_nominated_pod_whose_binding_is_in_flight_counts_once() -> None:
    """Found by the bench at CI size: preemptor B, nominated to node a and assumed there (its
    binding in flight), was counted as placed and as nominated; preemptor A, nominated to the same
    node and waiting for its victims' claims, then found no room and evicted two more pods there."""
    state = ClusterState()
    state.upsert_node(node("a", cpu="8"))
    for i in range(4):
        state.upsert_pod(pod(f"low{i}", requests={"cpu": "1"}, node_name="a", priority=0, phase="Running"))
    a = state.upsert_pod(pod("first", requests={"cpu": "2"}, priority=100))
    b = state.upsert_pod(pod("second", requests={"cpu": "2"}, priority=100))
    state.nominate(a.uid, "a")
    state.nominate(b.uid, "a")
    state.assume_pod(b.uid, "a")  # its binding is in flight
    assert [p.name for p in state.nominated_pods("a")] == ["first"]
    # 4 low + the second (placed) + the first = 8: the first fits.
    assert isinstance(schedule(state.pods[a.uid], state, features=DEFAULT_FEATURES), Decision)
    state.forget_pod(b.uid)  # the binding failed: nominated again, not placed
    assert sorted(p.name for p in state.nominated_pods("a")) == ["first", "second"]


def test_a_preemptor_is_retried_at_once_when_its_victims_are_gone_even_with_others_waiting() -> None:
    """Its backoff waived once the room it preempted for is free (SchedulingQueue.activate): before,
    it waited out its backoff behind the pods arriving meanwhile (gone -> bound p50 0.8 s at 500
    nodes, kube-scheduler 0.03 s)."""
    _, state, sched, _, victims, hi = _preemption_scene()
    sched.preemptor.chose(hi, Candidate("n1", tuple(victims), 0))  # (Scheduler._act, its evictions started)
    sched.preemptor.running.discard(hi.uid)
    sched.queue.failed(hi.uid, state.generation, unschedulable=True, interest=interest(["NodeResourcesFit"]))
    other = state.upsert_pod(pod("other", requests={"cpu": "1"}, priority=0))
    sched.pod_changed(other)  # a new pod, active at once
    state.remove_pod(victims[0].uid)
    sched.cluster_changed()
    assert sched.queue.next_ready(state.generation)[0] == other.uid  # one victim left: hi backs off
    sched.queue.add(other.uid, 0, other.created)  # (given back)
    sched.queue.done(other.uid)
    sched.pod_changed(other)
    state.remove_pod(victims[1].uid)
    sched.cluster_changed()
    assert sched.queue.next_ready(state.generation)[0] == hi.uid  # before its backoff ends, first
    assert isinstance(schedule(state.pods[hi.uid], state, features=DEFAULT_FEATURES), Decision)


def test_activate_waives_the_backoff_once_also_for_a_pod_in_flight_or_gated() -> None:
    clock = Clock()
    q = _queue(clock)
    for uid in ("flying", "gated", "parked"):
        q.add(uid, 0, "t")
    assert [q.next_ready(0)[0] for _ in range(3)] == ["flying", "gated", "parked"]
    q.failed("parked", 0, unschedulable=True)
    q.gate("gated")
    for uid in ("flying", "gated", "parked"):
        q.activate(uid)
    assert q.next_ready(0)[0] == "parked"  # parked and backing off: active now
    q.failed("flying", 0, unschedulable=True)  # comes back: not parked, no backoff
    assert q.next_ready(0)[0] == "flying"
    q.ungate("gated")
    assert q.next_ready(0)[0] == "gated"
    q.failed("gated", 0, unschedulable=True)  # once only: parked again now
    assert q.next_ready(0)[0] is None
