"""VolumeBinding's Score (StorageCapacityScoring): its Filter decides each node's volumes
(core.volumes), and ``core.volumes.score_nodes`` scores those decisions; the plugin's column is
that score, 0 on every node for a pod without volumes to bind (upstream never skips it)."""

from __future__ import annotations

from draxr.core.plugins.scoring import Column, ScoreInputs

NAME = "VolumeBinding"


class VolumeBinding:
    name = NAME

    def column(self, inputs: ScoreInputs) -> Column:
        volume = inputs.volume
        return [volume.get(name, 0) for name in inputs.names] if volume is not None else 0


PLUGIN = VolumeBinding()
