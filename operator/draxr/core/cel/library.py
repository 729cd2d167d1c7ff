"""The Kubernetes CEL libraries DRA selectors can call, as Python functions for cel-cpp.

Ports, each with the semantics of its upstream file (k8s.io/apiserver v0.37.2 pkg/cel/library
unless noted): quantity.go (`quantity`, `isQuantity`, `sign`, `isGreaterThan`, `isLessThan`,
`compareTo`, `add`, `sub`, `isInteger`, `asInteger`, `asApproximateFloat`; parsing is
draxr.core.quantity's ParseQuantity), semverlib.go v1 (`semver`, `isSemver`, `major`, `minor`,
`patch`, comparisons), lists.go (`isSorted`, `sum`, `min`, `max`), regex.go (`find`, `findAll`,
RE2, as Go's regexp), and DRA's `includes` (k8s.io/dynamic-resource-allocation
v0.37.2 cel/compile.go). cel-cpp calls them with converted Python values; Quantity and Semver
arrive as the tagged maps of draxr.core.cel.values. `functions()` declares them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, InvalidOperation
from functools import lru_cache
from typing import Any, Final

import re2
from cel_expr_python import cel

from draxr.core.cel.values import QUANTITY_TAG, SEMVER_TAG, decimal_of, tagged_quantity, tagged_semver
from draxr.core.limits import RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
from draxr.core.quantity import as_int64, parse_go_quantity
from draxr.core.semver import Semver, parse_semver, parse_semver_normalized

__all__ = ["functions"]

# `includes` looks at no more list elements.
_INCLUDES_MAX_ELEMENTS: Final = RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
# add/sub: exact, but refuse results that would need absurd precision (1e999999 + 1).
_ARITH: Final = Context(prec=4096, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[InvalidOperation, Inexact])


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
    return decimal_of(s)


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
        x, y = decimal_of(qa), decimal_of(qb)
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
    return tagged_quantity(parse_go_quantity(s).value)


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
        return tagged_quantity(op(a, b))
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
    return tagged_semver(parse_semver(s))


@lru_cache(maxsize=1024)
def _semver_normalize(s: str, normalize: bool) -> dict[str, str]:
    v = parse_semver_normalized(s) if normalize else parse_semver(s)
    return tagged_semver(v)


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


_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the selector's error, not a line on stderr


@lru_cache(maxsize=128)
def _regex(pattern: str) -> Any:
    """RE2, as Go's regexp: linear time whatever the pattern (a backtracking engine takes hours on
    `^(a+)+$` against a 40-character attribute, and the API server's cost estimate cannot tell),
    and RE2's syntax (no lookaround, no backreferences)."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        raise ValueError(f"error parsing regexp: {reason.decode() if isinstance(reason, bytes) else reason}") from None


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return str(m.group(0)) if m else ""


def _find_all_n(s: str, pattern: str, limit: int) -> list[str]:
    # Go's FindAllString: empty matches right after the previous match are skipped.
    out: list[str] = []
    prev_end = -1
    for m in _regex(pattern).finditer(s):
        if limit >= 0 and len(out) >= limit:
            break
        if m.start() == m.end() == prev_end:
            continue
        out.append(str(m.group(0)))
        prev_end = m.end()
    return out


def _find_all(s: str, pattern: str) -> list[str]:
    return _find_all_n(s, pattern, -1)


# ---------------------------------------------------------------------------------------------
# Declarations

_T = cel.Type
_TAGGED = _T.Map(_T.STRING, _T.STRING)  # a Quantity or a Semver
_ANY = _T("any")  # cel-cpp's "any" kind: a parameter that dispatches on every runtime value
_LIST = _T.List(_T.DYN)


def _fn(name: str, *overloads: tuple[str, cel.Type, Sequence[cel.Type], bool, Callable[..., Any]]) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name,
        [cel.Overload(oid, ret, list(ps), is_member=member, impl=impl) for oid, ret, ps, member, impl in overloads],
    )


def functions() -> list[cel.FunctionDecl]:
    """The declarations of everything above, for the environment."""
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
