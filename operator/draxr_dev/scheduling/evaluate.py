"""draxr's side of the scheduling differential test: one generated case (nodes, bound pods,
namespaces, workloads and the pod to place) through draxr's pure core, reported in the Go
harness's result schema (tests/scheduler_harness): per node the first failing filter plugin with
its reasons, and per score plugin the normalised score of every feasible node.

The node filters are placement's own NodeFilter, the one schedule() runs (without devices: the
allocator has its own differential test).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import Features
from draxr.core.cycle import score_nodes, weighted_totals
from draxr.core.placement import Decision, NodeFilter, Rejection, prefilter, schedule
from draxr.core.scores import WEIGHTS
from draxr.core.state import EMPTY_USAGE, ClusterState, PodInfo
from draxr_dev.scheduling.storage_case import build_storage

_UNRESOLVABLE = "UnschedulableAndUnresolvable"  # fwk.Code as String()

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
    if isinstance(prefiltered, Rejection):  # every node reports it
        status = _status(prefiltered)
        result["filter"] = dict.fromkeys(names, status)
        result["scores"] = {}
        result["decision"] = decide(pod, state)
        return result
    cycle, vcycle = prefiltered
    node_filter = NodeFilter(pod, cycle, vcycle, state.storage)
    filters: dict[str, dict[str, Any] | None] = {}
    feasible = []
    for name in names:
        node = state.nodes[name]
        usage = state.usage.get(name) or EMPTY_USAGE
        rejection = node_filter.before_fit(node, usage) or node_filter.from_fit(node, usage)
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


def _status(rejection: Rejection) -> dict[str, Any]:
    code = _UNRESOLVABLE if rejection.unresolvable else "Unschedulable"
    return {"plugin": rejection.plugin, "code": code, "reasons": list(rejection.reasons)}


def decide(pod: PodInfo, state: ClusterState) -> dict[str, Any]:
    """What placement.schedule() itself decides (kube-scheduler's ranking: no device scoring, every
    node evaluated below 100 nodes): {"node": ...} or {"unschedulable": message, "reasons": {reason:
    nodes}}; compared with the harness's totals and filter reasons."""
    decision = schedule(pod, state, features=Features(), device_scoring=None, binds_volumes=True)
    if isinstance(decision, Decision):
        return {"node": decision.node}
    return {"unschedulable": decision.message, "reasons": dict(decision.reasons)}
