"""Which extended resources DRA serves: the DeviceClasses' names (explicit
``spec.extendedResourceName`` and the implicit ``deviceclass.resource.kubernetes.io/<class>``),
the ExtendedResourceMapping overrides, and whether kube-apiserver runs with DRAExtendedResource."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from draxr.core.mapping import ExtendedResourceMapping, OverrideMapping, build_mapping

GATE_RECHECK_SECONDS = 300.0  # extended resources as nodes' own after a dropped pod status, this long


class ExtendedResources:
    """``mapping`` is rebuilt from the full list on every change (the upstream incremental cache
    drops names on rename); ``on_change`` is told each time."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.classes: dict[str, Mapping[str, Any]] = {}  # DeviceClasses by name
        self.overrides: tuple[OverrideMapping, ...] = ()
        # False once kube-apiserver dropped a pod's status.extendedResourceClaimStatus (it runs
        # without DRAExtendedResource): no extended resource is served by DRA from then on.
        self.served = True
        self._off_at = 0.0
        self.mapping: ExtendedResourceMapping = build_mapping(())
        self._on_change = on_change

    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        self.classes[obj["metadata"]["name"]] = obj
        self._remap()

    def remove_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self._remap()

    def set_overrides(self, overrides: Iterable[OverrideMapping]) -> None:
        self.overrides = tuple(overrides)
        self._remap()

    def off(self, now: float) -> None:
        """kube-apiserver runs without DRAExtendedResource: every extended resource is a node's own
        (an empty mapping), as kube-scheduler runs with the gate off, so that a pod asking for one
        gets its "Insufficient" reason rather than a binding that cannot succeed. For
        GATE_RECHECK_SECONDS (``now``: a monotonic clock): the gate comes back with a restart of
        kube-apiserver, which draxr cannot see, so then the next pod's binding looks again."""
        self._off_at = now
        if self.served:
            self.served = False
            self._remap()

    def recheck(self, now: float) -> None:
        """Serve extended resources by DRA again once GATE_RECHECK_SECONDS have passed."""
        if not self.served and now - self._off_at >= GATE_RECHECK_SECONDS:
            self.served = True
            self._remap()

    def _remap(self) -> None:
        self.mapping = build_mapping(self.classes.values(), self.overrides) if self.served else build_mapping(())
        self._on_change()
