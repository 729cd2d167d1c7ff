"""InterPodAffinity's Score: the pod's preferred terms (and the placed pods' terms towards it,
hard affinity at the profile's weight) summed per topology domain, min-max normalised
(core.interpod). None when nothing scores (upstream's PreScore Skip). Its PreFilter and Filter
are core.interpod's, run by core.cycle."""

from __future__ import annotations

from draxr.core.interpod import affinity_node_score, affinity_scores, normalize_affinity
from draxr.core.plugins.scoring import Column, ScoreInputs

NAME = "InterPodAffinity"


class InterPodAffinity:
    name = NAME

    def column(self, inputs: ScoreInputs) -> Column | None:
        cycle = inputs.cycle
        view = cycle.view
        hard_weight = inputs.profile.hard_pod_affinity_weight
        topology = affinity_scores(cycle.pod.namespace, view.labels, view.terms, inputs.state, hard_weight)
        if topology is None:
            return None
        scores = normalize_affinity({n.name: affinity_node_score(topology, n.labels) for n in inputs.nodes})
        return [scores[name] for name in inputs.names]


PLUGIN = InterPodAffinity()
