"""JSON through orjson: decoding the watch lines and list pages and encoding the kept claims were a
third of a resync's CPU with the standard library (bench/NOTEBOOK.md, "Scale").

orjson reads integers up to 64 bits exactly and larger ones as floats. The API server sends no
larger ones: its typed fields are Go integers of at most 64 bits, and it decodes the numbers of
custom resources into int64 or float64 before it writes them out again. What orjson refuses and
the standard library takes (NaN, Infinity, lone surrogates; in writing: larger integers,
non-string keys) goes through the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # The same error for invalid JSON, a value for what orjson only refuses. Bytes are UTF-8 (RFC
        # 8259): json.loads would guess an encoding and report bad UTF-8 as bad JSON.
        return json.loads(data.decode() if isinstance(data, bytes) else data)


def dumps(value: Any) -> bytes:
    """Compact JSON (no spaces), as ``json.dumps(value, separators=(",", ":"))`` encoded. A copy of
    orjson's result: its buffer is allocated with room to spare and shrunk in place, and kept
    claims held 4 KiB each that way instead of 1.7 (bench/state_memory.py)."""
    try:
        return memoryview(orjson.dumps(value)).tobytes()
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()
