"""Compile-time checks that cel-go (Kubernetes) performs and cel-cpp does not.

The Kubernetes CEL base environment enables cel-go's `HomogeneousAggregateLiterals`: after
type-checking, every list literal must have elements of one type, and every map literal keys of
one type and values of one type (`[device.attributes["d"].x, "a"]` mixes `dyn` and `string`
and is rejected with "expected type 'dyn' but found 'string'"). Literals anywhere inside a
`format` call are exempt. cel-cpp has no such option, so this module re-implements the
validator (cel-go `homogeneousAggregateLiteralValidator`, v0.29.2) on the checked AST that
cel-expr-python serializes (`Expression.serialize()`: a `cel.expr.CheckedExpr`, read here with
a minimal protobuf wire decoder).

The element types must be the ones cel-go infers, and those differ from cel-cpp's where the
draxr environment has to approximate upstream declarations: `device` is a `map(string, dyn)`
here but the object `kubernetes.DRADevice` upstream (`device.driver` is a string,
`device.capacity[d][id]` a `kubernetes.Quantity`), quantities and versions are
`map(string, string)` here but distinct opaque types upstream, and the Kubernetes list
functions `min`/`max`/`sum` return their element type upstream. `_Checker.infer` therefore
computes upstream's type bottom-up where the two differ (device fields, selection and indexing,
optionals, literals, comprehension variables, type-parameterised functions, the Kubernetes
library) and takes cel-cpp's type for everything else. A type parameter that nothing has bound
yet (`[]`, `optional.none()`) unifies with anything, as in cel-go.

With those types it also reports what cel-go's checker rejects and cel-cpp, seeing `dyn`, let
through (same messages as cel-go):
- unknown fields of `device` ("undefined field 'x'") and map-only operations on it (indexing,
  `in`, `size`, comprehensions);
- comparisons without an overload for the operand types (`device.driver == 1`,
  `device.capacity[d].m < quantity("1")`, `device.driver in [1]`), and `orValue` arguments;
- Kubernetes library calls on the wrong type (`quantity("1").compareTo(semver("1.0.0"))`,
  `["a"].sum()`);
- the output type, which compile.go requires to be bool or dyn (`device.driver` is a string).
Other functions are not re-resolved: where upstream's stricter types would reject a call that
cel-cpp accepts with dyn, draxr fails at runtime instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = ["DYN", "CheckIssue", "CheckResult", "Ty", "check_checked_expr", "format_issues"]


# ---------------------------------------------------------------------------------------------
# Protocol buffer wire format (just enough to read a CheckedExpr)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return result, i


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value): varints as int, length-delimited and fixed-width fields as bytes."""
    i, end = 0, len(buf)
    while i < end:
        tag, i = _varint(buf, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield number, value
        elif wire == 2:
            n, i = _varint(buf, i)
            yield number, buf[i : i + n]
            i += n
        elif wire == 1:
            yield number, buf[i : i + 8]
            i += 8
        elif wire == 5:
            yield number, buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _bytes_fields(buf: bytes) -> Iterator[tuple[int, bytes]]:
    for number, value in _fields(buf):
        if isinstance(value, bytes):
            yield number, value


# ---------------------------------------------------------------------------------------------
# Types, named as cel-go's FormatCELType prints them


@dataclass(frozen=True, slots=True)
class Ty:
    name: str
    params: tuple[Ty, ...] = ()

    def __str__(self) -> str:
        if self is FREE:
            return "dyn"  # an unbound type parameter is substituted with dyn
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(str(p) for p in self.params)})"


def _list(t: Ty) -> Ty:
    return Ty("list", (t,))


def _map(k: Ty, v: Ty) -> Ty:
    return Ty("map", (k, v))


def _optional(t: Ty) -> Ty:
    return Ty("optional_type", (t,))


DYN: Final = Ty("dyn")
FREE: Final = Ty("?")  # a type parameter not bound yet: `[]`, `{}`, `optional.none()`
NULL: Final = Ty("null")
BOOL: Final = Ty("bool")
INT: Final = Ty("int")
UINT: Final = Ty("uint")
DOUBLE: Final = Ty("double")
STRING: Final = Ty("string")
BYTES: Final = Ty("bytes")
DURATION: Final = Ty("duration")
TIMESTAMP: Final = Ty("timestamp")
QUANTITY: Final = Ty("kubernetes.Quantity")
SEMVER: Final = Ty("kubernetes.Semver")
DEVICE: Final = Ty("kubernetes.DRADevice")
_ERROR: Final = Ty("!error!")

# kubernetes.DRADevice as StoredExpressions declares it (dynamic-resource-allocation cel/compile.go).
_DEVICE_FIELDS: Final[Mapping[str, Ty]] = {
    "driver": STRING,
    "allowMultipleAllocations": BOOL,
    "attributes": _map(STRING, _map(STRING, DYN)),
    "capacity": _map(STRING, _map(STRING, QUANTITY)),
}
_PRIMITIVES: Final = {1: BOOL, 2: INT, 3: UINT, 4: DOUBLE, 5: STRING, 6: BYTES}
_WELL_KNOWN: Final = {1: Ty("any"), 2: TIMESTAMP, 3: DURATION}
# Constant.constant_kind field numbers.
_CONSTANTS: Final = {1: NULL, 2: BOOL, 3: INT, 4: UINT, 5: DOUBLE, 6: STRING, 7: BYTES, 8: DURATION, 9: TIMESTAMP}
# Kubernetes lists library element types (apiserver pkg/cel/library/lists.go).
_COMPARABLE: Final = (INT, UINT, DOUBLE, BOOL, DURATION, TIMESTAMP, STRING, BYTES)
_SUMMABLE: Final = (INT, UINT, DOUBLE, DURATION)
_Signature = tuple[tuple[Ty, ...], Ty]  # (parameters, receiver first for member functions; result)
# Upstream's declarations of the Kubernetes library functions draxr implements with looser
# types (quantities and versions are both map(string, string) here, list functions take
# list(dyn)): (name, member) -> overloads. apiserver pkg/cel/library quantity.go,
# semverlib.go (v1) and lists.go (v1).
_K8S_SIGNATURES: Final[Mapping[tuple[str, bool], tuple[_Signature, ...]]] = {
    ("quantity", False): (((STRING,), QUANTITY),),
    ("sign", False): (((QUANTITY,), INT),),
    ("isGreaterThan", True): (((QUANTITY, QUANTITY), BOOL), ((SEMVER, SEMVER), BOOL)),
    ("isLessThan", True): (((QUANTITY, QUANTITY), BOOL), ((SEMVER, SEMVER), BOOL)),
    ("compareTo", True): (((QUANTITY, QUANTITY), INT), ((SEMVER, SEMVER), INT)),
    ("asApproximateFloat", True): (((QUANTITY,), DOUBLE),),
    ("asInteger", True): (((QUANTITY,), INT),),
    ("isInteger", True): (((QUANTITY,), BOOL),),
    ("add", True): (((QUANTITY, QUANTITY), QUANTITY), ((QUANTITY, INT), QUANTITY)),
    ("sub", True): (((QUANTITY, QUANTITY), QUANTITY), ((QUANTITY, INT), QUANTITY)),
    ("semver", False): (((STRING,), SEMVER), ((STRING, BOOL), SEMVER)),
    ("major", True): (((SEMVER,), INT),),
    ("minor", True): (((SEMVER,), INT),),
    ("patch", True): (((SEMVER,), INT),),
    ("isSorted", True): tuple(((_list(t),), BOOL) for t in _COMPARABLE),
    ("min", True): tuple(((_list(t),), t) for t in _COMPARABLE),
    ("max", True): tuple(((_list(t),), t) for t in _COMPARABLE),
    ("sum", True): tuple(((_list(t),), t) for t in _SUMMABLE),
}
# Comparison operators whose overloads cel-cpp could not check on draxr's dyn-typed device.
_COMPARISONS: Final = frozenset({"_==_", "_!=_", "@in", "_<_", "_<=_", "_>_", "_>=_"})
_NUMERIC: Final = frozenset({INT, UINT, DOUBLE})
_ORDERED: Final = frozenset({INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION})
_NOT_NULLABLE: Final = frozenset({"bool", "int", "uint", "double", "string", "bytes", "list", "map"})
# Functions whose list and map literal arguments may mix types (cel-go ext strings `format`).
_EXEMPT_FUNCTIONS: Final = frozenset({"format"})
# Global functions with map overloads but none for objects: (container, ...) or (..., container) for `in`.
_MAP_FUNCTIONS: Final = frozenset({"_[_]", "_[?_]", "@in", "size"})
# Upstream types that draxr represents as maps.
_NOT_MAPS: Final = frozenset({DEVICE, QUANTITY, SEMVER})


def _decode_type(buf: bytes) -> Ty:
    for number, value in _fields(buf):
        if number == 1:
            return DYN
        if number == 2:
            return NULL
        if number == 3 and isinstance(value, int):
            return _PRIMITIVES.get(value, DYN)
        if number == 4 and isinstance(value, int):
            return Ty("wrapper", (_PRIMITIVES.get(value, DYN),))
        if number == 5 and isinstance(value, int):
            return _WELL_KNOWN.get(value, DYN)
        if not isinstance(value, bytes):
            continue
        if number == 6:
            elem = next((_decode_type(v) for n, v in _bytes_fields(value) if n == 1), DYN)
            return _list(elem)
        if number == 7:
            kv = {n: _decode_type(v) for n, v in _bytes_fields(value)}
            return _map(kv.get(1, DYN), kv.get(2, DYN))
        if number == 9:
            return Ty(value.decode())
        if number == 10:
            return FREE
        if number == 11:
            return Ty("type", (_decode_type(value),)) if value else Ty("type")
        if number == 12:
            return _ERROR
        if number == 14:
            name, params = "", []
            for n, v in _bytes_fields(value):
                if n == 1:
                    name = v.decode()
                elif n == 2:
                    params.append(_decode_type(v))
            return Ty(name, tuple(params))
    return DYN


def _unify(a: Ty, b: Ty) -> Ty | None:
    """The common type if `a` and `b` are equivalent (cel-go IsEquivalentType), binding free parameters."""
    if a is FREE:
        return b
    if b is FREE:
        return a
    if a.name != b.name or len(a.params) != len(b.params):
        return None
    if not a.params:
        return a
    params = []
    for x, y in zip(a.params, b.params, strict=True):
        u = _unify(x, y)
        if u is None:
            return None
        params.append(u)
    return Ty(a.name, tuple(params))


# ---------------------------------------------------------------------------------------------
# Expressions


@dataclass(slots=True)
class _Expr:
    id: int = 0
    kind: str = ""  # const, ident, select, call, list, map, comprehension
    name: str = ""  # identifier, selected field, or function
    const_type: Ty = DYN
    test_only: bool = False
    target: _Expr | None = None  # select operand, member-call receiver
    args: list[_Expr] = field(default_factory=list)  # call arguments, list elements
    optional_indices: frozenset[int] = frozenset()
    # map literal entries: (key, value, optional)
    entries: list[tuple[_Expr, _Expr, bool]] = field(default_factory=list)
    # comprehension
    iter_var: str = ""
    iter_var2: str = ""
    accu_var: str = ""
    iter_range: _Expr | None = None
    accu_init: _Expr | None = None
    loop_condition: _Expr | None = None
    loop_step: _Expr | None = None
    result: _Expr | None = None


def _decode_expr(buf: bytes) -> _Expr:
    e = _Expr()
    for number, value in _fields(buf):
        if number == 2 and isinstance(value, int):
            e.id = _int64(value)
        elif not isinstance(value, bytes):
            continue
        elif number == 3:
            e.kind = "const"
            for n, v in _fields(value):
                e.const_type = _CONSTANTS.get(n, DYN)
                if n == 6 and isinstance(v, bytes):
                    e.name = v.decode()  # string constants keep their value (`_?._` field names)
        elif number == 4:
            e.kind = "ident"
            e.name = next((v.decode() for n, v in _bytes_fields(value) if n == 1), "")
        elif number == 5:
            e.kind = "select"
            for n, v in _fields(value):
                if n == 1 and isinstance(v, bytes):
                    e.target = _decode_expr(v)
                elif n == 2 and isinstance(v, bytes):
                    e.name = v.decode()
                elif n == 3:
                    e.test_only = bool(v)
        elif number == 6:
            e.kind = "call"
            for n, v in _bytes_fields(value):
                if n == 1:
                    e.target = _decode_expr(v)
                elif n == 2:
                    e.name = v.decode()
                elif n == 3:
                    e.args.append(_decode_expr(v))
        elif number == 7:
            e.kind = "list"
            optional: set[int] = set()
            for n, v in _fields(value):
                if n == 1 and isinstance(v, bytes):
                    e.args.append(_decode_expr(v))
                elif n == 2 and isinstance(v, int):
                    optional.add(v)
                elif n == 2 and isinstance(v, bytes):  # packed
                    i = 0
                    while i < len(v):
                        idx, i = _varint(v, i)
                        optional.add(idx)
            e.optional_indices = frozenset(optional)
        elif number == 8:
            e.kind = "map"
            for n, v in _bytes_fields(value):
                if n == 2:
                    e.entries.append(_decode_entry(v))
        elif number == 9:
            e.kind = "comprehension"
            for n, v in _bytes_fields(value):
                if n == 1:
                    e.iter_var = v.decode()
                elif n == 8:
                    e.iter_var2 = v.decode()
                elif n == 3:
                    e.accu_var = v.decode()
                elif n == 2:
                    e.iter_range = _decode_expr(v)
                elif n == 4:
                    e.accu_init = _decode_expr(v)
                elif n == 5:
                    e.loop_condition = _decode_expr(v)
                elif n == 6:
                    e.loop_step = _decode_expr(v)
                elif n == 7:
                    e.result = _decode_expr(v)
    return e


def _decode_entry(buf: bytes) -> tuple[_Expr, _Expr, bool]:
    key, value, optional = _Expr(kind="const", const_type=STRING), _Expr(), False
    for n, v in _fields(buf):
        if n == 2 and isinstance(v, bytes):  # field_key (messages only)
            key = _Expr(kind="const", const_type=STRING)
        elif n == 3 and isinstance(v, bytes):
            key = _decode_expr(v)
        elif n == 4 and isinstance(v, bytes):
            value = _decode_expr(v)
        elif n == 5:
            optional = bool(v)
    return key, value, optional


# ---------------------------------------------------------------------------------------------
# Inference and validation


@dataclass(frozen=True, slots=True)
class CheckIssue:
    offset: int  # code point offset into the expression, -1 if unknown
    message: str


@dataclass(frozen=True, slots=True)
class CheckResult:
    issues: list[CheckIssue]  # sorted by position
    output_type: Ty  # upstream's type of the whole expression

    def output_type_error(self) -> str | None:
        """compile.go validateOutputType: a selector must be bool or the attribute type (dyn)."""
        if self.output_type in (BOOL, DYN, FREE, _ERROR):
            return None
        return f"must evaluate to bool or the unknown type, not {_declared_name(self.output_type)}"


# cel-go Type.String() uses declared type names where FormatCELType uses short ones.
_DECLARED_NAMES: Final = {
    "null": "null_type",
    "timestamp": "google.protobuf.Timestamp",
    "duration": "google.protobuf.Duration",
}


def _declared_name(t: Ty) -> str:
    name = "dyn" if t is FREE else _DECLARED_NAMES.get(t.name, t.name)
    if not t.params:
        return name
    return f"{name}({', '.join(_declared_name(p) for p in t.params)})"


Scope = tuple[tuple[str, Ty], ...]


class _Checker:
    def __init__(self, types: Mapping[int, Ty]) -> None:
        self.types = types
        self.issues: dict[tuple[int, str], str] = {}  # (expr id, kind) -> message
        self.memo: dict[tuple[int, Scope, bool], Ty] = {}
        self.record = True

    def issue(self, expr_id: int, kind: str, message: str) -> None:
        if self.record:
            self.issues[(expr_id, kind)] = message

    def cpp_type(self, e: _Expr) -> Ty:
        return self.types.get(e.id, DYN)

    def infer(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        key = (e.id, scope, exempt)
        hit = self.memo.get(key)
        if hit is not None and self.record:
            return hit
        t = self._infer(e, scope, exempt)
        if self.record:
            self.memo[key] = t
        return t

    def _infer(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        if e.kind == "const":
            return e.const_type
        if e.kind == "ident":
            for name, t in reversed(scope):
                if name == e.name:
                    return t
            return DEVICE if e.name == "device" else self.cpp_type(e)
        if e.kind == "select":
            assert e.target is not None
            operand = self.infer(e.target, scope, exempt)
            # Selecting on an optional value selects on its content and stays optional.
            optional = operand.name == "optional_type" and len(operand.params) == 1
            inner = operand.params[0] if optional else operand
            if inner == DEVICE and e.name not in _DEVICE_FIELDS:
                self.issue(e.id, "field", f"undefined field '{e.name}'")
                return _ERROR
            if inner in (QUANTITY, SEMVER):  # opaque upstream, a map here
                self.issue(e.id, "field", f"unexpected failed resolution of '{inner}'")
                return _ERROR
            result = BOOL if e.test_only else self._field(inner, e.name, e)
            return _optional(result) if optional and not e.test_only else result
        if e.kind == "call":
            return self._call(e, scope, exempt)
        if e.kind == "list":
            return self._list_literal(e, scope, exempt)
        if e.kind == "map":
            return self._map_literal(e, scope, exempt)
        if e.kind == "comprehension":
            return self._comprehension(e, scope, exempt)
        return self.cpp_type(e)

    def _field(self, operand: Ty, name: str, e: _Expr) -> Ty:
        if operand == DEVICE:
            return _DEVICE_FIELDS.get(name, _ERROR)
        if operand.name == "map":
            return operand.params[1]
        if operand in (DYN, FREE):
            return DYN
        cpp = self.cpp_type(e)
        return cpp.params[0] if cpp.name == "optional_type" and len(cpp.params) == 1 else cpp

    def _no_overload(self, e: _Expr, arg_types: list[Ty]) -> None:
        args = ", ".join(str(t) for t in arg_types)
        self.issue(e.id, "overload", f"found no matching overload for '{e.name}' applied to '({args})'")

    def _call(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        inner_exempt = exempt or e.name in _EXEMPT_FUNCTIONS
        target = self.infer(e.target, scope, inner_exempt) if e.target is not None else None
        args = [self.infer(a, scope, inner_exempt) for a in e.args]
        fn = e.name
        # Only maps and lists have these overloads; upstream's device, quantities and versions
        # are an object and opaque types, not maps.
        if target is None and args and args[-1 if fn == "@in" else 0] in _NOT_MAPS and fn in _MAP_FUNCTIONS:
            self._no_overload(e, args)
            return _ERROR
        if target in _NOT_MAPS and fn == "size" and not args:
            self.issue(e.id, "overload", f"found no matching overload for 'size' applied to '{target}.()'")
            return _ERROR
        if target is None and len(args) == 2 and fn in ("_[_]", "_[?_]", "_?._"):
            container, optional = args[0], fn != "_[_]"
            if container.name == "optional_type" and len(container.params) == 1:
                container, optional = container.params[0], True
            if container == DEVICE and fn == "_?._":
                field_name = e.args[1].name
                if field_name not in _DEVICE_FIELDS:
                    self.issue(e.id, "field", f"undefined field '{field_name}'")
                    return _ERROR
                elem = _DEVICE_FIELDS[field_name]
            elif container in (QUANTITY, SEMVER) and fn == "_?._":
                self.issue(e.id, "field", f"unexpected failed resolution of '{container}'")
                return _ERROR
            elif container.name == "map":
                elem = container.params[1]
            elif container.name == "list" and fn != "_?._":
                elem = container.params[0]
            elif container in (DYN, FREE):
                elem = DYN
            else:
                return self.cpp_type(e)
            return _optional(elem) if optional else elem
        if target is not None and target.name == "optional_type" and target.params:
            inner = target.params[0]
            if fn == "orValue" and len(args) == 1:
                if not _assignable(inner, args[0]):
                    self.issue(
                        e.id,
                        "overload",
                        f"found no matching overload for 'orValue' applied to '{target}.({args[0]})'",
                    )
                    return _ERROR
                return args[0] if inner is FREE else inner
            if fn == "value" and not args:
                return inner
            if fn == "or" and len(args) == 1:
                return _unify(target, args[0]) or target
        if target is None and fn in ("optional.of", "optional.ofNonZeroValue") and len(args) == 1:
            return _optional(args[0])
        if target is None and fn == "optional.none" and not args:
            return _optional(FREE)
        if target is None and fn == "dyn":
            return DYN
        if target is None and fn == "type" and len(args) == 1:
            return Ty("type", (args[0],))
        if target is None and fn == "_?_:_" and len(args) == 3:
            a, b = args[1], args[2]
            joined = _unify(a, b)
            if joined is not None:
                return joined
            if DYN in (a, b):
                return DYN
            return self.cpp_type(e)
        if target is None and fn == "_+_" and len(args) == 2 and args[0].name == args[1].name == "list":
            return _unify(args[0], args[1]) or _list(DYN)
        if target is None and len(args) == 2 and fn in _COMPARISONS and not _comparable(fn, args[0], args[1]):
            self._no_overload(e, args)
            return _ERROR
        signatures = _K8S_SIGNATURES.get((fn, target is not None))
        if signatures is not None:
            return self._resolve(e, target, args, signatures)
        if target is not None and target.name == "list" and target.params:
            elem = target.params[0]
            if fn in ("distinct", "reverse", "sort", "slice", "@sortByAssociatedKeys"):
                return target
            if fn == "flatten" and not args:
                return elem if elem.name == "list" else (_list(DYN) if elem in (DYN, FREE) else self.cpp_type(e))
        return self.cpp_type(e)

    def _resolve(self, e: _Expr, target: Ty | None, args: list[Ty], signatures: tuple[_Signature, ...]) -> Ty:
        """Overload resolution against upstream's declarations: the result type, or an issue."""
        actual = [target, *args] if target is not None else args
        results = {
            result
            for params, result in signatures
            if len(params) == len(actual) and all(_assignable(p, a) for p, a in zip(params, actual, strict=True))
        }
        if not results:
            shown = ", ".join(str(a) for a in args)
            applied = f"{target}.({shown})" if target is not None else f"({shown})"
            self.issue(e.id, "overload", f"found no matching overload for '{e.name}' applied to '{applied}'")
            return _ERROR
        return results.pop() if len(results) == 1 else DYN

    def _list_literal(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        elem: Ty | None = None
        reported = mixed = False
        for i, item in enumerate(e.args):
            t = self.infer(item, scope, exempt)
            if i in e.optional_indices and t.name == "optional_type" and t.params:
                t = t.params[0]
            if elem is None:
                elem = t
                continue
            if reported:
                continue
            joined = _unify(elem, t)
            if joined is None:
                if not exempt:
                    self.issue(item.id, "literal", f"expected type '{elem}' but found '{t}'")
                reported = True
                mixed = True
            else:
                elem = joined
        # cel-go's checker joins mismatching element types to dyn.
        return _list(DYN if mixed else elem if elem is not None else FREE)

    def _map_literal(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        key_type: Ty | None = None
        value_type: Ty | None = None
        mixed_keys = mixed_values = False
        for k, v, optional in e.entries:
            kt = self.infer(k, scope, exempt)
            vt = self.infer(v, scope, exempt)
            if optional and vt.name == "optional_type" and vt.params:
                vt = vt.params[0]
            if key_type is None or value_type is None:
                key_type, value_type = kt, vt
                continue
            joined_key, joined_value = _unify(key_type, kt), _unify(value_type, vt)
            if joined_key is None:
                if not exempt:
                    self.issue(k.id, "literal", f"expected type '{key_type}' but found '{kt}'")
                mixed_keys = True
            else:
                key_type = joined_key
            if joined_value is None:
                if not exempt:
                    self.issue(v.id, "literal", f"expected type '{value_type}' but found '{vt}'")
                mixed_values = True
            else:
                value_type = joined_value
        return _map(DYN if mixed_keys else key_type or FREE, DYN if mixed_values else value_type or FREE)

    def _comprehension(self, e: _Expr, scope: Scope, exempt: bool) -> Ty:
        assert e.iter_range is not None
        assert e.accu_init is not None
        assert e.loop_condition is not None
        assert e.loop_step is not None
        assert e.result is not None
        rng = self.infer(e.iter_range, scope, exempt)
        if rng in _NOT_MAPS:
            self.issue(
                e.iter_range.id,
                "range",
                f"expression of type '{rng}' cannot be range of a comprehension (must be list, map, or dynamic)",
            )
            return _ERROR
        if rng.name == "list" and rng.params:
            first, second = (INT, rng.params[0]) if e.iter_var2 else (rng.params[0], DYN)
        elif rng.name == "map" and rng.params:
            first, second = rng.params
        else:
            first = second = DYN
        accu = self.infer(e.accu_init, scope, exempt)
        iter_scope: Scope = ((e.iter_var, first),)
        if e.iter_var2:
            iter_scope = (*iter_scope, (e.iter_var2, second))
        if FREE in _walk_types(accu):
            # `[]` / `{}` accumulators (map, filter, transformList, ...): the step binds the type.
            record, self.record = self.record, False
            try:
                stepped = self.infer(e.loop_step, (*scope, (e.accu_var, accu), *iter_scope), exempt)
            finally:
                self.record = record
            accu = _unify(accu, stepped) or accu
        inner: Scope = (*scope, (e.accu_var, accu), *iter_scope)
        self.infer(e.loop_condition, inner, exempt)
        self.infer(e.loop_step, inner, exempt)
        return self.infer(e.result, (*scope, (e.accu_var, accu)), exempt)


def _assignable(param: Ty, arg: Ty) -> bool:
    """Can `arg` be passed for the (concrete) parameter type `param`, as cel-go's checker decides?"""
    if arg in (DYN, FREE, _ERROR) or param in (DYN, FREE, _ERROR) or arg == param:
        return True
    if param.name != arg.name or len(param.params) != len(arg.params):
        return False
    return all(_assignable(p, a) for p, a in zip(param.params, arg.params, strict=True))


def _equality_assignable(a: Ty, b: Ty) -> bool:
    """May `a == b` be written? (cel-go: `_==_` is `(A, A) -> bool`, and null fits nullable types.)"""
    if a in (DYN, FREE, _ERROR) or b in (DYN, FREE, _ERROR):
        return True
    if NULL in (a, b):
        return (b if a == NULL else a).name not in _NOT_NULLABLE
    if a.name == b.name == "type":
        return True
    if a.name != b.name or len(a.params) != len(b.params):
        return False
    return all(_equality_assignable(x, y) for x, y in zip(a.params, b.params, strict=True))


def _comparable(fn: str, a: Ty, b: Ty) -> bool:
    """Does an overload of the comparison `fn` accept operands of upstream types `a` and `b`?"""
    if fn in ("_==_", "_!=_"):
        return _equality_assignable(a, b)
    if fn == "@in":
        if b in (DYN, FREE, _ERROR):
            return True
        if b.name in ("list", "map") and b.params:
            return _equality_assignable(b.params[0], a)
        return False
    # _<_ and friends: same-type overloads, plus numeric ones across int, uint and double
    # (the Kubernetes environment enables CrossTypeNumericComparisons).
    if a in (DYN, FREE, _ERROR) or b in (DYN, FREE, _ERROR):
        return True
    if a in _NUMERIC and b in _NUMERIC:
        return True
    return a == b and a in _ORDERED


def _walk_types(t: Ty) -> Iterator[Ty]:
    yield t
    for p in t.params:
        yield from _walk_types(p)


def check_checked_expr(serialized: bytes) -> CheckResult:
    """Issues upstream's checker and homogeneous-literal validator report, and the output type.

    `serialized` is `cel.Expression.serialize()`: a google.protobuf.Any holding a CheckedExpr.
    """
    checked = b""
    for number, value in _bytes_fields(serialized):
        if number == 2:
            checked = value
    types: dict[int, Ty] = {}
    root: _Expr | None = None
    positions: dict[int, int] = {}
    for number, value in _bytes_fields(checked):
        if number == 3:  # type_map entry
            key, ty = 0, DYN
            for n, v in _fields(value):
                if n == 1 and isinstance(v, int):
                    key = _int64(v)
                elif n == 2 and isinstance(v, bytes):
                    ty = _decode_type(v)
            types[key] = ty
        elif number == 4:
            root = _decode_expr(value)
        elif number == 5:  # source_info
            for n, v in _bytes_fields(value):
                if n == 4:
                    key = offset = 0
                    for m, w in _fields(v):
                        if m == 1 and isinstance(w, int):
                            key = _int64(w)
                        elif m == 2 and isinstance(w, int):
                            offset = _int64(w)
                    positions[key] = offset
    if root is None:
        return CheckResult([], DYN)
    checker = _Checker(types)
    output = checker.infer(root, (), False)
    issues = [CheckIssue(positions.get(expr_id, -1), message) for (expr_id, _), message in checker.issues.items()]
    issues.sort(key=lambda i: i.offset)
    return CheckResult(issues, output)


def format_issues(expression: str, issues: list[CheckIssue]) -> str:
    """cel-go's `Issues.String()`: `ERROR: <input>:line:col: message` with the source line and a caret."""
    lines = expression.split("\n")
    out = []
    for issue in issues:
        if issue.offset < 0:
            out.append(f"ERROR: <input>:-1:0: {issue.message}")
            continue
        line_no, start = 0, 0
        for i, text in enumerate(lines):
            if issue.offset <= start + len(text):
                line_no = i
                break
            start += len(text) + 1
        else:
            line_no = len(lines) - 1
        col = issue.offset - start
        snippet = lines[line_no].replace("\t", " ")
        out.append(f"ERROR: <input>:{line_no + 1}:{col + 1}: {issue.message}\n | {snippet}\n | {'.' * col}^")
    return "\n".join(out)
