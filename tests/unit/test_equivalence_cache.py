"""The equivalence cache (core.equivalence, placement's node-local verdicts) never changes a
decision: over random sequences of pods of a few shapes, node changes (their labels alone too),
slice changes, allocations made elsewhere and their claims deleted, and pods leaving, schedule()
with the cache equals schedule() without it (every node evaluated afresh, ranked by
cycle.score_nodes). The last tests check that the property can fail: with invalidation switched off
(or forgetting a claim's deletion, or a node's new labels) it finds a counterexample."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.equivalence import Aligned, TouchLog
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.plugins.node_resources_fit import Scoring
from draxr.core.state import ClusterState
from tests.unit import cluster_builders as cb

JSON = dict[str, Any]
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

# Pod shapes: what varies between them is what the cached verdicts read (requests, extended
# resources, tolerations, node selection, ports) and what they must not cache (spreading,
# inter-pod affinity, the default spreading of a ReplicaSet's pods).
_SHAPES: list[JSON] = [
    {"gpus": 1},
    {"gpus": 2, "requests": {"cpu": "1", "memory": "1Gi"}},
    {"gpus": 1, "tolerations": [{"key": "gpu", "operator": "Exists"}]},
    {"requests": {"cpu": "2"}, "nodeSelector": {ZONE: "a"}},
    {"gpus": 1, "ports": True},
    {"gpus": 1, "preferred": True},
    {"gpus": 1, "spread": "hard"},
    {"gpus": 1, "spread": "soft"},
    {"gpus": 1, "anti": True},
    {"gpus": 1, "owner": True},
    {"extended": 1},  # the device-plugin resource (served by allocatable on some nodes)
]


def _pod(i: int, shape: int) -> JSON:
    spec = _SHAPES[shape]
    kw: dict[str, Any] = {}
    if "tolerations" in spec:
        kw["tolerations"] = spec["tolerations"]
    if "nodeSelector" in spec:
        kw["nodeSelector"] = spec["nodeSelector"]
    limits = {"example.com/dp": "1"} if spec.get("extended") else None
    p = cb.pod(f"p{i}", gpus=spec.get("gpus", 0), requests=spec.get("requests"), limits=limits, **kw)
    p["metadata"]["labels"] = {"app": f"s{shape}"}
    p["metadata"]["resourceVersion"] = "1"
    selector = {"matchLabels": {"app": f"s{shape}"}}
    if spec.get("ports"):
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    if spec.get("preferred"):
        term = {"weight": 5, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["b"]}]}}
        p["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}
    if spec.get("spread"):
        when = "DoNotSchedule" if spec["spread"] == "hard" else "ScheduleAnyway"
        c = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": when, "labelSelector": selector}
        p["spec"]["topologySpreadConstraints"] = [c]
    if spec.get("anti"):
        term = {"labelSelector": selector, "topologyKey": HOST}
        p["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if spec.get("owner"):
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs", "controller": True}
        p["metadata"]["ownerReferences"] = [owner]
    return p


def _node(name: str, zone: str, variant: int, rv: int, labels: JSON | None = None) -> JSON:
    taints = [{"key": "gpu", "value": "x", "effect": "NoSchedule" if variant % 2 else "PreferNoSchedule"}]
    n = cb.node(
        name,
        cpu=("4", "8", "2")[variant % 3],
        memory="16Gi",
        pods=("110", "3")[variant % 2],
        labels={ZONE: zone, **(labels or {})},
        taints=taints if variant % 4 == 1 or variant % 4 == 2 else None,
        extended={"example.com/dp": "2"} if variant % 5 == 0 else None,
    )
    n["metadata"]["resourceVersion"] = str(rv)
    return n


def _slice_name(i: int) -> str:
    return str(_slice(f"n{i}", 1, 0)["metadata"]["name"])


def _slice(name: str, count: int, rv: int) -> JSON:
    s = cb.gpu_slice(name, count)
    s["metadata"]["resourceVersion"] = str(rv)
    return s


_ops = st.one_of(
    st.tuples(st.just("pod"), st.integers(0, 2), st.integers(0, 7)),  # a shape of the example's few
    st.tuples(st.just("node"), st.integers(0, 5), st.integers(0, 19)),
    st.tuples(st.just("slice"), st.integers(0, 5), st.integers(0, 4)),
    st.tuples(st.just("claim"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("unclaim"), st.integers(0, 5), st.integers(0, 3)),  # that claim deleted
    st.tuples(st.just("relabel"), st.integers(0, 5), st.integers(0, 3)),  # the node's labels changed
    st.tuples(st.just("leave"), st.integers(0, 50), st.just(0)),
    st.tuples(st.just("drop-node"), st.integers(0, 5), st.just(0)),
)


class _World:
    def __init__(self, nodes: int, per_node: bool = True) -> None:
        self.per_node = per_node  # also schedule on each node alone (a new node list every time)
        self.state = ClusterState()
        self.state.upsert_class(cb.gpu_class())
        self.state.workloads.upsert(
            {"kind": "ReplicaSet", "metadata": {"name": "rs", "namespace": "ns"}, "spec": {"selector": {}}}
        )
        self.rv = 10
        self.placed: list[str] = []
        self.pods = 0
        self.variants: dict[int, int] = {}
        self.relabels: dict[int, int] = {}
        for i in range(nodes):
            self.upsert_node(i, i)
            self.state.upsert_slice(_slice(f"n{i}", 2 + i % 3, self.next_rv()))

    def next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def upsert_node(self, i: int, variant: int) -> None:
        self.variants[i] = variant
        self.state.upsert_node(self._node(i))

    def relabel(self, i: int, how: int) -> None:
        """The node's labels change, nothing else: its zone flips (what a nodeSelector, preferred
        node affinity and zone spreading read), or a label nothing selects comes or goes."""
        self.relabels[i] = how
        self.state.upsert_node(self._node(i))

    def _node(self, i: int) -> JSON:
        how = self.relabels.get(i, 0)
        zone = "ab"[(i + (how % 2)) % 2]
        extra = {"draxr.test/extra": str(how)} if how >= 2 else None
        return _node(f"n{i}", zone, self.variants.get(i, i), self.next_rv(), extra)

    def compare(self, shape: int, start: int, scoring: Scoring) -> tuple[str, Decision | Unschedulable]:
        """Schedules a new pod of ``shape`` with and without the cache (and again, now from the
        cache's own entries), then on each node alone: there the
        node's own verdict decides, so that a stale entry shows even where it would not change the
        choice among all nodes. Returns the pod's uid and the decision; nothing is assumed."""
        p = _pod(self.pods, shape)
        self.pods += 1
        info = self.state.upsert_pod(p)
        kw: dict[str, Any] = {"features": DEFAULT_FEATURES, "start": start, "scoring": scoring}
        kw["device_scoring"] = Scoring.MOST_ALLOCATED
        cached = schedule(info, self.state, **kw)
        assert cached == schedule(info, self.state, equivalence=False, **kw)
        assert schedule(info, self.state, **kw) == cached
        if not self.per_node:
            return info.uid, cached
        every = self.state.nodes
        try:
            for name, node in every.items():
                self.state.nodes = {name: node}
                assert schedule(info, self.state, **kw) == schedule(info, self.state, equivalence=False, **kw)
        finally:
            self.state.nodes = every
        return info.uid, cached

    def schedule_both(self, shape: int, start: int, scoring: Scoring) -> Decision | Unschedulable:
        """compare(), then the decision is assumed, as the scheduler does."""
        uid, decided = self.compare(shape, start, scoring)
        if isinstance(decided, Decision):
            self.state.assume_pod(uid, decided.node)
            if decided.allocation is not None:
                self.state.assume_allocation(f"<assumed>/{uid}", decided.allocation)
            self.placed.append(uid)
        return decided

    def probe(self, shapes: list[int], scoring: Scoring) -> None:
        """compare() for each shape, without placing the pods: the entries as the last change left them."""
        for shape in shapes:
            uid, _ = self.compare(shape, 0, scoring)
            self.state.remove_pod(uid)

    def apply(self, op: tuple[str, int, int], shapes: list[int], scoring: Scoring) -> None:
        kind, a, b = op
        state = self.state
        if kind == "pod":
            self.schedule_both(shapes[a % len(shapes)], b, scoring)
        elif kind == "node":
            self.upsert_node(a, b)
        elif kind == "slice":
            if b == 0:
                state.remove_slice(_slice_name(a))
            else:
                state.upsert_slice(_slice(f"n{a}", b, self.next_rv()))
        elif kind == "claim":  # a claim made elsewhere takes a device of node a
            claim = cb.plain_claim(f"other-{a}-{b}", rv=str(self.next_rv()), alloc=cb.allocation(f"n{a}", f"gpu-{b}"))
            state.upsert_claim(claim)
        elif kind == "unclaim":  # that claim deleted: its device free again (if it was made)
            state.remove_claim("ns", f"other-{a}-{b}")
        elif kind == "relabel":
            if f"n{a}" in state.nodes:
                self.relabel(a, b)
        elif kind == "leave" and self.placed:
            uid = self.placed.pop(a % len(self.placed))
            state.forget_allocation(f"<assumed>/{uid}")
            state.remove_pod(uid)
        elif kind == "drop-node":
            state.remove_node(f"n{a}")
            state.remove_slice(_slice_name(a))


_settings = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(nodes: int, shapes: list[int], ops: list[tuple[str, int, int]], least: bool, per_node: bool = True) -> None:
    world = _World(nodes, per_node)
    scoring = Scoring.LEAST_ALLOCATED if least else Scoring.MOST_ALLOCATED
    for op in ops:
        world.apply(op, shapes, scoring)
        world.probe(shapes, scoring)
    for shape in range(len(_SHAPES)):  # every shape once more, on the final state
        world.schedule_both(shape, 0, scoring)


# Few shapes per example, so that pods of one shape meet the changes made between them.
_shapes = st.lists(st.integers(0, len(_SHAPES) - 1), min_size=1, max_size=3)
_case = (st.integers(1, 6), _shapes, st.lists(_ops, max_size=30), st.booleans())


@_settings
@given(*_case)
def test_decisions_with_the_cache_equal_decisions_without_it(
    nodes: int, shapes: list[int], ops: list[tuple[str, int, int]], least: bool
) -> None:
    _check(nodes, shapes, ops, least)


@_settings
@given(*_case)
def test_runs_kept_across_pods_give_the_decisions_without_the_cache(
    nodes: int, shapes: list[int], ops: list[tuple[str, int, int]], least: bool
) -> None:
    """Without the per-node probes the node list stays the same object between pods, so that
    placement's runs of valid verdicts (equivalence.Aligned) live across pods and changes."""
    _check(nodes, shapes, ops, least, per_node=False)


def test_pods_of_one_shape_share_a_table_and_reuse_it() -> None:
    world = _World(4)
    first = world.schedule_both(0, 0, Scoring.LEAST_ALLOCATED)
    assert isinstance(first, Decision)
    assert len(world.state.equivalence) == 1
    (table,) = world.state.equivalence.tables()
    assert len(table.entries) == 4
    world.schedule_both(0, 0, Scoring.LEAST_ALLOCATED)
    assert len(world.state.equivalence) == 1  # the second pod of the shape used the same table


@contextmanager
def _without_invalidation() -> Iterator[None]:
    """A broken cache: a node keeps the stamp it got first, whatever changes on it."""
    original = ClusterState.touch_node

    def first_stamp_only(self: ClusterState, name: str) -> None:
        if name not in self.node_stamps:
            original(self, name)

    ClusterState.touch_node = first_stamp_only  # type: ignore[method-assign]
    try:
        yield
    finally:
        ClusterState.touch_node = original  # type: ignore[method-assign]


# For the tests that break the cache on purpose: a counterexample must be found.
_FIND_ONE = settings(
    max_examples=300,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=[Phase.generate],  # finding one is the point; no shrinking
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_property_fails_when_the_cache_is_not_invalidated() -> None:
    @_FIND_ONE
    @given(*_case)
    def broken(nodes: int, shapes: list[int], ops: list[tuple[str, int, int]], least: bool) -> None:
        _check(nodes, shapes, ops, least)

    with _without_invalidation(), pytest.raises(AssertionError):
        broken()


def test_the_property_fails_when_the_runs_are_not_invalidated() -> None:
    """Aligned.sync that forgets to drop the touched nodes' positions: a counterexample is found."""

    @_FIND_ONE
    @given(*_case)
    def broken(nodes: int, shapes: list[int], ops: list[tuple[str, int, int]], least: bool) -> None:
        _check(nodes, shapes, ops, least, per_node=False)

    def sync_nothing(self: Aligned[Any, Any], log: TouchLog) -> None:
        self.seen = log.touched_base + len(log.touched)

    original = Aligned.sync
    Aligned.sync = sync_nothing  # type: ignore[method-assign]
    try:
        with pytest.raises(AssertionError):
            broken()
    finally:
        Aligned.sync = original  # type: ignore[method-assign]


def test_runs_start_over_when_the_touch_log_was_cut() -> None:
    """A table that fell behind the bounded touch log (ClusterState.touched) revalidates every node:
    a node changed before the cut is not taken from a stale run."""
    world = _World(3, per_node=False)
    for variant in range(8):  # each round: a decision from the runs, a node changed, the log cut
        world.schedule_both(0, 0, Scoring.MOST_ALLOCATED)
        world.upsert_node(variant % 3, variant)
        base = world.state.stamps.touched_base
        while world.state.stamps.touched_base == base:
            world.state.touch_node("elsewhere")
        world.compare(0, 0, Scoring.MOST_ALLOCATED)
