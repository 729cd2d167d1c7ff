"""PodDisruptionBudgets as preemption reads them (filterPodsWithPDBViolation): a namespace, a
selector, ``status.disruptionsAllowed`` and the names in ``status.disruptedPods``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from draxr.core.labels import Selector


@dataclass(frozen=True, slots=True)
class Budget:
    """``selector`` None: the budget matches nothing (a nil or empty selector, or one that does
    not parse: upstream skips it)."""

    namespace: str
    selector: Selector | None
    allowed: int  # status.disruptionsAllowed
    disrupted: frozenset[str] = frozenset()  # status.disruptedPods' names

    @classmethod
    def from_api(cls, pdb: Mapping[str, Any]) -> Budget:
        meta, spec, status = pdb.get("metadata") or {}, pdb.get("spec") or {}, pdb.get("status") or {}
        try:
            selector: Selector | None = Selector.from_api(spec.get("selector"))
        except ValueError:
            selector = None
        if selector is not None and (selector.empty or selector.nothing):
            selector = None
        return cls(
            namespace=str(meta.get("namespace") or ""),
            selector=selector,
            allowed=int(status.get("disruptionsAllowed") or 0),
            disrupted=frozenset(status.get("disruptedPods") or ()),
        )
