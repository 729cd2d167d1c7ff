"""Kubernetes resource quantities: a port of k8s.io/apimachinery v0.37.2 pkg/api/resource
(quantity.go: ParseQuantity, parseQuantityString, CanonicalizeBytes; suffix.go), the core's one
quantity module.

Grammar (parseQuantityString, then the suffixer's `interpret`)::

    <quantity> ::= <sign>? <digits>? (. <digits>?)? <suffix>
    <suffix>   ::= "" | Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | k | M | G | T | P | E
                 | (e|E) <strconv.ParseInt(…, 10, 64)>, truncated to int32 as Go does

One scanner serves three readings:

`parse_go_quantity(text)`
    ParseQuantity itself, Go's error messages included: non-zero values rounded up to nano
    precision, BinarySI capped at 2^63-1, the format, and the spelling kept when it is already
    canonical. Go also reads "+", "." and "Gi" as 0. CEL's `quantity()` and the capacities a
    selector sees.
`Quantity.parse(raw)`
    What decoding a Quantity from JSON gives (spaces trimmed), for the allocator, with one
    deliberate difference: the number needs a digit, so "Gi", "+" and "." are invalid. The API
    server stores such spellings as "0", so objects read from it never hold them.
`parse_quantity(q)`
    The exact value as written, for pod requests and node allocatable: the grammar, exponent
    and digit rule of `Quantity.parse`, neither rounded to nano nor capped. The API server
    stores ParseQuantity's result (keeping a spelling only where it is exact), so for objects
    read this is ParseQuantity's value too; hand-written objects keep every digit.

`Value()` and `MilliValue()` here round up away from zero, as Go does for amounts that are not
negative; for negative non-integers Go's results differ (apimachinery v0.37.2 prints 0 for -1.5
and 1 for -0.5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, ROUND_FLOOR, ROUND_UP, Context, Decimal
from functools import lru_cache
from typing import Any, Final, NamedTuple

from draxr.core.limits import INT64_MAX, INT64_MIN, parse_int64

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "ERR_FORMAT",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "INT64_MAX",
    "INT64_MIN",
    "Quantity",
    "QuantityError",
    "QuantityLike",
    "as_int64",
    "compare_quantities",
    "milli_value",
    "parse_go_quantity",
    "parse_quantity",
    "value",
]

DECIMAL_EXPONENT: Final = "DecimalExponent"
BINARY_SI: Final = "BinarySI"
DECIMAL_SI: Final = "DecimalSI"

# ParseQuantity's errors (ErrFormatWrong, ErrSuffix, ErrNumeric).
ERR_FORMAT: Final = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"

# What callers may hand `parse_quantity`: strings from the API, ints/floats/Decimals from hand-written dicts.
QuantityLike = str | int | float | Decimal


class QuantityError(ValueError):
    """Not a valid quantity."""


# The default context rounds to 28 digits; quantities must stay exact ("1.5Ei", long mantissas).
_EXACT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
_NANO: Final = Decimal("1e-9")
_MAX_INT64_FACTORS: Final = 18  # maxInt64Factors: decimal digits that always fit an int64
_DEC_EXP: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_EXP: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_SUFFIX: Final = {e: s for s, e in _DEC_EXP.items()}
_BIN_SUFFIX: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
# parseQuantityString: sign, leading zeros, integer digits, fraction, suffix letters, sign, digits.
# Its loops are greedy and never back up, nor does this pattern where Go's scanner succeeds.
_SCAN: Final = re.compile(r"([+-]?)(0*)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")


class _Parts(NamedTuple):
    negative: bool
    number: str  # sign, digits and point as written (Go's `value`)
    num: str  # integer digits without leading zeros, "0" if none
    denom: str  # fraction digits
    has_digits: bool
    base: int  # 10 or 2
    exponent: int  # of the base
    fmt: str


def _scan(text: str) -> _Parts:
    """parseQuantityString and `interpret`; QuantityError with Go's message."""
    m = _SCAN.fullmatch(text)
    if m is None:
        raise QuantityError(ERR_FORMAT)
    sign, zeros, num, denom, suffix = m.groups()
    if suffix in _DEC_EXP:
        base, exponent, fmt = 10, _DEC_EXP[suffix], DECIMAL_SI
    elif suffix in _BIN_EXP:
        base, exponent, fmt = 2, _BIN_EXP[suffix], BINARY_SI
    else:
        parsed = parse_int64(suffix[1:]) if len(suffix) > 1 and suffix[0] in "eE" else None
        if parsed is None:
            raise QuantityError(ERR_SUFFIX)
        base, exponent, fmt = 10, (parsed + 2**31) % 2**32 - 2**31, DECIMAL_EXPONENT  # Go: int32(parsed)
    return _Parts(
        negative=sign == "-",
        number=text[: m.start(5)],
        num=num or "0",
        denom=denom or "",
        has_digits=bool(zeros or num or denom),
        base=base,
        exponent=exponent,
        fmt=fmt,
    )


def _exact(p: _Parts) -> Decimal:
    """The number times its suffix, exactly."""
    if not p.has_digits:
        return Decimal(0)
    number = Decimal(p.number)
    if p.base == 2:
        return _EXACT.multiply(number, Decimal(2**p.exponent))
    return _EXACT.scaleb(number, p.exponent)


def _int64_fast_path(p: _Parts) -> tuple[bool, bool]:
    """(taken, spelling kept): ParseQuantity's int64 fast path, and whether it keeps the input as the string.

    Taken when the digits fit an int64 at a scale of at least nano (BinarySI: without a
    fraction); it keeps the input when it is canonical: BinarySI digits that are not a multiple
    of 8, otherwise a scale that is a multiple of 3 and digits that neither start with 0 nor end
    in 000. So "2e0", "+2", "01", "2." and "1.500" are kept, "2.0" and "1000" are not.
    """
    binary = p.fmt == BINARY_SI
    if binary:
        if p.denom:
            return False, False
        mantissa = 1 << p.exponent
        precision = 15 - len(p.num) - (p.exponent * 3) // 10 - 1
        scale = 0
    else:
        mantissa = 1
        precision = _MAX_INT64_FACTORS - len(p.num) - len(p.denom)
        scale = p.exponent
    if precision < 0:
        return False, False
    scale -= len(p.denom)
    if scale < -9:
        return False, False
    shifted = p.num + p.denom
    digits = int(shifted)
    if digits * mantissa > INT64_MAX:
        return False, False
    if binary:
        return True, p.exponent % 10 == 0 and digits & 0x07 != 0
    return True, scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


@lru_cache(maxsize=4096)
def _parse_go(text: str) -> tuple[Quantity, bool]:
    """ParseQuantity, and whether the number has a digit."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    if text == "0":
        return Quantity(Decimal(0), DECIMAL_SI, text), True
    p = _scan(text)
    fast, kept = _int64_fast_path(p)
    if not fast and not p.has_digits:
        raise QuantityError(ERR_NUMERIC)  # inf.Dec cannot read a number without digits
    v = _exact(p)
    fmt = p.fmt
    # Rounding and capping are no-ops on the fast path, whose values are exact int64 multiples of nano.
    if v != 0:
        # ParseQuantity rounds non-zero values up (away from zero) to nano precision.
        exponent = v.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -9:
            v = v.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)
    if fmt == BINARY_SI:
        if abs(v) > INT64_MAX:
            v = Decimal(INT64_MAX) if v > 0 else -Decimal(INT64_MAX)
        if 0 < abs(v) < 1:
            fmt = DECIMAL_SI
    return Quantity(v, fmt, text if kept else ""), p.has_digits


def parse_go_quantity(text: str) -> Quantity:
    """apimachinery `ParseQuantity(text)`; QuantityError with Go's message."""
    return _parse_go(text)[0]


def _ceil(v: Decimal) -> int:
    # Go's ScaledValue rounds up; here away from zero (see the module docstring).
    return int(v.to_integral_value(rounding=ROUND_CEILING if v >= 0 else ROUND_FLOOR, context=_EXACT))


@dataclass(frozen=True, slots=True)
class Quantity:
    """An immutable resource.Quantity. Compare with `cmp` (Go's `Cmp`): `==` also looks at the format.

    `text` is the spelling ParseQuantity kept ("" if none); only `string()` uses it.
    """

    value: Decimal
    fmt: str = DECIMAL_SI
    text: str = field(default="", compare=False, repr=False)

    @staticmethod
    def parse(raw: Any) -> Quantity:
        """A Quantity decoded from JSON, as the allocator reads them; ValueError if invalid.

        Like Go's UnmarshalJSON (spaces trimmed, then ParseQuantity), except that the number
        must have a digit (see the module docstring).
        """
        if isinstance(raw, Quantity):
            return raw
        text = raw.strip() if isinstance(raw, str) else str(raw)
        try:
            q, has_digits = _parse_go(text)
        except QuantityError:
            has_digits = False
        if not has_digits:
            raise QuantityError(f"invalid quantity: {text!r}")
        return q

    @staticmethod
    def from_int(v: int, fmt: str) -> Quantity:
        return Quantity(Decimal(v), fmt)

    @staticmethod
    def from_milli(v: int, fmt: str) -> Quantity:
        return Quantity(_EXACT.scaleb(Decimal(v), -3), fmt)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(_EXACT.add(self.value, other.value), self.fmt)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(_EXACT.subtract(self.value, other.value), self.fmt)

    def cmp(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def int_value(self) -> int:
        """Go `Value()`: rounded up to an integer."""
        return _ceil(self.value)

    def milli_value(self) -> int:
        """Go `MilliValue()`: thousandths, rounded up."""
        return _ceil(_EXACT.scaleb(self.value, 3))

    def __str__(self) -> str:
        return self.string()

    def string(self) -> str:
        """Go `Quantity.String()` and JSON form: the kept spelling if any, else `canonical()`."""
        return self.text or self.canonical()

    def canonical(self) -> str:
        """Go CanonicalizeBytes: what `String()` prints for a computed quantity."""
        v = self.value
        if v == 0:
            return "0"
        fmt = self.fmt
        if fmt == BINARY_SI and (-1024 < v < 1024 or v != v.to_integral_value(context=_EXACT)):
            fmt = DECIMAL_SI
        if fmt == BINARY_SI:
            n = int(v)
            exp = 0
            neg = n < 0
            n = -n if neg else n
            while n >= 1024 and n % 1024 == 0:
                n //= 1024
                exp += 1
            return ("-" if neg else "") + str(n) + _BIN_SUFFIX.get(exp, "")
        sign, digits, exponent = v.normalize(context=_EXACT).as_tuple()
        mantissa = int("".join(map(str, digits)))
        e = int(exponent)
        rem = e % 3
        if rem:
            mantissa *= 10**rem
            e -= rem
        text = ("-" if sign else "") + str(mantissa)
        if fmt == DECIMAL_EXPONENT:
            return text if e == 0 else f"{text}e{e}"
        return text + _DEC_SUFFIX.get(e, "")


# --------------------------------------------------------------------------- exact values


def parse_quantity(quantity: QuantityLike) -> Decimal:
    """Exact value of a quantity (see the module docstring); ValueError if it is invalid."""
    if isinstance(quantity, bool):  # bool is an int subclass; never a valid quantity
        raise QuantityError(f"invalid quantity: {quantity!r}")
    if isinstance(quantity, Decimal):
        if not quantity.is_finite():
            raise QuantityError(f"invalid quantity: {quantity!r}")
        return quantity
    if isinstance(quantity, int):
        return Decimal(quantity)
    if isinstance(quantity, float):
        # repr() gives the shortest string that round-trips, i.e. what a YAML author wrote.
        return parse_quantity(repr(quantity))
    try:
        return _exact_value(quantity)
    except QuantityError:
        raise QuantityError(f"invalid quantity: {quantity!r}") from None


@lru_cache(maxsize=4096)  # pods repeat a few spellings ("100m", "1Gi") in every scheduling cycle
def _exact_value(text: str) -> Decimal:
    p = _scan(text)
    if not p.has_digits:
        raise QuantityError(ERR_NUMERIC)
    return _exact(p)


def as_int64(quantity: QuantityLike) -> int | None:
    """The value if it is an integer that fits int64, else None (upstream `Quantity.AsInt64`).

    Upstream's AsInt64 also fails for non-canonical spellings such as "2000m"; the API server
    canonicalises stored quantities ("2"), so judging the value is what it sees in practice.
    """
    v = parse_quantity(quantity)
    # Range first: int() of "1e999999999" would build a gigantic integer.
    if not INT64_MIN <= v <= INT64_MAX or v != v.to_integral_value(context=_EXACT):
        return None
    return int(v)


def value(quantity: QuantityLike) -> int:
    """`Quantity.Value()`: rounded up, away from zero, to a whole number (scalar resources).

    Saturates at the int64 bounds, as upstream caps every parsed quantity at 2^63-1.
    """
    v = parse_quantity(quantity)
    if v >= INT64_MAX:
        return INT64_MAX
    if v <= INT64_MIN:
        return INT64_MIN
    return _ceil(v)


def milli_value(quantity: QuantityLike) -> int:
    """`Quantity.MilliValue()`: thousandths, rounded up away from zero (what the scheduler uses for cpu)."""
    return value(_EXACT.scaleb(parse_quantity(quantity), 3))


def compare_quantities(a: QuantityLike, b: QuantityLike) -> int:
    """-1, 0 or 1 by value, whatever the spelling ("1Ki" == "1024" == "1.024k")."""
    x, y = parse_quantity(a), parse_quantity(b)
    return (x > y) - (x < y)
