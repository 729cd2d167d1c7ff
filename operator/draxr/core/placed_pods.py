"""The placed pods (bound or assumed) as inter-pod affinity and spreading read them, kept pod by pod
rather than rebuilt per cycle: grouped by (namespace, label set, terminating) with a count per node,
so that a selector is matched once per group (the pods of one ReplicaSet or Job share labels); and
those with inter-pod terms, by their (interned, so shared) terms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from draxr.core.interpod import PodTerms
from draxr.core.labels import Labels

GroupKey = tuple[str, int, bool]  # (namespace, id of the interned label set, terminating)


@dataclass(slots=True)
class LabelGroup:
    """Placed pods that share a namespace, a label set and whether they are terminating."""

    namespace: str
    labels: Labels
    deleting: bool
    nodes: dict[str, int]  # node -> how many of them are on it


def _tally(nodes: dict[str, int], node: str, delta: int) -> bool:
    """Add ``delta`` to the node's count (dropped at 0); True when no node is left."""
    count = nodes.get(node, 0) + delta
    if count > 0:
        nodes[node] = count
    else:
        nodes.pop(node, None)
    return not nodes


class PlacedPods:
    def __init__(self) -> None:
        self._groups: dict[GroupKey, LabelGroup] = {}
        self._term_groups: dict[int, tuple[PodTerms, dict[str, int]]] = {}

    def count(self, key: GroupKey, labels: Labels, terms: PodTerms | None, node: str, sign: int) -> None:
        """A placed pod of group ``key`` (its labels and terms) came to ``node`` (``sign`` 1) or left."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = LabelGroup(key[0], labels, key[2], {})
        if _tally(group.nodes, node, sign):
            del self._groups[key]
        if terms is not None:
            _, counts = self._term_groups.setdefault(id(terms), (terms, {}))
            if _tally(counts, node, sign):
                del self._term_groups[id(terms)]

    def groups(self) -> Iterable[LabelGroup]:
        return self._groups.values()

    def term_groups(self) -> Iterable[tuple[PodTerms, Mapping[str, int]]]:
        return self._term_groups.values()
