"""What one scheduling cycle computes for a pod besides the cheap per-node filters: the PreFilter
states of PodTopologySpread and InterPodAffinity and their filters, and the scores of the nodes
that pass every filter — kube-scheduler 1.37.2's default profile, plugin by plugin, each
normalised to 0..100 over those nodes, then summed with the profile's weights.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.device_totals import dra_totals
from draxr.core.interpod import (
    REASON_AFFINITY,
    AffinityPreFilter,
    affinity_node_score,
    affinity_prefilter,
    affinity_scores,
    normalize_affinity,
)
from draxr.core.labels import Selector
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.plugins import image_locality
from draxr.core.plugins.node_affinity import node_affinity_matches
from draxr.core.plugins.node_resources_fit import Fit, strategy_score
from draxr.core.pod_view import PodView
from draxr.core.profile import DEFAULT_PROFILE, DefaultConstraint, FitStrategy, SchedulerProfile, ScoringType
from draxr.core.scores import (
    balanced_allocation_score,
    default_normalize,
    intolerable_prefer_no_schedule,
    node_affinity_score,
    prefer_no_schedule_tolerations,
    preferred_terms,
)
from draxr.core.spread import (
    REASON_MISSING_LABEL,
    Constraint,
    NodeEligible,
    SpreadPreFilter,
    default_selector,
    spread_domains,
    spread_prefilter,
    spread_scores,
    system_default_constraints,
)
from draxr.core.state import EMPTY_USAGE, ClusterState, NodeInfo, PodInfo
from draxr.core.status import Status, rejected


@dataclass(frozen=True)
class NodeNames:
    """What NodeName's and NodeAffinity's PreFilter narrow the nodes to (matchFields
    metadata.name In in every required term), as the framework merges them."""

    names: frozenset[str] | None  # None: all nodes
    plugins: tuple[str, ...]  # the plugins that narrowed, sorted
    rejected: str | None  # PreFilter's verdict when no node can be left

    @property
    def absent_reason(self) -> str:
        return f"node(s) didn't satisfy plugin(s) [{' '.join(self.plugins)}]"


def node_names(view: PodView) -> NodeNames:
    names: frozenset[str] | None = None
    plugins: list[str] = []
    if view.node_name:
        names = frozenset((view.node_name,))
        plugins.append("NodeName")
    terms = (view.required_node_affinity or {}).get("nodeSelectorTerms") or ()
    affinity: set[str] | None = None
    for t in terms:
        term: set[str] | None = None
        for r in t.get("matchFields") or ():
            if r.get("key") == "metadata.name" and r.get("operator") == "In":
                values = {str(v) for v in r.get("values") or ()}
                term = values if term is None else term & values
        if term is None:
            affinity = None  # a term without such a field: any node may match
            break
        affinity = term if affinity is None else affinity | term
    if affinity is not None and not affinity:
        return NodeNames(None, (), "pod affinity terms conflict")
    if affinity:
        plugins.append("NodeAffinity")
        names = frozenset(affinity) if names is None else names & affinity
    plugins.sort()
    if names is not None and not names:
        if len(plugins) == 1:
            return NodeNames(names, tuple(plugins), f"node(s) didn't satisfy plugin {plugins[0]}")
        return NodeNames(
            names, tuple(plugins), f"node(s) didn't satisfy plugin(s) [{' '.join(plugins)}] simultaneously"
        )
    return NodeNames(names, tuple(plugins), None)


@dataclass
class PodCycle:
    pod: PodInfo
    view: PodView
    names: NodeNames
    spread: SpreadPreFilter | None
    affinity: AffinityPreFilter | None
    soft_spread: tuple[Constraint, ...]
    eligible: NodeEligible

    @property
    def filters_pods(self) -> bool:
        """Whether a filter here can reject a node (else only the cheap filters look at nodes)."""
        return self.spread is not None or self.affinity is not None

    def filter(self, node: NodeInfo) -> Status | None:
        """The status of the first of these filters the node fails, in upstream's order."""
        if self.spread is not None:
            reason = self.spread.filter(node.labels, self.view.labels)
            if reason is not None:
                return rejected("PodTopologySpread", (reason,), reason == REASON_MISSING_LABEL)
        if self.affinity is not None:
            reason = self.affinity.filter(node.labels)
            if reason is not None:
                return rejected("InterPodAffinity", (reason,), reason == REASON_AFFINITY)
        return None


def prepare(pod: PodInfo, state: ClusterState) -> PodCycle:
    view = pod.view

    def check(name: str, c: Constraint) -> bool:
        """matchNodeInclusionPolicies."""
        node = state.nodes[name]
        if c.honor_node_affinity and not node_affinity_matches(view, node):
            return False
        return not (c.honor_node_taints and node.taints and view.untolerated(node.taints) is not None)

    hard, soft = view.spread.hard, view.spread.soft
    if not view.spread.explicit:
        defaults = state.profile.spread_defaults
        if defaults is None:  # defaultingType System
            selector = default_selector(pod.namespace, view.labels, view.controller, state.workloads)
            hard, soft = (), system_default_constraints(selector)
        elif defaults:  # defaultingType List (an empty list: no default spreading)
            selector = default_selector(pod.namespace, view.labels, view.controller, state.workloads)
            hard, soft = _listed_defaults(defaults, selector)
    constrained = bool(view.node_selector or view.required_node_affinity)
    everywhere = not constrained and not any(c.honor_node_taints for c in (*hard, *soft))
    eligible: NodeEligible = None if everywhere else check
    spread = None
    if hard:
        key = _domains_key(view, hard)
        domains = state.spread.domains(key, lambda: spread_domains(hard, state, eligible))
        counts = [state.spread.counts(key, domains, i, pod.namespace, c.selector) for i, c in enumerate(hard)]
        spread = spread_prefilter(hard, counts)
    affinity = affinity_prefilter(pod.namespace, view.labels, view.terms, state)
    return PodCycle(pod, view, node_names(view), spread, None if affinity.skip else affinity, soft, eligible)


def _listed_defaults(
    defaults: Sequence[DefaultConstraint], selector: Selector
) -> tuple[tuple[Constraint, ...], tuple[Constraint, ...]]:
    """buildDefaultConstraints: the profile's default constraints with the pod's default
    selector (none when that selector is empty), split by whenUnsatisfiable."""
    if selector.empty or selector.nothing:
        return (), ()
    made = [
        (
            c.hard,
            Constraint(c.max_skew, c.topology_key, selector, c.min_domains, c.honor_node_affinity, c.honor_node_taints),
        )
        for c in defaults
    ]
    return tuple(c for hard, c in made if hard), tuple(c for hard, c in made if not hard)


def _domains_key(view: PodView, constraints: Sequence[Constraint]) -> Hashable:
    """What spread_domains depends on besides the nodes: the constraints' keys and policies, and
    the fields of the pod those policies read."""
    shape = tuple((c.topology_key, c.honor_node_affinity, c.honor_node_taints) for c in constraints)
    affinity = None
    if any(c.honor_node_affinity for c in constraints) and (view.node_selector or view.required_node_affinity):
        required = json.dumps(view.required_node_affinity, sort_keys=True)
        affinity = (tuple(sorted(view.node_selector.items())), required)
    taints = view.tolerations if any(c.honor_node_taints for c in constraints) else None
    return shape, affinity, taints


Scores = dict[str, dict[str, int]]  # plugin -> node -> normalised score


def score_nodes(
    cycle: PodCycle,
    state: ClusterState,
    nodes: Sequence[NodeInfo],
    *,
    most_allocated: bool = False,
    fit_override: Mapping[str, int] | None = None,
    profile: SchedulerProfile | None = None,
) -> Scores:
    """Every default score plugin over ``nodes`` (the feasible ones), normalised. A plugin that
    upstream skips for this pod scores 0 everywhere. ``fit_override``: NodeResourcesFit's raw
    score per node when draxr's device scoring replaces it."""
    view, pod = cycle.view, cycle.pod
    if profile is None:
        profile = state.profile
    out: Scores = {}

    # TaintToleration (reverse: fewer untolerated PreferNoSchedule taints is better).
    if any(n.taints for n in nodes):
        tolerations = prefer_no_schedule_tolerations(view.tolerations)
        out["TaintToleration"] = default_normalize(
            {n.name: intolerable_prefer_no_schedule(n.taints, tolerations) for n in nodes}, reverse=True
        )
    else:
        out["TaintToleration"] = dict.fromkeys((n.name for n in nodes), MAX_NODE_SCORE)  # no taint anywhere

    # NodeAffinity (preferred terms).
    if view.preferred_node_affinity is not None:  # upstream skips the plugin without the field
        preferred = preferred_terms(view.preferred_node_affinity)
        out["NodeAffinity"] = default_normalize({n.name: node_affinity_score(preferred, n.raw) for n in nodes})

    # NodeResourcesFit (no normalisation) and BalancedAllocation.
    strategy = FitStrategy(ScoringType.MOST_ALLOCATED) if most_allocated else profile.fit
    scorer = Fit(pod, state, strategy, None, [], dra_totals(state, DEFAULT_FEATURES))
    fit: dict[str, int] = {}
    balanced: dict[str, int] = {}
    actual = (pod.units.get("cpu", 0), pod.units.get("memory", 0))
    best_effort = actual == (0, 0)
    for n in nodes:
        usage = state.usage.get(n.name) or EMPTY_USAGE
        alloc = (n.allocatable.get("cpu", 0), n.allocatable.get("memory", 0))
        if fit_override is not None and n.name in fit_override:
            fit[n.name] = fit_override[n.name]
        else:
            fit[n.name] = strategy_score(strategy, *scorer.vectors(n, usage))
        if not best_effort:
            used = (usage.requested.get("cpu", 0), usage.requested.get("memory", 0))
            balanced[n.name] = balanced_allocation_score(used, actual, alloc)
    out["NodeResourcesFit"] = fit
    if not best_effort:
        out["NodeResourcesBalancedAllocation"] = balanced

    # ImageLocality (no normalisation; upstream never skips it).
    images = image_locality.column(view.images, nodes, state)
    out[image_locality.NAME] = (
        dict.fromkeys((n.name for n in nodes), images)
        if isinstance(images, int)
        else {n.name: s for n, s in zip(nodes, images, strict=True)}
    )

    # PodTopologySpread (soft constraints, or the system defaults).
    if cycle.soft_spread:
        spread = spread_scores(
            cycle.soft_spread,
            pod.namespace,
            state,
            cycle.eligible,
            [(n.name, n.labels) for n in nodes],
            require_all_topologies=view.spread.explicit or profile.spread_defaults is not None,
        )
        if spread is not None:
            out["PodTopologySpread"] = spread

    # InterPodAffinity.
    topology = affinity_scores(pod.namespace, view.labels, view.terms, state, profile.hard_pod_affinity_weight)
    if topology is not None:
        out["InterPodAffinity"] = normalize_affinity({n.name: affinity_node_score(topology, n.labels) for n in nodes})

    return out


def weighted_totals(scores: Scores, profile: SchedulerProfile = DEFAULT_PROFILE) -> dict[str, int]:
    """Per node, the plugins' scores times the profile's weights, summed (a plugin left out, or
    one the profile does not score with, is 0)."""
    totals: dict[str, int] = {}
    weights = profile.weight_of
    for plugin, per_node in scores.items():
        if plugin not in weights:
            continue
        weight = weights[plugin]
        for node, score in per_node.items():
            totals[node] = totals.get(node, 0) + weight * score
    return totals
