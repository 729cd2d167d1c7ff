"""The law every node-local plugin keeps (core.plugins.base): its ``key`` holds everything its
Filter and Score read of the pod, so two pods with equal keys get the same verdict and the same raw
score on every node; the equivalence cache (core.equivalence) hands one pod's results to the other.
Pods and nodes are drawn from small domains so that equal keys are common, and a pod's twin redraws
each field or keeps it."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from draxr.core.plugins.base import NodeLocalPlugin
from draxr.core.state import ClusterState, PodInfo
from tests.unit.cluster_builders import node, pod

ZONES = ("a", "b")
TAINTS = (
    {"key": "gpu", "effect": "NoSchedule"},
    {"key": "gpu", "value": "x", "effect": "NoExecute"},
    {"key": "spot", "effect": "PreferNoSchedule"},
)
TOLERATIONS = (
    {"key": "gpu", "operator": "Exists"},
    {"key": "gpu", "operator": "Equal", "value": "x", "effect": "NoExecute"},
    {"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"},
    {"operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
PORTS = (
    {"containerPort": 80, "hostPort": 80, "protocol": "TCP"},
    {"containerPort": 80, "hostPort": 80, "protocol": "UDP"},
    {"containerPort": 81, "hostPort": 81, "protocol": "TCP", "hostIP": "10.0.0.1"},
)
AFFINITIES = (
    None,
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 5, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}}]}},
    {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}}},
)  # fmt: skip

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "node_name": st.sampled_from(("", "n1", "n2")),
    "selector": st.sampled_from(({}, {"zone": "a"}, {"zone": "b"})),
    "affinity": st.sampled_from(AFFINITIES),
    "tolerations": st.lists(st.sampled_from(TOLERATIONS), max_size=2, unique_by=repr),
    "ports": st.lists(st.sampled_from(PORTS), max_size=2, unique_by=repr),
    "cpu": st.sampled_from(("100m", "1")),
    "priority": st.sampled_from((0, 10)),
    "labels": st.sampled_from(({}, {"app": "x"}, {"example.com/during-maintenance": "true"})),
}
NODE_LABELS = ({}, {"example.com/maintenance": ""}, {"example.com/fast": "true"})
PLAIN: dict[str, Any] = {"node_name": "", "selector": {}, "affinity": None, "tolerations": [], "ports": [], "cpu": "1",
                         "priority": 0, "labels": {}}  # fmt: skip
"""A pod asking nothing in particular: a case's fields are ``{**PLAIN, field: value}``."""


def build_pod(name: str, fields: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"priority": fields["priority"], "requests": {"cpu": fields["cpu"]}}
    extra: dict[str, Any] = {}
    if fields["selector"]:
        extra["nodeSelector"] = fields["selector"]
    if fields["affinity"] is not None:
        extra["affinity"] = fields["affinity"]
    if fields["tolerations"]:
        extra["tolerations"] = fields["tolerations"]
    obj = pod(name, **spec, **extra)
    if fields["node_name"]:  # (not bound: a pod asking for a node, as spec.nodeName before binding)
        obj["spec"]["nodeName"] = fields["node_name"]
    if fields["ports"]:
        obj["spec"]["containers"][0]["ports"] = fields["ports"]
    if fields.get("labels"):
        obj["metadata"]["labels"] = dict(fields["labels"])
    return obj


@st.composite
def twins(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod's fields and its twin's: each field kept or drawn again."""
    first = {name: draw(strategy) for name, strategy in FIELDS.items()}
    second = {name: value if draw(st.booleans()) else draw(FIELDS[name]) for name, value in first.items()}
    return first, second


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    """Three nodes with drawn labels, taints and cordons, and placed pods holding host ports."""
    state = ClusterState()
    for name in ("n1", "n2", "n3"):
        taints = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=repr))
        labels = {"zone": draw(st.sampled_from(ZONES)), **draw(st.sampled_from(NODE_LABELS))}
        state.upsert_node(node(name, labels=labels, taints=taints, unschedulable=draw(st.booleans())))
        for i, port in enumerate(draw(st.lists(st.sampled_from(PORTS), max_size=2, unique_by=repr))):
            placed = pod(f"{name}-holder-{i}", node_name=name, phase="Running")
            placed["spec"]["containers"][0]["ports"] = [port]
            state.upsert_pod(placed)
    return state


def outcomes(plugin: NodeLocalPlugin, info: PodInfo, state: ClusterState) -> list[tuple[object, object]]:
    """Per node: the plugin's verdict and raw score for the pod (None where it has neither)."""
    check = plugin.prefilter(info) if hasattr(plugin, "prefilter") else None
    score = plugin.prescore(info) if hasattr(plugin, "prescore") else None
    return [
        (
            check(state.nodes[n], state.usage[n]) if check is not None else None,
            score(state.nodes[n], state.usage[n]) if score is not None else None,
        )
        for n in sorted(state.nodes)
    ]


def key_breaks(plugin: NodeLocalPlugin, pair: tuple[dict[str, Any], dict[str, Any]], state: ClusterState) -> bool:
    """True when two pods share the plugin's key but not its verdicts or scores: the law broken."""
    a = PodInfo.from_api(build_pod("a", pair[0]), keep_object=True)
    b = PodInfo.from_api(build_pod("b", pair[1]), keep_object=True)
    return plugin.key(a) == plugin.key(b) and outcomes(plugin, a, state) != outcomes(plugin, b, state)


class ForgetfulKey:
    """A plugin whose key forgets everything: the law must catch it (the test can fail)."""

    def __init__(self, plugin: NodeLocalPlugin) -> None:
        self.plugin = plugin
        self.name = plugin.name

    def key(self, pod: PodInfo) -> object:
        return ()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plugin, name)
