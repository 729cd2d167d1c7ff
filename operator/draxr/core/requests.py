"""Pod -> per-node device requests and request mappings (KEP-5004, contract §2.2-2.3).

A port of kube-scheduler's `filterExtendedResources` / `createRequestsAndMappings`
(dynamicresources `extendeddynamicresources.go`, after kubernetes#134882). The pod's side (its
requests per container, `resource.PodRequests`) is read once into `core.pod_view.PodView`.

Use `prepare_pod` once per pod and scheduling cycle, then `for_node` per candidate node; the
request building is memoised per set of DRA-served resources, so nodes that agree on which
resources come from DRA share one result. Malformed quantities raise ValueError (the API server
never stores any).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.limits import ALLOCATION_RESULTS_MAX_SIZE, DEVICE_REQUESTS_MAX_SIZE
from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.pod_view import (
    ContainerView,
    PodView,
    container_requests,
    container_views,
    is_sidecar,
    pod_requests,
    pod_view,
)
from draxr.core.quantity import QuantityLike, value

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DEVICE_REQUESTS_MAX_SIZE",
    "DeviceRequest",
    "NodeRequests",
    "PodExtendedResources",
    "RequestMapping",
    "container_requests",
    "create_requests_and_mappings",
    "is_sidecar",
    "node_requests",
    "pod_requests",
    "prepare_pod",
]

# At most this many combinations of preferred classes are tried per node (mapping CRs with several
# deviceClassNames, for pods that request several such names).
MAX_CLASS_CHOICES = 16
# Which class of each multi-class mapping a request set uses: (resource name, index) for indexes > 0.
ClassChoice = tuple[tuple[str, int], ...]

# --------------------------------------------------------------------------- result types


@dataclass(frozen=True, order=True)
class DeviceRequest:
    """One entry of the special claim's `spec.devices.requests` (ExactCount of one class).

    `selectors` (CEL expressions) come only from an ExtendedResourceMapping's `spec.selectors`;
    DeviceClass mappings never have any, so their claims keep kube-scheduler's exact shape."""

    name: str
    device_class_name: str
    count: int
    selectors: tuple[str, ...] = ()

    def to_api(self) -> dict[str, Any]:
        exactly: dict[str, Any] = {
            "deviceClassName": self.device_class_name,
            "allocationMode": "ExactCount",
            "count": self.count,
        }
        if self.selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in self.selectors]
        return {"name": self.name, "exactly": exactly}


@dataclass(frozen=True)
class RequestMapping:
    """One entry of `pod.status.extendedResourceClaimStatus.requestMappings`."""

    container_name: str
    resource_name: str
    request_name: str

    def to_api(self) -> dict[str, str]:
        return {
            "containerName": self.container_name,
            "resourceName": self.resource_name,
            "requestName": self.request_name,
        }


@dataclass(frozen=True)
class NodeRequests:
    """How one node would serve the pod's extended resources.

    `device_plugin` and `dra` map resource name -> pod-level count (`Quantity.Value()`); the
    device-plugin capacity check against what other pods use is the placement filter's job.
    `reasons` is non-empty when the node cannot take the pod; requests and mappings are then empty.
    """

    device_plugin: Mapping[str, int]
    dra: Mapping[str, int]
    dra_requests: tuple[DeviceRequest, ...] = ()
    mappings: tuple[RequestMapping, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def unschedulable(self) -> str | None:
        return ", ".join(self.reasons) if self.reasons else None

    @property
    def needs_claim(self) -> bool:
        """Whether a special claim must be written (upstream writes none for an empty request list)."""
        return not self.reasons and bool(self.dra_requests)

    @property
    def device_count(self) -> int:
        return sum(r.count for r in self.dra_requests)

    def claim_requests(self) -> list[dict[str, Any]]:
        """The claim's `spec.devices.requests`."""
        return [r.to_api() for r in self.dra_requests]

    def request_mappings(self) -> list[dict[str, str]]:
        """The pod's `status.extendedResourceClaimStatus.requestMappings`."""
        return [m.to_api() for m in self.mappings]


# --------------------------------------------------------------------------- request building


def _request_for(
    c: ContainerView,
    resource: str,
    class_name: str,
    reusable: Sequence[DeviceRequest | None],
    selectors: tuple[str, ...] = (),
) -> tuple[DeviceRequest | None, list[RequestMapping]]:
    """`createResourceRequestAndMappings`: reuse `reusable` in order until the container's
    quantity is covered, else add an own request for the rest."""
    # Upstream skips non-int64 and zero quantities (the view keeps only positive int64s).
    wanted = c.device_counts.get(resource)
    if wanted is None:
        return None, []
    mappings: list[RequestMapping] = []
    covered = 0
    for r in reusable:
        if r is None:
            continue
        covered += r.count
        mappings.append(RequestMapping(c.name, resource, r.name))
        if covered >= wanted:
            return None, mappings
    name = f"container-{c.index}-request-{c.request_names.index(resource)}"
    mappings.append(RequestMapping(c.name, resource, name))
    return DeviceRequest(name, class_name, wanted - covered, selectors), mappings


def _build(
    containers: Sequence[ContainerView],
    resources: Iterable[str],
    mapping: ExtendedResourceMapping,
    choice: ClassChoice = (),
) -> tuple[tuple[DeviceRequest, ...], tuple[RequestMapping, ...]]:
    requests: list[DeviceRequest] = []
    mappings: list[RequestMapping] = []
    chosen = dict(choice)
    for resource in sorted(set(resources)):
        resolved = mapping.lookup(resource)
        if resolved is None:
            continue
        # KEP-5004 requests name exactly one class. A mapping CR's ordered class list is served by
        # building the same requests with the next class when the previous one cannot fit on the node
        # (see `class_choices`), so the claim keeps the plain `exactly` shape kubelet and drivers know.
        class_name = resolved.class_names[min(chosen.get(resource, 0), len(resolved.class_names) - 1)]
        selectors = tuple(str(x) for x in resolved.selectors) if resolved.source == "override" else ()

        # Long-lived containers run together: each gets its own full request.
        long_requests: list[DeviceRequest | None] = [None] * len(containers)
        long_mappings: list[RequestMapping] = []
        for c in containers:
            if c.long_lived:
                req, maps = _request_for(c, resource, class_name, (), selectors)
                long_requests[c.index] = req
                long_mappings.extend(maps)

        # An init container runs before everything at a later index has started, so it may borrow
        # those devices; of the extra requests init containers still need, only the largest is kept
        # (they run one after another), and every init container is pointed at it.
        largest: DeviceRequest | None = None
        short_names: set[str] = set()
        short_mappings: list[RequestMapping] = []
        for c in containers:
            if c.long_lived:
                continue
            req, maps = _request_for(c, resource, class_name, long_requests[c.index :], selectors)
            if req is not None:
                short_names.add(req.name)
                if largest is None or largest.count < req.count:
                    largest = req
            short_mappings.extend(maps)
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest.name)
            short_mappings = [
                replace(m, request_name=largest.name) if m.request_name in short_names else m for m in short_mappings
            ]

        if largest is not None:
            requests.append(largest)
        requests.extend(r for r in long_requests if r is not None)
        mappings.extend(long_mappings)
        mappings.extend(short_mappings)

    requests.sort(key=lambda r: r.name)
    return tuple(requests), tuple(mappings)


def create_requests_and_mappings(
    pod: Mapping[str, Any], dra_resources: Iterable[str], mapping: ExtendedResourceMapping
) -> tuple[tuple[DeviceRequest, ...], tuple[RequestMapping, ...]]:
    """Device requests (sorted by name) and request mappings for the resources served by DRA.

    Resources that do not resolve through `mapping` are skipped, as upstream does.
    """
    return _build(container_views(pod.get("spec") or {}), dra_resources, mapping)


# --------------------------------------------------------------------------- per node


@dataclass(frozen=True, eq=False)
class PodExtendedResources:
    """Node-independent part of the decision for one pod, built by `prepare_pod`."""

    candidates: Mapping[str, int]
    """Pod-level count of every DRA-capable extended resource name with a non-zero request."""
    mapping: ExtendedResourceMapping
    _containers: tuple[ContainerView, ...]
    _memo: dict[tuple[frozenset[str], ClassChoice], tuple[tuple[DeviceRequest, ...], tuple[RequestMapping, ...]]] = (
        field(default_factory=dict, repr=False)
    )

    @property
    def uses_dra(self) -> bool:
        """Some requested resource resolves to a class (upstream `hasDeviceClassMappedExtendedResource`)."""
        return any(name in self.mapping for name in self.candidates)

    def for_node(self, node: Mapping[str, Any]) -> NodeRequests:
        return self.for_allocatable((node.get("status") or {}).get("allocatable") or {})

    @property
    def node_restricted(self) -> bool:
        """Some requested name is mapped by a mapping CR with a nodeSelector (see `unmapped_on`)."""
        return any(
            (r := self.mapping.lookup(name)) is not None and r.node_selector is not None for name in self.candidates
        )

    def unmapped_on(self, node: Mapping[str, Any]) -> frozenset[str]:
        """Requested names whose mapping CR's nodeSelector does not select `node`: there the name is
        treated as not mapped (device plugin or "Insufficient"). A selector that cannot be evaluated
        selects nothing."""
        off: set[str] = set()
        for name in self.candidates:
            resolved = self.mapping.lookup(name)
            if resolved is None or resolved.node_selector is None:
                continue
            try:
                if not selector_matches(resolved.node_selector, node):
                    off.add(name)
            except NodeSelectorError:
                off.add(name)
        return frozenset(off)

    def class_choices(self, dra: Iterable[str]) -> list[ClassChoice]:
        """The class combinations to try on a node, in preference order: first every name with its
        first class (the empty choice), then later classes of multi-class mapping CRs, the first
        name's preference varying slowest; at most MAX_CLASS_CHOICES."""
        multi: list[tuple[str, int]] = []
        for name in sorted(dra):
            resolved = self.mapping.lookup(name)
            if resolved is not None and len(resolved.class_names) > 1:
                multi.append((name, len(resolved.class_names)))
        if not multi:
            return [()]
        out: list[ClassChoice] = []
        for combo in itertools.product(*(range(n) for _, n in multi)):
            out.append(tuple((name, i) for (name, _), i in zip(multi, combo, strict=True) if i > 0))
            if len(out) >= MAX_CLASS_CHOICES:
                break
        return out

    def for_allocatable(
        self, allocatable: Mapping[str, QuantityLike], unmapped: frozenset[str] = frozenset(), choice: ClassChoice = ()
    ) -> NodeRequests:
        """Classify per resource (device-plugin precedence), then build the claim for the DRA part.

        ``unmapped``: names treated as not mapped on this node (`unmapped_on`); ``choice``: which
        class of multi-class mappings to use (`class_choices`).

        * mapped and allocatable 0 or absent -> DRA;
        * allocatable > 0 -> device plugin (even if mapped: a node never mixes both for one name);
        * otherwise -> "Insufficient <name>", as NodeResourcesFit reports it (it runs first).
        """
        device_plugin: dict[str, int] = {}
        dra: dict[str, int] = {}
        reasons: list[str] = []
        for name in sorted(self.candidates):
            count = self.candidates[name]
            raw = allocatable.get(name)
            alloc = 0 if raw is None else value(raw)
            if alloc == 0 and name in self.mapping and name not in unmapped:
                dra[name] = count
            elif alloc > 0:
                device_plugin[name] = count
            else:
                # Upstream: absent -> DynamicResources "cannot fit resource"; present but 0 -> the
                # device-plugin path fails NodeResourcesFit. Both surface as this reason.
                reasons.append(f"Insufficient {name}")
        dp, dr = MappingProxyType(device_plugin), MappingProxyType(dra)
        if reasons:
            return NodeRequests(dp, dr, reasons=tuple(reasons))

        key = (frozenset(dra), choice)
        built = self._memo.get(key)
        if built is None:
            built = _build(self._containers, key[0], self.mapping, choice)
            self._memo[key] = built
        requests, mappings = built
        if len(requests) > DEVICE_REQUESTS_MAX_SIZE:
            reason = (
                f"extended resource claim needs {len(requests)} device requests, "
                f"more than the {DEVICE_REQUESTS_MAX_SIZE} allowed in one claim"
            )
            return NodeRequests(dp, dr, reasons=(reason,))
        devices = sum(r.count for r in requests)
        if devices > ALLOCATION_RESULTS_MAX_SIZE:
            reason = (
                f"extended resource claim needs {devices} devices, "
                f"more than the {ALLOCATION_RESULTS_MAX_SIZE} allowed in one claim"
            )
            return NodeRequests(dp, dr, reasons=(reason,))
        return NodeRequests(dp, dr, requests, mappings)


def prepare_pod(pod: Mapping[str, Any] | PodView, mapping: ExtendedResourceMapping) -> PodExtendedResources:
    """The pod's extended resources against the current mappings. Pass the pod's view (read once
    when the pod arrived, `PodInfo.view`); a pod dict is read into one first."""
    view = pod if isinstance(pod, PodView) else pod_view(pod)
    return PodExtendedResources(view.extended, mapping, view.containers)


def node_requests(pod: Mapping[str, Any], node: Mapping[str, Any], mapping: ExtendedResourceMapping) -> NodeRequests:
    """One-shot `prepare_pod(pod, mapping).for_node(node)`."""
    return prepare_pod(pod, mapping).for_node(node)
