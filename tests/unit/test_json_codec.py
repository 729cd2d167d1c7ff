"""core.json_codec: orjson with the standard library behind it for what orjson refuses."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core import json_codec

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(),  # (the API server's integers)
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_what_the_standard_library_writes_is_read_back_the_same(value: Any) -> None:
    assert json_codec.loads(json.dumps(value)) == value
    assert json_codec.loads(json.dumps(value).encode()) == value


@given(JSON_VALUES)
def test_what_it_writes_the_standard_library_reads_back_the_same(value: Any) -> None:
    assert json.loads(json_codec.dumps(value)) == value


def test_what_orjson_refuses_the_standard_library_reads() -> None:
    got = json_codec.loads(b'{"a": NaN, "b": [Infinity], "c": "\\ud800"}')
    assert math.isnan(got["a"])
    assert got["b"] == [math.inf]
    assert got["c"] == "\ud800"


def test_integers_beyond_64_bits_are_written_exactly() -> None:
    big = 2**70 + 1
    assert json_codec.dumps({"n": big}) == b'{"n":%d}' % big


def test_the_output_is_compact() -> None:
    claim = {"metadata": {"name": "c", "finalizers": ["resource.kubernetes.io/delete-protection"]}, "n": 1}
    assert json_codec.dumps(claim) == json.dumps(claim, separators=(",", ":")).encode()


def test_keys_that_are_not_strings_are_written_as_the_standard_library_writes_them() -> None:
    assert json_codec.dumps({1: "a"}) == b'{"1":"a"}'


@pytest.mark.parametrize("bad", [b"", b"{", b'{"a": }', b"\xff"])
def test_invalid_json_raises_a_value_error(bad: bytes) -> None:
    with pytest.raises((json.JSONDecodeError, UnicodeDecodeError)):
        json_codec.loads(bad)


def test_bytes_that_are_not_utf8_are_reported_as_such() -> None:
    with pytest.raises(UnicodeDecodeError, match="can't decode byte 0xff"):
        json_codec.loads(b'\xff{"a": 1}')
