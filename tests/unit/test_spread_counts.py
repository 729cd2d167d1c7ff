"""Hard spreading's per-domain counts are kept up to date across cycles (ClusterState.spread_counts):
after any sequence of pod and node changes they equal a recount over every placed pod, the way
upstream's PreFilter counts them for each pod it schedules."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.cycle import prepare
from draxr.core.spread import HOSTNAME, ZONE
from draxr.core.state import ClusterState, PodInfo

JSON = dict[str, Any]
NODES = ("n0", "n1", "n2", "n3", "n4")
ZONES = ("a", "b", "")  # "": no zone label (the node is not counted: it lacks a key)


def node(name: str, zone: str, rv: int) -> JSON:
    labels = {HOSTNAME: name, **({ZONE: zone} if zone else {})}
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": str(rv)}, "status": {"allocatable": alloc}}


def placed(uid: str, node_name: str, app: str, ns: str, deleting: bool, rv: int) -> JSON:
    meta: JSON = {"name": uid, "namespace": ns, "uid": uid, "labels": {"app": app}, "resourceVersion": str(rv)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec = {"containers": [{"name": "c", "image": "i"}], "nodeName": node_name}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


INCOMING = PodInfo.from_api(
    {
        "metadata": {"name": "new", "namespace": "default", "uid": "new", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": key,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
                for key in (HOSTNAME, ZONE)
            ],
        },
    },
    keep_object=True,
)

op = st.one_of(
    st.tuples(
        st.just("pod"),
        st.integers(0, 7),
        st.sampled_from(NODES),
        st.sampled_from(("web", "db")),
        st.sampled_from(("default", "other")),
        st.booleans(),
    ),
    st.tuples(st.just("remove"), st.integers(0, 7)),
    st.tuples(st.just("node"), st.sampled_from(NODES), st.sampled_from(ZONES)),
    st.tuples(st.just("cycle")),
)


def recount(state: ClusterState) -> list[dict[str, int]]:
    """Upstream's PreFilter counting, from scratch: every node with both keys is a domain; every
    placed, non-terminating pod of the namespace that matches adds to its node's domains."""
    out: list[dict[str, int]] = [{}, {}]
    for n in state.nodes.values():
        if HOSTNAME in n.labels and ZONE in n.labels:
            for i, key in enumerate((HOSTNAME, ZONE)):
                out[i].setdefault(n.labels[key], 0)
    for p in state.pods.values():
        n = state.nodes.get(p.node_name)
        if n is None or p.deleting or p.namespace != "default" or p.labels.get("app") != "web":
            continue
        if HOSTNAME in n.labels and ZONE in n.labels:
            for i, key in enumerate((HOSTNAME, ZONE)):
                out[i][n.labels[key]] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_counts_kept_across_cycles_equal_a_recount(ops: list[tuple[Any, ...]]) -> None:
    state = ClusterState()
    rv = 1
    for i, name in enumerate(NODES):
        state.upsert_node(node(name, ZONES[i % 2], rv))
    for step in [*ops, ("cycle",)]:
        rv += 1
        if step[0] == "pod":
            _, n, where, app, ns, deleting = step
            state.upsert_pod(placed(f"p{n}", where, app, ns, deleting, rv))
        elif step[0] == "remove":
            state.remove_pod(f"p{step[1]}")
        elif step[0] == "node":
            state.upsert_node(node(step[1], step[2], rv))
        cycle = prepare(INCOMING, state)
        assert cycle.spread is not None
        expected = recount(state)
        assert [dict(c) for c in cycle.spread.counts] == expected
        mins = [min(c.values(), default=0) for c in expected]
        assert cycle.spread.min_match == mins


def test_an_assumed_pod_counts_until_forgotten() -> None:
    state = ClusterState()
    for name in NODES:
        state.upsert_node(node(name, "a", 1))
    pending = {
        "metadata": {"name": "w", "namespace": "default", "uid": "w", "labels": {"app": "web"}, "resourceVersion": "2"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "schedulerName": "draxr"},
        "status": {"phase": "Pending"},
    }
    state.upsert_pod(pending, keep_object=True)
    before = prepare(INCOMING, state).spread
    assert before is not None
    assert before.counts[0]["n0"] == 0
    state.assume_pod("w", "n0")
    assumed = prepare(INCOMING, state).spread
    assert assumed is not None
    assert (assumed.counts[0]["n0"], assumed.counts[1]["a"]) == (1, 1)
    state.forget_pod("w")
    forgotten = prepare(INCOMING, state).spread
    assert forgotten is not None
    assert (forgotten.counts[0]["n0"], forgotten.min_match) == (0, [0, 0])
