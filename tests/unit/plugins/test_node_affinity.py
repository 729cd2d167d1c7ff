"""plugins.node_affinity: upstream's NodeAffinity (nodeaffinity/node_affinity.go): nodeSelector and
the required terms as its Filter, the preferred terms' weights as its raw Score. Upstream's own
answers for generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import node_affinity
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code
from tests.unit.cluster_builders import node, pod

from .node_local_laws import AFFINITIES, PLAIN, ForgetfulKey, clusters, key_breaks, twins

REQUIRED_ZONE_A, PREFERRED_ZONE_B, REQUIRED_NAME_N2 = AFFINITIES[1:]


def _zones() -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("n1", labels={"zone": "a"}))
    state.upsert_node(node("n2", labels={"zone": "b"}))
    return state


def _passing(state: ClusterState, **spec: Any) -> list[str]:
    check = node_affinity.PLUGIN.prefilter(PodInfo.from_api(pod("p", **spec)))
    assert check is not None
    return [n for n in sorted(state.nodes) if check(state.nodes[n], state.usage[n]) is None]


def test_the_selector_and_the_required_terms_filter_and_a_miss_is_unresolvable() -> None:
    state = _zones()
    assert _passing(state, nodeSelector={"zone": "b"}) == ["n2"]
    assert _passing(state, affinity=REQUIRED_ZONE_A) == ["n1"]
    assert _passing(state, affinity=REQUIRED_NAME_N2) == ["n2"]  # matchFields metadata.name
    assert _passing(state, nodeSelector={"zone": "b"}, affinity=REQUIRED_ZONE_A) == []  # both must hold
    check = node_affinity.PLUGIN.prefilter(PodInfo.from_api(pod("p", nodeSelector={"zone": "b"})))
    assert check is not None
    rejected = check(state.nodes["n1"], state.usage["n1"])
    assert rejected is not None
    assert (rejected.code, rejected.plugin, rejected.reasons) == (
        Code.UNRESOLVABLE, "NodeAffinity", ("node(s) didn't match Pod's node affinity/selector",)
    )  # fmt: skip
    assert node_affinity.PLUGIN.prefilter(PodInfo.from_api(pod("q"))) is None  # nothing to check


def test_the_score_sums_the_weights_of_the_preferred_terms_a_node_matches() -> None:
    state = _zones()
    score = node_affinity.PLUGIN.prescore(PodInfo.from_api(pod("p", affinity=PREFERRED_ZONE_B)))
    assert score is not None
    assert [score(state.nodes[n], state.usage[n]) for n in ("n1", "n2")] == [0, 5]
    assert node_affinity.PLUGIN.prescore(PodInfo.from_api(pod("q"))) is None  # upstream's PreScore Skip


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts_and_scores(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(node_affinity.PLUGIN, pair, state)


def test_a_key_that_forgets_the_selector_is_caught() -> None:
    fields = {**PLAIN, "selector": {"zone": "a"}}
    assert key_breaks(ForgetfulKey(node_affinity.PLUGIN), (fields, {**fields, "selector": {"zone": "b"}}), _zones())
