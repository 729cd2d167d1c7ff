"""The Score and NormalizeScore extension points. Each score plugin of the profile gives, for one
pod, a column: its normalised score on each feasible node (an int when it is the same on every
node), or None when it does not score the pod (upstream's PreScore Skip: 0 everywhere). The
ranking (core.ranking) sums the columns of the profile's plugins with the profile's weights.

The node-local plugins' raw scores come from the pod's NodeVerdicts, which the equivalence cache
shares between pods of one shape; the other plugins read the cluster through ``inputs.state``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # (core.cycle imports the plugins)
    from draxr.core.cycle import PodCycle
    from draxr.core.node_verdict import NodeVerdict
    from draxr.core.profile import SchedulerProfile
    from draxr.core.state import ClusterState, NodeInfo

Column = Sequence[int] | int
"""A plugin's normalised scores, one per feasible node, or one int for every node."""


@dataclass(frozen=True, slots=True)
class ScoreInputs:
    """What the score plugins read for one pod: its cycle (the PreFilter and PreScore state of
    the plugins that read other pods), the cluster, the profile, the feasible nodes with their
    NodeVerdicts, and the scores two filters leave: VolumeBinding's per node name (None: the pod
    has no volumes to bind) and DynamicResources' normalised ones (None: no claims of its own).
    ``slots``: where each node-local scorer's raw score is in ``NodeVerdict.scores``
    (the registry's, ``plugins.Registry.slots``)."""

    cycle: PodCycle
    state: ClusterState
    profile: SchedulerProfile
    nodes: Sequence[NodeInfo]
    names: Sequence[str]
    verdicts: Sequence[NodeVerdict]
    volume: Mapping[str, int] | None
    dra: Sequence[int] | None
    slots: Mapping[str, int]

    def raw(self, plugin: str) -> list[int]:
        """A node-local scorer's raw scores on the feasible nodes, from their NodeVerdicts."""
        slot = self.slots[plugin]
        return [v.scores[slot] for v in self.verdicts]


class ScorePlugin(Protocol):
    @property
    def name(self) -> str: ...

    def column(self, inputs: ScoreInputs) -> Column | None:
        """PreScore, Score and NormalizeScore over ``inputs.nodes`` (at least one)."""
        ...
