"""plugins.inter_pod_affinity: upstream's InterPodAffinity Score (interpodaffinity/scoring.go): the
pod's preferred terms and the placed pods' terms towards it, summed per topology domain and
min-max normalised. Its Filter is core.interpod's (tests/unit/test_interpod_spread.py). Upstream's
own answers for generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from draxr.core.plugins import inter_pod_affinity
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import node, pod

from .score_laws import agrees, column_and_reference, scenes


def _scene(kind: str) -> tuple[ClusterState, dict[str, Any]]:
    state = ClusterState()
    for name, zone in (("a1", "a"), ("b1", "b")):
        state.upsert_node(node(name, labels={"zone": zone}))
    placed = pod("db", node_name="a1", phase="Running")
    placed["metadata"]["labels"] = {"app": "db"}
    state.upsert_pod(placed)
    wanted = pod("p", requests={"cpu": "1"})
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "zone"}
    wanted["spec"]["affinity"] = {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "podAffinityTerm": term}]}}  # fmt: skip
    return state, wanted


def test_preferred_affinity_draws_the_pod_to_the_zone_and_anti_affinity_away() -> None:
    for kind, near, far in (("podAffinity", 100, 0), ("podAntiAffinity", 0, 100)):
        state, wanted = _scene(kind)
        column, _ = column_and_reference(inter_pod_affinity.PLUGIN, state, wanted)
        assert column is not None
        assert not isinstance(column, int)
        assert dict(zip(sorted(state.nodes), column, strict=True)) == {"a1": near, "b1": far}, kind


def test_no_terms_anywhere_is_skipped() -> None:
    state, _ = _scene("podAffinity")
    column, reference = column_and_reference(inter_pod_affinity.PLUGIN, state, pod("plain", requests={"cpu": "1"}))
    assert (column, reference) == (None, None)


@settings(max_examples=150)
@given(scenes())
def test_the_column_equals_the_reference_scoring(scene: Any) -> None:
    state, wanted = scene
    assert agrees(inter_pod_affinity.PLUGIN, state, wanted)
