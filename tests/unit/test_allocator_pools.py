"""Pool gathering and node matching (upstream pools_incubating.go and component-helpers nodeaffinity)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from draxr.core.allocator import DEFAULT_FEATURES, Features, Inventory, gather_pools
from draxr.core.allocator.model import parse_slices
from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.allocator.outcomes import AllocationFatalError
from draxr_dev.allocator.builders import device, node, slice_


def pools(
    slices: list[dict[str, Any]], the_node: dict[str, Any] | None = None, features: Features = DEFAULT_FEATURES
) -> Any:
    infos = parse_slices(slices)
    the_node = the_node or node("node-1")
    name = the_node["metadata"]["name"]
    for_node = [s for s in infos if s.node_name == name] + [s for s in infos if not s.node_name]
    return gather_pools(for_node, the_node, features, infos)


def term(*exprs: dict[str, Any], fields: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    t: dict[str, Any] = {"matchExpressions": list(exprs)} if exprs else {}
    if fields:
        t["matchFields"] = fields
    return {"nodeSelectorTerms": [t]}


N = node("node-1", region="r1", size="8")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        (term({"key": "region", "operator": "In", "values": ["r1", "r2"]}), True),
        (term({"key": "region", "operator": "NotIn", "values": ["r1"]}), False),
        (term({"key": "missing", "operator": "NotIn", "values": ["x"]}), True),
        (term({"key": "region", "operator": "Exists"}), True),
        (term({"key": "region", "operator": "DoesNotExist"}), False),
        (term({"key": "size", "operator": "Gt", "values": ["7"]}), True),
        (term({"key": "size", "operator": "Lt", "values": ["8"]}), False),
        (term({"key": "region", "operator": "Gt", "values": ["1"]}), False),  # label not an integer
        (term(fields=[{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]), True),
        (term(fields=[{"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}]), False),
        ({"nodeSelectorTerms": [{}]}, False),  # empty terms match nothing
        (
            {
                "nodeSelectorTerms": [
                    term({"key": "x", "operator": "Exists"})["nodeSelectorTerms"][0],
                    {"matchExpressions": [{"key": "region", "operator": "Exists"}]},
                ]
            },
            True,
        ),
    ],
)
def test_node_selector_semantics(selector: dict[str, Any], expected: bool) -> None:
    assert selector_matches(selector, N) is expected


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            term({"key": "region", "operator": "Like", "values": ["r1"]}),
            "matchExpressions: unsupported operator 'Like'",
        ),
        (
            term({"key": "region", "operator": "In", "values": []}),
            "matchExpressions 'region': for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            term({"key": "region", "operator": "Exists", "values": ["x"]}),
            "matchExpressions 'region': values set must be empty for exists and does not exist",
        ),
        (
            term({"key": "size", "operator": "Gt", "values": ["1_0"]}),
            "matchExpressions 'size': for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (term({"key": "bad key!", "operator": "Exists"}), "matchExpressions: invalid label key 'bad key!'"),
        (
            term(fields=[{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]),
            "matchFields 'metadata.name': must have one element",
        ),
        (term(fields=[{"key": "metadata.name", "operator": "Exists"}]), "matchFields: unsupported operator 'Exists'"),
    ],
)
def test_invalid_node_selectors_raise(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(NodeSelectorError, match=f"^{re.escape(message)}$"):
        selector_matches(selector, N)


def test_invalid_slice_selector_is_fatal_when_gathering() -> None:
    bad = term({"key": "region", "operator": "In", "values": []})
    with pytest.raises(AllocationFatalError, match="failed to perform node selection for slice s"):
        pools([slice_("s", [device("d")], node_name=None, nodeSelector=bad)])


def test_relevance_by_node_name_all_nodes_and_selector() -> None:
    got = pools(
        [
            slice_("a", [device("d")], pool="mine"),
            slice_("b", [device("d")], pool="theirs", node_name="node-2"),
            slice_("c", [device("d")], pool="everywhere", node_name=None, allNodes=True),
            slice_(
                "d",
                [device("d")],
                pool="r1",
                node_name=None,
                nodeSelector=term({"key": "region", "operator": "In", "values": ["r1"]}),
            ),
            slice_("e", [device("d")], pool="unknown", node_name=None),  # no node selection known: skipped
        ],
        N,
    )
    assert [p.name for p in got] == ["everywhere", "mine", "r1"]


def test_generation_and_completeness_flags() -> None:
    got = pools(
        [
            slice_("a1", [device("d")], pool="a", generation=1),
            slice_("a2", [device("e")], pool="a", generation=2),
            slice_("b", [device("d")], pool="b", count=2),
        ]
    )
    assert [(p.name, p.is_incomplete) for p in got] == [("a", False), ("b", True)]
    assert [d.name for s in got[0].device_slices for d in s.devices] == ["e"]


def test_partitionable_off_ignores_counter_slices() -> None:
    slices = [
        slice_("c", None, count=2, sharedCounters=[{"name": "cs", "counters": {"x": {"value": "1"}}}]),
        slice_("d", [device("d")], count=2),
    ]
    # Skipped when gathering, but the full-pool scan still counts it, so the pool is complete
    # (upstream does the same); its counters are just not used.
    off = pools(slices, features=Features(partitionable_devices=False))[0]
    assert not off.is_incomplete
    assert not off.counter_sets
    assert [s.name for s in off.device_slices] == ["d"]
    ok = pools(slices)[0]
    assert not ok.is_incomplete
    assert set(ok.counter_sets) == {"cs"}


def test_duplicate_counter_set_is_invalid() -> None:
    cs = [{"name": "cs", "counters": {"x": {"value": "1"}}}]
    got = pools([slice_("a", None, count=2, sharedCounters=cs), slice_("b", None, count=2, sharedCounters=cs)])
    assert got[0].is_invalid
    assert "duplicate counter set name cs" in got[0].invalid_reason


def test_missing_counter_in_set_is_invalid() -> None:
    cs = [{"name": "cs", "counters": {"x": {"value": "1"}}}]
    dev = device("d", consumesCounters=[{"counterSet": "cs", "counters": {"y": {"value": "1"}}}])
    got = pools([slice_("a", None, count=2, sharedCounters=cs), slice_("b", [dev], count=2)])
    assert got[0].is_invalid
    assert got[0].invalid_reason == "counter y not found in counter set cs"


def test_counter_consumers_on_other_nodes_are_validated_and_kept() -> None:
    cs = [{"name": "cs", "counters": {"x": {"value": "1"}}}]
    bad = device("far", consumesCounters=[{"counterSet": "nope", "counters": {"x": {"value": "1"}}}])
    got = pools(
        [
            slice_("a", None, count=3, node_name=None, allNodes=True, sharedCounters=cs),
            slice_("b", [device("near")], count=3),
            slice_("c", [bad], count=3, node_name="node-2"),
        ]
    )
    assert got[0].is_invalid


def test_binding_condition_pools_go_last() -> None:
    got = pools(
        [
            slice_("a", [device("d", bindingConditions=["x"])], pool="a"),
            slice_("b", [device("d")], pool="b"),
        ]
    )
    assert [p.name for p in got] == ["b", "a"]


def test_inventory_pool_cache_invalidation() -> None:
    inv = Inventory([slice_("a", [device("d")])])
    f = Features()
    first = inv.pools_for_node(node("node-1"), f)
    assert inv.pools_for_node(node("node-1"), f) is first
    inv.upsert_slice(slice_("b", [device("d")], node_name="node-2"))
    assert inv.pools_for_node(node("node-1"), f) is first  # another node's slice: still valid
    inv.upsert_slice(slice_("a", [device("d"), device("e")]))
    second = inv.pools_for_node(node("node-1"), f)
    assert second is not first
    assert len(second[0].device_slices[0].devices) == 2
    assert inv.pools_for_node(node("node-1", zone="z"), f) is not second  # labels changed
    inv.remove_slice("a")
    assert inv.pools_for_node(node("node-1"), f) == []
