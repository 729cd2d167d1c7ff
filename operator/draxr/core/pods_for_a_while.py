"""Upstream's AddPod and RemovePod extensions, run on the cluster state for a while: pods taken out
of every count (preemption's dry run) or counted on a node they are not on (nominated pods in
RunFilterPluginsWithNominatedPods). Each index sees the change through ``ClusterState.account``,
and everything is put back as it was, the nodes' pod order included; the nodes' stamps are new
(their cached verdicts are recomputed)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from draxr.core.state import ClusterState, PodInfo


@contextmanager
def without_pods(state: ClusterState, pods: Sequence[PodInfo]) -> Iterator[None]:
    """The placed ``pods`` count nowhere (usage, spreading and inter-pod counts, volumes)."""
    nodes = {state.placed_on(p) for p in pods} - {""}
    order = {node: dict(state.placed.get(node, {})) for node in nodes}
    for p in pods:
        state.account(p, -1)
    try:
        yield
    finally:
        for p in reversed(pods):
            state.account(p, +1)
        for node, pods_of in order.items():
            state.placed[node] = pods_of


@contextmanager
def with_pods_on(state: ClusterState, node: str, pods: Sequence[PodInfo]) -> Iterator[None]:
    """Unbound ``pods`` count as placed on ``node`` (upstream's addGENominatedPods, AddPod)."""
    order = dict(state.placed.get(node, {}))
    for p in pods:
        state.assumed_nodes[p.uid] = node
        state.account(p, +1)
    try:
        yield
    finally:
        for p in reversed(pods):
            state.account(p, -1)
            state.assumed_nodes.pop(p.uid, None)
        if order:
            state.placed[node] = order
        else:
            state.placed.pop(node, None)
