"""Allocator feature switches, mirroring upstream `structured.Features` (k8s.io/dynamic-resource-allocation v0.37.2).

Defaults are what kube-scheduler 1.37.2 passes with default feature gates (`AllocatorFeatures` in
pkg/scheduler/framework/plugins/dynamicresources, gate defaults in pkg/features/kube_features.go):
DRAAdminAccess (GA), DRAPrioritizedList (GA), DRAPartitionableDevices (beta), DRADeviceTaints (GA),
DRADeviceBindingConditions + DRAResourceClaimDeviceStatus (beta + GA), DRAConsumableCapacity (beta)
are on; DRAFractionalCapacityRange is beta but only on with --min-compatibility-version >= 1.37
(the default is 1.36), and the remaining alpha gates are off. With that set upstream picks the
"incubating" variant, which is the one this package ports.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["DEFAULT_FEATURES", "INCUBATING_SUPPORTED", "Features", "UnsupportedFeaturesError"]


@dataclass(frozen=True, slots=True)
class Features:
    admin_access: bool = True
    compatibility_groups: bool = False
    consumable_capacity: bool = True
    derived_attributes: bool = False
    device_binding_and_status: bool = True
    device_taints: bool = True
    fractional_capacity_range: bool = False
    list_type_attributes: bool = False
    optional_node_operations: bool = False
    partitionable_devices: bool = True
    prioritized_list: bool = True

    def enabled(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self) if getattr(self, f.name))

    @staticmethod
    def from_go(names: dict[str, bool]) -> Features:
        """From upstream's Go field names (`{"AdminAccess": true, ...}`); unknown names are errors."""
        by_go = {_go_name(f.name): f.name for f in fields(Features)}
        unknown = set(names) - set(by_go)
        if unknown:
            raise ValueError(f"unknown allocator features: {sorted(unknown)}")
        # Missing names mean false, as in a Go struct literal.
        return Features(**{py: bool(names.get(go, False)) for go, py in by_go.items()})


def _go_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


DEFAULT_FEATURES = Features()

# incubating.SupportedFeatures in v0.37.2. A feature outside this set makes upstream pick the
# "experimental" variant, which is not ported.
INCUBATING_SUPPORTED = frozenset(
    {
        "admin_access",
        "prioritized_list",
        "partitionable_devices",
        "device_taints",
        "device_binding_and_status",
        "consumable_capacity",
        "fractional_capacity_range",
    }
)


# Feature sets check_supported accepted (a handful per process).
_CHECKED: set[Features] = set()


class UnsupportedFeaturesError(ValueError):
    """The features need upstream's experimental allocator variant, which this port does not implement."""


def check_supported(features: Features) -> None:
    """Reject features that need the experimental variant.

    Feature sets small enough for upstream's "stable" variant (only reachable by switching off
    DRAConsumableCapacity and DRADeviceBindingConditions/DRAResourceClaimDeviceStatus) are run
    with the incubating code: stable visits pools in random map order, so upstream itself gives
    no reproducible answer there, and it lacks distinctAttribute and capacity checks.
    """
    if features in _CHECKED:
        return  # once per feature set: allocators are made per scheduling cycle
    extra = features.enabled() - INCUBATING_SUPPORTED
    if extra:
        raise UnsupportedFeaturesError(
            f"features {sorted(extra)} need upstream's experimental allocator, which draxr does not implement; "
            "disable them"
        )
    _CHECKED.add(features)
