"""Label selectors as apimachinery evaluates them (`metav1.LabelSelectorAsSelector`, `labels.Set`).

A `Selector` is a conjunction of requirements. Two special values matter to the scheduler: a nil
selector matches nothing (`labels.Nothing()`), an empty one `{}` matches everything
(`labels.Everything()`, and is `Empty()`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

Labels = Mapping[str, str]

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "in", "notin", "exists", "!"
    values: frozenset[str]

    def matches(self, labels: Labels) -> bool:
        if self.op == "=" or self.op == "in":
            v = labels.get(self.key)
            return v is not None and v in self.values
        if self.op == "notin":
            v = labels.get(self.key)
            return v is None or v not in self.values
        if self.op == "exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False  # labels.Nothing(): a nil LabelSelector

    @property
    def empty(self) -> bool:
        """`Selector.Empty()`: no requirement (Everything). Nothing is not empty."""
        return not self.nothing and not self.requirements

    def matches(self, labels: Labels) -> bool:
        if self.nothing:
            return False
        for r in self.requirements:  # noqa: SIM110 (a plain loop: no generator on the hot path)
            if not r.matches(labels):
                return False
        return True

    def add(self, requirements: Iterable[Requirement]) -> Selector:
        """`Selector.Add`: a conjunction with more requirements (Nothing stays Nothing)."""
        if self.nothing:
            return self
        return Selector((*self.requirements, *requirements))

    @classmethod
    def from_set(cls, labels: Labels) -> Selector:
        """`labels.Set(...).AsSelector()`: one equality per key (an empty set is Everything)."""
        return cls(tuple(Requirement(k, "=", frozenset((v,))) for k, v in sorted(labels.items())))

    @classmethod
    def from_api(cls, selector: Mapping[str, Any] | None) -> Selector:
        """`metav1.LabelSelectorAsSelector`; raises ValueError where it returns an error."""
        if selector is None:
            return NOTHING
        reqs: list[Requirement] = []
        for k, v in (selector.get("matchLabels") or {}).items():
            reqs.append(Requirement(sys.intern(str(k)), "=", frozenset((str(v),))))
        for expr in selector.get("matchExpressions") or ():
            key, op = str(expr.get("key") or ""), str(expr.get("operator") or "")
            values = [str(v) for v in expr.get("values") or ()]
            if op not in _OPERATORS:
                raise ValueError(f"{op!r} is not a valid label selector operator")
            if op in ("In", "NotIn") and not values:
                raise ValueError(f"for 'in', 'notin' operators, values set can't be empty (key {key!r})")
            if op in ("Exists", "DoesNotExist") and values:
                raise ValueError(f"values set must be empty for exists and does not exist (key {key!r})")
            reqs.append(Requirement(sys.intern(key), _OPERATORS[op], frozenset(values)))
        return cls(tuple(reqs))


NOTHING = Selector(nothing=True)
EVERYTHING = Selector()


def service_selector(selector: Mapping[str, Any] | None) -> Selector:
    """A Service's or ReplicationController's `spec.selector` map; nil matches nothing."""
    if selector is None:
        return NOTHING
    return Selector.from_set({str(k): str(v) for k, v in selector.items()})


class LabelInterner:
    """One shared, immutable mapping per distinct label set: the pods of one ReplicaSet or Job carry
    the same labels, and 40,000 bound pods must not hold 40,000 copies. Bounded: when full it starts
    over (pods keep the mappings they have; only new ones stop sharing with old ones)."""

    def __init__(self, limit: int = 16384) -> None:
        self._shared: dict[frozenset[tuple[str, str]], Mapping[str, str]] = {}
        self._limit = limit

    def get(self, labels: Mapping[str, Any] | None) -> Mapping[str, str]:
        if not labels:
            return NO_LABELS
        key = frozenset((sys.intern(str(k)), sys.intern(str(v))) for k, v in labels.items())
        shared = self._shared.get(key)
        if shared is None:
            if len(self._shared) >= self._limit:
                self._shared.clear()
            shared = self._shared[key] = MappingProxyType(dict(key))
        return shared

    def __len__(self) -> int:
        return len(self._shared)


NO_LABELS: Mapping[str, str] = MappingProxyType({})
