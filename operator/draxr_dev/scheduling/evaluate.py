"""draxr's side of the scheduling differential test: one generated case (nodes, bound pods,
namespaces, workloads and the pod to place) through draxr's pure core, reported in the Go
harness's result schema (tests/scheduler_harness): per node the first failing filter plugin with
its reasons, per score plugin the normalised score of every feasible node (the plugins draxr
skips for the pod left out: ``scoreSkipped``), the weighted totals, and the FailedScheduling
message when no node fits.

Three ways through the core, all reported:

- the per-node reference: placement's own NodeFilter, the one schedule() runs, then
  DynamicResources' Filter (plugins.dynamic_resources.DynamicResources: the allocated claims'
  node selectors, then the allocator with the pod's unallocated claims and the node's special
  claim) on every node that passed them, as the harness runs it; then cycle.score_nodes on the
  feasible ones (``filter``, ``scores``, ``total``). A rejection keeps draxr's own reason (the
  allocator's detail after "cannot allocate all claims: ");
- ``reference``: placement.schedule() without the equivalence cache, every node evaluated
  (``percentage_of_nodes=100, equivalence=False``): its decision, its diagnosis and its message;
- ``decision`` and ``cached``: placement.schedule() as production runs it (the equivalence cache
  on, kube-scheduler's share of nodes), twice on the same state: the first fills the cache, the
  second takes its verdicts (and runs of nodes whole).

``evaluate_sequence``: a sequence case's pods one after another on one state, each decision
assumed (ClusterState.assume_pod / assume_allocation, as draxr.scheduler does) before the next;
the equivalence cache is shared by the whole sequence, as in production.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import Features
from draxr.core.claims import assumed_claim_key
from draxr.core.cycle import score_nodes, weighted_totals
from draxr.core.placement import Decision, NodeFilter, Unschedulable, prefilter, schedule
from draxr.core.plugins.dynamic_resources import DynamicResources, prioritized_list_scores, special_claim_options
from draxr.core.requests import prepare_pod
from draxr.core.scheduler_config import load as load_config
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
    """The object with a namespace, uid and resourceVersion: a new object and metadata, the rest
    shared with ``obj`` (ClusterState never changes what it is given)."""
    out = dict(obj)
    meta = out["metadata"] = dict(out.get("metadata") or {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"{kind}-{index}-{meta.get('name', '')}")
    meta.setdefault("resourceVersion", "1")
    return out


def build_state(case: Mapping[str, Any]) -> ClusterState:
    state = ClusterState()
    if case.get("config") is not None:  # the case's KubeSchedulerConfiguration (casegen_config)
        loaded = load_config(json.dumps(case["config"]), case.get("schedulerName") or "default-scheduler")
        state.profile = loaded.profile
    for ns in case.get("namespaces") or ():
        state.upsert_namespace(ns)
    for field, kind in _WORKLOAD_KINDS.items():
        for obj in case.get(field) or ():
            state.workloads.upsert({**obj, "kind": kind})
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
    pod = PodInfo.from_api(_with_identity(case["pod"], "incoming", 0), keep_object=True)
    result = evaluate_pod(pod, state, [n["metadata"]["name"] for n in case.get("nodes") or ()])
    result["name"] = case.get("name", "")
    return result


def evaluate_sequence(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case's pod, then each pod of its ``sequence``, on one state: every pod evaluated as
    evaluate_pod does, then its production decision assumed before the next (a pod that does not
    fit is left pending). ``assumeOn``: the node each pod was assumed on ("" when none), what the
    harness is given to assume the same; ``steps``: the results of the sequence's pods."""
    state = build_state(case)
    names = [n["metadata"]["name"] for n in case.get("nodes") or ()]
    results: list[dict[str, Any]] = []
    assume_on: list[str] = []
    for i, obj in enumerate([case["pod"], *(case.get("sequence") or ())]):
        pod = state.upsert_pod(_with_identity(obj, "incoming", i), keep_object=True)  # its watch event
        result = evaluate_pod(pod, state, names)
        decision = schedule(pod, state, **_PRODUCTION)
        if isinstance(decision, Decision):
            _assume(state, pod, decision)
            assume_on.append(decision.node)
        else:
            assume_on.append("")
        results.append(result)
    out = results[0]
    out["name"] = case.get("name", "")
    out["steps"] = results[1:]
    out["assumeOn"] = assume_on
    return out


def _assume(state: ClusterState, pod: PodInfo, decision: Decision) -> None:
    """What draxr.scheduler does with a decision before the next cycle."""
    state.assume_pod(pod.uid, decision.node)
    if decision.allocation is not None:
        state.assume_allocation(assumed_claim_key(pod.uid), decision.allocation)
    for key, allocation in decision.claim_allocations:
        state.assume_allocation(key, allocation)
    if decision.volumes is not None and not decision.volumes.empty:
        state.storage.assume(decision.volumes, decision.node)


_PRODUCTION: dict[str, Any] = dict(features=Features(), device_scoring=None, binds_volumes=True, binds_claims=True)


def evaluate_pod(pod: PodInfo, state: ClusterState, names: list[str]) -> dict[str, Any]:
    """One pod on ``state`` (left as it was, but for the equivalence cache the production path
    fills): the per-node reference, then schedule() without and with the cache."""
    result: dict[str, Any] = {}
    prefiltered = prefilter(pod, state)
    if isinstance(prefiltered, Status):  # every node reports it
        status = _status(prefiltered)
        result["filter"] = dict.fromkeys(names, status)
        result["scores"] = {}
    else:
        result.update(_per_node(pod, state, names, prefiltered))
    result["reference"] = decide(pod, state, percentage_of_nodes=100, equivalence=False)
    result["decision"] = decide(pod, state)
    result["cached"] = decide(pod, state)
    return result


def _per_node(pod: PodInfo, state: ClusterState, names: list[str], prefiltered: Any) -> dict[str, Any]:
    cycle, vcycle, ccycle = prefiltered
    node_filter = NodeFilter(pod, cycle, vcycle, state.storage)
    prepared = prepare_pod(pod.view, state.mapping)
    dra = DynamicResources(pod, state, Features(), ccycle)
    filters: dict[str, dict[str, Any] | None] = {}
    feasible = []
    fits: list[Any] = []
    for name in names:
        node = state.nodes[name]
        usage = state.usage.get(name) or EMPTY_USAGE
        rejection = node_filter.before_fit(node, usage)
        if rejection is None:
            unmapped = prepared.unmapped_on(node.raw) if prepared.node_restricted else frozenset()
            ext = prepared.for_allocatable(node.raw.get("status", {}).get("allocatable") or {}, unmapped)
            rejection = node_filter.from_fit(node, usage, ext.dra, ext.reasons)
            fit = None
            if rejection is None and (ext.needs_claim or ccycle is not None):
                fit = dra.filter(node, special_claim_options(prepared, node, ext, state))
                rejection = fit.counted if fit.rejection is not None else None
        if rejection is not None:
            filters[name] = _status(rejection)
            continue
        filters[name] = None
        feasible.append(node)
        fits.append(fit)
    out: dict[str, Any] = {"filter": filters}
    scores = score_nodes(cycle, state, feasible) if feasible else {}
    if feasible:  # (0 everywhere for a pod without volumes: upstream never skips it)
        volume = node_filter.volume_scores(feasible)
        scores["VolumeBinding"] = volume if volume is not None else dict.fromkeys((n.name for n in feasible), 0)
        dra_scores = prioritized_list_scores(ccycle, fits)
        scores["DynamicResources"] = {
            n.name: dra_scores[i] if dra_scores is not None else 0 for i, n in enumerate(feasible)
        }
    weights = state.profile.weight_of  # the profile's score plugins only
    scores = {p: per_node for p, per_node in scores.items() if p in weights}
    out["scores"] = scores
    if feasible:
        out["scoreSkipped"] = sorted(set(weights) - set(scores))
    out["weights"] = {p: weights[p] for p in scores}
    totals = weighted_totals(scores, state.profile)
    out["total"] = {n.name: totals.get(n.name, 0) for n in feasible}
    return out


def _status(rejection: Status) -> dict[str, Any]:
    return {"plugin": rejection.plugin, "code": str(rejection.code), "reasons": list(rejection.reasons)}


def decide(pod: PodInfo, state: ClusterState, **options: Any) -> dict[str, Any]:
    """What placement.schedule() itself decides (kube-scheduler's ranking: no device scoring):
    {"node": ..., "scores": {plugin: score on it}, "statuses": {node: status}} or
    {"unschedulable": message, "reasons": {reason: nodes}, "statuses": {node: status},
    "everyNode": status | None}. Reasons as draxr gives them (the allocator's detail kept)."""
    # percentageOfNodesToScore: the case's configuration's, as the shell passes it
    percentage = state.profile.percentage_of_nodes_to_score or 0
    decision = schedule(pod, state, **{**_PRODUCTION, "percentage_of_nodes": percentage, **options})
    if isinstance(decision, Decision):
        return {
            "node": decision.node,
            "scores": dict(decision.scores),
            "statuses": {n: _status(s) for n, s in decision.statuses.items()},
        }
    assert isinstance(decision, Unschedulable)
    return {
        "unschedulable": decision.message,
        "reasons": dict(decision.reasons),
        "statuses": {n: _status(s) for n, s in decision.statuses.items()},
        "everyNode": _status(decision.every_node) if decision.every_node is not None else None,
        "unresolvable": decision.unresolvable,
    }
