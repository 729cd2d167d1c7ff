"""bench/preemption_dynamics.py's figures on made-up watch events and Events: the dry runs' wording
(draxr's and kube-scheduler's), victims per preemptor, multi-node preemptors, and the latency from
the last victim gone to bound."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ..bench_loader import BENCH, load

if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # (the bench's `from e2e import ...`)
pd = load("preemption_dynamics")

NOTE = (
    "0/4 nodes are available: 4 Insufficient cpu. "
    "preemption: found a potential placement for pod on node {}, preempting {} victims."
)


def preempted(victim: str, preemptor_uid: str, node: str, reporter: str = "draxr") -> dict[str, Any]:
    return {
        "reason": "Preempted",
        "reportingController": reporter,
        "regarding": {"kind": "Pod", "name": victim},
        "note": f"Preempted by pod {preemptor_uid} on node {node}",
        "eventTime": "2026-12-06T21:00:00.000000Z",
    }


def pod(name: str, uid: str = "", node: str = "", message: str = "", nominated: str = "", phase: str = "") -> Any:
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if message:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "message": message}]
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"metadata": {"name": name, "uid": uid}, "spec": {"nodeName": node} if node else {}, "status": status}


def test_dry_run_reads_both_schedulers_wording() -> None:
    assert pd.dry_run(NOTE.format("pd-3", 2)) == ("pd-3", 2)
    # draxr's (operator/draxr/core/preemption.py), no final period
    assert pd.dry_run(
        "0/2 nodes are available: x. preemption: found a potential placement for pod on node b, preempting 12 victims"
    ) == ("b", 12)
    assert (
        pd.dry_run("0/4 nodes are available: preemption: 0/4 nodes are available: 4 No preemption victims found")
        is None
    )


def test_victims_per_preemptor_from_the_events_of_the_scheduler_only() -> None:
    events = [
        preempted("low-1", "u1", "n1"),
        preempted("low-2", "u1", "n1"),
        preempted("low-2", "u1", "n1"),  # (the same victim twice: once)
        preempted("low-3", "u2", "n2"),
        preempted("low-4", "u2", "n2", reporter="default-scheduler"),
        {"reason": "Scheduled", "reportingController": "draxr", "note": "Successfully assigned"},
    ]
    out = pd.preempted_by(events, "draxr")
    assert {u: [(v.name, v.node) for v in vs] for u, vs in out.items()} == {
        "u1": [("low-1", "n1"), ("low-2", "n1")],
        "u2": [("low-3", "n2")],
    }


def test_event_dry_runs_count_the_series() -> None:
    events = [
        {
            "reason": "FailedScheduling",
            "reportingController": "draxr",
            "regarding": {"name": "hi-cpu-0"},
            "note": NOTE.format("n1", 2),
            "series": {"count": 3},
        },
        {"reason": "FailedScheduling", "reportingController": "draxr", "regarding": {"name": "hi-cpu-0"}, "note": "x"},
    ]
    assert pd.event_dry_runs(events, "draxr") == {"hi-cpu-0": [("n1", 2, 3)]}


def test_tracker_counts_a_nomination_per_new_message_and_sees_deletions() -> None:
    t = pd.Tracker()
    t.on_event(1.0, pod("hi", "u1"))
    t.on_event(1.5, pod("hi", "u1", message="0/4 nodes are available: 4 Insufficient cpu."))
    t.on_event(2.0, pod("hi", "u1", message=NOTE.format("n1", 2), nominated="n1"))
    t.on_event(2.5, pod("hi", "u1", message=NOTE.format("n1", 2), nominated="n1"))  # (no change: not counted)
    t.on_event(3.0, pod("hi", "u1", message=NOTE.format("n2", 1), nominated="n2"))
    t.on_event(4.0, pod("hi", "u1", node="n2", message=NOTE.format("n2", 1), nominated="n2", phase="Running"))
    t.on_event(4.5, pod("hi", "u1", node="n2", phase="Running"))
    t.on_deleted(3.5, pod("low-1", "v1", node="n1"))
    t.on_deleted(3.9, pod("low-1", "v1", node="n1"))
    hi = t.pods["hi"]
    assert hi.nominations == [(2.0, "n1", 2), (3.0, "n2", 1)]
    assert [n for _, n in hi.nominated] == ["n1", "n2", ""]  # (cleared at last)
    assert (hi.bound, hi.node, hi.running) == (4.0, "n2", 4.0)
    assert t.pods["low-1"].gone == 3.5
    assert t.bound(["hi", "low-1", "missing"]) == 1


def preemptor(name: str, bound: float | None, node: str, nominations: list[Any], victims: list[Any]) -> Any:
    vs = [pd.Victim(v, n, "", gone) for v, n, gone in victims]
    return pd.Preemptor(name, "cpu", 0.0, bound, node, nominations, vs)


def test_half_figures() -> None:
    ps = [
        preemptor("a", 10.0, "n1", [(1.0, "n1", 2)], [("v1", "n1", 9.0), ("v2", "n1", 9.5)]),  # 0.5 s
        preemptor("b", 12.0, "n2", [(1.0, "n2", 2)], [("v3", "n2", 11.0), ("v4", "n3", 10.0)]),  # two nodes
        preemptor("c", 14.0, "n4", [(2.0, "n4", 2)], [("v5", "n4", 13.0), ("v6", "n4", 11.0), ("v7", "n4", 12.0)]),
        preemptor("d", None, "", [(2.0, "n5", 2)], []),  # unbound
        preemptor("e", 6.0, "n6", [], []),  # bound without preempting
        preemptor("f", 8.0, "n9", [(1.0, "n8", 1)], [("v8", "n8", None)]),  # bound elsewhere; victim not seen gone
    ]
    runs = {"a": [("n1", 2, 1)], "d": [("n5", 2, 3)], "x": [("n7", 2, 1)]}  # (x: not of this half)
    f = pd.half_figures(ps, low_bound_meanwhile=3, event_runs=runs)
    assert f["preemptors"] == 6
    assert f["bound"] == 5
    assert f["unbound"] == ["d"]
    assert f["victims"] == 8
    assert f["dry_run_victims"] == 9
    assert f["dry_run_victims_events"] == 8
    assert pd.half_figures(ps)["dry_run_victims_events"] is None
    assert f["victims_per_preemptor"] == {"0": 2, "1": 1, "2": 2, "3": 1}
    assert f["victims_not_dry_run"] == ["c", "d"]
    assert f["multi_node"] == ["b"]
    assert f["bound_where_it_evicted_nothing"] == ["f"]
    assert f["bound_without_victims"] == ["e"]
    assert f["victims_not_seen_gone"] == 1
    assert f["low_bound_meanwhile"] == 3
    assert f["after_last_victim_s"] == {"n": 3, "p50": 1.0, "p99": 1.0, "max": 1.0}
    assert f["created_to_bound_s"]["max"] == 14.0
    assert f["span_s"] == 14.0
    assert pd.suspicious(ps) == ["b", "c", "d", "f"]


def test_schedule_alternates_the_halves_evenly() -> None:
    plan = pd.schedule(4, 20.0)
    assert plan == [
        (0.0, "hi-cpu-0", "cpu"),
        (5.0, "hi-dev-1", "devices"),
        (10.0, "hi-cpu-2", "cpu"),
        (15.0, "hi-dev-3", "devices"),
    ]


def test_sizes() -> None:
    s = pd.sizes(500, 8, 4000)
    assert (s["per_node"], s["cpu_nodes"], s["device_nodes"], s["fill"], s["devices_full"]) == (
        8,
        250,
        250,
        {"cpu": 2000, "devices": 2000},
        True,
    )
    assert pd.sizes(21, 8, 84)["fill"] == {"cpu": 40, "devices": 44}
    with pytest.raises(ValueError, match="per node"):
        pd.sizes(10, 4, 80)


def test_fleet_halves_and_cpu() -> None:
    objs = pd.fleet_objects(4, 8, 8, 2)
    nodes = [o for o in objs if o["kind"] == "Node"]
    assert [n["metadata"]["labels"][pd.HALF_LABEL] for n in nodes] == ["cpu", "cpu", "devices", "devices"]
    assert {n["status"]["allocatable"]["cpu"] for n in nodes} == {"8"}
    classes = [o for o in objs if o["kind"] == "DeviceClass"]
    assert [c["spec"]["extendedResourceName"] for c in classes] == ["example.com/gpu"]


def test_render_has_a_row_per_scheduler_and_half_and_the_ratio() -> None:
    half = pd.half_figures([preemptor("a", 10.0, "n1", [(1.0, "n1", 2)], [("v1", "n1", 9.0), ("v2", "n1", 8.0)])])
    result = {
        "phases": [
            {"scheduler": "kube-scheduler", "halves": {"cpu": half}},
            {"scheduler": "draxr", "halves": {"cpu": half, "devices": half}},
        ]
    }
    rows = pd.render(result).splitlines()
    assert [r.split("|")[1].strip() for r in rows[2:]] == [
        "kube-scheduler, cpu",
        "draxr, cpu",
        "draxr, devices",
        "**draxr / kube-scheduler, cpu**",
    ]
    assert "| 1.00 |" in rows[-1]
