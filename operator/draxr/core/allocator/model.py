"""ResourceSlices parsed once into the shapes the allocator walks.

Parsing is the expensive, allocation-independent part (quantities, counters, taints), so a
`SliceInfo` is built once per slice object and reused across pods and nodes. Nothing here
interprets pools or node relevance; that is pools.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draxr.core.allocator.outcomes import AllocationFatalError, FatalKind
from draxr.core.quantity import Quantity

__all__ = ["CapacityInfo", "DeviceId", "DeviceInfo", "SliceInfo", "parse_slice"]

# (driver, pool, device): upstream's DeviceID.
DeviceId = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class CapacityInfo:
    value: Quantity
    # requestPolicy, parsed; `has_policy` mirrors `RequestPolicy != nil`.
    has_policy: bool = False
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] | None = None  # None: field absent
    has_range: bool = False
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None


@dataclass(eq=False, slots=True)
class DeviceInfo:
    name: str
    raw: Mapping[str, Any]
    index: int  # position in its slice
    driver: str
    pool: str
    id: DeviceId
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: dict[str, CapacityInfo]
    # ((counterSet, ((counter, value), ...)), ...) in API order.
    consumes_counters: tuple[tuple[str, tuple[tuple[str, Quantity], ...]], ...]
    uses_compatibility_groups: bool
    # (key, value, effect)
    taints: tuple[tuple[str, str, str], ...]
    # Go's nil-vs-empty distinction matters for pool ordering, so None means absent.
    binding_conditions: list[str] | None
    binding_failure_conditions: list[str] | None
    binds_to_node: bool
    allow_multiple_allocations: bool | None
    node_name: str
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    has_negative_capacity: bool
    view: Any = None  # cel.DeviceView, built lazily on first CEL evaluation


@dataclass(eq=False, slots=True)
class SliceInfo:
    name: str
    raw: Mapping[str, Any]
    driver: str
    pool: str
    generation: int
    resource_slice_count: int
    node_name: str  # "" when unset
    node_name_set: bool
    all_nodes: bool
    node_selector: Mapping[str, Any] | None
    per_device_node_selection: bool | None  # None when the field is absent
    shared_counters: tuple[tuple[str, dict[str, Quantity]], ...]
    devices: tuple[DeviceInfo, ...]
    uses_compatibility_groups: bool
    # Identity for caches that outlive one call: (uid or name, resourceVersion), None if unknown.
    cache_key: tuple[str, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _qty(raw: Any, what: str) -> Quantity:
    try:
        return Quantity.parse(raw)
    except (ValueError, TypeError) as exc:
        raise AllocationFatalError(f"{what}: invalid quantity {raw!r}: {exc}", FatalKind.INVALID_INPUT) from exc


def _capacity(raw: Mapping[str, Any], what: str) -> CapacityInfo:
    value = _qty(raw.get("value", "0"), what)
    policy = raw.get("requestPolicy")
    if policy is None:
        return CapacityInfo(value=value)
    default = _qty(policy["default"], what) if policy.get("default") is not None else None
    vv = policy.get("validValues")
    valid_values = tuple(_qty(v, what) for v in vv) if vv is not None else None
    rng = policy.get("validRange")
    if rng is None:
        return CapacityInfo(value=value, has_policy=True, default=default, valid_values=valid_values)
    return CapacityInfo(
        value=value,
        has_policy=True,
        default=default,
        valid_values=valid_values,
        has_range=True,
        range_min=_qty(rng["min"], what) if rng.get("min") is not None else None,
        range_max=_qty(rng["max"], what) if rng.get("max") is not None else None,
        range_step=_qty(rng["step"], what) if rng.get("step") is not None else None,
    )


def _device(raw: Mapping[str, Any], index: int, driver: str, pool: str, slice_name: str) -> DeviceInfo:
    name = str(raw.get("name", ""))
    what = f"ResourceSlice {slice_name}, device {name}"
    capacity = {str(k): _capacity(v or {}, f"{what}, capacity {k}") for k, v in (raw.get("capacity") or {}).items()}
    consumes: list[tuple[str, tuple[tuple[str, Quantity], ...]]] = []
    groups = False
    for c in raw.get("consumesCounters") or ():
        counters = tuple(
            (str(k), _qty((v or {}).get("value", "0"), f"{what}, counter {k}"))
            for k, v in (c.get("counters") or {}).items()
        )
        consumes.append((str(c.get("counterSet", "")), counters))
        groups = groups or bool(c.get("compatibilityGroups"))
    taints = tuple(
        (str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", ""))) for t in raw.get("taints") or ()
    )
    negative = any(c.value.sign() < 0 or (c.default is not None and c.default.sign() < 0) for c in capacity.values())
    bc = raw.get("bindingConditions")
    bfc = raw.get("bindingFailureConditions")
    amu = raw.get("allowMultipleAllocations")
    return DeviceInfo(
        name=name,
        raw=raw,
        index=index,
        driver=driver,
        pool=pool,
        id=(driver, pool, name),
        attributes=raw.get("attributes") or {},
        capacity=capacity,
        consumes_counters=tuple(consumes),
        uses_compatibility_groups=groups,
        taints=taints,
        binding_conditions=list(bc) if bc is not None else None,
        binding_failure_conditions=list(bfc) if bfc is not None else None,
        binds_to_node=bool(raw.get("bindsToNode") or False),
        allow_multiple_allocations=bool(amu) if amu is not None else None,
        node_name=str(raw.get("nodeName") or ""),
        all_nodes=bool(raw.get("allNodes") or False),
        node_selector=raw.get("nodeSelector"),
        has_negative_capacity=negative,
    )


def parse_slice(raw: Mapping[str, Any]) -> SliceInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    name = str(meta.get("name", ""))
    driver = str(spec.get("driver", ""))
    pool_raw = spec.get("pool") or {}
    pool = str(pool_raw.get("name", ""))
    devices = tuple(_device(d, i, driver, pool, name) for i, d in enumerate(spec.get("devices") or ()))
    shared: list[tuple[str, dict[str, Quantity]]] = []
    for cs in spec.get("sharedCounters") or ():
        shared.append(
            (
                str(cs.get("name", "")),
                {
                    str(k): _qty((v or {}).get("value", "0"), f"ResourceSlice {name}, counter {k}")
                    for k, v in (cs.get("counters") or {}).items()
                },
            )
        )
    pdns = spec.get("perDeviceNodeSelection")
    rv = meta.get("resourceVersion")
    ident = meta.get("uid") or name
    return SliceInfo(
        name=name,
        raw=raw,
        driver=driver,
        pool=pool,
        generation=int(pool_raw.get("generation") or 0),
        resource_slice_count=int(pool_raw.get("resourceSliceCount") or 0),
        node_name=str(spec.get("nodeName") or ""),
        node_name_set=spec.get("nodeName") is not None,
        all_nodes=bool(spec.get("allNodes") or False),
        node_selector=spec.get("nodeSelector"),
        per_device_node_selection=bool(pdns) if pdns is not None else None,
        shared_counters=tuple(shared),
        devices=devices,
        uses_compatibility_groups=any(d.uses_compatibility_groups for d in devices),
        cache_key=(str(ident), str(rv)) if rv else None,
    )


def parse_slices(raws: Sequence[Mapping[str, Any]]) -> list[SliceInfo]:
    return [parse_slice(r) for r in raws]
