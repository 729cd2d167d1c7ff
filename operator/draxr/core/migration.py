"""Device plugin → DRA on a live node, pure: which devices running device-plugin pods hold, as DRA
sees them, and the ResourceClaims that tell every DRA-aware scheduler those devices are taken.

kubelet keeps reporting the device IDs it gave running pods (pod-resources ``List``) after the
device plugin stops; the node agent publishes them per node (a DevicePluginRecord, see
crds/devicepluginrecords.draxr.io.yaml). An **identity** per extended resource names the DRA
device attribute whose value is the plugin's device ID (NVIDIA: ``uuid``; time-sliced replicas
``<uuid>::<n>`` are the base UUID). For each running pod whose IDs all match exactly one device of
the resource's DeviceClass on its node, one **adoption claim**: a ResourceClaim in the pod's
namespace, owned by the pod (deleted with it), allocated with exactly those devices and reserved
for the node's record (a non-pod consumer: kube-controller-manager leaves it allocated, and
kube-scheduler and draxr count its devices as taken). An ID that matches no device, or more than
one, is reported (``Unmatched``), never guessed; the pod's claim then waits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from draxr.core.allocator.model import DeviceId, DeviceInfo
from draxr.core.mapping import ExtendedResourceMapping

GROUP = "draxr.io"
RECORD_PLURAL = "devicepluginrecords"
# What marks draxr's adoption claims (not the takeover of pods, "--adopt-unschedulable"): these
# hold devices running device-plugin pods got before the node moved to DRA.
ADOPTION_LABEL = "draxr.io/adopted-from"
ADOPTION_VALUE = "device-plugin"
NODE_ANNOTATION = "draxr.io/adopted-on-node"
RESOURCES_ANNOTATION = "draxr.io/adopted-resources"  # the resource of each request, in order
# On a DeviceClass: the device attribute that holds the device plugin's ID of each device, and
# what ends the base ID of a shared replica (default "::"; "" for none). Set on the class, since
# which attribute names a device is the driver's business, whatever maps the name to the class.
ID_ATTRIBUTE_ANNOTATION = "draxr.io/device-plugin-id-attribute"
REPLICA_SEPARATOR_ANNOTATION = "draxr.io/device-plugin-replica-separator"
STALE_AFTER_REFRESHES = 3  # a record not refreshed for this many of its periods is unknown
MAX_NAME = 253


@dataclass(frozen=True)
class Identity:
    """How a device plugin's IDs name DRA devices: ``attribute`` (qualified ``domain/name``, or a
    bare name in the device's driver domain) holds the ID; ``replica_separator`` ends the base ID
    of a shared replica ("" when the plugin has none)."""

    attribute: str
    replica_separator: str = "::"

    def base_id(self, device_id: str) -> str:
        sep = self.replica_separator
        return device_id.split(sep, 1)[0] if sep and sep in device_id else device_id

    def value_of(self, device: DeviceInfo) -> str | None:
        """The attribute's string value on ``device``, None when it has none."""
        domain, _, name = self.attribute.rpartition("/")
        attrs = device.attributes
        found = None
        if not domain:
            found = attrs.get(name) or attrs.get(f"{device.driver}/{name}")
        elif domain == device.driver:
            found = attrs.get(name) or attrs.get(self.attribute)
        else:
            found = attrs.get(self.attribute)
        if not isinstance(found, Mapping):
            return None
        value = found.get("string")
        return value if isinstance(value, str) else None


def class_identity(device_class: Mapping[str, Any]) -> Identity | None:
    """The identity a DeviceClass declares (its annotations), None without one."""
    annotations = (device_class.get("metadata") or {}).get("annotations") or {}
    attribute = str(annotations.get(ID_ATTRIBUTE_ANNOTATION) or "").strip()
    if not attribute:
        return None
    separator = annotations.get(REPLICA_SEPARATOR_ANNOTATION)
    return Identity(attribute, "::" if separator is None else str(separator))


def identities(
    mapping: ExtendedResourceMapping, classes: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[Identity, str]]:
    """Per extended resource served by DRA: the identity and the DeviceClass its devices are
    adopted under (the first of the resource's classes that declares an identity)."""
    out: dict[str, tuple[Identity, str]] = {}
    for name in sorted(mapping.names):
        resolved = mapping.lookup(name)
        if resolved is None:
            continue
        for class_name in resolved.class_names:
            raw = classes.get(class_name)
            identity = class_identity(raw) if raw is not None else None
            if identity is not None:
                out[name] = (identity, class_name)
                break
    return out


def node_devices(
    by_id: Mapping[DeviceId, DeviceInfo], matching: Mapping[str, Iterable[DeviceId]]
) -> dict[str, list[DeviceInfo]]:
    """Per class, the node's devices (``matching``: the class's device IDs on the node, from the
    allocator's class index; ``by_id``: the node's devices)."""
    return {cls: [by_id[i] for i in ids if i in by_id] for cls, ids in matching.items()}


@dataclass(frozen=True)
class Held:
    """What one container of a pod holds of one device-plugin resource."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True)
class NodeRecord:
    node: str
    uid: str
    observed: float  # epoch seconds of the agent's last read of kubelet
    refresh_seconds: float
    held: tuple[Held, ...]

    def stale(self, now: float) -> bool:
        return now - self.observed > STALE_AFTER_REFRESHES * self.refresh_seconds

    def pods(self) -> dict[tuple[str, str], list[Held]]:
        out: dict[tuple[str, str], list[Held]] = {}
        for h in self.held:
            out.setdefault((h.namespace, h.pod), []).append(h)
        return out


def epoch(value: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def parse_record(obj: Mapping[str, Any]) -> NodeRecord | str:
    """The record, or why it cannot be read (then the node is as unknown as without one)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    node = str(meta.get("name") or "")
    if spec.get("nodeName") != node:
        return f"spec.nodeName {spec.get('nodeName')!r} is not the record's name {node!r}"
    observed = epoch(spec.get("observedTime"))
    if observed is None:
        return f"spec.observedTime {spec.get('observedTime')!r} is not a time"
    refresh = spec.get("refreshSeconds")
    if not isinstance(refresh, int | float) or isinstance(refresh, bool) or refresh <= 0:
        return f"spec.refreshSeconds {refresh!r} is not a positive number"
    held: list[Held] = []
    for p in spec.get("pods") or ():
        for c in p.get("containers") or ():
            for d in c.get("devices") or ():
                ids = tuple(str(i) for i in d.get("deviceIDs") or ())
                if ids:
                    held.append(
                        Held(
                            str(p.get("namespace") or ""),
                            str(p.get("name") or ""),
                            str(c.get("name") or ""),
                            str(d.get("resourceName") or ""),
                            ids,
                        )
                    )
    return NodeRecord(node, str(meta.get("uid") or ""), observed, float(refresh), tuple(held))


@dataclass(frozen=True)
class Unmatched:
    node: str
    resource: str
    device_id: str
    reason: str  # "matches no device of class X" / "matches N devices: a, b"


def match(
    ids: Iterable[str], identity: Identity, devices: Sequence[DeviceInfo], resource: str, node: str, class_name: str
) -> tuple[list[DeviceId], list[Unmatched]]:
    """Each ID's device among ``devices`` (the node's devices of the resource's class): exactly
    one, or an Unmatched. Replicas of one base ID name one device once."""
    by_value: dict[str, list[DeviceId]] = {}
    for d in devices:
        value = identity.value_of(d)
        if value is not None:
            by_value.setdefault(value, []).append(d.id)
    found: list[DeviceId] = []
    unmatched: list[Unmatched] = []
    for raw_id in dict.fromkeys(identity.base_id(i) for i in ids):
        hits = by_value.get(raw_id, [])
        if len(hits) == 1:
            found.append(hits[0])
        elif not hits:
            unmatched.append(Unmatched(node, resource, raw_id, f"matches no device of DeviceClass {class_name}"))
        else:
            names = ", ".join("/".join(h) for h in hits)
            unmatched.append(Unmatched(node, resource, raw_id, f"matches {len(hits)} devices: {names}"))
    return found, unmatched


@dataclass(frozen=True)
class AdoptionClaim:
    """One running pod's device-plugin devices as a ResourceClaim (one request per resource)."""

    namespace: str
    pod: str
    pod_uid: str
    node: str
    requests: tuple[tuple[str, str, tuple[DeviceId, ...]], ...]  # (resource, class, devices), by resource
    record: str = field(default="", compare=False)  # the record's uid (reservedFor)

    @property
    def name(self) -> str:
        digest = hashlib.sha256(f"{self.pod_uid}".encode()).hexdigest()[:8]
        return f"{self.pod[: MAX_NAME - 24]}-dp-adopted-{digest}"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def devices(self) -> tuple[DeviceId, ...]:
        return tuple(d for _, _, devs in self.requests for d in devs)

    def body(self) -> dict[str, Any]:
        """The claim to create: its spec asks for what it will be allocated, one ExactCount request
        per resource (the allocation's results name these requests)."""
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {ADOPTION_LABEL: ADOPTION_VALUE},
                "annotations": {
                    NODE_ANNOTATION: self.node,
                    RESOURCES_ANNOTATION: ",".join(r for r, _, _ in self.requests),
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": self.pod,
                        "uid": self.pod_uid,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": f"dp-{i}",
                            "exactly": {
                                "deviceClassName": cls,
                                "allocationMode": "ExactCount",
                                "count": len(devs),
                                # the devices it holds may be fenced while it is written (the fence)
                                "tolerations": [{"key": FENCE_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                            },
                        }
                        for i, (_, cls, devs) in enumerate(self.requests)
                    ]
                }
            },
        }

    def status(self) -> dict[str, Any]:
        """The status to write: the devices, the node's selector, reserved for the node's record."""
        results = [
            {"request": f"dp-{i}", "driver": d[0], "pool": d[1], "device": d[2]}
            for i, (_, _, devs) in enumerate(self.requests)
            for d in devs
        ]
        return {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [self.node]}]}
                    ]
                },
            },
            "reservedFor": [{"apiGroup": GROUP, "resource": RECORD_PLURAL, "name": self.node, "uid": self.record}],
        }


def is_adoption_claim(claim: Mapping[str, Any]) -> bool:
    labels = (claim.get("metadata") or {}).get("labels") or {}
    return labels.get(ADOPTION_LABEL) == ADOPTION_VALUE


def adoption_claim_from_api(claim: Mapping[str, Any]) -> AdoptionClaim | None:
    """An adoption claim as written (None for any other claim, or one not allocated yet: a create
    whose status write did not happen, which the plan then replaces)."""
    if not is_adoption_claim(claim):
        return None
    meta, spec, status = claim.get("metadata") or {}, claim.get("spec") or {}, claim.get("status") or {}
    owners = [o for o in meta.get("ownerReferences") or () if o.get("kind") == "Pod"]
    resources = str((meta.get("annotations") or {}).get(RESOURCES_ANNOTATION) or "").split(",")
    requests = (spec.get("devices") or {}).get("requests") or []
    allocation = status.get("allocation")
    if len(owners) != 1 or allocation is None or len(resources) != len(requests):
        return None
    results = (allocation.get("devices") or {}).get("results") or []
    out: list[tuple[str, str, tuple[DeviceId, ...]]] = []
    for resource, r in zip(resources, requests, strict=True):
        devs = sorted(
            (str(x["driver"]), str(x["pool"]), str(x["device"])) for x in results if x.get("request") == r.get("name")
        )
        out.append((resource, str((r.get("exactly") or {}).get("deviceClassName") or ""), tuple(devs)))
    node = str((meta.get("annotations") or {}).get(NODE_ANNOTATION) or "")
    return AdoptionClaim(
        str(meta.get("namespace") or ""),
        str(owners[0].get("name") or ""),
        str(owners[0].get("uid") or ""),
        node,
        tuple(out),
    )


@dataclass(frozen=True)
class PodRef:
    """What the plan needs of a pod the record names (from the leader's informer)."""

    uid: str
    node: str
    running: bool  # not finished (a pod being deleted still holds its devices until it stops)
    created: float | None = None  # epoch seconds; a pod made after the record was read is not in it


@dataclass
class Plan:
    create: list[AdoptionClaim] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)  # claim keys
    unmatched: list[Unmatched] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # pods not adopted yet (ns/name: why)


def plan(
    record: NodeRecord,
    pods: Mapping[tuple[str, str], PodRef],
    identities: Mapping[str, tuple[Identity, str]],
    devices_of_class: Mapping[str, Sequence[DeviceInfo]],
    existing: Mapping[str, AdoptionClaim | None],
    holds: Callable[[str], bool] | None = None,
) -> Plan:
    """What to write for one node with a fresh record. ``identities``: resource -> (identity, the
    DeviceClass that serves it by DRA); resources without one are the device plugin's alone.
    ``devices_of_class``: the node's devices per class. ``existing``: the node's adoption claims
    by key, None for one that cannot be read (never allocated: a create whose status write failed).
    ``holds(pod uid)``: the pod still holds its devices (not finished, not gone; default: a running
    pod of ``pods``).

    A claim goes when its pod no longer holds its devices, or when it cannot be read; one that
    differs from what the record says now is replaced (deleted, then created on the next pass).
    A claim of a pod that still holds its devices stays while the record omits the pod or its IDs
    match no device for a while: kubelet restarting (it deletes its node's slices when it starts,
    and may list no pod for a moment) does not free the devices."""
    if holds is None:
        running = {ref.uid for ref in pods.values() if ref.running}
        holds = running.__contains__
    out = Plan()
    wanted: dict[str, AdoptionClaim] = {}
    for (ns, pod_name), held in sorted(record.pods().items()):
        ref = pods.get((ns, pod_name))
        if ref is None or not ref.running or ref.node != record.node:
            continue  # ended (kubelet drops it from List soon) or not this node's
        if ref.created is not None and ref.created > record.observed:
            continue  # a pod of the same name made since: the record's devices were another's
        per_resource: dict[str, list[str]] = {}
        for h in held:
            if h.resource in identities:
                per_resource.setdefault(h.resource, []).extend(h.device_ids)
        if not per_resource:
            continue
        requests: list[tuple[str, str, tuple[DeviceId, ...]]] = []
        bad = False
        for resource, ids in sorted(per_resource.items()):
            identity, class_name = identities[resource]
            found, unmatched = match(
                ids, identity, devices_of_class.get(class_name, ()), resource, record.node, class_name
            )
            if unmatched:
                out.unmatched.extend(unmatched)
                bad = True
            requests.append((resource, class_name, tuple(sorted(found))))
        if bad:
            out.waiting.append(f"{ns}/{pod_name}: device IDs without exactly one DRA device")
            continue
        claim = AdoptionClaim(ns, pod_name, ref.uid, record.node, tuple(requests), record.uid)
        wanted[claim.key] = claim
    for key, written in existing.items():
        if written is None or not holds(written.pod_uid):
            out.delete.append(key)
        elif key in wanted and wanted[key] != written:
            out.delete.append(key)  # replaced with what the record says now
    out.create = [claim for key, claim in wanted.items() if key not in existing]
    return out


# ---- the fence: DeviceTaintRules over devices device-plugin pods may hold unadopted ----------------
#
# draxr's own pods never get such a device (DynamicResources: NOT_ADOPTED holds the whole class back
# on the node); other schedulers, kube-scheduler first, honour DeviceTaintRules (resource.k8s.io/v1,
# GA in 1.37): a NoSchedule taint keeps the device from every claim that does not tolerate it.
# A rule selects one device (driver, pool, device), so the fence of a node is one rule per device.

FENCE_KEY = "draxr.io/device-plugin-not-adopted"  # the taint's key (adoption claims tolerate it)
FENCE_LABEL = "draxr.io/migration-fence"  # on draxr's rules; its value is FENCE_VALUE
FENCE_VALUE = "device-plugin"
FENCE_NODE_ANNOTATION = "draxr.io/fenced-node"
FENCE_PREFIX = "draxr-fence-"


@dataclass(frozen=True)
class Fence:
    """One DeviceTaintRule of draxr's: ``device`` of ``node`` may be held by a device-plugin pod
    that no adoption claim covers."""

    node: str
    device: DeviceId

    @property
    def name(self) -> str:
        """``draxr-fence-<node>-<device>-<digest>``: an admin finds a node's rules by its name."""
        digest = hashlib.sha256("/".join(self.device).encode()).hexdigest()[:8]
        stem = f"{FENCE_PREFIX}{self.node}-{self.device[2]}"[: MAX_NAME - 9].rstrip("-.")
        return f"{stem}-{digest}"

    def body(self, node_uid: str = "") -> dict[str, Any]:
        driver, pool, device = self.device
        metadata: dict[str, Any] = {
            "name": self.name,
            "labels": {FENCE_LABEL: FENCE_VALUE, "app.kubernetes.io/managed-by": "draxr"},
            "annotations": {FENCE_NODE_ANNOTATION: self.node},
        }
        if node_uid:  # (the garbage collector deletes it with its node)
            metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": node_uid}]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": metadata,
            "spec": {
                "deviceSelector": {"driver": driver, "pool": pool, "device": device},
                "taint": {"key": FENCE_KEY, "effect": "NoSchedule"},
            },
        }


def fence_from_api(rule: Mapping[str, Any]) -> Fence | None:
    """One of draxr's rules as written; None for another's, or one of draxr's that reads otherwise
    (edited: to replace)."""
    meta, spec = rule.get("metadata") or {}, rule.get("spec") or {}
    node = str((meta.get("annotations") or {}).get(FENCE_NODE_ANNOTATION) or "")
    selector, taint = spec.get("deviceSelector") or {}, spec.get("taint") or {}
    device = (str(selector.get("driver") or ""), str(selector.get("pool") or ""), str(selector.get("device") or ""))
    if not node or not all(device) or (taint.get("key"), taint.get("effect")) != (FENCE_KEY, "NoSchedule"):
        return None
    fence = Fence(node, device)
    return fence if fence.name == meta.get("name") else None


def is_fence(rule: Mapping[str, Any]) -> bool:
    return ((rule.get("metadata") or {}).get("labels") or {}).get(FENCE_LABEL) == FENCE_VALUE


@dataclass(frozen=True)
class Unadopted:
    """A running device-plugin pod's resource (of a class with an identity) no adoption claim covers."""

    namespace: str
    pod: str
    resource: str
    created: float | None = None  # epoch seconds


def fenced(
    node: str,
    record: NodeRecord | str | None,
    now: float,
    unadopted: Iterable[Unadopted],
    identities: Mapping[str, tuple[Identity, str]],
    devices_of_class: Mapping[str, Sequence[DeviceInfo]],
) -> tuple[frozenset[DeviceId], tuple[str, ...]]:
    """The devices of ``node`` to fence, and why (one line per class). Exactly the devices a fresh
    record names for the unadopted pods when it names them all, each ID matching one device; all
    of the class's devices on the node when it cannot tell (no record, a stale or unreadable one, a
    pod it does not list, an ID matching no device or several)."""
    fresh = record if isinstance(record, NodeRecord) and not record.stale(now) else None
    if record is None:
        unknown = "no DevicePluginRecord for the node (is the node agent running?)"
    elif isinstance(record, str):
        unknown = f"its DevicePluginRecord is unreadable: {record}"
    elif fresh is None:
        unknown = "its DevicePluginRecord is stale (the node agent stopped refreshing it)"
    else:
        unknown = ""
    held = fresh.pods() if fresh is not None else {}
    by_class: dict[str, list[Unadopted]] = {}
    for u in unadopted:
        if u.resource in identities:
            by_class.setdefault(identities[u.resource][1], []).append(u)
    out: set[DeviceId] = set()
    why: list[str] = []
    for class_name, pods in sorted(by_class.items()):
        devices = devices_of_class.get(class_name, ())
        names = ", ".join(sorted({f"{u.namespace}/{u.pod}" for u in pods}))
        cannot = unknown
        exact: set[DeviceId] = set()
        observed = fresh.observed if fresh is not None else 0.0
        for u in pods if fresh is not None else ():
            ids = [i for h in held.get((u.namespace, u.pod), ()) if h.resource == u.resource for i in h.device_ids]
            if not ids or (u.created is not None and u.created > observed):
                cannot = f"its DevicePluginRecord does not list pod {u.namespace}/{u.pod}"
                break
            identity = identities[u.resource][0]
            found, unmatched = match(ids, identity, devices, u.resource, node, class_name)
            if unmatched:
                cannot = f"{u.resource} device {unmatched[0].device_id} {unmatched[0].reason}"
                break
            exact.update(found)
        if cannot:
            if devices:
                out.update(d.id for d in devices)
                why.append(f"all {len(devices)} devices of DeviceClass {class_name} ({names} not adopted): {cannot}")
        elif exact:
            out.update(exact)
            why.append(f"the devices of {names} (DeviceClass {class_name}): not adopted yet")
    return frozenset(out), tuple(why)
