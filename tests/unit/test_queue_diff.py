"""The queue differential's comparison (draxr_dev.queue_diff) without the Go harness: draxr's real
Operator, Scheduler and SchedulingQueue driven through two small sequences, against upstream's
states written out by hand (what kube-scheduler 1.37.2's queue does there: see the comments), and
the same with draxr's code mutated to lose a wake-up, which the comparison must report as missing.
The harness-backed run is tests/differential/test_queue_differential.py."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from draxr_dev.queue_diff import casegen, compare, runner

JSON = dict[str, Any]


def _state(**queues: Any) -> JSON:
    out: JSON = {q: [] for q in ("active", "backoff", "errorBackoff", "unschedulable", "inFlight")}
    out.update(queues)
    return out


def _node(cpu: str, rv: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-0", "uid": "uid-node-0", "labels": {"zone": "zone-a"}, "resourceVersion": rv},
        "spec": {},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


def _pod() -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "pod-0",
            "namespace": "default",
            "uid": "uid-pod-0",
            "resourceVersion": "3",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "schedulerName": casegen.SCHEDULER,
            "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "6"}, "claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-pod-0"}],
        },
        "status": {"phase": "Pending"},
    }


def _objects() -> list[JSON]:
    claim = casegen.make_claim("claim-pod-0")
    claim["metadata"]["resourceVersion"] = "2"
    cls = casegen.make_class()
    cls["metadata"]["resourceVersion"] = "1"
    return [
        {"kind": "Node", "object": _node("4", "1")},
        {"kind": "DeviceClass", "object": cls},
        {"kind": "ResourceClaim", "object": claim},
        {"kind": "Pod", "object": _pod()},
    ]


def claim_allocated_while_parked() -> tuple[JSON, JSON]:
    """pod-0 fails on DynamicResources and is parked; its claim is allocated: upstream's
    isSchedulableAfterClaimChange says Queue (the pod's claim, status changed), and the pod, still
    backing off, goes to the backoffQ, which Pop takes from (SchedulerPopFromBackoffQ)."""
    claim = casegen.allocate(casegen.make_claim("claim-pod-0"), "node-0", 0, _pod())
    claim["metadata"]["resourceVersion"] = "4"
    seq = {
        "name": "claim-allocated-while-parked",
        "objects": _objects(),
        "steps": [
            {"op": "pop"},
            {"op": "fail", "pop": 0, "plugins": ["DynamicResources"], "draxr": "unschedulable"},
            {"op": "upsert", "kind": "ResourceClaim", "object": claim},
        ],
    }
    go = {
        "name": seq["name"],
        "steps": [
            {**_state(inFlight=["pod-0"]), "popped": "pod-0"},
            _state(unschedulable=["pod-0"]),
            _state(backoff=["pod-0"]),
        ],
    }
    return seq, go


def node_grew_while_in_flight() -> tuple[JSON, JSON]:
    """pod-0 (6 CPUs) is popped; while it is in flight its node grows from 4 to 8 CPUs; its attempt
    then ends rejected by NodeResourcesFit: upstream replays the in-flight Node/UpdateNodeAllocatable
    event (NodeResourcesFit's isSchedulableAfterNodeChange: Queue) and requeues it at once."""
    seq = {
        "name": "node-grew-while-in-flight",
        "objects": _objects(),
        "steps": [
            {"op": "pop"},
            {"op": "upsert", "kind": "Node", "object": _node("8", "5")},
            {"op": "fail", "pop": 0, "plugins": ["NodeResourcesFit"], "draxr": "unschedulable"},
        ],
    }
    go = {
        "name": seq["name"],
        "steps": [
            {**_state(inFlight=["pod-0"]), "popped": "pod-0"},
            _state(inFlight=["pod-0"]),
            _state(backoff=["pod-0"]),
        ],
    }
    return seq, go


def _drop_claim_events(op: Any) -> None:
    op.scheduler.claim_changed = lambda key, before, after: None


def _drop_node_events(op: Any) -> None:
    state = op.state
    upsert = state.upsert_node

    def quiet(node: Any) -> None:
        before = (state.changes.generation, list(state.changes._last))
        upsert(node)
        state.changes.generation, state.changes._last = before

    state.upsert_node = quiet


def _forget_in_flight_events(op: Any) -> None:
    sched = op.scheduler
    failed = sched.queue.failed

    def at_end(uid: str, generation: int, **kw: Any) -> None:
        failed(uid, sched.state.generation, **kw)

    sched.queue.failed = at_end


def _factory(mutate: Callable[[Any], None] | None) -> Callable[[], Callable[[], Any]]:
    def factory() -> Callable[[], Any]:
        make = runner.default_operator_factory()

        def build() -> Any:
            op = make()
            if mutate is not None:
                mutate(op)
            return op

        return build

    return factory


def _missing(case: Callable[[], tuple[JSON, JSON]], mutate: Callable[[Any], None] | None) -> compare.Report:
    seq, go = case()
    py, _ = runner.run_python([copy.deepcopy(seq)], [go], _factory(mutate))
    return compare.compare([seq], [go], py)


@pytest.mark.parametrize("case", [claim_allocated_while_parked, node_grew_while_in_flight])
def test_draxr_releases_the_pod_as_upstream_does(case: Callable[[], tuple[JSON, JSON]]) -> None:
    rep = _missing(case, None)
    assert not rep.missing, [compare.format_missing(case()[0], m) for m in rep.missing]
    assert rep.compared_steps == 3


@pytest.mark.parametrize(
    ("case", "mutate"),
    [
        (claim_allocated_while_parked, _drop_claim_events),
        (node_grew_while_in_flight, _drop_node_events),
        (node_grew_while_in_flight, _forget_in_flight_events),
    ],
)
def test_a_queue_that_loses_the_wake_up_has_the_pod_missing(
    case: Callable[[], tuple[JSON, JSON]], mutate: Callable[[Any], None]
) -> None:
    rep = _missing(case, mutate)
    assert [(m["step"], m["pod"]) for m in rep.missing] == [(2, "pod-0")]
    m = rep.missing[0]
    if case is node_grew_while_in_flight:
        assert m["cause"].startswith("released as its attempt ended (NodeResourcesFit [unschedulable])"), m["cause"]
        assert "upsert Node (status.allocatable)" in m["cause"]
    else:
        assert m["cause"].startswith("released by upsert ResourceClaim (status.allocation"), m["cause"]


def test_extra_pods_are_counted_not_missing() -> None:
    """An upstream that keeps pod-0 parked after its claim changed (as if its hint said
    QueueSkip): draxr's retry is an extra, not a failure."""
    seq, go = claim_allocated_while_parked()
    go["steps"][2] = _state(unschedulable=["pod-0"])
    py, _ = runner.run_python([seq], [go], _factory(None))
    rep = compare.compare([seq], [go], py)
    assert not rep.missing
    assert rep.extra == 1


def test_dropping_steps_renumbers_the_pops() -> None:
    from draxr_dev.queue_diff.shrink import drop_steps

    seq = {
        "name": "s",
        "objects": [],
        "steps": [
            {"op": "pop"},
            {"op": "advance", "seconds": 1.0},
            {"op": "pop"},
            {"op": "fail", "pop": 2, "plugins": []},
            {"op": "fail", "pop": 0, "plugins": []},
        ],
    }
    assert drop_steps(seq, {1})["steps"] == [
        {"op": "pop"},
        {"op": "pop"},
        {"op": "fail", "pop": 1, "plugins": []},
        {"op": "fail", "pop": 0, "plugins": []},
    ]
    assert drop_steps(seq, {0})["steps"] == [
        {"op": "advance", "seconds": 1.0},
        {"op": "pop"},
        {"op": "fail", "pop": 1, "plugins": []},
    ]


def test_a_flush_while_in_flight_takes_every_advance_of_that_time_with_it() -> None:
    """Two advances of 61 s while pod-2 is in flight, the second flushing pod-3 (parked 122 s):
    without only that one, the first's 61 s and the next would flush it again (seed 2's
    queue-2-00220), so the variant that asks upstream "without the flush?" drops both."""
    seq = {
        "steps": [
            {"op": "pop"},
            {"op": "advance", "seconds": 61.0},
            {"op": "advance", "seconds": 61.0},
            {"op": "fail", "pop": 0, "plugins": ["DynamicResources"]},
        ]
    }
    go = [
        {"popped": "pod-2", "inFlight": ["pod-2"]},
        {"inFlight": ["pod-2"]},
        {"inFlight": ["pod-2"], "flushed": ["pod-3"]},
    ]
    assert compare.quirk_steps(seq, go, "pod-2", [1, 2]) == [1, 2]
    go[2].pop("flushed")
    assert compare.quirk_steps(seq, go, "pod-2", [1, 2]) == []  # no flush: time alone releases nobody


def test_only_a_settling_rerun_that_pops_the_same_pods_decides() -> None:
    """The settling re-run asks upstream "without the flush, is pod-2 kept?"; a re-run that popped
    another pod at pod-2's pop judged another attempt and must not decide (seed 28's
    queue-28-00247, before the harness broke queue ties by name): it is run again."""
    seq = {
        "name": "s",
        "objects": [],
        "steps": [
            {"op": "pop"},
            {"op": "advance", "seconds": 61.0},
            {"op": "fail", "pop": 0, "plugins": ["NodeUnschedulable"]},
        ],
    }
    upstream = [
        _state(inFlight=["pod-2"], unschedulable=["pod-3"], popped="pod-2"),
        _state(inFlight=["pod-2"], active=["pod-3"], flushed=["pod-3"]),
        _state(active=["pod-3"], backoff=["pod-2"]),
    ]

    def missing() -> JSON:
        return {"name": "s", "pod": "pod-2", "cause_step": 2, "relevant_steps": [0, 1, 2], "step": 2}

    other_pod = [_state(inFlight=["pod-3"], popped="pod-3"), _state(unschedulable=["pod-2", "pod-3"])]
    same_pod = [_state(inFlight=["pod-2"], popped="pod-2"), _state(unschedulable=["pod-2", "pod-3"])]
    for answers, tolerated in (([other_pod] * compare.SETTLE_TRIES, False), ([other_pod, same_pod], True)):
        rep = compare.Report()
        rep.upstream["s"] = upstream
        rep.missing.append(missing())
        calls = iter(answers)

        def run_go(seqs: list[JSON], calls: Any = calls) -> list[JSON]:
            return [{"name": s["name"], "steps": next(calls)} for s in seqs]

        compare.settle_in_flight(rep, [seq], run_go)
        assert (not rep.missing) == tolerated
        assert len(rep.tolerated) == tolerated
