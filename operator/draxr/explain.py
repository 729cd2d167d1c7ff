"""`draxr explain POD` (and `kubectl draxr explain`): why a pod is pending (per node, the diagnosis
of one scheduling cycle in kube-scheduler's words, the volume plugins' reasons included: claims
missing or unbound, PV node affinity, ...), or what it got (node, claim, devices, request
mappings). Read-only: one list of each kind, the same core as the operator, nothing assumed or
written.

A report is plain data (for `-o json|yaml`); ``render`` turns it into the text lines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, schedule
from draxr.core.profile import DEFAULT_PROFILE, SchedulerProfile
from draxr.core.state import ClusterState
from draxr.core.status import Status
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr.snapshot import load_state

Report = dict[str, Any]


def bound_report(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> Report:
    meta, status = pod["metadata"], pod.get("status") or {}
    report: Report = {"pod": f"{meta['namespace']}/{meta['name']}", "bound": True, "node": pod["spec"]["nodeName"]}
    ercs = status.get("extendedResourceClaimStatus")
    if not ercs:
        report["claim"] = None
        return report
    name = ercs["resourceClaimName"]
    claim = claims.get(f"{meta['namespace']}/{name}")
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    report["claim"] = name
    report["claimReleased"] = claim is None
    report["devices"] = [{k: r[k] for k in ("request", "driver", "pool", "device")} for r in results]
    report["mappings"] = [
        {"container": m["containerName"], "resource": m["resourceName"], "request": m["requestName"]}
        for m in ercs.get("requestMappings") or ()
    ]
    return report


def _taint(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key', '')}{value}:{taint.get('effect', '')}"


def pending_report(state: ClusterState, uid: str) -> Report:
    """One scheduling cycle, as the operator runs it, and its diagnosis: every node's status."""
    pod = state.pods[uid]
    report: Report = {"pod": pod.key, "bound": False, "scheduler": pod.scheduler_name}
    if pod.nominated:
        # Nominated by a preemption: the victims still going (DisruptionTarget, being deleted).
        report["nominatedNode"] = pod.nominated
        report["waitingFor"] = sorted(
            p.key for p in state.placed_pods(pod.nominated) if p.preempted and p.priority < pod.priority
        )
    # Every node evaluated (no cut after enough feasible ones) and none taken whole from the
    # equivalence cache, so that each rejected node has its status even when the pod fits.
    overall = schedule(
        pod,
        state,
        features=DEFAULT_FEATURES,
        binds_volumes=True,
        binds_claims=True,
        percentage_of_nodes=100,
        equivalence=False,
    )
    nodes: list[Report] = []
    if isinstance(overall, Decision):
        report["wouldChoose"] = overall.node
        devices = [r["device"] for r in (overall.allocation or {}).get("devices", {}).get("results", [])]
        nodes.append({"node": overall.node, "fits": True, "devices": devices})
        statuses: Mapping[str, Status] = overall.statuses
    else:
        report["message"] = overall.message
        report["unresolvable"] = overall.unresolvable
        statuses = {n: s for n in state.nodes if (s := overall.status_of(n)) is not None}
    for name in sorted(state.nodes):
        status = statuses.get(name)
        if status is None:
            continue  # the chosen node, or the attempt ended before the nodes (the message says why)
        entry: Report = {"node": name, "fits": False, "reasons": list(status.reasons), "code": str(status.code)}
        if status.plugin:
            entry["plugin"] = status.plugin
        node = state.nodes[name]
        taint = pod.view.untolerated(node.taints) if node.taints else None
        if taint is not None:  # 1.37's wording leaves the taint out; an admin wants it
            entry["untoleratedTaint"] = _taint(taint)
        nodes.append(entry)
    report["nodes"] = sorted(nodes, key=lambda n: n["node"])
    return report


def render(report: Report, *, wide: bool = False) -> list[str]:
    """The report as text; ``wide``: every reason of each node, and the untolerated taint."""
    if report["bound"]:
        lines = [f"pod {report['pod']} is bound to node {report['node']}"]
        if report.get("claim") is None:
            lines.append("  no extended resource claim: its resources come from the node (device plugin or none)")
            return lines
        lines.append(f"  claim {report['claim']}")
        if report["claimReleased"]:
            lines.append("    (the claim no longer exists: released)")
        lines += [f"    {d['request']}: {d['driver']} {d['pool']}/{d['device']}" for d in report["devices"]]
        lines += [f"  container {m['container']}: {m['resource']} -> {m['request']}" for m in report["mappings"]]
        return lines
    lines = [f"pod {report['pod']} is not bound (scheduler {report['scheduler']})"]
    if report.get("nominatedNode"):
        waiting = report.get("waitingFor") or []
        going = f", waiting for {len(waiting)} preempted pod(s) to go: {', '.join(waiting)}" if waiting else ""
        lines.append(f"  nominated to node {report['nominatedNode']}{going}")
    if "error" in report:
        lines.append(f"  cannot explain it: {report['error']}")
    elif "wouldChoose" in report:
        lines.append(f"  it fits now: draxr would choose node {report['wouldChoose']}")
    else:
        lines.append(f"  {report['message']}")
    for n in report.get("nodes") or ():
        if n["fits"]:
            lines.append(f"  {n['node']}: fits" + (f" (devices {', '.join(n['devices'])})" if n["devices"] else ""))
            continue
        reason = "; ".join(n["reasons"]) if wide else n["reasons"][0]
        if wide and "untoleratedTaint" in n:
            reason += f" ({n['untoleratedTaint']})"
        lines.append(f"  {n['node']}: {reason}")
    return lines


async def report(kube: Kube, namespace: str, name: str, profile: SchedulerProfile = DEFAULT_PROFILE) -> Report:
    """``profile``: the scheduling profile draxr runs (its --config's), else kube-scheduler's default."""
    pod = await kube.get(PODS, name, namespace)
    if pod["spec"].get("nodeName"):
        claims = {
            f"{c['metadata']['namespace']}/{c['metadata']['name']}": c
            for c in await kube.list(RESOURCE_CLAIMS, namespace)
        }
        return bound_report(pod, claims)
    state = await load_state(kube, storage=True)
    state.profile = profile
    state.upsert_pod(pod, keep_object=True)  # even a pod being deleted gets its reasons
    return pending_report(state, pod["metadata"]["uid"])


async def pending_reports(
    kube: Kube, namespace: str | None, scheduler: str, profile: SchedulerProfile = DEFAULT_PROFILE
) -> list[Report]:
    """Every unbound pod for ``scheduler`` in the namespace (None: all namespaces), from one
    listing of the cluster, under ``profile`` (see report)."""
    state = await load_state(kube, storage=True)
    state.profile = profile
    out = []
    for p in sorted(state.pods.values(), key=lambda p: p.key):
        if p.node_name or p.terminal or p.deleting or p.scheduler_name != scheduler:
            continue
        if namespace is None or p.namespace == namespace:
            try:
                out.append(pending_report(state, p.uid))
            except Exception as e:  # one odd pod must not hide the others
                out.append({"pod": p.key, "bound": False, "scheduler": p.scheduler_name, "error": f"{e}"})
    return out


async def explain(kube: Kube, namespace: str, name: str, profile: SchedulerProfile = DEFAULT_PROFILE) -> str:
    return "\n".join(render(await report(kube, namespace, name, profile)))
