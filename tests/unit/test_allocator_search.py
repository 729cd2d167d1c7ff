"""The allocator search, one rule per test (upstream: structured/internal/allocatortesting/allocator_testing.go).

Expected answers follow upstream v0.37.2 incubating; every case here was also run through the Go
allocator (see test_allocator_golden.py for the machine-checked corpus).
"""

from __future__ import annotations

from typing import Any

import pytest

from draxr.core.allocator import (
    DEFAULT_FEATURES,
    Allocated,
    AllocatedState,
    AllocationFatalError,
    Allocator,
    FatalKind,
    Features,
    Inventory,
    NodeFailure,
    NoFit,
    allocated_state_from_claims,
)
from draxr_dev.allocator.builders import claim, device, device_class, node, request, slice_, subrequest

CLASS_A = device_class("class-a", 'device.driver == "driver-a"')
CLASS_B = device_class("class-b", 'device.driver == "driver-b"')
ANY = device_class("any")


def run(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    classes: list[dict[str, Any]] | None = None,
    *,
    the_node: dict[str, Any] | None = None,
    allocated: list[dict[str, Any]] | None = None,
    features: Features = DEFAULT_FEATURES,
    fast_path: bool = True,
) -> Allocated | NoFit | NodeFailure:
    inv = Inventory(slices, classes if classes is not None else [CLASS_A, CLASS_B, ANY])
    state = allocated_state_from_claims(allocated or [], features.consumable_capacity)
    return Allocator(inv, state, features, share_id=lambda: "SHARE", fast_path=fast_path).allocate(
        the_node or node("node-1"), claims
    )


def picks(outcome: Allocated | NoFit | NodeFailure) -> list[list[str]]:
    assert isinstance(outcome, Allocated), outcome
    return [[f"{r['pool']}/{r['device']}" for r in res["devices"].get("results", [])] for res in outcome.results]


def results(outcome: Allocated | NoFit | NodeFailure, ci: int = 0) -> list[dict[str, Any]]:
    assert isinstance(outcome, Allocated), outcome
    return list(outcome.results[ci]["devices"].get("results", []))


def allocation(*devs: tuple[str, str, str], **extra: Any) -> dict[str, Any]:
    return {
        "devices": {"results": [{"request": "r", "driver": d, "pool": p, "device": n, **extra} for d, p, n in devs]}
    }


DEVS = [device("dev-0"), device("dev-1"), device("dev-2")]


# -- basics ----------------------------------------------------------------------------------


def test_simple_first_device() -> None:
    out = run([slice_("s1", DEVS)], [claim("c", request("r"))])
    assert picks(out) == [["pool-1/dev-0"]]
    assert results(out)[0] == {"request": "r", "driver": "driver-a", "pool": "pool-1", "device": "dev-0"}


def test_count_picks_in_order() -> None:
    assert picks(run([slice_("s1", DEVS)], [claim("c", request("r", count=2))])) == [["pool-1/dev-0", "pool-1/dev-1"]]


def test_not_enough_devices_is_no_fit() -> None:
    out = run([slice_("s1", DEVS)], [claim("c", request("r", count=4))])
    assert isinstance(out, NoFit)
    assert "cannot allocate all claims" in out.reason


def test_already_allocated_devices_are_skipped() -> None:
    out = run(
        [slice_("s1", DEVS)],
        [claim("c", request("r", count=2))],
        allocated=[claim("old", allocation=allocation(("driver-a", "pool-1", "dev-0")))],
    )
    assert picks(out) == [["pool-1/dev-1", "pool-1/dev-2"]]


def test_no_claims_allocates_nothing() -> None:
    out = run([slice_("s1", DEVS)], [])
    assert isinstance(out, Allocated)
    assert out.results == ()


def test_no_slices_is_no_fit() -> None:
    assert isinstance(run([], [claim("c", request("r"))]), NoFit)


def test_other_node_slices_are_ignored() -> None:
    out = run([slice_("s1", DEVS, node_name="node-2")], [claim("c", request("r"))])
    assert isinstance(out, NoFit)


def test_class_selector_filters() -> None:
    slices = [slice_("a", [device("dev-0")]), slice_("b", [device("dev-0")], driver="driver-b")]
    assert picks(run(slices, [claim("c", request("r", "class-b"))])) == [["pool-1/dev-0"]]
    out = run(slices, [claim("c", request("r", "class-b"))])
    assert results(out)[0]["driver"] == "driver-b"


def test_request_selector_after_class_selector() -> None:
    devs = [device("dev-0", attributes={"model": "l4"}), device("dev-1", attributes={"model": "a100"})]
    out = run(
        [slice_("s", devs)],
        [claim("c", request("r", selectors=('device.attributes["driver-a"].model == "a100"',)))],
    )
    assert picks(out) == [["pool-1/dev-1"]]


def test_small_and_large_backtracks_across_requests() -> None:
    # req-0 may take either device; req-1 only the large one, so req-0 must move to the small one.
    devs = [device("large", attributes={"size": 2}), device("small", attributes={"size": 1})]
    out = run(
        [slice_("s", devs)],
        [
            claim(
                "c",
                request("req-0", selectors=('device.attributes["driver-a"].size >= 1',)),
                request("req-1", selectors=('device.attributes["driver-a"].size >= 2',)),
            )
        ],
    )
    assert picks(out) == [["pool-1/small", "pool-1/large"]]


def test_backtracks_across_claims() -> None:
    devs = [device("large", attributes={"size": 2}), device("small", attributes={"size": 1})]
    out = run(
        [slice_("s", devs)],
        [
            claim("c0", request("r", selectors=('device.attributes["driver-a"].size >= 1',))),
            claim("c1", request("r", selectors=('device.attributes["driver-a"].size >= 2',))),
        ],
    )
    assert picks(out) == [["pool-1/small"], ["pool-1/large"]]


def test_devices_split_across_slices_follow_slice_names() -> None:
    slices = [
        slice_("s-b", [device("dev-1")], count=2),
        slice_("s-a", [device("dev-0")], count=2),
    ]
    assert picks(run(slices, [claim("c", request("r", count=2))])) == [["pool-1/dev-0", "pool-1/dev-1"]]


def test_pools_sorted_by_driver_then_pool() -> None:
    slices = [
        slice_("z", [device("d")], driver="driver-b", pool="pool-0"),
        slice_("y", [device("d")], driver="driver-a", pool="pool-2"),
        slice_("x", [device("d")], driver="driver-a", pool="pool-1"),
    ]
    out = run(slices, [claim("c", request("r", "any", count=3))])
    assert [(r["driver"], r["pool"]) for r in results(out)] == [
        ("driver-a", "pool-1"),
        ("driver-a", "pool-2"),
        ("driver-b", "pool-0"),
    ]


# -- generations and completeness -------------------------------------------------------------


def test_highest_generation_wins() -> None:
    slices = [
        slice_("old", [device("old-dev")], generation=1),
        slice_("new", [device("new-dev")], generation=2),
    ]
    assert picks(run(slices, [claim("c", request("r"))])) == [["pool-1/new-dev"]]


def test_newer_generation_elsewhere_makes_pool_obsolete() -> None:
    # The node sees generation 1 (2 slices expected, 1 visible); generation 2 exists for another node.
    slices = [
        slice_("mine", [device("dev-0")], generation=1, count=2),
        slice_("theirs", [device("dev-9")], generation=2, count=1, node_name="node-2"),
    ]
    out = run(slices, [claim("c", request("r", mode="All"))])
    assert isinstance(out, NoFit)  # pool dropped: not "incomplete", so All mode finds nothing


def test_incomplete_pool_is_not_used() -> None:
    out = run([slice_("s", DEVS, count=2)], [claim("c", request("r"))])
    assert isinstance(out, NoFit)


def test_pool_complete_via_slices_of_other_nodes() -> None:
    slices = [slice_("mine", [device("dev-0")], count=2), slice_("theirs", [device("dev-1")], count=2, node_name="n2")]
    assert picks(run(slices, [claim("c", request("r"))])) == [["pool-1/dev-0"]]


def test_all_mode_with_incomplete_pool_is_fatal() -> None:
    slices = [slice_("a", DEVS), slice_("b", [device("x")], driver="driver-b", count=2)]
    with pytest.raises(AllocationFatalError, match="currently being updated") as err:
        run(slices, [claim("c", request("r", mode="All"))])
    assert err.value.kind == FatalKind.INCOMPLETE_POOL


@pytest.mark.parametrize("fast_path", [True, False])
def test_no_fit_names_the_incomplete_pools(fast_path: bool) -> None:
    """Two of three announced slices: the pool's devices are not offered, and the reason says why."""
    slices = [slice_("s1", [device("dev-0")], count=3), slice_("s2", [device("dev-1")], count=3)]
    out = run(slices, [claim("c", request("r"))], fast_path=fast_path)
    assert isinstance(out, NoFit)
    assert out.reason.endswith(
        " (incomplete resource pools, not used until all their slices are published: driver-a/pool-1)"
    )
    complete = run([*slices, slice_("s3", [device("dev-2")], count=3)], [claim("c", request("r", count=4))])
    assert isinstance(complete, NoFit)
    assert "incomplete" not in complete.reason


def test_cannot_fit_names_the_incomplete_pools() -> None:
    inv = Inventory([slice_("s1", [device("dev-0")], count=2)], [CLASS_A])
    reason = Allocator(inv, AllocatedState(), DEFAULT_FEATURES).cannot_fit(node("node-1"), {"class-a": 1})
    assert reason == (
        "cannot allocate all claims: 1 device(s) of class class-a requested, only 0 free and matching on this "
        "node (incomplete resource pools, not used until all their slices are published: driver-a/pool-1)",
        True,
    )


def test_duplicate_slice_makes_pool_incomplete() -> None:
    s = slice_("s", DEVS)
    assert isinstance(run([s, s], [claim("c", request("r"))]), NoFit)


# -- invalid pools ----------------------------------------------------------------------------


def test_duplicate_device_names_make_the_pool_invalid() -> None:
    slices = [slice_("s1", [device("dev-0")], count=2), slice_("s2", [device("dev-0")], count=2)]
    out = run(slices, [claim("c", request("r"))])
    assert isinstance(out, NodeFailure)
    assert "invalid resource pools" in out.reason
    assert "duplicate device name dev-0" in out.reason


def test_invalid_pool_does_not_prevent_other_pools() -> None:
    slices = [
        slice_("s1", [device("dev-0"), device("dev-0")], pool="bad"),
        slice_("s2", [device("dev-1")], pool="good"),
    ]
    assert picks(run(slices, [claim("c", request("r"))])) == [["good/dev-1"]]


def test_missing_counter_set_makes_pool_invalid() -> None:
    devs = [device("dev-0", consumesCounters=[{"counterSet": "nope", "counters": {"mem": {"value": "1"}}}])]
    out = run([slice_("s", devs)], [claim("c", request("r"))])
    assert isinstance(out, NodeFailure)
    assert "counter set nope not found" in out.reason


def test_all_mode_with_invalid_pool_is_fatal() -> None:
    slices = [slice_("s1", [device("dev-0"), device("dev-0")])]
    with pytest.raises(AllocationFatalError, match="currently invalid"):
        run(slices, [claim("c", request("r", mode="All"))])


# -- node selection ---------------------------------------------------------------------------


def test_node_selector_slice_and_result_selector() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}]}
    s = slice_("s", DEVS, node_name=None, nodeSelector=sel)
    out = run([s], [claim("c", request("r"))], the_node=node("node-1", region="r1"))
    assert out.results[0]["nodeSelector"] == sel  # type: ignore[union-attr]
    assert isinstance(run([s], [claim("c", request("r"))], the_node=node("node-1", region="r2")), NoFit)


def test_all_nodes_slice_has_no_node_selector() -> None:
    out = run([slice_("s", DEVS, node_name=None, allNodes=True)], [claim("c", request("r"))])
    assert isinstance(out, Allocated)
    assert "nodeSelector" not in out.results[0]


def test_node_local_device_gives_match_fields_selector() -> None:
    out = run([slice_("s", DEVS)], [claim("c", request("r"))])
    assert out.results[0]["nodeSelector"] == {  # type: ignore[union-attr]
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    }


def test_binds_to_node_restricts_network_device() -> None:
    out = run([slice_("s", [device("d", bindsToNode=True)], node_name=None, allNodes=True)], [claim("c", request("r"))])
    assert out.results[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-1"]  # type: ignore[union-attr]


def test_node_selectors_of_devices_are_merged() -> None:
    sel1 = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["r1"]}]}]}
    sel2 = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}]}
    slices = [
        slice_("a", [device("d")], node_name=None, nodeSelector=sel1, pool="p1"),
        slice_("b", [device("d")], node_name=None, nodeSelector=sel1, pool="p2"),
        slice_("c", [device("d")], node_name=None, nodeSelector=sel2, pool="p3"),
    ]
    out = run(slices, [claim("c", request("r", count=3))], the_node=node("node-1", region="r1", zone="z"))
    assert out.results[0]["nodeSelector"] == {  # type: ignore[union-attr]
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["r1"]},
                    {"key": "zone", "operator": "Exists"},
                ]
            }
        ]
    }


def test_per_device_node_selection() -> None:
    devs = [device("remote", nodeName="node-2"), device("local", nodeName="node-1"), device("any", allNodes=True)]
    s = slice_("s", devs, node_name=None, perDeviceNodeSelection=True)
    out = run([s], [claim("c", request("r", count=2))])
    assert picks(out) == [["pool-1/local", "pool-1/any"]]
    # A node-local device pins the whole claim to the node.
    assert out.results[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-1"]  # type: ignore[union-attr]


def test_invalid_node_selector_is_fatal() -> None:
    sel = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "Bogus", "values": ["r1"]}]}]}
    with pytest.raises(AllocationFatalError, match="slice s: matchExpressions: unsupported operator 'Bogus'") as err:
        run([slice_("s", DEVS, node_name=None, nodeSelector=sel)], [claim("c", request("r"))])
    assert err.value.kind == FatalKind.INVALID_NODE_SELECTOR


# -- All mode ---------------------------------------------------------------------------------


def test_all_mode_takes_every_matching_device() -> None:
    assert picks(run([slice_("s", DEVS)], [claim("c", request("r", mode="All"))])) == [
        ["pool-1/dev-0", "pool-1/dev-1", "pool-1/dev-2"]
    ]


def test_all_mode_fails_if_one_is_allocated() -> None:
    out = run(
        [slice_("s", DEVS)],
        [claim("c", request("r", mode="All"))],
        allocated=[claim("o", allocation=allocation(("driver-a", "pool-1", "dev-1")))],
    )
    assert isinstance(out, NoFit)


def test_all_mode_without_devices_is_no_fit() -> None:
    assert isinstance(run([slice_("s", [])], [claim("c", request("r", mode="All"))]), NoFit)


def test_all_mode_constraint_violation_is_fatal() -> None:
    devs = [device("d0", attributes={"numa": 0}), device("d1", attributes={"numa": 1})]
    with pytest.raises(AllocationFatalError, match="claim constraint would not be satisfied"):
        run(
            [slice_("s", devs)],
            [claim("c", request("r", mode="All"), constraints=[{"matchAttribute": "driver-a/numa"}])],
        )


def test_all_mode_plus_another_request() -> None:
    out = run(
        [slice_("a", DEVS), slice_("b", [device("x")], driver="driver-b")],
        [claim("c", request("all", "class-a", mode="All"), request("one", "class-b"))],
    )
    assert picks(out) == [["pool-1/dev-0", "pool-1/dev-1", "pool-1/dev-2", "pool-1/x"]]


# -- limits -----------------------------------------------------------------------------------


def test_more_than_32_devices_in_a_claim_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="exceeds the claim limit of 32") as err:
        run([slice_("s", DEVS)], [claim("c", request("r0", count=20), request("r1", count=13))])
    assert err.value.kind == FatalKind.TOO_MANY_DEVICES


def test_exactly_32_devices_is_fine() -> None:
    devs = [device(f"d{i}") for i in range(32)]
    out = run([slice_("s", devs)], [claim("c", request("r0", count=16), request("r1", count=16))])
    assert len(picks(out)[0]) == 32


def test_all_mode_with_more_than_32_devices_is_fatal() -> None:
    devs = [device(f"d{i}") for i in range(33)]
    with pytest.raises(AllocationFatalError, match="exceeds the claim limit"):
        run([slice_("s", devs)], [claim("c", request("r", mode="All"))])


# -- prioritized list (firstAvailable) --------------------------------------------------------


def test_first_available_uses_first_possible_subrequest() -> None:
    out = run(
        [slice_("s", DEVS)],
        [claim("c", {"name": "r", "firstAvailable": [subrequest("big", count=4), subrequest("small", count=2)]})],
    )
    assert [r["request"] for r in results(out)] == ["r/small", "r/small"]


def test_first_available_subrequest_order_wins() -> None:
    out = run(
        [slice_("a", DEVS), slice_("b", [device("x")], driver="driver-b")],
        [claim("c", {"name": "r", "firstAvailable": [subrequest("b", "class-b"), subrequest("a", "class-a")]})],
    )
    assert results(out)[0]["request"] == "r/b"
    assert results(out)[0]["driver"] == "driver-b"


def test_first_available_retried_for_later_requests() -> None:
    # r0 first tries sub "x" (takes driver-b's only device) but r1 needs it: r0 must fall back to "y".
    out = run(
        [slice_("a", DEVS), slice_("b", [device("x")], driver="driver-b")],
        [
            claim(
                "c",
                {"name": "r0", "firstAvailable": [subrequest("x", "class-b"), subrequest("y", "class-a")]},
                request("r1", "class-b"),
            )
        ],
    )
    assert [r["request"] for r in results(out)] == ["r0/y", "r1"]


def test_first_available_disabled_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="DRAPrioritizedList"):
        run(
            [slice_("s", DEVS)],
            [claim("c", {"name": "r", "firstAvailable": [subrequest("a")]})],
            features=Features(prioritized_list=False),
        )


def test_first_available_skips_subrequest_that_exceeds_limit() -> None:
    devs = [device(f"d{i}") for i in range(40)]
    out = run(
        [slice_("s", devs)],
        [
            claim(
                "c",
                request("r0", count=30),
                {"name": "r1", "firstAvailable": [subrequest("many", count=5), subrequest("few", count=2)]},
            )
        ],
    )
    assert [r["request"] for r in results(out)][-2:] == ["r1/few", "r1/few"]


# -- constraints ------------------------------------------------------------------------------


NUMA = [
    device("d0", attributes={"numa": 0, "model": "a"}),
    device("d1", attributes={"numa": 1, "model": "a"}),
    device("d2", attributes={"numa": 1, "model": "b"}),
]


def test_match_attribute_int() -> None:
    out = run(
        [slice_("s", NUMA)], [claim("c", request("r", count=2), constraints=[{"matchAttribute": "driver-a/numa"}])]
    )
    assert picks(out) == [["pool-1/d1", "pool-1/d2"]]


def test_match_attribute_string_across_requests() -> None:
    out = run(
        [slice_("s", NUMA)],
        [claim("c", request("r0"), request("r1"), constraints=[{"matchAttribute": "driver-a/model"}])],
    )
    assert picks(out) == [["pool-1/d0", "pool-1/d1"]]


def test_match_attribute_missing_attribute_refuses() -> None:
    out = run([slice_("s", NUMA)], [claim("c", request("r"), constraints=[{"matchAttribute": "driver-a/missing"}])])
    assert isinstance(out, NoFit)


def test_match_attribute_other_domain_does_not_match_bare_name() -> None:
    out = run([slice_("s", NUMA)], [claim("c", request("r"), constraints=[{"matchAttribute": "other.com/numa"}])])
    assert isinstance(out, NoFit)


def test_match_attribute_version_and_bool() -> None:
    devs = [
        device("d0", attributes={"v": {"version": "1.0.0"}, "f": True}),
        device("d1", attributes={"v": {"version": "2.0.0"}, "f": True}),
        device("d2", attributes={"v": {"version": "2.0.0"}, "f": False}),
    ]
    out = run([slice_("s", devs)], [claim("c", request("r", count=2), constraints=[{"matchAttribute": "driver-a/v"}])])
    assert picks(out) == [["pool-1/d1", "pool-1/d2"]]
    out = run([slice_("s", devs)], [claim("c", request("r", count=2), constraints=[{"matchAttribute": "driver-a/f"}])])
    assert picks(out) == [["pool-1/d0", "pool-1/d1"]]


def test_constraint_limited_to_one_request() -> None:
    out = run(
        [slice_("s", NUMA)],
        [
            claim(
                "c",
                request("r0"),
                request("r1", count=2),
                constraints=[{"matchAttribute": "driver-a/numa", "requests": ["r1"]}],
            )
        ],
    )
    assert picks(out) == [["pool-1/d0", "pool-1/d1", "pool-1/d2"]]


def test_constraint_on_subrequest() -> None:
    out = run(
        [slice_("s", NUMA)],
        [
            claim(
                "c",
                {"name": "r", "firstAvailable": [subrequest("two", count=2)]},
                constraints=[{"matchAttribute": "driver-a/numa", "requests": ["r/two"]}],
            )
        ],
    )
    assert picks(out) == [["pool-1/d1", "pool-1/d2"]]


def test_distinct_attribute() -> None:
    out = run(
        [slice_("s", NUMA)], [claim("c", request("r", count=2), constraints=[{"distinctAttribute": "driver-a/model"}])]
    )
    assert picks(out) == [["pool-1/d0", "pool-1/d2"]]


def test_distinct_attribute_count_three_keeps_all_values() -> None:
    # The v0.37.2 fix: all chosen values are kept, not just the last one per request.
    devs = [device("a", attributes={"m": "x"}), device("b", attributes={"m": "y"}), device("c", attributes={"m": "x"})]
    out = run(
        [slice_("s", devs)], [claim("c", request("r", count=3), constraints=[{"distinctAttribute": "driver-a/m"}])]
    )
    assert isinstance(out, NoFit)


def test_unknown_constraint_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="empty constraint"):
        run([slice_("s", NUMA)], [claim("c", request("r"), constraints=[{"requests": ["r"]}])])


# -- taints and tolerations -------------------------------------------------------------------


TAINTED = [device("t", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}]), device("clean")]


def test_tainted_device_is_skipped() -> None:
    assert picks(run([slice_("s", TAINTED)], [claim("c", request("r"))])) == [["pool-1/clean"]]


def test_toleration_allows_tainted_device_and_is_copied() -> None:
    tol = [{"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}]
    out = run([slice_("s", TAINTED)], [claim("c", request("r", tolerations=tol))])
    assert picks(out) == [["pool-1/t"]]
    assert results(out)[0]["tolerations"] == tol


def test_exists_toleration_without_key_tolerates_everything() -> None:
    out = run([slice_("s", TAINTED)], [claim("c", request("r", tolerations=[{"operator": "Exists"}]))])
    assert picks(out) == [["pool-1/t"]]


def test_wrong_effect_does_not_tolerate() -> None:
    tol = [{"key": "k", "operator": "Exists", "effect": "NoExecute"}]
    assert picks(run([slice_("s", TAINTED)], [claim("c", request("r", tolerations=tol))])) == [["pool-1/clean"]]


def test_none_effect_taint_is_ignored() -> None:
    devs = [device("t", taints=[{"key": "k", "effect": "None"}])]
    assert picks(run([slice_("s", devs)], [claim("c", request("r"))])) == [["pool-1/t"]]


def test_taints_ignored_when_feature_off() -> None:
    out = run([slice_("s", TAINTED)], [claim("c", request("r"))], features=Features(device_taints=False))
    assert picks(out) == [["pool-1/t"]]


# -- admin access -----------------------------------------------------------------------------


def test_admin_access_may_use_allocated_device() -> None:
    out = run(
        [slice_("s", DEVS[:1])],
        [claim("c", request("r", adminAccess=True))],
        allocated=[claim("o", allocation=allocation(("driver-a", "pool-1", "dev-0")))],
    )
    assert results(out) == [
        {"request": "r", "driver": "driver-a", "pool": "pool-1", "device": "dev-0", "adminAccess": True}
    ]


def test_admin_access_not_twice_in_same_claim() -> None:
    out = run([slice_("s", DEVS[:1])], [claim("c", request("r", count=2, adminAccess=True))])
    assert isinstance(out, NoFit)


def test_admin_access_result_does_not_block_others() -> None:
    out = run(
        [slice_("s", DEVS[:1])],
        [claim("c", request("r"))],
        allocated=[claim("o", allocation=allocation(("driver-a", "pool-1", "dev-0"), adminAccess=True))],
    )
    assert picks(out) == [["pool-1/dev-0"]]


def test_admin_access_disabled_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="admin access is requested"):
        run([slice_("s", DEVS)], [claim("c", request("r", adminAccess=False))], features=Features(admin_access=False))


# -- errors that stop the pod ------------------------------------------------------------------


def test_unknown_class_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="could not retrieve device class nope") as err:
        run([slice_("s", DEVS)], [claim("c", request("r", "nope"))])
    assert err.value.kind == FatalKind.CLASS_NOT_FOUND


def test_cel_runtime_error_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="CEL runtime error") as err:
        run([slice_("s", DEVS)], [claim("c", request("r", selectors=('device.attributes["driver-a"].missing == 1',)))])
    assert err.value.kind == FatalKind.CEL_RUNTIME
    assert "has()" in str(err.value)


def test_cel_error_on_unreached_device_is_not_seen() -> None:
    devs = [device("good", attributes={"x": 1}), device("bad")]
    out = run([slice_("s", devs)], [claim("c", request("r", selectors=('device.attributes["driver-a"].x == 1',)))])
    assert picks(out) == [["pool-1/good"]]


def test_cel_compile_error_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="CEL compile error") as err:
        run([slice_("s", DEVS)], [claim("c", request("r", selectors=("device.driver ==",)))])
    assert err.value.kind == FatalKind.CEL_COMPILE


def test_unsupported_allocation_mode_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="unsupported count mode"):
        run([slice_("s", DEVS)], [claim("c", request("r", mode="Some"))])


# -- shared counters (partitionable devices) --------------------------------------------------


def partitioned(mem: str = "4") -> list[dict[str, Any]]:
    counters = [{"name": "gpu", "counters": {"mem": {"value": mem}}}]
    parts = [
        device(f"part-{i}", consumesCounters=[{"counterSet": "gpu", "counters": {"mem": {"value": v}}}])
        for i, v in enumerate(["4", "2", "2"])
    ]
    return [slice_("counters", None, count=2, sharedCounters=counters), slice_("devices", parts, count=2)]


def test_counters_limit_partitions() -> None:
    assert picks(run(partitioned(), [claim("c", request("r"))])) == [["pool-1/part-0"]]
    assert picks(run(partitioned(), [claim("c", request("r", count=2))])) == [["pool-1/part-1", "pool-1/part-2"]]
    assert isinstance(run(partitioned(), [claim("c", request("r", count=3))]), NoFit)


def test_allocated_partition_consumes_counters() -> None:
    out = run(
        partitioned(),
        [claim("c", request("r"))],
        allocated=[claim("o", allocation=allocation(("driver-a", "pool-1", "part-1")))],
    )
    assert picks(out) == [["pool-1/part-2"]]


def test_counter_consuming_device_refused_when_feature_off() -> None:
    out = run(
        [slice_("s", [device("d", consumesCounters=[{"counterSet": "x", "counters": {"c": {"value": "1"}}}])])],
        [claim("c", request("r"))],
        features=Features(partitionable_devices=False),
    )
    assert isinstance(out, NoFit)


def test_taint_rejection_releases_counters() -> None:
    counters = [{"name": "gpu", "counters": {"mem": {"value": "2"}}}]
    devs = [
        device(
            "t",
            taints=[{"key": "k", "effect": "NoSchedule"}],
            consumesCounters=[{"counterSet": "gpu", "counters": {"mem": {"value": "2"}}}],
        ),
        device("ok", consumesCounters=[{"counterSet": "gpu", "counters": {"mem": {"value": "2"}}}]),
    ]
    slices = [slice_("a", None, count=2, sharedCounters=counters), slice_("b", devs, count=2)]
    assert picks(run(slices, [claim("c", request("r"))])) == [["pool-1/ok"]]


# -- consumable capacity ----------------------------------------------------------------------


def multi(value: str = "4Gi", **policy: Any) -> dict[str, Any]:
    mem: dict[str, Any] = {"value": value}
    if policy:
        mem["requestPolicy"] = policy
    return device("shared", allowMultipleAllocations=True, capacity={"memory": mem})


def cap_request(name: str, amount: str | None, **kw: Any) -> dict[str, Any]:
    extra = {"capacity": {"requests": {"memory": amount}}} if amount is not None else {}
    return request(name, **extra, **kw)


def test_multi_allocatable_device_shared_by_requests() -> None:
    out = run([slice_("s", [multi()])], [claim("c", cap_request("r0", "1Gi"), cap_request("r1", "2Gi"))])
    assert [(r["device"], r["shareID"], r["consumedCapacity"]) for r in results(out)] == [
        ("shared", "SHARE", {"memory": "1Gi"}),
        ("shared", "SHARE", {"memory": "2Gi"}),
    ]


def test_capacity_exhausted() -> None:
    out = run([slice_("s", [multi()])], [claim("c", cap_request("r0", "3Gi"), cap_request("r1", "2Gi"))])
    assert isinstance(out, NoFit)


def test_allocated_shares_reduce_capacity() -> None:
    used = allocation(("driver-a", "pool-1", "shared"), shareID="u1", consumedCapacity={"memory": "3Gi"})
    out = run([slice_("s", [multi()])], [claim("c", cap_request("r", "2Gi"))], allocated=[claim("o", allocation=used)])
    assert isinstance(out, NoFit)
    out = run([slice_("s", [multi()])], [claim("c", cap_request("r", "1Gi"))], allocated=[claim("o", allocation=used)])
    assert picks(out) == [["pool-1/shared"]]


def test_no_request_consumes_default_or_everything() -> None:
    out = run([slice_("s", [multi(default="1Gi")])], [claim("c", cap_request("r", None))])
    assert results(out)[0]["consumedCapacity"] == {"memory": "1Gi"}
    out = run([slice_("s", [multi()])], [claim("c", cap_request("r0", None), cap_request("r1", None))])
    assert isinstance(out, NoFit)  # the first share takes all 4Gi


def test_valid_range_rounds_up_to_step() -> None:
    dev = multi(default="1Gi", validRange={"min": "1Gi", "step": "1Gi"})
    out = run([slice_("s", [dev])], [claim("c", cap_request("r", "1536Mi"))])
    assert results(out)[0]["consumedCapacity"] == {"memory": "2Gi"}


@pytest.mark.parametrize(
    ("policy", "amount", "consumed"),
    [
        # ParseQuantity keeps a canonical spelling and upstream copies the quantity it picks
        # (request, default, valid value, range min, capacity value) into the result.
        ({}, "2e0", "2e0"),
        ({}, "+2", "+2"),
        ({}, "1.500", "1.500"),
        ({}, "2.0", "2"),
        ({"default": "2e0"}, None, "2e0"),
        ({"default": "1E3"}, "01", "01"),
        ({"default": "1", "validValues": ["1", "2.", "3Gi"]}, "1.5", "2."),
        ({"default": "1e0", "validRange": {"min": "1e0"}}, "0.5", "1e0"),
        # rounding up to a step computes a new quantity, printed canonically
        ({"default": "1", "validRange": {"min": "1", "step": "2e0"}}, "2e0", "3"),
    ],
)
def test_consumed_capacity_keeps_the_spelling_upstream_keeps(
    policy: dict[str, Any], amount: str | None, consumed: str
) -> None:
    out = run([slice_("s", [multi("100Gi", **policy)])], [claim("c", cap_request("r", amount))])
    assert results(out)[0]["consumedCapacity"] == {"memory": consumed}


def test_consumed_capacity_of_the_whole_device_keeps_its_spelling() -> None:
    out = run([slice_("s", [multi("4.500")])], [claim("c", cap_request("r", None))])
    assert results(out)[0]["consumedCapacity"] == {"memory": "4.500"}


def test_valid_range_max_refuses() -> None:
    dev = multi(default="1Gi", validRange={"min": "1Gi", "max": "2Gi"})
    assert isinstance(run([slice_("s", [dev])], [claim("c", cap_request("r", "3Gi"))]), NoFit)


def test_valid_values_round_up() -> None:
    dev = multi(default="1Gi", validValues=["1Gi", "3Gi"])
    out = run([slice_("s", [dev])], [claim("c", cap_request("r", "2Gi"))])
    assert results(out)[0]["consumedCapacity"] == {"memory": "3Gi"}
    assert isinstance(run([slice_("s", [dev])], [claim("c", cap_request("r", "4Gi"))]), NoFit)


def test_capacity_request_for_missing_capacity_skips_device() -> None:
    devs = [device("plain"), multi()]
    assert picks(run([slice_("s", devs)], [claim("c", cap_request("r", "1Gi"))])) == [["pool-1/shared"]]


def test_dedicated_device_must_fit_capacity_request() -> None:
    devs = [device("small", capacity={"memory": "1Gi"}), device("big", capacity={"memory": "8Gi"})]
    out = run([slice_("s", devs)], [claim("c", cap_request("r", "2Gi"))])
    assert results(out)[0] == {"request": "r", "driver": "driver-a", "pool": "pool-1", "device": "big"}


def test_capacity_request_with_feature_off_is_fatal() -> None:
    with pytest.raises(AllocationFatalError, match="DRAConsumableCapacity"):
        run(
            [slice_("s", [multi()])],
            [claim("c", cap_request("r", "1Gi"))],
            features=Features(consumable_capacity=False),
        )


def test_multi_allocatable_is_dedicated_when_feature_off() -> None:
    out = run(
        [slice_("s", [multi()])],
        [claim("c", request("r0"), request("r1"))],
        features=Features(consumable_capacity=False),
    )
    assert isinstance(out, NoFit)


# -- binding conditions -----------------------------------------------------------------------


def test_binding_conditions_copied_and_pool_last() -> None:
    slices = [
        slice_("a", [device("bound", bindingConditions=["ready"], bindingFailureConditions=["failed"])], pool="a-pool"),
        slice_("b", [device("plain")], pool="b-pool"),
    ]
    out = run(slices, [claim("c", request("r", count=2))])
    assert picks(out) == [["b-pool/plain", "a-pool/bound"]]
    assert results(out)[1]["bindingConditions"] == ["ready"]
    assert results(out)[1]["bindingFailureConditions"] == ["failed"]


def test_binding_conditions_not_selectable_when_feature_off() -> None:
    s = slice_("a", [device("bound", bindingConditions=["ready"])])
    out = run([s], [claim("c", request("r"))], features=Features(device_binding_and_status=False))
    assert isinstance(out, NoFit)


# -- config -----------------------------------------------------------------------------------


def opaque(tag: str) -> dict[str, Any]:
    return {"opaque": {"driver": "driver-a", "parameters": {"tag": tag}}}


def test_class_config_once_with_request_names() -> None:
    klass = device_class("class-a", config=[opaque("class")])
    out = run(
        [slice_("s", DEVS), slice_("b", [device("x")], driver="driver-b")],
        [claim("c", request("r0"), request("r1"), request("r2", "class-b"))],
        classes=[klass, CLASS_B],
    )
    assert out.results[0]["devices"]["config"] == [  # type: ignore[union-attr]
        {"source": "FromClass", "requests": ["r0", "r1"], **opaque("class")}
    ]


def test_config_covering_all_requests_is_cleared() -> None:
    klass = device_class("class-a", config=[opaque("class")])
    out = run(
        [slice_("s", DEVS)],
        [claim("c", request("r0"), request("r1"), config=[{"requests": ["r0", "r1"], **opaque("claim")}])],
        classes=[klass],
    )
    assert out.results[0]["devices"]["config"] == [  # type: ignore[union-attr]
        {"source": "FromClass", **opaque("class")},
        {"source": "FromClaim", **opaque("claim")},
    ]


def test_claim_config_for_subrequest() -> None:
    out = run(
        [slice_("s", DEVS)],
        [
            claim(
                "c",
                {"name": "r", "firstAvailable": [subrequest("big", count=5), subrequest("small")]},
                request("other"),
                config=[{"requests": ["r/small"], **opaque("small")}, {"requests": ["r/big"], **opaque("big")}],
            )
        ],
    )
    assert out.results[0]["devices"]["config"] == [  # type: ignore[union-attr]
        {"source": "FromClaim", "requests": ["r/small"], **opaque("small")}
    ]


def test_claim_config_without_requests_always_included() -> None:
    out = run([slice_("s", DEVS)], [claim("c", request("r"), config=[opaque("all")])])
    assert out.results[0]["devices"]["config"] == [{"source": "FromClaim", **opaque("all")}]  # type: ignore[union-attr]


# -- state snapshot input ---------------------------------------------------------------------


def test_allocated_state_object_can_be_passed_directly() -> None:
    inv = Inventory([slice_("s", DEVS)], [ANY])
    state = AllocatedState.build(allocated_devices=[("driver-a", "pool-1", "dev-0")])
    out = Allocator(inv, state).allocate(node(), [claim("c", request("r", "any"))])
    assert picks(out) == [["pool-1/dev-1"]]
