"""The shape of a node-local plugin of the default profile (core.plugins): what it reads of the
pod, its Filter, and its raw Score on one node. Plugins that read other pods or the storage
objects (the volume plugins, PodTopologySpread, InterPodAffinity, DynamicResources) keep their
own modules and are not cached (see core.plugins).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status

NodeCheck = Callable[[NodeInfo, NodeUsage], Status | None]
"""A plugin's Filter for one pod: the node's status, None when it passes."""

NodeScore = Callable[[NodeInfo, NodeUsage], int]
"""A plugin's raw (not yet normalised) Score for one pod on one node."""


class NodeLocalPlugin(Protocol):
    """A plugin whose Filter and Score read of the cluster only the node's own inputs (its object
    and the usage of the pods placed on it): its results on a node are shared by every pod with
    the same key (core.equivalence)."""

    @property
    def name(self) -> str: ...

    def key(self, pod: PodInfo) -> Hashable:
        """Everything the plugin's Filter and Score read of the pod: its part of the equivalence
        key. A plugin that starts to read another field of the pod adds it here."""
        ...


class NodeLocalScorer(NodeLocalPlugin, Protocol):
    def prescore(self, pod: PodInfo) -> NodeScore | None:
        """The pod's raw Score on one node; None when upstream's PreScore skips the pod (its
        column is then None too)."""
        ...


class NodeLocalFilter(NodeLocalPlugin, Protocol):
    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        """The pod's Filter; None when the pod gives the plugin nothing to check (upstream's
        PreFilter Skip, or a Filter that passes every node for it)."""
        ...
