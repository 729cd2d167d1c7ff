"""Kubernetes resource quantities as exact Decimals.

Grammar of apimachinery's `resource.ParseQuantity`:

    <quantity> ::= <sign>? <number> <suffix>?
    <number>   ::= <digits> | <digits>.<digits>? | .<digits>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | k | M | G | T | P | E | (e|E) <sign>? <digits>

Values are kept exact: the API server has already canonicalised what it stores (it rounds up to
nano precision on write), so objects we read need no further rounding.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, ROUND_FLOOR, Context, Decimal

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "Quantity",
    "as_int64",
    "compare_quantities",
    "milli_value",
    "parse_quantity",
    "value",
]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

# What callers may hand us: strings from the API, ints/floats/Decimals from hand-written dicts.
Quantity = str | int | float | Decimal

# The default context rounds to 28 digits; quantities must stay exact ("1.5Ei", long mantissas).
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_RE = re.compile(
    r"(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"  # [0-9], not \d: \d also matches non-ASCII digits
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


def parse_quantity(quantity: Quantity) -> Decimal:
    """Exact value of a quantity; raises ValueError for anything ParseQuantity would reject."""
    if isinstance(quantity, bool):  # bool is an int subclass; never a valid quantity
        raise ValueError(f"invalid quantity: {quantity!r}")
    if isinstance(quantity, Decimal):
        if not quantity.is_finite():
            raise ValueError(f"invalid quantity: {quantity!r}")
        return quantity
    if isinstance(quantity, int):
        return Decimal(quantity)
    if isinstance(quantity, float):
        # repr() gives the shortest string that round-trips, i.e. what a YAML author wrote.
        return parse_quantity(repr(quantity))
    # fullmatch, not `$`: `$` would accept a trailing newline.
    m = _RE.fullmatch(quantity)
    if m is None:
        raise ValueError(f"invalid quantity: {quantity!r}")
    number = Decimal(m["num"])
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        return _EXACT.multiply(number, Decimal(1024 ** _BINARY[suffix]))
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:])  # e<n> / E<n>
    try:
        return _EXACT.scaleb(number, exponent)
    except ArithmeticError as exc:  # exponent beyond what Decimal can hold; upstream rejects it too
        raise ValueError(f"invalid quantity: {quantity!r}") from exc


def as_int64(quantity: Quantity) -> int | None:
    """The value if it is an integer that fits int64, else None (upstream `Quantity.AsInt64`).

    Upstream's AsInt64 also fails for non-canonical spellings such as "2000m"; the API server
    canonicalises stored quantities ("2"), so judging the value is what it sees in practice.
    """
    v = parse_quantity(quantity)
    # Range first: int() of "1e999999999" would build a gigantic integer.
    if not INT64_MIN <= v <= INT64_MAX or v != v.to_integral_value(context=_EXACT):
        return None
    return int(v)


def value(quantity: Quantity) -> int:
    """`Quantity.Value()`: rounded up, away from zero, to a whole number (scalar resources).

    Saturates at the int64 bounds, as upstream caps every parsed quantity at 2^63-1.
    """
    v = parse_quantity(quantity)
    if v >= INT64_MAX:
        return INT64_MAX
    if v <= INT64_MIN:
        return INT64_MIN
    return int(v.to_integral_value(rounding=ROUND_CEILING if v >= 0 else ROUND_FLOOR, context=_EXACT))


def milli_value(quantity: Quantity) -> int:
    """`Quantity.MilliValue()`: thousandths, rounded up away from zero (what the scheduler uses for cpu)."""
    return value(_EXACT.scaleb(parse_quantity(quantity), 3))


def compare_quantities(a: Quantity, b: Quantity) -> int:
    """-1, 0 or 1 by value, whatever the spelling ("1Ki" == "1024" == "1.024k")."""
    x, y = parse_quantity(a), parse_quantity(b)
    return (x > y) - (x < y)
