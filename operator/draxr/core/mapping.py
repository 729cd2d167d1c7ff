"""Extended resource name -> DeviceClass resolution (KEP-5004, contract §2.1).

Upstream keeps an incrementally patched cache (dynamic-resource-allocation
`extendedresourcecache.go`) whose results depend on event order: a class that loses a clash
never gets re-promoted, and an older class losing a clash on add does not even get its implicit
name. We recompute from the full list instead, which gives the answer the API documentation
specifies:

1. every class C is reachable as `deviceclass.resource.kubernetes.io/<C.name>`;
2. `C.spec.extendedResourceName = N` maps N to the preferred class among all classes declaring N:
   the newest `metadata.creationTimestamp`, then the lexicographically smaller name;
3. the reverse map class name -> declared N (every declaring class, winner or not, as upstream's
   `GetExtendedResource`, used by quota).

Overrides (from `ExtendedResourceMapping` CRs, see `mappings_crd`) win over both for the same name;
among overrides of one name the oldest wins.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "DEVICE_CLASS_PREFIX",
    "ExtendedResourceMapping",
    "OverrideMapping",
    "ResolvedMapping",
    "build_mapping",
    "implicit_resource_name",
    "is_dra_extended_resource_name",
    "is_extended_resource_name",
    "is_native_resource",
    "is_prefixed_native_resource",
    "mapping_from_data",
    "mapping_to_data",
    "override_key",
]

DEVICE_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"  # resourceapi.ResourceDeviceClassPrefix
_DEFAULT_NAMESPACE_PREFIX = "kubernetes.io/"  # v1.ResourceDefaultNamespacePrefix
_REQUESTS_PREFIX = "requests."  # v1.DefaultResourceRequestsPrefix

# apimachinery validation: IsQualifiedName / IsDNS1123Subdomain.
_QUALIFIED_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS1123_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(?:\.{_DNS1123_LABEL})*")

Source = Literal["override", "explicit", "implicit"]


def _is_qualified_name(value: str) -> bool:
    parts = value.split("/")
    if len(parts) > 2:
        return False
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return False
    name = parts[-1]
    return 0 < len(name) <= 63 and _QUALIFIED_NAME.fullmatch(name) is not None


def is_prefixed_native_resource(name: str) -> bool:
    """In the *kubernetes.io/ namespace (upstream checks by substring, so do we)."""
    return _DEFAULT_NAMESPACE_PREFIX in name


def is_native_resource(name: str) -> bool:
    """Unprefixed names (cpu, memory, ...) are implicitly in the kubernetes.io/ namespace."""
    return "/" not in name or is_prefixed_native_resource(name)


def is_extended_resource_name(name: str) -> bool:
    """`v1helper.IsExtendedResourceName`: outside kubernetes.io/, no `requests.` prefix, and
    `requests.<name>` is a valid qualified name (so at most 63 characters after the slash)."""
    if is_native_resource(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return _is_qualified_name(_REQUESTS_PREFIX + name)


def is_dra_extended_resource_name(name: str) -> bool:
    """`schedutil.IsDRAExtendedResourceName`: an extended resource name or an implicit class name
    (which lives in kubernetes.io/ and so is not an extended resource name by the classic rule)."""
    return is_extended_resource_name(name) or name.startswith(DEVICE_CLASS_PREFIX)


def implicit_resource_name(class_name: str) -> str:
    return DEVICE_CLASS_PREFIX + class_name


@dataclass(frozen=True)
class OverrideMapping:
    """One name -> ordered class list from a mapping CR; wins over DeviceClass mappings.

    `node_selector` (a core/v1 NodeSelector) and `selectors` (CEL expressions) are carried through
    untouched (opaque here). When several overrides claim one name, the OLDEST wins (unlike classes,
    where the newest does: a second mapping CR must not silently take a name over; it reports
    Conflict instead): oldest `creation_timestamp`, then the smaller `origin` (the CR name), then the
    smaller class list. See `override_key`.
    """

    resource_name: str
    class_names: tuple[str, ...]
    node_selector: Any = field(default=None, hash=False)
    selectors: tuple[Any, ...] = field(default=(), hash=False)
    origin: str = ""
    creation_timestamp: str | datetime | None = None


@dataclass(frozen=True)
class ResolvedMapping:
    """What a resource name resolves to. DeviceClass mappings have exactly one class."""

    resource_name: str
    class_names: tuple[str, ...]
    source: Source
    node_selector: Any = field(default=None, hash=False)
    selectors: tuple[Any, ...] = field(default=(), hash=False)
    origin: str = field(default="", compare=False)  # the mapping CR's name for overrides

    @property
    def class_name(self) -> str:
        """The (first) class: what a plain KEP-5004 device request uses."""
        return self.class_names[0]


@dataclass(frozen=True, eq=False)
class ExtendedResourceMapping:
    """Immutable result of `build_mapping`; cheap lookups, safe to share between cycles."""

    _by_name: Mapping[str, ResolvedMapping]
    _explicit_by_class: Mapping[str, str]

    def lookup(self, resource_name: str) -> ResolvedMapping | None:
        return self._by_name.get(resource_name)

    def class_for(self, resource_name: str) -> str | None:
        resolved = self._by_name.get(resource_name)
        return None if resolved is None else resolved.class_name

    def explicit_name(self, class_name: str) -> str | None:
        """The extendedResourceName the class declares (whether or not it won the name)."""
        return self._explicit_by_class.get(class_name)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    @property
    def explicit_names(self) -> Mapping[str, str]:
        return self._explicit_by_class

    def __contains__(self, resource_name: object) -> bool:
        return resource_name in self._by_name

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExtendedResourceMapping):
            return NotImplemented
        return dict(self._by_name) == dict(other._by_name) and dict(self._explicit_by_class) == dict(
            other._explicit_by_class
        )

    __hash__ = None  # type: ignore[assignment]


_EPOCH_MIN = datetime.min.replace(tzinfo=UTC)


def _timestamp(value: object) -> datetime:
    """creationTimestamp as an aware datetime; missing or unreadable sorts as the oldest."""
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return _EPOCH_MIN
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return _EPOCH_MIN


def _newest_first(ts: datetime) -> tuple[int, int]:
    # Negated so that min() picks the newest; days/seconds/microseconds keep it exact.
    delta = ts - _EPOCH_MIN
    return (-delta.days, -(delta.seconds * 1_000_000 + delta.microseconds))


def _oldest_first(ts: datetime) -> tuple[int, int]:
    delta = ts - _EPOCH_MIN
    return (delta.days, delta.seconds * 1_000_000 + delta.microseconds)


def override_key(ov: OverrideMapping) -> tuple[tuple[int, int], str, tuple[str, ...]]:
    """Preference among overrides of one name: the smallest key wins (oldest, then origin, then classes)."""
    return (_oldest_first(_timestamp(ov.creation_timestamp)), ov.origin, tuple(ov.class_names))


def build_mapping(
    device_classes: Iterable[Mapping[str, Any]],
    overrides: Iterable[OverrideMapping] = (),
) -> ExtendedResourceMapping:
    """Resolve every name from the full DeviceClass list (+ overrides). Independent of input order."""
    by_name: dict[str, ResolvedMapping] = {}
    explicit_by_class: dict[str, str] = {}
    # name -> (preference key, class name); the smallest key wins.
    explicit_winner: dict[str, tuple[tuple[tuple[int, int], str], str]] = {}

    for cls in device_classes:
        meta = cls.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        by_name[implicit_resource_name(name)] = ResolvedMapping(implicit_resource_name(name), (name,), "implicit")
        explicit = (cls.get("spec") or {}).get("extendedResourceName")
        # API validation admits only extended resource names here (never the implicit prefix);
        # anything else cannot come from the API server, so it is ignored rather than trusted.
        if not isinstance(explicit, str) or not is_extended_resource_name(explicit):
            continue
        explicit_by_class[name] = explicit
        key = (_newest_first(_timestamp(meta.get("creationTimestamp"))), name)
        current = explicit_winner.get(explicit)
        if current is None or key < current[0]:
            explicit_winner[explicit] = (key, name)

    for explicit, (_, class_name) in explicit_winner.items():
        by_name[explicit] = ResolvedMapping(explicit, (class_name,), "explicit")

    override_winner: dict[str, tuple[tuple[tuple[int, int], str, tuple[str, ...]], OverrideMapping]] = {}
    for ov in overrides:
        if not ov.class_names:
            continue
        okey = override_key(ov)
        cur = override_winner.get(ov.resource_name)
        if cur is None or okey < cur[0]:
            override_winner[ov.resource_name] = (okey, ov)
    for rname, (_, ov) in override_winner.items():
        by_name[rname] = ResolvedMapping(
            rname, tuple(ov.class_names), "override", ov.node_selector, tuple(ov.selectors), ov.origin
        )

    return ExtendedResourceMapping(MappingProxyType(by_name), MappingProxyType(explicit_by_class))


def mapping_to_data(mapping: ExtendedResourceMapping) -> dict[str, Any]:
    """Plain JSON data for ``mapping_from_data`` (the webhook's server process gets the mapping so)."""
    return {
        "names": [
            [r.resource_name, list(r.class_names), r.source, r.node_selector, list(r.selectors), r.origin]
            for r in mapping._by_name.values()
        ],
        "explicit": dict(mapping._explicit_by_class),
    }


def mapping_from_data(data: Mapping[str, Any]) -> ExtendedResourceMapping:
    by_name = {
        name: ResolvedMapping(name, tuple(classes), source, node_selector, tuple(selectors), origin)
        for name, classes, source, node_selector, selectors, origin in data["names"]
    }
    return ExtendedResourceMapping(MappingProxyType(by_name), MappingProxyType(dict(data["explicit"])))
