"""Go's integer division and remainder, which truncate toward zero (Python's floor toward minus
infinity): the scores and capacities ported from upstream divide as Go does."""

from __future__ import annotations


def go_div(a: int, b: int) -> int:
    """``a / b`` of Go's int64 (truncated toward zero); b must not be 0."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def go_rem(a: int, b: int) -> int:
    """``a % b`` of Go (the sign of ``a``)."""
    return a - b * go_div(a, b)
