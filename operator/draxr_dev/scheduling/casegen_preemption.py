"""Preemption cases for the differential test of draxr's core.preemption against kube-scheduler 1.37.2's
DefaultPreemption (tests/scheduler_harness, "preempt": true; see its preemption.go).

``generate_preemption_case(seed, index)`` returns one case (the schema of draxr_dev.scheduling, with
"podDisruptionBudgets" and "preempt": true). Every case is built on the node-local base:

2-30 nodes with cpu, memory, pods and a device-plugin extended resource (sometimes pairs of twin
nodes, identical down to their pods' start times, so that candidates tie on every criterion), filled
with bound pods of several priorities (negative, equal to the incoming pod's, the extremes of int32
and the system classes), start times (distinct within a node, or tied), labels, host ports; some
pods terminating (some by preemption), some finished; PodDisruptionBudgets (matching or not,
disruptionsAllowed 0-2, disruptedPods, empty and nil selectors, other namespaces); unbound pods
nominated to nodes (status.nominatedNodeName) of higher, equal or lower priority than the incoming
pod; and an incoming pod that does not fit anywhere without evictions (or not even with them, or
fits after all), sometimes with preemptionPolicy Never, a host port, a node selector or tolerations
of the nodes' taints, a node affinity on metadata.name (PreFilter narrows the nodes), a missing
PersistentVolumeClaim (VolumeBinding's PreFilter turns it away before DynamicResources'), or a
nominated node of its own (with a victim of its last preemption still terminating there).

The families (FAMILIES) each add one thing a difference may come from, and only they have it:

* ``preemption``: the base alone. Nothing reads other nodes' pods (no inter-pod terms, no hard
  spreading), no pod matches two PodDisruptionBudgets, every bound pod has a start time.
* ``preemption-pdb-overlap``: some bound pods match two PodDisruptionBudgets (upstream's
  FilterVictimsWithPDBViolation then depends on their order; both sides are given the case's).
* ``preemption-start-unset``: some bound pods have no status.startTime (upstream takes "now", read
  when each victim is made, in the node's pod order, and again when pickOneNodeForPreemption scores
  each node: nodes tied but for that, twins or not, are upstream's to pick between in Go's map
  order, and the comparison accepts any of them: tests/differential/compare_preemption.clock_tied).
* ``preemption-beyond-node``: required inter-pod anti-affinity (the incoming pod's, or existing
  pods' against it) or hard topology spreading that the victims take part in, so that the dry run's
  RemovePod/AddPod extensions matter (tag ``preempt-beyond-node``); pods nominated to nodes carry no
  labels, and no terminating pod is selected by the spreading.
* ``preemption-nominated-beyond-node``: the same, and pods nominated to nodes (of at least the
  incoming pod's priority) carry labels the incoming pod's anti-affinity or spreading selects
  (upstream adds them with AddPod in the first pass of the filters).
* ``preemption-spread-terminating``: hard spreading that selects terminating pods (upstream's
  PreFilter leaves terminating pods out of the counts, its RemovePod/AddPod do not).
* ``preemption-nominated-scoring`` (not the base): 2-6 nodes alike but for their load and an
  incoming pod that fits on all, a pod of at least its priority nominated to the least loaded node
  (upstream counts nominated pods in the filters, never in the scores).

The device family (``preemption-devices``, DEVICE_FAMILY; ``generate_device_case``, counted apart:
``generate_preemption_cases(seed, count, devices)`` appends them, so the other families' cases do
not change) is compared with the harness's DRA preemption reference ("draPreemption": true,
tests/scheduler_harness/dra_preemption.go: KEP-5690's RemovePod/AddPod over upstream's
DynamicResources and allocator, extended to special claims), since upstream frees no device in its
dry run: 2-8 nodes with node-local ResourceSlices of one driver's GPUs (a model attribute), a
device plugin's ``example.com/gpu`` or neither; one DeviceClass whose ``extendedResourceName`` is
``example.com/gpu`` (KEP-5004); bound pods holding GPUs through their special claim (annotated,
owned by the pod, allocated on its node, reserved for it, named in the pod's
status.extendedResourceClaimStatus, as kube-scheduler leaves it), through a claim of their own (by
name or made from a template), a claim shared with another pod of the node (a victim or a pod that
stays), a claim also reserved for a non-pod consumer, or the device plugin; claims reserved only for
a non-pod consumer, or for nobody; admin-access claims (never counted as allocated); finished pods
still holding claims; nominated pods asking for GPUs; budgets as in the base; and an incoming pod
asking for GPUs by the extended resource name, a claim of its own (sometimes with a CEL selector on
the model), or both, most often more than any node has free (tags DEVICE_TAGS).

Determinism: each case draws from its own ``random.Random(f"{seed}/preemption/{index}")`` (a device
case from ``f"{seed}/preemption-devices/{index}"``).
Victim order among pods of equal priority and start follows the node's pod order (the case's pod
order on both sides); at most 11 pods per node keep Go's sort.Slice an insertion sort (stable).

``PREEMPTION_TAGS`` (base), ``BEYOND_TAGS`` and ``DEVICE_TAGS``: what the differential test demands
at least 20 cases of.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "BEYOND_FAMILIES",
    "BEYOND_FAMILY",
    "BEYOND_TAGS",
    "DEVICE_FAMILY",
    "DEVICE_TAGS",
    "FAMILIES",
    "LOCAL_FAMILY",
    "NOMINATED_BEYOND_FAMILY",
    "NOMINATED_SCORING_FAMILY",
    "OVERLAP_FAMILY",
    "PREEMPTION_TAGS",
    "SPREAD_TERMINATING_FAMILY",
    "UNSET_FAMILY",
    "generate_device_case",
    "generate_preemption_case",
    "generate_preemption_cases",
]

JSON = dict[str, Any]

LOCAL_FAMILY = "preemption"
OVERLAP_FAMILY = "preemption-pdb-overlap"
UNSET_FAMILY = "preemption-start-unset"
BEYOND_FAMILY = "preemption-beyond-node"
NOMINATED_BEYOND_FAMILY = "preemption-nominated-beyond-node"
SPREAD_TERMINATING_FAMILY = "preemption-spread-terminating"
NOMINATED_SCORING_FAMILY = "preemption-nominated-scoring"
# family -> weight
FAMILIES = {
    LOCAL_FAMILY: 10,
    OVERLAP_FAMILY: 3,
    UNSET_FAMILY: 3,
    BEYOND_FAMILY: 4,
    NOMINATED_BEYOND_FAMILY: 2,
    SPREAD_TERMINATING_FAMILY: 2,
    NOMINATED_SCORING_FAMILY: 1,
}
BEYOND_FAMILIES = (BEYOND_FAMILY, NOMINATED_BEYOND_FAMILY, SPREAD_TERMINATING_FAMILY)
BEYOND_TAG = "preempt-beyond-node"

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ZONES = ("zone-a", "zone-b", "zone-c")
GPU = "example.com/gpu"
NAMESPACES = ("default", "team-a")
APPS = ("web", "db", "batch", "cache")
PORT = 8080
MAX_POD_PRIORITY = 2**31 - 1
MIN_POD_PRIORITY = -(2**31)
# Priorities of existing pods: several levels, negative ones, the extremes, the system classes.
PRIORITIES = (-100, -100, 0, 0, 0, 10, 10, 50, 100, 100, 1000, 1000000)
RARE_PRIORITIES = (MIN_POD_PRIORITY, -1, 2000000000, 2000001000, 1000000000)
INCOMING_PRIORITIES = (0, 10, 50, 100, 100, 1000, 1000, 1000000, 2000000000)
EPOCH = datetime(2024, 3, 1, tzinfo=UTC)
DELETED = "2024-04-01T00:00:00Z"
PREEMPTED = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]

PREEMPTION_TAGS = (
    "nodes:2",
    "nodes:many",
    "nodes:twins",
    "node:extended",
    "node:taint",
    "node:unschedulable",
    "node:pods-small",
    "pods:priority-negative",
    "pods:priority-extreme",
    "pods:priority-equal-incoming",
    "pods:start-missing",
    "pods:start-ties",
    "pods:terminating",
    "pods:terminating-preempted",
    "pods:terminal",
    "pods:hostPort",
    "pods:extended",
    "pods:uniform-priority",
    "pdb:matching",
    "pdb:other-namespace",
    "pdb:empty-selector",
    "pdb:nil-selector",
    "pdb:expressions",
    "pdb:disrupted",
    "pdb:allowed-0",
    "pdb:allowed-1",
    "pdb:allowed-2",
    "pdb:overlap",
    "nominated:higher",
    "nominated:equal",
    "nominated:lower",
    "nominated:hostPort",
    "pod:never",
    "pod:nominated",
    "pod:nominated-terminating-victim",
    "pod:hostPort",
    "pod:nodeSelector",
    "pod:tolerations",
    "pod:extended",
    "pod:memory",
    "pod:huge",
    "pod:above-free",
    "pod:matchFields",
    "pod:matchFields-none",
    "pod:pvc-missing",
    "nominated:on-least-loaded",
)
BEYOND_TAGS = (
    BEYOND_TAG,
    "beyond:anti-affinity",
    "beyond:existing-anti-affinity",
    "beyond:spread",
    "beyond:key:hostname",
    "beyond:key:zone",
    "beyond:nominated-labels",
    "beyond:spread-terminating",
)


class _Gen:
    def __init__(self, r: random.Random, family: str) -> None:
        self.r = r
        self.family = family
        self.tags: set[str] = set()
        self.times: set[int] = set()

    def tag(self, *tags: str) -> None:
        self.tags.update(tags)


def _time(seconds: int) -> str:
    return (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _milli(m: int) -> str:
    return f"{m}m" if m % 1000 else str(m // 1000)


def _mebi(mi: int) -> str:
    return f"{mi // 1024}Gi" if mi % 1024 == 0 else f"{mi}Mi"


def _node(g: _Gen, i: int, like: JSON | None = None) -> JSON:
    r = g.r
    name = f"node-{i}"
    if like is not None:  # a twin: the same but for its name
        twin = copy.deepcopy(like)
        twin["metadata"].update(name=name, uid=f"node-uid-{i}")
        twin["metadata"]["labels"][HOSTNAME] = name
        return twin
    labels = {HOSTNAME: name, ZONE: ZONES[i % 3] if r.random() < 0.7 else r.choice(ZONES)}
    cpu = r.choice((2000, 4000, 4000, 8000, 16000))
    mem = r.choice((4096, 8192, 8192, 16384))
    pods = r.choice((110, 110, 110, 110, 8, 6, 4, 3))
    if pods <= 6:
        g.tag("node:pods-small")
    alloc = {"cpu": _milli(cpu), "memory": _mebi(mem), "pods": str(pods)}
    if r.random() < 0.4:
        alloc[GPU] = str(r.choice((1, 2, 4, 8)))
        g.tag("node:extended")
    spec: JSON = {}
    if r.random() < 0.12:
        spec["taints"] = [{"key": "dedicated", "value": r.choice(("a", "b")), "effect": "NoSchedule"}]
        g.tag("node:taint")
    if r.random() < 0.04:
        spec["unschedulable"] = True
        g.tag("node:unschedulable")
    return {
        "metadata": {"name": name, "uid": f"node-uid-{i}", "labels": labels},
        "spec": spec,
        "status": {"capacity": dict(alloc), "allocatable": alloc},
    }


def _alloc(node: Mapping[str, Any], key: str) -> int:
    value = str(node["status"]["allocatable"].get(key, "0"))
    if key == "cpu":
        return int(value[:-1]) if value.endswith("m") else int(value) * 1000
    if key == "memory":
        return int(value[:-2]) * 1024 if value.endswith("Gi") else int(value[:-2])
    return int(value)


def _cpu_of(pod: Mapping[str, Any]) -> int:
    cpu = str(pod["spec"]["containers"][0].get("resources", {}).get("requests", {}).get("cpu", "0"))
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


def _free_cpu(node: Mapping[str, Any], pods: Sequence[JSON]) -> int:
    name = node["metadata"]["name"]
    used = sum(
        _cpu_of(p)
        for p in pods
        if p["spec"].get("nodeName") == name and p["status"]["phase"] not in ("Succeeded", "Failed")
    )
    return max(0, _alloc(node, "cpu") - used)


def _priority(g: _Gen, uniform: int | None) -> int:
    r = g.r
    if uniform is not None:
        return uniform
    if r.random() < 0.05:
        p = r.choice(RARE_PRIORITIES)
        g.tag("pods:priority-extreme")
    else:
        p = r.choice(PRIORITIES)
    if p < 0:
        g.tag("pods:priority-negative")
    return p


def _labels(r: random.Random) -> dict[str, str]:
    labels: dict[str, str] = {}
    if r.random() < 0.85:
        labels["app"] = r.choice(APPS)
    if r.random() < 0.4:
        labels["tier"] = r.choice(("frontend", "backend"))
    return labels


def _start(g: _Gen, ties: bool) -> str | None:
    r = g.r
    if g.family == UNSET_FAMILY and r.random() < 0.5:
        g.tag("pods:start-missing")
        return None
    if ties:
        g.tag("pods:start-ties")
        return _time(r.choice((0, 3600, 7200)))
    while True:
        t = r.randint(0, 30 * 86400)
        if t not in g.times:
            g.times.add(t)
            return _time(t)


def _container(cpu: int, mem: int, gpu: int = 0, port: bool = False) -> JSON:
    req: JSON = {}
    if cpu:
        req["cpu"] = _milli(cpu)
    if mem:
        req["memory"] = _mebi(mem)
    if gpu:
        req[GPU] = str(gpu)
    c: JSON = {"name": "c0", "image": "registry.example.com/app:1"}
    if req:
        c["resources"] = {"requests": req}
        if gpu:
            c["resources"]["limits"] = {GPU: str(gpu)}
    if port:
        c["ports"] = [{"containerPort": 80, "hostPort": PORT, "protocol": "TCP"}]
    return c


def _pod(name: str, ns: str, labels: Mapping[str, str], spec: JSON, status: JSON) -> JSON:
    meta: JSON = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if labels:
        meta["labels"] = dict(labels)
    return {"metadata": meta, "spec": spec, "status": status}


def _terminate(pod: JSON, by_preemption: bool) -> None:
    pod["metadata"]["deletionTimestamp"] = DELETED
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    if by_preemption:
        pod["status"]["conditions"] = copy.deepcopy(PREEMPTED)


def make_node_pods(g: _Gen, node: JSON, pods: list[JSON], uniform: int | None, ties: bool) -> None:
    """Bound pods filling ``node`` to 60-115 % of its cpu (and memory, GPUs, the port), appended."""
    r = g.r
    name = node["metadata"]["name"]
    cpu, mem, gpus = _alloc(node, "cpu"), _alloc(node, "memory"), _alloc(node, GPU)
    limit = min(11, _alloc(node, "pods"))
    target = cpu * r.uniform(0.6, 1.15)
    used = 0
    port_taken = False
    for _ in range(limit if r.random() < 0.9 else r.randint(0, limit)):
        if used >= target:
            break
        want = r.choice((100, 250, 500, 500, 1000, 1000, 2000, 4000))
        want = min(want, max(100, int(target - used) // 100 * 100 or 100))
        used += want
        memory = int(mem * want / cpu * r.uniform(0.5, 1.3)) // 64 * 64 if r.random() < 0.85 else 0
        gpu = r.choice((0, 0, 1, 1, 2)) if gpus else 0
        if gpu:
            g.tag("pods:extended")
        port = not port_taken and r.random() < 0.12
        if port:
            port_taken = True
            g.tag("pods:hostPort")
        spec: JSON = {
            "nodeName": name,
            "priority": _priority(g, uniform),
            "containers": [_container(want, memory, gpu, port)],
        }
        status: JSON = {"phase": "Running"}
        start = _start(g, ties)
        if start is not None:
            status["startTime"] = start
        i = len(pods)
        pod = _pod(f"pod-{i}", r.choice(NAMESPACES), _labels(r), spec, status)
        roll = r.random()
        if roll < 0.04:
            by_preemption = r.random() < 0.5
            _terminate(pod, by_preemption)
            g.tag("pods:terminating", *(("pods:terminating-preempted",) if by_preemption else ()))
        elif roll < 0.07:
            status["phase"] = r.choice(("Succeeded", "Failed"))
            g.tag("pods:terminal")
        pods.append(pod)


def make_cluster(g: _Gen, count: int) -> tuple[list[JSON], list[JSON]]:
    """The nodes and their bound pods; with twins, the second half copies the first, pods included."""
    r = g.r
    uniform = r.choice(PRIORITIES) if r.random() < (0.6 if g.family == UNSET_FAMILY else 0.15) else None
    if uniform is not None:
        g.tag("pods:uniform-priority")
    ties = r.random() < 0.2
    twins = count >= 2 and r.random() < 0.15
    base = count // 2 if twins else count
    nodes = [_node(g, i) for i in range(base)]
    pods: list[JSON] = []
    for node in nodes:
        make_node_pods(g, node, pods, uniform, ties)
    if twins:
        g.tag("nodes:twins")
        for i in range(base, count):
            original = nodes[i % base]
            twin = _node(g, i, like=original)
            nodes.append(twin)
            for p in [p for p in pods if p["spec"]["nodeName"] == original["metadata"]["name"]]:
                copied = copy.deepcopy(p)
                name = f"pod-{len(pods)}"
                copied["metadata"].update(name=name, uid=f"uid-{name}")
                copied["spec"]["nodeName"] = twin["metadata"]["name"]
                pods.append(copied)
    return nodes, pods


# -- PodDisruptionBudgets -------------------------------------------------------------------------


def _pdb_selector(g: _Gen) -> tuple[JSON | None, bool]:
    """(spec.selector or None, whether to include it at all)."""
    r = g.r
    roll = r.random()
    if roll < 0.06:
        g.tag("pdb:nil-selector")
        return None, False
    if roll < 0.12:
        g.tag("pdb:empty-selector")
        return {}, True
    if roll < 0.3:
        g.tag("pdb:expressions")
        op = r.choice(("In", "NotIn", "Exists", "DoesNotExist"))
        expr: JSON = {"key": r.choice(("app", "tier")), "operator": op}
        if op in ("In", "NotIn"):
            expr["values"] = r.sample(APPS, r.randint(1, 2)) if expr["key"] == "app" else ["frontend"]
        return {"matchExpressions": [expr]}, True
    sel: JSON = {"matchLabels": {"app": r.choice(APPS)}}
    if r.random() < 0.2:
        sel["matchLabels"]["tier"] = r.choice(("frontend", "backend"))
    return sel, True


def _matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A PodDisruptionBudget's selector as preemption reads it: nil or empty matches nothing."""
    if not sel:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or ():
        has = e["key"] in labels
        op = e["operator"]
        if op == "In" and not (has and labels[e["key"]] in e["values"]):
            return False
        if op == "NotIn" and has and labels[e["key"]] in e["values"]:
            return False
        if op == "Exists" and not has:
            return False
        if op == "DoesNotExist" and has:
            return False
    return True


def _matching(pdb: Mapping[str, Any], pods: Sequence[JSON]) -> list[JSON]:
    """The bound pods the budget counts (pods without labels are never counted)."""
    return [
        p
        for p in pods
        if p["spec"].get("nodeName")
        and p["metadata"].get("labels")
        and p["metadata"]["namespace"] == pdb["metadata"]["namespace"]
        and _matches(pdb["spec"].get("selector"), p["metadata"]["labels"])
    ]


def _pdb(g: _Gen, i: int, ns: str, selector: JSON | None, allowed: int, pods: Sequence[JSON]) -> JSON:
    r = g.r
    spec: JSON = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    g.tag(f"pdb:allowed-{allowed}")
    status: JSON = {
        "disruptionsAllowed": allowed,
        "currentHealthy": 3,
        "desiredHealthy": 2,
        "expectedPods": 3,
        "observedGeneration": 1,
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": f"pdb-{i}", "namespace": ns, "uid": f"pdb-uid-{i}", "generation": 1},
        "spec": spec,
        "status": status,
    }
    matching = _matching(pdb, pods)
    if matching:
        g.tag("pdb:matching")
    if any(p["metadata"]["namespace"] != ns for p in pods):
        g.tag("pdb:other-namespace")
    if matching and r.random() < 0.3:
        status["disruptedPods"] = {p["metadata"]["name"]: DELETED for p in r.sample(matching, min(len(matching), 2))}
        g.tag("pdb:disrupted")
    return pdb


def make_pdbs(g: _Gen, pods: Sequence[JSON]) -> list[JSON]:
    """Budgets; outside the overlap family no bound pod matches two of them, in it some do."""
    r = g.r
    pdbs: list[JSON] = []
    overlap = g.family == OVERLAP_FAMILY
    if overlap:
        number = r.choice((0, 1, 2))
    elif g.family == UNSET_FAMILY:
        # Budgets that split victims of equal priority into violating and not: one for two apps
        # with no disruption allowed, per namespace.
        number = r.choice((0, 1))
        for ns in NAMESPACES:
            two: JSON = {"matchExpressions": [{"key": "app", "operator": "In", "values": r.sample(APPS, 2)}]}
            pdbs.append(_pdb(g, len(pdbs), ns, two, 0, pods))
    else:
        number = r.choice((0, 0, 1, 1, 1, 2, 2, 3, 4))
    for _ in range(number):
        selector, present = _pdb_selector(g)
        pdb = _pdb(g, len(pdbs), r.choice(NAMESPACES), selector if present else None, r.choice((0, 0, 1, 1, 2)), pods)
        counted = {p["metadata"]["uid"] for b in pdbs for p in _matching(b, pods)}
        if not overlap and any(p["metadata"]["uid"] in counted for p in _matching(pdb, pods)):
            continue  # it would make a pod match two budgets
        pdbs.append(pdb)
    labelled = [p for p in pods if p["spec"].get("nodeName") and p["metadata"].get("labels", {}).get("app")]
    if overlap and labelled:
        # Per namespace, two budgets that count the same pods: one for an app (most often first,
        # with no disruption allowed: upstream then stops at it), one for it and another app (or
        # any app), with one disruption or two allowed.
        for ns in NAMESPACES:
            app, other = r.sample(APPS, 2)
            for p in pods:
                if p["metadata"]["namespace"] == ns and r.random() < 0.8:
                    p["metadata"].setdefault("labels", {})["app"] = r.choice((app, other))
            wide: JSON = r.choice(
                (
                    {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "app", "operator": "In", "values": [app, other]}]},
                )
            )
            pair = [
                _pdb(g, 0, ns, {"matchLabels": {"app": app}}, r.choice((0, 0, 0, 1)), pods),
                _pdb(g, 0, ns, wide, r.choice((1, 1, 1, 2)), pods),
            ]
            if r.random() < 0.2:
                pair.reverse()
            for pdb in pair:
                pdb["metadata"].update(name=f"pdb-{len(pdbs)}", uid=f"pdb-uid-{len(pdbs)}")
                pdbs.append(pdb)
    counts: dict[str, int] = {}
    for b in pdbs:
        for p in _matching(b, pods):
            counts[p["metadata"]["uid"]] = counts.get(p["metadata"]["uid"], 0) + 1
    if any(n > 1 for n in counts.values()):
        g.tag("pdb:overlap")
    return pdbs


# -- pending pods ---------------------------------------------------------------------------------


def make_nominated_pods(g: _Gen, nodes: Sequence[JSON], incoming: int) -> list[JSON]:
    r = g.r
    out: list[JSON] = []
    if r.random() >= (0.9 if g.family == NOMINATED_BEYOND_FAMILY else 0.4):
        return out
    for j in range(r.randint(1, 3)):
        node = r.choice(nodes)["metadata"]["name"]
        roll = r.random()
        if roll < 0.4 or (j == 0 and g.family == NOMINATED_BEYOND_FAMILY):
            priority = incoming + r.choice((1, 100)) if incoming < MAX_POD_PRIORITY - 100 else incoming
            g.tag("nominated:higher" if priority > incoming else "nominated:equal")
        elif roll < 0.6:
            priority = incoming
            g.tag("nominated:equal")
        else:
            priority = incoming - r.choice((1, 100))
            g.tag("nominated:lower")
        port = r.random() < 0.15
        if port:
            g.tag("nominated:hostPort")
        cpu = r.choice((250, 500, 1000, 2000))
        spec: JSON = {"priority": priority, "containers": [_container(cpu, r.choice((0, 256, 1024)), 0, port)]}
        # Labels matter only to inter-pod terms: the beyond-node families set them (_beyond).
        labels = {"app": r.choice(APPS)} if g.family not in BEYOND_FAMILIES and r.random() < 0.5 else {}
        status = {"phase": "Pending", "nominatedNodeName": node}
        out.append(_pod(f"nominated-{j}", r.choice(NAMESPACES), labels, spec, status))
    return out


def make_incoming(g: _Gen, nodes: Sequence[JSON], pods: list[JSON]) -> tuple[JSON, int]:
    r = g.r
    priority = r.choice(INCOMING_PRIORITIES if g.family != OVERLAP_FAMILY else INCOMING_PRIORITIES[-4:])
    if any(p["spec"].get("priority") == priority for p in pods):
        g.tag("pods:priority-equal-incoming")
    target = r.choice(nodes)
    roll = r.random()
    cpu = mem = gpu = 0
    if roll < 0.05:
        cpu = max(_alloc(n, "cpu") for n in nodes) + 1000
        g.tag("pod:huge")
    elif roll < 0.2:
        mem = int(_alloc(target, "memory") * r.uniform(0.3, 1.0)) // 64 * 64 or 64
        cpu = r.choice((0, 100))
        g.tag("pod:memory")
    elif roll < 0.3 and _alloc(target, GPU):
        gpu = r.randint(1, _alloc(target, GPU))
        cpu = r.choice((0, 250))
        g.tag("pod:extended")
    elif (g.family == UNSET_FAMILY and roll < 0.7) or (g.family == OVERLAP_FAMILY and roll < 0.4):
        # Most of the largest node: all or most of its pods are victims, violating budgets and not
        # (what these families are about).
        cpu = int(max(_alloc(n, "cpu") for n in nodes) * r.uniform(0.85, 1.0)) // 100 * 100
    elif roll < 0.65:
        # Just more than the most free cpu of any node: only evictions make room.
        most = max(_alloc(n, "cpu") for n in nodes)
        cpu = min(most, max(_free_cpu(n, pods) for n in nodes) + r.choice((100, 500)))
        mem = r.choice((0, 0, 128, 512))
        g.tag("pod:above-free")
    else:
        cpu = int(_alloc(target, "cpu") * r.uniform(0.3, 1.0)) // 100 * 100 or 100
        mem = r.choice((0, 0, 128, 512))
    port = r.random() < 0.2
    if port:
        g.tag("pod:hostPort")
    spec: JSON = {"priority": priority, "containers": [_container(cpu, mem, gpu, port)]}
    if r.random() < 0.08:
        spec["preemptionPolicy"] = "Never"
        g.tag("pod:never")
    else:
        spec["preemptionPolicy"] = "PreemptLowerPriority"
    if r.random() < 0.15:
        spec["nodeSelector"] = {ZONE: r.choice(ZONES)}
        g.tag("pod:nodeSelector")
    if any(n["spec"].get("taints") for n in nodes) and r.random() < 0.5:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
        g.tag("pod:tolerations")
    roll = r.random()
    names: list[str] = []
    if roll < 0.05:
        names = [n["metadata"]["name"] for n in r.sample(list(nodes), max(1, len(nodes) // 2))]
        g.tag("pod:matchFields")
    elif roll < 0.07:
        names = ["node-gone"]
        g.tag("pod:matchFields-none")
    if names:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": names}]}
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    if r.random() < 0.02:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "missing"}}]
        g.tag("pod:pvc-missing")
    status: JSON = {"phase": "Pending"}
    if r.random() < 0.1:
        nominated = r.choice(nodes)["metadata"]["name"]
        status["nominatedNodeName"] = nominated
        g.tag("pod:nominated")
        lower = [
            p
            for p in pods
            if p["spec"]["nodeName"] == nominated
            and p["spec"]["priority"] < priority
            and p["status"]["phase"] == "Running"
        ]
        if lower and r.random() < 0.6:
            _terminate(r.choice(lower), True)
            g.tag("pod:nominated-terminating-victim", "pods:terminating", "pods:terminating-preempted")
    labels = {"app": r.choice(APPS)} if g.family in BEYOND_FAMILIES or r.random() < 0.5 else {}
    return _pod("incoming", r.choice(NAMESPACES), labels, spec, status), priority


# -- beyond the node ------------------------------------------------------------------------------


def _beyond(g: _Gen, pod: JSON, pods: list[JSON], nominated: list[JSON]) -> None:
    """Inter-pod terms the victims take part in (and, by family, nominated pods and terminating pods)."""
    r = g.r
    g.tag(BEYOND_TAG)
    app = pod["metadata"]["labels"]["app"]
    ns = pod["metadata"]["namespace"]
    key = r.choice((HOSTNAME, HOSTNAME, ZONE))
    g.tag("beyond:key:hostname" if key == HOSTNAME else "beyond:key:zone")
    if g.family == SPREAD_TERMINATING_FAMILY:
        mode = "spread"
    elif g.family == NOMINATED_BEYOND_FAMILY:
        mode = r.choice(("anti", "spread"))  # what nominated pods' labels take part in
    else:
        mode = r.choice(("anti", "anti", "existing", "existing", "spread", "spread"))
    selected = app  # the label value the incoming pod's own term selects
    if mode == "anti":
        # The incoming pod's required anti-affinity against pods some of which are victims.
        selected = r.choice(APPS)
        pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": selected}}, "topologyKey": key}
            ]
        }
        g.tag("beyond:anti-affinity")
        for p in pods:
            if p["metadata"]["namespace"] == ns and r.random() < 0.3:
                p["metadata"].setdefault("labels", {})["app"] = selected
    elif mode == "existing":
        # Existing pods' required anti-affinity against the incoming pod.
        for p in pods:
            if r.random() < 0.25:
                term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, "namespaces": [ns]}
                p["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        g.tag("beyond:existing-anti-affinity")
    else:
        pod["spec"]["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
        g.tag("beyond:spread")
        for p in pods:
            if p["metadata"]["namespace"] == ns and r.random() < 0.35:
                p["metadata"].setdefault("labels", {})["app"] = app
        selects = [
            p for p in pods if p["metadata"]["namespace"] == ns and p["metadata"].get("labels", {}).get("app") == app
        ]
        terminating = [p for p in selects if p["metadata"].get("deletionTimestamp")]
        if g.family == SPREAD_TERMINATING_FAMILY:
            bound = [
                p for p in selects if p["status"]["phase"] == "Running" and not p["metadata"].get("deletionTimestamp")
            ]
            for p in r.sample(bound, min(len(bound), r.randint(1, 3))):
                _terminate(p, r.random() < 0.5)
            g.tag("beyond:spread-terminating", "pods:terminating")
        else:
            for p in terminating:  # the spreading selects no terminating pod
                p["metadata"]["labels"]["app"] = next(a for a in APPS if a != app)
    if g.family == NOMINATED_BEYOND_FAMILY:
        for p in nominated:
            p["metadata"]["namespace"] = ns
            p["metadata"]["labels"] = {"app": selected}
        if nominated:
            g.tag("beyond:nominated-labels")


def _nominated_scoring(g: _Gen) -> tuple[list[JSON], list[JSON], JSON]:
    """Nodes alike but for their load, the least loaded one with a pod of at least the incoming
    pod's priority nominated to it, and an incoming pod that fits everywhere."""
    r = g.r
    nodes: list[JSON] = []
    pods: list[JSON] = []
    for i in range(r.randint(2, 6)):
        alloc = {"cpu": "8", "memory": "16Gi", "pods": "110"}
        labels = {HOSTNAME: f"node-{i}", ZONE: ZONES[i % 3]}
        nodes.append(
            {
                "metadata": {"name": f"node-{i}", "uid": f"node-uid-{i}", "labels": labels},
                "spec": {},
                "status": {"capacity": dict(alloc), "allocatable": alloc},
            }
        )
        for _ in range(i):
            spec = {"nodeName": f"node-{i}", "priority": 0, "containers": [_container(500, 1024)]}
            name = f"pod-{len(pods)}"
            status = {"phase": "Running", "startTime": _start(g, False)}
            pods.append(_pod(name, r.choice(NAMESPACES), _labels(r), spec, status))
    priority = r.choice(INCOMING_PRIORITIES[:-1])
    spec = {"priority": priority + r.choice((0, 1, 100)), "containers": [_container(4000, 8192)]}
    status = {"phase": "Pending", "nominatedNodeName": "node-0"}
    pods.append(_pod("nominated-0", r.choice(NAMESPACES), {}, spec, status))
    g.tag("nominated:on-least-loaded")
    spec = {"priority": priority, "preemptionPolicy": "PreemptLowerPriority", "containers": [_container(500, 512)]}
    return nodes, pods, _pod("incoming", r.choice(NAMESPACES), {}, spec, {"phase": "Pending"})


def generate_preemption_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/preemption/{index}")
    family = r.choices(list(FAMILIES), weights=list(FAMILIES.values()))[0]
    g = _Gen(r, family)
    if family == NOMINATED_SCORING_FAMILY:
        nodes, pods, pod = _nominated_scoring(g)
        return {
            "name": f"{family}-{index:05d}",
            "family": family,
            "tags": sorted(g.tags),
            "preempt": True,
            "nodes": nodes,
            "pods": pods,
            "namespaces": [
                {"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}} for ns in NAMESPACES
            ],
            "podDisruptionBudgets": [],
            "pod": pod,
        }
    count = r.choice((2, 2, 3, 3, 4, 4, 5, 6, 7, 8, 10, 12, 16, 20, 25, 30))
    if count == 2:
        g.tag("nodes:2")
    if count >= 16:
        g.tag("nodes:many")
    nodes, pods = make_cluster(g, count)
    pod, priority = make_incoming(g, nodes, pods)
    nominated = make_nominated_pods(g, nodes, priority)
    if family in BEYOND_FAMILIES:
        _beyond(g, pod, pods, nominated)
    pdbs = make_pdbs(g, pods)
    return {
        "name": f"{family}-{index:05d}",
        "family": family,
        "tags": sorted(g.tags),
        "preempt": True,
        "nodes": nodes,
        "pods": pods + nominated,
        "namespaces": [{"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}} for ns in NAMESPACES],
        "podDisruptionBudgets": pdbs,
        "pod": pod,
    }


# -- devices (the DRA preemption reference) -------------------------------------------------------

DEVICE_FAMILY = "preemption-devices"
DRIVER = "gpu.example.com"
DEVICE_CLASS = "gpu.example.com"
MODELS = ("a100", "t4")
SPECIAL_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
NODE_CONSUMER_UID = "node-consumer-uid"
DEVICE_TAGS = (
    "dra:slices",
    "dra:device-plugin-node",
    "dra:no-slices",
    "dra:special-claim",
    "dra:claim",
    "dra:claim-template",
    "dra:holds-both",
    "dra:nominated-gpu",
    "dra:claim-shared",
    "dra:claim-shared-stays",
    "dra:claim-shared-victims",
    "dra:claim-non-pod-consumer",
    "dra:claim-non-pod-only",
    "dra:claim-unreserved",
    "dra:admin-access",
    "dra:terminal-holding",
    "dra:device-plugin-pods",
    "dra:pod-extended",
    "dra:pod-claim",
    "dra:pod-both",
    "dra:pod-selector",
    "dra:pod-above-free",
    "dra:pod-too-many",
    "dra:pod-cpu-too",
)


class _Devices:
    """The case's DRA objects: one DeviceClass for the driver's GPUs (serving the extended resource
    name ``GPU``, KEP-5004), node-local ResourceSlices, and the claims of bound pods."""

    def __init__(self, g: _Gen) -> None:
        self.g, self.r = g, g.r
        self.slices: list[JSON] = []
        self.claims: list[JSON] = []
        self.free: dict[str, list[tuple[str, str]]] = {}  # node -> free (device, model)
        self.total: dict[str, int] = {}
        self.serial = 0
        self.classes = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DEVICE_CLASS, "uid": "uid-class-gpu", "resourceVersion": "1"},
                "spec": {
                    "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}],
                    "extendedResourceName": GPU,
                },
            }
        ]

    def add_slice(self, node: str, n: int) -> None:
        devices: list[JSON] = []
        free: list[tuple[str, str]] = []
        for i in range(n):
            model = self.r.choice(MODELS)
            devices.append({"name": f"gpu-{i}", "attributes": {"model": {"string": model}}})
            free.append((f"gpu-{i}", model))
        self.slices.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu", "uid": f"uid-slice-{node}", "resourceVersion": "1"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        )
        self.free[node], self.total[node] = free, n

    def claim(self, name: str, ns: str, request: str, count: int, node: str, consumers: list[JSON]) -> JSON | None:
        """A claim of ``count`` of the node's free devices, allocated there and reserved for
        ``consumers`` (None: not enough free devices)."""
        free = self.free.get(node, [])
        if count > len(free):
            return None
        taken = [free.pop(self.r.randrange(len(free))) for _ in range(count)]
        self.serial += 1
        claim: JSON = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-claim-{self.serial}",
                "resourceVersion": "1",
                "finalizers": [DELETE_PROTECTION],
            },
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request,
                            "exactly": {
                                "deviceClassName": DEVICE_CLASS,
                                "allocationMode": "ExactCount",
                                "count": count,
                            },
                        }
                    ]
                }
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [{"request": request, "driver": DRIVER, "pool": node, "device": d} for d, _ in taken]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    },
                }
            },
        }
        if consumers:
            claim["status"]["reservedFor"] = consumers
        self.claims.append(claim)
        return claim


def _consumer(pod: Mapping[str, Any]) -> JSON:
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def _request_name(container: Mapping[str, Any]) -> str:
    """The special claim's request for the container's GPUs, as kube-scheduler names it
    (createResourceRequestAndMappings: container index, then the name's index among its requests)."""
    keys = sorted(container["resources"]["requests"])
    return f"container-0-request-{keys.index(GPU)}"


def _hold_special(d: _Devices, pod: JSON, count: int) -> bool:
    """The pod's GPUs through its special claim (KEP-5004), as kube-scheduler leaves it bound."""
    c = pod["spec"]["containers"][0]
    res = c.setdefault("resources", {})
    res.setdefault("requests", {})[GPU] = str(count)
    res.setdefault("limits", {})[GPU] = str(count)
    request = _request_name(c)
    meta = pod["metadata"]
    name = f"{meta['name']}-extended-resources-{d.r.randrange(36**5):05x}"
    claim = d.claim(name, meta["namespace"], request, count, pod["spec"]["nodeName"], [_consumer(pod)])
    if claim is None:
        del res["requests"][GPU], res["limits"][GPU]
        return False
    claim["metadata"]["annotations"] = {SPECIAL_ANNOTATION: "true"}
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
    ]
    pod["status"]["extendedResourceClaimStatus"] = {
        "requestMappings": [{"containerName": c["name"], "resourceName": GPU, "requestName": request}],
        "resourceClaimName": name,
    }
    return True


def _hold_claim(d: _Devices, pod: JSON, count: int, template: bool = False) -> JSON | None:
    """The pod's GPUs through a claim of its own (spec.resourceClaims), allocated and reserved for
    it; ``template``: made for it from a ResourceClaimTemplate (named in status.resourceClaimStatuses)."""
    meta = pod["metadata"]
    name = f"{meta['name']}-gpu-{d.r.randrange(36**5):05x}" if template else f"{meta['name']}-gpu"
    claim = d.claim(name, meta["namespace"], "gpu", count, pod["spec"]["nodeName"], [_consumer(pod)])
    if claim is None:
        return None
    if not template:
        _uses(pod, claim)
        return claim
    entries = pod["spec"].setdefault("resourceClaims", [])
    entry = f"gpu-{len(entries)}"
    entries.append({"name": entry, "resourceClaimTemplateName": "gpu-template"})
    pod["status"].setdefault("resourceClaimStatuses", []).append({"name": entry, "resourceClaimName": name})
    claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": entry}
    claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
    ]
    return claim


def _uses(pod: JSON, claim: Mapping[str, Any]) -> None:
    entries = pod["spec"].setdefault("resourceClaims", [])
    entries.append({"name": f"gpu-{len(entries)}", "resourceClaimName": claim["metadata"]["name"]})


def _device_pods(g: _Gen, d: _Devices, node: JSON, pods: list[JSON]) -> None:
    """Bound pods on ``node`` holding its GPUs by special claims, claims of their own or shared
    claims (or by the device plugin, on a device-plugin node)."""
    r = g.r
    name = node["metadata"]["name"]
    plugin = _alloc(node, GPU)
    own: list[tuple[JSON, JSON]] = []  # (pod, claim) of ordinary claims on this node
    for _ in range(r.randint(1, 7)):
        i = len(pods)
        cpu = r.choice((100, 250, 500, 1000))
        spec: JSON = {"nodeName": name, "priority": _priority(g, None), "containers": [_container(cpu, 256)]}
        status: JSON = {"phase": "Running", "startTime": _start(g, False)}
        pod = _pod(f"pod-{i}", r.choice(NAMESPACES), _labels(r), spec, status)
        pods.append(pod)
        roll = r.random()
        if roll < 0.03:
            _terminate(pod, r.random() < 0.5)
            g.tag("pods:terminating")
        elif roll < 0.06:
            status["phase"] = "Succeeded"  # finished, its claims not released yet
            g.tag("pods:terminal")
        if plugin:
            want = r.choice((0, 1, 1, 2))
            if 0 < want <= plugin:
                plugin -= want
                spec["containers"][0] = _container(cpu, 256, want)
                g.tag("dra:device-plugin-pods")
            continue
        if name not in d.free:
            continue
        roll = r.random()
        count = r.choice((1, 1, 1, 2, 2, 3))
        if roll < 0.4:
            if _hold_special(d, pod, count):
                g.tag("dra:special-claim")
                if r.random() < 0.15 and _hold_claim(d, pod, 1) is not None:
                    g.tag("dra:holds-both")
        elif roll < 0.65:
            template = r.random() < 0.3
            claim = _hold_claim(d, pod, count, template)
            if claim is not None:
                if not template:  # (a claim made from a template is its pod's alone)
                    own.append((pod, claim))
                g.tag("dra:claim-template" if template else "dra:claim")
        elif roll < 0.85 and own:
            _, claim = r.choice(own)  # a claim shared with an earlier pod of this node
            pod["metadata"]["namespace"] = claim["metadata"]["namespace"]
            _uses(pod, claim)
            claim["status"]["reservedFor"].append(_consumer(pod))
            g.tag("dra:claim-shared")
    holders = [p for p in pods if p["spec"].get("nodeName") == name]
    if name in d.total and holders and r.random() < 0.15:
        # An admin-access claim on one of the node's devices: never counted as allocated, so its
        # removal frees nothing (upstream's allocatedDevices skips it; draxr's tracker too).
        pod = r.choice(holders)
        claim = d.claim(f"{pod['metadata']['name']}-admin", pod["metadata"]["namespace"], "gpu", 0, name, [])
        if claim is not None:
            device = f"gpu-{r.randrange(d.total[name])}"
            claim["spec"]["devices"]["requests"][0]["exactly"].update(count=1, adminAccess=True)
            claim["status"]["allocation"]["devices"]["results"] = [
                {"request": "gpu", "driver": DRIVER, "pool": name, "device": device, "adminAccess": True}
            ]
            claim["status"]["reservedFor"] = [_consumer(pod)]
            _uses(pod, claim)
            g.tag("dra:admin-access")
    for _, claim in own:
        if r.random() < 0.12:
            claim["status"]["reservedFor"].append(
                {"resource": "nodes", "name": name, "uid": NODE_CONSUMER_UID}  # a non-pod consumer
            )
            g.tag("dra:claim-non-pod-consumer")
    if name in d.free and d.free[name] and r.random() < 0.2:
        consumer = {"resource": "nodes", "name": name, "uid": NODE_CONSUMER_UID}
        if d.claim(f"blocker-{name}", "default", "gpu", 1, name, [consumer]) is not None:
            g.tag("dra:claim-non-pod-only")
    unreserved = name in d.free and d.free[name] and r.random() < 0.1
    if unreserved and d.claim(f"unreserved-{name}", "default", "gpu", 1, name, []) is not None:
        g.tag("dra:claim-unreserved")


def _free_gpus(d: _Devices, node: Mapping[str, Any], pods: Sequence[JSON]) -> int:
    """GPUs free on ``node``: its DRA devices no claim holds, or its device plugin's not requested."""
    name = node["metadata"]["name"]
    if name in d.total:
        return len(d.free[name])
    used = sum(
        int(p["spec"]["containers"][0].get("resources", {}).get("requests", {}).get(GPU, 0))
        for p in pods
        if p["spec"].get("nodeName") == name and p["status"]["phase"] not in ("Succeeded", "Failed")
    )
    return max(0, _alloc(node, GPU) - used)


def _device_incoming(g: _Gen, d: _Devices, nodes: Sequence[JSON], pods: list[JSON]) -> tuple[JSON, list[JSON]]:
    """A pod asking for GPUs (by the extended resource name, a claim, or both) that fits only by
    evicting (or not even so, or without), and its own claim if it has one."""
    r = g.r
    priority = r.choice(INCOMING_PRIORITIES)
    # The target: most often a node whose GPUs are partly taken (by the DRA driver, or the
    # device plugin), so that only evictions make room.
    dra = [n for n in nodes if n["metadata"]["name"] in d.total]
    busy = [n for n in dra if len(d.free[n["metadata"]["name"]]) < d.total[n["metadata"]["name"]]]
    plugin = [n for n in nodes if _alloc(n, GPU)]
    most = max((_free_gpus(d, n, pods) for n in nodes), default=0)
    # (best: a node with more GPUs than any node has free)
    exceeding = [n for n in busy if d.total[n["metadata"]["name"]] > most]
    target = r.choice(exceeding or busy or dra or plugin or list(nodes))
    if plugin and r.random() < 0.2:
        target = r.choice(plugin)
    tname = target["metadata"]["name"]
    total = d.total.get(tname) or _alloc(target, GPU)
    free = len(d.free[tname]) if tname in d.total else total
    roll = r.random()
    if roll < 0.08:
        want = max([*d.total.values(), *(_alloc(n, GPU) for n in nodes), 0]) + 1
        g.tag("dra:pod-too-many")
    elif roll < 0.15 or free >= total:
        want = r.randint(1, max(1, total))
    else:
        # More than any node has free, when the target allows: only evictions make room.
        want = r.randint(most + 1, total) if most < total else r.randint(free + 1, total)
        g.tag("dra:pod-above-free")
    cpu = r.choice((100, 250, 500))
    if r.random() < 0.15:
        cpu = min(_alloc(target, "cpu"), _free_cpu(target, pods) + r.choice((100, 1000)))
        g.tag("dra:pod-cpu-too")
    mode = r.choices(("extended", "claim", "both"), weights=(5, 3, 2))[0]
    claimed = want
    extended = 0
    if mode == "both" and want >= 2:
        extended = r.randint(1, want - 1)
        claimed = want - extended
    elif mode == "extended" or (mode == "both" and want < 2):
        mode, extended, claimed = "extended", want, 0
    g.tag(f"dra:pod-{mode}")
    spec: JSON = {"priority": priority, "containers": [_container(cpu, 512, extended)]}
    spec["preemptionPolicy"] = "Never" if r.random() < 0.05 else "PreemptLowerPriority"
    if spec["preemptionPolicy"] == "Never":
        g.tag("pod:never")
    if r.random() < 0.1:
        spec["nodeSelector"] = {ZONE: r.choice(ZONES)}
        g.tag("pod:nodeSelector")
    own: list[JSON] = []
    ns = r.choice(NAMESPACES)
    if claimed:
        exactly: JSON = {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount", "count": claimed}
        if r.random() < 0.25:
            exactly["selectors"] = [
                {"cel": {"expression": f'device.attributes["{DRIVER}"].model == "{r.choice(MODELS)}"'}}
            ]
            g.tag("dra:pod-selector")
        own.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": "incoming-gpu",
                    "namespace": ns,
                    "uid": "uid-claim-incoming",
                    "resourceVersion": "1",
                },
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            }
        )
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "incoming-gpu"}]
    return _pod("incoming", ns, {"app": r.choice(APPS)} if r.random() < 0.5 else {}, spec, {"phase": "Pending"}), own


def generate_device_case(seed: int, index: int) -> JSON:
    """A case of the device family: preemption for DRA devices, compared with the harness's DRA
    preemption reference ("draPreemption": true; tests/scheduler_harness/dra_preemption.go)."""
    r = random.Random(f"{seed}/{DEVICE_FAMILY}/{index}")
    g = _Gen(r, DEVICE_FAMILY)
    d = _Devices(g)
    count = r.choice((2, 2, 3, 3, 4, 4, 5, 6, 8))
    if count == 2:
        g.tag("nodes:2")
    nodes: list[JSON] = []
    pods: list[JSON] = []
    for i in range(count):
        name = f"node-{i}"
        alloc = {"cpu": _milli(r.choice((4000, 8000, 16000))), "memory": "32Gi", "pods": "110"}
        roll = r.random()
        if roll < 0.15:
            alloc[GPU] = str(r.choice((2, 4, 8)))
            g.tag("dra:device-plugin-node")
        elif roll < 0.25:
            g.tag("dra:no-slices")
        else:
            d.add_slice(name, r.choice((1, 2, 2, 4, 4, 8)))
            g.tag("dra:slices")
        labels = {HOSTNAME: name, ZONE: ZONES[i % 3]}
        node = {
            "metadata": {"name": name, "uid": f"node-uid-{i}", "labels": labels},
            "spec": {},
            "status": {"capacity": dict(alloc), "allocatable": alloc},
        }
        nodes.append(node)
        _device_pods(g, d, node, pods)
    pod, own = _device_incoming(g, d, nodes, pods)
    priorities = {p["metadata"]["uid"]: p["spec"]["priority"] for p in pods}
    for claim in d.claims:
        users = [priorities[c["uid"]] for c in claim["status"].get("reservedFor") or () if c["resource"] == "pods"]
        if len(users) > 1:  # shared: with a pod that stays, or by victims only
            stays = max(users) >= pod["spec"]["priority"]
            g.tag("dra:claim-shared-stays" if stays else "dra:claim-shared-victims")
    for p in pods:
        holds = p["status"].get("extendedResourceClaimStatus") or p["spec"].get("resourceClaims")
        if holds and p["status"]["phase"] == "Succeeded":
            g.tag("dra:terminal-holding")
    nominated = make_nominated_pods(g, nodes, pod["spec"]["priority"])
    for p in nominated:
        if r.random() < 0.4:  # (upstream's filters count them, but no device is theirs yet)
            c = p["spec"]["containers"][0]
            n = str(r.choice((1, 2)))
            c.setdefault("resources", {}).setdefault("requests", {})[GPU] = n
            c["resources"].setdefault("limits", {})[GPU] = n
            g.tag("dra:nominated-gpu")
    pdbs = make_pdbs(g, pods)
    return {
        "name": f"{DEVICE_FAMILY}-{index:05d}",
        "family": DEVICE_FAMILY,
        "tags": sorted(g.tags),
        "preempt": True,
        "draPreemption": True,
        "nodes": nodes,
        "pods": pods + nominated,
        "namespaces": [{"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}}} for ns in NAMESPACES],
        "podDisruptionBudgets": pdbs,
        "deviceClasses": d.classes,
        "resourceSlices": d.slices,
        "resourceClaims": d.claims + own,
        "pod": pod,
    }


def generate_preemption_cases(seed: int, count: int, devices: int = 0) -> list[JSON]:
    """``count`` cases of the weighted families, then ``devices`` of the device family."""
    cases = [generate_preemption_case(seed, i) for i in range(count)]
    return cases + [generate_device_case(seed, i) for i in range(devices)]
