"""kube-scheduler 1.37.2's default profile as draxr runs it, plugin by plugin, in upstream's order
(pkg/scheduler/apis/config/v1/default_plugins.go, DynamicResources added by its feature gate):

======================  ==========================  =======================================
plugin                  module                      what it reads besides the pod and node
======================  ==========================  =======================================
NodeName                plugins.node_name           -
NodeUnschedulable       plugins.node_unschedulable  -
TaintToleration         plugins.taint_toleration    -
NodeAffinity            plugins.node_affinity       -
NodePorts               plugins.node_ports          the node's pods' host ports
NodeResourcesFit        plugins.node_resources_fit  the node's pods' requests (, its pools)
VolumeRestrictions,     core.volumes                PVCs, PVs, StorageClasses, CSINodes,
NodeVolumeLimits,       (over core.storage;         the volumes of all placed pods
VolumeBinding,          VolumeBinding's Score:
VolumeZone              plugins.volume_binding)
PodTopologySpread       core.spread (Score:         the placed pods' labels, node labels
                        plugins.pod_topology_spread)
InterPodAffinity        core.interpod (Score:       the placed pods' labels and terms
                        plugins.inter_pod_affinity)
DynamicResources        plugins.dynamic_resources   claims, slices, classes, allocations
BalancedAllocation      plugins.balanced_allocation the node's pods' requests
ImageLocality           plugins.image_locality      which nodes hold the pod's images
======================  ==========================  =======================================

The registry (``Registry``; the one the scheduler runs is ``REGISTRY``, kube-scheduler's default
``DEFAULT_REGISTRY``) lists them by extension point. ``local``: the plugins that read only the
node's own inputs. Their results on a node are kept per pod shape (core.equivalence) under the key
each plugin gives for the pod (``node_local_key``); phase 1 runs the registry's ``filters`` in
order, then NodeResourcesFit with the node's device-plugin/DRA split (placement._NodeLocal). The
plugins after it read other pods or cluster-wide objects and run per pod
(placement.NodeFilter.beyond_node, DynamicResources).

AddPod/RemovePod (the PreFilter extensions preemption's dry run and nominated pods use): the
plugins that read other pods read them through ClusterState's indexes (usage per node, pod groups
by labels, term groups, spreading counts, placed volumes), which core.pods_for_a_while's
without_pods and with_pods_on update pod by pod (``ClusterState.account``), and their PreFilter
state is built again from those. DynamicResources frees the removed pods' claims (DynamicResources.use_allocated).

Scoring (plugins.scoring): the registry's ``scores`` each turn the pod's NodeVerdicts (the node-local
raw scores: its ``scorers``' in ``NodeVerdict.scores``, NodeResourcesFit's in ``fit``) or the
cluster into one column of normalised scores over the feasible nodes; core.ranking sums the
columns of the plugins the profile scores with, with its weights.

Adding a plugin: docs/developer/adding-a-plugin.md.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import cast

from draxr.core.plugins import (
    balanced_allocation,
    dynamic_resources,
    image_locality,
    inter_pod_affinity,
    node_affinity,
    node_name,
    node_ports,
    node_resources_fit,
    node_unschedulable,
    pod_topology_spread,
    taint_toleration,
    volume_binding,
)
from draxr.core.plugins.base import NodeLocalFilter, NodeLocalPlugin, NodeLocalScorer
from draxr.core.plugins.scoring import ScorePlugin
from draxr.core.state import PodInfo


@dataclass(frozen=True, eq=False)
class Registry:
    """The profile's plugins by extension point, each tuple in upstream's order. ``filters``: the
    node-local filters before NodeResourcesFit (the first failing one is reported); ``scorers``:
    the node-local plugins whose raw Score phase 1 keeps in ``NodeVerdict.scores``, in this order
    (NodeResourcesFit's, which reads the node's device split, is ``NodeVerdict.fit``);
    ``scores``: the score plugins (core.profile's weights say which the profile runs). Derived:
    ``local``, every node-local plugin once (their keys make the equivalence key), and
    ``slots``, where each scorer's raw score is in ``NodeVerdict.scores`` (``ScoreInputs.raw``).
    Read at each use (``plugins.REGISTRY``), so one swap adds a plugin everywhere."""

    filters: tuple[NodeLocalFilter, ...]
    scorers: tuple[NodeLocalScorer, ...]
    scores: tuple[ScorePlugin, ...]
    local: tuple[NodeLocalPlugin, ...] = field(init=False)
    slots: Mapping[str, int] = field(init=False)

    def __post_init__(self) -> None:
        local: dict[int, NodeLocalPlugin] = {}
        every: tuple[NodeLocalPlugin, ...] = (*self.filters, node_resources_fit.PLUGIN, *self.scorers)
        for plugin in every:
            local.setdefault(id(plugin), plugin)
        object.__setattr__(self, "local", tuple(local.values()))
        object.__setattr__(self, "slots", {plugin.name: i for i, plugin in enumerate(self.scorers)})

    def adding(self, plugin: object) -> Registry:
        """This registry with ``plugin`` at the end of each extension point it implements: a
        node-local Filter (``key`` and ``prefilter``), a node-local raw Score (``key`` and
        ``prescore``), a Score and NormalizeScore (``column``)."""
        node_local = hasattr(plugin, "key")
        return Registry(
            (*self.filters, cast("NodeLocalFilter", plugin))
            if node_local and hasattr(plugin, "prefilter")
            else self.filters,
            (*self.scorers, cast("NodeLocalScorer", plugin))
            if node_local and hasattr(plugin, "prescore")
            else self.scorers,
            (*self.scores, cast("ScorePlugin", plugin)) if hasattr(plugin, "column") else self.scores,
        )


DEFAULT_REGISTRY = Registry(
    filters=(
        node_name.PLUGIN,
        node_unschedulable.PLUGIN,
        taint_toleration.PLUGIN,
        node_affinity.PLUGIN,
        node_ports.PLUGIN,
    ),
    scorers=(
        taint_toleration.PLUGIN,
        node_affinity.PLUGIN,
        balanced_allocation.PLUGIN,
    ),
    scores=(
        taint_toleration.PLUGIN,
        node_affinity.PLUGIN,
        node_resources_fit.PLUGIN,
        volume_binding.PLUGIN,
        pod_topology_spread.PLUGIN,
        inter_pod_affinity.PLUGIN,
        dynamic_resources.SCORE_PLUGIN,
        balanced_allocation.PLUGIN,
        image_locality.PLUGIN,
    ),
)
"""kube-scheduler 1.37.2's default profile (core.profile.DEFAULT_WEIGHTS: the score plugins'
order and weights)."""

REGISTRY = DEFAULT_REGISTRY
"""The registry the scheduler runs (placement, ranking and the equivalence key read it here)."""


def node_local_key(pod: PodInfo) -> Hashable:
    """The pod's equivalence key: each node-local plugin's part. Pods with equal keys get equal
    results from every node-local plugin on a node (placement.NodeVerdict)."""
    return tuple(plugin.key(pod) for plugin in REGISTRY.local)
