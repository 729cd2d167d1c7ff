"""The default profile's scores of the feasible nodes, as cycle.score_nodes and weighted_totals
compute them, but from the node-local raw scores phase 1 already holds (NodeVerdict, cached across
pods of one shape), so that only what reads other pods or the whole cluster (spreading, inter-pod
affinity, image locality, volumes) and the normalisations are computed per pod. Nodes are indexed
by their position in ``nodes``; tests/unit check the result against score_nodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from operator import add, attrgetter, mul

from draxr.core.cycle import PodCycle
from draxr.core.interpod import affinity_node_score, affinity_scores, normalize_affinity
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.node_verdict import NodeVerdict
from draxr.core.plugins import image_locality
from draxr.core.profile import DEFAULT_PROFILE, SchedulerProfile
from draxr.core.spread import spread_column
from draxr.core.state import ClusterState, NodeInfo


class Ranking:
    """``columns``: per plugin that scores this pod, the normalised score of each node (an int:
    the same on every node); ``totals``: their weighted sums."""

    __slots__ = ("columns", "names", "totals")

    def __init__(
        self,
        names: Sequence[str],
        columns: list[tuple[str, Sequence[int] | int]],
        weights: Mapping[str, int] | None = None,
    ) -> None:
        """``columns``: only the plugins the profile scores with; ``weights``: theirs."""
        weight_of = DEFAULT_PROFILE.weight_of if weights is None else weights
        self.names, self.columns = names, columns
        same = sum(weight_of[plugin] * column for plugin, column in columns if isinstance(column, int))
        totals = [same] * len(names)
        for plugin, column in columns:
            if not isinstance(column, int):
                weight = weight_of[plugin]
                weighted = column if weight == 1 else map(mul, repeat(weight), column)
                totals = list(map(add, totals, weighted))
        self.totals = totals

    def order(self) -> Iterator[int]:
        """Best total first, ties by node name (kube-scheduler's is random; draxr's stable); the
        rest is sorted only when the best is turned down (phase 2 mostly takes the first)."""
        if not self.names:
            return
        totals, names = self.totals, self.names
        top = max(totals)
        best = totals.index(top)
        if totals.count(top) > 1:
            best = min((i for i, t in enumerate(totals) if t == top), key=names.__getitem__)
        yield best
        yield from sorted((i for i in range(len(names)) if i != best), key=lambda i: (-totals[i], names[i]))

    def scores(self, index: int) -> dict[str, int]:
        return {plugin: c if isinstance(c, int) else c[index] for plugin, c in self.columns}


_name, _labels = attrgetter("name"), attrgetter("labels")
_taint, _fit, _balanced = attrgetter("taint"), attrgetter("fit"), attrgetter("balanced")


def rank(
    cycle: PodCycle,
    state: ClusterState,
    nodes: Sequence[NodeInfo],
    verdicts: Sequence[NodeVerdict],
    volume: Mapping[str, int] | None = None,
    dra: Sequence[int] | None = None,
    profile: SchedulerProfile = DEFAULT_PROFILE,
) -> Ranking:
    """``verdicts``: each node's NodeVerdict for this pod; ``volume``: VolumeBinding's scores;
    ``dra``: DynamicResources' normalised scores, one per node (None: 0 everywhere); only the
    profile's score plugins, with its weights."""
    names = list(map(_name, nodes))
    weights = profile.weight_of
    columns: list[tuple[str, Sequence[int] | int]] = []
    if nodes:
        _columns(cycle, state, nodes, verdicts, volume, dra, profile, columns)
    return Ranking(names, [(plugin, c) for plugin, c in columns if plugin in weights], weights)


def _columns(
    cycle: PodCycle,
    state: ClusterState,
    nodes: Sequence[NodeInfo],
    verdicts: Sequence[NodeVerdict],
    volume: Mapping[str, int] | None,
    dra: Sequence[int] | None,
    profile: SchedulerProfile,
    columns: list[tuple[str, Sequence[int] | int]],
) -> None:
    view, pod = cycle.view, cycle.pod
    names = list(map(_name, nodes))

    # TaintToleration: DefaultNormalizeScore, reversed (100 everywhere when no node has one).
    taints = list(map(_taint, verdicts))
    hi = max(taints)
    if hi == 0:
        columns.append(("TaintToleration", MAX_NODE_SCORE))
    else:
        columns.append(("TaintToleration", [MAX_NODE_SCORE - MAX_NODE_SCORE * t // hi for t in taints]))

    if view.preferred_node_affinity is not None:  # DefaultNormalizeScore
        hi = max(v.affinity for v in verdicts)
        raw = [v.affinity for v in verdicts]
        columns.append(("NodeAffinity", raw if hi == 0 else [MAX_NODE_SCORE * s // hi for s in raw]))

    columns.append(("NodeResourcesFit", list(map(_fit, verdicts))))
    if (pod.units.get("cpu", 0), pod.units.get("memory", 0)) != (0, 0):
        columns.append(("NodeResourcesBalancedAllocation", list(map(_balanced, verdicts))))

    columns.append((image_locality.NAME, image_locality.column(view.images, nodes, state)))

    if cycle.soft_spread:
        labels = list(map(_labels, nodes))
        spread = spread_column(
            cycle.soft_spread,
            pod.namespace,
            state,
            cycle.eligible,
            names,
            labels,
            view.spread.explicit or profile.spread_defaults is not None,  # (requireAllTopologies)
            state.label_key_nodes,
        )
        if spread is not None:
            columns.append(("PodTopologySpread", spread))

    topology = affinity_scores(pod.namespace, view.labels, view.terms, state, profile.hard_pod_affinity_weight)
    if topology is not None:
        affinity = normalize_affinity({n.name: affinity_node_score(topology, n.labels) for n in nodes})
        columns.append(("InterPodAffinity", [affinity[name] for name in names]))

    # (upstream never skips it: 0 everywhere for a pod without volumes, one constant here)
    columns.append(("VolumeBinding", [volume.get(name, 0) for name in names] if volume is not None else 0))
    # (upstream has no PreScore for it: 0 everywhere for a pod without claims of its own)
    columns.append(("DynamicResources", list(dra) if dra is not None else 0))
