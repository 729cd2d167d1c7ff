"""The ranking of the feasible nodes: the profile's score plugins (plugins.REGISTRY.scores, each a
column of normalised scores) summed with its weights, from the node-local raw scores phase 1
already holds (NodeVerdict, cached across pods of one shape), so that only what reads other pods
or the whole cluster (spreading, inter-pod affinity, image locality, volumes) and the
normalisations are computed per pod. Nodes are indexed by their position in ``nodes``;
tests/unit check the result against cycle.score_nodes, the reference computed without the cache.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from operator import add, mul

from draxr.core import plugins
from draxr.core.cycle import PodCycle
from draxr.core.node_verdict import NodeVerdict
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.profile import DEFAULT_PROFILE, SchedulerProfile
from draxr.core.state import ClusterState, NodeInfo


class Ranking:
    """``columns``: per plugin that scores this pod, the normalised score of each node (an int:
    the same on every node); ``totals``: their weighted sums."""

    __slots__ = ("columns", "names", "totals")

    def __init__(
        self,
        names: Sequence[str],
        columns: list[tuple[str, Column]],
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
    profile's score plugins (plugins.REGISTRY.scores), with its weights."""
    names = [n.name for n in nodes]
    weights = profile.weight_of
    columns: list[tuple[str, Column]] = []
    if nodes:
        registry = plugins.REGISTRY
        inputs = ScoreInputs(cycle, state, profile, nodes, names, verdicts, volume, dra, registry.slots)
        for plugin in registry.scores:
            if plugin.name in weights:
                column = plugin.column(inputs)
                if column is not None:
                    columns.append((plugin.name, column))
    return Ranking(names, columns, weights)
