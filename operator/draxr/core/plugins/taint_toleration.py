"""TaintToleration: the Filter turns away nodes with a NoSchedule or NoExecute taint the pod does
not tolerate; the Score counts the PreferNoSchedule taints it does not tolerate (normalised in
reverse by the ranking: fewer is better)."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.plugins.base import NodeCheck, NodeScore
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.scores import intolerable_prefer_no_schedule, normalize, prefer_no_schedule_tolerations
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable

NAME = "TaintToleration"
REJECTED = unresolvable(NAME, "node(s) had untolerated taint(s)")  # 1.37's wording: no key


class TaintToleration:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        return pod.view.tolerations

    def prefilter(self, pod: PodInfo) -> NodeCheck:
        untolerated = pod.view.untolerated

        def check(node: NodeInfo, usage: NodeUsage) -> Status | None:
            return REJECTED if node.taints and untolerated(node.taints) is not None else None

        return check

    def prescore(self, pod: PodInfo) -> NodeScore:
        tolerations = prefer_no_schedule_tolerations(pod.view.tolerations)

        def score(node: NodeInfo, usage: NodeUsage) -> int:
            return intolerable_prefer_no_schedule(node.taints, tolerations) if node.taints else 0

        return score

    def column(self, inputs: ScoreInputs) -> Column:
        """Fewer untolerated PreferNoSchedule taints is better (normalised in reverse): 100 on
        every node when no feasible node has one."""
        taints = inputs.raw(NAME)
        return normalize(taints, reverse=True) if any(taints) else MAX_NODE_SCORE


PLUGIN = TaintToleration()
