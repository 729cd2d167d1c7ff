"""NodeName: a pod with spec.nodeName fits only that node. Its PreFilter's narrowing (only the
named node is evaluated) is cycle.node_names'."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.plugins.base import NodeCheck
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable

NAME = "NodeName"
REJECTED = unresolvable(NAME, "node(s) didn't match the requested node name")


class NodeName:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        return pod.view.node_name

    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        wanted = pod.view.node_name
        if not wanted:
            return None

        def check(node: NodeInfo, usage: NodeUsage) -> Status | None:
            return None if node.name == wanted else REJECTED

        return check


PLUGIN = NodeName()
