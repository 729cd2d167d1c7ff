"""Claims, requests and classes in the shapes the search uses (upstream's requestAccessor & co)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from draxr.core.allocator.outcomes import AllocationFatalError, FatalKind
from draxr.core.quantity import Quantity

__all__ = ["ClassInfo", "RequestInfo", "claim_ref", "parse_class", "parse_request"]

EXACT_COUNT = "ExactCount"
ALL = "All"


def claim_ref(claim: Mapping[str, Any]) -> str:
    """klog.KObj format: namespace/name (or just name)."""
    meta = claim.get("metadata") or {}
    ns, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{ns}/{name}" if ns else str(name)


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """An exact request or a subrequest (upstream requestAccessor)."""

    name: str
    class_name: str
    mode: str
    count: int
    admin_access: bool
    has_admin_access: bool  # `AdminAccess != nil`
    selectors: tuple[str | None, ...]  # None: selector without `cel`
    tolerations: tuple[Mapping[str, Any], ...]
    tolerations_raw: Any  # as given, copied into results
    has_capacity: bool  # `Capacity != nil`
    capacity_requests: Mapping[str, Quantity] | None  # `Capacity.Requests`, None when nil
    has_derived_attributes: bool


def parse_request(raw: Mapping[str, Any], claim: str, admin_allowed: bool) -> RequestInfo:
    """From an `exactly` or a `firstAvailable[i]` dict; subrequests cannot ask for admin access."""
    name = str(raw.get("name", ""))
    capacity = raw.get("capacity")
    caps: dict[str, Quantity] | None = None
    if capacity is not None and capacity.get("requests") is not None:
        try:
            caps = {str(k): Quantity.parse(v) for k, v in capacity["requests"].items()}
        except (ValueError, TypeError) as exc:
            raise AllocationFatalError(
                f"claim {claim}, request {name}: invalid capacity request: {exc}", FatalKind.INVALID_INPUT
            ) from exc
    admin = raw.get("adminAccess") if admin_allowed else None
    selectors = tuple(
        (str((s.get("cel") or {}).get("expression", "")) if s.get("cel") is not None else None)
        for s in raw.get("selectors") or ()
    )
    count = raw.get("count")
    return RequestInfo(
        name=name,
        class_name=str(raw.get("deviceClassName") or ""),
        mode=str(raw.get("allocationMode") or ""),
        count=int(count) if count is not None else 0,
        admin_access=admin is True,
        has_admin_access=admin is not None,
        selectors=selectors,
        tolerations=tuple(raw.get("tolerations") or ()),
        tolerations_raw=raw.get("tolerations"),
        has_capacity=capacity is not None,
        capacity_requests=caps,
        has_derived_attributes=bool(raw.get("derivedAttributes")),
    )


@dataclass(frozen=True, slots=True)
class ClassInfo:
    name: str
    raw: Mapping[str, Any]
    selectors: tuple[str | None, ...]
    config: tuple[Mapping[str, Any], ...]
    cache_key: tuple[str, str] | None


def parse_class(raw: Mapping[str, Any]) -> ClassInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    rv = meta.get("resourceVersion")
    name = str(meta.get("name", ""))
    return ClassInfo(
        name=name,
        raw=raw,
        selectors=tuple(
            (str((s.get("cel") or {}).get("expression", "")) if s.get("cel") is not None else None)
            for s in spec.get("selectors") or ()
        ),
        config=tuple(spec.get("config") or ()),
        cache_key=(str(meta.get("uid") or name), str(rv)) if rv else None,
    )
