"""plugins.pod_topology_spread: upstream's PodTopologySpread Score (podtopologyspread/scoring.go):
fewer matching pods in a node's domains is better, normalised. Its Filter is core.spread's
(tests/unit/test_interpod_spread.py). Upstream's own answers for generated cases:
tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from draxr.core.plugins import pod_topology_spread
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import node, pod

from .score_laws import agrees, column_and_reference, scenes


def _zones_with_x_pods(on: list[str]) -> ClusterState:
    state = ClusterState()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        state.upsert_node(node(name, labels={"zone": zone}))
    for i, where in enumerate(on):
        placed = pod(f"x{i}", node_name=where, phase="Running")
        placed["metadata"]["labels"] = {"app": "x"}
        state.upsert_pod(placed)
    return state


def _spreading(key: str) -> dict[str, Any]:
    wanted = pod("p", requests={"cpu": "1"})
    wanted["metadata"]["labels"] = {"app": "x"}
    wanted["spec"]["topologySpreadConstraints"] = [
        {"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "x"}}}
    ]  # fmt: skip
    return wanted


def test_the_emptier_zone_scores_100_and_the_fuller_less() -> None:
    state = _zones_with_x_pods(["a1", "a2"])
    column, _ = column_and_reference(pod_topology_spread.PLUGIN, state, _spreading("zone"))
    assert column is not None
    assert not isinstance(column, int)
    scores = dict(zip(sorted(state.nodes), column, strict=True))
    assert scores["b1"] == 100
    assert scores["a1"] == scores["a2"] < 100


def test_a_pod_without_soft_constraints_is_skipped() -> None:
    state = _zones_with_x_pods(["a1"])
    column, reference = column_and_reference(pod_topology_spread.PLUGIN, state, pod("plain", requests={"cpu": "1"}))
    assert (column, reference) == (None, None)


@settings(max_examples=150)
@given(scenes())
def test_the_column_equals_the_reference_scoring(scene: Any) -> None:
    state, wanted = scene
    assert agrees(pod_topology_spread.PLUGIN, state, wanted)
