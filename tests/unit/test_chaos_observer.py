"""The chaos run's observer (bench/chaos.py) on made-up snapshots and claim events: each invariant
fires when it is broken (preemption's too), once per incident, and not before its time limit
(counted from the end of the last fault)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..bench_loader import load

chaos = load("chaos")
DRIVER = chaos.DRIVERS[chaos.GPU]


def observer(nodes: dict[str, int] | None = None) -> Any:
    obs = chaos.Observer(api=None, cfg=chaos.Config(grace=30.0))
    for node, n in (nodes or {"n1": 2}).items():
        obs.devices[(DRIVER, node)] = {f"gpu-{i}" for i in range(n)}
    obs.node_count = len(obs.devices)
    return obs


def pod(name: str, count: int = 1, node: str = "", claim: str = "", phase: str = "Pending", **extra: Any) -> Any:
    status: dict[str, Any] = {"phase": phase}
    if claim:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": claim, "requestMappings": []}
    if extra.get("condition"):
        status["conditions"] = [extra["condition"]]
    if extra.get("nominated"):
        status["nominatedNodeName"] = extra["nominated"]
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": extra.get("created", "2026-01-01T00:00:00Z"),
        },
        "spec": {
            "schedulerName": "draxr",
            "nodeName": node or None,
            "priority": extra.get("priority", 0),
            "preemptionPolicy": extra.get("policy", "PreemptLowerPriority"),
            "containers": [{"name": "c", "resources": {"limits": {chaos.GPU: str(count)}}}],
        },
        "status": status,
    }


def claim(name: str, owner: str, devices: list[tuple[str, str]], reserved: bool = True) -> Any:
    results = [{"request": "r", "driver": DRIVER, "pool": pool, "device": dev} for pool, dev in devices]
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {"devices": {"results": results}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": owner, "uid": f"uid-{owner}"}]
    return {
        "metadata": {
            "name": name,
            "uid": f"cuid-{name}",
            "annotations": {chaos.SPECIAL_CLAIM: "true"},
            "ownerReferences": [{"kind": "Pod", "name": owner, "uid": f"uid-{owner}", "controller": True}],
        },
        "status": status,
    }


def test_a_correct_snapshot_breaks_nothing() -> None:
    obs = observer()
    for t in (0.0, 40.0, 80.0):
        obs.check(t, [claim("c-a", "a", [("n1", "gpu-0")])], [pod("a", node="n1", claim="c-a", phase="Running")])
    assert not any(obs.violations.values())
    assert obs.placement_checked == {"uid-a"}


def test_a_device_in_two_claims_counts_once_per_incident() -> None:
    obs = observer()
    claims = [claim("c-a", "a", [("n1", "gpu-0")]), claim("c-b", "b", [("n1", "gpu-0")])]
    pods = [pod("a", node="n1", claim="c-a", phase="Running"), pod("b", node="n1", claim="c-b", phase="Running")]
    obs.check(0.0, claims, pods)
    obs.check(1.0, claims, pods)
    assert obs.violations["double_allocation"] == 1


def test_a_claim_left_after_its_pod_went_counts_after_the_grace_from_the_last_fault() -> None:
    obs = observer()
    left = [claim("c-a", "a", [("n1", "gpu-0")])]
    obs.check(0.0, left, [])
    obs.fault_started()
    obs.check(40.0, left, [])  # a fault is on: no time limit runs out
    obs.fault_ended(35.0)
    obs.check(60.0, left, [])
    assert obs.violations["stale_claim"] == 0
    obs.check(66.0, left, [])
    assert obs.violations["stale_claim"] == 1
    # Terminal counts as ended too; a released claim is forgotten.
    obs.check(70.0, [claim("c-b", "b", [])], [pod("b", node="n1", claim="c-b", phase="Succeeded")])
    obs.check(101.0, [claim("c-b", "b", [])], [pod("b", node="n1", claim="c-b", phase="Succeeded")])
    assert obs.violations["stale_claim"] == 2


def test_a_pod_bound_again_or_where_it_does_not_fit() -> None:
    obs = observer({"n1": 2, "n2": 2})
    obs.check(0.0, [claim("c-a", "a", [("n1", "gpu-0")])], [pod("a", node="n1", claim="c-a", phase="Running")])
    obs.check(1.0, [claim("c-a", "a", [("n2", "gpu-0")])], [pod("a", node="n2", claim="c-a", phase="Running")])
    assert obs.violations["rebound"] == 1
    # two devices asked, one allocated, on another node, not reserved for it
    wrong = [claim("c-b", "b", [("n1", "gpu-1")], reserved=False)]
    obs.check(2.0, wrong, [pod("b", count=2, node="n2", claim="c-b", phase="Running")])
    assert obs.violations["wrong_placement"] == 0  # (the claims may have been listed before the binding)
    obs.check(3.0, wrong, [pod("b", count=2, node="n2", claim="c-b", phase="Running")])
    assert obs.violations["wrong_placement"] == 1
    [detail] = [d for d in obs.details if d["invariant"] == "wrong_placement"]
    assert len(detail["why"]) == 3, detail
    # bound without a claim at all
    obs.check(4.0, [], [pod("c", node="n1", phase="Running")])
    assert obs.violations["wrong_placement"] == 2


def test_a_claim_missing_or_unallocated_in_one_list_is_looked_at_again() -> None:
    obs = observer()
    p = pod("a", node="n1", claim="c-a", phase="Running")
    obs.check(0.0, [], [p])
    obs.check(1.0, [claim("c-a", "a", [], reserved=False)], [p])
    obs.check(2.0, [claim("c-a", "a", [("n1", "gpu-0")])], [p])
    assert obs.violations["wrong_placement"] == 0
    assert "uid-a" in obs.placement_checked


def test_pending_pods_that_fit_are_handed_the_free_devices_oldest_first() -> None:
    obs = observer({"n1": 2})
    held = claim("c-x", "x", [("n1", "gpu-0")])
    pods = [
        pod("x", node="n1", claim="c-x", phase="Running"),
        pod("old", created="2026-01-01T00:00:00Z"),
        pod("new", created="2026-01-01T00:00:05Z"),
    ]
    obs.check(0.0, [held], pods)
    obs.check(31.0, [held], pods)
    assert obs.violations["fitting_unbound"] == 1
    assert [d["pod"] for d in obs.details] == ["old"]  # the one free device is the older pod's


def no_room(count: int, free: int) -> str:
    return (
        f"cannot allocate all claims: {count} device(s) of class {DRIVER} requested, "
        f"only {free} free and matching on this node"
    )


NO_VICTIMS = "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."


def test_a_pod_that_fits_nowhere_needs_a_true_failed_scheduling() -> None:
    obs = observer({"n1": 2})
    message = f"0/1 nodes are available: 1 {no_room(3, 2)}. {NO_VICTIMS}"
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    lying = {**cond, "message": message.replace("0/1 nodes are available: 1", "0/7 nodes are available: 7", 1)}
    pods = [pod("ok", count=3, condition=cond), pod("lies", count=3, condition=lying), pod("silent", count=3)]
    obs.failed_events = {"uid-ok": {message}, "uid-lies": {message}}
    obs.check(0.0, [], pods)
    obs.check(20.0, [], pods)
    assert obs.violations["untrue_reason"] == 0  # not yet
    obs.check(31.0, [], pods)
    assert obs.violations["untrue_reason"] == 2
    assert sorted(d["pod"] for d in obs.details) == ["lies", "silent"]
    assert obs.reason_ok == {"uid-ok"}
    obs.failed_events = {}
    obs.check(40.0, [], [pod("no-event", count=3, condition=cond)])
    obs.check(80.0, [], [pod("no-event", count=3, condition=cond)])
    assert obs.violations["untrue_reason"] == 3


def test_the_whole_failed_scheduling_message_is_compared() -> None:
    """Not the prefix: a right count with a wrong reason, a node with enough free devices, a wrong
    preemption part, an Event that says something else: untrue."""
    n = "0/1 nodes are available: 1"
    true = f"{n} {no_room(3, 2)}. {NO_VICTIMS}"
    untrue = {
        "reason": f"{n} Insufficient example.com/gpu. {NO_VICTIMS}",
        "bare": f"{n} cannot allocate all claims. {NO_VICTIMS}",
        "enough-free": f"{n} {no_room(3, 3)}. {NO_VICTIMS}",
        "more-than-there-are": f"{n} {no_room(5, 4)}. {NO_VICTIMS}",
        "other-count": f"{n} {no_room(4, 2)}. {NO_VICTIMS}",
        "preemption": f"{n} {no_room(3, 2)}. preemption: {n} Preemption is not helpful for scheduling.",
        "no-preemption": f"{n} {no_room(3, 2)}.",
        "short": f"{n} {no_room(3, 2)}. preemption: 0/1 nodes are available: .",
        "extra": f"{true} and more",
        "two-nodes": f"0/1 nodes are available: 1 {no_room(3, 2)}, 1 {no_room(3, 1)}. {NO_VICTIMS}",
    }
    for label, message in [("true", true), *untrue.items()]:
        obs = observer({"n1": 2})
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        obs.failed_events = {f"uid-{label}": {message}}
        obs.check(0.0, [], [pod(label, count=3, condition=cond)])
        obs.check(31.0, [], [pod(label, count=3, condition=cond)])
        assert obs.violations["untrue_reason"] == (label != "true"), (label, obs.details)
    # The condition is right but draxr's Event says something else.
    obs = observer({"n1": 2})
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": true}
    obs.failed_events = {"uid-p": {untrue["preemption"]}}
    obs.check(0.0, [], [pod("p", count=3, condition=cond)])
    obs.check(31.0, [], [pod("p", count=3, condition=cond)])
    assert obs.violations["untrue_reason"] == 1
    # A pod that fits only now and then (2 devices, both taken): the preemption part of a pod
    # that may not preempt, and of one that may (any reasons that account for every node).
    obs = observer({"n1": 2})
    held = [claim("c-x", "x", [("n1", "gpu-0"), ("n1", "gpu-1")])]
    running = pod("x", count=2, node="n1", claim="c-x", phase="Running", priority=HIGH)
    never = f"{n} {no_room(2, 0)}. preemption: not eligible due to preemptionPolicy=Never."
    helpless = f"{n} {no_room(2, 0)}. preemption: {n} Preemption is not helpful for scheduling."
    cases = [("n-ok", never, "Never"), ("n-bad", helpless, "Never"), ("l-ok", helpless, "PreemptLowerPriority")]
    for label, message, policy in cases:
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        obs.failed_events[f"uid-{label}"] = {message}
        p = pod(label, count=2, condition=cond, priority=1000 if policy == "Never" else 0, policy=policy)
        obs.check(0.0, held, [running, p])
        obs.check(31.0, held, [running, p])
    assert [d["pod"] for d in obs.details] == ["n-bad"]


HIGH = 100000
PREEMPTED = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


def test_a_pod_that_fits_only_by_evicting_lower_priority_is_bound_within_the_grace() -> None:
    obs = observer({"n1": 2, "n2": 2})
    claims = [claim("c-lo", "lo", [("n1", "gpu-0"), ("n1", "gpu-1")]), claim("c-eq", "eq", [("n2", "gpu-0")])]
    pods = [
        pod("lo", count=2, node="n1", claim="c-lo", phase="Running"),
        pod("eq", count=1, node="n2", claim="c-eq", phase="Running", priority=HIGH),
        pod("hi", count=2, priority=HIGH),
        pod("never", count=2, priority=1000, policy="Never"),  # fits by evicting, may not
        pod("low", count=2),  # nothing lower to evict
    ]
    obs.check(0.0, claims, pods)
    assert obs.evict_fit == {"uid-hi"}
    obs.check(30.0, claims, pods)
    assert obs.violations["preemptor_unbound"] == 0  # not yet
    obs.check(31.0, claims, pods)
    assert obs.violations["preemptor_unbound"] == 1
    [detail] = [d for d in obs.details if d["invariant"] == "preemptor_unbound"]
    assert detail["pod"] == "hi"
    assert detail["node"] == "n1"  # n2's other device is held by a pod of the same priority


def test_a_preemptor_keeps_its_time_while_its_victims_go_and_their_claims_are_released() -> None:
    obs = observer({"n1": 2})
    held = [claim("c-lo", "lo", [("n1", "gpu-0"), ("n1", "gpu-1")])]
    hi = pod("hi", count=2, priority=HIGH)
    obs.check(0.0, held, [pod("lo", count=2, node="n1", claim="c-lo", phase="Running"), hi])
    obs.check(10.0, held, [hi])  # the victim went, its claim is still allocated: it still fits
    obs.check(20.0, [], [hi])  # released: it fits on free devices
    obs.check(31.0, [], [hi])
    assert obs.violations["preemptor_unbound"] == 1
    assert obs.violations["fitting_unbound"] == 0  # free for 11 s only
    bound = [claim("c-hi", "hi", [("n1", "gpu-0"), ("n1", "gpu-1")])]
    obs.check(32.0, bound, [pod("hi", count=2, node="n1", claim="c-hi", phase="Running", priority=HIGH)])
    assert obs.summary()["checked"]["preemptors"] == 1


def test_a_nominated_pod_is_handed_its_node_first_and_before_lower_priority() -> None:
    obs = observer({"n1": 2, "n2": 4})
    busy = [claim("c-x", "x", [("n2", "gpu-0"), ("n2", "gpu-1"), ("n2", "gpu-2")])]
    pods = [
        pod("x", count=3, node="n2", claim="c-x", phase="Running", priority=HIGH),
        pod("old-low", count=1, created="2026-01-01T00:00:00Z"),
        pod("hi", count=2, priority=HIGH, nominated="n1", created="2026-01-01T00:00:05Z"),
    ]
    obs.check(0.0, busy, pods)
    obs.check(31.0, busy, pods)
    # n1's two free devices are the nominated pod's; the old low pod gets n2's last one
    assert sorted(d["pod"] for d in obs.details) == ["hi", "old-low"]
    assert {d["pod"]: d.get("fits_on") for d in obs.details} == {"hi": "n1", "old-low": "n2"}


def test_a_victim_must_be_below_a_pod_nominated_to_or_bound_on_its_node() -> None:
    obs = observer({"n1": 2, "n2": 2})
    victim = pod("v", node="n1", claim="c-v", phase="Running", condition=PREEMPTED)
    obs.check(0.0, [], [victim, pod("hi", count=1, priority=HIGH, nominated="n1")])
    obs.check(31.0, [], [])
    assert obs.violations["victim_priority"] == 0
    assert obs.victims_checked == 1
    # Same priority as the pod preempting it on n2, and nothing higher there.
    equal = pod("w", node="n2", claim="c-w", phase="Running", priority=5, condition=PREEMPTED)
    obs.check(40.0, [], [equal, pod("peer", count=1, priority=5, nominated="n2")])
    obs.check(71.0, [], [])
    assert obs.violations["victim_priority"] == 1
    # The Preempted Event names a preemptor that is not above it.
    obs.check(80.0, [], [pod("u", node="n1", claim="c-u", phase="Running", priority=HIGH)])
    obs.victim("uid-u", "u", 80.0, node="n1", preemptor="uid-hi")
    obs.check(111.0, [], [])
    assert obs.violations["victim_priority"] == 2
    assert "preemptor" in obs.details[-1]["why"]
    # The Event names a preemptor above it, nominated to the node for less than a poll: enough.
    obs.check(120.0, [], [pod("t", node="n2", claim="c-t", phase="Running")])
    obs.victim("uid-t", "t", 120.0, node="n2", preemptor="uid-hi")
    obs.victim("uid-s", "s", 120.0, node="n1", preemptor="uid-hi")
    obs.check(151.0, [], [])
    assert obs.violations["victim_priority"] == 2
    assert obs.summary()["preemptors_on_several_nodes"] == 1  # uid-hi: victims on n1 and n2


class Events:
    """The observer's API client for ``Observer.events``: the namespace's Events by reason."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events

    async def list(self, path: str, query: dict[str, str] | None = None) -> list[Any]:
        reason = (query or {})["fieldSelector"].removeprefix("reason=")
        return [e for e in self.events if e["reason"] == reason]


def event(reason: str, pod_name: str, message: str, uid: str = "", count: int = 1, at: str = "") -> Any:
    """An Event as kube-apiserver's core/v1 shows one that draxr posted (events.k8s.io/v1)."""
    e: dict[str, Any] = {
        "metadata": {"name": f"{pod_name}.{uid or reason}", "uid": uid or f"e-{pod_name}-{reason}-{message}"},
        "reason": reason,
        "message": message,
        "reportingComponent": "draxr",
        "involvedObject": {"kind": "Pod", "name": pod_name, "uid": f"uid-{pod_name}"},
        "eventTime": at or None,
    }
    if count > 1:
        e["series"] = {"count": count, "lastObservedTime": at or None}
    return e


def dry_run(node: str, victims: int) -> str:
    """draxr's FailedScheduling message for a preemption that chose ``node``."""
    return (
        f"0/2 nodes are available: 2 {no_room(2, 0)}. "
        f"preemption: found a potential placement for pod on node {node}, preempting {victims} victims"
    )


def preempted(victim: str, preemptor: str, node: str, at: str = "") -> Any:
    return event("Preempted", victim, f"Preempted by pod uid-{preemptor} on node {node}", at=at)


def judged(events: list[Any], pods: Sequence[Any] = ()) -> Any:
    obs = chaos.Observer(api=Events(events), cfg=chaos.Config(grace=30.0))
    if pods:
        obs.check(0.0, [], list(pods))
    asyncio.run(obs.events())
    obs.judge_preemptions()
    return obs


def test_victims_beyond_what_the_dry_run_named_are_caught() -> None:
    """Per preemptor and node: the distinct pods evicted for it there are at most the victims its
    dry runs there named, summed over its nominations (an Event repeated counts by its series)."""
    two = [preempted("v1", "hi", "n1"), preempted("v2", "hi", "n1")]
    obs = judged([event("FailedScheduling", "hi", dry_run("n1", 1)), *two])
    assert obs.violations["victims_beyond_dry_run"] == 1
    [detail] = obs.details
    assert (detail["node"], detail["victims"], detail["named_by_events"]) == ("n1", ["v1", "v2"], 1)
    # Its dry run named another node; no dry run seen at all.
    assert judged([event("FailedScheduling", "hi", dry_run("n2", 2)), *two]).violations["victims_beyond_dry_run"] == 1
    assert judged(two).violations["victims_beyond_dry_run"] == 1
    # Right: one nomination naming two; one naming one, repeated (series count 2); two Events naming one each.
    one = dry_run("n1", 1)
    for named in (
        [event("FailedScheduling", "hi", dry_run("n1", 2))],
        [event("FailedScheduling", "hi", one, count=2)],
        [event("FailedScheduling", "hi", one, uid="a"), event("FailedScheduling", "hi", one, uid="b")],
    ):
        obs = judged([*named, *two])
        assert obs.violations["victims_beyond_dry_run"] == 0, (named, obs.details)
    # A victim evicted (and named) by two nominations counts once.
    named = [event("FailedScheduling", "hi", one, count=2)]
    again = preempted("v1", "hi", "n1", at="2026-01-01T00:00:09Z")
    assert judged([*named, *two, again]).violations["victims_beyond_dry_run"] == 0
    assert judged([*named, *two, again, preempted("v3", "hi", "n1")]).violations["victims_beyond_dry_run"] == 1


def test_the_dry_run_is_read_from_the_condition_and_the_logs_too(tmp_path: Any) -> None:
    """A FailedScheduling Event lost to a fault: the PodScheduled condition seen (one nomination per
    lastTransitionTime), or the replicas' "preempting" log lines, name the victims."""
    two = [preempted("v1", "hi", "n1"), preempted("v2", "hi", "n1")]
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": dry_run("n1", 2),
            "lastTransitionTime": "2026-01-01T00:00:01Z"}  # fmt: skip
    hi = pod("hi", count=2, priority=HIGH, condition=cond, nominated="n1")
    assert judged(two, [hi]).violations["victims_beyond_dry_run"] == 0
    assert judged(two, [hi]).dry_run_named("uid-hi", "n1")[0] == 2
    # The condition names one victim: not enough; nor is a log line naming one (the larger record
    # counts, not their sum), until one names two.
    one = pod("hi", count=2, priority=HIGH, condition={**cond, "message": dry_run("n1", 1)}, nominated="n1")
    assert judged(two, [one]).violations["victims_beyond_dry_run"] == 1
    other = json.dumps({"event": "pod preempted", "preemptor": "chaos/hi", "victim": "chaos/v3"})
    for logged, violations in ((["chaos/v1"], 1), (["chaos/v1", "chaos/v2"], 0)):
        line = json.dumps({"pod": "chaos/hi", "node": "n1", "victims": logged, "event": "preempting"})
        (tmp_path / "draxr-a.1.log").write_text(f"{line}\n{other}\nnot json\n")
        obs = chaos.Observer(api=Events(two), cfg=chaos.Config(grace=30.0))
        obs.check(0.0, [], [one])
        asyncio.run(obs.events())
        chaos.read_replica_logs(obs, tmp_path)
        assert (obs.dry_run_log_lines, obs.dry_run_logged[("uid-hi", "n1")]) == (1, len(logged))
        obs.judge_preemptions()
        assert obs.violations["victims_beyond_dry_run"] == violations, obs.details


def test_a_preemptor_with_victims_on_two_nodes_is_caught() -> None:
    fine = [preempted("v1", "hi", "n1"), preempted("v2", "hi", "n1"), preempted("w", "other", "n2")]
    assert judged(fine).violations["preemptor_several_nodes"] == 0
    obs = judged([preempted("v1", "hi", "n1", at="2026-01-01T00:00:01Z"),
                  preempted("v2", "hi", "n2", at="2026-01-01T00:00:05Z")])  # fmt: skip
    assert obs.violations["preemptor_several_nodes"] == 1
    [detail] = [d for d in obs.details if d["invariant"] == "preemptor_several_nodes"]
    assert list(detail["nodes"]) == ["n1", "n2"]  # in the order of their first eviction
    assert detail["nodes"]["n2"]["victims"] == ["v2"]
    assert obs.summary()["preemptors_on_several_nodes"] == 1


def test_a_preemptor_may_move_once_its_node_was_seen_lost() -> None:
    """The earlier node gone (or cordoned) at an inventory after its eviction, the one before having
    seen it usable before the eviction on the later node: exempt. Lost only after: a violation."""

    def node(name: str, **spec: Any) -> Any:
        return {"metadata": {"name": name}, "spec": spec}

    for lost_at, later, exempt in ((30.0, 35.0, True), (30.0, 20.0, False)):
        for after in ([node("n2")], [node("n1", unschedulable=True), node("n2")],
                      [node("n1", taints=[{"key": "k", "effect": "NoSchedule"}]), node("n2")]):  # fmt: skip
            obs = observer({"n1": 2, "n2": 2})
            obs.node_inventory([node("n1"), node("n2")], 10.0)
            obs.node_inventory([node("n1"), node("n2")], 25.0 if not exempt else 10.0)
            obs.victim("uid-v1", "v1", 15.0, node="n1", preemptor="uid-hi")
            obs.node_inventory(after, lost_at)
            obs.victim("uid-v2", "v2", later, node="n2", preemptor="uid-hi")
            obs.judge_preemptions()
            assert obs.violations["preemptor_several_nodes"] == (not exempt), (lost_at, later, after, obs.details)
            assert bool(obs.moved_after_node_lost) == exempt


def test_a_preemptor_may_move_once_its_binding_or_an_eviction_there_failed(tmp_path: Any) -> None:
    """A replica's "binding failed, pod requeued" (or "victim not preempted") line for the preemptor,
    naming the earlier node, between its first evictions on the two nodes: exempt (kube-scheduler
    clears the nomination after a binding-cycle error; a failed eviction ends that preemption).
    Another node, another pod, or a failure after the move: a violation."""
    base = time.monotonic()

    def logged(pod: str, node: str, ago: float, event: str = "binding failed, pod requeued") -> str:
        stamp = datetime.fromtimestamp(time.time() - ago, UTC).isoformat().replace("+00:00", "Z")
        who = {"pod": f"chaos/{pod}"} if event.startswith("binding") else {"preemptor": f"chaos/{pod}", "victim": "x"}
        return json.dumps({**who, "node": node, "error": "injected", "timestamp": stamp, "event": event})

    for line, exempt in (
        (logged("hi", "n1", 15.0), True),
        (logged("hi", "n1", 15.0, "victim not preempted"), True),
        (logged("hi", "n2", 15.0), False),
        (logged("hi", "n2", 15.0, "victim not preempted"), False),
        (logged("other", "n1", 15.0), False),
        (logged("hi", "n1", 5.0), False),
        ("", False),
    ):
        (tmp_path / "draxr-b.2.log").write_text(f"{line}\n")
        obs = observer({"n1": 2, "n2": 2})
        obs.names.update({"uid-hi": "hi", "uid-other": "other"})
        obs.victim("uid-v1", "v1", base - 20.0, node="n1", preemptor="uid-hi")
        obs.victim("uid-v2", "v2", base - 10.0, node="n2", preemptor="uid-hi")
        chaos.read_replica_logs(obs, tmp_path)
        obs.judge_preemptions()
        assert obs.violations["preemptor_several_nodes"] == (not exempt), (line, obs.details)
        assert bool(obs.moved_after_node_lost) == exempt
        if exempt:
            [move] = obs.moved_after_node_lost["uid-hi"]["moves"]
            assert [node for node, _, _ in move["after_failed"]] == ["n1"], move


def test_the_claim_events_catch_a_device_given_before_it_was_freed() -> None:
    obs = observer()
    victim, preemptor = claim("c-v", "v", [("n1", "gpu-0")]), claim("c-p", "p", [("n1", "gpu-0")])
    obs.claim_event("ADDED", victim)
    obs.claim_event("MODIFIED", claim("c-v", "v", []))  # deallocated first: fine
    obs.claim_event("ADDED", preemptor)
    assert obs.violations["double_allocation"] == 0
    obs.claim_event("ADDED", claim("c-z", "z", [("n1", "gpu-0")]))  # while the preemptor holds it
    assert obs.violations["double_allocation"] == 1
    obs.claim_event("DELETED", preemptor)
    obs.claim_event("MODIFIED", claim("c-z", "z", [("n1", "gpu-0")]))
    assert obs.violations["double_allocation"] == 1


def test_a_running_pods_claim_is_checked_at_every_poll() -> None:
    """A claim released (deallocated, unreserved, deleted) while its pod still runs is caught at the
    next poll, not only at the first look; a pod that ended or is being deleted may lose it."""
    obs = observer()
    right = [claim("c-a", "a", [("n1", "gpu-0")])]
    running = pod("a", node="n1", claim="c-a", phase="Running")
    obs.check(0.0, right, [running])
    assert obs.placement_checked == {"uid-a"}
    obs.check(1.0, right, [running])
    assert obs.held_checks == 1
    obs.check(2.0, [claim("c-a", "a", [("n1", "gpu-0")], reserved=False)], [running])
    assert obs.violations["claim_lost"] == 1
    for released in ([claim("c-a", "a", [])], []):  # deallocated, deleted
        obs = observer()
        obs.check(0.0, right, [running])
        obs.check(1.0, released, [{**running, "status": {**running["status"], "phase": "Succeeded"}}])
        assert obs.violations["claim_lost"] == 0
        obs.check(2.0, released, [running])
        assert obs.violations["claim_lost"] == 1, obs.details


def record(kind: str, started: float, ended: float, **params: Any) -> Any:
    return chaos.FaultRecord(kind, started, ended, params=params)


def test_every_replica_exit_is_explained_by_a_fault() -> None:
    records = [record("leader-sigkill", 10.0, 10.1, replica="draxr-a"), record("stall", 50.0, 56.0)]

    def exit_(replica: str, t: float, reason: str, code: int | None = None) -> dict[str, Any]:
        code = code if code is not None else -9 if reason.startswith("SIGKILL") else 1
        return {"replica": replica, "t": t, "at": t, "reason": reason, "code": code}

    obs = observer()
    chaos.judge_exits(
        obs, records, [exit_("draxr-a", 10.2, "SIGKILL (fault)"), exit_("draxr-b", 60.0, "lost leadership")]
    )
    assert obs.violations["replica_exit"] == 0
    bad = [
        exit_("draxr-b", 10.3, "SIGKILL (fault)"),  # the fault killed draxr-a
        exit_("draxr-a", 30.0, "lost leadership"),  # no fault then
        exit_("draxr-b", 52.0, "lost leadership"),
        exit_("draxr-b", 53.0, "lost leadership"),  # a second exit of the same replica for one fault
        exit_("draxr-a", 54.0, "liveness (watch pods)"),  # not what a fault explains
        exit_("draxr-a", 55.0, "lost leadership", code=3),  # its log says so, its exit code does not
    ]
    obs = observer()
    chaos.judge_exits(obs, records, bad)
    assert obs.violations["replica_exit"] == 5
    assert [d["at"] for d in obs.details] == [10.3, 30.0, 53.0, 54.0, 55.0]


def test_failed_polls_only_while_the_apiserver_is_down() -> None:
    obs = observer()
    obs.t0 = 0.0
    obs.poll_failed_at = [21.0, 29.0, 45.0]
    chaos.judge_poll_failures(obs, [record("apiserver-kill", 20.0, 25.0), record("stall", 40.0, 50.0)])
    assert obs.violations["poll_failed"] == 1
    assert obs.details[0]["at"] == 45.0


def audit_line(stage: str, jti: str, verb: str, resource: str, name: str, received: str, done: str, code: int) -> str:
    return json.dumps({
        "stage": stage, "auditID": f"{jti}-{verb}-{resource}-{name}-{received}", "verb": verb,
        "user": {"username": chaos.DRAXR_USER,
                 "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={jti}"]}},
        "objectRef": {"resource": resource, "namespace": "draxr-system" if resource == "leases" else "chaos",
                      "name": name},
        "requestReceivedTimestamp": f"2026-01-01T00:00:{received}Z", "stageTimestamp": f"2026-01-01T00:00:{done}Z",
        "responseStatus": {"code": code},
    })  # fmt: skip


def test_the_audit_log_shows_a_replica_writing_after_another_took_the_lease(tmp_path: Any) -> None:
    def write(lines: list[tuple[str, str, str, str, str, str, int]]) -> Any:
        (tmp_path / "audit.log").write_text("\n".join(audit_line(*ln) for ln in lines) + "\n")
        obs = observer()
        return obs, chaos.judge_audit(obs, tmp_path, {"ja": "draxr-a", "jb": "draxr-b"})

    rc = "ResponseComplete"
    handover = [
        (rc, "ja", "update", "leases", "draxr", "01.000000", "01.010000", 200),
        (rc, "ja", "create", "bindings", "p1", "02.000000", "02.010000", 201),
        (rc, "jb", "update", "leases", "draxr", "03.000000", "03.010000", 409),  # not yet
        (rc, "jb", "update", "leases", "draxr", "09.000000", "09.010000", 200),  # taken over
        (rc, "jb", "create", "bindings", "p2", "10.000000", "10.010000", 201),
        (rc, "ja", "update", "leases", "draxr", "11.000000", "11.010000", 409),  # the old one finds out
    ]
    obs, audit = write(handover)
    assert obs.violations["split_brain"] == 0
    assert audit["takeovers"] == 1
    assert audit["writes"] == 2
    obs, _ = write([*handover, (rc, "ja", "patch", "pods", "p3", "12.000000", "12.010000", 200)])
    assert obs.violations["split_brain"] == 1
    assert obs.details[0]["replica"] == "draxr-a"
    assert obs.details[0]["holder"] == "draxr-b"
    # Received before the takeover completed: not judged a split brain.
    obs, _ = write([*handover, (rc, "ja", "patch", "pods", "p3", "09.005000", "09.500000", 200)])
    assert obs.violations["split_brain"] == 0
    # A Lease write whose outcome the log does not show (kube-apiserver killed) may have succeeded.
    obs, audit = write([
        *handover, ("RequestReceived", "ja", "update", "leases", "draxr", "11.500000", "11.500000", 0),
        (rc, "ja", "patch", "pods", "p3", "12.000000", "12.010000", 200),
    ])  # fmt: skip
    assert obs.violations["split_brain"] == 0


def test_a_write_frozen_in_flight_by_sigstop_is_counted_apart(tmp_path: Any) -> None:
    """draxr-a renewed at 01, was SIGSTOPped at 02 and continued at 09.5 after draxr-b took the Lease
    at 09: its write received at 09.6 left the fence before the stop (counted apart); one received
    at 12 was sent after it resumed (a violation), as is one of a replica that had not renewed for
    longer than the renew deadline when it was stopped."""
    rc = "ResponseComplete"
    lines = [
        (rc, "ja", "update", "leases", "draxr", "01.000000", "01.010000", 200),
        (rc, "jb", "update", "leases", "draxr", "09.000000", "09.010000", 200),
        (rc, "ja", "patch", "events", "e1", "09.600000", "09.610000", 200),
    ]
    (tmp_path / "audit.log").write_text("\n".join(audit_line(*ln) for ln in lines) + "\n")

    def at(second: float) -> float:
        return chaos._ts(f"2026-01-01T00:00:{second:09.6f}Z")

    replicas = {"ja": "draxr-a", "jb": "draxr-b"}
    obs = observer()
    audit = chaos.judge_audit(obs, tmp_path, replicas, [("draxr-a", at(2.0), at(9.5))])
    assert obs.violations["split_brain"] == 0
    assert [w["what"] for w in audit["frozen_in_flight"]] == ["patch events/chaos/e1"]
    obs = observer()
    chaos.judge_audit(obs, tmp_path, replicas, [("draxr-a", at(6.0), at(9.5))])  # renewed 5 s before the stop
    assert obs.violations["split_brain"] == 1
    lines.append((rc, "ja", "patch", "events", "e2", "12.000000", "12.010000", 200))
    (tmp_path / "audit.log").write_text("\n".join(audit_line(*ln) for ln in lines) + "\n")
    obs = observer()
    chaos.judge_audit(obs, tmp_path, replicas, [("draxr-a", at(2.0), at(9.5))])
    assert obs.violations["split_brain"] == 1


def test_a_pod_marked_for_preemption_but_never_deleted_is_not_judged_a_victim() -> None:
    """A leader that lost its lease between the DisruptionTarget patch and the deletion: the pod
    runs on, nothing was evicted; judged only if it is deleted after all."""
    obs = observer({"n1": 2, "n2": 2})
    marked = pod("m", node="n1", claim="c-m", phase="Running", condition=PREEMPTED)
    obs.check(0.0, [], [marked])
    obs.check(31.0, [], [marked])  # overdue, still running, no nomination on n1: not a victim yet
    assert obs.violations["victim_priority"] == 0
    obs.judge_victims(32.0, final=True)
    assert (obs.violations["victim_priority"], obs.marked_not_evicted, obs.victims_checked) == (0, 1, 0)
    # The same, then deleted with nothing above it on its node: a victim below nobody.
    other = pod("o", node="n2", claim="c-o", phase="Running", condition=PREEMPTED)
    obs.check(40.0, [], [other])
    obs.check(71.0, [], [other])
    assert obs.violations["victim_priority"] == 0
    obs.check(72.0, [], [])
    obs.check(103.0, [], [])
    assert obs.violations["victim_priority"] == 1


def test_a_marked_pod_that_completes_on_its_own_is_not_judged_a_victim() -> None:
    """Its preemption cut short (the leader lost its lease after the DisruptionTarget patch), a
    Job's pod runs to completion and goes: it was not evicted."""
    obs = observer({"n1": 2})
    obs.check(0.0, [], [pod("j", node="n1", claim="c-j", phase="Running", condition=PREEMPTED)])
    obs.check(31.0, [], [pod("j", node="n1", claim="c-j", phase="Succeeded", condition=PREEMPTED)])
    obs.check(62.0, [], [])
    obs.judge_victims(63.0, final=True)
    assert (obs.violations["victim_priority"], obs.marked_not_evicted) == (0, 1)
