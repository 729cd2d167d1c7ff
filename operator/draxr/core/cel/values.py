"""How Kubernetes values reach cel-cpp.

cel-expr-python cannot pass opaque Python objects, so Quantity and Semver values are one-entry
maps `{"kubernetes.Quantity": <canonical decimal>}` and `{"kubernetes.Semver": <version without
build metadata>}`. The canonical forms make CEL's structural `==` agree with upstream (numeric
equality for quantities, precedence equality for versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal, InvalidOperation
from functools import lru_cache
from typing import Final

from draxr.core.semver import Semver

__all__ = ["QUANTITY_TAG", "SEMVER_TAG", "InvalidValue", "decimal_of", "tagged_quantity", "tagged_semver"]

QUANTITY_TAG: Final = "kubernetes.Quantity"
SEMVER_TAG: Final = "kubernetes.Semver"

# Exact for anything parsing can produce; rounding only where upstream rounds.
_EXACT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)


@dataclass(frozen=True, slots=True)
class InvalidValue:
    """An attribute/capacity value that cannot be given to CEL; evaluating any selector on the device fails."""

    reason: str


def _canonical_decimal(value: Decimal) -> str:
    """A string that is equal for equal values, so CEL's map equality is numeric equality."""
    if value == 0:
        return "0"  # also -0
    return str(value.normalize(_EXACT))


def tagged_quantity(value: Decimal) -> dict[str, str]:
    return {QUANTITY_TAG: _canonical_decimal(value)}


def tagged_semver(value: Semver) -> dict[str, str]:
    return {SEMVER_TAG: value.without_build()}


@lru_cache(maxsize=8192)
def decimal_of(canonical: str) -> Decimal:
    try:
        value = Decimal(canonical)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():
        raise ValueError(f"not a kubernetes.Quantity: {canonical!r}")
    return value
