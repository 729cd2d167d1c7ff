"""CEL for DRA device selectors, with the semantics of the Kubernetes scheduler.

A port of k8s.io/dynamic-resource-allocation `cel/compile.go` (StoredExpressions environment,
which is what kube-scheduler compiles selectors with) on top of cel-expr-python (cel-cpp).

The `device` variable
    `device.driver` (string), `device.allowMultipleAllocations` (bool),
    `device.attributes[domain][id]` (int, bool, string, semver, or lists of those) and
    `device.capacity[domain][id]` (quantity). Names without a domain belong to the driver's
    domain. An unknown domain is an empty map; a missing id inside a domain is a runtime error
    ("no such key"), which the allocator treats as fatal for the pod's scheduling attempt.

Enabled, mirroring the Kubernetes base environment (apiserver `environment/base.go`) plus DRA:
    - standard CEL (macros, `matches`, string/list/map functions, timestamps/durations)
    - `cel.bind` (ext.Bindings v0), optional types (`.?x`, `[?k]`, `orValue`, ...)
    - ext.Strings v2, ext.Sets, ext.Lists (cel-cpp v2 == cel-go v3 functions), two-variable
      comprehensions (`all(k, v, ...)`, `exists(k, v, ...)`, `transformList`)
    - Kubernetes quantity library: `quantity`, `isQuantity`, `sign` (global only: upstream
      declares no member overload, so `q.sign()` is a compile error), `isGreaterThan`,
      `isLessThan`, `compareTo`, `add`, `sub`, `isInteger`, `asInteger`, `asApproximateFloat`
    - Kubernetes semver library v1: `semver(s[, normalize])`, `isSemver(s[, normalize])`,
      `major`, `minor`, `patch`, `isGreaterThan`, `isLessThan`, `compareTo`
    - DRA `includes` (scalar equality or membership in the first 48 list elements; in the
      StoredExpressions environment since 1.36 regardless of the DRAListTypeAttributes gate)
    - Kubernetes lists library: `isSorted`, `sum`, `min`, `max`
    - Kubernetes regex library: `find`, `findAll` (evaluated with Python `re`, not RE2)

Not available (cel-expr-python 0.1.3 cannot provide them, or they make no sense here):
    - list `indexOf` / `lastIndexOf` (cel-cpp's strings extension owns those names and an
      extension's function cannot be extended from Python); URL, IP, CIDR, format, image and
      authz libraries; quantity `mul`/`div`/`divInt` (only in newer apiserver versions)
    - `transformMap`/`transformMapEntry` compile but fail at runtime in cel-cpp
    - cross-type numeric comparison of *literals* (`1 < 1.5`) is a compile error in cel-cpp;
      comparisons involving attribute values (dyn) work as upstream
    - the runtime cost limit (1e6): cel-expr-python exposes no cost tracking, iteration limit or
      interrupt. Expressions longer than 10 KiB (the API validation limit) are rejected.

Unknown domains: cel-cpp maps cannot default a missing key, so when an evaluation fails with a
missing string key that is not a domain of both maps, that key is added as an empty domain and
the selector is evaluated again (up to 8 times, activations cached per device); the error is
reported only if it persists. Results differ from upstream only where an expression indexes a
missing domain *and* its outcome depends on that domain's membership (`in`, `size()`, iteration
of `device.attributes`), and for `has(device.attributes.dom)` / `device.attributes[?"dom"]`,
which upstream reports as present for every domain and cel-cpp as absent.

Cost: without a runtime limit, protection against runaway selectors comes from the API server,
which rejects selectors whose estimated worst-case cost exceeds the same 1e6 limit.

Representation: cel-expr-python cannot pass opaque Python objects, so Quantity and Semver
values are one-entry maps `{"kubernetes.Quantity": <canonical decimal>}` and
`{"kubernetes.Semver": <version without build metadata>}`, and `device` is a
`map(string, dyn)` rather than upstream's `kubernetes.DRADevice` object. The canonical forms
make CEL's structural `==` agree with upstream (numeric equality for quantities, precedence
equality for versions).

Static checks: after cel-cpp has compiled an expression, draxr.core.cel_check re-derives
upstream's types on the checked AST and reports what cel-go would: mixed-type list and map
literals (the Kubernetes environment enables HomogeneousAggregateLiterals), unknown fields and
map operations on `device`, comparisons and Kubernetes library calls whose argument types
upstream has no overload for (`device.driver == 1`, `quantity("1").compareTo(semver("1.0.0"))`,
`["a"].sum()`), and a non-bool result type (`device.driver`). Through `dyn(...)` these remain
runtime errors, as upstream. Visible differences: `type(quantity("1"))` is `map`, and
`isInteger` / `asInteger` judge the value ("1000m" is an integer) where upstream also depends on
the internal representation (it rejects "1000m", and large binary-suffixed values like "128Ti").
"""

from __future__ import annotations

import ast
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, Inexact, InvalidOperation
from functools import lru_cache
from typing import Any, Final

from cel_expr_python import cel

from draxr.core.cel_check import DYN as _UNCHECKED_OUTPUT
from draxr.core.cel_check import CheckResult, check_checked_expr, format_issues
from draxr.core.limits import (
    CEL_SELECTOR_EXPRESSION_MAX_LENGTH,
    INT64_MAX,
    INT64_MIN,
    RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE,
)
from draxr.core.quantity import as_int64, parse_go_quantity
from draxr.core.semver import Semver, parse_semver, parse_semver_normalized

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "QUANTITY_TAG",
    "SEMVER_TAG",
    "CelCompileError",
    "CelRuntimeError",
    "CompiledSelector",
    "DeviceView",
    "InvalidValue",
    "compile_selector",
    "device_view",
]

QUANTITY_TAG: Final = "kubernetes.Quantity"
SEMVER_TAG: Final = "kubernetes.Semver"

# The API server rejects longer selectors.
MAX_EXPRESSION_LENGTH: Final = CEL_SELECTOR_EXPRESSION_MAX_LENGTH
# `includes` looks at no more list elements.
_INCLUDES_MAX_ELEMENTS: Final = RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
# Compiled programs kept; upstream keeps 10, but compiling costs us more than it costs Go.
_CACHE_SIZE: Final = 256
# Each retry defaults one more unknown domain to an empty map (see CompiledSelector.matches).
_MAX_DOMAIN_RETRIES: Final = 8
# Extra-domain activations kept per device, beyond the plain one.
_MAX_CACHED_ACTIVATIONS: Final = 16


class CelCompileError(ValueError):
    """The expression does not compile, or does not evaluate to bool."""


class CelRuntimeError(RuntimeError):
    """Evaluating a selector failed; upstream treats this as fatal for the scheduling attempt."""


@dataclass(frozen=True, slots=True)
class InvalidValue:
    """An attribute/capacity value that cannot be given to CEL; evaluating any selector on the device fails."""

    reason: str


# ---------------------------------------------------------------------------------------------
# Quantities


# Exact for anything parsing can produce; rounding only where upstream rounds.
_EXACT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
# add/sub: exact, but refuse results that would need absurd precision (1e999999 + 1).
_ARITH: Final = Context(prec=4096, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[InvalidOperation, Inexact])


def _canonical_decimal(value: Decimal) -> str:
    """A string that is equal for equal values, so CEL's map equality is numeric equality."""
    if value == 0:
        return "0"  # also -0
    return str(value.normalize(_EXACT))


@lru_cache(maxsize=8192)
def _decimal_of(canonical: str) -> Decimal:
    try:
        value = Decimal(canonical)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise ValueError(f"not a kubernetes.Quantity: {canonical!r}")
    return value


def _quantity_value(value: Decimal) -> dict[str, str]:
    return {QUANTITY_TAG: _canonical_decimal(value)}


# ---------------------------------------------------------------------------------------------
# CEL function implementations (called by cel-cpp with converted Python values)


class _NoSuchOverload(ValueError):
    pass


def _type_name(v: object) -> str:
    if isinstance(v, dict):
        if len(v) == 1 and QUANTITY_TAG in v:
            return QUANTITY_TAG
        if len(v) == 1 and SEMVER_TAG in v:
            return SEMVER_TAG
        return "map"
    if isinstance(v, bool):
        return "bool"
    names = {int: "int", float: "double", str: "string", list: "list", type(None): "null_type"}
    return names.get(type(v), type(v).__name__)


def _no_overload(fn: str, *args: object) -> _NoSuchOverload:
    return _NoSuchOverload(f"no such overload: {fn}({', '.join(_type_name(a) for a in args)})")


def _quantity_arg(fn: str, v: Mapping[str, str], *others: object) -> Decimal:
    s = v.get(QUANTITY_TAG)
    if s is None or len(v) != 1:
        raise _no_overload(fn, v, *others)
    return _decimal_of(s)


def _semver_arg(fn: str, v: Mapping[str, str], *others: object) -> Semver:
    s = v.get(SEMVER_TAG)
    if s is None or len(v) != 1:
        raise _no_overload(fn, v, *others)
    return _semver_of(s)


@lru_cache(maxsize=4096)
def _semver_of(canonical: str) -> Semver:
    return parse_semver(canonical)


def _compare(fn: str, a: Mapping[str, str], b: Mapping[str, str]) -> int:
    # One overload serves both types: cel-cpp dispatches on the runtime kind (map), not the tag.
    qa, qb = a.get(QUANTITY_TAG), b.get(QUANTITY_TAG)
    if qa is not None and qb is not None and len(a) == 1 and len(b) == 1:
        x, y = _decimal_of(qa), _decimal_of(qb)
        return (x > y) - (x < y)
    sa, sb = a.get(SEMVER_TAG), b.get(SEMVER_TAG)
    if sa is not None and sb is not None and len(a) == 1 and len(b) == 1:
        return _semver_of(sa).compare(_semver_of(sb))
    raise _no_overload(fn, a, b)


def _compare_to(a: Mapping[str, str], b: Mapping[str, str]) -> int:
    return _compare("compareTo", a, b)


def _is_greater_than(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return _compare("isGreaterThan", a, b) == 1


def _is_less_than(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return _compare("isLessThan", a, b) == -1


# Literals like quantity("40Gi") are re-evaluated on every match; cel-cpp copies the returned
# dict into its own value, so sharing one cached dict is safe.
@lru_cache(maxsize=4096)
def _quantity(s: str) -> dict[str, str]:
    return _quantity_value(parse_go_quantity(s).value)


def _is_quantity(s: str) -> bool:
    try:
        parse_go_quantity(s)
    except (ValueError, ArithmeticError):
        return False
    return True


def _sign(q: Mapping[str, str]) -> int:
    v = _quantity_arg("sign", q)
    return (v > 0) - (v < 0)


def _is_integer(q: Mapping[str, str]) -> bool:
    return as_int64(_quantity_arg("isInteger", q)) is not None


def _as_integer(q: Mapping[str, str]) -> int:
    v = as_int64(_quantity_arg("asInteger", q))
    if v is None:
        raise ValueError("cannot convert value to integer")
    return v


def _as_approximate_float(q: Mapping[str, str]) -> float:
    v = _quantity_arg("asApproximateFloat", q)
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _arith(fn: str, a: Decimal, b: Decimal, op: Callable[[Decimal, Decimal], Decimal]) -> dict[str, str]:
    try:
        return _quantity_value(op(a, b))
    except ArithmeticError as exc:
        raise ValueError(f"quantity {fn}: result cannot be represented exactly") from exc


def _add(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, str]:
    return _arith("add", _quantity_arg("add", a, b), _quantity_arg("add", b, a), _ARITH.add)


def _add_int(a: Mapping[str, str], b: int) -> dict[str, str]:
    return _arith("add", _quantity_arg("add", a, b), Decimal(b), _ARITH.add)


def _sub(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, str]:
    return _arith("sub", _quantity_arg("sub", a, b), _quantity_arg("sub", b, a), _ARITH.subtract)


def _sub_int(a: Mapping[str, str], b: int) -> dict[str, str]:
    return _arith("sub", _quantity_arg("sub", a, b), Decimal(b), _ARITH.subtract)


@lru_cache(maxsize=4096)
def _semver(s: str) -> dict[str, str]:
    return {SEMVER_TAG: parse_semver(s).without_build()}


@lru_cache(maxsize=1024)
def _semver_normalize(s: str, normalize: bool) -> dict[str, str]:
    v = parse_semver_normalized(s) if normalize else parse_semver(s)
    return {SEMVER_TAG: v.without_build()}


def _is_semver(s: str) -> bool:
    return _is_semver_normalize(s, False)


def _is_semver_normalize(s: str, normalize: bool) -> bool:
    try:
        parse_semver_normalized(s) if normalize else parse_semver(s)
    except ValueError:
        return False
    return True


def _wrap_int64(v: int) -> int:
    # Go's types.Int(uint64) conversion wraps.
    return (v + 2**63) % 2**64 - 2**63


def _major(v: Mapping[str, str]) -> int:
    return _wrap_int64(_semver_arg("major", v).major)


def _minor(v: Mapping[str, str]) -> int:
    return _wrap_int64(_semver_arg("minor", v).minor)


def _patch(v: Mapping[str, str]) -> int:
    return _wrap_int64(_semver_arg("patch", v).patch)


def _cel_equal(a: Any, b: Any) -> bool:
    """CEL heterogeneous equality for the values cel-cpp hands to Python."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, bytes | bytearray) and isinstance(b, bytes | bytearray):
        return bytes(a) == bytes(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_cel_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_cel_equal(v, b[k]) for k, v in a.items())
    return type(a) is type(b) and bool(a == b)


def _includes(target: Any, arg: Any) -> bool:
    if isinstance(target, list):
        return any(_cel_equal(item, arg) for item in target[:_INCLUDES_MAX_ELEMENTS])
    return _cel_equal(target, arg)


def _cel_compare(a: Any, b: Any) -> int:
    """CEL ordering (`traits.Comparer`) for list elements."""
    if isinstance(a, bool) or isinstance(b, bool):
        if not (isinstance(a, bool) and isinstance(b, bool)):
            raise _no_overload("compare", a, b)
    elif isinstance(a, bytes | bytearray) and isinstance(b, bytes | bytearray):
        a, b = bytes(a), bytes(b)
    elif not any(isinstance(a, k) and isinstance(b, k) for k in (int | float, str, datetime, timedelta)):
        raise _no_overload("compare", a, b)
    return int((a > b) - (a < b))


def _is_sorted(items: list[Any]) -> bool:
    return all(_cel_compare(items[i - 1], items[i]) != 1 for i in range(1, len(items)))


def _sum(items: list[Any]) -> Any:
    if not items:
        return 0
    if all(isinstance(x, timedelta) for x in items):
        return sum(items, timedelta(0))
    if all(isinstance(x, int | float) and not isinstance(x, bool) for x in items):
        return sum(items)
    raise _no_overload("sum", items)


def _extreme(fn: str, items: list[Any], prefer: int) -> Any:
    if not items:
        raise ValueError(f"{fn} called on empty list")
    result = items[0]
    for item in items[1:]:
        if _cel_compare(result, item) == prefer:
            result = item
    return result


def _min(items: list[Any]) -> Any:
    return _extreme("min", items, 1)


def _max(items: list[Any]) -> Any:
    return _extreme("max", items, -1)


@lru_cache(maxsize=128)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all_n(s: str, pattern: str, limit: int) -> list[str]:
    # Go's FindAllString: empty matches right after the previous match are skipped.
    out: list[str] = []
    prev_end = -1
    for m in _regex(pattern).finditer(s):
        if limit >= 0 and len(out) >= limit:
            break
        if m.start() == m.end() == prev_end:
            continue
        out.append(m.group(0))
        prev_end = m.end()
    return out


def _find_all(s: str, pattern: str) -> list[str]:
    return _find_all_n(s, pattern, -1)


# ---------------------------------------------------------------------------------------------
# The environment

_T = cel.Type
_TAGGED = _T.Map(_T.STRING, _T.STRING)  # a Quantity or a Semver
_ANY = _T("any")  # cel-cpp's "any" kind: a parameter that dispatches on every runtime value
_LIST = _T.List(_T.DYN)

_ENV_CONFIG: Final = """
name: draxr-dra-device-selectors
extensions:
  - name: bindings
    version: 0
  - name: optional
  - name: strings
    version: 2
  - name: sets
  - name: lists
    version: 2
  - name: two-var-comprehensions
"""


def _fn(name: str, *overloads: tuple[str, cel.Type, Sequence[cel.Type], bool, Callable[..., Any]]) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name,
        [cel.Overload(oid, ret, list(ps), is_member=member, impl=impl) for oid, ret, ps, member, impl in overloads],
    )


def _functions() -> list[cel.FunctionDecl]:
    Q, B, I, S = _TAGGED, _T.BOOL, _T.INT, _T.STRING  # noqa: E741
    return [
        # Quantity (apiserver pkg/cel/library/quantity.go)
        _fn("quantity", ("string_to_quantity", Q, [S], False, _quantity)),
        _fn("isQuantity", ("is_quantity_string", B, [S], False, _is_quantity)),
        _fn("sign", ("quantity_sign", I, [Q], False, _sign)),  # global only, as upstream declares it
        _fn("isInteger", ("quantity_is_integer", B, [Q], True, _is_integer)),
        _fn("asInteger", ("quantity_get_int", I, [Q], True, _as_integer)),
        _fn("asApproximateFloat", ("quantity_get_float", _T.DOUBLE, [Q], True, _as_approximate_float)),
        _fn("add", ("quantity_add", Q, [Q, Q], True, _add), ("quantity_add_int", Q, [Q, I], True, _add_int)),
        _fn("sub", ("quantity_sub", Q, [Q, Q], True, _sub), ("quantity_sub_int", Q, [Q, I], True, _sub_int)),
        # Shared by Quantity and Semver: both are maps at runtime, so one overload each.
        _fn("compareTo", ("kubernetes_compare_to", I, [Q, Q], True, _compare_to)),
        _fn("isGreaterThan", ("kubernetes_is_greater_than", B, [Q, Q], True, _is_greater_than)),
        _fn("isLessThan", ("kubernetes_is_less_than", B, [Q, Q], True, _is_less_than)),
        # Semver v1 (apiserver pkg/cel/library/semverlib.go)
        _fn(
            "semver",
            ("string_to_semver", Q, [S], False, _semver),
            ("string_bool_to_semver", Q, [S, B], False, _semver_normalize),
        ),
        _fn(
            "isSemver",
            ("is_semver_string", B, [S], False, _is_semver),
            ("is_semver_string_bool", B, [S, B], False, _is_semver_normalize),
        ),
        _fn("major", ("semver_major", I, [Q], True, _major)),
        _fn("minor", ("semver_minor", I, [Q], True, _minor)),
        _fn("patch", ("semver_patch", I, [Q], True, _patch)),
        # DRA (dynamic-resource-allocation cel/compile.go)
        _fn("includes", ("dra_includes_dyn_dyn", B, [_ANY, _ANY], True, _includes)),
        # Kubernetes lists library (apiserver pkg/cel/library/lists.go)
        _fn("isSorted", ("list_is_sorted", B, [_LIST], True, _is_sorted)),
        _fn("sum", ("list_sum", _T.DYN, [_LIST], True, _sum)),
        _fn("min", ("list_min", _T.DYN, [_LIST], True, _min)),
        _fn("max", ("list_max", _T.DYN, [_LIST], True, _max)),
        # Kubernetes regex library (apiserver pkg/cel/library/regex.go)
        _fn("find", ("string_find_string", S, [S, S], True, _find)),
        _fn(
            "findAll",
            ("string_find_all_string", _T.List(S), [S, S], True, _find_all),
            ("string_find_all_string_int", _T.List(S), [S, S, I], True, _find_all_n),
        ),
    ]


_ENV: Final = cel.NewEnv(
    config=cel.NewEnvConfigFromYaml(_ENV_CONFIG),
    variables={"device": _T.Map(_T.STRING, _T.DYN)},
    functions=_functions(),
)


# ---------------------------------------------------------------------------------------------
# Devices


def _value_for_cel(value: Any, what: str) -> Any:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise CelRuntimeError(f"{what}: integer {value} does not fit int64")
        return value
    if isinstance(value, Semver):
        return {SEMVER_TAG: value.without_build()}
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
        return _quantity_value(value)
    if isinstance(value, int):
        return _quantity_value(Decimal(value))
    if isinstance(value, Mapping) and "value" in value:  # a raw v1 DeviceCapacity
        return _capacity_for_cel(value["value"], what)
    inner = getattr(value, "value", None)  # e.g. a draxr.core.quantity.Quantity, which carries an exact Decimal
    if isinstance(inner, Decimal):
        return _capacity_for_cel(inner, what)
    try:
        return _quantity_value(parse_go_quantity(str(value)).value)
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
    # CEL activations keyed by the unknown domains added as empty maps; () is the plain one.
    _activations: dict[tuple[str, ...], Any] = field(default_factory=dict, init=False, repr=False)
    # The device converted for CEL once: [dict] or [CelRuntimeError] (conversion errors are sticky).
    _converted: list[Any] = field(default_factory=list, init=False, repr=False)

    def _activation(self, extra_domains: tuple[str, ...]) -> Any:
        act = self._activations.get(extra_domains)
        if act is not None:
            return act
        device = self._cel_device()
        if extra_domains:
            attributes, capacity = dict(device["attributes"]), dict(device["capacity"])
            for domain in extra_domains:
                attributes.setdefault(domain, {})
                capacity.setdefault(domain, {})
            device = {**device, "attributes": attributes, "capacity": capacity}
        act = _ENV.Activation({"device": device})
        if not extra_domains or len(self._activations) < _MAX_CACHED_ACTIVATIONS:
            self._activations[extra_domains] = act
        return act

    def _cel_device(self) -> dict[str, Any]:
        if not self._converted:
            try:
                self._converted.append(self._convert())
            except CelRuntimeError as exc:
                self._converted.append(exc)
        converted = self._converted[0]
        if isinstance(converted, CelRuntimeError):
            raise CelRuntimeError(str(converted))
        return dict(converted)

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


def _attribute_value(raw: Any) -> Any:
    """A v1 DeviceAttribute dict as upstream's getAttributeValue converts it (lists always converted, as in 1.37)."""
    if not isinstance(raw, Mapping):
        return InvalidValue("unsupported attribute value")
    for key in ("ints", "bools", "strings"):
        if raw.get(key) is not None:
            return list(raw[key])
    if raw.get("versions") is not None:
        try:
            return [parse_semver(str(v)) for v in raw["versions"]]
        except ValueError as exc:
            return InvalidValue(f"parse semantic version: {exc}")
    for key in ("int", "bool", "string"):
        if raw.get(key) is not None:
            return raw[key]
    if raw.get("version") is not None:
        try:
            return parse_semver(str(raw["version"]))
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


def device_view(driver: str, device: Mapping[str, Any]) -> DeviceView:
    """The selector's view of a resource.k8s.io/v1 `Device` dict from a ResourceSlice of `driver`.

    Accepts camelCase API dicts and the snake_case dicts of generated clients (`to_dict()`).
    Attribute and capacity names without a domain go under the driver's domain; when a device
    spells the same attribute both ways, the fully qualified spelling wins (upstream: random).
    """
    attributes: dict[str, dict[str, Any]] = {}
    for name, raw in (device.get("attributes") or {}).items():
        domain, ident = _split_qualified(str(name), driver)
        ids = attributes.setdefault(domain, {})
        if ident not in ids or "/" in str(name):
            ids[ident] = _attribute_value(raw)
    capacity: dict[str, dict[str, Any]] = {}
    for name, raw in (device.get("capacity") or {}).items():
        domain, ident = _split_qualified(str(name), driver)
        ids = capacity.setdefault(domain, {})
        if ident not in ids or "/" in str(name):
            ids[ident] = _capacity_value(raw)
    multi = device.get("allowMultipleAllocations", device.get("allow_multiple_allocations"))
    return DeviceView(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(multi),
        name=str(device.get("name") or ""),
    )


# ---------------------------------------------------------------------------------------------
# Selectors

_STATUS_PREFIX: Final = re.compile(r"^[A-Z_]+: ")
_STATUS_SUFFIX: Final = re.compile(r"\s*\[[A-Z_]+\]$")
_MISSING_KEY: Final = re.compile(r"Key not found in map : (.*)$", re.DOTALL)


def _strip_status(message: str) -> str:
    return _STATUS_SUFFIX.sub("", _STATUS_PREFIX.sub("", message.strip()))


def _missing_key(message: str) -> str | None:
    """The string key of a cel-cpp "Key not found in map" error, else None."""
    m = _MISSING_KEY.search(message)
    if m is None:
        return None
    quoted = m.group(1).strip()
    if len(quoted) < 2 or quoted[0] not in "\"'" or quoted[-1] != quoted[0]:
        return None  # a non-string key: never a domain
    try:
        key = ast.literal_eval(quoted)
    except (ValueError, SyntaxError):
        return quoted[1:-1]
    return key if isinstance(key, str) else None


def _describe_device(dev: DeviceView, limit: int = 400) -> str:
    def names(groups: Mapping[str, Any]) -> str:
        return "; ".join(f"{d}: {', '.join(sorted(ids))}" for d, ids in sorted(groups.items())) or "none"

    text = f"attributes [{names(dev.attributes)}], capacity [{names(dev.capacity)}]"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CompiledSelector:
    """A compiled, type-checked selector; `matches` evaluates it against one device."""

    __slots__ = ("_program", "expression")

    def __init__(self, expression: str, program: cel.Expression) -> None:
        self.expression = expression
        self._program = program

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    def matches(self, dev: DeviceView) -> bool:
        """True/False; CelRuntimeError for evaluation errors and non-bool results."""
        extras: tuple[str, ...] = ()
        while True:
            act = dev._activations.get(extras) or dev._activation(extras)
            try:
                result = self._program.eval(act)
            except RuntimeError as exc:  # planning failures surface as exceptions, not error values
                raise CelRuntimeError(self._failure(dev, _strip_status(str(exc)))) from None
            value = result.value()
            if value.__class__ is bool:
                return bool(value)
            if result.type() != _T.ERROR:
                raise CelRuntimeError(
                    self._failure(dev, f"CEL result of type {_result_type(result)} could not be converted to bool")
                )
            message = str(value)
            key = _missing_key(message)
            if key is None:
                raise CelRuntimeError(self._failure(dev, _strip_status(message)))
            # Upstream returns an empty map for an unknown domain; cel-cpp errors instead. Add the
            # key as an empty domain and retry: if it was a domain the error goes away, if it was
            # a missing attribute the same error comes back and is reported.
            unknown = key not in dev.attributes or key not in dev.capacity
            if unknown and key not in extras and len(extras) < _MAX_DOMAIN_RETRIES:
                extras = (*extras, key)
                continue
            raise CelRuntimeError(
                self._failure(dev, f"no such key: {key}")
                + f"; the device has {_describe_device(dev)}. Guard optional attributes with has(...),"
                ' "name" in device.attributes["domain"], or .?name.orValue(...)'
            )

    def _failure(self, dev: DeviceView, detail: str) -> str:
        who = f"device {dev.name!r} of driver {dev.driver!r}" if dev.name else f"a device of driver {dev.driver!r}"
        return f"CEL selector {self.expression!r} failed on {who}: {detail}"


def _result_type(result: cel.Value) -> str:
    return str(result.type().name()).lower()


_PROBE: Final = _ENV.Activation(
    {"device": {"driver": "", "allowMultipleAllocations": False, "attributes": {}, "capacity": {}}}
)
_CACHE: OrderedDict[str, CompiledSelector] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def compile_selector(expression: str) -> CompiledSelector:
    """Compile (or fetch from the cache) a selector; CelCompileError if it is invalid.

    Like upstream, only successful compilations are cached.
    """
    with _CACHE_LOCK:
        hit = _CACHE.get(expression)
        if hit is not None:
            _CACHE.move_to_end(expression)
            return hit
    selector = _compile(expression)
    with _CACHE_LOCK:
        _CACHE[expression] = selector
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return selector


def _compile(expression: str) -> CompiledSelector:
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise CelCompileError(
            f"compilation failed: expression is {len(expression)} characters long, the limit is {MAX_EXPRESSION_LENGTH}"
        )
    try:
        program = _ENV.compile(expression)
    except RuntimeError as exc:
        raise CelCompileError(f"compilation failed: {_strip_status(str(exc))}") from None
    # What cel-go checks and cel-cpp does not (see cel_check): homogeneous list and map
    # literals, device fields, the argument types of the Kubernetes library functions.
    try:
        checked = check_checked_expr(program.serialize())
    except (ValueError, IndexError, RecursionError):  # an AST cel_check cannot read: skip its checks
        checked = CheckResult([], _UNCHECKED_OUTPUT)
    if checked.issues:
        raise CelCompileError(f"compilation failed: {format_issues(expression, checked.issues)}")
    try:
        # cel-cpp plans a program on first evaluation and raises (instead of returning an error
        # value) for functions it declares but cannot run, e.g. transformMap. Surface that now.
        program.eval(_PROBE)
    except RuntimeError as exc:
        detail = _strip_status(str(exc))
        raise CelCompileError(f"compilation failed: not supported by this CEL runtime: {detail}") from None
    # A bare attribute (`device.attributes["d"].flag`) is dyn, and may be a bool at runtime.
    # Upstream's type decides (`device.driver` is a string there, dyn here).
    output_error = checked.output_type_error()
    if output_error is not None:
        raise CelCompileError(output_error)
    output = program.return_type()
    if output != _T.BOOL and output != _T.DYN:
        raise CelCompileError(f"must evaluate to bool or the unknown type, not {output.name().lower()}")
    return CompiledSelector(expression, program)
