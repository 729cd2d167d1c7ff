"""NodeUnschedulable: a cordoned node (spec.unschedulable) takes only pods that tolerate the
node.kubernetes.io/unschedulable:NoSchedule taint."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.plugins.base import NodeCheck
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable

NAME = "NodeUnschedulable"
REJECTED = unresolvable(NAME, "node(s) were unschedulable")


def _check(node: NodeInfo, usage: NodeUsage) -> Status | None:
    return REJECTED if node.unschedulable else None


class NodeUnschedulable:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        return pod.view.tolerates_unschedulable

    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        return None if pod.view.tolerates_unschedulable else _check


PLUGIN = NodeUnschedulable()
