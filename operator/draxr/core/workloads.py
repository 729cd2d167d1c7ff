"""The selectors of the objects that make a pod's default spreading selector (upstream's
helper.DefaultSelector): Services, and ReplicationControllers, ReplicaSets and StatefulSets. Only
their selectors are kept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from draxr.core.labels import Selector, service_selector


class WorkloadSelectors:
    def __init__(self) -> None:
        self._services: dict[str, dict[str, Selector]] = {}  # namespace -> name -> selector
        self._controllers: dict[tuple[str, str, str], tuple[str, Selector]] = {}  # (ns, kind, name)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """A Service, ReplicationController, ReplicaSet or StatefulSet (its ``kind`` set)."""
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        ns, name, kind = str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(obj.get("kind") or "")
        if kind == "Service":
            selector = spec.get("selector")
            if selector is None:
                self._services.get(ns, {}).pop(name, None)  # nil selects nothing
            else:
                self._services.setdefault(ns, {})[name] = service_selector(selector)
            return
        try:
            if kind == "ReplicationController":
                found = ("set", service_selector(spec.get("selector")))
            else:
                found = ("requirements", Selector.from_api(spec.get("selector")))
        except ValueError:
            self._controllers.pop((ns, kind, name), None)
            return
        self._controllers[(ns, kind, name)] = found

    def remove(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Service":
            self._services.get(namespace, {}).pop(name, None)
        else:
            self._controllers.pop((namespace, kind, name), None)

    def services(self, namespace: str) -> Iterable[Selector]:
        return (self._services.get(namespace) or {}).values()

    def controller_selector(self, namespace: str, kind: str, name: str) -> tuple[str, Selector] | None:
        return self._controllers.get((namespace, kind, name))
