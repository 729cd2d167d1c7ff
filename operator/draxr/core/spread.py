"""PodTopologySpread, filter and score, as kube-scheduler 1.37.2 computes them
(pkg/scheduler/framework/plugins/podtopologyspread, system defaulting), including the system
default constraints for pods that a Service, ReplicationController, ReplicaSet or StatefulSet
selects. Proven against the plugin itself by tests/differential (scheduling cases).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import contains, methodcaller
from typing import Any, Protocol

from draxr.core.labels import Labels, Selector
from draxr.core.limits import MAX_NODE_SCORE

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REASON_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = REASON_NOT_MATCH + " (missing required label)"
# systemDefaultConstraints: (topologyKey, maxSkew), both ScheduleAnyway.
SYSTEM_DEFAULTS = ((HOSTNAME, 3), (ZONE, 5))


@dataclass(frozen=True, slots=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: Selector
    min_domains: int
    honor_node_affinity: bool  # nodeAffinityPolicy Honor (the default)
    honor_node_taints: bool  # nodeTaintsPolicy Honor (default Ignore)


@dataclass(frozen=True, slots=True)
class SpreadSpec:
    """The pod's spread constraints as written (parsed once), or the system defaults."""

    hard: tuple[Constraint, ...]
    soft: tuple[Constraint, ...]
    explicit: bool  # the pod has topologySpreadConstraints (else system defaults may apply)


def _merge_label_keys(selector: Selector, keys: Sequence[str], labels: Labels) -> Selector:
    """`mergeLabelSetWithSelector`: matchLabelKeys become equality requirements (a nil selector
    stays Nothing)."""
    match = {k: labels[k] for k in keys if k in labels}
    if not match or selector.nothing:
        return selector
    return Selector.from_set(match).add(selector.requirements)


def parse_constraints(pod: Mapping[str, Any]) -> SpreadSpec:
    """Raises ValueError for a label selector upstream cannot parse."""
    spec = pod.get("spec") or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    hard: list[Constraint] = []
    soft: list[Constraint] = []
    for c in spec.get("topologySpreadConstraints") or ():
        selector = _merge_label_keys(
            Selector.from_api(c.get("labelSelector")), [str(k) for k in c.get("matchLabelKeys") or ()], labels
        )
        constraint = Constraint(
            int(c.get("maxSkew") or 0),
            str(c.get("topologyKey") or ""),
            selector,
            int(c["minDomains"]) if c.get("minDomains") is not None else 1,
            (c.get("nodeAffinityPolicy") or "Honor") == "Honor",
            (c.get("nodeTaintsPolicy") or "Ignore") == "Honor",
        )
        (hard if c.get("whenUnsatisfiable") == "DoNotSchedule" else soft).append(constraint)
    explicit = bool(spec.get("topologySpreadConstraints"))
    return SpreadSpec(tuple(hard), tuple(soft), explicit)


def system_default_constraints(selector: Selector) -> tuple[Constraint, ...]:
    if selector.empty or selector.nothing:
        return ()
    return tuple(Constraint(skew, key, selector, 1, True, False) for key, skew in SYSTEM_DEFAULTS)


class Workloads(Protocol):
    """Selectors of the objects that make upstream's default selector (`helper.DefaultSelector`)."""

    def services(self, namespace: str) -> Iterable[Selector]: ...
    def controller_selector(self, namespace: str, kind: str, name: str) -> tuple[str, Selector] | None:
        """("set", selector) for a ReplicationController (its map is merged like a Service's),
        ("requirements", selector) for a ReplicaSet or StatefulSet; None if unknown."""
        ...


_CONTROLLERS = {("v1", "ReplicationController"), ("apps/v1", "ReplicaSet"), ("apps/v1", "StatefulSet")}


def default_selector(
    namespace: str, labels: Labels, controller: tuple[str, str, str] | None, workloads: Workloads
) -> Selector:
    """`helper.DefaultSelector`: the selectors of the Services that select the pod, merged, plus
    its controlling ReplicationController's, ReplicaSet's or StatefulSet's
    (``controller``: the controller owner's apiVersion, kind and name)."""
    merged: dict[str, str] = {}
    for sel in workloads.services(namespace):
        if sel.matches(labels):
            for r in sel.requirements:  # a Service's selector is a set of equalities
                merged[r.key] = next(iter(r.values))
    selector = Selector.from_set(merged)
    if controller is None or (controller[0], controller[1]) not in _CONTROLLERS:
        return selector
    found = workloads.controller_selector(namespace, controller[1], controller[2])
    if found is None:
        return selector
    how, other = found
    if how == "set":
        for r in other.requirements:
            merged[r.key] = next(iter(r.values))
        return Selector.from_set(merged)
    if other.nothing:
        return selector  # Requirements() of Nothing is not ok: nothing added
    return selector.add(other.requirements)


# --------------------------------------------------------------------------- the cluster view


class SpreadGroup(Protocol):
    @property
    def namespace(self) -> str: ...
    @property
    def labels(self) -> Labels: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def nodes(self) -> Mapping[str, int]: ...


class SpreadCluster(Protocol):
    def node_labels(self) -> Iterable[tuple[str, Labels]]: ...
    def label_groups(self) -> Iterable[SpreadGroup]: ...
    def labels_of(self, node: str) -> Labels | None: ...
    def selector_counts(self, namespace: str, selector: Selector) -> SelectorCounts: ...


# nodeAffinity / nodeTaints inclusion policies; None: every node is eligible (nothing to check)
NodeEligible = Callable[[str, Constraint], bool] | None
# key -> (nodes with a label key, all nodes) of the cluster (SpreadIndex.label_key_nodes)
LabelNodes = Callable[[str], tuple[int, int]] | None


def matching_pods(cluster: SpreadCluster, selector: Selector, namespace: str) -> dict[str, int]:
    """Per node, the placed pods `countPodsMatchSelector` counts (not terminating, the pod's
    namespace, matching), the selector matched once per group of pods with equal labels."""
    out: dict[str, int] = {}
    if selector.empty:
        return out
    for group in cluster.label_groups():
        if group.deleting or group.namespace != namespace or not selector.matches(group.labels):
            continue
        for node, count in group.nodes.items():
            out[node] = out.get(node, 0) + count
    return out


class SelectorCounts:
    """The placed pods one selector counts (`countPodsMatchSelector`) on each node, and per
    topology key on each domain of the known nodes (a node without the key is domain ""). Built
    once and kept up to date pod by pod across cycles (ClusterState.selector_counts) for the
    spreading score, where upstream's PreScore recounts every pod for every pod it schedules. The
    domain tables read node labels: the owner drops them when the nodes change (reset_domains)."""

    __slots__ = ("_domains", "_labels_of", "nodes")

    def __init__(self, nodes: dict[str, int], labels_of: Callable[[str], Labels | None]) -> None:
        self.nodes = nodes
        self._labels_of = labels_of
        self._domains: dict[str, dict[str, int]] = {}

    def add(self, node: str, delta: int) -> None:
        count = self.nodes.get(node, 0) + delta
        if count:
            self.nodes[node] = count
        else:
            del self.nodes[node]
        if self._domains:
            labels = self._labels_of(node)
            if labels is not None:
                for key, counts in self._domains.items():
                    value = labels.get(key, "")
                    counts[value] = counts.get(value, 0) + delta

    def domains(self, key: str) -> Mapping[str, int]:
        """Per value of ``key``, the counted pods on the known nodes (absent: 0)."""
        found = self._domains.get(key)
        if found is None:
            found = self._domains[key] = {}
            for node, count in self.nodes.items():
                labels = self._labels_of(node)
                if labels is not None:
                    value = labels.get(key, "")
                    found[value] = found.get(value, 0) + count
        return found

    def reset_domains(self) -> None:
        self._domains = {}


def _has_keys(labels: Labels, constraints: Sequence[Constraint]) -> bool:
    return all(c.topology_key in labels for c in constraints)


@dataclass(frozen=True)
class Domains:
    """Per constraint, the topology domain of each node that PreFilter counts (it has every
    constraint's key and passes the inclusion policies), and the set of those domains. It depends
    only on the nodes and on what the policies read of the pod, so it is cached across cycles
    while the nodes are unchanged (ClusterState.spread_domains)."""

    by_node: tuple[Mapping[str, str], ...]
    values: tuple[frozenset[str], ...]


def spread_domains(constraints: Sequence[Constraint], cluster: SpreadCluster, eligible: NodeEligible) -> Domains:
    by_node: list[dict[str, str]] = [{} for _ in constraints]
    for node, labels in cluster.node_labels():
        if not _has_keys(labels, constraints):
            continue
        for i, c in enumerate(constraints):
            if eligible is None or eligible(node, c):
                by_node[i][node] = labels[c.topology_key]
    return Domains(tuple(by_node), tuple(frozenset(d.values()) for d in by_node))


def counted(selector: Selector, namespace: str, pod_namespace: str, pod_labels: Labels, deleting: bool) -> bool:
    """`countPodsMatchSelector` for one placed pod: not terminating, the namespace, a match (an
    empty selector counts nothing)."""
    return not deleting and pod_namespace == namespace and not selector.empty and selector.matches(pod_labels)


class DomainCounts:
    """One hard constraint's matching placed pods per domain (each counted domain present, 0 when
    empty) and how many domains hold each count, so that the minimum needs no scan. Built once
    and kept up to date pod by pod across cycles (ClusterState.spread_counts), where upstream's
    PreFilter recounts every pod for every pod it schedules."""

    __slots__ = ("_by_node", "_histogram", "counts")

    def __init__(self, by_node: Mapping[str, str], values: frozenset[str]) -> None:
        self._by_node = by_node
        self.counts: dict[str, int] = dict.fromkeys(values, 0)
        self._histogram: dict[int, int] = {0: len(values)} if values else {}

    def add(self, node: str, delta: int) -> None:
        value = self._by_node.get(node)
        if value is None:
            return  # a node PreFilter does not count (missing key, inclusion policies)
        old = self.counts[value]
        self.counts[value] = old + delta
        h = self._histogram
        if h[old] == 1:
            del h[old]
        else:
            h[old] -= 1
        h[old + delta] = h.get(old + delta, 0) + 1

    def minimum(self) -> int:
        return min(self._histogram, default=0)


def domain_counts(
    domains: Domains, index: int, namespace: str, selector: Selector, cluster: SpreadCluster
) -> DomainCounts:
    out = DomainCounts(domains.by_node[index], domains.values[index])
    for node, count in matching_pods(cluster, selector, namespace).items():
        out.add(node, count)
    return out


@dataclass
class SpreadPreFilter:
    constraints: tuple[Constraint, ...]
    counts: list[Mapping[str, int]]  # per constraint: topology value -> matching pods
    min_match: list[int]

    def filter(self, node_labels: Labels, pod_labels: Labels) -> str | None:
        for i, c in enumerate(self.constraints):
            value = node_labels.get(c.topology_key)
            if value is None:
                return REASON_MISSING_LABEL
            self_match = 1 if c.selector.matches(pod_labels) else 0
            if self.counts[i].get(value, 0) + self_match - self.min_match[i] > c.max_skew:
                return REASON_NOT_MATCH
        return None


def spread_prefilter(constraints: tuple[Constraint, ...], counts: Sequence[DomainCounts]) -> SpreadPreFilter | None:
    """PreFilter over every node (``counts``: each constraint's DomainCounts); None when there is
    no hard constraint (upstream skips)."""
    if not constraints:
        return None
    mins = [0 if len(dc.counts) < c.min_domains else dc.minimum() for c, dc in zip(constraints, counts, strict=True)]
    return SpreadPreFilter(constraints, [dc.counts for dc in counts], mins)


def spread_scores(
    constraints: tuple[Constraint, ...],
    namespace: str,
    cluster: SpreadCluster,
    eligible: NodeEligible,
    feasible: Sequence[tuple[str, Labels]],
    require_all_topologies: bool,
    label_nodes: LabelNodes = None,
) -> dict[str, int] | None:
    """PreScore + Score over the feasible nodes, then NormalizeScore; None when skipped."""
    names = [name for name, _ in feasible]
    labels = [labels for _, labels in feasible]
    column = spread_column(
        constraints, namespace, cluster, eligible, names, labels, require_all_topologies, label_nodes
    )
    return None if column is None else dict(zip(names, column, strict=True))


def spread_column(
    constraints: tuple[Constraint, ...],
    namespace: str,
    cluster: SpreadCluster,
    eligible: NodeEligible,
    names: Sequence[str],
    labels: Sequence[Labels],
    require_all_topologies: bool,
    label_nodes: LabelNodes = None,
) -> list[int] | None:
    """spread_scores as a list in the order of ``names`` (the feasible nodes, ``labels`` theirs).
    ``label_nodes``: (nodes with a label key, all nodes) of the cluster the nodes are from: when
    all or none have the key, the feasible nodes are not scanned for it."""
    if not constraints or not names:
        return None
    if require_all_topologies:
        keep = [_has_keys(node_labels, constraints) for node_labels in labels]
        if not all(keep):  # the nodes left out score 0
            inner = iter(
                _scores(
                    constraints,
                    namespace,
                    cluster,
                    eligible,
                    [n for n, k in zip(names, keep, strict=True) if k],
                    [node_labels for node_labels, k in zip(labels, keep, strict=True) if k],
                    True,
                    label_nodes,
                )
            )
            return [next(inner) if k else 0 for k in keep]
    return _scores(constraints, namespace, cluster, eligible, names, labels, require_all_topologies, label_nodes)


def _scores(
    constraints: tuple[Constraint, ...],
    namespace: str,
    cluster: SpreadCluster,
    eligible: NodeEligible,
    names: Sequence[str],
    labels: Sequence[Labels],
    require_all_topologies: bool,
    label_nodes: LabelNodes = None,
) -> list[int]:
    """Score and NormalizeScore over the scored nodes (each has every key when
    ``require_all_topologies``). A node's score depends only on its count per constraint (None:
    the node lacks the key), and few nodes differ in those: the counts are gathered per node with
    C-level maps, the scores computed once per distinct combination."""
    if not names:
        return []
    columns: list[list[int | None]] = []
    terms: list[tuple[float, int]] = []  # per constraint: weight, maxSkew - 1
    for c in constraints:
        # The placed pods the constraint counts, kept per selector across cycles (the system
        # defaults share theirs).
        matching = cluster.selector_counts(namespace, c.selector)
        key = c.topology_key
        having, total = label_nodes(key) if label_nodes is not None else (-1, 0)
        if key == HOSTNAME:
            column: list[int | None] = list(map(matching.nodes.get, names, repeat(0)))
            if having != total and not all(map(contains, labels, repeat(key))):
                column = [n if key in node_labels else None for n, node_labels in zip(column, labels, strict=True)]
            terms.append((math.log(len(names) + 2), c.max_skew - 1))
        else:
            if having == 0 or (having != total and not any(map(contains, labels, repeat(key)))):
                continue  # no scored node is in a domain of the key: it scores nothing anywhere
            domains: list[str | None] = list(map(methodcaller("get", key), labels))
            # A node without the key is a domain "" here (it counts towards the weight, scores nothing).
            values = set(domains)
            if None in values:
                values.discard(None)
                values.add("")
            counts: dict[str | None, int | None] = dict.fromkeys(values, 0)
            if eligible is None and not require_all_topologies:  # every known node counts: kept totals
                totals = matching.domains(key)
                for value in values:
                    counts[value] = totals.get(value, 0)  # type: ignore[arg-type]
            else:
                for node, count in matching.nodes.items():
                    known = cluster.labels_of(node)
                    if known is None or (require_all_topologies and not _has_keys(known, constraints)):
                        continue
                    value = known.get(key, "")
                    found = counts.get(value)
                    if found is not None and (eligible is None or eligible(node, c)):
                        counts[value] = found + count
            weight = math.log(len(counts) + 2)
            counts[None] = None
            column = list(map(counts.__getitem__, domains))
            terms.append((weight, c.max_skew - 1))
        columns.append(column)
    if not columns:
        return [MAX_NODE_SCORE] * len(names)  # every raw score 0
    keys: list[Any] = columns[0] if len(columns) == 1 else list(zip(*columns, strict=True))
    rounded: dict[Any, int] = {}
    for k in set(keys):
        parts = (k,) if len(columns) == 1 else k
        raw = 0.0
        for part, (weight, extra) in zip(parts, terms, strict=True):
            if part is not None:
                raw += part * weight + extra
        rounded[k] = math.floor(raw + 0.5)  # math.Round, for non-negative values
    lo, hi = min(rounded.values()), max(rounded.values())
    if hi == 0:
        return [MAX_NODE_SCORE] * len(keys)
    top = hi + lo
    score = {k: MAX_NODE_SCORE * (top - r) // hi for k, r in rounded.items()}
    return list(map(score.__getitem__, keys))
