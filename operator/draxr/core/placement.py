"""Node filters, scoring and the per-pod decision (one scheduling cycle, pure).

Filters run in kube-scheduler's order and report its wording, so that the summary reads like
kube-scheduler's: "0/12 nodes are available: 4 node(s) had untolerated taint {gpu: true},
8 Insufficient example.com/gpu."
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from draxr.core.allocator import Allocated, AllocationFatalError, Allocator, Features, NodeFailure, NoFit
from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.requests import DeviceRequest, RequestMapping, prepare_pod
from draxr.core.state import ClusterState, NodeInfo, NodeUsage, PodInfo

# Scoring pretends pods without cpu/memory requests use these (upstream DefaultMilliCPURequest /
# DefaultMemoryRequest), so that best-effort pods still spread.
_DEFAULT_CPU = Decimal("0.1")
_DEFAULT_MEMORY = Decimal(200 * 1024 * 1024)
_MIN_FEASIBLE_NODES = 100  # upstream minFeasibleNodesToFind


class Scoring(StrEnum):
    LEAST_ALLOCATED = "LeastAllocated"
    MOST_ALLOCATED = "MostAllocated"


@dataclass(frozen=True)
class Decision:
    node: str
    score: float
    allocation: Mapping[str, Any] | None  # the special claim's allocation result, None if no claim
    requests: tuple[DeviceRequest, ...]
    mappings: tuple[RequestMapping, ...]
    nodes_evaluated: int

    @property
    def needs_claim(self) -> bool:
        return bool(self.requests)


@dataclass(frozen=True)
class Unschedulable:
    """No node fits. ``message`` is kube-scheduler's summary; ``unresolvable`` marks pods that no
    cluster change can help (unsupported fields, a broken class): they wait for their own update."""

    message: str
    reasons: Mapping[str, int] = field(default_factory=dict)
    unresolvable: bool = False
    fatal_kind: str | None = None


def unsupported_fields(pod: Mapping[str, Any]) -> list[str]:
    """Scheduling features draxr does not implement: such pods stay Pending rather than be misplaced."""
    spec = pod.get("spec") or {}
    found: list[str] = []
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution"):
            found.append(f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution")
    if spec.get("topologySpreadConstraints"):
        found.append("spec.topologySpreadConstraints")
    if any("persistentVolumeClaim" in v or "ephemeral" in v for v in spec.get("volumes") or ()):
        found.append("spec.volumes (persistent volume claims may be bound to zones)")
    if spec.get("resourceClaims"):
        found.append("spec.resourceClaims (ResourceClaims next to extended resources)")
    return found


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1 Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _untolerated_taint(pod: PodInfo, node: NodeInfo) -> Mapping[str, Any] | None:
    tolerations = (pod.raw.get("spec") or {}).get("tolerations") or ()
    for taint in node.taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _node_affinity_matches(pod: PodInfo, node: NodeInfo) -> bool:
    spec = pod.raw.get("spec") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(k) != v:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required:
        try:
            return selector_matches(required, node.raw)
        except NodeSelectorError:
            return False
    return True


def _ports_conflict(pod: PodInfo, usage: NodeUsage) -> bool:
    for ip, proto, port in pod.host_ports:
        for uip, uproto, uport in usage.host_ports:
            if uport == port and uproto == proto and (ip == uip or "0.0.0.0" in (ip, uip)):
                return True
    return False


def _insufficient(pod: PodInfo, node: NodeInfo, usage: NodeUsage, dra_names: set[str]) -> list[str]:
    reasons: list[str] = []
    if usage.pods + 1 > node.allocatable.get("pods", Decimal(0)):
        reasons.append("Too many pods")
    for name, want in sorted(pod.requests.items()):
        if want <= 0 or name in dra_names:
            continue  # DRA-served names are checked by the allocator, not against allocatable
        if name not in ("cpu", "memory", "ephemeral-storage") and "/" not in name and not name.startswith("hugepages-"):
            continue
        free = node.allocatable.get(name, Decimal(0)) - usage.requested.get(name, Decimal(0))
        if want > free:
            reasons.append(f"Insufficient {name}")
    return reasons


def _score(pod: PodInfo, node: NodeInfo, usage: NodeUsage, scoring: Scoring) -> float:
    total = 0.0
    for name, default in (("cpu", _DEFAULT_CPU), ("memory", _DEFAULT_MEMORY)):
        alloc = node.allocatable.get(name, Decimal(0))
        if alloc <= 0:
            continue
        req = usage.requested.get(name, Decimal(0)) + (pod.requests.get(name) or default)
        used = min(req / alloc, Decimal(1))
        total += float(1 - used if scoring is Scoring.LEAST_ALLOCATED else used) * 100
    return total / 2


def _summary(total: int, reasons: Counter[str]) -> str:
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return f"0/{total} nodes are available: {', '.join(parts)}." if parts else f"0/{total} nodes are available."


def nodes_to_find(total: int, percentage: int = 0) -> int:
    """Upstream numFeasibleNodesToFind: stop searching once this many nodes fit."""
    if total < _MIN_FEASIBLE_NODES:
        return total
    pct = percentage or max(5, 50 - total // 125)
    return max(_MIN_FEASIBLE_NODES, total * pct // 100)


def schedule(
    pod: PodInfo,
    state: ClusterState,
    *,
    features: Features,
    scoring: Scoring = Scoring.LEAST_ALLOCATED,
    start: int = 0,
    percentage_of_nodes: int = 0,
) -> Decision | Unschedulable:
    """Choose a node for ``pod`` and allocate its special claim there. ``start`` rotates the node
    order between cycles (as kube-scheduler does) so that the feasible-node cut-off is fair."""
    unsupported = unsupported_fields(pod.raw)
    if unsupported:
        return Unschedulable(f"draxr does not support {', '.join(unsupported)} yet", unresolvable=True)

    prepared = prepare_pod(pod.raw, state.mapping, requests=pod.requests)
    spec_node = (pod.raw.get("spec") or {}).get("nodeName") or ""
    names = sorted(state.nodes)
    if names:
        start %= len(names)
        names = names[start:] + names[:start]
    want = nodes_to_find(len(names), percentage_of_nodes)

    allocator: Allocator | None = None
    reasons: Counter[str] = Counter()
    feasible: list[Decision] = []
    evaluated = 0
    for name in names:
        if len(feasible) >= want:
            break
        evaluated += 1
        node = state.nodes[name]
        usage = state.usage.get(name) or NodeUsage()
        if node.unschedulable and not any(
            _tolerates(t, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            for t in (pod.raw.get("spec") or {}).get("tolerations") or ()
        ):
            reasons["node(s) were unschedulable"] += 1
            continue
        if spec_node and spec_node != name:
            reasons["node(s) didn't match the requested node name"] += 1
            continue
        taint = _untolerated_taint(pod, node)
        if taint is not None:
            reasons[f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"] += 1
            continue
        if not _node_affinity_matches(pod, node):
            reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            continue
        if pod.host_ports and _ports_conflict(pod, usage):
            reasons["node(s) didn't have free ports for the requested pod ports"] += 1
            continue
        ext = prepared.for_allocatable(node.raw.get("status", {}).get("allocatable") or {})
        fit = _insufficient(pod, node, usage, set(ext.dra))
        if fit or ext.reasons:
            for r in fit + [r for r in ext.reasons if r not in fit]:
                reasons[r] += 1
            continue
        allocation: Mapping[str, Any] | None = None
        if ext.needs_claim:
            if allocator is None:
                allocator = Allocator(state.inventory, state.allocated(), features)
            claim = _claim_for_allocation(pod, ext.claim_requests())
            try:
                outcome = allocator.allocate(node.raw, [claim])
            except AllocationFatalError as err:
                return Unschedulable(str(err), unresolvable=True, fatal_kind=err.kind)
            if isinstance(outcome, NoFit):
                reasons[outcome.reason] += 1
                continue
            if isinstance(outcome, NodeFailure):
                reasons[outcome.reason] += 1
                continue
            assert isinstance(outcome, Allocated)
            allocation = outcome.results[0]
        feasible.append(
            Decision(name, _score(pod, node, usage, scoring), allocation, ext.dra_requests, ext.mappings, 0)
        )

    if not feasible:
        return Unschedulable(_summary(len(names), reasons), dict(reasons))
    best = min(feasible, key=lambda d: (-d.score, d.node))  # ties: the smaller node name, deterministic
    return Decision(best.node, best.score, best.allocation, best.requests, best.mappings, evaluated)


def _claim_for_allocation(pod: PodInfo, requests: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The in-memory special claim the allocator sees (upstream's "<extended-resources>" template)."""
    return {
        "metadata": {"name": "<extended-resources>", "namespace": pod.namespace, "uid": f"assumed-{pod.uid}"},
        "spec": {"devices": {"requests": list(requests)}},
    }
