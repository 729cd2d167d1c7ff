"""Generated KubeSchedulerConfigurations for the configuration differential
(tests/differential/test_config_differential.py):

* ``valid_config(r)``: a configuration draxr runs (its profile ``draxr``): NodeResourcesFit's
  scoring strategy (LeastAllocated, MostAllocated, RequestedToCapacityRatio with a random shape)
  over random resources with random weights (cpu, memory, ephemeral-storage, hugepages, the
  extended resources of the generated cases, device-plugin and DRA-served, the implicit class
  name), score plugins re-weighted or disabled (at score, at multiPoint or by ``*``), the
  PodTopologySpread defaults (System, or a List with hard and soft constraints), InterPodAffinity's
  hard weight, percentages, backoff; sometimes a second profile;
* ``invalid_config(r)``: a valid one with one mistake from a list of the mistakes kube-scheduler
  refuses (an unknown plugin, a bad weight, a bad strategy, a bad shape, bad spread defaults, a
  bad backoff...), whose messages both sides must word alike;
* ``with_configs(seed, cases)``: each case with a valid configuration attached (``config``,
  ``schedulerName``), the harness's optional case fields.

Tags (``config:...``) say what each configuration exercises.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import Any

JSON = dict[str, Any]
HEAD: JSON = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}
NAME = "draxr"
SCORE_PLUGINS = (
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "VolumeBinding",
    "PodTopologySpread",
    "InterPodAffinity",
    "DynamicResources",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
)
# Resources the generated cases request: device-plugin and DRA-served (casegen_claims' and
# casegen_mixed's classes), and one no node has.
RESOURCES = (
    "cpu",
    "memory",
    "ephemeral-storage",
    "hugepages-2Mi",
    "example.com/gpu",
    "example.com/health",
    "example.com/nothing",
    "deviceclass.resource.kubernetes.io/gpu.example.com",
)
TOPOLOGY_KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone", "example.com/rack")


def _shape(r: random.Random) -> list[JSON]:
    n = r.randint(1, 4)
    utils = sorted(r.sample(range(0, 101), n))
    return [{"utilization": u, "score": r.randint(0, 10)} for u in utils]


def valid_config(r: random.Random) -> tuple[JSON, list[str]]:
    tags: list[str] = []
    profile: JSON = {"schedulerName": NAME}
    plugin_config: list[JSON] = []

    kind = r.choice(("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio", None))
    if kind is not None:
        strategy: JSON = {"type": kind}
        tags.append(f"config:strategy:{kind}")
        if r.random() < 0.85:
            names = r.sample(RESOURCES, r.randint(1, 4))
            if r.random() < 0.5 and "example.com/gpu" not in names:
                names.append("example.com/gpu")
            resources = []
            for name in names:
                spec: JSON = {"name": name}
                w = r.choice((None, 0, 1, 1, 2, 3, 5, 10, 100))
                if w is not None:
                    spec["weight"] = w
                resources.append(spec)
                if "/" in name:
                    tags.append("config:extended-resource")
            strategy["resources"] = resources
        if kind == "RequestedToCapacityRatio":
            strategy["requestedToCapacityRatio"] = {"shape": _shape(r)}
        plugin_config.append({"name": "NodeResourcesFit", "args": {"scoringStrategy": strategy}})

    plugins: JSON = {}
    roll = r.random()
    if roll < 0.25:
        disabled = r.sample(SCORE_PLUGINS, r.randint(1, 3))
        plugins["score"] = {"disabled": [{"name": n} for n in disabled]}
        tags.append("config:score-disabled")
    elif roll < 0.35:
        kept = r.sample(SCORE_PLUGINS, r.randint(1, 4))
        plugins["score"] = {
            "disabled": [{"name": "*"}],
            "enabled": [{"name": n, "weight": r.randint(1, 10)} for n in kept],
        }
        tags.append("config:score-star")
    elif roll < 0.45:
        # score-only plugins disabled everywhere
        plugins["multiPoint"] = {
            "disabled": [{"name": n} for n in r.sample(("ImageLocality", "NodeResourcesBalancedAllocation"), 1)]
        }
        tags.append("config:multipoint-disabled")
    if r.random() < 0.5:
        point = r.choice(("score", "multiPoint"))
        gone = {p["name"] for p in plugins.get("multiPoint", {}).get("disabled", [])}
        # (a Score enabled again without its PreScore is refused: see core.scheduler_config)
        reweighted = [n for n in r.sample(SCORE_PLUGINS, r.randint(1, 3)) if n not in gone]
        entry = plugins.setdefault(point, {})
        already = {p["name"] for p in entry.get("enabled", [])} | {p["name"] for p in entry.get("disabled", [])}
        adds = [{"name": n, "weight": r.choice((0, 1, 4, 7, 20))} for n in reweighted if n not in already]
        if "*" not in {p["name"] for p in entry.get("disabled", [])}:
            entry.setdefault("enabled", []).extend(adds)
        tags.append(f"config:weights:{point}")
    if plugins:
        profile["plugins"] = plugins

    roll = r.random()
    if roll < 0.35:
        constraints = []
        for key in r.sample(TOPOLOGY_KEYS, r.randint(1, 2)):
            c: JSON = {
                "maxSkew": r.randint(1, 3),
                "topologyKey": key,
                "whenUnsatisfiable": r.choice(("DoNotSchedule", "ScheduleAnyway", "ScheduleAnyway")),
            }
            if r.random() < 0.2:
                c["nodeTaintsPolicy"] = "Honor"
            constraints.append(c)
            tags.append(f"config:spread:{c['whenUnsatisfiable']}")
        plugin_config.append(
            {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": constraints}}
        )
    elif roll < 0.45:
        plugin_config.append({"name": "PodTopologySpread", "args": {"defaultingType": "List"}})
        tags.append("config:spread:none")
    if r.random() < 0.3:
        plugin_config.append({"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": r.randint(0, 100)}})
        tags.append("config:hard-affinity-weight")
    if plugin_config:
        profile["pluginConfig"] = plugin_config

    config: JSON = {**copy.deepcopy(HEAD), "profiles": [profile]}
    if r.random() < 0.2:
        config["profiles"].append(
            {
                "schedulerName": "other",
                "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "ImageLocality"}]}},
            }
        )
        tags.append("config:two-profiles")
    if r.random() < 0.2:
        config["podInitialBackoffSeconds"] = r.randint(1, 5)
        config["podMaxBackoffSeconds"] = config["podInitialBackoffSeconds"] + r.randint(0, 20)
    if r.random() < 0.15:
        config["percentageOfNodesToScore"] = r.randint(0, 100)
    if r.random() < 0.15:
        profile["percentageOfNodesToScore"] = r.randint(1, 100)
    return config, tags


# Each mistake: (tag, how to make it).
def _first(config: JSON) -> JSON:
    profile: JSON = config["profiles"][0]
    return profile


def _args(config: JSON, name: str) -> JSON:
    pcs = _first(config).setdefault("pluginConfig", [])
    for pc in pcs:
        if pc["name"] == name:
            args: JSON = pc.setdefault("args", {})
            return args
    pc = {"name": name, "args": {}}
    pcs.append(pc)
    return pc["args"]  # type: ignore[no-any-return]


def _strategy(config: JSON) -> JSON:
    args = _args(config, "NodeResourcesFit")
    strategy: JSON = args.setdefault("scoringStrategy", {"type": "LeastAllocated"})
    strategy.pop("requestedToCapacityRatio", None)
    strategy["type"] = strategy.get("type") or "LeastAllocated"
    if strategy["type"] == "RequestedToCapacityRatio":
        strategy["requestedToCapacityRatio"] = {
            "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
        }
    return strategy


def _m_unknown_score(c: JSON, r: random.Random) -> None:
    _first(c).setdefault("plugins", {}).setdefault("score", {}).setdefault("enabled", []).append(
        {"name": "NoSuchPlugin"}
    )


def _m_unknown_multipoint(c: JSON, r: random.Random) -> None:
    _first(c).setdefault("plugins", {}).setdefault("multiPoint", {}).setdefault("enabled", []).append({"name": "Bogus"})


def _m_wrong_point(c: JSON, r: random.Random) -> None:
    _first(c).setdefault("plugins", {}).setdefault("filter", {}).setdefault("enabled", []).append(
        {"name": r.choice(("ImageLocality", "NodeResourcesBalancedAllocation", "DefaultBinder"))}
    )


def _m_twice(c: JSON, r: random.Random) -> None:
    _first(c).setdefault("plugins", {})["preScore"] = {
        "disabled": [{"name": "*"}],
        "enabled": [{"name": "TaintToleration"}, {"name": "TaintToleration"}],
    }


def _m_weight(c: JSON, r: random.Random) -> None:
    s = _strategy(c)
    s["resources"] = [{"name": "cpu", "weight": r.choice((101, -1, 1000))}, {"name": "memory", "weight": 1}]


def _m_type(c: JSON, r: random.Random) -> None:
    _strategy(c)["type"] = r.choice(("Foo", "leastallocated", "BinPacking"))


def _m_rtcr_no_shape(c: JSON, r: random.Random) -> None:
    s = _strategy(c)
    s["type"] = "RequestedToCapacityRatio"
    s.pop("requestedToCapacityRatio", None)


def _m_shape(c: JSON, r: random.Random) -> None:
    s = _strategy(c)
    s["type"] = "RequestedToCapacityRatio"
    s["requestedToCapacityRatio"] = {
        "shape": r.choice(
            (
                [],
                [{"utilization": 50, "score": 1}, {"utilization": 10, "score": 2}],
                [{"utilization": 0, "score": 11}],
                [{"utilization": 101, "score": 5}],
            )
        )
    }


def _m_shape_forbidden(c: JSON, r: random.Random) -> None:
    s = _strategy(c)
    s["type"] = "MostAllocated"
    s["requestedToCapacityRatio"] = {"shape": [{"utilization": 0, "score": 0}]}


def _m_hard_weight(c: JSON, r: random.Random) -> None:
    _args(c, "InterPodAffinity")["hardPodAffinityWeight"] = r.choice((101, -1))


def _m_spread(c: JSON, r: random.Random) -> None:
    args = _args(c, "PodTopologySpread")
    args.clear()
    args.update(
        r.choice(
            (
                {
                    "defaultingType": "System",
                    "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
                },
                {"defaultingType": "Sometimes"},
                {
                    "defaultingType": "List",
                    "defaultConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
                },
                {
                    "defaultingType": "List",
                    "defaultConstraints": [{"maxSkew": 1, "topologyKey": "", "whenUnsatisfiable": "DoNotSchedule"}],
                },
                {
                    "defaultingType": "List",
                    "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"}],
                },
                {
                    "defaultingType": "List",
                    "defaultConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": ""}],
                },
                {
                    "defaultingType": "List",
                    "defaultConstraints": [
                        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {}}
                    ],
                },
                {
                    "defaultingType": "List",
                    "defaultConstraints": [
                        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                        {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    ],
                },
            )
        )
    )


def _m_backoff(c: JSON, r: random.Random) -> None:
    if r.random() < 0.5:
        c["podInitialBackoffSeconds"] = 0
    else:
        c["podInitialBackoffSeconds"], c["podMaxBackoffSeconds"] = 5, 2


def _m_percentage(c: JSON, r: random.Random) -> None:
    if r.random() < 0.5:
        c["percentageOfNodesToScore"] = r.choice((101, -1))
    else:
        _first(c)["percentageOfNodesToScore"] = 150


def _m_duplicate_config(c: JSON, r: random.Random) -> None:
    pcs = _first(c).setdefault("pluginConfig", [])
    pcs.append({"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 2}})
    pcs.append({"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 3}})


def _m_preemption(c: JSON, r: random.Random) -> None:
    args = _args(c, "DefaultPreemption")
    args.update(
        r.choice(
            (
                {"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0},
                {"minCandidateNodesPercentage": 101},
                {"minCandidateNodesAbsolute": -5},
            )
        )
    )


def _m_balanced(c: JSON, r: random.Random) -> None:
    _args(c, "NodeResourcesBalancedAllocation")["resources"] = [
        {"name": "cpu", "weight": 2},
        {"name": "cpu", "weight": 1},
    ]


def _m_duplicate_profile(c: JSON, r: random.Random) -> None:
    c["profiles"].append({"schedulerName": NAME})


def _m_queue_sort(c: JSON, r: random.Random) -> None:
    _first(c).setdefault("plugins", {})["queueSort"] = {"disabled": [{"name": "*"}]}


def _m_fit_ignored(c: JSON, r: random.Random) -> None:
    _args(c, "NodeResourcesFit")["ignoredResourceGroups"] = ["example.com/x"]


def _m_unknown_field(c: JSON, r: random.Random) -> None:
    where = r.choice(("top", "profile", "args", "all"))
    if where in ("top", "all"):
        c["podMaxBackofSeconds"] = 10
    if where in ("profile", "all"):
        _first(c)["plugin"] = {}
    if where in ("args", "all"):
        _args(c, r.choice(("NodeResourcesFit", "InterPodAffinity")))["scoringStrategyy"] = {"type": "MostAllocated"}


MISTAKES = (
    ("unknown-score-plugin", _m_unknown_score),
    ("unknown-multipoint-plugin", _m_unknown_multipoint),
    ("plugin-at-wrong-point", _m_wrong_point),
    ("plugin-twice", _m_twice),
    ("resource-weight", _m_weight),
    ("strategy-type", _m_type),
    ("rtcr-without-shape", _m_rtcr_no_shape),
    ("bad-shape", _m_shape),
    ("shape-not-rtcr", _m_shape_forbidden),
    ("hard-affinity-weight", _m_hard_weight),
    ("spread-defaults", _m_spread),
    ("backoff", _m_backoff),
    ("percentage", _m_percentage),
    ("duplicate-plugin-config", _m_duplicate_config),
    ("preemption-args", _m_preemption),
    ("balanced-args", _m_balanced),
    ("duplicate-profile", _m_duplicate_profile),
    ("no-queue-sort", _m_queue_sort),
    ("fit-ignored-groups", _m_fit_ignored),
    ("unknown-field", _m_unknown_field),
)


def invalid_config(r: random.Random, index: int) -> tuple[JSON, str]:
    config, _ = valid_config(r)
    tag, mistake = MISTAKES[index % len(MISTAKES)]
    mistake(config, r)
    return config, tag


def configs(seed: int, valid: int, invalid: int) -> list[JSON]:
    """``valid`` then ``invalid`` configurations: {"name", "config", "schedulerName", "tags"}."""
    out: list[JSON] = []
    for i in range(valid):
        config, tags = valid_config(random.Random(f"{seed}/config/{i}"))
        out.append({"name": f"config-{i:04d}", "config": config, "schedulerName": NAME, "tags": tags})
    for i in range(invalid):
        config, tag = invalid_config(random.Random(f"{seed}/invalid/{i}"), i)
        out.append({"name": f"invalid-{i:04d}", "config": config, "schedulerName": NAME, "tags": [f"mistake:{tag}"]})
    return out


def with_configs(seed: int, cases: Sequence[JSON]) -> list[JSON]:
    """Each case with a valid configuration of its own (profile ``draxr``)."""
    out = []
    for i, case in enumerate(cases):
        r = random.Random(f"{seed}/case-config/{i}")
        config, tags = valid_config(r)
        if case.get("family") == "large" and r.random() < 0.6:
            # a share below the adaptive one (for 100-500 nodes): the search stops earlier
            config["profiles"][0]["percentageOfNodesToScore"] = r.randint(1, 25)
            tags.append("config:percentage")
        out.append({**case, "config": config, "schedulerName": NAME, "tags": sorted({*case.get("tags", ()), *tags})})
    return out
