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

``NODE_LOCAL``: the plugins that read only the node's own inputs. Their results on a node are
kept per pod shape (core.equivalence) under the key each plugin gives for the pod
(``node_local_key``); phase 1 runs ``NODE_LOCAL_FILTERS`` in order, then NodeResourcesFit with the
node's device-plugin/DRA split (placement._NodeLocal). The plugins after it read other pods or
cluster-wide objects and run per pod (placement.NodeFilter.beyond_node, DynamicResources).

AddPod/RemovePod (the PreFilter extensions preemption's dry run and nominated pods use): the
plugins that read other pods read them through ClusterState's indexes (usage per node, pod groups
by labels, term groups, spreading counts, placed volumes), which core.pods_for_a_while's
without_pods and with_pods_on update pod by pod (``ClusterState.account``), and their PreFilter
state is built again from those. DynamicResources frees the removed pods' claims (DynamicResources.use_allocated).

Scoring (plugins.scoring): ``SCORE_PLUGINS`` each turn the pod's NodeVerdicts (the node-local raw
scores) or the cluster into one column of normalised scores over the feasible nodes; core.ranking
sums the columns of the plugins the profile scores with, with its weights.

Adding a plugin: docs/developer/adding-a-plugin.md.
"""

from __future__ import annotations

from collections.abc import Hashable

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
from draxr.core.plugins.base import NodeLocalFilter, NodeLocalPlugin
from draxr.core.plugins.scoring import ScorePlugin
from draxr.core.state import PodInfo

NODE_LOCAL_FILTERS: tuple[NodeLocalFilter, ...] = (
    node_name.PLUGIN,
    node_unschedulable.PLUGIN,
    taint_toleration.PLUGIN,
    node_affinity.PLUGIN,
    node_ports.PLUGIN,
)
"""The filters before NodeResourcesFit, in upstream's order (the first failing one is reported)."""

NODE_LOCAL: tuple[NodeLocalPlugin, ...] = (
    *NODE_LOCAL_FILTERS,
    node_resources_fit.PLUGIN,
    balanced_allocation.PLUGIN,
)


SCORE_PLUGINS: tuple[ScorePlugin, ...] = (
    taint_toleration.PLUGIN,
    node_affinity.PLUGIN,
    node_resources_fit.PLUGIN,
    volume_binding.PLUGIN,
    pod_topology_spread.PLUGIN,
    inter_pod_affinity.PLUGIN,
    dynamic_resources.SCORE_PLUGIN,
    balanced_allocation.PLUGIN,
    image_locality.PLUGIN,
)
"""The default profile's score plugins in upstream's order (core.profile.DEFAULT_WEIGHTS): each
gives a column of normalised scores (plugins.scoring); core.ranking runs those the profile
scores with."""


def node_local_key(pod: PodInfo) -> Hashable:
    """The pod's equivalence key: each node-local plugin's part. Pods with equal keys get equal
    results from every node-local plugin on a node (placement.NodeVerdict)."""
    return tuple(plugin.key(pod) for plugin in NODE_LOCAL)
