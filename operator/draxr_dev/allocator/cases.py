"""Run allocator cases given as JSON, for differential testing against upstream Go.

Case (input), the same document a Go harness decodes into upstream types::

    {"name": str,
     "features": {"AdminAccess": true, ...},      # upstream Go field names; missing = false;
                                                  # no "features" at all: DEFAULT_FEATURES
     "node": <v1 Node>,
     "slices": [<v1 ResourceSlice>], "classes": [<v1 DeviceClass>],
     "claims": [<v1 ResourceClaim>],              # to allocate, in order
     "allocatedClaims": [<v1 ResourceClaim>]}     # their status.allocation forms the allocated state

Output::

    {"name": str, "outcome": "allocated" | "noFit" | "nodeFailure" | "fatal",
     "results": [<v1 AllocationResult>],          # only for "allocated"
     "error": str}                                # for nodeFailure / fatal (free text, not compared)

Random shareIDs are replaced by "SHARE" so outputs compare byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draxr.core.allocator.allocated_devices import allocated_state_from_claims
from draxr.core.allocator.allocator import Allocator
from draxr.core.allocator.features import DEFAULT_FEATURES, Features
from draxr.core.allocator.inventory import Inventory
from draxr.core.allocator.outcomes import Allocated, AllocationFatalError, NodeFailure

__all__ = ["SHARE_ID", "comparable", "run_case"]

SHARE_ID = "SHARE"


def run_case(case: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": case.get("name", "")}
    raw_features = case.get("features")
    # Like the Go harness: absent (or null) means kube-scheduler's defaults; a given object
    # is a Go struct literal, so names it leaves out are false.
    features = DEFAULT_FEATURES if raw_features is None else Features.from_go(dict(raw_features))
    try:
        inventory = Inventory(case.get("slices") or (), case.get("classes") or ())
        state = allocated_state_from_claims(case.get("allocatedClaims") or (), features.consumable_capacity)
        allocator = Allocator(inventory, state, features, share_id=lambda: SHARE_ID)
        outcome = allocator.allocate(case.get("node") or {}, case.get("claims") or ())
    except AllocationFatalError as exc:
        out.update(outcome="fatal", error=str(exc))
        return out
    if isinstance(outcome, Allocated):
        out.update(outcome="allocated", results=list(outcome.results))
    elif isinstance(outcome, NodeFailure):
        out.update(outcome="nodeFailure", error=outcome.reason)
    else:
        out.update(outcome="noFit")
    return out


def comparable(output: Mapping[str, Any]) -> dict[str, Any]:
    """What must agree between implementations: outcome and results (error texts differ)."""
    return {"outcome": output.get("outcome"), "results": output.get("results") or []}
