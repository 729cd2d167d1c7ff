"""draxr's side of the scheduling differential test: one generated case (nodes, bound pods,
namespaces, workloads and the pod to place) through draxr's pure core, reported in the Go
harness's result schema (tests/scheduler_harness): per node the first failing filter plugin with
its reasons, and per score plugin the normalised score of every feasible node.

No devices are involved: the allocator has its own differential test.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from draxr.core import volumes
from draxr.core.cycle import node_names, prepare, score_nodes, weighted_totals
from draxr.core.placement import cheap_filter, fit_checked, fit_unresolvable, insufficient
from draxr.core.scores import WEIGHTS
from draxr.core.state import EMPTY_USAGE, ClusterState, PodInfo
from draxr.core.storage import VolumeDecision
from draxr_dev.scheduling.storage_case import build_storage

# Upstream's status code of each reason (fwk.Code as String()).
_UNRESOLVABLE = "UnschedulableAndUnresolvable"
_CODES = {
    "NodeName": _UNRESOLVABLE,
    "NodeUnschedulable": _UNRESOLVABLE,
    "TaintToleration": _UNRESOLVABLE,
    "NodeAffinity": _UNRESOLVABLE,
    "NodePorts": "Unschedulable",
    "NodeResourcesFit": "Unschedulable",
}
_UNRESOLVABLE_REASONS = {
    "node(s) didn't match pod topology spread constraints (missing required label)",
    "node(s) didn't match pod affinity rules",
}

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
    for i, pod in enumerate(case.get("pods") or ()):
        state.upsert_pod(_with_identity(pod, "pod", i))
    return state


def evaluate_case(case: Mapping[str, Any]) -> dict[str, Any]:
    state = build_state(case)
    pod_obj = _with_identity(case["pod"], "incoming", 0)
    pod = PodInfo.from_api(pod_obj, keep_object=True)
    view = pod.view
    names = [n["metadata"]["name"] for n in case.get("nodes") or ()]
    result: dict[str, Any] = {"name": case.get("name", "")}
    # The volume plugins' PreFilters run after NodeName's and NodeAffinity's, before the others'.
    storage = build_storage(case)
    vcycle = volumes.prefilter(pod_obj, storage, state.nodes)
    if vcycle.rejected is not None and node_names(view).rejected is None:
        rej = vcycle.rejected
        rejection = {"plugin": rej.plugin, "code": rej.code, "reasons": list(rej.reasons)}
        result["filter"] = dict.fromkeys(names, rejection)
        result["scores"] = {}
        return result
    decisions: dict[str, VolumeDecision | None] = {}
    if view.invalid:
        # PreFilter rejects the pod: every node reports it.
        status = {
            "plugin": "InterPodAffinity" if "parsing pod" in view.invalid else "PodTopologySpread",
            "code": _UNRESOLVABLE,
            "reasons": [view.invalid],
        }
        result["filter"] = dict.fromkeys(names, status)
        result["scores"] = {}
        return result
    cycle = prepare(pod, state)
    if cycle.names.rejected is not None:
        plugin = "NodeAffinity" if cycle.names.rejected == "pod affinity terms conflict" else ""
        status = {"plugin": plugin, "code": _UNRESOLVABLE, "reasons": [cycle.names.rejected]}
        result["filter"] = dict.fromkeys(names, status)
        result["scores"] = {}
        return result
    checked = fit_checked(pod)
    filters: dict[str, dict[str, Any] | None] = {}
    feasible = []
    for name in names:
        node = state.nodes[name]
        usage = state.usage.get(name) or EMPTY_USAGE
        if cycle.names.names is not None and name not in cycle.names.names:
            reason = cycle.names.absent_reason
            filters[name] = {"plugin": "", "code": _UNRESOLVABLE, "reasons": [reason]}
            continue
        rejected = cheap_filter(pod, view, node, usage)
        if rejected is not None:
            filters[name] = {"plugin": rejected[0], "code": _CODES[rejected[0]], "reasons": [rejected[1]]}
            continue
        fit = insufficient(checked, node, usage, ())
        if fit:
            code = _UNRESOLVABLE if fit_unresolvable(checked, node, ()) else "Unschedulable"
            filters[name] = {"plugin": "NodeResourcesFit", "code": code, "reasons": fit}
            continue
        verdict = volumes.filter_node(vcycle, storage, node)
        if verdict.rejection is not None:
            rej = verdict.rejection
            filters[name] = {"plugin": rej.plugin, "code": rej.code, "reasons": list(rej.reasons)}
            continue
        decisions[name] = verdict.decision
        other = cycle.filter(node)
        if other is not None:
            code = _UNRESOLVABLE if other[1] in _UNRESOLVABLE_REASONS else "Unschedulable"
            filters[name] = {"plugin": other[0], "code": code, "reasons": [other[1]]}
            continue
        filters[name] = None
        feasible.append(node)
    result["filter"] = filters
    scores = score_nodes(cycle, state, feasible) if feasible else {}
    if feasible:
        scores["VolumeBinding"] = volumes.score_nodes(vcycle, {n.name: decisions.get(n.name) for n in feasible})
    result["scores"] = scores
    result["weights"] = {p: WEIGHTS[p] for p in scores}
    totals = weighted_totals(scores)
    result["total"] = {n.name: totals.get(n.name, 0) for n in feasible}
    return result
