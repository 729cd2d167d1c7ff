"""InterPodAffinity, filter and score, as kube-scheduler 1.37.2 computes them
(pkg/scheduler/framework/plugins/interpodaffinity, with the InterPodAffinityHostnameFastPath gate
off, its default). Proven against the plugin itself by tests/differential (scheduling cases).

The pod's terms are read once (`pod_terms`); a cycle then builds `AffinityPreFilter` (upstream's
PreFilter state: match counts per topology pair) and `affinity_scores` (PreScore + Score) from the
bound pods of the state. Upstream merges matchLabelKeys / mismatchLabelKeys into the label selector
at pod creation (kube-apiserver), so the scheduler, and this module, read only labelSelector.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from draxr.core.labels import NOTHING, Labels, Selector
from draxr.core.limits import MAX_NODE_SCORE

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
HARD_POD_AFFINITY_WEIGHT = 1  # InterPodAffinityArgs default


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """`fwk.AffinityTerm`: a PodAffinityTerm with its selectors parsed."""

    namespaces: frozenset[str]
    selector: Selector
    topology_key: str
    namespace_selector: Selector

    def matches(self, namespace: str, labels: Labels, ns_labels: Labels | None) -> bool:
        if namespace in self.namespaces or self.namespace_selector.matches(ns_labels or {}):
            return self.selector.matches(labels)
        return False

    def with_namespaces(self, all_namespaces: Iterable[tuple[str, Labels]]) -> AffinityTerm:
        """`mergeAffinityTermNamespacesIfNotEmpty`: a non-empty namespace selector becomes the
        namespaces it selects now (then matches nothing itself)."""
        if self.namespace_selector.empty:
            return self
        chosen = {name for name, labels in all_namespaces if self.namespace_selector.matches(labels)}
        return AffinityTerm(self.namespaces | chosen, self.selector, self.topology_key, NOTHING)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    term: AffinityTerm
    weight: int


@dataclass(frozen=True, slots=True)
class PodTerms:
    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()


def _term(namespace: str, t: Mapping[str, Any]) -> AffinityTerm:
    names = t.get("namespaces") or ()
    ns_selector = t.get("namespaceSelector")
    namespaces = frozenset((namespace,)) if not names and ns_selector is None else frozenset(str(n) for n in names)
    return AffinityTerm(
        namespaces,
        Selector.from_api(t.get("labelSelector")),
        str(t.get("topologyKey") or ""),
        Selector.from_api(ns_selector),
    )


def pod_terms(pod: Mapping[str, Any]) -> PodTerms | None:
    """The pod's inter-pod (anti-)affinity terms, None when it has none (`podWithAffinity` false).
    Raises ValueError for a selector upstream cannot parse."""
    affinity = (pod.get("spec") or {}).get("affinity") or {}
    aff, anti = affinity.get("podAffinity"), affinity.get("podAntiAffinity")
    if aff is None and anti is None:
        return None
    ns = str((pod.get("metadata") or {}).get("namespace") or "")
    aff, anti = aff or {}, anti or {}
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"

    def weighted(terms: Sequence[Mapping[str, Any]]) -> tuple[WeightedTerm, ...]:
        return tuple(WeightedTerm(_term(ns, w.get("podAffinityTerm") or {}), int(w.get("weight") or 0)) for w in terms)

    return PodTerms(
        tuple(_term(ns, t) for t in aff.get(req) or ()),
        tuple(_term(ns, t) for t in anti.get(req) or ()),
        weighted(aff.get(pref) or ()),
        weighted(anti.get(pref) or ()),
    )


class LabelGroupLike(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def labels(self) -> Labels: ...
    @property
    def nodes(self) -> Mapping[str, int]: ...


class Cluster(Protocol):
    """The snapshot: the pods on known nodes (with their node's labels), namespaces' labels."""

    def term_groups(self) -> Iterable[tuple[PodTerms, Mapping[str, int]]]:
        """The placed pods that have inter-pod terms (upstream's PodsWithAffinity), grouped by
        their (shared) terms: how many on each node."""
        ...

    def label_groups(self) -> Iterable[LabelGroupLike]:
        """The placed pods grouped by namespace and label set: how many on each node."""
        ...

    def labels_of(self, node: str) -> Labels | None:
        """A known node's labels (None for a node not seen)."""
        ...

    def namespace_labels(self, namespace: str) -> Labels | None: ...
    def namespaces(self) -> Iterable[tuple[str, Labels]]: ...


def _all_match(terms: Sequence[AffinityTerm], namespace: str, labels: Labels) -> bool:
    """`podMatchesAllAffinityTerms` (nil namespace labels; an empty list matches nothing)."""
    if not terms:
        return False
    return all(t.matches(namespace, labels, None) for t in terms)


@dataclass
class AffinityPreFilter:
    """Upstream's PreFilter state for one pod."""

    namespace: str
    labels: Labels
    ns_labels: Labels | None
    affinity: tuple[AffinityTerm, ...]
    anti_affinity: tuple[AffinityTerm, ...]
    existing_anti: Counter[tuple[str, str]] = field(default_factory=Counter)
    affinity_counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    anti_counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def skip(self) -> bool:
        return not self.existing_anti and not self.affinity and not self.anti_affinity

    def filter(self, node_labels: Labels) -> str | None:
        """The reason the node fails, or None. Upstream's order: affinity, anti-affinity, then
        existing pods' anti-affinity."""
        if self.affinity:
            pods_exist = True
            for t in self.affinity:
                value = node_labels.get(t.topology_key)
                if value is None:
                    return REASON_AFFINITY
                if self.affinity_counts.get((t.topology_key, value), 0) <= 0:
                    pods_exist = False
            # The first pod of a group: no pod anywhere matches, and the pod matches its own terms.
            if not pods_exist and not (
                not self.affinity_counts and _all_match(self.affinity, self.namespace, self.labels)
            ):
                return REASON_AFFINITY
        if self.anti_counts:
            for t in self.anti_affinity:
                value = node_labels.get(t.topology_key)
                if value is not None and self.anti_counts.get((t.topology_key, value), 0) > 0:
                    return REASON_ANTI_AFFINITY
        if self.existing_anti:
            for pair in node_labels.items():
                if self.existing_anti.get(pair, 0) > 0:
                    return REASON_EXISTING_ANTI_AFFINITY
        return None


def _bump(counts: Counter[tuple[str, str]], pair: tuple[str, str], delta: int) -> None:
    counts[pair] += delta
    if counts[pair] == 0:
        del counts[pair]


def affinity_prefilter(namespace: str, labels: Labels, terms: PodTerms | None, cluster: Cluster) -> AffinityPreFilter:
    """PreFilter: the match counts over every bound pod of the cluster."""
    ns_list = list(cluster.namespaces())
    affinity = tuple(t.with_namespaces(ns_list) for t in terms.required_affinity) if terms else ()
    anti = tuple(t.with_namespaces(ns_list) for t in terms.required_anti_affinity) if terms else ()
    state = AffinityPreFilter(namespace, labels, cluster.namespace_labels(namespace), affinity, anti)
    for terms_of, nodes in cluster.term_groups():  # the existing pods' anti-affinity against this pod
        against = [t for t in terms_of.required_anti_affinity if t.matches(namespace, labels, state.ns_labels)]
        for node, count in nodes.items() if against else ():
            node_labels = cluster.labels_of(node)
            if node_labels is None:
                continue
            for t in against:
                if t.topology_key in node_labels:
                    _bump(state.existing_anti, (t.topology_key, node_labels[t.topology_key]), count)
    if affinity or anti:  # the incoming pod's terms, matched once per group of pods with equal labels
        for group in cluster.label_groups():
            all_match = _all_match(affinity, group.namespace, group.labels)
            anti_terms = [t for t in anti if t.matches(group.namespace, group.labels, None)]
            if not all_match and not anti_terms:
                continue
            for node, count in group.nodes.items():
                node_labels = cluster.labels_of(node)
                if node_labels is None:
                    continue
                if all_match:
                    for t in affinity:
                        if t.topology_key in node_labels:
                            _bump(state.affinity_counts, (t.topology_key, node_labels[t.topology_key]), count)
                for t in anti_terms:
                    if t.topology_key in node_labels:
                        _bump(state.anti_counts, (t.topology_key, node_labels[t.topology_key]), count)
    return state


def affinity_scores(
    namespace: str,
    labels: Labels,
    terms: PodTerms | None,
    cluster: Cluster,
    hard_weight: int = HARD_POD_AFFINITY_WEIGHT,
) -> dict[str, dict[str, int]] | None:
    """PreScore: the score of every topology pair (key -> value -> score); None when upstream
    skips the plugin (no existing or incoming term matched anything)."""
    ns_list = list(cluster.namespaces())
    preferred = (
        tuple(WeightedTerm(w.term.with_namespaces(ns_list), w.weight) for w in terms.preferred_affinity)
        if terms
        else ()
    )
    preferred_anti = (
        tuple(WeightedTerm(w.term.with_namespaces(ns_list), w.weight) for w in terms.preferred_anti_affinity)
        if terms
        else ()
    )
    has_constraints = bool(preferred or preferred_anti)
    ns_labels = cluster.namespace_labels(namespace)
    scores: dict[str, dict[str, int]] = {}
    matched = False

    def record(key: str, node_labels: Labels, weight: int) -> None:
        nonlocal matched
        value = node_labels.get(key)
        if value is None:
            return
        matched = True
        per_key = scores.setdefault(key, {})
        per_key[value] = per_key.get(value, 0) + weight

    if has_constraints:  # the incoming pod's preferred terms, matched once per group
        for group in cluster.label_groups():
            keyed = [
                (w.term.topology_key, sign * w.weight)
                for sign, terms in ((1, preferred), (-1, preferred_anti))
                for w in terms
                if w.term.matches(group.namespace, group.labels, None)
            ]
            if not keyed:
                continue
            for node, count in group.nodes.items():
                node_labels = cluster.labels_of(node)
                if not node_labels:
                    continue
                for key, weight in keyed:
                    record(key, node_labels, weight * count)
    for existing, nodes in cluster.term_groups():  # the existing pods' terms that match this pod
        keyed = []
        if hard_weight > 0:
            keyed += [
                (t.topology_key, hard_weight)
                for t in existing.required_affinity
                if t.matches(namespace, labels, ns_labels)
            ]
        keyed += [
            (w.term.topology_key, w.weight)
            for w in existing.preferred_affinity
            if w.term.matches(namespace, labels, ns_labels)
        ]
        keyed += [
            (w.term.topology_key, -w.weight)
            for w in existing.preferred_anti_affinity
            if w.term.matches(namespace, labels, ns_labels)
        ]
        for node, count in nodes.items() if keyed else ():
            node_labels = cluster.labels_of(node)
            if not node_labels:
                continue
            for key, weight in keyed:
                record(key, node_labels, weight * count)
    return scores if matched else None


def affinity_node_score(topology_scores: Mapping[str, Mapping[str, int]], node_labels: Labels) -> int:
    total = 0
    for key, values in topology_scores.items():
        value = node_labels.get(key)
        if value is not None:
            total += values.get(value, 0)
    return total


def normalize_affinity(raw: Mapping[str, int]) -> dict[str, int]:
    """NormalizeScore: min-max scaled to 0..100, truncated."""
    if not raw:
        return {}
    lo, hi = min(raw.values()), max(raw.values())
    diff = hi - lo
    return {n: int(MAX_NODE_SCORE * ((s - lo) / diff)) if diff > 0 else 0 for n, s in raw.items()}
