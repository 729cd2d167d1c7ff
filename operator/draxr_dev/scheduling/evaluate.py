"""draxr's side of the scheduling differential test: one generated case (nodes, bound pods,
namespaces, workloads and the pod to place) through draxr's pure core, reported in the Go
harness's result schema (tests/scheduler_harness): per node the first failing filter plugin with
its reasons, and per score plugin the normalised score of every feasible node.

The node filters are placement's own NodeFilter, the one schedule() runs, then DynamicResources'
Filter (plugins.dynamic_resources.DynamicResources: the allocated claims' node selectors, then the allocator with
the pod's unallocated claims and the node's special claim) on every node that passed them, as the
harness runs it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import Features
from draxr.core.cycle import score_nodes, weighted_totals
from draxr.core.placement import Decision, NodeFilter, prefilter, schedule
from draxr.core.plugins.dynamic_resources import CANNOT_ALLOCATE, DynamicResources, special_claim_options
from draxr.core.requests import prepare_pod
from draxr.core.scores import WEIGHTS
from draxr.core.state import EMPTY_USAGE, ClusterState, PodInfo
from draxr.core.status import Status
from draxr_dev.scheduling.storage_case import build_storage

_WORKLOAD_KINDS = {
    "services": "Service",
    "replicationControllers": "ReplicationController",
    "replicaSets": "ReplicaSet",
    "statefulSets": "StatefulSet",
}


def _with_identity(obj: Mapping[str, Any], kind: str, index: int) -> dict[str, Any]:
    out = copy.deepcopy(dict(obj))
    meta = out.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"{kind}-{index}-{meta.get('name', '')}")
    meta.setdefault("resourceVersion", "1")
    return out


def build_state(case: Mapping[str, Any]) -> ClusterState:
    state = ClusterState()
    for ns in case.get("namespaces") or ():
        state.upsert_namespace(ns)
    for field, kind in _WORKLOAD_KINDS.items():
        for obj in case.get(field) or ():
            state.upsert_workload({**obj, "kind": kind})
    for node in case.get("nodes") or ():
        state.upsert_node(node)
    build_storage(case, state.storage)  # before the pods: ClusterState gives it their volumes
    for obj in case.get("deviceClasses") or ():
        state.upsert_class(obj)
    for obj in case.get("resourceSlices") or ():
        state.upsert_slice(obj)
    for obj in case.get("resourceClaims") or ():
        state.upsert_claim(obj)
    for i, pod in enumerate(case.get("pods") or ()):
        state.upsert_pod(_with_identity(pod, "pod", i))
    return state


def evaluate_case(case: Mapping[str, Any]) -> dict[str, Any]:
    state = build_state(case)
    pod_obj = _with_identity(case["pod"], "incoming", 0)
    pod = PodInfo.from_api(pod_obj, keep_object=True)
    names = [n["metadata"]["name"] for n in case.get("nodes") or ()]
    result: dict[str, Any] = {"name": case.get("name", "")}
    prefiltered = prefilter(pod, state)
    if isinstance(prefiltered, Status):  # every node reports it
        status = _status(prefiltered)
        result["filter"] = dict.fromkeys(names, status)
        result["scores"] = {}
        result["decision"] = decide(pod, state)
        return result
    cycle, vcycle, ccycle = prefiltered
    node_filter = NodeFilter(pod, cycle, vcycle, state.storage)
    prepared = prepare_pod(pod.view, state.mapping)
    dra = DynamicResources(pod, state, Features(), ccycle)
    filters: dict[str, dict[str, Any] | None] = {}
    feasible = []
    for name in names:
        node = state.nodes[name]
        usage = state.usage.get(name) or EMPTY_USAGE
        rejection = node_filter.before_fit(node, usage)
        if rejection is None:
            unmapped = prepared.unmapped_on(node.raw) if prepared.node_restricted else frozenset()
            ext = prepared.for_allocatable(node.raw.get("status", {}).get("allocatable") or {}, unmapped)
            rejection = node_filter.from_fit(node, usage, ext.dra, ext.reasons)
            if rejection is None and (ext.needs_claim or ccycle is not None):
                rejection = dra.filter(node, special_claim_options(prepared, node, ext, state)).rejection
        if rejection is not None:
            filters[name] = _status(rejection)
            continue
        filters[name] = None
        feasible.append(node)
    result["filter"] = filters
    scores = score_nodes(cycle, state, feasible) if feasible else {}
    volume = node_filter.volume_scores(feasible) if feasible else None
    if volume is not None:
        scores["VolumeBinding"] = volume
    result["scores"] = scores
    result["weights"] = {p: WEIGHTS[p] for p in scores}
    totals = weighted_totals(scores)
    result["total"] = {n.name: totals.get(n.name, 0) for n in feasible}
    result["decision"] = decide(pod, state)
    return result


def _status(rejection: Status) -> dict[str, Any]:
    return {"plugin": rejection.plugin, "code": str(rejection.code), "reasons": list(rejection.reasons)}


def decide(pod: PodInfo, state: ClusterState) -> dict[str, Any]:
    """What placement.schedule() itself decides (kube-scheduler's ranking: no device scoring, every
    node evaluated below 100 nodes): {"node": ...} or {"unschedulable": message, "reasons": {reason:
    nodes}}; compared with the harness's totals and filter reasons."""
    decision = schedule(pod, state, features=Features(), device_scoring=None, binds_volumes=True, binds_claims=True)
    if isinstance(decision, Decision):
        return {"node": decision.node}
    # draxr says why the allocator found no fit ("cannot allocate all claims: claim ..., request
    # ...: not enough suitable devices on this node"); upstream's reason is the part before the colon.
    reasons: dict[str, int] = {}
    for reason, count in decision.reasons.items():
        key = CANNOT_ALLOCATE if reason.startswith(CANNOT_ALLOCATE) else reason
        reasons[key] = reasons.get(key, 0) + count
    return {"unschedulable": decision.message, "reasons": reasons}
