"""Building the AllocationResult of one claim exactly as upstream incubating does (v0.37.2).

* `devices.results` in allocation order; `request` is `req` or `req/sub`; `adminAccess` only when
  true; `tolerations` copied from the request; binding conditions copied with
  DeviceBindingAndStatus; `shareID` and `consumedCapacity` for multi-allocatable devices.
* `devices.config`: the configs of each class once (FromClass, `requests` = the requests using
  that class), then claim configs once each (FromClaim) if they name no request or name one
  that was allocated (`req` or the chosen `req/sub`); finally a config covering every request
  of the claim gets `requests` cleared ("applies to all").
* `nodeSelector`: `metadata.name In [node]` if any device is node-local or binds to the node,
  else the merged single-term selectors of the devices, else absent.
Empty fields are left out, as Go's JSON encoding does with `omitempty`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from draxr.core.allocator.claim_requests import ClassInfo
from draxr.core.allocator.model import DeviceInfo, SliceInfo
from draxr.core.allocator.outcomes import AllocationFatalError, FatalKind
from draxr.core.quantity import Quantity

__all__ = ["ChosenRequest", "DeviceResult", "build_result"]


@dataclass(frozen=True, slots=True)
class ChosenRequest:
    """One request of a claim as the search settled it."""

    name: str  # as in the claim spec
    subrequest: str | None  # `req/sub` of the firstAvailable entry chosen, None for an exact request
    class_: ClassInfo  # of the request, or of the chosen subrequest


@dataclass(slots=True)
class DeviceResult:
    request: str  # request or subrequest name
    parent_request: str  # "" unless a subrequest
    device: DeviceInfo
    slice: SliceInfo
    share_id: str | None
    consumed_capacity: dict[str, Quantity] | None
    admin_access: bool
    tolerations: Any

    def request_name(self) -> str:
        return f"{self.parent_request}/{self.request}" if self.parent_request else self.request


def _device_entry(r: DeviceResult, binding: bool) -> dict[str, Any]:
    d = r.device
    out: dict[str, Any] = {"request": r.request_name(), "driver": d.driver, "pool": d.pool, "device": d.name}
    if r.admin_access:
        out["adminAccess"] = True
    if r.tolerations:
        out["tolerations"] = [_toleration(t) for t in r.tolerations]
    if binding:
        if d.binding_conditions:
            out["bindingConditions"] = list(d.binding_conditions)
        if d.binding_failure_conditions:
            out["bindingFailureConditions"] = list(d.binding_failure_conditions)
    if r.share_id is not None:
        out["shareID"] = r.share_id
    if r.consumed_capacity:
        out["consumedCapacity"] = {k: v.string() for k, v in r.consumed_capacity.items()}
    return out


def _toleration(t: Mapping[str, Any]) -> dict[str, Any]:
    # As Go serializes a DeviceToleration: every field is omitempty.
    return {k: t[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds") if t.get(k) not in (None, "")}


def _config_entry(source: str, requests: list[str] | None, config: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in config.items() if k != "requests"}
    out["source"] = source
    if requests:
        out["requests"] = list(requests)
    return out


def build_result(
    claim: Mapping[str, Any],
    requests: Sequence[ChosenRequest],
    devices: list[DeviceResult],
    node_name: str,
    *,
    claim_ref: str,
    binding_conditions: bool,
) -> dict[str, Any]:
    """The AllocationResult of `claim`: `requests` in spec order, `devices` in allocation order.

    `claim_ref` names the claim in errors; `binding_conditions`: DRADeviceBindingAndStatus.
    """
    spec_devices = (claim.get("spec") or {}).get("devices") or {}

    configs: list[tuple[str, list[str] | None, Mapping[str, Any]]] = []
    class_ranges: dict[str, tuple[int, int]] = {}
    for r in requests:
        name = r.subrequest or r.name  # the name the request ended up with: `req` or `req/sub`
        span = class_ranges.get(r.class_.name)
        if span is not None:
            for i in range(*span):
                reqs = configs[i][1]
                assert reqs is not None
                reqs.append(name)
            continue
        start = len(configs)
        for cfg in r.class_.config:
            configs.append(("FromClass", [name], cfg))
        class_ranges[r.class_.name] = (start, len(configs))

    for cfg in spec_devices.get("config") or ():
        names = list(cfg.get("requests") or ())
        if not names:
            configs.append(("FromClaim", cfg.get("requests"), cfg))
            continue
        if any(_named_in(r, names) for r in requests):
            configs.append(("FromClaim", cfg.get("requests"), cfg))

    out_configs: list[dict[str, Any]] = []
    for source, reqs, cfg in configs:
        if reqs and all(_named_in(r, reqs) for r in requests):
            reqs = None  # applies to all
        out_configs.append(_config_entry(source, reqs, cfg))

    alloc_devices: dict[str, Any] = {}
    if devices:
        alloc_devices["results"] = [_device_entry(r, binding_conditions) for r in devices]
    if out_configs:
        alloc_devices["config"] = out_configs
    result: dict[str, Any] = {"devices": alloc_devices}
    selector = _node_selector(devices, node_name, claim_ref)
    if selector is not None:
        result["nodeSelector"] = selector
    return result


def _named_in(r: ChosenRequest, names: Sequence[str]) -> bool:
    return r.name in names or (r.subrequest is not None and r.subrequest in names)


def _node_selector(devices: list[DeviceResult], node_name: str, claim: str) -> dict[str, Any] | None:
    fields: list[Mapping[str, Any]] = []
    exprs: list[Mapping[str, Any]] = []
    for r in devices:
        s = r.slice
        if s.per_device_node_selection:
            name_set = bool(r.device.raw.get("nodeName") is not None)
            selector = r.device.node_selector
        else:
            name_set = s.node_name_set
            selector = s.node_selector
        if name_set or r.device.binds_to_node:
            return {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        if selector is not None:
            terms = selector.get("nodeSelectorTerms") or []
            if len(terms) == 1:
                _merge(terms[0].get("matchFields") or [], fields)
                _merge(terms[0].get("matchExpressions") or [], exprs)
            elif len(terms) > 1:
                raise AllocationFatalError(
                    f"create NodeSelector for claim {claim.rsplit('/', 1)[-1]}: unsupported ResourceSlice.NodeSelector "
                    f"with {len(terms)} terms",
                    FatalKind.INVALID_NODE_SELECTOR,
                )
    if not fields and not exprs:
        return None
    term: dict[str, Any] = {}
    if exprs:
        term["matchExpressions"] = [dict(e) for e in exprs]
    if fields:
        term["matchFields"] = [dict(e) for e in fields]
    return {"nodeSelectorTerms": [term]}


def _merge(source: list[Mapping[str, Any]], target: list[Mapping[str, Any]]) -> None:
    for req in source:
        values = set(req.get("values") or ())
        if not any(
            t.get("key") == req.get("key")
            and t.get("operator") == req.get("operator")
            and set(t.get("values") or ()) == values
            for t in target
        ):
            target.append(req)
