"""kube-scheduler 1.37.2's volume plugins, on draxr.core.storage.StorageState: VolumeRestrictions,
NodeVolumeLimits (CSI), VolumeBinding (and its binder's FindPodVolumes) and VolumeZone, with the
default profile's order, status codes and messages.

Use, per pod (``pod`` is the pod's API dict, ``nodes`` the names of the cluster's nodes):

    cycle = prefilter(pod, storage, nodes)       # PreFilter of the four plugins, in order
    if cycle.rejected: ...                       # every node reports it (plugin, code, reasons)
    verdict = filter_node(cycle, storage, node)  # per node, after NodeResourcesFit
    verdict.rejection                            # first failing volume plugin, or None
    verdict.decision                             # VolumeBinding's choice on that node (PV bindings,
                                                 # claims to provision): StorageState.assume(...)
    score_nodes(cycle, {node: verdict.decision}) # VolumeBinding's score (StorageCapacityScoring)

and for the chosen node (the shell's Reserve / PreBind, as upstream's binder):

    storage.assume(decision, node)               # AssumePodVolumes; storage.forget(decision) undoes
    all_bound(pod, storage)                      # nothing to write: skip PreBind
    storage.bound_pv_object, selected_node_pvc_object    # (draxr.core.storage) what PreBind writes
    binding_progress(storage, decision, node, labels, written)  # checkBindings while waiting

Not reproduced: in-tree PersistentVolumes (awsElasticBlockStore, gcePersistentDisk, ... PV sources)
are not translated to CSI (upstream translates them on nodes whose CSINode lists the plugin as
migrated: node affinity for VolumeBinding, driver and handle for NodeVolumeLimits): such a PV has
no node affinity of its own here and is not counted against a CSI driver's limit. Inline volumes:
gcePersistentDisk and awsElasticBlockStore are translated (NodeVolumeLimits), the other migratable
inline kinds (azureDisk, azureFile, cinder, vsphereVolume, portworxVolume) are not.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.gomath import go_div
from draxr.core.labels import Selector
from draxr.core.quantity import value
from draxr.core.status import Code, Status
from draxr.core.storage import (
    NO_PROVISIONER,
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageCapacity,
    StorageState,
    Volume,
    VolumeDecision,
    pod_volumes,
)

__all__ = [
    "ERR_BIND_CONFLICT",
    "ERR_DISK_CONFLICT",
    "ERR_MAX_VOLUME_COUNT",
    "ERR_NODE_CONFLICT",
    "ERR_NOT_ENOUGH_SPACE",
    "ERR_PV_NOT_EXIST",
    "ERR_RWOP_CONFLICT",
    "ERR_ZONE_CONFLICT",
    "PLUGINS",
    "BindingProgress",
    "Status",
    "VolumeCycle",
    "VolumeVerdict",
    "all_bound",
    "binding_progress",
    "filter_node",
    "find_matching_volume",
    "prefilter",
    "score_nodes",
]

PLUGINS = frozenset({"VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"})
UNRESOLVABLE = Code.UNRESOLVABLE
UNSCHEDULABLE = Code.UNSCHEDULABLE
ERROR = Code.ERROR

ERR_DISK_CONFLICT = "node(s) had no available disk"
ERR_RWOP_CONFLICT = (
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)
ERR_MAX_VOLUME_COUNT = "node(s) exceed max volume count"
ERR_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
ERR_NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
ERR_NOT_ENOUGH_SPACE = "node(s) did not have enough free storage"
ERR_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
ERR_ZONE_CONFLICT = "node(s) had no available volume zone"
ERR_UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"

ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION_BETA = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
_TOPOLOGY_LABELS = (ZONE_BETA, REGION_BETA, ZONE, REGION)
_GA_LABEL = {ZONE_BETA: ZONE, REGION_BETA: REGION}

# csi-translation-lib: in-tree plugin -> CSI driver; isCSIMigrationOn's plugins (a CSINode suffices).
_CSI_NAME = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}
_MIGRATION_ON = frozenset(
    {
        "kubernetes.io/aws-ebs",
        "kubernetes.io/portworx-volume",
        "kubernetes.io/gce-pd",
        "kubernetes.io/azure-disk",
        "kubernetes.io/cinder",
    }
)
_INLINE_PLUGIN = {"gce": "kubernetes.io/gce-pd", "ebs": "kubernetes.io/aws-ebs"}
# NodeVolumeLimits names unbound claims `<random prefix>-<namespace>/<claim>`: one prefix per plugin.
_HANDLE_PREFIX = "draxr-unbound-claim"
_MAX_UTILIZATION = 100
_SCORE_SHAPE = ((0, 100), (100, 0))  # VolumeBindingArgs' default shape, scaled to MaxNodeScore


class NodeLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


@dataclass(frozen=True, slots=True)
class VolumeVerdict:
    rejection: Status | None
    decision: VolumeDecision | None  # VolumeBinding's, when its Filter ran and the node passed


_PASS = VolumeVerdict(None, None)


@dataclass(frozen=True)
class VolumeCycle:
    """The four plugins' PreFilter states for one pod (None / False: the plugin skips)."""

    namespace: str
    pod_name: str
    pod_uid: str
    volumes: tuple[Volume, ...]
    rejected: Status | None = None
    # VolumeRestrictions
    restrictions: bool = False
    disk_volumes: tuple[Volume, ...] = ()
    rwop_conflict: bool = False
    # NodeVolumeLimits
    limits: bool = False
    # VolumeBinding
    binding: bool = False
    bound_claims: tuple[PersistentVolumeClaim, ...] = ()
    delay_claims: tuple[PersistentVolumeClaim, ...] = ()
    pvs_by_class: Mapping[str, tuple[PersistentVolume, ...]] = field(default_factory=dict)
    # VolumeZone: (pv name, label key, values)
    zone: tuple[tuple[str, str, frozenset[str]], ...] | None = None


def _not_found(resource: str, name: str) -> str:
    return f'{resource} "{name}" not found'


def _reject(plugin: str, reason: str, code: Code = UNRESOLVABLE) -> Status:
    return Status(code, plugin, (reason,))


# --------------------------------------------------------------------------- PreFilter


def prefilter(pod: Mapping[str, Any], storage: StorageState, nodes: Container[str]) -> VolumeCycle:
    """PreFilter of VolumeRestrictions, NodeVolumeLimits, VolumeBinding and VolumeZone, in the
    default profile's order: the first UnschedulableAndUnresolvable status ends the PreFilter."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    pod_name = str(meta.get("name") or "")
    pod_uid = str(meta.get("uid") or "")
    volumes = pod_volumes(pod)
    base = VolumeCycle(namespace, pod_name, pod_uid, volumes)
    if not volumes:
        return base
    restrictions = _restrictions_prefilter(volumes, storage, namespace, nodes)
    if isinstance(restrictions, Status):
        return replace_rejected(base, restrictions)
    disk_volumes, conflicts = restrictions
    limits = any(v.kind in ("pvc", "ephemeral", "gce", "ebs") for v in volumes)  # NodeVolumeLimits
    binding = _binding_prefilter(volumes, storage, namespace, pod_name, pod_uid)
    if isinstance(binding, Status):
        return replace_rejected(base, binding)
    topologies = _zone_prefilter(volumes, storage, namespace)
    if isinstance(topologies, Status):
        return replace_rejected(base, topologies)
    return VolumeCycle(
        namespace,
        pod_name,
        pod_uid,
        volumes,
        restrictions=bool(disk_volumes) or conflicts > 0,
        disk_volumes=disk_volumes,
        rwop_conflict=conflicts > 0,
        limits=limits,
        binding=binding is not None,
        bound_claims=binding.bound if binding else (),
        delay_claims=binding.delay if binding else (),
        pvs_by_class=binding.pvs_by_class if binding else {},
        zone=tuple(topologies) if topologies else None,
    )


def _restrictions_prefilter(
    volumes: tuple[Volume, ...], storage: StorageState, namespace: str, nodes: Container[str]
) -> Status | tuple[tuple[Volume, ...], int]:
    """VolumeRestrictions: the pod's disk volumes, and how many of its ReadWriteOncePod claims a pod
    on one of ``nodes`` already uses."""
    disk_volumes = tuple(v for v in volumes if v.kind in ("gce", "ebs", "iscsi", "rbd"))
    rwop: set[str] = set()
    for v in volumes:
        if v.kind != "pvc":
            continue
        pvc = storage.pvc(namespace, v.claim_name)
        if pvc is None:
            return _reject("VolumeRestrictions", _not_found("persistentvolumeclaim", v.claim_name))
        if "ReadWriteOncePod" in pvc.access_modes:
            rwop.add(pvc.name)
    return disk_volumes, sum(1 for name in rwop if storage.pvc_in_use(f"{namespace}/{name}", nodes))


@dataclass(frozen=True)
class _Binding:
    """VolumeBinding's PreFilter state: the bound claims, those that wait for the first consumer,
    and the volumes of their classes."""

    bound: tuple[PersistentVolumeClaim, ...]
    delay: tuple[PersistentVolumeClaim, ...]
    pvs_by_class: dict[str, tuple[PersistentVolume, ...]]


def _binding_prefilter(
    volumes: tuple[Volume, ...], storage: StorageState, namespace: str, pod_name: str, pod_uid: str
) -> Status | _Binding | None:
    """VolumeBinding (None: the pod has no claim, the plugin skips)."""
    claims: list[PersistentVolumeClaim] = []
    for v in volumes:
        if v.kind not in ("pvc", "ephemeral"):
            continue
        found = storage.assumed_pvc(namespace, v.claim_name)
        if found is None:
            if v.kind == "ephemeral":
                msg = f'waiting for ephemeral volume controller to create the persistentvolumeclaim "{v.claim_name}"'
            else:
                msg = _not_found("persistentvolumeclaim", v.claim_name)
            return _reject("VolumeBinding", msg)
        if found.phase == "Lost":
            msg = f'persistentvolumeclaim "{found.name}" bound to non-existent persistentvolume "{found.volume_name}"'
            return _reject("VolumeBinding", msg)
        if found.deleting:
            return _reject("VolumeBinding", f'persistentvolumeclaim "{found.name}" is being deleted')
        if v.kind == "ephemeral" and (found.namespace != namespace or found.controller_uid != pod_uid):
            msg = (
                f"PVC {found.namespace}/{found.name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
            )
            return _reject("VolumeBinding", msg)
        claims.append(found)
    if not claims:
        return None
    bound: list[PersistentVolumeClaim] = []
    delay: list[PersistentVolumeClaim] = []
    immediate = False
    for pvc in claims:
        if pvc.fully_bound:
            bound.append(pvc)
            continue
        sc = storage.classes.get(pvc.class_name) if pvc.class_name else None
        if sc is not None and sc.binding_mode is None:
            return Status(ERROR, "VolumeBinding", (f'VolumeBindingMode not set for StorageClass "{pvc.class_name}"',))
        if sc is not None and sc.binding_mode == "WaitForFirstConsumer" and not pvc.volume_name:
            delay.append(pvc)
        else:
            immediate = True
    if immediate:
        return _reject("VolumeBinding", ERR_UNBOUND_IMMEDIATE)
    return _Binding(
        tuple(bound), tuple(delay), {pvc.class_name: tuple(storage.pvs_of_class(pvc.class_name)) for pvc in delay}
    )


def _zone_prefilter(
    volumes: tuple[Volume, ...], storage: StorageState, namespace: str
) -> Status | list[tuple[str, str, frozenset[str]]]:
    """VolumeZone (persistentVolumeClaim volumes only): the topology terms of their volumes."""
    topologies: list[tuple[str, str, frozenset[str]]] = []
    for v in volumes:
        if v.kind != "pvc":
            continue
        if not v.claim_name:
            return _reject("VolumeZone", "PersistentVolumeClaim had no name")
        pvc = storage.pvc(namespace, v.claim_name)
        if pvc is None:
            return _reject("VolumeZone", _not_found("persistentvolumeclaim", v.claim_name))
        if not pvc.volume_name:
            if not pvc.class_name:
                return _reject("VolumeZone", "PersistentVolumeClaim had no pv name and storageClass name")
            sc = storage.classes.get(pvc.class_name)
            if sc is None:
                return _reject("VolumeZone", _not_found("storageclass.storage.k8s.io", pvc.class_name))
            if sc.binding_mode is None:
                return _reject("VolumeZone", f'VolumeBindingMode not set for StorageClass "{pvc.class_name}"')
            if sc.binding_mode == "WaitForFirstConsumer":
                continue
            return _reject("VolumeZone", "PersistentVolume had no name")
        pv = storage.pvs.get(pvc.volume_name)
        if pv is None:
            return _reject("VolumeZone", _not_found("persistentvolume", pvc.volume_name))
        topologies.extend(pv_topologies(pv))
    return topologies


def replace_rejected(cycle: VolumeCycle, rejection: Status) -> VolumeCycle:
    return VolumeCycle(cycle.namespace, cycle.pod_name, cycle.pod_uid, cycle.volumes, rejected=rejection)


def pv_topologies(pv: PersistentVolume) -> list[tuple[str, str, frozenset[str]]]:
    """VolumeZone's getPVTopologies: the PV's zone/region labels (values split on "__")."""
    out = []
    for key in _TOPOLOGY_LABELS:
        if key not in pv.labels:
            continue
        values = [z.strip() for z in pv.labels[key].split("__")]
        if any(not z for z in values):
            continue  # LabelZonesToSet fails: the label is ignored
        out.append((pv.name, key, frozenset(values)))
    return out


# --------------------------------------------------------------------------- Filter


def filter_node(cycle: VolumeCycle, storage: StorageState, node: NodeLike) -> VolumeVerdict:
    """The four Filters on one node, in order: the first rejection, and VolumeBinding's decision."""
    if cycle.rejected is not None:
        return VolumeVerdict(cycle.rejected, None)
    if not cycle.volumes:
        return _PASS
    if cycle.restrictions:
        if cycle.disk_volumes and _disk_conflict(cycle.disk_volumes, storage, node.name):
            return VolumeVerdict(_reject("VolumeRestrictions", ERR_DISK_CONFLICT, UNSCHEDULABLE), None)
        if cycle.rwop_conflict:
            return VolumeVerdict(_reject("VolumeRestrictions", ERR_RWOP_CONFLICT, UNSCHEDULABLE), None)
    if cycle.limits:
        limited = _volume_limits(cycle, storage, node.name)
        if limited is not None:
            return VolumeVerdict(limited, None)
    decision: VolumeDecision | None = None
    if cycle.binding:
        rejection, decision = find_pod_volumes(cycle, storage, node)
        if rejection is not None:
            return VolumeVerdict(rejection, None)
    if cycle.zone is not None and _zone_conflict(cycle.zone, node.labels):
        return VolumeVerdict(_reject("VolumeZone", ERR_ZONE_CONFLICT), None)
    return VolumeVerdict(None, decision)


# -- VolumeRestrictions


def _volume_conflict(v: Volume, other: Volume) -> bool:
    """isVolumeConflict for one pair of volumes."""
    if v.kind != other.kind:
        return False
    if v.kind == "gce" or v.kind == "iscsi":
        return v.disk == other.disk and not (v.read_only and other.read_only)
    if v.kind == "ebs":
        return v.disk == other.disk
    if v.kind == "rbd":
        return (
            bool(v.monitors & other.monitors)
            and v.pool == other.pool
            and v.disk == other.disk
            and not (v.read_only and other.read_only)
        )
    return False


def _disk_conflict(disks: Sequence[Volume], storage: StorageState, node: str) -> bool:
    for v in disks:
        for existing in storage.pods_on(node):
            if any(_volume_conflict(v, e) for e in existing.volumes):
                return True
    return False


# -- NodeVolumeLimits


def _driver_info(storage: StorageState, csi_node: CSINode | None, pvc: PersistentVolumeClaim) -> tuple[str, str]:
    """getCSIDriverInfo: (driver, volume handle) of a claim, ("", "") when it is not counted."""
    if pvc.volume_name:
        pv = storage.pvs.get(pvc.volume_name)
        if pv is not None:
            if pv.csi is not None:
                return pv.csi
            return "", ""  # in-tree PV: not translated (see the module docstring)
    if not pvc.class_name:
        return "", ""
    sc = storage.classes.get(pvc.class_name)
    if sc is None:
        return "", ""
    handle = f"{_HANDLE_PREFIX}-{pvc.namespace}/{pvc.name}"
    if sc.provisioner in _CSI_NAME:
        if csi_node is None or sc.provisioner not in _MIGRATION_ON:
            return "", ""
        return _CSI_NAME[sc.provisioner], handle
    return sc.provisioner, handle


def _inline_handle(v: Volume) -> str | None:
    """TranslateInTreeInlineVolumeToCSI's volume handle; None when the ID does not translate."""
    if v.kind == "gce":
        return f"projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{v.disk}"
    volume_id = v.disk
    if not volume_id.startswith("aws://"):
        return volume_id
    path = volume_id[len("aws://") :]
    path = path.split("/", 1)[1] if "/" in path else ""
    aws_id = path.strip("/")
    if not aws_id.startswith("vol-") or "/" in aws_id:
        return None
    return aws_id


def _attachable(
    storage: StorageState,
    csi_node: CSINode | None,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    volumes: Sequence[Volume],
    new_pod: bool,
    into: dict[str, str],
) -> Status | None:
    """filterAttachableVolumes: unique volume name -> driver, for the volumes the limits count."""
    for v in volumes:
        if v.kind in _INLINE_PLUGIN:
            if csi_node is None:  # isCSIMigrationOn: a CSINode for the node suffices
                continue
            handle = _inline_handle(v)
            if handle is None:
                msg = f"converting volume({v.name}) from inline to csi: invalid AWS volume ID {v.disk!r}"
                return Status(ERROR, "NodeVolumeLimits", (msg,))
            driver = _CSI_NAME[_INLINE_PLUGIN[v.kind]]
            into[f"{driver}/{handle}"] = driver
            continue
        if v.kind not in ("pvc", "ephemeral"):
            continue
        if not v.claim_name:
            return Status(ERROR, "NodeVolumeLimits", ("PersistentVolumeClaim had no name",))
        pvc = storage.pvc(namespace, v.claim_name)
        if pvc is None:
            if new_pod:
                msg = f"looking up PVC {namespace}/{v.claim_name}: " + _not_found("persistentvolumeclaim", v.claim_name)
                return _reject("NodeVolumeLimits", msg)
            continue
        if v.kind == "ephemeral" and (pvc.namespace != namespace or pvc.controller_uid != pod_uid):
            msg = f"PVC {pvc.namespace}/{pvc.name} was not created for pod {namespace}/{pod_name} (pod is not owner)"
            return Status(ERROR, "NodeVolumeLimits", (msg,))
        driver, handle = _driver_info(storage, csi_node, pvc)
        if not driver or not handle:
            continue
        into[f"{driver}/{handle}"] = driver
    return None


def _volume_limits(cycle: VolumeCycle, storage: StorageState, node: str) -> Status | None:
    csi_node = storage.csi_nodes.get(node)
    new: dict[str, str] = {}
    failed = _attachable(storage, csi_node, cycle.namespace, cycle.pod_name, cycle.pod_uid, cycle.volumes, True, new)
    if failed is not None:
        return failed
    if not new:
        return None
    # VolumeLimitScaling: a driver that opts in keeps pods off nodes where it is not installed.
    for driver in new.values():
        d = storage.csi_drivers.get(driver)
        if d is None or not d.prevent_scheduling_if_missing:
            continue
        if csi_node is None or driver not in csi_node.drivers:
            return _reject("NodeVolumeLimits", f"{driver} CSI driver is not installed on the node", UNSCHEDULABLE)
    if csi_node is None or not csi_node.limits:
        return None
    attached: dict[str, str] = {}
    for existing in storage.pods_on(node):
        err = _attachable(
            storage, csi_node, existing.namespace, existing.name, existing.uid, existing.volumes, False, attached
        )
        if err is not None:
            return Status(ERROR, "NodeVolumeLimits", err.reasons)
    counts: dict[str, int] = {}
    for unique, driver in attached.items():
        new.pop(unique, None)
        counts[driver] = counts.get(driver, 0) + 1
    # VolumeAttachments of the node count unless a pod there uses the volume (they do not take the
    # incoming pod's volumes out of its new ones, as upstream).
    attachments: dict[str, str] = {}
    for va in storage.attachments_on(node):
        if not va.attacher or va.pv_name is None:
            continue
        pv = storage.pvs.get(va.pv_name)
        if pv is None or pv.csi is None:
            continue
        attachments[f"{va.attacher}/{pv.csi[1]}"] = va.attacher
    for unique, driver in attachments.items():
        if unique not in attached:
            counts[driver] = counts.get(driver, 0) + 1
    wanted: dict[str, int] = {}
    for driver in new.values():
        wanted[driver] = wanted.get(driver, 0) + 1
    for driver, count in wanted.items():
        limit = csi_node.limits.get(driver)
        if limit is not None and counts.get(driver, 0) + count > limit:
            return _reject("NodeVolumeLimits", ERR_MAX_VOLUME_COUNT, UNSCHEDULABLE)
    return None


# -- VolumeBinding


def pv_matches_node(pv: PersistentVolume, labels: Mapping[str, str]) -> bool:
    """CheckNodeAffinity: the PV's required node affinity against the node's labels only (no name:
    matchFields are not evaluated); an invalid selector does not match."""
    if pv.node_affinity is None:
        return True
    try:
        return selector_matches(pv.node_affinity, {"metadata": {"labels": labels}})
    except NodeSelectorError:
        return False


def find_matching_volume(
    claim: PersistentVolumeClaim,
    pvs: Sequence[PersistentVolume],
    labels: Mapping[str, str],
    excluded: Container[str],
) -> PersistentVolume | None:
    """FindMatchingVolume on the scheduler's path: the PV pre-bound to the claim if there is one
    (None if it does not fit the node), else the smallest available PV that fits (the first of
    equal ones). ValueError when the claim's selector is invalid."""
    requested = claim.request or Decimal(0)
    selector = Selector.from_api(claim.selector) if claim.selector is not None else None
    smallest: PersistentVolume | None = None
    for pv in pvs:
        if pv.name in excluded:
            continue
        if pv.claim_ref is not None and not pv.bound_to(claim):
            continue
        if pv.capacity < requested:
            continue
        if pv.volume_mode != claim.volume_mode:
            continue
        if claim.attributes_class != pv.attributes_class:
            continue
        if pv.deleting:
            continue
        fits_node = pv_matches_node(pv, labels)
        if pv.bound_to(claim):
            return pv if fits_node else None
        if pv.phase != "Available":
            continue
        if selector is not None and not selector.matches(pv.labels):
            continue
        if pv.class_name != claim.class_name or not fits_node:
            continue
        if not all(m in pv.access_modes for m in claim.access_modes):
            continue
        if smallest is None or smallest.capacity > pv.capacity:
            smallest = pv
    return smallest


def _topology_matches(terms: Sequence[Mapping[str, Any]], labels: Mapping[str, str]) -> bool:
    """MatchTopologySelectorTerms: no terms match everything; an empty term nothing."""
    if not terms:
        return True
    for term in terms:
        exprs = term.get("matchLabelExpressions") or ()
        if not exprs:
            continue
        if all(labels.get(str(e.get("key"))) in [str(x) for x in e.get("values") or ()] for e in exprs):
            return True
    return False


def _enough_capacity(
    storage: StorageState, provisioner: str, claim: PersistentVolumeClaim, class_name: str, labels: Mapping[str, str]
) -> tuple[bool, StorageCapacity | None]:
    """hasEnoughCapacity: only for CSI drivers with storageCapacity: true; the first
    CSIStorageCapacity of the class, accessible from the node, with room for the claim."""
    if claim.request is None:
        return True, None
    driver = storage.csi_drivers.get(provisioner)
    if driver is None or not driver.storage_capacity:
        return True, None
    size = value(claim.request)
    for cap in storage.capacities.values():
        if cap.class_name != class_name:
            continue
        limit = cap.volume_limit
        if limit is None or value(limit) < size or cap.node_topology is None:
            continue
        try:
            accessible = Selector.from_api(cap.node_topology).matches(labels)
        except ValueError:
            accessible = False
        if accessible:
            return True, cap
    return False, None


def find_pod_volumes(
    cycle: VolumeCycle, storage: StorageState, node: NodeLike
) -> tuple[Status | None, VolumeDecision | None]:
    """The binder's FindPodVolumes on one node, as VolumeBinding's Filter reports it."""
    bound_ok = pvs_found = unbound_ok = storage_ok = True
    static: list[tuple[PersistentVolumeClaim, PersistentVolume]] = []
    dynamic: list[tuple[PersistentVolumeClaim, StorageCapacity | None]] = []
    labels = node.labels

    def verdict() -> tuple[Status | None, VolumeDecision | None]:
        reasons = []
        if not bound_ok:
            reasons.append(ERR_NODE_CONFLICT)
        if not unbound_ok:
            reasons.append(ERR_BIND_CONFLICT)
        if not storage_ok:
            reasons.append(ERR_NOT_ENOUGH_SPACE)
        if not pvs_found:
            reasons.append(ERR_PV_NOT_EXIST)
        if reasons:
            return Status(UNRESOLVABLE, "VolumeBinding", tuple(reasons)), None
        return None, VolumeDecision(tuple(static), tuple(dynamic))

    for pvc in cycle.bound_claims:
        pv = storage.pv(pvc.volume_name)
        if pv is None:
            pvs_found = False
            break
        if not pv_matches_node(pv, labels):
            bound_ok = False
            break

    if cycle.delay_claims:
        to_provision: list[PersistentVolumeClaim] = []
        to_match: list[PersistentVolumeClaim] = []
        for pvc in cycle.delay_claims:
            if pvc.selected_node is not None:
                if pvc.selected_node != node.name:
                    unbound_ok = False
                    return verdict()
                to_provision.append(pvc)
            else:
                to_match.append(pvc)
        if to_match:
            chosen: set[str] = set()
            unbound_ok = True
            for pvc in sorted(to_match, key=lambda c: c.request or Decimal(0)):
                try:
                    pv = find_matching_volume(pvc, cycle.pvs_by_class.get(pvc.class_name, ()), labels, chosen)
                except ValueError as e:
                    msg = f"error creating internal label selector for claim: {pvc.key}: {e}"
                    return Status(ERROR, "VolumeBinding", (msg,)), None
                if pv is None:
                    to_provision.append(pvc)
                    unbound_ok = False
                    continue
                chosen.add(pv.name)
                static.append((pvc, pv))
        if to_provision:
            unbound_ok, storage_ok = True, True
            for pvc in to_provision:
                sc = storage.classes.get(pvc.class_name)
                if sc is None:
                    msg = f'running "VolumeBinding" filter plugin: failed to find storage class "{pvc.class_name}"'
                    return Status(ERROR, "VolumeBinding", (msg,)), None
                if not sc.provisioner or sc.provisioner == NO_PROVISIONER:
                    unbound_ok = False
                    dynamic.clear()
                    break
                if not _topology_matches(sc.allowed_topologies, labels):
                    unbound_ok = False
                    dynamic.clear()
                    break
                enough, capacity = _enough_capacity(storage, sc.provisioner, pvc, sc.name, labels)
                if not enough:
                    storage_ok = False
                    dynamic.clear()
                    break
                dynamic.append((pvc, capacity))
    return verdict()


# -- VolumeZone


def _zone_conflict(topologies: Sequence[tuple[str, str, frozenset[str]]], labels: Mapping[str, str]) -> bool:
    if not any(k in labels for k in _TOPOLOGY_LABELS):
        return False
    for _, key, values in topologies:
        v = labels.get(key)
        if v is None:
            v = labels.get(_GA_LABEL.get(key, key))
        if v is None or v not in values:
            return True
    return False


# --------------------------------------------------------------------------- Score


def _shape_score(utilization: int) -> int:
    """helper.BuildBrokenLinearFunction on the default shape (integer maths as upstream)."""
    shape = _SCORE_SHAPE
    for i, (u, s) in enumerate(shape):
        if utilization <= u:
            if i == 0:
                return s
            pu, ps = shape[i - 1]
            return ps + go_div((s - ps) * (utilization - pu), u - pu)
    return shape[-1][1]


def _class_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return _shape_score(_MAX_UTILIZATION)
    return _shape_score(go_div(requested * _MAX_UTILIZATION, capacity))


def decision_score(decision: VolumeDecision | None) -> int:
    """VolumeBinding's Score on a node (StorageCapacityScoring on, the default args): static
    bindings grouped by the PV's class when there are any, else the provisions with a tracked
    capacity by the claim's class; per class the utilisation's score, averaged and rounded."""
    if decision is None:
        return 0
    classes: dict[str, list[int]] = {}
    if decision.static_bindings:
        for pvc, pv in decision.static_bindings:
            entry = classes.setdefault(pv.spec_class, [0, 0])
            entry[0] += value(pvc.request) if pvc.request is not None else 0
            entry[1] += value(pv.capacity)
    else:
        for pvc, cap in decision.provisions:
            if cap is None:
                continue
            entry = classes.setdefault(pvc.spec_class or "", [0, 0])
            entry[1] = value(cap.capacity) if cap.capacity is not None else 0
            entry[0] += value(pvc.request) if pvc.request is not None else 0
    if not classes:
        return 0
    total = sum(_class_score(r, c) for r, c in classes.values())
    n = len(classes)
    return (2 * total + n) // (2 * n)  # math.Round(total / n): class scores are >= 0


def score_nodes(cycle: VolumeCycle, decisions: Mapping[str, VolumeDecision | None]) -> dict[str, int]:
    """VolumeBinding's scores of the feasible nodes (no normalisation: the raw 0..100)."""
    if not cycle.binding:
        return dict.fromkeys(decisions, 0)
    return {node: decision_score(d) for node, d in decisions.items()}


# --------------------------------------------------------------------------- the binder's PreBind checks


def all_bound(pod: Mapping[str, Any], storage: StorageState) -> bool:
    """arePodVolumesBound (Reserve's allBound: PreBind has nothing to do): every claim of the pod
    fully bound, in the assume cache's view."""
    meta = pod.get("metadata") or {}
    namespace, uid = str(meta.get("namespace") or "default"), str(meta.get("uid") or "")
    for vol in pod_volumes(pod):
        if vol.kind not in ("pvc", "ephemeral"):
            continue
        pvc = storage.assumed_pvc(namespace, vol.claim_name)
        if pvc is None or not pvc.fully_bound:
            return False
        if vol.kind == "ephemeral" and pvc.controller_uid != uid:
            return False
    return True


@dataclass(frozen=True, slots=True)
class BindingProgress:
    """checkBindings' answer: done, or an error (binding failed: roll back and retry the pod), or
    neither (wait: poll again, upstream every second up to VolumeBindingArgs' 600 s)."""

    done: bool
    error: str | None = None


def _older(written: str | None, seen: str | None) -> bool:
    """CompareResourceVersion(written, seen) > 0: the watch has not delivered our write yet."""
    try:
        return written is not None and seen is not None and int(written) > int(seen)
    except ValueError:
        return False


def binding_progress(
    storage: StorageState,
    decision: VolumeDecision,
    node_name: str,
    node_labels: Mapping[str, str],
    written: Mapping[str, str] | None = None,
) -> BindingProgress:
    """The binder's checkBindings after PreBind's writes, on the API objects (not the assumptions).
    ``written``: resourceVersions the writes returned, by "pv/<name>" and "pvc/<namespace>/<name>"."""
    written = written or {}
    for pvc0, pv0 in decision.static_bindings:
        pv = storage.pvs.get(pv0.name)
        if pv is None:
            return BindingProgress(False, f'failed to check binding: persistentvolumes "{pv0.name}" not found')
        pvc = storage.pvc(pvc0.namespace, pvc0.name)
        if pvc is None:
            return BindingProgress(False, f'failed to check binding: persistentvolumeclaims "{pvc0.key}" not found')
        if _older(written.get(f"pv/{pv.name}"), pv.resource_version):
            return BindingProgress(False)
        if not pv_matches_node(pv, node_labels):
            msg = f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": no matching NodeSelectorTerms'
            return BindingProgress(False, msg)
        if pv.claim_ref is None or not pv.claim_ref.uid:
            return BindingProgress(False, f'ClaimRef got reset for pv "{pv.name}"')
        if not pvc.fully_bound:
            return BindingProgress(False)
    for claim, _ in decision.provisions:
        pvc = storage.pvc(claim.namespace, claim.name)
        if pvc is None:
            return BindingProgress(
                False, f'failed to check provisioning pvc: persistentvolumeclaims "{claim.key}" not found'
            )
        if _older(written.get(f"pvc/{pvc.key}"), pvc.resource_version):
            return BindingProgress(False)
        if pvc.selected_node != node_name:
            if pvc.selected_node is None and not (pvc.obj.get("metadata") or {}).get("annotations"):
                return BindingProgress(False, f'selectedNode annotation reset for PVC "{pvc.name}"')
            return BindingProgress(False, f'provisioning failed for PVC "{pvc.name}"')
        if pvc.volume_name:
            pv = storage.pvs.get(pvc.volume_name)
            if pv is None:
                return BindingProgress(False)  # not delivered yet
            if not pv_matches_node(pv, node_labels):
                msg = f'pv "{pv.name}" node affinity doesn\'t match node "{node_name}": no matching NodeSelectorTerms'
                return BindingProgress(False, msg)
        if not pvc.fully_bound:
            return BindingProgress(False)
    return BindingProgress(True)
