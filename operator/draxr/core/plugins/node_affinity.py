"""NodeAffinity: the Filter checks spec.nodeSelector and the required node affinity; the Score sums
the weights of the preferred terms the node matches. Its PreFilter's narrowing to the names of
``matchFields metadata.name In`` is cycle.node_names'."""

from __future__ import annotations

import json
from collections.abc import Hashable

from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.plugins.base import NodeCheck, NodeScore
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.pod_view import PodView
from draxr.core.scores import node_affinity_score, normalize, preferred_terms
from draxr.core.state import NodeInfo, NodeUsage, PodInfo
from draxr.core.status import Status, unresolvable

NAME = "NodeAffinity"
REJECTED = unresolvable(NAME, "node(s) didn't match Pod's node affinity/selector")


def node_affinity_matches(view: PodView, node: NodeInfo) -> bool:
    """`GetRequiredNodeAffinity(pod).Match(node)`: nodeSelector and the required terms."""
    for k, v in view.node_selector.items():
        if node.labels.get(k) != v:
            return False
    required = view.required_node_affinity
    if required:
        try:
            return selector_matches(required, node.raw)
        except NodeSelectorError:
            return False
    return True


def _json(value: object) -> str | None:
    return json.dumps(value, sort_keys=True, default=repr) if value is not None else None


class NodeAffinity:
    name = NAME

    def key(self, pod: PodInfo) -> Hashable:
        view = pod.view
        return (
            tuple(sorted(view.node_selector.items())),
            _json(view.required_node_affinity),
            _json(view.preferred_node_affinity),
        )

    def prefilter(self, pod: PodInfo) -> NodeCheck | None:
        view = pod.view
        if not view.node_selector and not view.required_node_affinity:
            return None

        def check(node: NodeInfo, usage: NodeUsage) -> Status | None:
            return None if node_affinity_matches(view, node) else REJECTED

        return check

    def prescore(self, pod: PodInfo) -> NodeScore | None:
        """None without preferred terms: upstream skips the plugin's Score for the pod."""
        preferred = pod.view.preferred_node_affinity
        if preferred is None:
            return None
        terms = preferred_terms(preferred)

        def score(node: NodeInfo, usage: NodeUsage) -> int:
            return node_affinity_score(terms, node.raw)

        return score

    def column(self, inputs: ScoreInputs) -> Column | None:
        """None without preferred terms (as prescore)."""
        if inputs.cycle.view.preferred_node_affinity is None:
            return None
        return normalize(inputs.raw(NAME))


PLUGIN = NodeAffinity()
