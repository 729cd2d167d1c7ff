"""In-process port of the upstream DRA structured allocator (k8s.io/dynamic-resource-allocation v0.37.2,
"incubating" variant, the one kube-scheduler 1.37.2 uses with default feature gates).

Typical use, once per pod scheduling cycle::

    alloc = Allocator(inventory, tracker.snapshot(), features)
    for node in nodes:
        outcome = alloc.allocate(node, claims)   # Allocated | NoFit | NodeFailure
    # AllocationFatalError: stop trying nodes, the pod (or one of its objects) is broken.
"""

from draxr.core.allocator.allocated_devices import AllocatedState, AllocationTracker, allocated_state_from_claims
from draxr.core.allocator.allocator import Allocator, Stats
from draxr.core.allocator.features import DEFAULT_FEATURES, Features, UnsupportedFeaturesError
from draxr.core.allocator.inventory import Inventory
from draxr.core.allocator.outcomes import Allocated, AllocationFatalError, FatalKind, NodeFailure, NoFit
from draxr.core.allocator.pools import Pool, gather_pools
from draxr.core.limits import ALLOCATION_RESULTS_MAX_SIZE

__all__ = [
    "ALLOCATION_RESULTS_MAX_SIZE",
    "DEFAULT_FEATURES",
    "Allocated",
    "AllocatedState",
    "AllocationFatalError",
    "AllocationTracker",
    "Allocator",
    "FatalKind",
    "Features",
    "Inventory",
    "NoFit",
    "NodeFailure",
    "Pool",
    "Stats",
    "UnsupportedFeaturesError",
    "allocated_state_from_claims",
    "gather_pools",
]
