"""Quantities as the allocator needs them: value, Go format, String(), Value() and MilliValue().

Expected values were printed by apimachinery v0.37.2 (`resource.ParseQuantity`, then `String()`
after an Add, `Format`, `Value()`, `MilliValue()`).
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.quantity import (
    ERR_FORMAT,
    ERR_NUMERIC,
    ERR_SUFFIX,
    Quantity,
    QuantityError,
    parse_go_quantity,
    parse_quantity,
)

GO = [
    ("1Gi", "1Gi", "BinarySI", 1073741824, 1073741824000),
    ("1536Mi", "1536Mi", "BinarySI", 1610612736, 1610612736000),
    ("0.5Gi", "512Mi", "BinarySI", 536870912, 536870912000),
    ("1.5Gi", "1536Mi", "BinarySI", 1610612736, 1610612736000),
    ("100m", "100m", "DecimalSI", 1, 100),
    ("1000m", "1", "DecimalSI", 1, 1000),
    ("1k", "1k", "DecimalSI", 1000, 1000000),
    ("1000", "1k", "DecimalSI", 1000, 1000000),
    ("1e3", "1e3", "DecimalExponent", 1000, 1000000),
    ("1E3", "1e3", "DecimalExponent", 1000, 1000000),
    ("1.5e3", "1500", "DecimalExponent", 1500, 1500000),
    ("0.1", "100m", "DecimalSI", 1, 100),
    ("1.000", "1", "DecimalSI", 1, 1000),
    ("1024", "1024", "DecimalSI", 1024, 1024000),
    ("1025", "1025", "DecimalSI", 1025, 1025000),
    ("2048Ki", "2Mi", "BinarySI", 2097152, 2097152000),
    ("1Ki", "1Ki", "BinarySI", 1024, 1024000),
    ("0.0000000001", "1n", "DecimalSI", 1, 1),
    ("1n", "1n", "DecimalSI", 1, 1),
    ("1u", "1u", "DecimalSI", 1, 1),
    ("12345678", "12345678", "DecimalSI", 12345678, 12345678000),
    ("1e-3", "1e-3", "DecimalExponent", 1, 1),
    ("5e2", "500", "DecimalExponent", 500, 500000),
    ("-1Gi", "-1Gi", "BinarySI", -1073741824, -1073741824000),
    ("-100m", "-100m", "DecimalSI", -1, -100),
    ("1.5", "1500m", "DecimalSI", 2, 1500),
    ("1.25k", "1250", "DecimalSI", 1250, 1250000),
    ("1000000Gi", "1000000Gi", "BinarySI", 1073741824000000, 1073741824000000000),
    ("8Ei", "9223372036854775807", "BinarySI", 9223372036854775807, None),
    ("1P", "1P", "DecimalSI", 1000000000000000, 1000000000000000000),
    ("1E", "1E", "DecimalSI", 1000000000000000000, None),
    ("1500m", "1500m", "DecimalSI", 2, 1500),
    ("0", "0", "DecimalSI", 0, 0),
    ("0Ki", "0", "BinarySI", 0, 0),
    ("3e0", "3", "DecimalExponent", 3, 3000),
    ("2.5e-1", "250e-3", "DecimalExponent", 1, 250),
    ("1e4294967296", "1", "DecimalExponent", 1, 1000),  # Go truncates the exponent with int32()
    ("1e9223372036854775807", "100e-3", "DecimalExponent", 1, 100),
    ("0.5Pi", "512Ti", "BinarySI", 562949953421312, 562949953421312000),
]


@pytest.mark.parametrize(("text", "canonical", "fmt", "value", "milli"), GO)
def test_like_apimachinery(text: str, canonical: str, fmt: str, value: int, milli: int | None) -> None:
    q = Quantity.parse(text)
    assert q.canonical() == canonical
    assert q.fmt == fmt
    assert q.int_value() == value
    if milli is not None:
        assert q.milli_value() == milli


@pytest.mark.parametrize("text", ["1Gi", "100m", "1.5", "12345678", "2.5e-1"])
def test_value_agrees_with_core_quantity(text: str) -> None:
    assert Quantity.parse(text).value == parse_quantity(text)


def test_arithmetic_keeps_receiver_format() -> None:
    q = Quantity.parse("1Gi") + Quantity.parse("512Mi")
    assert q.canonical() == "1536Mi"
    assert (Quantity.parse("1") - Quantity.parse("1")).canonical() == "0"
    assert Quantity.parse("2Gi").cmp(Quantity.parse("2048Mi")) == 0


@pytest.mark.parametrize("text", ["", "1x", "Gi", "1.2.3"])
def test_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid"):
        Quantity.parse(text)


# apimachinery v0.37.2 ParseQuantity: (text, value), or (text, error) where it fails.
GO_PARSE = [
    ("Gi", "0"), ("Ti", "0"), ("+", "0"), (".", "0"), ("-.", "0"), ("e-9", "0"), ("m", "0"),
    ("Pi", ERR_NUMERIC), ("Ei", ERR_NUMERIC), ("+.Ei", ERR_NUMERIC), ("e-10", ERR_NUMERIC),
    ("1e9223372036854775808", ERR_SUFFIX), ("1ki", ERR_SUFFIX), (" 1", ERR_FORMAT), ("", ERR_FORMAT),
    ("1e-2147483649", "1e2147483647"), ("-83e-2147483649", "-83e2147483647"),
    ("-45141102489088085293.6663927213e9223372036854775807", "-4514110248908808529.366639273"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "expected"), GO_PARSE)
def test_parse_go_quantity_like_apimachinery(text: str, expected: str) -> None:
    if expected in (ERR_NUMERIC, ERR_SUFFIX, ERR_FORMAT):
        with pytest.raises(QuantityError, match=f"^{re.escape(expected)}$"):
            parse_go_quantity(text)
    else:
        assert parse_go_quantity(text).value == Decimal(expected)


@pytest.mark.parametrize("text", ["Gi", "+", ".", "-.", "e-9", "m", "  Ki "])
def test_allocator_needs_a_digit_where_go_reads_zero(text: str) -> None:
    # The API server stores these as "0", so a slice or claim read from it never holds them.
    assert parse_go_quantity(text.strip()).value == 0
    with pytest.raises(ValueError, match="invalid quantity"):
        Quantity.parse(text)


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP ", max_size=10))
def test_allocator_reads_json_like_go_apart_from_the_digit_rule(text: str) -> None:
    # Quantity.parse is UnmarshalJSON (spaces trimmed, then ParseQuantity) for numbers with a digit.
    stripped = text.strip()
    number = re.match(r"[+-]?[0-9]*(\.[0-9]*)?", stripped)
    has_digit = number is not None and any(c.isdigit() for c in number.group(0))
    try:
        go: Quantity | None = parse_go_quantity(stripped)
    except ValueError:
        go = None
    if go is None or not has_digit:
        with pytest.raises(ValueError, match="invalid quantity"):
            Quantity.parse(text)
        return
    q = Quantity.parse(text)
    assert (q.value, q.fmt, q.string()) == (go.value, go.fmt, go.string())


# ParseQuantity keeps the caller's spelling when it is already canonical (its int64 fast path:
# BinarySI digits not a multiple of 8; otherwise a scale that is a multiple of 3 and digits that
# neither start with 0 nor end in 000), and String()/MarshalJSON print it. Printed by
# apimachinery v0.37.2: (text, json.Marshal(ParseQuantity(text))).
GO_STRING = [
    ("2e0", "2e0"), ("2E0", "2E0"), ("1E3", "1E3"), ("+2", "+2"), ("01", "01"), ("2.", "2."),
    ("1.500", "1.500"), ("2e+0", "2e+0"), ("1.G", "1.G"), ("1E", "1E"), ("7Ki", "7Ki"), ("01Ki", "01Ki"),
    ("1025Ki", "1025Ki"), ("1e-3", "1e-3"), ("-2", "-2"), ("3e0", "3e0"), ("0010", "0010"),
    ("1234567890123456789", "1234567890123456789"), ("123456789012345678", "123456789012345678"),
    ("2.0", "2"), ("2.000", "2"), ("1000", "1k"), ("0.5", "500m"), (".5", "500m"), ("1e-10", "1e-9"),
    ("8Ki", "8Ki"), ("1024Ki", "1Mi"), ("1.5Gi", "1536Mi"), ("0.5Gi", "512Mi"), ("100m", "100m"),
    ("1000m", "1"), ("1.5e3", "1500"), ("-0", "0"), ("0", "0"), ("1e4294967296", "1e4294967296"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "printed"), GO_STRING)
def test_string_keeps_canonical_spelling_like_parse_quantity(text: str, printed: str) -> None:
    assert Quantity.parse(text).string() == printed
    assert str(Quantity.parse(text)) == printed


def test_computed_quantities_print_canonically() -> None:
    q = Quantity.parse("2e0")
    assert q.text == "2e0"
    assert q.canonical() == "2"
    assert (q + Quantity.parse("0")).string() == "2"  # arithmetic drops the spelling, like Go's Add
    assert Quantity.from_int(2, q.fmt).string() == "2"
    # the spelling is not part of the value
    assert q == Quantity.parse("2E0")
    assert q.cmp(Quantity.parse("2")) == 0
