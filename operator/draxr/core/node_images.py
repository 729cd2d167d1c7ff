"""ImageLocality's cluster-wide counts, kept as nodes come, change and go: on how many nodes each
image is, and its size (the size the first node reported, kept while any has it, like
kube-scheduler's cache: ImageStateSummary)."""

from __future__ import annotations

from collections.abc import Mapping


class NodeImages:
    def __init__(self) -> None:
        self.nodes: dict[str, int] = {}  # image name -> number of nodes that have it
        self.sizes: dict[str, int] = {}  # image name -> its size

    def count(self, images: Mapping[str, int], sign: int) -> None:
        """A node with ``images`` (name -> size) came (``sign`` 1) or went (-1)."""
        for name, size in images.items():
            n = self.nodes.get(name, 0) + sign
            if n > 0:
                self.nodes[name] = n
                self.sizes.setdefault(name, size)
            else:
                self.nodes.pop(name, None)
                self.sizes.pop(name, None)
