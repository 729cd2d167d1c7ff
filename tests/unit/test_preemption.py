"""draxr.core.preemption: DefaultPreemption's candidates, victims, PDBs, choice and message, and
the DRA-aware dry run (victims' special claims and claims reserved only for victims freed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core import preemption as preemption_module
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.budget import Budget
from draxr.core.claims import assumed_claim_key, held_claim_key
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.preemption import (
    Candidate,
    Outcome,
    Releasing,
    more_important,
    num_candidates,
    pick_one,
    preempt,
    releasing_of,
)
from draxr.core.state import ClusterState, PodInfo
from tests.unit.cluster_builders import allocation, cluster, node, plain_claim, pod, special_claim

JSON = dict[str, Any]


def running(
    name: str,
    node_name: str,
    *,
    priority: int = 0,
    started: str = "2026-01-01T00:00:00Z",
    labels: dict[str, str] | None = None,
    **kw: Any,
) -> JSON:
    p = pod(name, node_name=node_name, phase="Running", priority=priority, **kw)
    p["status"]["startTime"] = started
    if labels:
        p["metadata"]["labels"] = labels
    return p


def attempt(state: ClusterState, p: JSON, budgets: tuple[Budget, ...] = ()) -> tuple[Unschedulable, Outcome]:
    info = state.upsert_pod(p)
    result = schedule(info, state, features=DEFAULT_FEATURES, binds_claims=True)
    assert isinstance(result, Unschedulable), result
    return result, preempt(info, state, result, features=DEFAULT_FEATURES, budgets=budgets)


def victims(outcome: Outcome) -> list[str]:
    assert outcome.chosen is not None, outcome.message
    return [v.name for v in outcome.chosen.victims]


def cpu_cluster(*names: str) -> ClusterState:
    s = cluster({})
    for n in names:
        s.upsert_node(node(n, cpu="8"))
    return s


def test_the_fewest_lowest_priority_victims_free_the_cpu() -> None:
    s = cpu_cluster("a", "b")
    for i in range(4):
        s.upsert_pod(running(f"a{i}", "a", requests={"cpu": "2"}, priority=10))
        s.upsert_pod(running(f"b{i}", "b", requests={"cpu": "2"}, priority=5))
    result, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert result.message == "0/2 nodes are available: 2 Insufficient cpu."
    assert out.chosen is not None
    assert out.chosen.node == "b"  # the lowest highest-victim priority
    assert len(out.chosen.victims) == 2
    assert out.message == "preemption: found a potential placement for pod on node b, preempting 2 victims"


def test_higher_priority_victims_are_reprieved_first() -> None:
    s = cpu_cluster("a")
    s.upsert_pod(running("low", "a", requests={"cpu": "4"}, priority=1))
    s.upsert_pod(running("mid", "a", requests={"cpu": "4"}, priority=50))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert victims(out) == ["low"]


def test_equal_priority_the_latest_started_goes_first() -> None:
    """MoreImportantPod: the earlier start is more important, so it is reprieved first."""
    s = cpu_cluster("a")
    s.upsert_pod(running("old", "a", requests={"cpu": "4"}, started="2026-01-01T00:00:00Z"))
    s.upsert_pod(running("new", "a", requests={"cpu": "4"}, started="2026-01-02T00:00:00Z"))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert victims(out) == ["new"]


def test_no_lower_priority_pod_means_no_victims() -> None:
    s = cpu_cluster("a", "b")
    s.upsert_pod(running("x", "a", requests={"cpu": "8"}, priority=100))
    s.upsert_pod(running("y", "b", requests={"cpu": "8"}, priority=200))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert out.chosen is None
    assert out.clear_nomination
    assert out.message == "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."


def test_unresolvable_nodes_are_not_helped() -> None:
    s = cpu_cluster("a")
    s.upsert_node(node("tainted", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]))
    s.upsert_node(node("small", cpu="2"))
    s.upsert_pod(running("x", "a", requests={"cpu": "8"}))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert victims(out) == ["x"]
    assert out.chosen is not None
    assert out.chosen.node == "a"
    s.remove_pod("uid-x")
    s.upsert_pod(running("x", "a", requests={"cpu": "8"}, priority=1000))
    _, out = attempt(s, pod("hi2", requests={"cpu": "4"}, priority=100))
    assert out.message == (
        "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )


def test_a_node_that_fits_not_even_when_emptied_reports_its_filter() -> None:
    s = cpu_cluster("a")
    s.upsert_pod(running("x", "a", requests={"cpu": "2"}))
    s.upsert_pod(running("big", "a", requests={"cpu": "6"}, priority=500))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100))
    assert out.message == "preemption: 0/1 nodes are available: 1 Insufficient cpu."


def test_preemption_policy_never() -> None:
    s = cpu_cluster("a")
    s.upsert_pod(running("x", "a", requests={"cpu": "8"}))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100, preemptionPolicy="Never"))
    assert out.chosen is None
    assert not out.clear_nomination
    assert out.message == "preemption: not eligible due to preemptionPolicy=Never."


def test_a_terminating_victim_on_the_nominated_node_makes_the_pod_wait() -> None:
    s = cpu_cluster("a")
    dying = running("x", "a", requests={"cpu": "8"})
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    dying["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    s.upsert_pod(dying)
    p = pod("hi", requests={"cpu": "4"}, priority=100)
    p["status"]["nominatedNodeName"] = "a"
    _, out = attempt(s, p)
    assert out.message == "preemption: not eligible due to a terminating pod on the nominated node."


def test_pdb_violating_victims_are_reprieved_first_and_rank_the_node_lower() -> None:
    s = cpu_cluster("a", "b")
    s.upsert_pod(running("guarded", "a", requests={"cpu": "8"}, labels={"app": "db"}))
    s.upsert_pod(running("free", "b", requests={"cpu": "8"}, priority=5))
    budget = Budget("ns", _selector({"app": "db"}), allowed=0)
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100), (budget,))
    # b's victim has a higher priority than a's, but a's would violate the budget.
    assert out.chosen is not None
    assert out.chosen.node == "b"
    assert out.chosen.pdb_violations == 0
    _, out = attempt(s, pod("hi2", requests={"cpu": "4"}, priority=100))
    assert out.chosen is not None
    assert out.chosen.node == "a"


def test_budgets_count_down_and_skip_disrupted_pods() -> None:
    s = cpu_cluster("a")
    for i in range(3):
        cpu = "8" if i == 0 else "0"
        started = f"2026-01-0{i + 1}T00:00:00Z"  # db0 the most important of the three
        s.upsert_pod(running(f"db{i}", "a", requests={"cpu": cpu}, labels={"app": "db"}, started=started))
    budget = Budget("ns", _selector({"app": "db"}), allowed=1, disrupted=frozenset({"db1"}))
    _, out = attempt(s, pod("hi", requests={"cpu": "4"}, priority=100), (budget,))
    assert out.chosen is not None
    assert victims(out) == ["db0"]
    assert out.chosen.pdb_violations == 0  # one allowed, db1 already counted by the API server


def test_pick_one_follows_upstreams_criteria_in_order() -> None:
    from draxr.core.preemption import Candidate

    def info(name: str, priority: int, started: str = "2026-01-01T00:00:00Z") -> PodInfo:
        return PodInfo.from_api(running(name, "n", priority=priority, started=started))

    fewer_violations = Candidate("v0", (info("a", 100),), 0)
    assert pick_one([Candidate("v1", (info("b", 1),), 1), fewer_violations]) is fewer_violations
    lower_top = Candidate("p", (info("c", 5), info("d", 5)), 0)
    assert pick_one([Candidate("q", (info("e", 6),), 0), lower_top]) is lower_top
    lower_sum = Candidate("s", (info("f", 5),), 0)
    assert pick_one([lower_top, lower_sum]) is lower_sum
    later = Candidate("t", (info("g", 5, "2026-01-03T00:00:00Z"),), 0)
    assert pick_one([lower_sum, later]) is later
    assert pick_one([lower_sum, Candidate("u", (info("h", 5),), 0)]) is lower_sum  # a tie: the first


def test_candidates_count() -> None:
    assert num_candidates(5) == 5
    assert num_candidates(100) == 100
    assert num_candidates(999) == 100
    assert num_candidates(5000) == 500


def test_more_important() -> None:
    a = PodInfo.from_api(running("a", "n", priority=2))
    b = PodInfo.from_api(running("b", "n", priority=1, started="2025-01-01T00:00:00Z"))
    assert more_important(a, b)
    assert not more_important(b, a)
    unstarted = PodInfo.from_api(pod("c", node_name="n", priority=2))
    assert more_important(a, unstarted)  # no start time: "now", the latest


# --------------------------------------------------------------------------- DRA


def gpu_holder(s: ClusterState, name: str, node_name: str, devices: tuple[str, ...], priority: int = 0) -> None:
    """A running pod with a special claim allocated ``devices`` on ``node_name``."""
    p = running(name, node_name, priority=priority, gpus=len(devices), claim_name=f"{name}-claim")
    s.upsert_pod(p)
    s.upsert_claim(
        special_claim(f"{name}-claim", name, f"uid-{name}", alloc=allocation(node_name, *devices), reserved=True)
    )


def test_victims_special_claims_free_their_devices() -> None:
    """The 'Why' of the issue: nodes full of 1-device pods, a 2-device pod of higher priority."""
    s = cluster({"g1": 4, "g2": 4})
    for n in ("g1", "g2"):
        for i in range(4):
            gpu_holder(s, f"{n}-p{i}", n, (f"gpu-{i}",), priority=i if n == "g1" else 0)
    result, out = attempt(s, pod("hi", gpus=2, priority=100000))
    assert "cannot allocate all claims" in result.message
    assert out.chosen is not None
    assert out.chosen.node == "g2"  # its victims' highest priority (0) is lower than g1's (1)
    assert len(out.chosen.victims) == 2
    held = out.held
    assert held is not None
    freed = {v.name.split("-p")[1] for v in out.chosen.victims}
    assert {r["device"].removeprefix("gpu-") for r in held["devices"]["results"]} == freed


def test_a_claim_shared_with_a_pod_that_stays_is_not_freed() -> None:
    s = cluster({"g": 2})
    for name, prio in (("low", 0), ("keeper", 1000)):
        s.upsert_pod(running(name, "g", priority=prio))
    shared = plain_claim("shared", alloc=allocation("g", "gpu-0", "gpu-1"))
    shared["status"]["reservedFor"] = [
        {"resource": "pods", "name": "low", "uid": "uid-low"},
        {"resource": "pods", "name": "keeper", "uid": "uid-keeper"},
    ]
    s.upsert_claim(shared)
    _, out = attempt(s, pod("hi", gpus=1, priority=100))
    assert out.chosen is None
    assert out.message.startswith("preemption: 0/1 nodes are available: 1 cannot allocate all claims")
    # Reserved only for the low-priority pod: freed by evicting it.
    shared["metadata"]["resourceVersion"] = "2"
    shared["status"]["reservedFor"] = shared["status"]["reservedFor"][:1]
    s.upsert_claim(shared)
    _, out = attempt(s, pod("hi2", gpus=1, priority=100))
    assert victims(out) == ["low"]


def test_a_non_pod_consumer_keeps_its_claim() -> None:
    s = cluster({"g": 1})
    s.upsert_pod(running("low", "g"))
    claim = plain_claim("adopted", alloc=allocation("g", "gpu-0"))
    claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "low", "uid": "uid-low"},
        {"resource": "nodes", "name": "g", "uid": "node-uid"},
    ]
    s.upsert_claim(claim)
    _, out = attempt(s, pod("hi", gpus=1, priority=100))
    assert out.chosen is None


def test_held_devices_go_to_the_preemptor_only() -> None:
    """Held under the preemptor's key: a lower-priority pod cannot take them, the preemptor can."""
    s = cluster({"g": 2})
    hi = s.upsert_pod(pod("hi", gpus=2, priority=100))
    s.assume_allocation(held_claim_key(hi.uid), allocation("g", "gpu-0", "gpu-1"))
    low = s.upsert_pod(pod("low", gpus=1, priority=0))
    assert isinstance(schedule(low, s, features=DEFAULT_FEATURES), Unschedulable)
    got = schedule(hi, s, features=DEFAULT_FEATURES)
    assert isinstance(got, Decision)
    assert got.node == "g"


@pytest.mark.parametrize(("priority", "fits"), [(50, False), (100, False), (200, True)])
def test_nominated_pods_of_higher_or_equal_priority_count_on_their_node(priority: int, fits: bool) -> None:
    s = cpu_cluster("a")
    nominated = pod("nominee", requests={"cpu": "6"}, priority=100)
    nominated["status"]["nominatedNodeName"] = "a"
    s.upsert_pod(nominated)
    other = s.upsert_pod(pod(f"p{priority}", requests={"cpu": "4"}, priority=priority))
    got = schedule(other, s, features=DEFAULT_FEATURES)
    assert isinstance(got, Decision) is fits, got
    nominated["metadata"]["resourceVersion"] = "2"
    nominated["status"]["nominatedNodeName"] = ""
    s.upsert_pod(nominated)
    assert isinstance(schedule(other, s, features=DEFAULT_FEATURES), Decision)


def _selector(labels: dict[str, str]) -> Any:
    from draxr.core.labels import Selector

    return Selector.from_api({"matchLabels": labels})


def test_a_prefilter_before_dynamic_resources_ends_post_filter_with_not_found() -> None:
    """kube-scheduler 1.37.2: DynamicResources' PostFilter reads a cycle state its PreFilter never
    wrote; its error ends PostFilter before DefaultPreemption ("... not found")."""
    s = cpu_cluster("a")
    s.upsert_pod(running("x", "a", requests={"cpu": "8"}))
    conflict = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": []}]}]}
    p = pod(
        "hi",
        requests={"cpu": "4"},
        priority=100,
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": conflict}},
    )
    result, out = attempt(s, p)
    assert result.message == "0/1 nodes are available: pod affinity terms conflict."
    assert out == Outcome("not found")
    # DynamicResources' own PreFilter wrote its state: preemption runs (and finds nothing to do).
    result, out = attempt(s, pod("c", priority=100, resourceClaims=[{"name": "x", "resourceClaimName": "gone"}]))
    assert out.message == "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."


def test_a_preemptor_waits_for_its_victims_claims_before_evicting_more() -> None:
    """The victims are gone but their special claims are still allocated: no second round."""
    s = cluster({"g": 2})
    gpu_holder(s, "v", "g", ("gpu-0", "gpu-1"))
    gpu_holder(s, "w", "g", ())
    s.remove_pod("uid-v")  # deleted; its claim not yet released
    info = s.upsert_pod(pod("hi", gpus=2, priority=100))
    result = schedule(info, s, features=DEFAULT_FEATURES)
    assert isinstance(result, Unschedulable)
    out = preempt(info, s, result, features=DEFAULT_FEATURES, releasing=Releasing(claims=("ns/v-claim",)))
    assert out.message == "preemption: not eligible due to claims of preempted pods not yet deallocated."
    s.remove_claim("ns", "v-claim")
    result = schedule(info, s, features=DEFAULT_FEATURES)
    assert isinstance(result, Decision)


def _snapshot(s: ClusterState) -> tuple[Any, ...]:
    return (
        {n: (dict(u.requested), u.pods) for n, u in s.usage.items()},
        {n: list(p) for n, p in s.placed.items()},
        sorted((g.namespace, sorted(g.labels.items()), g.deleting, sorted(g.nodes.items())) for g in s.label_groups()),
    )


def test_victims_blocking_by_anti_affinity_are_removed_in_the_dry_run() -> None:
    """InterPodAffinity's RemovePod: the preemptor's anti-affinity against a low-priority pod."""
    s = cpu_cluster("a")
    s.upsert_pod(running("low", "a", labels={"app": "low"}))
    s.upsert_pod(running("other", "a", labels={"app": "other"}))
    away = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "low"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    before = _snapshot(s)
    result, out = attempt(s, pod("hi", priority=100, affinity=away))
    assert "didn't match pod anti-affinity rules" in result.message
    assert victims(out) == ["low"]  # "other" does not block: reprieved
    assert _snapshot(s) == before  # the dry run put everything back


def test_victims_skewing_a_hard_spread_are_removed_in_the_dry_run() -> None:
    """PodTopologySpread's RemovePod: the counts of the node's domain drop with its victims."""
    s = cpu_cluster("a", "b")
    s.upsert_node(node("b", cpu="1"))  # a domain with no matching pod, but no room
    for i in range(2):
        s.upsert_pod(running(f"w{i}", "a", labels={"app": "web"}, started=f"2026-01-0{i + 1}T00:00:00Z"))
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    p = pod("hi", priority=100, requests={"cpu": "2"}, topologySpreadConstraints=spread)
    p["metadata"]["labels"] = {"app": "web"}
    before = _snapshot(s)
    result, out = attempt(s, p)
    assert "didn't match pod topology spread constraints" in result.message
    assert out.chosen is not None
    assert out.chosen.node == "a"
    assert victims(out) == ["w0", "w1"]  # with either back, a's count is 2 against b's 0
    assert _snapshot(s) == before


def test_explain_shows_the_nomination_and_the_victims_still_going() -> None:
    from draxr.explain import pending_report, render

    s = cpu_cluster("a")
    dying = running("victim", "a", requests={"cpu": "8"})
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    dying["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    s.upsert_pod(dying)
    s.upsert_pod(running("stays", "a", priority=1000))
    p = pod("hi", requests={"cpu": "4"}, priority=100)
    p["status"]["nominatedNodeName"] = "a"
    info = s.upsert_pod(p, keep_object=True)
    report = pending_report(s, info.uid)
    assert report["nominatedNode"] == "a"
    assert report["waitingFor"] == ["ns/victim"]
    assert "  nominated to node a, waiting for 1 preempted pod(s) to go: ns/victim" in render(report)


def test_a_preemptor_waits_for_victims_whose_binding_was_in_flight() -> None:
    """A victim chosen while its own binding was in flight holds its devices by an assumed
    allocation, then by a special claim written under a new name: the preemptor waits for both
    (found by the chaos run: it evicted on one node after another)."""
    s = cluster({"g": 2})
    victim = s.upsert_pod(pod("v", gpus=2, priority=0))
    s.assume_pod(victim.uid, "g")
    s.assume_allocation(assumed_claim_key(victim.uid), allocation("g", "gpu-0", "gpu-1"))
    waiting = releasing_of([victim], s)
    assert waiting.pending(s)  # assumed: in flight
    s.forget_allocation(assumed_claim_key(victim.uid))
    s.upsert_claim(special_claim("v-written", "v", victim.uid, alloc=allocation("g", "gpu-0", "gpu-1")))
    assert waiting.pending(s)  # its claim, written after the choice
    s.remove_claim("ns", "v-written")
    assert not waiting.pending(s)


def test_a_new_leader_holds_again_what_an_earlier_preemption_freed() -> None:
    """The hold lived in the old leader's memory; the new one rebuilds it from the nomination: the
    devices of the victim still terminating and of the one already gone (its claim not yet
    released), not those of the pods that stay."""
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings

    s = cluster({"g": 4})
    for i in range(4):
        s.upsert_pod(running(f"low{i}", "g", gpus=1, claim_name=f"c{i}"))
        s.upsert_claim(special_claim(f"c{i}", f"low{i}", f"uid-low{i}", alloc=allocation("g", f"gpu-{i}"), rv="1"))
    going = running("low1", "g", gpus=1, claim_name="c1", rv="2")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    going["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    s.upsert_pod(going)
    s.remove_pod("uid-low2")  # gone; its claim c2 still allocated until the releaser frees it
    hi = pod("hi", gpus=2, priority=100)
    hi["status"]["nominatedNodeName"] = "g"
    info = s.upsert_pod(hi)
    sched = Scheduler(None, s, Settings(scheduler_name="draxr"), None)  # type: ignore[arg-type]
    assert sched.rebuild_holds() == 1
    assert sched.rebuild_holds() == 0  # (held already)
    held = s.tracker._assumed[held_claim_key(info.uid)].dedicated
    assert sorted(device for _, _, device in held) == ["gpu-1", "gpu-2"]
    assert sched.preemptor.releasing[info.uid].pending(s)
    # Once they are free, a lower-priority pod still cannot take them; the preemptor can.
    s.remove_pod("uid-low1")
    for c in ("c1", "c2"):
        s.remove_claim("ns", c)
    assert not sched.preemptor.releasing[info.uid].pending(s)
    low = s.upsert_pod(pod("late", gpus=1, priority=0))
    assert isinstance(schedule(low, s, features=DEFAULT_FEATURES), Unschedulable)
    got = schedule(s.pods[info.uid], s, features=DEFAULT_FEATURES)
    assert isinstance(got, Decision)
    assert got.node == "g"


def test_no_hold_is_rebuilt_where_nothing_is_on_its_way_out() -> None:
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings

    s = cluster({"g": 2})
    for i in range(2):
        s.upsert_pod(running(f"low{i}", "g", gpus=1, claim_name=f"c{i}"))
        s.upsert_claim(special_claim(f"c{i}", f"low{i}", f"uid-low{i}", alloc=allocation("g", f"gpu-{i}"), rv="1"))
    hi = pod("hi", gpus=2, priority=100)
    hi["status"]["nominatedNodeName"] = "g"
    s.upsert_pod(hi)
    sched = Scheduler(None, s, Settings(scheduler_name="draxr"), None)  # type: ignore[arg-type]
    assert sched.rebuild_holds() == 0
    assert not s.tracker.is_assumed(held_claim_key("uid-hi"))


def test_a_hold_that_cannot_be_rebuilt_does_not_stop_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader's rebuild_holds runs before it schedules: a failure on one pod is logged and
    skipped, never raised (the leader would exit and the next one fail the same way)."""
    from draxr import scheduler as scheduler_module
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings

    s = cluster({"g": 2})
    for name in ("a", "b"):
        p = pod(name, gpus=1, priority=100)
        p["status"]["nominatedNodeName"] = "g"
        s.upsert_pod(p)
    calls: list[str] = []

    def broken(pod: PodInfo, *_: Any) -> None:
        calls.append(pod.name)
        raise RuntimeError("boom")

    monkeypatch.setattr(scheduler_module, "rebuilt_hold", broken)
    sched = Scheduler(None, s, Settings(scheduler_name="draxr"), None)  # type: ignore[arg-type]
    assert sched.rebuild_holds() == 0
    assert calls == ["a", "b"]


def _gpu_nodes(layout: list[list[tuple[int, int]]], size: int) -> ClusterState:
    """Nodes of ``size`` devices; per node, holders as (devices, priority), devices in order."""
    s = cluster({f"g{i}": size for i in range(len(layout))})
    for i, holders in enumerate(layout):
        next_device = 0
        for j, (count, priority) in enumerate(holders):
            devices = tuple(f"gpu-{d}" for d in range(next_device, min(size, next_device + count)))
            next_device += len(devices)
            if devices:
                gpu_holder(s, f"g{i}-p{j}", f"g{i}", devices, priority=priority)
    return s


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(
        st.lists(st.tuples(st.integers(1, 2), st.integers(0, 3)), min_size=1, max_size=6), min_size=1, max_size=3
    ),
    size=st.integers(4, 8),
    wanted=st.integers(1, 4),
    shuffle=st.randoms(use_true_random=False),
)
def test_a_dry_run_reusing_its_last_fit_names_the_victims_and_devices_of_a_full_one(
    layout: list[list[tuple[int, int]]], size: int, wanted: int, shuffle: Any
) -> None:
    """_Trial._still_fits skips the allocator when the pods put back hold none of the last fit's
    devices; the outcome (node, victims, held devices) is the one every allocator call gives."""
    for holders in layout:
        shuffle.shuffle(holders)
    outcomes = []
    for reuse in (True, False):
        s = _gpu_nodes(layout, size)
        with pytest.MonkeyPatch.context() as mp:
            if not reuse:
                mp.setattr(preemption_module._Trial, "_still_fits", lambda self, freed: False)
            result = schedule(s.upsert_pod(pod("hi", gpus=wanted, priority=100)), s, features=DEFAULT_FEATURES)
            if not isinstance(result, Unschedulable):
                return
            out = preempt(s.pods["uid-hi"], s, result, features=DEFAULT_FEATURES)
        chosen = out.chosen
        outcomes.append(
            (chosen.node, [v.name for v in chosen.victims], out.held) if chosen is not None else (None, out.message)
        )
    assert outcomes[0] == outcomes[1]


def test_a_dry_run_calls_the_allocator_only_when_a_pod_put_back_holds_a_device_it_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight 1-device pods of rising priority, a 2-device preemptor: the first fit takes gpu-0 and
    gpu-1; of the seven pods put back (most important first), only the holders of the devices the
    current fit takes make the allocator run again."""
    s = _gpu_nodes([[(1, p) for p in range(8)]], 8)
    calls = []
    real = preemption_module.DynamicResources.filter

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(self, *a, **kw)

    result = schedule(s.upsert_pod(pod("hi", gpus=2, priority=100)), s, features=DEFAULT_FEATURES)
    assert isinstance(result, Unschedulable)
    monkeypatch.setattr(preemption_module.DynamicResources, "filter", counted)
    out = preempt(s.pods["uid-hi"], s, result, features=DEFAULT_FEATURES)
    assert out.chosen is not None
    assert sorted(v.name for v in out.chosen.victims) == ["g0-p0", "g0-p1"]
    # All removed: gpu-0, gpu-1 taken. p7..p2 put back hold neither (no call); p1 holds gpu-1: a call,
    # which fails (only gpu-0 and gpu-1 free), so p1 is a victim; p0 likewise.
    assert len(calls) == 3


def _held_for_hi() -> tuple[ClusterState, Any, PodInfo]:
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings

    s = cluster({"g": 2})
    going = running("low", "g", gpus=2, claim_name="c", rv="2")
    going["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    going["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    s.upsert_pod(going)
    s.upsert_claim(special_claim("c", "low", "uid-low", alloc=allocation("g", "gpu-0", "gpu-1"), rv="1"))
    hi = pod("hi", gpus=2, priority=100, rv="1")
    hi["status"]["nominatedNodeName"] = "g"
    info = s.upsert_pod(hi)
    sched = Scheduler(None, s, Settings(scheduler_name="draxr"), None)  # type: ignore[arg-type]
    assert sched.rebuild_holds() == 1
    return s, sched, info


def test_a_hold_goes_with_its_pods_nomination() -> None:
    """The nomination cleared by someone else (the API shows none): the devices held for the pod
    are free again; kept, they stood against every pod (the chaos run's 4-GPU pod that saw 3
    free where the observer counted 4)."""
    s, sched, info = _held_for_hi()
    assert s.tracker.is_assumed(held_claim_key(info.uid))
    cleared = pod("hi", gpus=2, priority=100, rv="2")
    sched.pod_changed(s.upsert_pod(cleared), info)
    assert not s.tracker.is_assumed(held_claim_key(info.uid))
    assert info.uid not in sched.preemptor.releasing


def test_a_hold_outlives_an_event_that_keeps_the_nomination() -> None:
    s, sched, info = _held_for_hi()
    again = pod("hi", gpus=2, priority=100, rv="2", annotations={"x": "y"})
    again["status"]["nominatedNodeName"] = "g"
    sched.pod_changed(s.upsert_pod(again), info)
    assert s.tracker.is_assumed(held_claim_key(info.uid))


def test_a_lower_preemptor_that_loses_its_nomination_loses_its_hold() -> None:
    """A higher preemptor on the same node clears the lower ones' nominations (upstream's
    getLowerPriorityNominatedPods): their holds go too."""
    s, sched, info = _held_for_hi()
    top = s.upsert_pod(pod("top", gpus=2, priority=1000))
    chosen = Candidate(node="g", victims=(), pdb_violations=0)

    class _Quiet:
        async def pod_event(self, *_: Any, **__: Any) -> None:
            return None

    sched.preemptor.recorder = _Quiet()

    async def _clear(*_: Any, **__: Any) -> None:
        return None

    sched.preemptor._clear_nomination = _clear  # type: ignore[method-assign]
    asyncio.run(sched.preemptor.actuate(top, chosen))
    assert s.pods[info.uid].nominated == ""
    assert not s.tracker.is_assumed(held_claim_key(info.uid))


def test_a_victim_whose_delete_failed_is_not_waited_for() -> None:
    """Two victims, one delete fails (an API error): the preemptor waits for the deleted one's
    claims only. Waiting for the running one's blocked every later attempt ("not eligible due to
    claims of preempted pods not yet deallocated"; the chaos run at seed 701939, 51 s)."""
    from draxr.scheduler import Scheduler
    from draxr.settings import Settings

    s = cluster({"g": 2})
    for name, dev in (("a", "gpu-0"), ("b", "gpu-1")):
        s.upsert_pod(running(name, "g", gpus=1, claim_name=f"c-{name}", rv="2"))
        s.upsert_claim(special_claim(f"c-{name}", name, f"uid-{name}", alloc=allocation("g", dev), rv="1"))
    hi = s.upsert_pod(pod("hi", gpus=2, priority=100, rv="1"))
    sched = Scheduler(None, s, Settings(scheduler_name="draxr"), None)  # type: ignore[arg-type]
    victims = (s.pods["uid-a"], s.pods["uid-b"])
    chosen = Candidate(node="g", victims=victims, pdb_violations=0)
    sched.preemptor.chose(hi, chosen)
    assert sched.preemptor.releasing[hi.uid].victims == {"uid-a", "uid-b"}

    async def _delete(_: PodInfo, victim: PodInfo) -> bool:
        if victim.uid == "uid-a":
            raise RuntimeError("500")
        return True

    class _Quiet:
        async def pod_event(self, *_: Any, **__: Any) -> None:
            return None

    sched.preemptor._delete = _delete  # type: ignore[method-assign]
    sched.preemptor.recorder = _Quiet()
    asyncio.run(sched.preemptor.actuate(hi, chosen))
    assert sched.preemptor.releasing[hi.uid].victims == {"uid-b"}
    assert sched.preemptor.releasing[hi.uid].pending(s)  # b's claim is still allocated
    s.upsert_claim(special_claim("c-b", "b", "uid-b", rv="3"))  # b's claim released
    assert not sched.preemptor.releasing[hi.uid].pending(s)  # a's, still allocated, is not waited for
