"""PodTopologySpread's Score: the pod's soft constraints (or the profile's default ones) over the
feasible nodes, fewer matching pods in a node's domains is better (core.spread.spread_column,
normalised there). None when the pod has no soft constraint (upstream's PreScore Skip). Its
PreFilter and Filter are core.spread's, run by core.cycle."""

from __future__ import annotations

from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.spread import spread_column

NAME = "PodTopologySpread"


class PodTopologySpread:
    name = NAME

    def column(self, inputs: ScoreInputs) -> Column | None:
        cycle = inputs.cycle
        if not cycle.soft_spread:
            return None
        return spread_column(
            cycle.soft_spread,
            cycle.pod.namespace,
            inputs.state,
            cycle.eligible,
            inputs.names,
            [n.labels for n in inputs.nodes],
            cycle.view.spread.explicit or inputs.profile.spread_defaults is not None,  # (requireAllTopologies)
            inputs.state.spread.label_key_nodes,
        )


PLUGIN = PodTopologySpread()
