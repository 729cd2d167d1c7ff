"""Watch wiring: which kinds draxr watches and where their events go (ClusterState, queue nudges).

Nothing is written by the watches. Every kind gets its own supervised informer (``watch.Informer``);
this module only says what each one feeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from draxr.core.state import ClusterState, without_managed_fields
from draxr.kube import (
    CSI_DRIVERS,
    CSI_NODES,
    CSI_STORAGE_CAPACITIES,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_DISRUPTION_BUDGETS,
    PODS,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICES,
    STATEFUL_SETS,
    STORAGE_CLASSES,
    VOLUME_ATTACHMENTS,
    Resource,
)
from draxr.mapping_status import MAPPINGS
from draxr.migrator import DEVICE_TAINT_RULES, RECORDS
from draxr.watch import Target

JSON = dict[str, Any]


class Sink(Protocol):
    """What the watches call into; the operator implements it."""

    state: ClusterState

    def pod_upserted(self, pod: JSON) -> None: ...
    def pod_deleted(self, pod: JSON) -> None: ...
    def claim_upserted(self, claim: JSON) -> None: ...
    def claim_deleted(self, claim: JSON) -> None: ...
    def cluster_changed(self) -> None: ...
    def mapping_upserted(self, obj: JSON) -> None: ...
    def mapping_deleted(self, obj: JSON) -> None: ...
    def record_upserted(self, obj: JSON) -> None: ...
    def record_deleted(self, obj: JSON) -> None: ...


def _name(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


def _namespaced(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _version(obj: JSON) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return None if rv is None else str(rv)


def targets(sink: Sink) -> list[Target]:
    state = sink.state

    def cluster_input(upsert: Callable[[JSON], None], remove: Callable[[str], None]) -> tuple[Any, Any]:
        """Cluster-scoped inputs of placement: upsert or remove in the state, then nudge the queue."""

        def on_upsert(obj: JSON) -> None:
            upsert(obj)
            sink.cluster_changed()

        def on_delete(obj: JSON) -> None:
            remove(_name(obj))
            sink.cluster_changed()

        return on_upsert, on_delete

    def workload(name: str, resource: Resource, kind: str) -> Target:
        """Only the selector is kept (the default spreading selector); list items carry no kind."""

        def on_upsert(obj: JSON) -> None:
            state.workloads.upsert({**obj, "kind": kind})
            sink.cluster_changed()

        def on_delete(obj: JSON) -> None:
            meta = obj.get("metadata") or {}
            state.workloads.remove(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            sink.cluster_changed()

        return Target(name, resource, on_upsert, on_delete)

    def storage_input(
        name: str,
        resource: Resource,
        upsert: Callable[[JSON], object],
        remove: Callable[[JSON], None],
        *,
        on_upsert: bool = True,
        on_delete: bool = False,
        current: Callable[[JSON], str | None] | None = None,
    ) -> Target:
        """What the volume plugins read. The events their queueing hints requeue on (``on_upsert``,
        ``on_delete``) wake pods waiting for them; the same version again (a re-list: ``current``
        gives the version held) changes nothing."""

        def upsert_event(obj: JSON) -> None:
            obj = dict(without_managed_fields(obj))
            same = current is not None and _version(obj) is not None and current(obj) == _version(obj)
            upsert(obj)
            if on_upsert and not same:
                state.storage_changed()
                sink.cluster_changed()

        def delete_event(obj: JSON) -> None:
            remove(obj)
            if on_delete:
                state.storage_changed()
                sink.cluster_changed()

        return Target(name, resource, upsert_event, delete_event)

    storage = state.storage

    def pv_version(obj: JSON) -> str | None:
        pv = storage.pvs.get(_name(obj))
        return pv.resource_version if pv is not None else None

    def pvc_version(obj: JSON) -> str | None:
        pvc = storage.pvc(*_namespaced(obj))
        return pvc.resource_version if pvc is not None else None

    return [
        Target("pods", PODS, sink.pod_upserted, sink.pod_deleted),
        Target("nodes", NODES, *cluster_input(state.upsert_node, state.remove_node)),
        Target("resourceslices", RESOURCE_SLICES, *cluster_input(state.upsert_slice, state.remove_slice)),
        Target("deviceclasses", DEVICE_CLASSES, *cluster_input(state.upsert_class, state.remove_class)),
        # Their taints on the devices they select, as kube-scheduler's allocator sees them. Not
        # served before 1.37 (resource.k8s.io/v1): the informer waits for the kind meanwhile.
        Target(
            "devicetaintrules",
            DEVICE_TAINT_RULES,
            *cluster_input(state.upsert_taint_rule, state.remove_taint_rule),
            optional=True,
        ),
        Target("resourceclaims", RESOURCE_CLAIMS, sink.claim_upserted, sink.claim_deleted),
        # What inter-pod affinity and the default topology spreading read besides pods and nodes.
        Target("namespaces", NAMESPACES, *cluster_input(state.upsert_namespace, state.remove_namespace)),
        workload("services", SERVICES, "Service"),
        workload("replicationcontrollers", REPLICATION_CONTROLLERS, "ReplicationController"),
        workload("replicasets", REPLICA_SETS, "ReplicaSet"),
        workload("statefulsets", STATEFUL_SETS, "StatefulSet"),
        # What preemption reads: it prefers victims no budget protects (no pod becomes schedulable).
        Target(
            "poddisruptionbudgets",
            POD_DISRUPTION_BUDGETS,
            state.upsert_budget,
            lambda o: state.remove_budget(*_namespaced(o)),
        ),
        # The volume plugins' inputs (core.storage): VolumeBinding's informers plus what
        # VolumeRestrictions, NodeVolumeLimits and VolumeZone read.
        storage_input(
            "persistentvolumes",
            PERSISTENT_VOLUMES,
            storage.upsert_pv,
            lambda o: storage.remove_pv(_name(o)),
            current=pv_version,
        ),
        storage_input(
            "persistentvolumeclaims",
            PERSISTENT_VOLUME_CLAIMS,
            storage.upsert_pvc,
            lambda o: storage.remove_pvc(*_namespaced(o)),
            current=pvc_version,
        ),
        storage_input(
            "storageclasses", STORAGE_CLASSES, storage.upsert_class, lambda o: storage.remove_class(_name(o))
        ),
        storage_input("csinodes", CSI_NODES, storage.upsert_csi_node, lambda o: storage.remove_csi_node(_name(o))),
        storage_input(
            "csidrivers", CSI_DRIVERS, storage.upsert_csi_driver, lambda o: storage.remove_csi_driver(_name(o))
        ),
        storage_input(
            "csistoragecapacities",
            CSI_STORAGE_CAPACITIES,
            storage.upsert_capacity,
            lambda o: storage.remove_capacity(*_namespaced(o)),
        ),
        # An attachment removed frees a slot of the node's CSI limit; a new one frees nothing.
        storage_input(
            "volumeattachments",
            VOLUME_ATTACHMENTS,
            storage.upsert_attachment,
            lambda o: storage.remove_attachment(_name(o)),
            on_upsert=False,
            on_delete=True,
        ),
        # Without the CRD installed the informer waits for it; draxr schedules meanwhile from
        # DeviceClass mappings alone.
        Target("extendedresourcemappings", MAPPINGS, sink.mapping_upserted, sink.mapping_deleted, optional=True),
        # The node agents' records of the devices running device-plugin pods hold (draxr.migrator);
        # without the CRD (the node agent is optional) nothing is adopted.
        Target("devicepluginrecords", RECORDS, sink.record_upserted, sink.record_deleted, optional=True),
    ]
