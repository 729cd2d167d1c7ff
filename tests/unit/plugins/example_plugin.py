"""A worked example of a node-local plugin (docs/developer/adding-a-plugin.md shows this file, and
test_worked_example.py runs it): a Filter that turns away nodes under maintenance unless the pod
allows them, and a Score that prefers fast nodes. Not a plugin of kube-scheduler's default profile,
so it is registered only by its test."""

from __future__ import annotations

from collections.abc import Hashable

from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.plugins.base import NodeCheck, NodeScore
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.scores import normalize
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable

NAME = "ExampleMaintenance"
MAINTENANCE = "example.com/maintenance"  # a node label: the node is under maintenance
ALLOWED = "example.com/during-maintenance"  # a pod label, "true": it may run there anyway
FAST = "example.com/fast"  # a node label, "true": preferred
REJECTED = unresolvable(NAME, "node(s) were under maintenance")  # waiting cannot help: unresolvable


def _under_maintenance(node: NodeInfo, usage: NodeUsage) -> Status | None:
    return REJECTED if MAINTENANCE in node.labels else None


def _fast(node: NodeInfo, usage: NodeUsage) -> int:
    return MAX_NODE_SCORE if node.labels.get(FAST) == "true" else 0


class ExampleMaintenance:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        """Everything its Filter and Score read of the pod: pods that agree share cached verdicts."""
        return pod.labels.get(ALLOWED) == "true"

    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        """The Filter for this pod; None when it has nothing to check (PreFilter's Skip)."""
        return None if pod.labels.get(ALLOWED) == "true" else _under_maintenance

    def prescore(self, pod: PodInfo) -> NodeScore | None:
        """The raw Score on one node (kept in NodeVerdict.scores, cached per pod shape)."""
        return _fast

    def column(self, inputs: ScoreInputs) -> Column | None:
        """Score and NormalizeScore over the feasible nodes: the raw scores back, normalised."""
        return normalize(inputs.raw(NAME))


PLUGIN = ExampleMaintenance()
