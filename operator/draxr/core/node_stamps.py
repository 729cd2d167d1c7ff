"""Per node, a stamp drawn afresh whenever something per-node placement reads of it changes (the
node object, its pods' usage, its own slices, allocations in its pools): per-node results computed
under a stamp stay valid while it does (core.equivalence). And the log of the nodes touched, in
stamp order (``touched_base + i`` is the i-th name's position in the whole history): placement
replays its tail to find what changed since it last looked (equivalence.TouchLog)."""

from __future__ import annotations

import itertools
from collections.abc import Sized


class NodeStamps:
    def __init__(self, nodes: Sized) -> None:
        self._nodes = nodes  # (the log's bound grows with the fleet)
        self.by_node: dict[str, int] = {}
        self._next = itertools.count(1)
        self.touched: list[str] = []
        self.touched_base = 0

    def touch(self, name: str) -> None:
        self.by_node[name] = next(self._next)
        log = self.touched
        log.append(name)
        if len(log) > 4 * len(self._nodes) + 4096:  # bounded: a reader further behind starts over
            self.touched_base += len(log)
            self.touched = []
