"""DeviceTaintRules applied to the devices of ResourceSlices, as kube-scheduler's allocator sees them.

A port of ``applyPatches`` in k8s.io/dynamic-resource-allocation v0.37.2
``resourceslice/tracker/tracker.go``: kube-scheduler 1.37 (DRADeviceTaintRules, GA and on by
default; alpha in 1.35, beta and off by default in 1.36) hands its allocator the slices of
``ListPatchedResourceSlices()``, i.e. each slice with the taint of every DeviceTaintRule that
selects a device appended to that device's ``taints``. A rule selects a device when each of the
selector's ``driver``, ``pool`` and ``device`` that is set equals the slice's driver, the slice's
pool name and the device's name (plain string equality); an empty selector selects every device,
a rule without a selector none. The allocator then treats these taints like the driver's own:
NoSchedule and NoExecute keep the device from every request that does not tolerate them, None
and unknown effects are ignored (``allocator._taint_prevents``). The order in which rules are
appended (upstream: the informer's, i.e. unordered) decides nothing the allocator computes; here
it is the rules' names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from draxr.core.allocator.model import DeviceInfo, SliceInfo

__all__ = ["TaintRule", "apply_taint_rules", "parse_taint_rule"]

Taint = tuple[str, str, str]  # (key, value, effect), as DeviceInfo.taints


@dataclass(frozen=True, slots=True)
class TaintRule:
    """One DeviceTaintRule: its selector (None: any) and its taint."""

    name: str
    driver: str | None
    pool: str | None
    device: str | None
    taint: Taint

    def selects_slice(self, info: SliceInfo) -> bool:
        """Its driver and pool match the slice's (some of the slice's devices may still not match)."""
        return (self.driver is None or self.driver == info.driver) and (self.pool is None or self.pool == info.pool)

    def selects(self, info: SliceInfo, device: DeviceInfo) -> bool:
        return self.selects_slice(info) and (self.device is None or self.device == device.name)


def parse_taint_rule(raw: Mapping[str, Any]) -> TaintRule | None:
    """A DeviceTaintRule object (resource.k8s.io/v1); None when it has no ``deviceSelector``
    (it selects no device)."""
    spec = raw.get("spec") or {}
    selector = spec.get("deviceSelector")
    if selector is None:
        return None
    taint = spec.get("taint") or {}

    def field(name: str) -> str | None:
        value = selector.get(name)
        return None if value is None else str(value)

    return TaintRule(
        name=str((raw.get("metadata") or {}).get("name") or ""),
        driver=field("driver"),
        pool=field("pool"),
        device=field("device"),
        taint=(str(taint.get("key", "")), str(taint.get("value", "")), str(taint.get("effect", ""))),
    )


def apply_taint_rules(info: SliceInfo, rules: Iterable[TaintRule]) -> SliceInfo:
    """The slice with the rules' taints appended to the devices they select: ``info`` itself when
    no rule selects any of its devices (upstream copies the slice only then too)."""
    added: dict[int, list[Taint]] = {}
    for rule in rules:
        if not rule.selects_slice(info):
            continue
        for i, dev in enumerate(info.devices):
            if rule.device is None or rule.device == dev.name:
                added.setdefault(i, []).append(rule.taint)
    if not added:
        return info
    devices = tuple(
        replace(dev, taints=(*dev.taints, *added[i])) if i in added else dev for i, dev in enumerate(info.devices)
    )
    return replace(info, devices=devices)
