"""DynamicResources' memory of nodes that cannot fit a pod's devices, so that placement skips them
for a dict lookup: for good while the DRA inventory (slices, classes) is unchanged, and, for the
quick count's rejections, while the node itself is untouched (its stamp)."""

from __future__ import annotations

from collections.abc import Mapping

from draxr.core.allocator import Inventory

StaticKey = tuple[str, frozenset[tuple[str, str]], frozenset[tuple[str, int]]]
NowKey = tuple[int, frozenset[tuple[str, int]]]


class NoFitCache:
    def __init__(self, inventory: Inventory, nodes: Mapping[str, object]) -> None:
        self._inventory, self._nodes = inventory, nodes
        # (node, requested devices per class) -> why the node can never fit them.
        self._static: dict[StaticKey, str] = {}
        self._stamp: tuple[int, int] = (-1, -1)
        self._now: dict[NowKey, str] = {}

    def static(self) -> dict[StaticKey, str]:
        """Why a node can never fit the devices wanted, valid while the inventory is unchanged."""
        stamp = (self._inventory.revision, self._inventory.class_revision)
        if stamp != self._stamp:
            self._static, self._now = {}, {}
            self._stamp = stamp
        return self._static

    def now(self) -> dict[NowKey, str] | None:
        """The quick count's rejections that hold only while the node is untouched, by (the node's
        stamp, the devices wanted per class); None when a node may see pools whose allocations do
        not touch its stamp (slices without nodeName). Cleared with ``static``; bounded."""
        if self._inventory.has_shared_slices:
            return None
        self.static()
        if len(self._now) > 4 * len(self._nodes) + 4096:
            self._now = {}
        return self._now
