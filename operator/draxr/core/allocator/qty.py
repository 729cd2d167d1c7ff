"""Quantities as the allocator sees them: exact value plus the Go `resource.Format`.

`draxr.core.quantity.parse_quantity` gives the exact value of what was written. On top of that
this module adds what the allocator needs to reproduce upstream byte for byte: ParseQuantity's
rounding (up to nano precision, BinarySI capped at 2^63-1), the format a quantity remembers
(it decides how consumedCapacity is printed), the original spelling ParseQuantity keeps when it
is already canonical, `Value()`/`MilliValue()` and `String()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, ROUND_FLOOR, ROUND_UP, Context, Decimal
from typing import Any

from draxr.core.quantity import parse_quantity

__all__ = ["BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "INT64_MAX", "Qty"]

DECIMAL_EXPONENT = "DecimalExponent"
BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"

INT64_MAX = 2**63 - 1
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
_NANO = Decimal("1e-9")
_SUFFIX = re.compile(r"(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+|[numkMGTPE])?$")
_DEC_SUFFIX = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BIN_SUFFIX = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
# ParseQuantity's scanner: sign, integer digits after leading zeros, fraction digits, suffix.
_SCAN = re.compile(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?(.*)", re.DOTALL)
_DEC_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_EXP = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_MAX_INT64_FACTORS = 18


def _keeps_string(text: str) -> bool:
    """Does Go's ParseQuantity keep `text` as the quantity's string (what String() and JSON print)?

    Only its int64 fast path does, and only when the number is already in canonical form:
    for BinarySI when the digits are not a multiple of 8, otherwise when the scale (suffix
    exponent minus fraction digits) is a multiple of 3 and the digits neither start with 0
    nor end in 000. So "2e0", "+2", "01", "2." and "1.500" are kept, "2.0" and "1000" are not.
    `text` must already be a valid quantity.
    """
    m = _SCAN.fullmatch(text)
    if m is None:
        return False
    num = m.group(2) or "0"
    denom = m.group(3) or ""
    suffix = m.group(4)
    binary = False
    if suffix in _DEC_EXP:
        exponent = _DEC_EXP[suffix]
    elif suffix in _BIN_EXP:
        exponent, binary = _BIN_EXP[suffix], True
    elif len(suffix) > 1 and suffix[0] in "eE":
        try:
            exponent = int(suffix[1:])
        except ValueError:
            return False
    else:
        return False
    mantissa = 1
    if binary:
        if denom:
            return False
        mantissa = 1 << exponent
        precision = 15 - len(num) - (exponent * 3) // 10 - 1
        scale = 0
    else:
        precision = _MAX_INT64_FACTORS - len(num) - len(denom)
        scale = exponent
    if precision < 0:
        return False
    scale -= len(denom)
    if scale < -9:
        return False
    shifted = num + denom
    value = int(shifted)
    if value * mantissa > INT64_MAX:
        return False
    if binary:
        return exponent % 10 == 0 and value & 0x07 != 0
    return scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"


def _ceil(v: Decimal) -> int:
    # Go's ScaledValue rounds away from zero.
    return int(v.to_integral_value(rounding=ROUND_CEILING if v >= 0 else ROUND_FLOOR, context=_EXACT))


@dataclass(frozen=True, slots=True)
class Qty:
    """An immutable quantity. Compare with `cmp` (Go's `Cmp`): `==` also looks at the format.

    `text` is the spelling ParseQuantity kept ("" if none); only `string()` uses it.
    """

    value: Decimal
    fmt: str = DECIMAL_SI
    text: str = field(default="", compare=False, repr=False)

    @staticmethod
    def parse(raw: Any) -> Qty:
        """Like Go's ParseQuantity (what JSON decoding of a Quantity does); ValueError if invalid."""
        if isinstance(raw, Qty):
            return raw
        text = raw.strip() if isinstance(raw, str) else str(raw)
        if text == "0":
            return Qty(Decimal(0), DECIMAL_SI, text)
        v = parse_quantity(text)
        m = _SUFFIX.search(text)
        suffix = m.group(1) if m and m.group(1) else ""
        if suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            fmt = BINARY_SI
        elif suffix[:1] in ("e", "E") and len(suffix) > 1:
            fmt = DECIMAL_EXPONENT
        else:
            fmt = DECIMAL_SI
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
        return Qty(v, fmt, text if _keeps_string(text) else "")

    @staticmethod
    def from_int(v: int, fmt: str) -> Qty:
        return Qty(Decimal(v), fmt)

    @staticmethod
    def from_milli(v: int, fmt: str) -> Qty:
        return Qty(_EXACT.scaleb(Decimal(v), -3), fmt)

    def __add__(self, other: Qty) -> Qty:
        return Qty(_EXACT.add(self.value, other.value), self.fmt)

    def __sub__(self, other: Qty) -> Qty:
        return Qty(_EXACT.subtract(self.value, other.value), self.fmt)

    def cmp(self, other: Qty) -> int:
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
