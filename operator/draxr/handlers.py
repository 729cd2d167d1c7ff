"""kopf wiring: watch events -> ClusterState (+ queue nudges). Nothing is written by kopf: Pods are
watched with on.event only (no change handlers, timers, daemons or indexes, which would annotate or
finalize every pod, or gate on an O(N²) index)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf

from draxr import logs
from draxr.core.state import ClusterState

log = logs.get("draxr.handlers")


class Sink:
    """What the handlers call into; the operator implements it."""

    state: ClusterState

    def pod_upserted(self, pod: dict[str, Any]) -> None: ...
    def pod_deleted(self, pod: dict[str, Any]) -> None: ...
    def claim_upserted(self, claim: dict[str, Any]) -> None: ...
    def claim_deleted(self, claim: dict[str, Any]) -> None: ...
    def cluster_changed(self) -> None: ...
    def mapping_upserted(self, obj: dict[str, Any]) -> None: ...
    def mapping_deleted(self, obj: dict[str, Any]) -> None: ...


def build_registry(sink: Sink, login: Callable[..., Any]) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    kopf.on.login(registry=registry)(login)

    def deleted(event: dict[str, Any]) -> bool:
        return event.get("type") == "DELETED"

    @kopf.on.event("v1", "pods", registry=registry)  # type: ignore[arg-type]
    async def pods(event: dict[str, Any], **_: Any) -> None:
        obj = event["object"]
        sink.pod_deleted(obj) if deleted(event) else sink.pod_upserted(obj)

    # Cluster-scoped inputs of placement: upsert or remove in the state, then nudge the queue.
    state = sink.state
    inputs: dict[tuple[str, str, str], tuple[Callable[[Any], None], Callable[[str], None]]] = {
        ("", "v1", "nodes"): (state.upsert_node, state.remove_node),
        ("resource.k8s.io", "v1", "resourceslices"): (state.upsert_slice, state.remove_slice),
        ("resource.k8s.io", "v1", "deviceclasses"): (state.upsert_class, state.remove_class),
    }
    for (group, version, plural), (upsert, remove) in inputs.items():

        async def on_input(
            event: dict[str, Any],
            upsert: Callable[[Any], None] = upsert,
            remove: Callable[[str], None] = remove,
            **_: Any,
        ) -> None:
            obj = event["object"]
            remove(obj["metadata"]["name"]) if deleted(event) else upsert(obj)
            sink.cluster_changed()

        kopf.on.event(group, version, plural, registry=registry, id=plural)(on_input)  # type: ignore[arg-type]

    @kopf.on.event("resource.k8s.io", "v1", "resourceclaims", registry=registry)  # type: ignore[arg-type]
    async def claims(event: dict[str, Any], **_: Any) -> None:
        obj = event["object"]
        sink.claim_deleted(obj) if deleted(event) else sink.claim_upserted(obj)

    # ExtendedResourceMapping CRs. Without the CRD installed kopf just waits for it to appear
    # (it watches CRDs); draxr schedules meanwhile from DeviceClass mappings alone.
    @kopf.on.event("draxr.io", "v1alpha1", "extendedresourcemappings", registry=registry)  # type: ignore[arg-type]
    async def mappings(event: dict[str, Any], **_: Any) -> None:
        obj = event["object"]
        sink.mapping_deleted(obj) if deleted(event) else sink.mapping_upserted(obj)

    return registry
