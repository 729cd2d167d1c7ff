"""The chaos run's observer (bench/chaos.py) on made-up snapshots and claim events: each invariant
fires when it is broken (preemption's too), once per incident, and not before its time limit
(counted from the end of the last fault)."""

from __future__ import annotations

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


def test_a_pod_that_fits_nowhere_needs_a_true_failed_scheduling() -> None:
    obs = observer({"n1": 2})
    message = "0/1 nodes are available: 1 cannot allocate all claims."
    cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    lying = {**cond, "message": "0/7 nodes are available: 7 cannot allocate all claims."}
    pods = [pod("ok", count=3, condition=cond), pod("lies", count=3, condition=lying), pod("silent", count=3)]
    obs.failed_events = {"uid-ok", "uid-lies"}
    obs.check(0.0, [], pods)
    obs.check(20.0, [], pods)
    assert obs.violations["untrue_reason"] == 0  # not yet
    obs.check(31.0, [], pods)
    assert obs.violations["untrue_reason"] == 2
    assert sorted(d["pod"] for d in obs.details) == ["lies", "silent"]
    assert obs.reason_ok == {"uid-ok"}
    obs.failed_events = set()
    obs.check(40.0, [], [pod("no-event", count=3, condition=cond)])
    obs.check(80.0, [], [pod("no-event", count=3, condition=cond)])
    assert obs.violations["untrue_reason"] == 3


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
