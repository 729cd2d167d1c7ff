"""`draxr explain POD`: why a pod is pending (per node, in kube-scheduler's words), or what it got
(node, claim, devices, request mappings). Read-only: one list of each kind, the same core as the
operator (the volume plugins' reasons included: claims missing or unbound, PV node affinity, ...),
nothing assumed or written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, schedule
from draxr.core.state import ClusterState
from draxr.kube import PODS, RESOURCE_CLAIMS, Kube
from draxr.snapshot import load_state


def explain_bound(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]]) -> list[str]:
    meta, status = pod["metadata"], pod.get("status") or {}
    lines = [f"pod {meta['namespace']}/{meta['name']} is bound to node {pod['spec']['nodeName']}"]
    ercs = status.get("extendedResourceClaimStatus")
    if not ercs:
        lines.append("  no extended resource claim: its resources come from the node (device plugin or none)")
        return lines
    name = ercs["resourceClaimName"]
    lines.append(f"  claim {name}")
    claim = claims.get(f"{meta['namespace']}/{name}")
    results = (((claim or {}).get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    if claim is None:
        lines.append("    (the claim no longer exists: released)")
    for r in results:
        lines.append(f"    {r['request']}: {r['driver']} {r['pool']}/{r['device']}")
    for m in ercs.get("requestMappings") or ():
        lines.append(f"  container {m['containerName']}: {m['resourceName']} -> {m['requestName']}")
    return lines


def explain_pending(state: ClusterState, uid: str) -> list[str]:
    """Try the pod on each node alone, so that every node gets its own reason."""
    pod = state.pods[uid]
    lines = [f"pod {pod.key} is not bound (scheduler {pod.scheduler_name})"]
    overall = schedule(pod, state, features=DEFAULT_FEATURES, binds_volumes=True)
    if isinstance(overall, Decision):
        lines.append(f"  it fits now: draxr would choose node {overall.node}")
    else:
        lines.append(f"  {overall.message}")
        if overall.unresolvable:
            return lines
    all_nodes = state.nodes
    try:
        for name in sorted(all_nodes):
            state.nodes = {name: all_nodes[name]}
            result = schedule(pod, state, features=DEFAULT_FEATURES, binds_volumes=True)
            if isinstance(result, Decision):
                devices = [r["device"] for r in (result.allocation or {}).get("devices", {}).get("results", [])]
                lines.append(f"  {name}: fits" + (f" (devices {', '.join(devices)})" if devices else ""))
            else:
                reason = next(iter(result.reasons), result.message)
                lines.append(f"  {name}: {reason}")
    finally:
        state.nodes = all_nodes
    return lines


async def explain(kube: Kube, namespace: str, name: str) -> str:
    pod = await kube.get(PODS, name, namespace)
    if pod["spec"].get("nodeName"):
        claims = {
            f"{c['metadata']['namespace']}/{c['metadata']['name']}": c
            for c in await kube.list(RESOURCE_CLAIMS, namespace)
        }
        return "\n".join(explain_bound(pod, claims))
    state = await load_state(kube, storage=True)
    state.upsert_pod(pod, keep_object=True)  # even a pod being deleted gets its reasons
    return "\n".join(explain_pending(state, pod["metadata"]["uid"]))
