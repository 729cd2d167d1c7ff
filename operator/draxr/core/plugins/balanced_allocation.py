"""NodeResourcesBalancedAllocation: how evenly cpu and memory would be used on the node with the
pod. Skipped for pods that request neither (upstream's PreScore Skip)."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.plugins.base import NodeScore
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.scores import balanced_allocation_score
from draxr.core.state import NodeInfo, NodeUsage, PodInfo

NAME = "NodeResourcesBalancedAllocation"


def _requests(pod: PodInfo) -> tuple[int, int]:
    return pod.units.get("cpu", 0), pod.units.get("memory", 0)


class BalancedAllocation:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        return _requests(pod)

    def prescore(self, pod: PodInfo) -> NodeScore | None:
        actual = _requests(pod)
        if actual == (0, 0):
            return None

        def score(node: NodeInfo, usage: NodeUsage) -> int:
            used = (usage.requested.get("cpu", 0), usage.requested.get("memory", 0))
            alloc = (node.allocatable.get("cpu", 0), node.allocatable.get("memory", 0))
            return balanced_allocation_score(used, actual, alloc)

        return score

    def column(self, inputs: ScoreInputs) -> Column | None:
        """The verdicts' scores; None for a pod that requests neither (as prescore)."""
        if _requests(inputs.cycle.pod) == (0, 0):
            return None
        return inputs.raw(NAME)


PLUGIN = BalancedAllocation()
