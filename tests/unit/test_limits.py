"""draxr.core.limits: strconv.ParseInt(s, 10, 64) for quantity exponents and node selector Gt/Lt."""

from __future__ import annotations

import pytest

from draxr.core.limits import INT64_MAX, INT64_MIN, parse_int64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("+5", 5),
        ("-0", 0),
        ("007", 7),
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775808", None),  # ErrRange
        ("-9223372036854775809", None),
        ("", None),
        ("+", None),
        ("5\n", None),  # `$` would have accepted this, and int() strips it
        (" 5", None),
        ("1_000", None),  # underscores only with base 0
        ("0x10", None),
        ("\u0663", None),  # ARABIC-INDIC DIGIT THREE: int() accepts it, Go does not
        ("+-1", None),
    ],
)
def test_parse_int64_like_strconv(text: str, expected: int | None) -> None:
    assert parse_int64(text) == expected


def test_int64_bounds() -> None:
    assert (INT64_MIN, INT64_MAX) == (-(2**63), 2**63 - 1)
