"""Claim constraints: matchAttribute and distinctAttribute (upstream incubating, v0.37.2).

Both apply to a device if the constraint names no requests, or names the request, or names
`request/subrequest`. A device without the attribute is refused. Attribute lookup: exact
fully-qualified key first, else the bare id when the domain is the device's driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from draxr.core.allocator.model import DeviceInfo

__all__ = ["Constraint", "DistinctAttribute", "MatchAttribute", "lookup_attribute"]

_TYPES = ("string", "int", "bool", "version")  # upstream's switch order


def lookup_attribute(dev: DeviceInfo, name: str) -> Mapping[str, Any] | None:
    attrs = dev.attributes
    if name in attrs:
        return attrs[name]
    domain, sep, ident = name.partition("/")
    if not sep or domain != dev.driver:
        return None
    return attrs.get(ident)


def _kind(attr: Mapping[str, Any]) -> str | None:
    for t in _TYPES:
        if attr.get(t) is not None:
            return t
    return None


class Constraint(Protocol):
    def add(self, request: str, subrequest: str, dev: DeviceInfo) -> bool: ...

    def remove(self, request: str, subrequest: str, dev: DeviceInfo) -> None: ...


class _Base:
    __slots__ = ("attribute", "requests")

    def __init__(self, requests: frozenset[str], attribute: str) -> None:
        self.requests = requests
        self.attribute = attribute

    def applies(self, request: str, subrequest: str) -> bool:
        if not self.requests:
            return True
        if request in self.requests:
            return True
        return bool(subrequest) and f"{request}/{subrequest}" in self.requests


class MatchAttribute(_Base):
    __slots__ = ("count", "value")

    def __init__(self, requests: frozenset[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.value: Mapping[str, Any] | None = None
        self.count = 0

    def add(self, request: str, subrequest: str, dev: DeviceInfo) -> bool:
        if not self.applies(request, subrequest):
            return True
        attr = lookup_attribute(dev, self.attribute)
        if attr is None:
            return False
        if self.count == 0:
            # The first device always fits, whatever the type of its value.
            self.value = attr
            self.count = 1
            return True
        kind = _kind(attr)
        if kind is None:
            return False
        assert self.value is not None
        first = self.value.get(kind)
        if first is None or first != attr[kind] or type(first) is not type(attr[kind]):
            return False
        self.count += 1
        return True

    def remove(self, request: str, subrequest: str, dev: DeviceInfo) -> None:
        if self.applies(request, subrequest):
            self.count -= 1  # only a count is kept; the first value stays (as upstream)


class DistinctAttribute(_Base):
    __slots__ = ("values",)

    def __init__(self, requests: frozenset[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.values: list[Mapping[str, Any]] = []

    def add(self, request: str, subrequest: str, dev: DeviceInfo) -> bool:
        if not self.applies(request, subrequest):
            return True
        attr = lookup_attribute(dev, self.attribute)
        if attr is None:
            return False
        kind = _kind(attr)
        for seen in self.values:
            if kind is None:
                return False
            other = seen.get(kind)
            if other is not None and other == attr[kind] and type(other) is type(attr[kind]):
                return False
        self.values.append(attr)
        return True

    def remove(self, request: str, subrequest: str, dev: DeviceInfo) -> None:
        if self.applies(request, subrequest):
            self.values.pop()
