"""The three outcomes of allocating on one node, as upstream distinguishes them.

* success: `Allocated` with one result per claim;
* no fit on this node: `NoFit` (upstream returns nil, nil), not an error;
* failure for this node only: `NodeFailure` (upstream: an error wrapping ErrFailedAllocationOnNode),
  e.g. invalid resource pools; other nodes may still work;
* fatal for the pod's whole scheduling attempt: `AllocationFatalError` is raised (any other upstream
  error: CEL runtime errors, unknown DeviceClass, more than 32 devices in a claim, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Allocated", "AllocationFatalError", "FatalKind", "NoFit", "NodeFailure"]


class FatalKind:
    """Coarse categories of fatal errors, for metrics and for the differential harness."""

    CEL_COMPILE = "cel-compile"
    CEL_RUNTIME = "cel-runtime"
    CLASS_NOT_FOUND = "class-not-found"
    TOO_MANY_DEVICES = "too-many-devices"
    INCOMPLETE_POOL = "incomplete-pool"
    INVALID_POOL = "invalid-pool"
    FEATURE_DISABLED = "feature-disabled"
    INVALID_REQUEST = "invalid-request"
    INVALID_NODE_SELECTOR = "invalid-node-selector"
    CONSTRAINT = "constraint"
    CAPACITY = "capacity"
    INVALID_INPUT = "invalid-input"


class AllocationFatalError(Exception):
    """Allocation must stop for the whole pod (upstream: any error that does not wrap ErrFailedAllocationOnNode).

    The message says which object is wrong (claim, class or slice) so that a person can fix it.
    """

    def __init__(self, message: str, kind: str = FatalKind.INVALID_INPUT) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class NoFit:
    """The claims cannot be allocated on this node right now (upstream: nil result, nil error)."""

    reason: str = "cannot allocate all claims"

    ok = False


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Allocation failed for this node only (upstream: error wrapping ErrFailedAllocationOnNode)."""

    reason: str

    ok = False


@dataclass(frozen=True, slots=True)
class Allocated:
    """One `AllocationResult` (v1 JSON shape) per claim, in claim order."""

    results: tuple[dict[str, Any], ...]

    ok = True
