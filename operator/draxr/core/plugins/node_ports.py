"""NodePorts: a host port (ip, protocol, port) the pod asks for must be free on the node; 0.0.0.0
conflicts with every address. Unschedulable, not unresolvable: evicting the holder frees it."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.plugins.base import NodeCheck
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unschedulable

NAME = "NodePorts"
REJECTED = unschedulable(NAME, "node(s) didn't have free ports for the requested pod ports")


def ports_conflict(wanted: frozenset[tuple[str, str, int]], usage: NodeUsage) -> bool:
    for ip, proto, port in wanted:
        for uip, uproto, uport in usage.host_ports:
            if uport == port and uproto == proto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


class NodePorts:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        return pod.host_ports

    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        wanted = pod.host_ports
        if not wanted:
            return None

        def check(node: NodeInfo, usage: NodeUsage) -> Status | None:
            return REJECTED if ports_conflict(wanted, usage) else None

        return check


PLUGIN = NodePorts()
