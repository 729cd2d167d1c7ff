"""ExtendedResourceMapping CRs (`draxr.io/v1alpha1`) -> overrides for `build_mapping`, and each CR's
status (conditions + capacity). Pure: the shell watches the CRs and writes the statuses.

Rules:
* a CR's mapping beats `DeviceClass.spec.extendedResourceName` (and implicit names) for its name;
* two CRs for one name: the oldest (creationTimestamp, then name) wins, the other gets Conflict and
  is ignored until the winner goes away;
* a CR with an invalid CEL selector still owns its name (so that a typo never silently moves pods
  onto devices the selector was meant to exclude): pods asking for the name stay Pending with a
  message naming the mapping, and the CR reports InvalidSelector;
* DeviceClasses of `deviceClassNames` that do not exist are skipped when scheduling (the CR
  reports DeviceClassNotFound; Ready while at least one class exists).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from draxr.core import cel
from draxr.core.mapping import OverrideMapping, override_key

__all__ = [
    "CONDITION_TYPES",
    "GROUP",
    "PLURAL",
    "VERSION",
    "MappingCR",
    "conditions",
    "desired_status",
    "invalid_selectors",
    "overrides",
    "parse_all",
    "selector_error",
    "status_changed",
    "winners",
]

GROUP = "draxr.io"
VERSION = "v1alpha1"
PLURAL = "extendedresourcemappings"
KIND = "ExtendedResourceMapping"
CONDITION_TYPES = ("Ready", "Conflict", "InvalidSelector", "DeviceClassNotFound", "DevicePluginIDsUnmatched")


@dataclass(frozen=True)
class MappingCR:
    name: str
    generation: int
    creation_timestamp: str
    resource_name: str
    class_names: tuple[str, ...]
    selectors: tuple[str, ...]
    node_selector: Mapping[str, Any] | None = field(default=None, hash=False)
    status: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_api(cls, obj: Mapping[str, Any]) -> MappingCR:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        return cls(
            name=str(meta.get("name") or ""),
            generation=int(meta.get("generation") or 0),
            creation_timestamp=str(meta.get("creationTimestamp") or ""),
            resource_name=str(spec.get("extendedResourceName") or ""),
            class_names=tuple(str(c) for c in spec.get("deviceClassNames") or ()),
            selectors=tuple(str((s.get("cel") or {}).get("expression") or "") for s in spec.get("selectors") or ()),
            node_selector=spec.get("nodeSelector") or None,
            status=obj.get("status") or {},
        )

    def override(self) -> OverrideMapping:
        """All classes, also missing ones: placement skips those that do not exist (classes come and
        go without the CR changing)."""
        return OverrideMapping(
            self.resource_name,
            self.class_names,
            self.node_selector,
            self.selectors,
            self.name,
            self.creation_timestamp,
        )


def parse_all(objs: Iterable[Mapping[str, Any]]) -> list[MappingCR]:
    """Parsed CRs, sorted by name; objects without a name or resource name are dropped."""
    crs = [MappingCR.from_api(o) for o in objs]
    return sorted((c for c in crs if c.name and c.resource_name), key=lambda c: c.name)


def winners(crs: Iterable[MappingCR]) -> dict[str, MappingCR]:
    """resource name -> the CR that owns it (the oldest; same rule as `build_mapping`)."""
    best: dict[str, MappingCR] = {}
    for cr in crs:
        if not cr.class_names:
            continue
        cur = best.get(cr.resource_name)
        if cur is None or override_key(cr.override()) < override_key(cur.override()):
            best[cr.resource_name] = cr
    return best


def overrides(crs: Iterable[MappingCR]) -> tuple[OverrideMapping, ...]:
    """What `ExtendedResources.set_overrides` takes: the winning CR of every name (losers are ignored)."""
    return tuple(cr.override() for _, cr in sorted(winners(crs).items()))


@lru_cache(maxsize=1024)
def selector_error(expression: str) -> str | None:
    """Why a selector cannot be used (compile error, not bool), or None. Cached (also failures)."""
    if not expression.strip():
        return "empty CEL expression"
    try:
        cel.compile_selector(expression)
    except cel.CelCompileError as exc:
        return str(exc)
    return None


def invalid_selectors(selectors: Sequence[str]) -> list[str]:
    return [f"selectors[{i}]: {err}" for i, e in enumerate(selectors) if (err := selector_error(e)) is not None]


def _condition(ctype: str, status: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": "True" if status else "False",
        "observedGeneration": generation,
        "reason": reason,
        "message": message,
    }


def conditions(
    cr: MappingCR, crs: Iterable[MappingCR], existing_classes: Collection[str], unmatched: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Ready, Conflict, InvalidSelector, DeviceClassNotFound (without lastTransitionTime), and
    DevicePluginIDsUnmatched when the name's class declares a device-plugin identity
    (``unmatched``: the running pods' device IDs that match no DRA device or several; None: no
    identity, no condition)."""
    g = cr.generation
    owner = winners(crs).get(cr.resource_name)
    conflict = owner is not None and owner.name != cr.name
    bad = invalid_selectors(cr.selectors)
    missing = [c for c in cr.class_names if c not in existing_classes]
    out = []
    if conflict:
        assert owner is not None
        out.append(
            _condition(
                "Conflict",
                True,
                "OlderMappingWins",
                f"ExtendedResourceMapping {owner.name!r} (older) already maps {cr.resource_name}; this one is "
                "ignored until that one is deleted or maps another name",
                g,
            )
        )
    else:
        out.append(_condition("Conflict", False, "NoConflict", f"the only mapping in force for {cr.resource_name}", g))
    if bad:
        out.append(
            _condition(
                "InvalidSelector",
                True,
                "CompileError",
                "; ".join(bad) + f" (pods requesting {cr.resource_name} stay Pending until the selector is fixed)",
                g,
            )
        )
    else:
        out.append(_condition("InvalidSelector", False, "SelectorsValid", "all selectors compile", g))
    if missing:
        usable = "some listed classes are still used" if len(missing) < len(cr.class_names) else "no class is usable"
        out.append(
            _condition(
                "DeviceClassNotFound",
                True,
                "Missing",
                f"DeviceClass(es) not found: {', '.join(missing)}; {usable} (create them or fix deviceClassNames)",
                g,
            )
        )
    else:
        out.append(_condition("DeviceClassNotFound", False, "AllFound", "every DeviceClass exists", g))
    if conflict:
        ready = _condition("Ready", False, "Conflict", "another mapping owns the name (see Conflict)", g)
    elif bad:
        ready = _condition("Ready", False, "InvalidSelector", "a selector does not compile (see InvalidSelector)", g)
    elif len(missing) == len(cr.class_names):
        ready = _condition("Ready", False, "DeviceClassNotFound", "none of the DeviceClasses exists", g)
    else:
        classes = ", then ".join(c for c in cr.class_names if c not in missing)
        where = " on the nodes its nodeSelector selects" if cr.node_selector else ""
        ready = _condition("Ready", True, "Serving", f"{cr.resource_name} is served from {classes}{where}", g)
    if unmatched:
        shown = "; ".join(unmatched[:5]) + (f"; and {len(unmatched) - 5} more" if len(unmatched) > 5 else "")
        out.append(
            _condition(
                "DevicePluginIDsUnmatched",
                True,
                "Unmatched",
                f"{shown} (their pods' devices are not adopted; see kubectl draxr migration)",
                g,
            )
        )
    elif unmatched is not None:
        out.append(
            _condition(
                "DevicePluginIDsUnmatched", False, "AllMatched", "every device-plugin ID matches one DRA device", g
            )
        )
    return [ready, *out]


def desired_status(
    cr: MappingCR,
    crs: Iterable[MappingCR],
    existing_classes: Collection[str],
    capacity: Mapping[str, int],
    now: str,
    unmatched: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The status to write: conditions (lastTransitionTime kept while a condition's status is
    unchanged, else ``now``) and capacity ({total, allocated, free, nodes})."""
    previous = {c.get("type"): c for c in (cr.status.get("conditions") or ()) if isinstance(c, Mapping)}
    conds = []
    for c in conditions(cr, crs, existing_classes, unmatched):
        old = previous.get(c["type"])
        since = old.get("lastTransitionTime") if old is not None and old.get("status") == c["status"] else None
        conds.append({**c, "lastTransitionTime": since or now})
    return {"observedGeneration": cr.generation, "conditions": conds, "capacity": dict(capacity)}


def status_changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return any(current.get(k) != v for k, v in desired.items())
