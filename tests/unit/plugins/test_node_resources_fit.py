"""plugins.node_resources_fit: upstream's NodeResourcesFit (noderesources/fit.go), its Filter and its
raw Score under the scoring strategies (least_allocated.go, most_allocated.go). Upstream's own
answers for generated cases, extended resources and the device-plugin/DRA split included:
tests/differential/test_scheduling_differential.py and test_config_differential.py."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from hypothesis import given

from draxr.core.plugins import node_resources_fit
from draxr.core.plugins.base import NodeCheck, NodeScore
from draxr.core.plugins.node_resources_fit import Scoring, strategy_score
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code, Status
from tests.unit.cluster_builders import node, pod

from .node_local_laws import clusters, key_breaks, twins

GI = 1024**3


def _state(cpu: str = "2", used_cpu: str | None = None) -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("n", cpu=cpu, memory="4Gi"))
    if used_cpu is not None:
        state.upsert_pod(pod("holder", node_name="n", phase="Running", requests={"cpu": used_cpu}))
    return state


def _filter(state: ClusterState, **requests: str) -> Status | None:
    fit = node_resources_fit.PLUGIN.prefilter(PodInfo.from_api(pod("p", requests=requests)))
    return fit.filter(state.nodes["n"], state.usage["n"])


def test_a_request_beyond_what_is_free_is_unschedulable_and_beyond_allocatable_unresolvable() -> None:
    assert _filter(_state(used_cpu="1"), cpu="1") is None
    short = _filter(_state(used_cpu="1500m"), cpu="1")
    assert short is not None
    # Evicting the holder could make room: preemption may try.
    assert (short.code, short.plugin, short.reasons) == (Code.UNSCHEDULABLE, "NodeResourcesFit", ("Insufficient cpu",))
    never = _filter(_state(), cpu="3")
    assert never is not None
    assert never.code is Code.UNRESOLVABLE  # more than the node has at all
    both = _filter(_state(used_cpu="2"), cpu="1", memory="5Gi")
    assert both is not None
    assert both.reasons == ("Insufficient cpu", "Insufficient memory")


def test_the_strategies_score_the_share_left_or_the_share_taken() -> None:
    state = ClusterState()
    state.upsert_node(node("n", cpu="4", memory="4Gi"))
    info = PodInfo.from_api(pod("p", requests={"cpu": "1", "memory": "1Gi"}))
    scores = {}
    for scoring in (Scoring.LEAST_ALLOCATED, Scoring.MOST_ALLOCATED):
        fit = node_resources_fit.PLUGIN.prefilter(info, scoring=scoring)
        scores[scoring] = strategy_score(fit.strategy, *fit.vectors(state.nodes["n"], state.usage["n"]))
    # A quarter of cpu and memory taken: 75 left (LeastAllocated), 25 taken (MostAllocated).
    assert scores == {Scoring.LEAST_ALLOCATED: 75, Scoring.MOST_ALLOCATED: 25}


class _AsNodeLocal:
    """NodeResourcesFit seen through the node-local shape the law reads: its Filter and its raw
    Score without the device-plugin/DRA split (the split is a node's own input too)."""

    name = node_resources_fit.NAME

    def key(self, pod: PodInfo) -> Hashable:
        return node_resources_fit.PLUGIN.key(pod)

    def prefilter(self, pod: PodInfo) -> NodeCheck:
        return node_resources_fit.PLUGIN.prefilter(pod).filter

    def prescore(self, pod: PodInfo) -> NodeScore:
        fit = node_resources_fit.PLUGIN.prefilter(pod)
        return lambda node, usage: strategy_score(fit.strategy, *fit.vectors(node, usage))


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts_and_scores(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(_AsNodeLocal(), pair, state)
