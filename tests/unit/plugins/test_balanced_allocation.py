"""plugins.balanced_allocation: upstream's NodeResourcesBalancedAllocation
(noderesources/balanced_allocation.go): how evenly cpu and memory would be used with the pod.
Upstream's own answers for generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import balanced_allocation
from draxr.core.state import ClusterState, PodInfo
from tests.unit.cluster_builders import node, pod

from .node_local_laws import PLAIN, ForgetfulKey, clusters, key_breaks, twins


def test_an_even_share_of_cpu_and_memory_scores_higher_and_a_pod_without_requests_is_skipped() -> None:
    state = ClusterState()
    state.upsert_node(node("n", cpu="4", memory="4Gi"))
    even = balanced_allocation.PLUGIN.prescore(PodInfo.from_api(pod("even", requests={"cpu": "2", "memory": "2Gi"})))
    lopsided = balanced_allocation.PLUGIN.prescore(PodInfo.from_api(pod("cpu", requests={"cpu": "2", "memory": "0"})))
    assert even is not None
    assert lopsided is not None
    # 1.37 scores the change of the node's balance, 50 + (50 + with - without) / 2: the same share of
    # each keeps an empty node perfectly balanced (75); half the cpu and no memory tips it (62).
    assert even(state.nodes["n"], state.usage["n"]) == 75
    assert lopsided(state.nodes["n"], state.usage["n"]) == 62
    assert balanced_allocation.PLUGIN.prescore(PodInfo.from_api(pod("none"))) is None  # upstream's PreScore Skip


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_scores(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(balanced_allocation.PLUGIN, pair, state)


def test_a_key_that_forgets_the_requests_is_caught() -> None:
    state = ClusterState()
    state.upsert_node(node("n", cpu="4", memory="4Gi"))
    fields = {**PLAIN, "cpu": "100m"}
    assert key_breaks(ForgetfulKey(balanced_allocation.PLUGIN), (fields, {**fields, "cpu": "1"}), state)
