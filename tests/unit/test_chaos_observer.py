"""The chaos run's observer (bench/chaos.py) on made-up snapshots: each invariant fires when it is
broken, once per incident, and not before its time limit (counted from the end of the last fault)."""

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
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": extra.get("created", "2026-01-01T00:00:00Z"),
        },
        "spec": {
            "schedulerName": "draxr",
            "nodeName": node or None,
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
