"""Watch wiring: which kinds draxr watches and where their events go (ClusterState, queue nudges).

Nothing is written by the watches. Every kind gets its own supervised informer (``watch.Informer``);
this module only says what each one feeds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from draxr.core.state import ClusterState
from draxr.kube import DEVICE_CLASSES, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
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

    return [
        Target("pods", PODS, sink.pod_upserted, sink.pod_deleted),
        Target("nodes", NODES, *cluster_input(state.upsert_node, state.remove_node)),
        Target("resourceslices", RESOURCE_SLICES, *cluster_input(state.upsert_slice, state.remove_slice)),
        Target("deviceclasses", DEVICE_CLASSES, *cluster_input(state.upsert_class, state.remove_class)),
        Target("resourceclaims", RESOURCE_CLAIMS, sink.claim_upserted, sink.claim_deleted),
        # Without the CRD installed the informer waits for it; draxr schedules meanwhile from
        # DeviceClass mappings alone.
        Target("extendedresourcemappings", MAPPINGS, sink.mapping_upserted, sink.mapping_deleted, optional=True),
    ]
