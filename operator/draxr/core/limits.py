"""Bounds shared by the core, each defined once.

* Go's integer bounds, and `strconv.ParseInt(s, 10, 64)`, which quantity suffixes and node
  selector `Gt`/`Lt` values are parsed with upstream.
* The scheduler framework's node score range (framework.MaxNodeScore).
* resource.k8s.io/v1 API limits (k8s.io/api resource/v1 types.go, v0.37.2): objects beyond them
  are rejected by the API server, so a claim draxr writes must stay within them.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "CEL_SELECTOR_EXPRESSION_MAX_LENGTH",
    "DEVICE_REQUESTS_MAX_SIZE",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_NODE_SCORE",
    "RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE",
    "UINT64_MAX",
    "parse_int64",
]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1

# framework.MaxNodeScore: every score plugin's normalized score is in [0, MAX_NODE_SCORE].
MAX_NODE_SCORE: Final = 100

# resourceapi.AllocationResultsMaxSize: devices in one claim's allocation.
ALLOCATION_RESULTS_MAX_SIZE: Final = 32
# resourceapi.DeviceRequestsMaxSize (= AllocationResultsMaxSize): requests in one claim.
DEVICE_REQUESTS_MAX_SIZE: Final = ALLOCATION_RESULTS_MAX_SIZE
# resourceapi.CELSelectorExpressionMaxLength: characters in one CEL selector.
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
# resourceapi.ResourceSliceMaxAttributeValuesPerDevice: values of one list attribute.
RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48

_DECIMAL_INT: Final = re.compile(r"[+-]?[0-9]+")  # [0-9], not \d: \d also matches non-ASCII digits


def parse_int64(text: str) -> int | None:
    """`strconv.ParseInt(text, 10, 64)`: the value, or None where Go returns an error."""
    if _DECIMAL_INT.fullmatch(text) is None:  # fullmatch, not `$`: `$` would accept a trailing newline
        return None
    v = int(text)
    return v if INT64_MIN <= v <= INT64_MAX else None
