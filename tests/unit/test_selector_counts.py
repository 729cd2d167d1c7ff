"""The spreading score's matching pods per selector are kept up to date across cycles
(ClusterState.selector_counts): after any sequence of pod and node changes, the per-node and
per-domain counts, and the scores spread_scores makes of them, equal a recount over every placed
pod, the way upstream's PreScore counts them for each pod it scores."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.labels import Labels, Selector
from draxr.core.spread import (
    HOSTNAME,
    ZONE,
    Constraint,
    NodeEligible,
    SelectorCounts,
    SpreadGroup,
    matching_pods,
    spread_scores,
    system_default_constraints,
)
from draxr.core.state import ClusterState

JSON = dict[str, Any]
NODES = ("n0", "n1", "n2", "n3", "n4")
ZONES = ("a", "b", "", "-")  # "": no zone label; "-": zone a, no hostname label
SELECTORS = (
    ("default", Selector.from_set({"app": "web"})),
    ("default", Selector.from_set({"app": "db"})),
    ("other", Selector.from_set({"app": "web"})),
)


def node(name: str, zone: str, rv: int) -> JSON:
    labels = {ZONE: "a"} if zone == "-" else {HOSTNAME: name, **({ZONE: zone} if zone else {})}
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": str(rv)}, "status": {"allocatable": alloc}}


def pod(uid: str, node_name: str, app: str, ns: str, deleting: bool, rv: int) -> JSON:
    meta: JSON = {"name": uid, "namespace": ns, "uid": uid, "labels": {"app": app}, "resourceVersion": str(rv)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: JSON = {"containers": [{"name": "c", "image": "i"}], "schedulerName": "draxr"}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node_name else "Pending"}}


op = st.one_of(
    st.tuples(
        st.just("pod"),
        st.integers(0, 7),
        st.sampled_from(("", *NODES, "gone")),  # "": pending; "gone": a node the state does not know
        st.sampled_from(("web", "db")),
        st.sampled_from(("default", "other")),
        st.booleans(),
    ),
    st.tuples(st.just("remove"), st.integers(0, 7)),
    st.tuples(st.just("assume"), st.integers(0, 7), st.sampled_from(NODES)),
    st.tuples(st.just("forget"), st.integers(0, 7)),
    st.tuples(st.just("node"), st.sampled_from((*NODES, "gone")), st.sampled_from(ZONES)),
    st.tuples(st.just("drop-node"), st.sampled_from(NODES)),
    st.tuples(st.just("cycle")),
)


def recount(state: ClusterState, namespace: str, selector: Selector) -> tuple[dict[str, int], dict[str, int]]:
    """Per node and per zone ("" without the label; known nodes only), from every pod."""
    nodes: dict[str, int] = {}
    for p in state.pods.values():
        where = "" if p.terminal else p.node_name or state.assumed_nodes.get(p.uid, "")
        if where and not p.deleting and p.namespace == namespace and selector.matches(p.labels):
            nodes[where] = nodes.get(where, 0) + 1
    zones: dict[str, int] = {}
    for name, count in nodes.items():
        info = state.nodes.get(name)
        if info is not None:
            zone = info.labels.get(ZONE, "")
            zones[zone] = zones.get(zone, 0) + count
    return nodes, zones


class Afresh:
    """The state, with the matching pods counted from scratch on every call."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    def node_labels(self) -> Iterable[tuple[str, Labels]]:
        return self.state.node_labels()

    def label_groups(self) -> Iterable[SpreadGroup]:
        return self.state.label_groups()

    def labels_of(self, node: str) -> Labels | None:
        return self.state.labels_of(node)

    def selector_counts(self, namespace: str, selector: Selector) -> SelectorCounts:
        return SelectorCounts(matching_pods(self.state, selector, namespace), self.state.labels_of)


def reference_scores(
    constraints: tuple[Constraint, ...],
    namespace: str,
    state: ClusterState,
    eligible: NodeEligible,
    feasible: list[tuple[str, Labels]],
    require_all: bool,
) -> dict[str, int]:
    """PreScore, Score and NormalizeScore node by node from a recount (the code before the
    counts were kept and the scores computed per distinct count)."""
    has_all = lambda labels: all(c.topology_key in labels for c in constraints)  # noqa: E731
    scored = [f for f in feasible if has_all(f[1])] if require_all else feasible
    raw = [0.0] * len(scored)
    for c in constraints:
        on_node, _ = recount(state, namespace, c.selector)
        key, extra = c.topology_key, c.max_skew - 1
        if key == HOSTNAME:
            for j, (name, labels) in enumerate(scored):
                if key in labels:
                    raw[j] += on_node.get(name, 0) * math.log(len(scored) + 2) + extra
            continue
        counts = dict.fromkeys((labels.get(key, "") for _, labels in scored), 0)
        for name, count in on_node.items():
            known = state.labels_of(name)
            if known is None or (require_all and not has_all(known)):
                continue
            value = known.get(key, "")
            if value in counts and (eligible is None or eligible(name, c)):
                counts[value] += count
        for j, (_, labels) in enumerate(scored):
            if labels.get(key) is not None:
                raw[j] += counts[labels[key]] * math.log(len(counts) + 2) + extra
    rounded = [math.floor(score + 0.5) for score in raw]
    lo, hi = min(rounded, default=0), max(rounded, default=0)
    out = {n: 100 if hi == 0 else 100 * (hi + lo - r) // hi for (n, _), r in zip(scored, rounded, strict=True)}
    return {name: out.get(name, 0) for name, _ in feasible}


def odd_nodes_only(name: str, c: Constraint) -> bool:
    return name in ("n1", "n3", "gone")


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_counts_kept_across_cycles_equal_a_recount(ops: list[tuple[Any, ...]]) -> None:
    state = ClusterState()
    rv = 1
    for i, name in enumerate(NODES):
        state.upsert_node(node(name, ZONES[i % 3], rv))
    for step in [*ops, ("cycle",)]:
        rv += 1
        kind = step[0]
        if kind == "pod":
            _, n, where, app, ns, deleting = step
            state.upsert_pod(pod(f"p{n}", where, app, ns, deleting, rv))
        elif kind == "remove":
            state.remove_pod(f"p{step[1]}")
        elif kind == "assume" and f"p{step[1]}" in state.pods and not state.pods[f"p{step[1]}"].node_name:
            state.assume_pod(f"p{step[1]}", step[2])
        elif kind == "forget":
            state.forget_pod(f"p{step[1]}")
        elif kind == "node":
            state.upsert_node(node(step[1], step[2], rv))
        elif kind == "drop-node":
            state.remove_node(step[1])
        for namespace, selector in SELECTORS:
            kept = state.selector_counts(namespace, selector)
            nodes, zones = recount(state, namespace, selector)
            assert kept.nodes == nodes
            assert {z: c for z, c in kept.domains(ZONE).items() if c} == zones
            feasible = [(n.name, n.labels) for n in state.nodes.values()]
            constraints = system_default_constraints(selector)
            assert spread_scores(constraints, namespace, state, None, feasible, False) == spread_scores(
                constraints, namespace, Afresh(state), None, feasible, False
            )
            explicit = (
                Constraint(2, ZONE, selector, 1, True, False),
                Constraint(1, HOSTNAME, selector, 1, True, False),
            )
            for constraints, require_all in ((system_default_constraints(selector), False), (explicit, True)):
                for eligible in (None, odd_nodes_only):
                    expected = reference_scores(constraints, namespace, state, eligible, feasible, require_all)
                    got = spread_scores(constraints, namespace, state, eligible, feasible, require_all)
                    assert got == (expected if feasible else None)
                    # Told how many nodes of the cluster have each key (ranking does), as for any subset.
                    for subset in (feasible, feasible[::2]):
                        expected = reference_scores(constraints, namespace, state, eligible, subset, require_all)
                        got = spread_scores(
                            constraints, namespace, state, eligible, subset, require_all, state.spread.label_key_nodes
                        )
                        assert got == (expected if subset else None)


def test_a_zone_relabel_moves_the_pods_counted_there() -> None:
    state = ClusterState()
    state.upsert_node(node("n0", "a", 1))
    state.upsert_node(node("n1", "b", 1))
    state.upsert_pod(pod("p", "n0", "web", "default", False, 2))
    web = Selector.from_set({"app": "web"})
    assert state.selector_counts("default", web).domains(ZONE) == {"a": 1}
    state.upsert_node(node("n0", "b", 3))
    assert {z: c for z, c in state.selector_counts("default", web).domains(ZONE).items() if c} == {"b": 1}
