"""The equivalence cache: per-node results of phase 1 shared between pods whose scheduling inputs
are the same (the pods of one Job or ReplicaSet, identical bare pods).

What is cached per node must be a function of the table's key (what the results read of the pod,
plugins.node_local_key), of a few cluster-wide objects (the
table's ``mapping`` and ``options``) and of the node's own inputs only: the node object, the usage
of the pods placed on it, its own ResourceSlices and the allocations in its pools. ClusterState
draws a fresh stamp for a node whenever one of those changes (``core.node_stamps``); an
entry is valid while its stamp is the node's. Everything that reads other pods (inter-pod affinity,
topology spreading, volumes, the pod's own claims) stays out of the entries and is computed per pod.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from itertools import compress
from typing import Any, Generic, Protocol, TypeVar

V = TypeVar("V")
N = TypeVar("N")

_TABLES = 64  # pods of this many distinct shapes keep their tables; each holds one entry per node


_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")


class TouchLog(Protocol):
    """The log of touched nodes (core.node_stamps; ``touched_base + i``: the i-th name's place in the
    whole history; a reader further behind than the base has lost track)."""

    touched: list[str]
    touched_base: int


_POSITIONS: list[tuple[list[str], dict[str, int]]] = []  # the latest names list's positions


def _positions(names: list[str]) -> dict[str, int]:
    """Each name's position, shared by the tables laid out along the same list (by identity)."""
    if not _POSITIONS or _POSITIONS[0][0] is not names:
        _POSITIONS[:] = [(names, {name: i for i, name in enumerate(names)})]
    return _POSITIONS[0][1]


class Aligned(Generic[N, V]):
    """One table's results laid out along one list of node names (placement's sorted names), with
    which positions hold a result still valid (the node not touched since) and which of those
    pass the node-local filters: phase 1 takes whole runs of valid positions with a few C-level
    calls (bytearray find/count, itertools.compress) instead of node by node. Positions become
    invalid by replaying the state's touch log (sync)."""

    __slots__ = ("names", "nodes", "passing", "position", "results", "seen", "valid")

    def __init__(self, names: list[str], log: TouchLog) -> None:
        self.names = names
        self.position = _positions(names)
        self.valid = bytearray(len(names))  # 1: nodes[i] and results[i] hold for the node now
        self.passing = bytearray(len(names))  # 1: results[i] passes (only read where valid)
        self.nodes: list[N | None] = [None] * len(names)
        self.results: list[V | None] = [None] * len(names)
        self.seen = log.touched_base + len(log.touched)

    def sync(self, log: TouchLog) -> None:
        """Invalidate the positions of the nodes touched since the last sync."""
        base, touched = log.touched_base, log.touched
        if self.seen < base:
            self.valid = bytearray(len(self.names))
        else:
            position, valid = self.position, self.valid
            for name in touched[self.seen - base :]:
                i = position.get(name)
                if i is not None:
                    valid[i] = 0
        self.seen = base + len(touched)

    def store(self, i: int, node: N, result: V, valid: bool, passing: bool) -> None:
        self.nodes[i], self.results[i] = node, result
        self.valid[i], self.passing[i] = valid, passing

    def run_end(self, start: int, end: int) -> int:
        """The end of the run of valid positions from ``start`` (at most ``end``)."""
        found = self.valid.find(0, start, end)
        return end if found < 0 else found

    def take(self, start: int, end: int, want: int) -> tuple[int, list[N], list[V]]:
        """From the valid run [start, end), the passing positions' nodes and results, stopping
        right after the ``want``-th: (where it stopped, nodes, results)."""
        passing = self.passing
        if passing.count(1, start, end) > want:
            lo, hi = start + want, end  # the first stop with ``want`` passing before it
            while lo < hi:
                mid = (lo + hi) // 2
                if passing.count(1, start, mid) >= want:
                    hi = mid
                else:
                    lo = mid + 1
            end = lo
        chosen = passing[start:end]
        nodes: list[N] = list(compress(self.nodes[start:end], chosen))  # type: ignore[arg-type]
        results: list[V] = list(compress(self.results[start:end], chosen))  # type: ignore[arg-type]
        return end, nodes, results

    def rejected(self, start: int, end: int) -> list[tuple[N, V]]:
        """The nodes and results in [start, end) that do not pass."""
        failing = self.passing[start:end].translate(_FLIP)
        pairs = zip(self.nodes[start:end], self.results[start:end], strict=True)
        return list(compress(pairs, failing))  # type: ignore[arg-type]


class EquivalenceTable(Generic[V]):
    """One pod shape's entries: node name -> (the node's stamp when computed, the result)."""

    __slots__ = ("aligned", "entries", "mapping", "options", "shared")

    def __init__(self, mapping: object, options: Hashable) -> None:
        self.mapping, self.options = mapping, options
        self.entries: dict[str, tuple[int, V]] = {}
        # Results that depend on the pod's shape and cluster-wide inputs alone (placement keeps
        # the device-plugin/DRA split per set of advertised names here).
        self.shared: dict[Hashable, Any] = {}
        self.aligned: Aligned[Any, V] | None = None  # placement's runs (for its current names list)


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
