"""Watch wiring: which kinds draxr watches and where their events go (ClusterState, queue nudges).

Nothing is written by the watches. Every kind gets its own supervised informer (``watch.Informer``);
this module only says what each one feeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from draxr.core.state import ClusterState
from draxr.kube import (
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PODS,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICES,
    STATEFUL_SETS,
    Resource,
)
from draxr.mapping_status import MAPPINGS
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


def _name(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


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
            state.upsert_workload({**obj, "kind": kind})
            sink.cluster_changed()

        def on_delete(obj: JSON) -> None:
            meta = obj.get("metadata") or {}
            state.remove_workload(kind, str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            sink.cluster_changed()

        return Target(name, resource, on_upsert, on_delete)

    return [
        Target("pods", PODS, sink.pod_upserted, sink.pod_deleted),
        Target("nodes", NODES, *cluster_input(state.upsert_node, state.remove_node)),
        Target("resourceslices", RESOURCE_SLICES, *cluster_input(state.upsert_slice, state.remove_slice)),
        Target("deviceclasses", DEVICE_CLASSES, *cluster_input(state.upsert_class, state.remove_class)),
        Target("resourceclaims", RESOURCE_CLAIMS, sink.claim_upserted, sink.claim_deleted),
        # What inter-pod affinity and the default topology spreading read besides pods and nodes.
        Target("namespaces", NAMESPACES, *cluster_input(state.upsert_namespace, state.remove_namespace)),
        workload("services", SERVICES, "Service"),
        workload("replicationcontrollers", REPLICATION_CONTROLLERS, "ReplicationController"),
        workload("replicasets", REPLICA_SETS, "ReplicaSet"),
        workload("statefulsets", STATEFUL_SETS, "StatefulSet"),
        # Without the CRD installed the informer waits for it; draxr schedules meanwhile from
        # DeviceClass mappings alone.
        Target("extendedresourcemappings", MAPPINGS, sink.mapping_upserted, sink.mapping_deleted, optional=True),
    ]
