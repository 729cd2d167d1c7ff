"""The storage objects kube-scheduler's volume plugins read, as one pure in-memory view.

``StorageState`` holds PersistentVolumes, PersistentVolumeClaims, StorageClasses, CSINodes,
CSIDrivers, CSIStorageCapacities and VolumeAttachments, each parsed once from its API dict on
upsert (the fields the plugins of kube-scheduler 1.37.2 read, see draxr.core.volumes), plus the
volumes of the pods bound to nodes (VolumeRestrictions' disk conflicts and ReadWriteOncePod users,
NodeVolumeLimits' attached volumes).

It also is VolumeBinding's assume cache (upstream's passive assume cache): ``assume(decision,
node)`` records in memory the PV bindings (claimRef) and the provisioning requests (the PVC's
selected-node annotation) a scheduling cycle chose, so that the next cycle cannot hand the same
PV to another claim; ``forget(decision)`` drops them. An assumption also ends when the API object
changes (an upsert with another resourceVersion), as upstream's does: the API's object then wins.

Pure: no I/O. The shell feeds it watch events (``upsert_*`` / ``remove_*``; pods through
``upsert_pod`` / ``remove_pod``, including pods it has assumed onto a node).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from draxr.core.quantity import parse_quantity

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "BETA_STORAGE_CLASS",
    "MIGRATED_PLUGINS",
    "NO_PROVISIONER",
    "CSIDriver",
    "CSINode",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodVolumes",
    "StorageCapacity",
    "StorageClass",
    "StorageState",
    "Volume",
    "VolumeAttachment",
    "VolumeDecision",
    "bind_volume_to_claim",
    "bound_pv_object",
    "pod_volumes",
    "selected_node_pvc_object",
]

ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
MIGRATED_PLUGINS = "storage.alpha.kubernetes.io/migrated-plugins"
NO_PROVISIONER = "kubernetes.io/no-provisioner"

_EMPTY: Mapping[str, str] = {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _quantity(q: Any) -> Decimal | None:
    if q is None:
        return None
    try:
        return parse_quantity(q)
    except ValueError:
        return None


def _str_map(m: Mapping[str, Any] | None) -> Mapping[str, str]:
    return {str(k): str(v) for k, v in m.items()} if m else _EMPTY


# --------------------------------------------------------------------------- objects


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str  # "" for a PV pre-bound by its user to a claim by name


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    resource_version: str | None
    class_name: str  # GetPersistentVolumeClass: the beta annotation first, then spec.storageClassName
    spec_class: str  # spec.storageClassName (what VolumeBinding's score groups static bindings by)
    capacity: Decimal  # spec.capacity.storage (0 when unset, as a zero Quantity compares)
    access_modes: frozenset[str]
    volume_mode: str  # "Filesystem" when unset
    claim_ref: ClaimRef | None
    phase: str
    labels: Mapping[str, str]
    node_affinity: Mapping[str, Any] | None  # spec.nodeAffinity.required (a v1 NodeSelector)
    deleting: bool
    csi: tuple[str, str] | None  # (driver, volumeHandle) of a CSI source
    attributes_class: str  # spec.volumeAttributesClassName, "" when unset
    obj: Mapping[str, Any]

    def bound_to(self, claim: PersistentVolumeClaim) -> bool:
        """IsVolumeBoundToClaim: pre-bound or bound to the claim (the UID only when the ref has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid

    @classmethod
    def from_api(cls, pv: Mapping[str, Any]) -> PersistentVolume:
        meta, spec = _meta(pv), pv.get("spec") or {}
        annotations = meta.get("annotations") or {}
        spec_class = str(spec.get("storageClassName") or "")
        ref = spec.get("claimRef")
        claim_ref = (
            ClaimRef(str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
            if ref is not None
            else None
        )
        csi = spec.get("csi")
        return cls(
            name=str(meta.get("name") or ""),
            resource_version=None if meta.get("resourceVersion") is None else str(meta["resourceVersion"]),
            class_name=str(annotations[BETA_STORAGE_CLASS]) if BETA_STORAGE_CLASS in annotations else spec_class,
            spec_class=spec_class,
            capacity=_quantity((spec.get("capacity") or {}).get("storage")) or Decimal(0),
            access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
            volume_mode=str(spec.get("volumeMode") or "Filesystem"),
            claim_ref=claim_ref,
            phase=str((pv.get("status") or {}).get("phase") or ""),
            labels=_str_map(meta.get("labels")),
            node_affinity=(spec.get("nodeAffinity") or {}).get("required"),
            deleting=meta.get("deletionTimestamp") is not None,
            csi=(str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")) if csi is not None else None,
            attributes_class=str(spec.get("volumeAttributesClassName") or ""),
            obj=pv,
        )


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str | None
    class_name: str  # GetPersistentVolumeClaimClass: the beta annotation first, then spec.storageClassName
    spec_class: str | None  # spec.storageClassName as written (None: unset)
    volume_name: str
    bind_completed: bool  # the PV controller's pv.kubernetes.io/bind-completed annotation
    phase: str
    deleting: bool
    access_modes: tuple[str, ...]
    request: Decimal | None  # spec.resources.requests.storage, None when absent
    volume_mode: str
    selector: Mapping[str, Any] | None
    selected_node: str | None  # volume.kubernetes.io/selected-node, None when absent
    controller_uid: str | None  # the UID of its controller owner (generic ephemeral volumes: the pod)
    attributes_class: str
    obj: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """isPVCFullyBound: a volume name and the PV controller's bind-completed annotation."""
        return bool(self.volume_name) and self.bind_completed

    @classmethod
    def from_api(cls, pvc: Mapping[str, Any]) -> PersistentVolumeClaim:
        meta, spec = _meta(pvc), pvc.get("spec") or {}
        annotations = meta.get("annotations") or {}
        spec_class = spec.get("storageClassName")
        if BETA_STORAGE_CLASS in annotations:
            class_name = str(annotations[BETA_STORAGE_CLASS])
        else:
            class_name = str(spec_class or "")
        requests = (spec.get("resources") or {}).get("requests") or {}
        owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=None if meta.get("resourceVersion") is None else str(meta["resourceVersion"]),
            class_name=class_name,
            spec_class=None if spec_class is None else str(spec_class),
            volume_name=str(spec.get("volumeName") or ""),
            bind_completed=ANN_BIND_COMPLETED in annotations,
            phase=str((pvc.get("status") or {}).get("phase") or ""),
            deleting=meta.get("deletionTimestamp") is not None,
            access_modes=tuple(str(m) for m in spec.get("accessModes") or ()),
            request=_quantity(requests["storage"]) if "storage" in requests else None,
            volume_mode=str(spec.get("volumeMode") or "Filesystem"),
            selector=spec.get("selector"),
            selected_node=str(annotations[ANN_SELECTED_NODE]) if ANN_SELECTED_NODE in annotations else None,
            controller_uid=str(owner.get("uid") or "") if owner is not None else None,
            attributes_class=str(spec.get("volumeAttributesClassName") or ""),
            obj=pvc,
        )


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str
    binding_mode: str | None  # volumeBindingMode (the API server defaults it to Immediate)
    allowed_topologies: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_api(cls, sc: Mapping[str, Any]) -> StorageClass:
        mode = sc.get("volumeBindingMode")
        return cls(
            name=str(_meta(sc).get("name") or ""),
            provisioner=str(sc.get("provisioner") or ""),
            binding_mode=None if mode is None else str(mode),
            allowed_topologies=tuple(sc.get("allowedTopologies") or ()),
        )


@dataclass(frozen=True, slots=True)
class CSINode:
    name: str
    drivers: tuple[str, ...]
    limits: Mapping[str, int]  # driver -> allocatable.count, for the drivers that publish one
    migrated_plugins: frozenset[str]

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> CSINode:
        meta = _meta(obj)
        drivers = list((obj.get("spec") or {}).get("drivers") or ())
        limits = {}
        for d in drivers:
            count = (d.get("allocatable") or {}).get("count")
            if count is not None:
                limits[str(d.get("name") or "")] = int(count)
        migrated = str((meta.get("annotations") or {}).get(MIGRATED_PLUGINS) or "")
        return cls(
            name=str(meta.get("name") or ""),
            drivers=tuple(str(d.get("name") or "") for d in drivers),
            limits=limits,
            migrated_plugins=frozenset(migrated.split(",")) if migrated else frozenset(),
        )


@dataclass(frozen=True, slots=True)
class CSIDriver:
    name: str
    storage_capacity: bool
    prevent_scheduling_if_missing: bool

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> CSIDriver:
        spec = obj.get("spec") or {}
        return cls(
            name=str(_meta(obj).get("name") or ""),
            storage_capacity=spec.get("storageCapacity") is True,
            prevent_scheduling_if_missing=spec.get("preventPodSchedulingIfMissing") is True,
        )


@dataclass(frozen=True, slots=True)
class StorageCapacity:
    namespace: str
    name: str
    class_name: str
    node_topology: Mapping[str, Any] | None  # a LabelSelector; None: accessible from no node
    capacity: Decimal | None
    maximum_volume_size: Decimal | None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def volume_limit(self) -> Decimal | None:
        """volumeLimit: maximumVolumeSize when set (more precise), else capacity."""
        return self.maximum_volume_size if self.maximum_volume_size is not None else self.capacity

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> StorageCapacity:
        meta = _meta(obj)
        return cls(
            namespace=str(meta.get("namespace") or "default"),
            name=str(meta.get("name") or ""),
            class_name=str(obj.get("storageClassName") or ""),
            node_topology=obj.get("nodeTopology"),
            capacity=_quantity(obj.get("capacity")),
            maximum_volume_size=_quantity(obj.get("maximumVolumeSize")),
        )


@dataclass(frozen=True, slots=True)
class VolumeAttachment:
    name: str
    node_name: str
    attacher: str
    pv_name: str | None

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> VolumeAttachment:
        spec = obj.get("spec") or {}
        pv = (spec.get("source") or {}).get("persistentVolumeName")
        return cls(
            name=str(_meta(obj).get("name") or ""),
            node_name=str(spec.get("nodeName") or ""),
            attacher=str(spec.get("attacher") or ""),
            pv_name=None if pv is None else str(pv),
        )


# --------------------------------------------------------------------------- pod volumes


@dataclass(frozen=True, slots=True)
class Volume:
    """One entry of a pod's spec.volumes, as the volume plugins tell them apart.

    kind: "pvc" (persistentVolumeClaim), "ephemeral" (generic ephemeral: its claim is
    `<pod>-<volume>`), "gce" (gcePersistentDisk), "ebs" (awsElasticBlockStore), "iscsi", "rbd",
    or "other" (no plugin looks at it).
    """

    name: str
    kind: str
    claim_name: str = ""  # pvc and ephemeral
    disk: str = ""  # gce pdName, ebs volumeID, iscsi iqn, rbd image
    read_only: bool = False
    pool: str = ""  # rbd
    monitors: frozenset[str] = frozenset()  # rbd


def pod_volumes(pod: Mapping[str, Any]) -> tuple[Volume, ...]:
    pod_name = str(_meta(pod).get("name") or "")
    out: list[Volume] = []
    for v in (pod.get("spec") or {}).get("volumes") or ():
        name = str(v.get("name") or "")
        if v.get("persistentVolumeClaim") is not None:
            out.append(Volume(name, "pvc", claim_name=str(v["persistentVolumeClaim"].get("claimName") or "")))
        elif v.get("ephemeral") is not None:
            out.append(Volume(name, "ephemeral", claim_name=f"{pod_name}-{name}"))
        elif (src := v.get("gcePersistentDisk")) is not None:
            out.append(Volume(name, "gce", disk=str(src.get("pdName") or ""), read_only=src.get("readOnly") is True))
        elif (src := v.get("awsElasticBlockStore")) is not None:
            out.append(Volume(name, "ebs", disk=str(src.get("volumeID") or ""), read_only=src.get("readOnly") is True))
        elif (src := v.get("iscsi")) is not None:
            out.append(Volume(name, "iscsi", disk=str(src.get("iqn") or ""), read_only=src.get("readOnly") is True))
        elif (src := v.get("rbd")) is not None:
            out.append(
                Volume(
                    name,
                    "rbd",
                    disk=str(src.get("image") or ""),
                    read_only=src.get("readOnly") is True,
                    pool=str(src.get("pool") or ""),
                    monitors=frozenset(str(m) for m in src.get("monitors") or ()),
                )
            )
        else:
            out.append(Volume(name, "other"))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """A pod bound to a node (not finished), as far as the volume plugins look at it."""

    uid: str
    namespace: str
    name: str
    node_name: str
    volumes: tuple[Volume, ...]

    @property
    def pvc_keys(self) -> tuple[str, ...]:
        """PodPVCKeys: `namespace/claim` of its persistentVolumeClaim volumes (not ephemeral ones)."""
        return tuple(f"{self.namespace}/{v.claim_name}" for v in self.volumes if v.kind == "pvc")


@dataclass(frozen=True, slots=True)
class VolumeDecision:
    """What VolumeBinding's FindPodVolumes decided for one node (upstream PodVolumes): the static
    bindings (claim -> an available PV, in claim-size order) and the claims to provision there
    (with the CSIStorageCapacity that had room, when capacity is tracked)."""

    static_bindings: tuple[tuple[PersistentVolumeClaim, PersistentVolume], ...] = ()
    provisions: tuple[tuple[PersistentVolumeClaim, StorageCapacity | None], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.static_bindings and not self.provisions


# --------------------------------------------------------------------------- the state


class StorageState:
    def __init__(self) -> None:
        self.pvs: dict[str, PersistentVolume] = {}
        self.pvcs: dict[str, PersistentVolumeClaim] = {}  # by namespace/name
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        self.csi_drivers: dict[str, CSIDriver] = {}
        self.capacities: dict[str, StorageCapacity] = {}  # by namespace/name, in arrival order
        self.attachments: dict[str, VolumeAttachment] = {}
        self.pods: dict[str, PodVolumes] = {}  # by uid: pods bound to a node, not finished
        self._by_class: dict[str, dict[str, None]] = {}  # PV class -> PV names (arrival order)
        self._on_node: dict[str, dict[str, PodVolumes]] = {}
        self._attached: dict[str, dict[str, VolumeAttachment]] = {}
        self._pvc_users: dict[str, dict[str, str]] = {}  # namespace/claim -> pod uid -> node
        self._assumed_pvs: dict[str, PersistentVolume] = {}
        self._assumed_pvcs: dict[str, PersistentVolumeClaim] = {}

    # -- PersistentVolumes

    def upsert_pv(self, obj: Mapping[str, Any]) -> PersistentVolume:
        pv = PersistentVolume.from_api(obj)
        old = self.pvs.get(pv.name)
        if old is not None and old.class_name != pv.class_name:
            self._by_class.get(old.class_name, {}).pop(pv.name, None)
        self.pvs[pv.name] = pv
        self._by_class.setdefault(pv.class_name, {})[pv.name] = None
        assumed = self._assumed_pvs.get(pv.name)
        if assumed is not None and assumed.resource_version != pv.resource_version:
            del self._assumed_pvs[pv.name]  # the API object is newer: the assumption expires
        return pv

    def remove_pv(self, name: str) -> None:
        pv = self.pvs.pop(name, None)
        if pv is not None:
            self._by_class.get(pv.class_name, {}).pop(name, None)
        self._assumed_pvs.pop(name, None)

    def pv(self, name: str) -> PersistentVolume | None:
        """The PV as the assume cache returns it: the assumed binding if there is one."""
        if name not in self.pvs:
            return None
        return self._assumed_pvs.get(name) or self.pvs[name]

    def pvs_of_class(self, class_name: str) -> list[PersistentVolume]:
        """ListPVs: every PV of the class, assumed bindings included."""
        return [self._assumed_pvs.get(n) or self.pvs[n] for n in self._by_class.get(class_name, ())]

    # -- PersistentVolumeClaims

    def upsert_pvc(self, obj: Mapping[str, Any]) -> PersistentVolumeClaim:
        pvc = PersistentVolumeClaim.from_api(obj)
        self.pvcs[pvc.key] = pvc
        assumed = self._assumed_pvcs.get(pvc.key)
        if assumed is not None and assumed.resource_version != pvc.resource_version:
            del self._assumed_pvcs[pvc.key]
        return pvc

    def remove_pvc(self, namespace: str, name: str) -> None:
        self.pvcs.pop(f"{namespace}/{name}", None)
        self._assumed_pvcs.pop(f"{namespace}/{name}", None)

    def pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The claim as the listers see it (the API's object, not an assumption)."""
        return self.pvcs.get(f"{namespace}/{name}")

    def assumed_pvc(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        """The claim as VolumeBinding's assume cache returns it (with an assumed selected node)."""
        key = f"{namespace}/{name}"
        if key not in self.pvcs:
            return None
        return self._assumed_pvcs.get(key) or self.pvcs[key]

    # -- classes, CSI objects, attachments

    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        sc = StorageClass.from_api(obj)
        self.classes[sc.name] = sc

    def remove_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_csi_node(self, obj: Mapping[str, Any]) -> None:
        n = CSINode.from_api(obj)
        self.csi_nodes[n.name] = n

    def remove_csi_node(self, name: str) -> None:
        self.csi_nodes.pop(name, None)

    def upsert_csi_driver(self, obj: Mapping[str, Any]) -> None:
        d = CSIDriver.from_api(obj)
        self.csi_drivers[d.name] = d

    def remove_csi_driver(self, name: str) -> None:
        self.csi_drivers.pop(name, None)

    def upsert_capacity(self, obj: Mapping[str, Any]) -> None:
        c = StorageCapacity.from_api(obj)
        self.capacities[c.key] = c

    def remove_capacity(self, namespace: str, name: str) -> None:
        self.capacities.pop(f"{namespace}/{name}", None)

    def upsert_attachment(self, obj: Mapping[str, Any]) -> None:
        va = VolumeAttachment.from_api(obj)
        self.remove_attachment(va.name)
        self.attachments[va.name] = va
        self._attached.setdefault(va.node_name, {})[va.name] = va

    def remove_attachment(self, name: str) -> None:
        old = self.attachments.pop(name, None)
        if old is not None:
            self._attached.get(old.node_name, {}).pop(name, None)

    def attachments_on(self, node: str) -> Iterable[VolumeAttachment]:
        return self._attached.get(node, {}).values()

    # -- pods

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """A pod event: kept while bound to a node and not Succeeded/Failed (terminating pods count,
        as in kube-scheduler's cache); anything else removes it."""
        meta, spec = _meta(pod), pod.get("spec") or {}
        uid = str(meta.get("uid") or "")
        node = str(spec.get("nodeName") or "")
        phase = (pod.get("status") or {}).get("phase")
        self.remove_pod(uid)
        if not node or phase in ("Succeeded", "Failed"):
            return
        volumes = tuple(v for v in pod_volumes(pod) if v.kind != "other")
        self.place_pod(
            PodVolumes(uid, str(meta.get("namespace") or "default"), str(meta.get("name") or ""), node, volumes)
        )

    def place_pod(self, entry: PodVolumes) -> None:
        """A pod placed on ``entry.node_name`` (bound, or assumed by a cycle), with the volumes
        a plugin looks at (ClusterState keeps this up to date from its pods)."""
        self.remove_pod(entry.uid)
        if not entry.volumes:
            return
        self.pods[entry.uid] = entry
        self._on_node.setdefault(entry.node_name, {})[entry.uid] = entry
        for key in entry.pvc_keys:
            self._pvc_users.setdefault(key, {})[entry.uid] = entry.node_name

    def remove_pod(self, uid: str) -> None:
        old = self.pods.pop(uid, None)
        if old is None:
            return
        self._on_node.get(old.node_name, {}).pop(uid, None)
        for key in old.pvc_keys:
            users = self._pvc_users.get(key)
            if users is not None:
                users.pop(uid, None)
                if not users:
                    del self._pvc_users[key]

    def pods_on(self, node: str) -> Iterable[PodVolumes]:
        """The pods with volumes on the node."""
        return self._on_node.get(node, {}).values()

    def pvc_in_use(self, key: str, nodes: Container[str]) -> bool:
        """IsPVCUsedByPods: a pod on one of the cluster's nodes mounts the claim (by a
        persistentVolumeClaim volume; pods bound to unknown nodes do not count)."""
        return any(node in nodes for node in self._pvc_users.get(key, {}).values())

    # -- VolumeBinding's assume cache

    def assume(self, decision: VolumeDecision, node_name: str) -> None:
        """AssumePodVolumes: the chosen PVs pre-bound to their claims, the claims to provision
        annotated with the node, in memory until the API confirms or ``forget``."""
        for pvc, pv in decision.static_bindings:
            current = self.pv(pv.name) or pv
            self._assumed_pvs[pv.name] = bind_volume_to_claim(current, pvc)
        for pvc, _ in decision.provisions:
            current_pvc = self.assumed_pvc(pvc.namespace, pvc.name) or pvc
            self._assumed_pvcs[pvc.key] = replace(current_pvc, selected_node=node_name)

    def forget(self, decision: VolumeDecision) -> None:
        """RevertAssumedPodVolumes."""
        for _, pv in decision.static_bindings:
            self._assumed_pvs.pop(pv.name, None)
        for pvc, _ in decision.provisions:
            self._assumed_pvcs.pop(pvc.key, None)

    @property
    def assumed(self) -> tuple[frozenset[str], frozenset[str]]:
        """(PV names, claim keys) with an assumption in flight."""
        return frozenset(self._assumed_pvs), frozenset(self._assumed_pvcs)


def bind_volume_to_claim(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> PersistentVolume:
    """GetBindVolumeToClaim, on the parsed PV (the API object: ``bound_pv_object``)."""
    return replace(pv, claim_ref=ClaimRef(pvc.namespace, pvc.name, pvc.uid), obj=bound_pv_object(pv, pvc))


def bound_pv_object(pv: PersistentVolume, pvc: PersistentVolumeClaim) -> dict[str, Any]:
    """The PV object VolumeBinding's PreBind writes (GetBindVolumeToClaim): claimRef set to the
    claim (kind, namespace, name, uid, apiVersion, resourceVersion) unless it already is, and
    pv.kubernetes.io/bound-by-controller: "yes" unless the user pre-bound it."""
    obj: dict[str, Any] = {**pv.obj}
    meta = dict(obj.get("metadata") or {})
    spec = dict(obj.get("spec") or {})
    ref = pv.claim_ref
    if ref is None or (ref.namespace, ref.name, ref.uid) != (pvc.namespace, pvc.name, pvc.uid):
        claim_ref: dict[str, Any] = {
            "kind": "PersistentVolumeClaim",
            "namespace": pvc.namespace,
            "name": pvc.name,
            "uid": pvc.uid,
            "apiVersion": "v1",
        }
        if pvc.resource_version is not None:
            claim_ref["resourceVersion"] = pvc.resource_version
        spec["claimRef"] = claim_ref
    if not pv.bound_to(pvc):
        annotations = dict(meta.get("annotations") or {})
        annotations.setdefault(ANN_BOUND_BY_CONTROLLER, "yes")
        meta["annotations"] = annotations
    obj["metadata"], obj["spec"] = meta, spec
    return obj


def selected_node_pvc_object(pvc: PersistentVolumeClaim, node_name: str) -> dict[str, Any]:
    """The claim VolumeBinding's PreBind writes to trigger provisioning: selected-node set."""
    obj: dict[str, Any] = {**pvc.obj}
    meta = dict(obj.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANN_SELECTED_NODE: node_name}
    obj["metadata"] = meta
    return obj
