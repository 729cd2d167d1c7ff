"""draxr.core.plugins: the default profile's node-local plugins, their order, their Skip, and the
equivalence key made of their parts (pods with equal keys must get equal node-local results)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, NodeFilter, prefilter, schedule
from draxr.core.plugins import DEFAULT_REGISTRY, node_local_key
from draxr.core.state import EMPTY_USAGE, ClusterState, PodInfo
from draxr.core.status import Code, Status
from tests.unit.cluster_builders import GPU, cluster, node, pod

JSON = dict[str, Any]

# pkg/scheduler/apis/config/v1/default_plugins.go (1.37.2), the filters before NodeResourcesFit.
UPSTREAM_ORDER = ("NodeName", "NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodePorts")


def test_node_local_filters_run_in_upstream_order() -> None:
    assert tuple(p.name for p in DEFAULT_REGISTRY.filters) == UPSTREAM_ORDER
    assert [p.name for p in DEFAULT_REGISTRY.local][len(UPSTREAM_ORDER) :] == [
        "NodeResourcesFit",
        "NodeResourcesBalancedAllocation",
    ]


def _filters(state: ClusterState, p: JSON) -> NodeFilter:
    info = PodInfo.from_api(p, keep_object=True)
    found = prefilter(info, state)
    assert not isinstance(found, Status)
    return NodeFilter(info, found[0], found[1], state.storage)


def test_a_pod_that_asks_nothing_of_them_skips_the_optional_filters() -> None:
    state = cluster({"n1": 0})
    bare = _filters(state, pod("bare"))
    assert len(bare.checks) == 2  # NodeUnschedulable and TaintToleration: they read the node
    tolerant = pod("tolerant", tolerations=[{"operator": "Exists"}])
    assert len(_filters(state, tolerant).checks) == 1  # tolerates unschedulable: NodeUnschedulable skips
    asking = pod(
        "asking",
        nodeName="n1",
        nodeSelector={"a": "b"},
    )
    asking["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    assert len(_filters(state, asking).checks) == 5


def test_the_first_failing_filter_reports_its_status() -> None:
    state = cluster({"n1": 0})
    state.upsert_node(node("n1", unschedulable=True, taints=[{"key": "k", "effect": "NoSchedule"}]))
    status = _filters(state, pod("p", nodeSelector={"x": "y"})).before_fit(state.nodes["n1"], EMPTY_USAGE)
    assert status is not None
    assert (status.plugin, status.code, status.reasons) == (
        "NodeUnschedulable",
        Code.UNRESOLVABLE,
        ("node(s) were unschedulable",),
    )


# ---- the equivalence key: equal keys, equal results; a field a plugin reads changes the key ----

TAINT = {"key": "gpu", "effect": "NoSchedule"}
SOFT_TAINT = {"key": "soft", "effect": "PreferNoSchedule"}
CHOICES: dict[str, list[Any]] = {
    "node_name": ["", "n1"],
    "tolerations": [None, [{"key": "gpu", "operator": "Exists"}], [{"operator": "Exists"}]],
    "selector": [None, {"zone": "a"}],
    "required": [
        None,
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]},
    ],
    "preferred": [
        None,
        [{"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}],
    ],
    "port": [None, 8080],
    "cpu": [None, "1", "6"],
    "gpus": [0, 1],
}


def _pod(name: str, pick: dict[str, int]) -> JSON:
    c = {k: CHOICES[k][i] for k, i in pick.items()}
    spec: JSON = {}
    if c["tolerations"] is not None:
        spec["tolerations"] = c["tolerations"]
    if c["selector"] is not None:
        spec["nodeSelector"] = c["selector"]
    affinity: JSON = {}
    if c["required"] is not None:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = c["required"]
    if c["preferred"] is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = c["preferred"]
    if affinity:
        spec["affinity"] = {"nodeAffinity": affinity}
    p = pod(name, gpus=c["gpus"], requests={"cpu": c["cpu"]} if c["cpu"] else None, node_name=c["node_name"], **spec)
    if c["port"] is not None:
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": c["port"]}]
    return p


def _cluster() -> ClusterState:
    state = cluster({"n1": 2, "n2": 2, "n3": 2, "n4": 0})
    state.upsert_node(node("n1", labels={"zone": "a"}, taints=[TAINT]))
    state.upsert_node(node("n2", labels={"zone": "b"}, taints=[SOFT_TAINT]))
    state.upsert_node(node("n3", labels={"zone": "a"}, unschedulable=True))
    state.upsert_node(node("n4", labels={"zone": "b"}, extended={GPU: "1"}))
    busy = pod("busy", node_name="n2", phase="Running", requests={"cpu": "4"})
    busy["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    state.upsert_pod(busy)
    return state


picks = st.fixed_dictionaries({k: st.integers(0, len(v) - 1) for k, v in CHOICES.items()})


def _outcome(state: ClusterState, p: JSON) -> tuple[Any, ...]:
    info = PodInfo.from_api(p, keep_object=True)
    result = schedule(info, state, features=DEFAULT_FEATURES, equivalence=False)
    if isinstance(result, Decision):
        return ("fits", result.node, result.score, result.scores, dict(result.statuses))
    return ("rejected", result.message, dict(result.statuses))


@settings(max_examples=150, deadline=None)
@given(a=picks, b=picks)
def test_equal_keys_mean_equal_results_and_every_field_read_is_in_the_key(a: dict[str, int], b: dict[str, int]) -> None:
    state = _cluster()
    pa, pb = _pod("a", a), _pod("b", b)
    key_a = node_local_key(PodInfo.from_api(pa, keep_object=True))
    key_b = node_local_key(PodInfo.from_api(pb, keep_object=True))
    assert (key_a == key_b) == (a == b)  # every choice is a field some node-local plugin reads
    if key_a == key_b:
        assert _outcome(state, pa) == _outcome(state, pb)


def test_the_key_ignores_what_no_node_local_plugin_reads() -> None:
    a, b = pod("a"), pod("b", namespace="other", priority=10)
    a["metadata"]["labels"], b["metadata"]["labels"] = {"app": "x"}, {"app": "y"}
    b["spec"]["containers"][0]["image"] = "other"
    assert node_local_key(PodInfo.from_api(a)) == node_local_key(PodInfo.from_api(b))
