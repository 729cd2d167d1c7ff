"""The in-memory cluster view, fed by watch events, plus what scheduling cycles have assumed.

Everything the scheduler needs to decide without an API call: nodes, pod usage per node, the DRA
inventory (slices, classes), devices held by every claim (also those kube-scheduler made), the
name -> class mapping, and in-flight decisions (assumed pods and allocations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from draxr.core.allocator import AllocatedState, AllocationTracker, Inventory
from draxr.core.claims import special_claim_owner
from draxr.core.mapping import ExtendedResourceMapping, OverrideMapping, build_mapping
from draxr.core.quantity import milli_value, value
from draxr.core.requests import pod_requests

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Scoring pretends pods without cpu/memory requests use these (upstream DefaultMilliCPURequest /
# DefaultMemoryRequest), so that best-effort pods still spread.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024


def units(name: str, quantity: object) -> int:
    """The scheduler's integer view of a quantity: millicores for cpu, whole units for the rest
    (upstream Resource: MilliValue for cpu, Value otherwise)."""
    return milli_value(quantity) if name == "cpu" else value(quantity)  # type: ignore[arg-type]


def _rv(obj: Mapping[str, Any]) -> int | None:
    """resourceVersion as an int (etcd revision) for ordering; None if it is not numeric."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(rv) if rv is not None else None
    except ValueError:
        return None


def _newer_or_equal(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> bool:
    if old is None:
        return True
    a, b = _rv(new), _rv(old)
    return a is None or b is None or a >= b


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str]
    labels_key: frozenset[tuple[str, str]]  # hashable labels (pools with node selectors depend on them)
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: Mapping[str, int]  # see units()
    device_plugin_names: frozenset[str]  # extended resources with allocatable > 0
    raw: Mapping[str, Any]

    @classmethod
    def from_api(cls, node: Mapping[str, Any]) -> NodeInfo:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        alloc = {k: units(k, v) for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()}
        return cls(
            name=meta["name"],
            labels=dict(meta.get("labels") or {}),
            labels_key=frozenset((meta.get("labels") or {}).items()),
            taints=tuple(spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            allocatable=alloc,
            device_plugin_names=frozenset(k for k, v in alloc.items() if "/" in k and v > 0),
            raw=node,
        )


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    node_name: str
    phase: str
    scheduler_name: str
    priority: int
    created: str
    deleting: bool
    requests: Mapping[str, Decimal]  # exact effective pod requests
    units: Mapping[str, int]  # the same in scheduler units (see units()), non-zero only
    host_ports: frozenset[tuple[str, str, int]]
    raw: Mapping[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def claim_name(self) -> str:
        """status.extendedResourceClaimStatus.resourceClaimName, "" when unset."""
        ercs = (self.raw.get("status") or {}).get("extendedResourceClaimStatus") or {}
        return str(ercs.get("resourceClaimName") or "")

    @classmethod
    def from_api(cls, pod: Mapping[str, Any]) -> PodInfo:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        requests = pod_requests(pod)
        ports: set[tuple[str, str, int]] = set()
        for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
            for p in c.get("ports") or ():
                if p.get("hostPort"):
                    ports.add((p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", int(p["hostPort"])))
        return cls(
            uid=meta["uid"],
            namespace=meta.get("namespace", ""),
            name=meta["name"],
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            priority=int(spec.get("priority") or 0),
            created=meta.get("creationTimestamp") or "",
            deleting=bool(meta.get("deletionTimestamp")),
            requests=requests,
            units={k: u for k, v in requests.items() if (u := units(k, v))},
            host_ports=frozenset(ports),
            raw=pod,
        )


@dataclass
class NodeUsage:
    """Requests of the non-terminal pods on a node (bound, or assumed by a cycle)."""

    requested: dict[str, int] = field(default_factory=dict)
    pods: int = 0
    host_ports: dict[tuple[str, str, int], int] = field(default_factory=dict)
    # cpu/memory with upstream's non-zero defaults for pods that request none (scoring only).
    nonzero_milli_cpu: int = 0
    nonzero_memory: int = 0

    def apply(self, pod: PodInfo, sign: int) -> None:
        self.pods += sign
        self.nonzero_milli_cpu += sign * (pod.units.get("cpu") or DEFAULT_MILLI_CPU)
        self.nonzero_memory += sign * (pod.units.get("memory") or DEFAULT_MEMORY)
        for name, q in pod.units.items():
            self.requested[name] = self.requested.get(name, 0) + sign * q
        for port in pod.host_ports:
            self.host_ports[port] = self.host_ports.get(port, 0) + sign
            if self.host_ports[port] <= 0:
                del self.host_ports[port]


class ClusterState:
    """Not thread-safe: the shell mutates it from one event loop."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}  # by uid
        self.usage: dict[str, NodeUsage] = {}
        self.inventory = Inventory()
        self.tracker = AllocationTracker()
        self.claims: dict[str, Mapping[str, Any]] = {}  # "namespace/name" -> latest claim
        self.special_claims: dict[str, set[str]] = {}  # pod uid -> claim keys
        self.classes: dict[str, Mapping[str, Any]] = {}
        self.overrides: tuple[OverrideMapping, ...] = ()
        self.mapping: ExtendedResourceMapping = build_mapping(())
        self.assumed_nodes: dict[str, str] = {}  # pod uid -> node chosen but not yet bound
        # (node, requested devices per class) -> why the node can never fit them; valid while the
        # inventory (slices, classes) is unchanged. Lets placement skip such nodes for a dict lookup.
        self._static_no_fit: dict[tuple[str, frozenset[tuple[str, str]], frozenset[tuple[str, int]]], str] = {}
        self._static_no_fit_stamp: tuple[int, int] = (-1, -1)
        self.generation = 0  # bumped on every change that can make a pending pod schedulable

    # ---- nodes ---------------------------------------------------------------------------------
    def upsert_node(self, node: Mapping[str, Any]) -> None:
        info = NodeInfo.from_api(node)
        self.nodes[info.name] = info
        self.usage.setdefault(info.name, NodeUsage())
        self.generation += 1

    def remove_node(self, name: str) -> None:
        self.nodes.pop(name, None)
        self.inventory.forget_node(name)
        self.generation += 1

    # ---- pods ----------------------------------------------------------------------------------
    def _placed_on(self, pod: PodInfo) -> str:
        if pod.terminal:
            return ""
        return pod.node_name or self.assumed_nodes.get(pod.uid, "")

    def upsert_pod(self, pod: Mapping[str, Any]) -> PodInfo:
        info = PodInfo.from_api(pod)
        old = self.pods.get(info.uid)
        if old is not None and not _newer_or_equal(pod, old.raw):
            return old
        self._account(old, -1)
        if info.node_name:
            self.assumed_nodes.pop(info.uid, None)  # the binding is visible: no longer an assumption
        self.pods[info.uid] = info
        self._account(info, +1)
        if old is not None and self._placed_on(old) and not self._placed_on(info):
            self.generation += 1  # resources freed
        return info

    def remove_pod(self, uid: str) -> PodInfo | None:
        info = self.pods.pop(uid, None)
        self._account(info, -1)
        self.assumed_nodes.pop(uid, None)
        if info is not None:
            self.generation += 1
        return info

    def _account(self, pod: PodInfo | None, sign: int) -> None:
        if pod is None:
            return
        node = self._placed_on(pod)
        if node:
            self.usage.setdefault(node, NodeUsage()).apply(pod, sign)

    def assume_pod(self, uid: str, node: str) -> None:
        info = self.pods.get(uid)
        self._account(info, -1)
        self.assumed_nodes[uid] = node
        self._account(info, +1)

    def forget_pod(self, uid: str) -> None:
        info = self.pods.get(uid)
        self._account(info, -1)
        self.assumed_nodes.pop(uid, None)
        self._account(info, +1)
        self.generation += 1

    # ---- DRA objects ---------------------------------------------------------------------------
    def upsert_slice(self, obj: Mapping[str, Any]) -> None:
        self.inventory.upsert_slice(obj)
        self.generation += 1

    def remove_slice(self, name: str) -> None:
        self.inventory.remove_slice(name)
        self.generation += 1

    def upsert_class(self, obj: Mapping[str, Any]) -> None:
        self.classes[obj["metadata"]["name"]] = obj
        self.inventory.upsert_class(obj)
        self._remap()

    def remove_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self.inventory.remove_class(name)
        self._remap()

    def set_overrides(self, overrides: Iterable[OverrideMapping]) -> None:
        self.overrides = tuple(overrides)
        self._remap()

    def _remap(self) -> None:
        # Recomputed from the full list: the upstream incremental cache drops names on rename.
        self.mapping = build_mapping(self.classes.values(), self.overrides)
        self.generation += 1

    def upsert_claim(self, claim: Mapping[str, Any]) -> bool:
        """Record a claim seen by a watch or returned by a write. Older versions are ignored (a
        late watch event must not undo an allocation we already know about). True if applied."""
        meta = claim["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        if not _newer_or_equal(claim, self.claims.get(key)):
            return False
        had_allocation = bool(((self.claims.get(key) or {}).get("status") or {}).get("allocation"))
        self.claims[key] = claim
        self.tracker.set_claim(key, claim)
        owner = special_claim_owner(claim)
        if owner is not None:
            self.special_claims.setdefault(owner[1], set()).add(key)
        if had_allocation and not (claim.get("status") or {}).get("allocation"):
            self.generation += 1
        return True

    def remove_claim(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        claim = self.claims.pop(key, None)
        self.tracker.remove_claim(key)
        if claim is not None:
            owner = special_claim_owner(claim)
            if owner is not None:
                keys = self.special_claims.get(owner[1], set())
                keys.discard(key)
                if not keys:
                    self.special_claims.pop(owner[1], None)
            self.generation += 1

    def special_claims_of(self, pod_uid: str) -> list[Mapping[str, Any]]:
        return [self.claims[k] for k in sorted(self.special_claims.get(pod_uid, ())) if k in self.claims]

    def static_no_fit(self) -> dict[tuple[str, frozenset[tuple[str, str]], frozenset[tuple[str, int]]], str]:
        stamp = (self.inventory.revision, self.inventory.class_revision)
        if stamp != self._static_no_fit_stamp:
            self._static_no_fit = {}
            self._static_no_fit_stamp = stamp
        return self._static_no_fit

    # ---- allocations in flight -------------------------------------------------------------------
    def assume_allocation(self, key: str, allocation: Mapping[str, Any]) -> None:
        self.tracker.assume(key, allocation)

    def forget_allocation(self, key: str) -> None:
        self.tracker.forget(key)
        self.generation += 1

    def allocated(self) -> AllocatedState:
        return self.tracker.snapshot()
