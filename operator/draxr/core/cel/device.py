"""What a DRA CEL selector sees of a device (k8s.io/dynamic-resource-allocation v0.37.2 cel/compile.go).

`device.driver` (string), `device.allowMultipleAllocations` (bool),
`device.attributes[domain][id]` (int, bool, string, semver, or lists of those) and
`device.capacity[domain][id]` (quantity). Names without a domain belong to the driver's domain.
Attributes are converted as upstream's getAttributeValue does (lists always, as in 1.37), and
capacities are parsed with ParseQuantity (draxr.core.quantity). `device` is a `map(string, dyn)`
here rather than upstream's `kubernetes.DRADevice` object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Any

from draxr.core.cel.errors import CelRuntimeError
from draxr.core.cel.values import InvalidValue, tagged_quantity, tagged_semver
from draxr.core.limits import INT64_MAX, INT64_MIN
from draxr.core.quantity import parse_go_quantity
from draxr.core.semver import Semver, parse_semver

__all__ = ["DeviceView", "converts_surely", "device_view"]


def _value_for_cel(value: Any, what: str) -> Any:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CelRuntimeError(f"{what}: integer {value} does not fit int64")
        return value
    if isinstance(value, Semver):
        return tagged_semver(value)
    if isinstance(value, list | tuple):
        return [_value_for_cel(v, what) for v in value]
    if isinstance(value, InvalidValue):
        raise CelRuntimeError(f"{what}: {value.reason}")
    raise CelRuntimeError(f"{what}: unsupported attribute value")


def _capacity_for_cel(value: Any, what: str) -> dict[str, str]:
    if isinstance(value, InvalidValue):
        raise CelRuntimeError(f"{what}: {value.reason}")
    if isinstance(value, bool):
        raise CelRuntimeError(f"{what}: not a quantity: {value!r}")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise CelRuntimeError(f"{what}: not a quantity: {value!r}")
        return tagged_quantity(value)
    if isinstance(value, int):
        return tagged_quantity(Decimal(value))
    if isinstance(value, Mapping) and "value" in value:  # a raw v1 DeviceCapacity
        return _capacity_for_cel(value["value"], what)
    inner = getattr(value, "value", None)  # e.g. a draxr.core.quantity.Quantity, which carries an exact Decimal
    if isinstance(inner, Decimal):
        return _capacity_for_cel(inner, what)
    try:
        return tagged_quantity(parse_go_quantity(str(value)).value)
    except (ValueError, ArithmeticError) as exc:
        raise CelRuntimeError(f"{what}: invalid quantity {value!r}: {exc}") from None


@dataclass(frozen=True, eq=False)
class DeviceView:
    """What a selector sees of one device. Build once per device and reuse for every selector.

    `attributes` and `capacity` are grouped by domain: `{"gpu.example.com": {"model": "A100"}}`.
    Attribute values are int, bool, str, `Semver` or lists of those; capacity values are
    Decimals (or quantity strings, ints, or objects with a Decimal `.value`). `name` is only
    used in error messages. Equality and hashing are by identity, so views can key caches.
    """

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Any]
    allow_multiple_allocations: bool = False
    name: str = ""
    # CEL activations per thread, keyed by the unknown domains added as empty maps; () is the
    # plain one (made and kept by draxr.core.cel.selector).
    _activations: dict[int, dict[tuple[str, ...], Any]] = field(default_factory=dict, init=False, repr=False)
    # The device converted for CEL once: [dict] or [CelRuntimeError] (conversion errors are sticky).
    _converted: list[Any] = field(default_factory=list, init=False, repr=False)

    def cel_value(self) -> dict[str, Any]:
        """The device as the `device` variable; CelRuntimeError if a value cannot be converted."""
        return dict(self._converted_value())

    def check_conversion(self) -> None:
        """CelRuntimeError exactly when `cel_value` raises one (upstream converts the whole device
        before evaluating any selector)."""
        self._converted_value()

    def _converted_value(self) -> dict[str, Any]:
        if not self._converted:
            try:
                self._converted.append(self._convert())
            except CelRuntimeError as exc:
                self._converted.append(exc)
        converted = self._converted[0]
        if isinstance(converted, CelRuntimeError):
            raise CelRuntimeError(str(converted))
        return converted  # type: ignore[no-any-return]

    def _convert(self) -> dict[str, Any]:
        where = f"device {self.name!r}" if self.name else "device"
        attributes = {
            domain: {ident: _value_for_cel(v, f"{where}: attribute {domain}/{ident}") for ident, v in ids.items()}
            for domain, ids in self.attributes.items()
        }
        capacity = {
            domain: {ident: _capacity_for_cel(v, f"{where}: capacity {domain}/{ident}") for ident, v in ids.items()}
            for domain, ids in self.capacity.items()
        }
        return {
            "driver": self.driver,
            "allowMultipleAllocations": bool(self.allow_multiple_allocations),
            "attributes": attributes,
            "capacity": capacity,
        }


def _split_qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def _by_domain(raw: Mapping[str, Any] | None, driver: str, convert: Callable[[Any], Any]) -> dict[str, dict[str, Any]]:
    """Values grouped by domain, converted; the fully qualified spelling of a name wins over the short one."""
    groups: dict[str, dict[str, Any]] = {}
    for name, value in (raw or {}).items():
        domain, ident = _split_qualified(str(name), driver)
        ids = groups.setdefault(domain, {})
        if ident not in ids or "/" in str(name):
            ids[ident] = convert(value)
    return groups


# Versions repeat across devices (driver versions); Semver is immutable. Errors are not cached.
_parse_semver = lru_cache(maxsize=4096)(parse_semver)


def _attribute_value(raw: Any) -> Any:
    """A v1 DeviceAttribute dict as upstream's getAttributeValue converts it (lists always converted, as in 1.37)."""
    if not isinstance(raw, Mapping):
        return InvalidValue("unsupported attribute value")
    for key in ("ints", "bools", "strings"):
        if raw.get(key) is not None:
            return list(raw[key])
    if raw.get("versions") is not None:
        try:
            return [_parse_semver(str(v)) for v in raw["versions"]]
        except ValueError as exc:
            return InvalidValue(f"parse semantic version: {exc}")
    for key in ("int", "bool", "string"):
        if raw.get(key) is not None:
            return raw[key]
    if raw.get("version") is not None:
        try:
            return _parse_semver(str(raw["version"]))
        except ValueError as exc:
            return InvalidValue(f"parse semantic version: {exc}")
    return InvalidValue("unsupported attribute value")


def _capacity_value(raw: Any) -> Decimal | InvalidValue:
    value = raw.get("value") if isinstance(raw, Mapping) else raw
    if value is None:
        return InvalidValue("capacity without a value")
    if isinstance(value, Decimal):
        return value
    text = str(value).strip()  # JSON decoding of a Quantity trims spaces
    try:
        return parse_go_quantity(text).value
    except (ValueError, ArithmeticError) as exc:
        return InvalidValue(f"invalid quantity {value!r}: {exc}")


def converts_surely(device: Mapping[str, Any]) -> bool:
    """True only when `device_view(driver, device).cel_value()` surely succeeds: every attribute
    sets exactly one of string, bool, int (in int64) or a valid version, and every capacity is a
    quantity string. False when it might fail (build the view to know, and its error)."""
    attributes = device.get("attributes")
    if attributes:
        if not isinstance(attributes, Mapping):
            return False
        for raw in attributes.values():
            if not _plain_attribute(raw):
                return False
    capacity = device.get("capacity")
    if capacity:
        if not isinstance(capacity, Mapping):
            return False
        for raw in capacity.values():
            value = raw.get("value") if isinstance(raw, Mapping) else None
            if type(value) is not str:
                return False
            try:
                if not parse_go_quantity(value.strip()).value.is_finite():
                    return False
            except (ValueError, ArithmeticError):
                return False
    return True


def _plain_attribute(raw: Any) -> bool:
    if not isinstance(raw, Mapping):
        return False
    found: tuple[Any, Any] | None = None
    for key, value in raw.items():
        if value is None:
            continue
        if found is not None:
            return False  # more than one field set: the conversion decides which one counts
        found = (key, value)
    if found is None:
        return False
    key, value = found
    kind = type(value)
    if key == "string":
        return kind is str
    if key == "bool":
        return kind is bool
    if key == "int":
        return kind is int and INT64_MIN <= value <= INT64_MAX
    if key == "version" and kind is str:
        try:
            _parse_semver(value)
        except ValueError:
            return False
        return True
    return False


def device_view(driver: str, device: Mapping[str, Any]) -> DeviceView:
    """The selector's view of a resource.k8s.io/v1 `Device` dict from a ResourceSlice of `driver`.

    Accepts camelCase API dicts and the snake_case dicts of generated clients (`to_dict()`).
    Attribute and capacity names without a domain go under the driver's domain; when a device
    spells the same attribute both ways, the fully qualified spelling wins (upstream: random).
    """
    multi = device.get("allowMultipleAllocations", device.get("allow_multiple_allocations"))
    return DeviceView(
        driver=driver,
        attributes=_by_domain(device.get("attributes"), driver, _attribute_value),
        capacity=_by_domain(device.get("capacity"), driver, _capacity_value),
        allow_multiple_allocations=bool(multi),
        name=str(device.get("name") or ""),
    )
