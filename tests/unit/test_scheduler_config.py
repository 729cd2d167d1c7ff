"""core.scheduler_config: kube-scheduler's v1 defaulting and validation messages, the profile draxr
runs, and what draxr refuses; core.plugins.node_resources_fit.strategy_score against upstream's
arithmetic. Upstream's own answers for generated files: tests/differential/test_config_differential.py."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.plugins.node_resources_fit import strategy_score
from draxr.core.profile import DEFAULT_PROFILE, DEFAULT_WEIGHTS, FitStrategy, ResourceSpec, ScoringType, broken_linear
from draxr.core.scheduler_config import ConfigError, load
from draxr.settings import Settings

HEAD = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def _load(body: dict[str, object], name: str = "draxr"):  # type: ignore[no-untyped-def]
    return load(json.dumps({**HEAD, **body}), name)


def _errors(body: dict[str, object], name: str = "draxr") -> list[str]:
    with pytest.raises(ConfigError) as e:
        _load(body, name)
    return e.value.errors


def test_no_profiles_is_the_default_profile_for_default_scheduler() -> None:
    loaded = _load({}, "default-scheduler")
    assert loaded.profile.weights == DEFAULT_WEIGHTS
    assert loaded.profile.fit == DEFAULT_PROFILE.fit
    assert (loaded.pod_initial_backoff_seconds, loaded.pod_max_backoff_seconds) == (1, 10)
    assert loaded.percentage_of_nodes_to_score == 0


def test_a_file_without_draxrs_name_is_refused() -> None:
    (err,) = _errors({"profiles": [{"schedulerName": "other"}]})
    assert 'no profile has schedulerName "draxr"' in err
    assert "other" in err


def test_bin_packing_with_an_extended_resource() -> None:
    loaded = _load(
        {
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "ImageLocality"}],
                            "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                        }
                    },
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {
                                "scoringStrategy": {
                                    "type": "MostAllocated",
                                    "resources": [{"name": "cpu"}, {"name": "example.com/gpu", "weight": 3}],
                                }
                            },
                        }
                    ],
                }
            ]
        }
    )
    p = loaded.profile
    assert p.fit == FitStrategy(
        ScoringType.MOST_ALLOCATED, (ResourceSpec("cpu", 1), ResourceSpec("example.com/gpu", 3))
    )
    assert p.weight_of["NodeResourcesFit"] == 5
    assert not p.scores("ImageLocality")
    assert next(n for n, _ in p.weights) == "NodeResourcesFit"  # an override goes first (expandMultiPointPlugins)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"scoringStrategy": {"type": "Foo"}},
            'initializing profiles: creating profile for scheduler name draxr: initializing plugin "NodeResourcesFit": '
            'scoringStrategy.type: Unsupported value: "Foo": supported values: "LeastAllocated", "MostAllocated", '
            '"RequestedToCapacityRatio"',
        ),
        (
            {"scoringStrategy": {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 101}]}},
            'initializing profiles: creating profile for scheduler name draxr: initializing plugin "NodeResourcesFit": '
            "scoringStrategy.resources[0].weight: Invalid value: 101: "
            "resource weight of cpu not in valid range (0, 100]",
        ),
        (
            {"scoringStrategy": {"type": "RequestedToCapacityRatio"}},
            'initializing profiles: creating profile for scheduler name draxr: initializing plugin "NodeResourcesFit": '
            "scoringStrategy.requestedToCapacityRatio: Required value: must be specified when type is "
            "RequestedToCapacityRatio",
        ),
    ],
)
def test_fit_args_refused_with_upstreams_messages(args: dict[str, object], message: str) -> None:
    assert _errors(
        {"profiles": [{"schedulerName": "draxr", "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}]}
    ) == [message]


def test_unknown_plugin_and_validation_messages() -> None:
    assert _errors(
        {"profiles": [{"schedulerName": "draxr", "plugins": {"score": {"enabled": [{"name": "Foo"}]}}}]}
    ) == ['initializing profiles: creating profile for scheduler name draxr: ScorePlugin "Foo" does not exist']
    assert _errors({"podInitialBackoffSeconds": 0, "profiles": [{"schedulerName": "draxr"}]}) == [
        "podInitialBackoffSeconds: Invalid value: 0: must be greater than 0"
    ]
    assert _errors(
        {
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 101}}],
                }
            ]
        }
    ) == ["profiles[0].pluginConfig[0].args.hardPodAffinityWeight: Invalid value: 101: not in valid range [0, 100]"]
    (err,) = _errors({"profiles": [{"schedulerName": "draxr", "bogus": 1}]})
    assert "unknown field" in err
    assert "bogus" in err


def test_what_draxr_does_not_run_is_refused() -> None:
    (err,) = _errors(
        {"profiles": [{"schedulerName": "draxr", "plugins": {"filter": {"disabled": [{"name": "NodePorts"}]}}}]}
    )
    assert "plugins.filter: disabled NodePorts" in err
    (err,) = _errors(
        {
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "pluginConfig": [{"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": 5}}],
                }
            ]
        }
    )
    assert "DefaultPreemption" in err
    assert "not supported" in err


def test_spread_defaults_and_hard_affinity_weight() -> None:
    loaded = _load(
        {
            "profiles": [
                {
                    "schedulerName": "draxr",
                    "pluginConfig": [
                        {
                            "name": "PodTopologySpread",
                            "args": {
                                "defaultingType": "List",
                                "defaultConstraints": [
                                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
                                ],
                            },
                        },
                        {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 7}},
                    ],
                }
            ]
        }
    )
    (c,) = loaded.profile.spread_defaults or ()
    assert (c.max_skew, c.topology_key, c.hard) == (1, "zone", True)
    assert loaded.profile.hard_pod_affinity_weight == 7


def test_settings_apply_the_file_and_refuse_a_flag_it_also_sets(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "c.yaml"
    f.write_text(json.dumps({**HEAD, "podMaxBackoffSeconds": 30, "profiles": [{"schedulerName": "draxr"}]}))
    s = Settings(config=str(f)).with_config()
    assert s.backoff_max_seconds == 30
    assert s.profile.weights == DEFAULT_WEIGHTS
    with pytest.raises(ConfigError):
        Settings(config=str(f), backoff_max_seconds=5).with_config()
    assert Settings().profile is DEFAULT_PROFILE


# ---- the scorers (least_allocated.go, most_allocated.go, requested_to_capacity_ratio.go) -------

_vec = st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(1, 100)), min_size=1, max_size=4)


@given(_vec)
def test_least_and_most_allocated_are_upstreams_weighted_means(rows: list[tuple[int, int, int]]) -> None:
    res = tuple(ResourceSpec(f"r{i}", w) for i, (_, _, w) in enumerate(rows))
    req, cap = [r for r, _, _ in rows], [c for _, c, _ in rows]
    for kind in (ScoringType.LEAST_ALLOCATED, ScoringType.MOST_ALLOCATED):
        num = den = 0
        for r, c, w in rows:
            if c == 0:
                continue
            s = (0 if r > c else (c - r) * 100 // c) if kind is ScoringType.LEAST_ALLOCATED else min(r, c) * 100 // c
            num, den = num + s * w, den + w
        assert strategy_score(FitStrategy(kind, res), req, cap) == (num // den if den else 0)


def test_requested_to_capacity_ratio_shape_and_rounding() -> None:
    shape = ((0, 10), (100, 0))  # spreading: 0 % used scores 100
    assert broken_linear(shape, 0) == 100
    assert broken_linear(shape, 100) == 0
    assert broken_linear(shape, 33) == 67
    strategy = FitStrategy(ScoringType.REQUESTED_TO_CAPACITY_RATIO, (ResourceSpec("a", 1), ResourceSpec("b", 2)), shape)
    # a: 50 % -> 50; b: 100 % -> 0 (left out: only scores above 0 count) -> 50
    assert strategy_score(strategy, [50, 10], [100, 10]) == 50
    # a: 25 % -> 75, b: 50 % -> 50: (75 + 100) / 3 = 58.33 -> 58
    assert strategy_score(strategy, [25, 5], [100, 10]) == 58


def test_the_profiles_percentage_wins_over_the_global_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    body = {"percentageOfNodesToScore": 30, "profiles": [{"schedulerName": "draxr", "percentageOfNodesToScore": 70}]}
    assert _load(body).percentage_of_nodes_to_score == 70
    body["profiles"] = [{"schedulerName": "draxr"}]
    assert _load(body).percentage_of_nodes_to_score == 30
    f = tmp_path / "c.yaml"
    f.write_text(
        json.dumps(
            {
                **HEAD,
                "percentageOfNodesToScore": 30,
                "profiles": [{"schedulerName": "draxr", "percentageOfNodesToScore": 70}],
            }
        )
    )
    assert Settings(config=str(f)).with_config().percentage_of_nodes_to_score == 70


def test_what_is_not_applied_is_reported() -> None:
    loaded = _load({"parallelism": 8, "profiles": [{"schedulerName": "draxr"}, {"schedulerName": "other"}]})
    assert loaded.not_applied == (
        "parallelism: set by draxr's own flags, not applied from the file",
        "profiles[1] (schedulerName other): validated, not run (draxr serves draxr)",
    )


def test_unknown_fields_in_upstreams_order() -> None:
    """Upstream's strict decoding errors (the harness's -check-config for these files): a YAML file
    reaches the decoder with its keys sorted, JSON as written."""
    yaml_text = (
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n"
        "- schedulerName: draxr\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n"
        "      scoringStrategy:\n        typo: x\n      other: 1\n"
    )
    with pytest.raises(ConfigError) as e:
        load(yaml_text, "draxr")
    assert e.value.errors == [
        "strict decoding error: decoding .profiles[0].pluginConfig[0]: strict decoding error: decoding args for "
        'plugin NodeResourcesFit: strict decoding error: unknown field "other", unknown field "scoringStrategy.typo"'
    ]
    assert _errors({"zeta": 1, "profiles": [{"schedulerName": "draxr", "bar": 2}], "alpha": 3}) == [
        'strict decoding error: unknown field "zeta", unknown field "profiles[0].bar", unknown field "alpha"'
    ]
