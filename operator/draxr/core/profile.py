"""The scheduling profile draxr runs: the score plugins with their weights and the plugin args draxr
honours, as a KubeSchedulerConfiguration's profile sets them (core.scheduler_config reads the file)
or, without one, kube-scheduler 1.37.2's default profile exactly (``DEFAULT_PROFILE``).

Plain, frozen, hashable data: the equivalence cache keys its tables by the profile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from draxr.core.limits import MAX_NODE_SCORE


class ScoringType(StrEnum):
    """NodeResourcesFitArgs.scoringStrategy.type."""

    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"
    REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"


MAX_CUSTOM_PRIORITY_SCORE = 10  # config.MaxCustomPriorityScore: the shape's scores are 0..10

DEFAULT_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodeResourcesFit", 1),
    ("VolumeBinding", 1),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 2),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
)
"""The default profile's score plugins (v1 default_plugins.go with the DynamicResources gate on),
in the framework's order, with their weights."""


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    name: str
    weight: int = 1


DEFAULT_RESOURCES = (ResourceSpec("cpu", 1), ResourceSpec("memory", 1))


@dataclass(frozen=True, slots=True)
class FitStrategy:
    """NodeResourcesFit's scoring strategy, defaulted (v1 SetDefaults_NodeResourcesFitArgs).
    ``shape``: RequestedToCapacityRatio's (utilization, score) points, scores on 0..10."""

    type: ScoringType = ScoringType.LEAST_ALLOCATED
    resources: tuple[ResourceSpec, ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = ()

    @property
    def cpu_memory_only(self) -> bool:
        """Only cpu and memory (in any order and weights): nothing DRA or other pods' use counts."""
        return all(r.name in ("cpu", "memory") for r in self.resources)


@dataclass(frozen=True, slots=True)
class DefaultConstraint:
    """PodTopologySpreadArgs.defaultConstraints[i] (no selector: it is the pod's default one)."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable DoNotSchedule
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_node_taints: bool = False


@dataclass(frozen=True, slots=True)
class SchedulerProfile:
    """``weights``: the enabled score plugins (upstream's order) and their weights;
    ``spread_defaults``: None for defaultingType System (the system default constraints), else
    the List's constraints; ``percentage_of_nodes_to_score``: the profile's, else the
    configuration's global one, None when neither sets it (placement.schedule takes it as its
    ``percentage_of_nodes`` from the shell)."""

    scheduler_name: str = "default-scheduler"
    weights: tuple[tuple[str, int], ...] = DEFAULT_WEIGHTS
    fit: FitStrategy = field(default_factory=FitStrategy)
    spread_defaults: tuple[DefaultConstraint, ...] | None = None
    hard_pod_affinity_weight: int = 1
    percentage_of_nodes_to_score: int | None = None

    @property
    def weight_of(self) -> Mapping[str, int]:
        return dict(self.weights)

    def scores(self, plugin: str) -> bool:
        return any(name == plugin for name, _ in self.weights)

    def with_scoring(self, scoring: ScoringType) -> SchedulerProfile:
        """The same profile with NodeResourcesFit's strategy type replaced (its resources kept;
        RequestedToCapacityRatio gets the bin-packing shape 0 -> 0, 100 -> 10)."""
        shape = ((0, 0), (100, MAX_CUSTOM_PRIORITY_SCORE)) if scoring is ScoringType.REQUESTED_TO_CAPACITY_RATIO else ()
        return replace(self, fit=replace(self.fit, type=scoring, shape=shape))


DEFAULT_PROFILE = SchedulerProfile()
"""kube-scheduler 1.37.2's default profile (no configuration file)."""


def broken_linear(shape: tuple[tuple[int, int], ...], p: int) -> int:
    """`helper.BuildBrokenLinearFunction`, the scores scaled to 0..100 (MaxNodeScore /
    MaxCustomPriorityScore), Go's truncating division."""
    scale = MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE
    points = [(u, s * scale) for u, s in shape]
    for i, (u, s) in enumerate(points):
        if p <= u:
            if i == 0:
                return s
            u0, s0 = points[i - 1]
            num, den = (s - s0) * (p - u0), u - u0
            q = abs(num) // abs(den)
            return s0 + (q if (num >= 0) == (den > 0) else -q)
    return points[-1][1]
