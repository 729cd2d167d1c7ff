"""draxr.core.quantity: exact parsing, int64 conversion, rounding and comparison.

Expected values are computed from first principles (powers of 1000/1024, Fractions), never
taken from the code under test.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.quantity import (
    INT64_MAX,
    INT64_MIN,
    as_int64,
    compare_quantities,
    milli_value,
    parse_quantity,
    value,
)

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
SUFFIXES = {**{k: Fraction(v) for k, v in BINARY.items()}, **DECIMAL}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", Fraction(0)),
        ("1", Fraction(1)),
        ("+2", Fraction(2)),
        ("-3", Fraction(-3)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(1024**2)),
        ("1Gi", Fraction(1024**3)),
        ("1Ti", Fraction(1024**4)),
        ("1Pi", Fraction(1024**5)),
        ("1Ei", Fraction(1024**6)),
        ("1.5Gi", Fraction(3, 2) * 1024**3),
        ("1n", Fraction(1, 10**9)),
        ("1u", Fraction(1, 10**6)),
        ("100m", Fraction(1, 10)),
        ("1k", Fraction(1000)),
        ("2M", Fraction(2 * 10**6)),
        ("3G", Fraction(3 * 10**9)),
        ("4T", Fraction(4 * 10**12)),
        ("5P", Fraction(5 * 10**15)),
        ("1E", Fraction(10**18)),  # E alone is exa, not an exponent
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e+3", Fraction(1000)),
        ("1e-3", Fraction(1, 1000)),
        ("12e0", Fraction(12)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),  # upstream grammar allows a trailing dot
        ("0.000000001", Fraction(1, 10**9)),
        ("007", Fraction(7)),
    ],
)
def test_parse_valid(text: str, expected: Fraction) -> None:
    assert Fraction(parse_quantity(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1\n",  # `$` would have accepted this
        "1K",  # upstream has only lower-case k
        "1ki",
        "1Kb",
        "Ki",
        "1e",
        "1e1.5",
        "1.2.3",
        "--1",
        "+-1",
        "abc",
        "1Mi1",
        "0x10",
        "1_000",
        "\u0663",  # ARABIC-INDIC DIGIT THREE: \d would match it
        "inf",
        "NaN",
        ".",
        "+",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


def test_parse_rejects_unrepresentable_exponent() -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity("1e99999999999999999999")


@pytest.mark.parametrize("text", ["1e9223372036854775808", "1e-9223372036854775809"])
def test_parse_rejects_exponents_beyond_int64(text: str) -> None:
    # ParseQuantity reads the exponent with strconv.ParseInt(…, 10, 64): ErrSuffix beyond int64
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1e4294967296", "1"),  # 2^32 -> 0
        ("2e4294967299", "2000"),  # 2^32 + 3 -> 3
        ("1e9223372036854775807", "0.1"),  # 2^63 - 1 -> -1
        ("1e-9223372036854775808", "1"),  # -2^63 -> 0
        ("1e2147483647", "1e2147483647"),  # int32 bounds: as written
        ("1e-2147483648", "1e-2147483648"),
    ],
)
def test_parse_truncates_the_exponent_to_int32_like_go(text: str, expected: str) -> None:
    # Go: int32(parsed). The API server keeps such spellings ("1e4294967296" is stored as
    # written, apimachinery v0.37.2 reads it as 1), so objects read can hold them.
    assert parse_quantity(text) == Decimal(expected)  # Decimal ==: exact, without building 10**2147483647


@pytest.mark.parametrize("bad", [True, False, Decimal("NaN"), Decimal("Infinity"), float("inf"), float("nan")])
def test_parse_invalid_non_strings(bad: object) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(bad)  # type: ignore[arg-type]


def test_parse_numbers_from_hand_written_dicts() -> None:
    assert parse_quantity(2) == 2
    assert parse_quantity(0.5) == Decimal("0.5")
    assert parse_quantity(0.1) == Decimal("0.1")  # the written value, not the binary float
    assert parse_quantity(Decimal("1.25")) == Decimal("1.25")


def test_parse_is_exact_beyond_default_decimal_precision() -> None:
    # 35 significant digits: the default 28-digit context would round this.
    text = "1.2345678901234567890123456789012345Ei"
    assert Fraction(parse_quantity(text)) == Fraction("1.2345678901234567890123456789012345") * 2**60


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1", 1),
        ("1k", 1000),
        ("1Ki", 1024),
        ("2", 2),
        ("2000m", 2),  # by value; upstream's AsInt64 would refuse this non-canonical spelling
        ("9223372036854775807", INT64_MAX),
        ("-9223372036854775808", INT64_MIN),
        ("1.5", None),
        ("100m", None),
        ("1n", None),
        ("9223372036854775808", None),
        ("8Ei", None),  # 2^63
        ("10E", None),
        ("1e999999999", None),  # must not build a gigantic int
    ],
)
def test_as_int64(text: str, expected: int | None) -> None:
    assert as_int64(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1", 1),
        ("100m", 1),
        ("1.5", 2),
        ("1.000000001", 2),
        ("-1.5", -2),  # away from zero
        ("1Ki", 1024),
        ("1e30", INT64_MAX),  # saturates like upstream's capped quantity
        ("-1e30", INT64_MIN),
    ],
)
def test_value_rounds_up_away_from_zero(text: str, expected: int) -> None:
    assert value(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1000), ("100m", 100), ("0.5m", 1), ("1n", 1), ("1.5", 1500), ("-0.5m", -1), ("250m", 250)],
)
def test_milli_value(text: str, expected: int) -> None:
    assert milli_value(text) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("1Ki", "1024", 0),
        ("1.024k", "1024", 0),
        ("1k", "1Ki", -1),
        ("1Gi", "1G", 1),
        ("100m", "0.1", 0),
        ("1e3", "1k", 0),
        ("-1", "0", -1),
        (2, "2000m", 0),
    ],
)
def test_compare(a: str | int, b: str, expected: int) -> None:
    assert compare_quantities(a, b) == expected
    assert compare_quantities(b, a) == -expected


# --------------------------------------------------------------------------- properties

suffixes = st.sampled_from(sorted(SUFFIXES))
mantissas = st.integers(min_value=-(10**30), max_value=10**30)


@given(mantissas, suffixes)
def test_prop_integer_with_suffix(n: int, suffix: str) -> None:
    assert Fraction(parse_quantity(f"{n}{suffix}")) == n * SUFFIXES[suffix]


@given(st.integers(min_value=0, max_value=10**40), st.integers(min_value=0, max_value=40), suffixes)
def test_prop_decimal_fraction_is_exact(digits: int, places: int, suffix: str) -> None:
    text = str(digits).rjust(places + 1, "0")
    text = f"{text[: len(text) - places]}.{text[len(text) - places :]}" if places else text
    assert Fraction(parse_quantity(text + suffix)) == Fraction(digits, 10**places) * SUFFIXES[suffix]


@given(st.integers(min_value=-(10**25), max_value=10**25), st.integers(min_value=-30, max_value=30))
def test_prop_decimal_exponent(n: int, exp: int) -> None:
    assert Fraction(parse_quantity(f"{n}e{exp}")) == n * Fraction(10) ** exp


@given(mantissas, suffixes, mantissas, suffixes)
def test_prop_compare_matches_exact_arithmetic(n1: int, s1: str, n2: int, s2: str) -> None:
    x, y = n1 * SUFFIXES[s1], n2 * SUFFIXES[s2]
    got = compare_quantities(f"{n1}{s1}", f"{n2}{s2}")
    assert got == (x > y) - (x < y)
    assert compare_quantities(f"{n2}{s2}", f"{n1}{s1}") == -got


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_prop_as_int64_range(n: int) -> None:
    assert as_int64(str(n)) == (n if INT64_MIN <= n <= INT64_MAX else None)


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(min_value=1, max_value=9))
def test_prop_value_is_ceiling_away_from_zero(n: int, places: int) -> None:
    exact = Fraction(n, 10**places)
    expected = math.ceil(exact) if exact >= 0 else math.floor(exact)
    assert value(f"{n}e-{places}") == expected
    milli = exact * 1000
    assert milli_value(f"{n}e-{places}") == (math.ceil(milli) if milli >= 0 else math.floor(milli))
    assert as_int64(f"{n}e-{places}") == (int(exact) if exact.denominator == 1 else None)


@given(st.text(max_size=12))
def test_prop_arbitrary_text_parses_or_raises_value_error(text: str) -> None:
    try:
        result = parse_quantity(text)
    except ValueError:
        return
    assert result.is_finite()
