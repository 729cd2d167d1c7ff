"""Terse builders for the v1 API dicts the allocator consumes (tests, benchmarks, examples)."""

from __future__ import annotations

from typing import Any

__all__ = ["claim", "device", "device_class", "node", "request", "slice_", "subrequest"]


def node(name: str = "node-1", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


def device(name: str, **fields: Any) -> dict[str, Any]:
    """`attributes={"model": "a100", "numa": 0}` become typed attribute values; other fields pass through."""
    out: dict[str, Any] = {"name": name}
    attrs = fields.pop("attributes", None)
    if attrs is not None:
        out["attributes"] = {k: _attr(v) for k, v in attrs.items()}
    capacity = fields.pop("capacity", None)
    if capacity is not None:
        out["capacity"] = {k: (v if isinstance(v, dict) else {"value": str(v)}) for k, v in capacity.items()}
    out.update(fields)
    return out


def _attr(v: Any) -> dict[str, Any]:
    if isinstance(v, dict):
        return v
    if isinstance(v, bool):
        return {"bool": v}
    if isinstance(v, int):
        return {"int": v}
    return {"string": str(v)}


def slice_(
    name: str,
    devices: list[dict[str, Any]] | None = None,
    *,
    driver: str = "driver-a",
    pool: str = "pool-1",
    generation: int = 1,
    count: int = 1,
    node_name: str | None = "node-1",
    **spec: Any,
) -> dict[str, Any]:
    """A ResourceSlice; by default local to node-1. Pass node_name=None with allNodes=True etc."""
    s: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
    }
    if node_name is not None:
        s["nodeName"] = node_name
    if devices is not None:
        s["devices"] = devices
    s.update(spec)
    return {"metadata": {"name": name}, "spec": s}


def device_class(name: str, *exprs: str, config: list[dict[str, Any]] | None = None, **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if exprs:
        spec["selectors"] = [{"cel": {"expression": e}} for e in exprs]
    if config is not None:
        spec["config"] = config
    return {"metadata": {"name": name, **meta}, "spec": spec}


def request(
    name: str, class_name: str = "class-a", count: int = 1, *, selectors: tuple[str, ...] = (), **fields: Any
) -> dict[str, Any]:
    """An exact request; `mode="All"` for allocationMode All."""
    mode = fields.pop("mode", "ExactCount")
    exactly: dict[str, Any] = {"deviceClassName": class_name, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    exactly.update(fields)
    return {"name": name, "exactly": exactly}


def subrequest(
    name: str, class_name: str = "class-a", count: int = 1, *, selectors: tuple[str, ...] = (), **fields: Any
) -> dict[str, Any]:
    r = request(name, class_name, count, selectors=selectors, **fields)
    return {"name": name, **r["exactly"]}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    allocation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints is not None:
        devices["constraints"] = constraints
    if config is not None:
        devices["config"] = config
    out: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "spec": {"devices": devices}}
    if allocation is not None:
        out["status"] = {"allocation": allocation}
    return out
