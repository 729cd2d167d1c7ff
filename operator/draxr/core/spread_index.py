"""PodTopologySpread's cluster-wide index: the topology domains of the hard constraints, their
per-domain counts of matching pods, and the scores' matching pods per selector. Built on first use,
then kept up to date pod by pod (``count``: the plugin's AddPod/RemovePod, which ClusterState calls
for every placed pod that comes or goes), and dropped when the nodes change."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import Protocol

from draxr.core.labels import Labels, Selector
from draxr.core.spread import (
    DomainCounts,
    Domains,
    SelectorCounts,
    SpreadCluster,
    counted,
    domain_counts,
    matching_pods,
)

_COUNTED_IN_LIMIT = 4096  # label sets whose count tables are remembered (pods of one workload share one)
_DOMAINS_LIMIT = 64  # cached domain tables, and as many count tables (each as large as the fleet)

GroupKey = tuple[str, int, bool]  # a placed pod's group: (namespace, id of its label set, terminating)


class IndexedCluster(SpreadCluster, Protocol):
    # Bumped when a node comes, goes or changes what a filter reads: the domains stay valid while
    # it stays.
    @property
    def node_revision(self) -> int: ...

    @property
    def nodes(self) -> Mapping[str, object]: ...


class SpreadIndex:
    def __init__(self, cluster: IndexedCluster) -> None:
        self._cluster = cluster
        self._domains: dict[Hashable, Domains] = {}
        # Hard spreading's per-domain counts: key -> (namespace, selector, counts); dropped with the
        # domains they count in.
        self._domain_counts: dict[Hashable, tuple[str, Selector, DomainCounts]] = {}
        self._domains_revision = -1
        # Spreading scores' matching pods per (namespace, selector); their per-domain tables are
        # dropped when the nodes change.
        self._selector_counts: dict[tuple[str, Selector], SelectorCounts] = {}
        self._selector_counts_revision = -1
        # Which of those tables count a placed pod, per group key (the label set kept: its id is
        # not reused while it is here); emptied when a table comes or goes.
        self._counted_in: dict[GroupKey, tuple[Labels, list[DomainCounts], list[SelectorCounts]]] = {}
        self._label_keys: tuple[Mapping[str, object], int, int, Counter[str]] | None = None

    def label_key_nodes(self, key: str) -> tuple[int, int]:
        """(nodes with a label ``key``, all nodes): what minDomains and nodeInclusionPolicy read;
        counted once per revision of the nodes."""
        found, cluster = self._label_keys, self._cluster
        nodes, revision = cluster.nodes, cluster.node_revision
        if found is None or found[0] is not nodes or found[1] != revision or found[2] != len(nodes):
            counts = Counter(k for _, labels in cluster.node_labels() for k in labels)
            found = self._label_keys = (nodes, revision, len(nodes), counts)
        return found[3].get(key, 0), len(nodes)

    @property
    def counting(self) -> bool:
        """Whether any table counts pods (else ``count`` has nothing to do)."""
        return bool(self._domain_counts or self._selector_counts)

    def count(self, key: GroupKey, labels: Labels, deleting: bool, node: str, sign: int) -> None:
        """A placed pod of group ``key`` came (``sign`` 1) to ``node`` or left it (-1)."""
        hit = self._counted_in.get(key)
        if hit is not None and hit[0] is labels:
            domains, selectors = hit[1], hit[2]
        else:
            ns = key[0]
            domains = [d for n, sel, d in self._domain_counts.values() if counted(sel, n, ns, labels, deleting)]
            selectors = [c for (n, sel), c in self._selector_counts.items() if counted(sel, n, ns, labels, deleting)]
            if len(self._counted_in) >= _COUNTED_IN_LIMIT:
                self._counted_in.clear()
            self._counted_in[key] = (labels, domains, selectors)
        for domain in domains:
            domain.add(node, sign)
        for per_selector in selectors:
            per_selector.add(node, sign)

    def domains(self, key: Hashable, build: Callable[[], Domains]) -> Domains:
        """Spreading's topology domains for ``key`` (the constraints and what their inclusion
        policies read of the pod), built once per node revision. Bounded: the pods of a cluster
        come in few shapes, and a flood of distinct ones only costs a rebuild."""
        revision = self._cluster.node_revision
        if self._domains_revision != revision:
            self._domains, self._domain_counts = {}, {}
            self._counted_in.clear()
            self._domains_revision = revision
        found = self._domains.get(key)
        if found is None:
            if len(self._domains) >= _DOMAINS_LIMIT:
                self._domains.clear()
            found = self._domains[key] = build()
        return found

    def counts(self, key: Hashable, domains: Domains, index: int, namespace: str, selector: Selector) -> DomainCounts:
        """The matching pods per domain for constraint ``index`` of the constraints ``domains``
        was built for (``key``: ``domains``' key), counted once, then maintained by ``count``.
        Call ``domains`` first in the same cycle (it drops counts of outdated domains)."""
        full = (key, index, namespace, selector)
        found = self._domain_counts.get(full)
        if found is None:
            if len(self._domain_counts) >= _DOMAINS_LIMIT:
                self._domain_counts.clear()
            self._counted_in.clear()
            found = self._domain_counts[full] = (
                namespace,
                selector,
                domain_counts(domains, index, namespace, selector, self._cluster),
            )
        return found[2]

    def selector_counts(self, namespace: str, selector: Selector) -> SelectorCounts:
        """The placed pods ``selector`` counts in ``namespace``, per node and per domain, counted
        once, then maintained by ``count`` (bounded like the domain tables)."""
        revision = self._cluster.node_revision
        if self._selector_counts_revision != revision:
            for per_selector in self._selector_counts.values():
                per_selector.reset_domains()
            self._selector_counts_revision = revision
        key = (namespace, selector)
        found = self._selector_counts.get(key)
        if found is None:
            if len(self._selector_counts) >= _DOMAINS_LIMIT:
                self._selector_counts.clear()
            self._counted_in.clear()
            found = self._selector_counts[key] = SelectorCounts(
                matching_pods(self._cluster, selector, namespace), self._cluster.labels_of
            )
        return found
