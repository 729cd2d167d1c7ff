"""The in-memory cluster view, fed by watch events, plus what scheduling cycles have assumed.

Everything the scheduler needs to decide without an API call: nodes, pod usage per node, the DRA
inventory (slices, classes), devices held by every claim (also those kube-scheduler made), the
name -> class mapping, and in-flight decisions (assumed pods and allocations).

Memory: a cluster holds far more bound pods than pending ones, so only what can still be scheduled
keeps its whole object. Every stored object loses ``metadata.managedFields`` (server-side apply
bookkeeping, a third to half of a pod). A pod that is bound, finished or being deleted is kept as
the fields placement, release and roll-back read (``PodInfo``, no ``raw``); a claim as the fields
the release decisions read plus its JSON text, decoded only to write it back (``ClaimInfo``); a
node without its status beyond allocatable and capacity. Objects kept whole (pending pods, nodes,
slices) share their keys and short strings (``compact``): a burst of pending pods costs a third.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from draxr.core import json_codec
from draxr.core.adoption_index import AdoptionIndex
from draxr.core.allocator import AllocatedState, AllocationTracker, Inventory
from draxr.core.budget import Budget
from draxr.core.claim_pods import ClaimPods
from draxr.core.claims import special_claim_owner
from draxr.core.equivalence import EquivalenceCache
from draxr.core.extended_resources import ExtendedResources
from draxr.core.interpod import PodTerms, pod_terms
from draxr.core.labels import LabelInterner, Labels, Selector
from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.migration import (
    NODE_ANNOTATION,
    AdoptionClaim,
    Identity,
    adoption_claim_from_api,
    is_adoption_claim,
)
from draxr.core.no_fit_cache import NoFitCache
from draxr.core.node_images import NodeImages
from draxr.core.node_stamps import NodeStamps
from draxr.core.nominator import Nominator
from draxr.core.placed_pods import LabelGroup, PlacedPods
from draxr.core.pod_view import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, PodView, nonzero_requests, pod_requests, pod_view
from draxr.core.preempting import Preempting
from draxr.core.profile import DEFAULT_PROFILE, SchedulerProfile
from draxr.core.quantity import milli_value, value
from draxr.core.requeue import Change, ChangeLog
from draxr.core.spread import SelectorCounts
from draxr.core.spread_index import SpreadIndex
from draxr.core.storage import PodVolumes, StorageState, Volume, pod_volumes
from draxr.core.workloads import WorkloadSelectors

if TYPE_CHECKING:
    from draxr.core.node_verdict import NodeVerdict

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
__all__ = ["DEFAULT_MEMORY", "DEFAULT_MILLI_CPU"]  # scoring's defaults for containers without requests


def units(name: str, quantity: object) -> int:
    """The scheduler's integer view of a quantity: millicores for cpu, whole units for the rest
    (upstream Resource: MilliValue for cpu, Value otherwise)."""
    return milli_value(quantity) if name == "cpu" else value(quantity)  # type: ignore[arg-type]


def _rv(rv: str | None) -> int | None:
    """resourceVersion as an int (etcd revision) for ordering; None if it is not numeric."""
    try:
        return int(rv) if rv is not None else None
    except ValueError:
        return None


def _newer_or_equal(new: str | None, old: str | None) -> bool:
    """Whether resourceVersion ``new`` is not older than ``old`` (None: nothing known yet)."""
    if old is None:
        return True
    a, b = _rv(new), _rv(old)
    return a is None or b is None or a >= b


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return None if rv is None else str(rv)


def _scaled_down(old: PodInfo, new: PodInfo) -> bool:
    """Some request of the pod went down (upstream's UpdatePodScaleDown: an in-place resize)."""
    return any(new.requests.get(name, Decimal(0)) < value for name, value in old.requests.items())


def _nomination_moved(old: PodInfo, new: PodInfo) -> bool:
    """An unbound pod's nomination left its node (moved or cleared): upstream's
    updatePodInSchedulingQueue then moves pods as on an AssignedPod Delete (hasNominatedNodeNameChanged),
    since pods of lower or equal priority counted the nominated pod as placed there. The pod itself
    is moved too when it is in flight (its own attempt replays the event)."""
    return bool(old.nominated) and old.nominated != new.nominated and not new.node_name


def _same_version(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """Both carry the same resourceVersion: the same object, delivered again."""
    rv = _resource_version(new)
    return rv is not None and rv == _resource_version(old)


# ---- compact storage ---------------------------------------------------------------------------------

_INTERN_MAX_LEN = 32  # string values up to this long are interned (names, models, quantities), not uuids


def without_managed_fields(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields``: a shallow copy when it has them, else ``obj``."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def compact(value: Any) -> Any:
    """A copy of a JSON value with every key and every short string interned: the objects kept for
    the cluster's lifetime (nodes, slices) repeat the same keys, labels and attribute values."""
    if isinstance(value, str):
        return sys.intern(value) if len(value) <= _INTERN_MAX_LEN else value
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


def slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a Node: no managedFields, and of its status only ``allocatable`` and
    ``capacity`` (conditions, addresses and nodeInfo play no part in placement; images are kept
    as NodeInfo.images, name -> size)."""
    status = node.get("status") or {}
    slim = {k: v for k, v in without_managed_fields(node).items() if k != "status"}
    slim["status"] = {k: status[k] for k in ("allocatable", "capacity") if k in status}
    return dict(compact(slim))


_Mask = Mapping[str, "_Mask | None"]  # None: the whole value
_CONTAINER_FIELDS: _Mask = {"name": None, "resources": None, "ports": None, "restartPolicy": None}
# Every field PodInfo.from_api reads: a pod cut down to these gives the same PodInfo.
POD_INFO_FIELDS: _Mask = {
    "metadata": {
        "name": None,
        "namespace": None,
        "uid": None,
        "resourceVersion": None,
        "creationTimestamp": None,
        "deletionTimestamp": None,
        "labels": None,
    },
    "spec": {
        "nodeName": None,
        "schedulerName": None,
        "priority": None,
        "schedulingGates": None,
        "affinity": {"podAffinity": None, "podAntiAffinity": None},
        "resources": None,
        "overhead": None,
        "containers": _CONTAINER_FIELDS,
        "initContainers": _CONTAINER_FIELDS,
    },
    "status": {
        "phase": None,
        "extendedResourceClaimStatus": {"resourceClaimName": None},
        "startTime": None,
        "nominatedNodeName": None,
        "conditions": {"type": None, "status": None, "reason": None},
    },
}


def _project(value: Any, mask: _Mask | None) -> Any:
    if mask is None:
        return value
    if isinstance(value, list):
        return [_project(v, mask) for v in value]
    if isinstance(value, Mapping):
        return {k: _project(value[k], sub) for k, sub in mask.items() if k in value}
    return value


def slim_pod(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pod as worth holding in memory before it reaches ClusterState (a listing): the whole object
    (without managedFields, compacted) while it can be scheduled, else only ``POD_INFO_FIELDS``."""
    if _schedulable(pod):
        return dict(compact(without_managed_fields(pod)))
    slim = dict(_project(pod, POD_INFO_FIELDS))
    if not (pod.get("metadata") or {}).get("deletionTimestamp"):
        slim.get("status", {}).pop("conditions", None)  # read only of pods being deleted (preempted)
    return slim


def _schedulable(pod: Mapping[str, Any]) -> bool:
    """Unbound, not finished, not being deleted (whatever its scheduler): its object is kept."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return not (spec.get("nodeName") or status.get("phase") in TERMINAL_PHASES or meta.get("deletionTimestamp"))


class _Shared:
    """Equal small read-only mappings (pod requests) shared between pods instead of one per pod.
    Keyed by repr, so that Decimal("1.0") is not handed out for Decimal("1")."""

    def __init__(self, limit: int = 4096) -> None:
        self._items: dict[tuple[tuple[str, str], ...], Mapping[str, Any]] = {}
        self._limit = limit

    def get(self, mapping: Mapping[str, Any]) -> Mapping[str, Any]:
        key = tuple(sorted((k, repr(v)) for k, v in mapping.items()))
        found = self._items.get(key)
        if found is not None:
            return found
        if len(self._items) < self._limit:
            self._items[key] = mapping
        return mapping


_shared_requests = _Shared()
_shared_units = _Shared()
_labels = LabelInterner()
_shared_nonzero: dict[tuple[int, int], tuple[int, int]] = {}


def _nonzero(pod: Mapping[str, Any]) -> tuple[int, int]:
    nz = nonzero_requests(pod)
    shared = _shared_nonzero.get(nz)
    if shared is None and len(_shared_nonzero) < 4096:
        shared = _shared_nonzero[nz] = nz
    return shared or nz


_shared_terms: dict[PodTerms, PodTerms] = {}


def _terms(pod: Mapping[str, Any]) -> PodTerms | None:
    """The pod's terms, one shared object for equal terms (the replicas of one Deployment), so
    that the state can group placed pods by them."""
    try:
        terms = pod_terms(pod)
    except ValueError:
        return None  # the API server validates selectors; a pending pod's view reports the error
    if terms is None:
        return None
    shared = _shared_terms.get(terms)
    if shared is None:
        if len(_shared_terms) >= 4096:
            _shared_terms.clear()  # bounded; pods keep the objects they have
        shared = _shared_terms[terms] = terms
    return shared


def _volumes(pod: Mapping[str, Any]) -> tuple[Volume, ...]:
    if not (pod.get("spec") or {}).get("volumes"):
        return ()
    return tuple(v for v in pod_volumes(pod) if v.kind != "other")


def _node_images(node: Mapping[str, Any]) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for image in (node.get("status") or {}).get("images") or ():
        for name in image.get("names") or ():
            out.setdefault(sys.intern(str(name)), int(image.get("sizeBytes") or 0))
    return out


_NO_PORTS: frozenset[tuple[str, str, int]] = frozenset()


def _preempted(status: Mapping[str, Any]) -> bool:
    """Upstream podTerminatingByPreemption's condition part: the first DisruptionTarget condition
    is True with reason PreemptionByScheduler."""
    for c in status.get("conditions") or ():
        if c.get("type") == "DisruptionTarget":
            return bool(c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler")
    return False


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    labels_key: frozenset[tuple[str, str]]  # hashable labels (pools with node selectors depend on them)
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: Mapping[str, int]  # see units()
    device_plugin_names: frozenset[str]  # extended resources with allocatable > 0
    raw: Mapping[str, Any]  # the node as slim_node keeps it
    images: Mapping[str, int]  # image name -> size in bytes (status.images), for ImageLocality

    def scheduling_properties(self) -> tuple[object, ...]:
        """What the filters read of a node: a change here may let a waiting pod fit."""
        return (self.labels_key, self.taints, self.unschedulable, self.allocatable)

    @classmethod
    def from_api(cls, node: Mapping[str, Any]) -> NodeInfo:
        images = _node_images(node)  # kept as name -> size only
        node = slim_node(node)
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        alloc = {k: units(k, v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
        return cls(
            name=meta["name"],
            labels=meta.get("labels") or {},
            labels_key=frozenset((meta.get("labels") or {}).items()),
            taints=tuple(spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            allocatable=alloc,
            device_plugin_names=frozenset(k for k, v in alloc.items() if "/" in k and v > 0),
            raw=node,
            images=images,
        )


class PodObjectDropped(LookupError):
    """The whole pod object is kept only while the pod can be scheduled (PodInfo.raw)."""


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    phase: str
    scheduler_name: str
    priority: int
    created: str
    deleting: bool
    requests: Mapping[str, Decimal]  # exact effective pod requests
    units: Mapping[str, int]  # the same in scheduler units (see units()), non-zero only
    host_ports: frozenset[tuple[str, str, int]]
    resource_version: str | None
    claim_name: str  # status.extendedResourceClaimStatus.resourceClaimName, "" when unset
    gated: bool  # spec.schedulingGates is not empty
    obj: Mapping[str, Any] | None  # while schedulable: the pod without managedFields, compacted; see raw
    inputs: PodView | None  # while schedulable: its scheduling inputs, read once; see view
    labels: Labels  # shared between pods with equal labels (inter-pod affinity, spreading)
    terms: PodTerms | None  # its inter-pod (anti-)affinity terms, None without any
    nonzero: tuple[int, int]  # (milli-cpu, memory) as scoring counts them, see nonzero_requests
    volumes: tuple[Volume, ...]  # the volumes a volume plugin looks at (claims, disks); () mostly
    started: str = ""  # status.startTime (preemption's MoreImportantPod), "" when unset
    nominated: str = ""  # status.nominatedNodeName of an unbound pod
    preempted: bool = False  # being deleted with DisruptionTarget=True/PreemptionByScheduler

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def schedulable(self) -> bool:
        """Unbound, not finished and not being deleted (whichever scheduler it names)."""
        return not (self.node_name or self.terminal or self.deleting)

    @property
    def raw(self) -> Mapping[str, Any]:
        """The whole pod (without managedFields): kept only while the pod is schedulable, since
        only scheduling (placement, the claim and status written for it) reads the rest."""
        if self.obj is None:
            raise PodObjectDropped(f"pod {self.key}: only its summary is kept (bound, finished or deleting)")
        return self.obj

    @property
    def view(self) -> PodView:
        """The pod's scheduling inputs (placement reads only these), kept as long as ``raw``."""
        if self.inputs is None:
            raise PodObjectDropped(f"pod {self.key}: only its summary is kept (bound, finished or deleting)")
        return self.inputs

    @classmethod
    def from_api(cls, pod: Mapping[str, Any], *, keep_object: bool = False) -> PodInfo:
        """``keep_object``: keep the whole pod even if it is not schedulable (draxr explain)."""
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        requests = pod_requests(pod)
        ports: set[tuple[str, str, int]] = set()
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            for p in c.get("ports") or ():
                if p.get("hostPort"):
                    ports.add((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"])))
        ercs = status.get("extendedResourceClaimStatus") or {}
        keep = keep_object or _schedulable(pod)
        return cls(
            uid=meta["uid"],
            namespace=sys.intern(meta.get("namespace", "")),
            name=meta["name"],
            node_name=sys.intern(spec.get("nodeName") or ""),
            phase=sys.intern(status.get("phase") or "Pending"),
            scheduler_name=sys.intern(spec.get("schedulerName") or "default-scheduler"),
            priority=int(spec.get("priority") or 0),
            created=sys.intern(meta.get("creationTimestamp") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            requests=_shared_requests.get(requests),
            units=_shared_units.get({k: u for k, v in requests.items() if (u := units(k, v))}),
            host_ports=frozenset(ports) if ports else _NO_PORTS,
            resource_version=_resource_version(pod),
            claim_name=str(ercs.get("resourceClaimName") or ""),
            gated=bool(spec.get("schedulingGates")),
            obj=compact(without_managed_fields(pod)) if keep else None,
            inputs=pod_view(pod, requests) if keep else None,
            labels=_labels.get(meta.get("labels")),
            terms=_terms(pod),
            nonzero=_nonzero(pod),
            volumes=_volumes(pod),
            started=sys.intern(status.get("startTime") or ""),
            nominated=sys.intern(status.get("nominatedNodeName") or "") if not spec.get("nodeName") else "",
            preempted=bool(meta.get("deletionTimestamp")) and _preempted(status),
        )


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """What is kept of a ResourceClaim: the fields the release and roll-back decisions read, and
    the claim itself (without managedFields) as JSON, decoded only to write it back."""

    namespace: str
    name: str
    uid: str
    resource_version: str | None
    owner: tuple[str, str] | None  # (pod name, pod uid) of a special claim, see special_claim_owner
    deleting: bool
    finalizers: tuple[str, ...]
    allocated: bool  # status.allocation is set
    reserved: bool  # status.reservedFor is not empty
    body: bytes
    # status.reservedFor as (resource, uid): preemption frees a claim only when every consumer goes
    consumers: tuple[tuple[str, str], ...] = ()
    # An adoption claim (core.migration): its node (allocated or not; "" for any other claim), and
    # what it holds once allocated (read once, here: the migrator's passes compare with it)
    adoption_node: str = ""
    adoption: AdoptionClaim | None = None

    @property
    def adopts(self) -> tuple[str, frozenset[str]] | None:
        """(its pod's uid, the resources it adopts) of an allocated adoption claim."""
        a = self.adoption
        return None if a is None else (a.pod_uid, frozenset(r for r, _, _ in a.requests))

    @property
    def adopted_devices(self) -> int:
        return 0 if self.adoption is None else len(self.adoption.devices)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def object(self) -> dict[str, Any]:
        """The claim as the API returned it (without managedFields): a fresh dict on every call."""
        return dict(json_codec.loads(self.body))

    @classmethod
    def from_api(cls, claim: Mapping[str, Any]) -> ClaimInfo:
        claim = without_managed_fields(claim)
        meta, status = claim.get("metadata") or {}, claim.get("status") or {}
        return cls(
            namespace=sys.intern(meta.get("namespace", "")),
            name=meta["name"],
            uid=str(meta.get("uid") or ""),
            resource_version=_resource_version(claim),
            owner=special_claim_owner(claim),
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(sys.intern(f) for f in meta.get("finalizers") or ()),
            allocated=bool(status.get("allocation")),
            reserved=bool(status.get("reservedFor")),
            body=json_codec.dumps(claim),
            consumers=tuple(
                (sys.intern(str(r.get("resource") or "")), str(r.get("uid") or ""))
                for r in status.get("reservedFor") or ()
            ),
            adoption=adoption_claim_from_api(claim),
            adoption_node=str((meta.get("annotations") or {}).get(NODE_ANNOTATION) or "")
            if is_adoption_claim(claim)
            else "",
        )


@dataclass
class NodeUsage:
    """Requests of the non-terminal pods on a node (bound, or assumed by a cycle)."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    host_ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    # cpu/memory with upstream's non-zero defaults for pods that request none (scoring only).
    nonzero_milli_cpu: int = 0
    nonzero_memory: int = 0

    def copy(self) -> NodeUsage:
        return NodeUsage(
            dict(self.requested), self.pods, dict(self.host_ports), self.nonzero_milli_cpu, self.nonzero_memory
        )

    def apply(self, pod: PodInfo, sign: int) -> None:
        self.pods += sign
        self.nonzero_milli_cpu += sign * pod.nonzero[0]
        self.nonzero_memory += sign * pod.nonzero[1]
        for name, q in pod.units.items():
            self.requested[name] = self.requested.get(name, 0) + sign * q
        for port in pod.host_ports:
            self.host_ports[port] = self.host_ports.get(port, 0) + sign
            if self.host_ports[port] <= 0:
                del self.host_ports[port]


EMPTY_USAGE = NodeUsage()  # the usage of a node without pods (read-only)


class ClusterState:
    """Not thread-safe: the shell mutates it from one event loop."""

    def __init__(self) -> None:
        # The scheduling profile (a KubeSchedulerConfiguration's, else kube-scheduler's default).
        self.profile: SchedulerProfile = DEFAULT_PROFILE
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}  # by uid
        self.usage: dict[str, NodeUsage] = {}
        self.stamps = NodeStamps(self.nodes)  # per node, valid while untouched; the touch log
        self.node_stamps = self.stamps.by_node
        self.inventory = Inventory(on_node_change=self.touch_node)
        self.tracker = AllocationTracker(on_pool_change=self._pool_changed)
        self.equivalence: EquivalenceCache[NodeVerdict] = EquivalenceCache()  # placement's per-node results
        self._sorted_names: tuple[dict[str, NodeInfo], list[str]] | None = None
        self.claims: dict[str, ClaimInfo] = {}  # "namespace/name" -> latest claim
        # Which pods the claims belong to (special claims by owner, claims by reservedFor, the
        # schedulers of removed pods whose special claims remain), by pod uid.
        self.claim_pods = ClaimPods()
        self.special_claims = self.claim_pods.special
        self.reserved_claims = self.claim_pods.reserved
        self.gone_pod_schedulers = self.claim_pods.gone_schedulers
        self._slice_versions: dict[str, str | None] = {}  # slice name -> resourceVersion in the inventory
        # The DeviceClasses, the mapping overrides, the gate: which extended resources DRA serves.
        self.extended = ExtendedResources(lambda: self.changes.record(Change.CLASS))
        self.classes = self.extended.classes
        self.assumed_nodes: dict[str, str] = {}  # pod uid -> node chosen but not yet bound
        # PVs, claims, classes, CSI objects, and the placed pods' volumes (the volume plugins).
        self.storage = StorageState()
        # Bumped (with ``generation``) by the storage events that can make a pod schedulable; pods a
        # volume plugin's PreFilter turned away wait for it (the scheduler's inventory stamp).
        self.storage_revision = 0
        self.no_fit = NoFitCache(self.inventory, self.nodes)  # DynamicResources' nodes that cannot fit
        self.adoption = AdoptionIndex(self.claims)  # what the device plugin -> DRA migration reads
        # plugins.dynamic_resources.unadopted_classes per node: (its stamp, the mapping, the result)
        self.unadopted: dict[str, tuple[int, object, frozenset[str]]] = {}
        # Every change that can make a pending pod schedulable, by kind (``generation`` counts them).
        self.changes = ChangeLog()
        # Bumped when a node comes, goes or changes what a filter reads: caches derived from the
        # nodes alone (spreading's topology domains) are valid while it stays.
        self.node_revision = 0
        self.spread = SpreadIndex(self)  # PodTopologySpread's index
        # Inter-pod affinity and spreading: the placed pods (bound or assumed) in label groups and by
        # inter-pod terms, and namespaces' labels.
        self.placed_groups = PlacedPods()
        self.namespace_labels_by_name: dict[str, Labels] = {}
        self.workloads = WorkloadSelectors()  # what the default spreading selector reads
        self.images = NodeImages()  # ImageLocality's counts
        # Schedulable pods whose fit depends on other pods (required pod affinity, hard spreading):
        # a pod placed anywhere may let them fit, so it counts as a cluster change while any waits.
        self._waiting_on_pods: set[str] = set()
        # Preemption: the pods placed on each node (bound or assumed), by uid in the order they came
        # (the order upstream's NodeInfo lists them, which ties in preemption's victim order follow),
        # and the nominated ones (state.nominated: the nominator's, node -> uids).
        self.placed: dict[str, dict[str, None]] = {}
        self.nominator = Nominator(self.touch_node)
        self.nominated = self.nominator.by_node
        self.preempting = Preempting()  # our victims, preempted before the API shows it
        self.budgets: dict[tuple[str, str], Budget] = {}  # PodDisruptionBudgets by (namespace, name)

    # ---- PodDisruptionBudgets (preemption) -------------------------------------------------------
    def upsert_budget(self, pdb: Mapping[str, Any]) -> None:
        meta = pdb.get("metadata") or {}
        self.budgets[(str(meta.get("namespace") or ""), str(meta.get("name") or ""))] = Budget.from_api(pdb)

    def remove_budget(self, namespace: str, name: str) -> None:
        self.budgets.pop((namespace, name), None)

    # ---- storage (the volume plugins' objects) ------------------------------------------------------
    def storage_changed(self) -> None:
        """A storage event that can make a waiting pod schedulable (VolumeBinding's, VolumeZone's,
        NodeVolumeLimits' and VolumeRestrictions' queueing hints: a PV or claim added or updated,
        a class, CSINode, CSIDriver or CSIStorageCapacity added or updated, a VolumeAttachment
        deleted)."""
        self.changes.record(Change.STORAGE)
        self.storage_revision += 1

    # ---- nodes ---------------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Bumped by every change that can make a pending pod schedulable (``changes`` says which)."""
        return self.changes.generation

    def touch_node(self, name: str) -> None:
        """Something per-node placement reads of the node changed (see ``NodeStamps``)."""
        self.stamps.touch(name)

    def _pool_changed(self, pool: tuple[str, str]) -> None:
        for node in self.inventory.nodes_of_pool(*pool):
            self.touch_node(node)

    def node_names(self) -> list[str]:
        """The nodes' names, sorted (placement's order before rotation); cached while the set of
        nodes is unchanged. Do not modify the list."""
        found = self._sorted_names
        if found is None or found[0] is not self.nodes or len(found[1]) != len(self.nodes):
            found = self._sorted_names = (self.nodes, sorted(self.nodes))
        return found[1]

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        old = self.nodes.get((node.get("metadata") or {}).get("name", ""))
        if old is not None and _same_version(node, old.raw):
            return  # delivered again (a re-list): nothing changed
        info = NodeInfo.from_api(node)
        if old is None:
            self._sorted_names = None
        self.nodes[info.name] = info
        self.touch_node(info.name)
        self.usage.setdefault(info.name, NodeUsage())
        if old is None or old.images != info.images:
            if old is not None:
                self.images.count(old.images, -1)
            self.images.count(info.images, +1)
        if old is None or info.scheduling_properties() != old.scheduling_properties():
            # (a status heartbeat changes nothing a filter reads)
            self.changes.record(Change.NODE_ADDED if old is None else Change.NODE_UPDATED)
            self.node_revision += 1

    def remove_node(self, name: str) -> None:
        gone = self.nodes.pop(name, None)
        if gone is not None:
            self.images.count(gone.images, -1)
            self._sorted_names = None
        self.touch_node(name)
        self.inventory.forget_node(name)
        self.changes.record(Change.NODE_REMOVED)
        self.node_revision += 1

    # ---- pods ----------------------------------------------------------------------------------
    def placed_on(self, pod: PodInfo) -> str:
        """The node the pod counts on: bound or assumed, and not finished ("" else)."""
        if pod.terminal:
            return ""
        return pod.node_name or self.assumed_nodes.get(pod.uid, "")

    def upsert_pod(self, pod: Mapping[str, Any], *, keep_object: bool = False) -> PodInfo:
        """Record a pod seen by a watch (or a listing, see slim_pod); older versions are ignored.
        ``keep_object``: keep the whole pod even if it cannot be scheduled (draxr explain)."""
        old = self.pods.get((pod.get("metadata") or {}).get("uid", ""))
        if old is not None:
            rv = _resource_version(pod)
            if not _newer_or_equal(rv, old.resource_version):
                return old
            if rv is not None and rv == old.resource_version and (old.obj is not None or not keep_object):
                return old  # the same version again (a re-list): the same summary, no churn
        info = self.preempting.seen(self.nominator.seen(PodInfo.from_api(pod, keep_object=keep_object)))
        self.nominator.index(old, -1)
        self.nominator.index(info, +1)
        self.account(old, -1)
        if info.node_name:
            self.assumed_nodes.pop(info.uid, None)  # the binding is visible: no longer an assumption
        self.pods[info.uid] = info
        self.account(info, +1)
        if old is not None and self.placed_on(old) and not self.placed_on(info):
            self.changes.record(Change.POD_FREED)  # resources freed
        elif old is not None and old.node_name == info.node_name and _scaled_down(old, info):
            # A resize down: upstream's AssignedPod UpdatePodScaleDown for a bound pod; for an unbound
            # one its TargetPod UpdatePodScaleDown, whose NodeResourcesFit hint says Queue to every pod
            # in flight at the time, not only to the resized one (one in-flight event list).
            self.changes.record(Change.POD_FREED)
        elif old is not None and _nomination_moved(old, info):
            self.changes.record(Change.POD_FREED)  # upstream: the old nominated node's room is freed
        elif self._waiting_on_pods and self.placed_on(info) and (old is None or not self.placed_on(old)):
            self.changes.record(Change.POD_PLACED)  # a pod placed: pods waiting for affinity or spreading may fit
        if info.inputs is not None and info.inputs.depends_on_pods:
            self._waiting_on_pods.add(info.uid)
        else:
            self._waiting_on_pods.discard(info.uid)
        return info

    def nominate(self, uid: str, node: str) -> None:
        """Our PostFilter nominated the pod to ``node`` ("": cleared its nomination): counted there
        at once, not when its status write comes back."""
        pod = self.pods.get(uid)
        if pod is None or not pod.schedulable:
            return
        self.nominator.ours(uid, node)
        if pod.nominated != node:
            moved = replace(pod, nominated=node)
            if _nomination_moved(pod, moved):
                self.changes.record(Change.POD_FREED)  # at once: the status write's event finds it moved
            self.nominator.index(pod, -1)
            self.pods[uid] = pod = moved
            self.nominator.index(pod, +1)

    def mark_preempted(self, uids: Iterable[str], preempted: bool = True) -> None:
        """Our preemption chose these victims (``preempted``; False: their eviction failed)."""
        self.preempting.mark(self.pods, uids, preempted)

    def remove_pod(self, uid: str) -> PodInfo | None:
        self.nominator.forget(uid)
        self.preempting.forget(uid)
        info = self.pods.pop(uid, None)
        self.nominator.index(info, -1)
        self.account(info, -1)
        self.assumed_nodes.pop(uid, None)
        self._waiting_on_pods.discard(uid)
        if info is not None:
            self.changes.record(Change.POD_FREED)
            self.claim_pods.pod_removed(uid, info.scheduler_name)
        return info

    def placed_pods(self, node: str) -> list[PodInfo]:
        """The pods placed on ``node`` (bound or assumed, not finished)."""
        return [self.pods[uid] for uid in self.placed.get(node, ())]

    def nominated_pods(self, node: str) -> list[PodInfo]:
        """The pods nominated to ``node`` and not yet placed (Nominator.pods_on)."""
        return self.nominator.pods_on(node, self.pods, self.assumed_nodes)

    def account(self, pod: PodInfo | None, sign: int) -> None:
        """Every index's AddPod (``sign`` 1) or RemovePod (-1) for a pod as placed (or not)."""
        if pod is None:
            return
        node = self.placed_on(pod)
        if node:
            on = self.placed.setdefault(node, {})
            if sign > 0:
                on[pod.uid] = None
            else:
                on.pop(pod.uid, None)
                if not on:
                    del self.placed[node]
            self.usage.setdefault(node, NodeUsage()).apply(pod, sign)
            self.touch_node(node)
            key = (pod.namespace, id(pod.labels), pod.deleting)
            self.placed_groups.count(key, pod.labels, pod.terms, node, sign)
            if self.spread.counting:
                self.spread.count(key, pod.labels, pod.deleting, node, sign)
            if pod.volumes:
                if sign > 0:
                    self.storage.place_pod(PodVolumes(pod.uid, pod.namespace, pod.name, node, pod.volumes))
                else:
                    self.storage.remove_pod(pod.uid)

    # ---- what inter-pod affinity and spreading read (interpod.Cluster, spread.SpreadCluster) ------
    def node_labels(self) -> Iterable[tuple[str, Labels]]:
        return ((name, node.labels) for name, node in self.nodes.items())

    def selector_counts(self, namespace: str, selector: Selector) -> SelectorCounts:
        return self.spread.selector_counts(namespace, selector)

    def label_groups(self) -> Iterable[LabelGroup]:
        return self.placed_groups.groups()

    def labels_of(self, node: str) -> Labels | None:
        info = self.nodes.get(node)
        return info.labels if info is not None else None

    def term_groups(self) -> Iterable[tuple[PodTerms, Mapping[str, int]]]:
        return self.placed_groups.term_groups()

    def namespace_labels(self, namespace: str) -> Labels | None:
        return self.namespace_labels_by_name.get(namespace)

    def namespaces(self) -> Iterable[tuple[str, Labels]]:
        return self.namespace_labels_by_name.items()

    def upsert_namespace(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        labels = _labels.get(meta.get("labels"))
        name = str(meta.get("name") or "")
        if self.namespace_labels_by_name.get(name) != labels:
            self.namespace_labels_by_name[name] = labels
            self.changes.record(Change.NAMESPACE)

    def remove_namespace(self, name: str) -> None:
        if self.namespace_labels_by_name.pop(name, None) is not None:
            self.changes.record(Change.NAMESPACE)

    def assume_pod(self, uid: str, node: str) -> None:
        info = self.pods.get(uid)
        self.account(info, -1)
        self.assumed_nodes[uid] = node
        self.account(info, +1)

    def forget_pod(self, uid: str) -> None:
        info = self.pods.get(uid)
        self.account(info, -1)
        self.assumed_nodes.pop(uid, None)
        self.account(info, +1)
        self.changes.record(Change.POD_FREED)

    # ---- DRA objects ---------------------------------------------------------------------------
    def upsert_slice(self, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name", "")
        rv = _resource_version(obj)
        if rv is not None and self._slice_versions.get(name) == rv:
            return  # delivered again: nothing changed, and the inventory's caches stay valid
        self.inventory.upsert_slice(compact(without_managed_fields(obj)))
        self._slice_versions[name] = rv
        self.changes.record(Change.SLICE)

    def remove_slice(self, name: str) -> None:
        self.inventory.remove_slice(name)
        self._slice_versions.pop(name, None)
        self.changes.record(Change.SLICE)

    def upsert_taint_rule(self, obj: Mapping[str, Any]) -> None:
        """A DeviceTaintRule: its taint on the devices it selects, as kube-scheduler's allocator
        sees them (the inventory applies it as upstream's slice tracker does)."""
        if self.inventory.upsert_taint_rule(compact(without_managed_fields(obj))):
            self.changes.record(Change.SLICE)  # (upstream: an update of the patched slices)

    def remove_taint_rule(self, name: str) -> None:
        if self.inventory.remove_taint_rule(name):
            self.changes.record(Change.SLICE)

    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        obj = without_managed_fields(obj)
        self.inventory.upsert_class(obj)
        self.extended.upsert_class(obj)

    def remove_class(self, name: str) -> None:
        self.inventory.remove_class(name)
        self.extended.remove_class(name)

    @property
    def mapping(self) -> ExtendedResourceMapping:
        """Extended resource name -> what DRA serves it with (``extended``'s, rebuilt per change)."""
        return self.extended.mapping

    def upsert_claim(self, claim: Mapping[str, Any] | ClaimInfo) -> bool:
        """Record a claim seen by a watch or returned by a write (or a listing's ClaimInfo). Older
        versions are ignored (a late watch event must not undo an allocation we already know
        about). True if applied."""
        if isinstance(claim, ClaimInfo):
            key, rv = claim.key, claim.resource_version
        else:
            meta = claim["metadata"]
            key, rv = f"{meta.get('namespace', '')}/{meta['name']}", _resource_version(claim)
        old = self.claims.get(key)
        if not _newer_or_equal(rv, old.resource_version if old is not None else None):
            return False
        if old is not None and rv is not None and rv == old.resource_version:
            return True  # the same version again (a re-list, or our own write's watch event)
        info = claim if isinstance(claim, ClaimInfo) else ClaimInfo.from_api(claim)
        self.claim_pods.claim_changed(key, old, info)
        self.claims[key] = info
        if info.allocated:
            self.tracker.set_claim(key, claim.object() if isinstance(claim, ClaimInfo) else claim)
        else:
            self.tracker.remove_claim(key)
        if old is not None and old.allocated and not info.allocated:
            self.changes.record(Change.CLAIM_FREED)
        if self.adoption.claim_changed(key, old, info):
            self.changes.record(Change.ADOPTION)  # pods waiting for the node's device-plugin pods to be adopted
        return True

    def remove_claim(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        claim = self.claims.pop(key, None)
        self.claim_pods.claim_removed(key, claim)
        self.adoption.claim_changed(key, claim, None)
        freed = self.tracker.remove_claim(key)
        if freed or (claim is not None and claim.allocated):
            # Upstream queues every pod on an allocated claim's delete (DynamicResources'
            # preQueueingHint: AllPods), even when another claim still holds its devices.
            self.changes.record(Change.CLAIM_FREED)

    def special_claims_of(self, pod_uid: str) -> list[ClaimInfo]:
        return [self.claims[k] for k in sorted(self.special_claims.get(pod_uid, ())) if k in self.claims]

    def identities(self) -> dict[str, tuple[Identity, str]]:
        """Per extended resource whose DeviceClass declares a device-plugin identity: the identity
        and that class (core.migration.identities), cached per mapping."""
        return self.adoption.identities(self.mapping, self.classes)

    # ---- allocations in flight -------------------------------------------------------------------
    def assume_allocation(self, key: str, allocation: Mapping[str, Any]) -> None:
        self.tracker.assume(key, allocation)

    def forget_allocation(self, key: str) -> None:
        """An in-flight allocation ends. A change only if devices became free by it: after a
        successful write the committed claim holds them, and recording a free then released
        every pod short of devices on every binding (the new leader's catch-up spent two thirds
        of its cycles on them; bench/NOTEBOOK.md, chaos session 19)."""
        if self.tracker.forget(key):
            self.changes.record(Change.CLAIM_FREED)

    def allocation_in_flight(self, key: str) -> bool:
        """An allocation of claim ``key`` ("namespace/name") is assumed while the claim, as last seen,
        has none: upstream's pending allocation, which other pods sharing the claim wait for."""
        if not self.tracker.is_assumed(key):
            return False
        claim = self.claims.get(key)
        return claim is None or not claim.allocated

    def claim_object(self, key: str) -> dict[str, Any] | None:
        """The claim ``key`` ("namespace/name") as last seen, None when unknown."""
        claim = self.claims.get(key)
        return claim.object() if claim is not None else None

    def allocated(self) -> AllocatedState:
        return self.tracker.snapshot()
