"""The Score and NormalizeScore extension points (plugins.scoring, core.ranking): one normalisation
(upstream's DefaultNormalizeScore, with its own test table), the registry of score plugins in the
default profile's order, and a ranking that runs only the plugins its profile scores with.
Upstream's scores for generated cases: tests/differential/test_scheduling_differential.py and
test_config_differential.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.cycle import prepare, score_nodes
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.node_verdict import NodeVerdict
from draxr.core.plugins import DEFAULT_REGISTRY, balanced_allocation, image_locality, taint_toleration
from draxr.core.plugins.scoring import ScoreInputs
from draxr.core.profile import DEFAULT_PROFILE, DEFAULT_WEIGHTS
from draxr.core.ranking import rank
from draxr.core.scores import default_normalize, normalize
from draxr.core.state import ClusterState, PodInfo
from tests.unit import cluster_builders as cb

# pkg/scheduler/framework/plugins/helper/normalize_score_test.go (v1.37.2), TestDefaultNormalizeScore.
UPSTREAM_CASES = [
    (False, [1, 2, 3, 4], [25, 50, 75, 100]),
    (True, [1, 2, 3, 4], [75, 50, 25, 0]),
    (False, [1000, 10, 20, 30], [100, 1, 2, 3]),
    (True, [1000, 10, 20, 30], [0, 99, 98, 97]),
    (False, [1, 1, 1, 1], [100, 100, 100, 100]),
    (False, [1000, 1, 1, 1], [100, 0, 0, 0]),
    (True, [0, 1, 1, 1], [100, 0, 0, 0]),
    (False, [0, 0, 0, 0], [0, 0, 0, 0]),
    (True, [0, 0, 0, 0], [100, 100, 100, 100]),
]


@pytest.mark.parametrize(("reverse", "raw", "expected"), UPSTREAM_CASES)
def test_normalize_answers_upstreams_table(reverse: bool, raw: list[int], expected: list[int]) -> None:
    assert normalize(raw, reverse) == expected
    names = [f"n{i}" for i in range(len(raw))]
    assert default_normalize(dict(zip(names, raw, strict=True)), reverse) == dict(zip(names, expected, strict=True))


@given(st.lists(st.integers(min_value=0, max_value=10**9), max_size=30), st.booleans())
def test_normalize_keeps_the_order_and_puts_the_best_at_100(raw: list[int], reverse: bool) -> None:
    out = normalize(raw, reverse)
    assert len(out) == len(raw)
    assert all(0 <= s <= MAX_NODE_SCORE for s in out)
    for a, b in zip(raw, out, strict=True):
        for c, d in zip(raw, out, strict=True):
            if a < c:
                assert (d <= b) if reverse else (b <= d)
    if raw and max(raw) > 0:
        assert out[raw.index(max(raw))] == (0 if reverse else MAX_NODE_SCORE)


def test_the_registry_is_the_default_profiles_score_plugins_in_upstreams_order() -> None:
    assert [p.name for p in DEFAULT_REGISTRY.scores] == [name for name, _ in DEFAULT_WEIGHTS]


def _feasible() -> tuple[ClusterState, PodInfo, list[NodeVerdict]]:
    state = ClusterState()
    taint = {"key": "spot", "value": "1", "effect": "PreferNoSchedule"}
    state.upsert_node(cb.node("a"))
    state.upsert_node(cb.node("b", taints=[taint]))
    state.upsert_node(cb.node("c", taints=[taint, {**taint, "key": "old"}]))
    pod = PodInfo.from_api(cb.pod("p", requests={"cpu": "1", "memory": "1Gi"}))
    slots = DEFAULT_REGISTRY.slots
    verdicts = []
    for fit, balanced, taints in ((90, 80, 0), (70, 95, 1), (50, 99, 2)):
        scores = [0] * len(slots)
        scores[slots[balanced_allocation.NAME]], scores[slots[taint_toleration.NAME]] = balanced, taints
        verdicts.append(NodeVerdict(fit=fit, scores=tuple(scores)))
    return state, pod, verdicts


def test_the_ranking_sums_the_columns_with_the_profiles_weights_as_the_reference_does() -> None:
    state, pod, verdicts = _feasible()
    nodes = [state.nodes[n] for n in ("a", "b", "c")]
    cycle = prepare(pod, state)
    ranking = rank(cycle, state, nodes, verdicts)
    # TaintToleration reversed over 0, 1, 2 untolerated taints; Fit and BalancedAllocation as given.
    assert ranking.scores(0)["TaintToleration"] == 100
    assert [ranking.scores(i)["TaintToleration"] for i in range(3)] == [100, 50, 0]
    reference = score_nodes(
        cycle, state, nodes, fit_override={n.name: v.fit for n, v in zip(nodes, verdicts, strict=True)}
    )
    for i, n in enumerate(nodes):
        assert ranking.scores(i)["TaintToleration"] == reference["TaintToleration"][n.name]
    weights = DEFAULT_PROFILE.weight_of
    assert ranking.totals == [
        sum(weights[plugin] * score for plugin, score in ranking.scores(i).items()) for i in range(3)
    ]
    assert ranking.totals[0] - ranking.totals[1] == 3 * 50 + (90 - 70) + (80 - 95)


def test_no_taint_on_any_feasible_node_is_100_everywhere_in_one_number() -> None:
    state, pod, verdicts = _feasible()
    nodes = [state.nodes["a"]]
    inputs = ScoreInputs(
        prepare(pod, state), state, DEFAULT_PROFILE, nodes, ["a"], verdicts[:1], None, None, DEFAULT_REGISTRY.slots
    )
    assert taint_toleration.PLUGIN.column(inputs) == MAX_NODE_SCORE


def test_a_plugin_the_profile_does_not_score_with_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile without ImageLocality never asks it for a column (its cost is not paid), and its
    ranking has no such column; with it, the plugin is run."""
    state, pod, verdicts = _feasible()
    nodes = [state.nodes[n] for n in ("a", "b", "c")]
    cycle = prepare(pod, state)
    asked: list[str] = []
    real = image_locality.ImageLocality.column

    def counting(self: image_locality.ImageLocality, inputs: ScoreInputs) -> object:
        asked.append(inputs.names[0])
        return real(self, inputs)

    monkeypatch.setattr(image_locality.ImageLocality, "column", counting)
    without = replace(DEFAULT_PROFILE, weights=tuple((n, w) for n, w in DEFAULT_WEIGHTS if n != image_locality.NAME))
    ranking = rank(cycle, state, nodes, verdicts, profile=without)
    assert asked == []
    assert image_locality.NAME not in ranking.scores(0)
    rank(cycle, state, nodes, verdicts)
    assert asked == ["a"]


def test_skipped_plugins_leave_no_column() -> None:
    """NodeAffinity without preferred terms, spreading and inter-pod affinity with nothing to
    score: upstream's PreScore Skip, no column (0 everywhere)."""
    state, pod, verdicts = _feasible()
    nodes = [state.nodes[n] for n in ("a", "b", "c")]
    columns = dict(rank(prepare(pod, state), state, nodes, verdicts).columns)
    assert "NodeAffinity" not in columns
    assert "InterPodAffinity" not in columns
    best_effort = PodInfo.from_api(cb.pod("q"))
    columns = dict(rank(prepare(best_effort, state), state, nodes, verdicts).columns)
    assert "NodeResourcesBalancedAllocation" not in columns
    assert columns["VolumeBinding"] == 0
    assert columns["DynamicResources"] == 0
