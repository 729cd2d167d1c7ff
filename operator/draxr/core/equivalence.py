"""The equivalence cache: per-node results of phase 1 shared between pods whose scheduling inputs
are the same (the pods of one Job or ReplicaSet, identical bare pods).

What is cached per node must be a function of the table's key (what the results read of the pod,
placement.node_local_key), of a few cluster-wide objects (the
table's ``mapping`` and ``options``) and of the node's own inputs only: the node object, the usage
of the pods placed on it, its own ResourceSlices and the allocations in its pools. ClusterState
draws a fresh stamp for a node whenever one of those changes (``ClusterState.node_stamps``); an
entry is valid while its stamp is the node's. Everything that reads other pods (inter-pod affinity,
topology spreading, volumes, the pod's own claims) stays out of the entries and is computed per pod.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

V = TypeVar("V")

_TABLES = 64  # pods of this many distinct shapes keep their tables; each holds one entry per node


class EquivalenceTable(Generic[V]):
    """One pod shape's entries: node name -> (the node's stamp when computed, the result)."""

    __slots__ = ("entries", "mapping", "options", "shared")

    def __init__(self, mapping: object, options: Hashable) -> None:
        self.mapping, self.options = mapping, options
        self.entries: dict[str, tuple[int, V]] = {}
        # Results that depend on the pod's shape and cluster-wide inputs alone (placement keeps
        # the device-plugin/DRA split per set of advertised names here).
        self.shared: dict[Hashable, Any] = {}


class EquivalenceCache(Generic[V]):
    """Tables by pod shape, the least recently used dropped beyond ``limit``."""

    def __init__(self, limit: int = _TABLES) -> None:
        self._limit = limit
        self._tables: OrderedDict[Hashable, EquivalenceTable[V]] = OrderedDict()

    def table(self, key: Hashable, mapping: object, options: Hashable) -> EquivalenceTable[V]:
        """The table for pods of shape ``key`` under ``mapping`` (compared by identity: the state
        rebuilds it on every change) and ``options`` (compared by equality); a new one if either
        differs."""
        found = self._tables.get(key)
        if found is not None and found.mapping is mapping and found.options == options:
            self._tables.move_to_end(key)
            return found
        found = self._tables[key] = EquivalenceTable(mapping, options)
        self._tables.move_to_end(key)
        while len(self._tables) > self._limit:
            self._tables.popitem(last=False)
        return found

    def tables(self) -> list[EquivalenceTable[V]]:
        return list(self._tables.values())

    def clear(self) -> None:
        self._tables.clear()

    def __len__(self) -> int:
        return len(self._tables)
