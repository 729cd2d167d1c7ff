"""Which cluster changes may make a pod schedulable again, by the plugins that rejected it:
kube-scheduler's ``EventsToRegister`` of the default profile (1.37), without the queueing hint
functions, which only narrow them (so draxr retries at least every pod upstream retries).

A parked pod waits for a change of a kind its rejecting plugins registered for, not for any
change: a pod short of devices is not retried for every pod that is bound or ends elsewhere (the
retries, each with a preemption dry run, starved the pods that fit). The ``ChangeLog`` records,
per kind, the generation of the last such change; the queue asks which kinds changed since a
pod was parked (``since``)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntFlag


class Change(IntFlag):
    """The kinds of cluster change ``ClusterState`` reports (upstream's ClusterEvents, grouped)."""

    NODE_ADDED = 1 << 0
    NODE_UPDATED = 1 << 1  # labels, taints, allocatable, unschedulable: what a filter reads
    NODE_REMOVED = 1 << 2
    POD_FREED = 1 << 3  # an assigned pod deleted, ended, or its assumed binding forgotten
    POD_PLACED = 1 << 4  # an assigned pod added (pods waiting for affinity or spreading)
    CLAIM_FREED = 1 << 5  # a claim deallocated, deleted, or an assumed allocation forgotten
    SLICE = 1 << 6  # a ResourceSlice added, changed or removed; a DeviceTaintRule changing its devices' taints
    CLASS = 1 << 7  # a DeviceClass or an ExtendedResourceMapping: the extended-resource mapping
    ADOPTION = 1 << 8  # device-plugin pods adopted or let go (draxr's migration)
    STORAGE = 1 << 9  # PVs, PVCs, StorageClasses, CSI objects, VolumeAttachments
    NAMESPACE = 1 << 10  # namespace labels (InterPodAffinity's namespaceSelector)


ANY = Change((1 << 11) - 1)
_NODE = Change.NODE_ADDED | Change.NODE_UPDATED

# Per plugin, the changes that may help a pod it rejected (upstream's EventsToRegister, grouped
# into ``Change``; a node "update" covers every UpdateNode* action). ImageLocality and
# NodeResourcesBalancedAllocation only score.
PLUGIN_CHANGES: dict[str, Change] = {
    "NodeName": Change.NODE_ADDED,
    "NodeUnschedulable": _NODE,
    "TaintToleration": _NODE,
    "NodeAffinity": _NODE,
    "NodePorts": Change.NODE_ADDED | Change.POD_FREED,
    # (a DeviceClass event: extended resources that DRA serves)
    "NodeResourcesFit": _NODE | Change.POD_FREED | Change.CLASS | Change.ADOPTION,
    "PodTopologySpread": _NODE | Change.NODE_REMOVED | Change.POD_FREED | Change.POD_PLACED,
    "InterPodAffinity": _NODE | Change.POD_FREED | Change.POD_PLACED | Change.NAMESPACE,
    "VolumeRestrictions": Change.NODE_ADDED | Change.POD_FREED | Change.STORAGE,
    "NodeVolumeLimits": Change.POD_FREED | Change.STORAGE,
    "VolumeBinding": _NODE | Change.STORAGE,
    "VolumeZone": _NODE | Change.STORAGE,
    "DynamicResources": _NODE | Change.CLAIM_FREED | Change.SLICE | Change.CLASS | Change.ADOPTION,
    # Its hint always says Skip: the other plugins of the pod decide (its own gate is ungated).
    "DefaultPreemption": Change(0),
}


def interest(plugins: Iterable[str]) -> Change:
    """The changes that may help a pod these plugins rejected; every change when none is named
    or one is unknown (upstream requeues such a pod on any event)."""
    out = Change(0)
    named = False
    for plugin in plugins:
        if plugin not in PLUGIN_CHANGES:
            return ANY
        named = True
        out |= PLUGIN_CHANGES[plugin]
    return out if named else ANY


class ChangeLog:
    """A generation bumped by every change, and the generation of the last change of each kind."""

    __slots__ = ("_last", "generation")

    def __init__(self) -> None:
        self.generation = 0
        self._last = [0] * ANY.bit_length()

    def record(self, change: Change) -> None:
        self.generation += 1
        bits = int(change)
        for i in range(len(self._last)):
            if bits >> i & 1:
                self._last[i] = self.generation

    def since(self, generation: int) -> Change:
        """The kinds that changed after ``generation``."""
        out = 0
        for i, last in enumerate(self._last):
            if last > generation:
                out |= 1 << i
        return Change(out)


__all__ = ["ANY", "PLUGIN_CHANGES", "Change", "ChangeLog", "interest"]
