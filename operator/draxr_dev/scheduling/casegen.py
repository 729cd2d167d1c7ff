"""Seeded, deterministic scheduling cases for the differential test against kube-scheduler's Go plugins.

``generate(seed, count)`` returns ``count`` cases in the format of draxr_dev.scheduling (see the
package docstring): a small cluster (3-30 nodes, 0-60 bound pods, namespaces, Services,
ReplicationControllers, ReplicaSets and StatefulSets) and one pod to place. Name spaces are small
on purpose (four namespaces, a handful of apps, label values, taint keys, ports and images) so that
selectors, ports, taints and topology domains collide. Each case has a family that raises the odds
of one feature area (FOCUS) on top of a common mix, so every feature shows up often.

Everything stays out of DRA and storage, and requests only cpu and memory: no ResourceClaims, no
extended resources (the claim family, casegen_claims, adds them), no volumes (casegen_volumes);
casegen_mixed mixes them all with ephemeral-storage, hugepages, overhead and pod-level resources,
and builds the clusters of 100-500 nodes.

``feature_tally(cases)`` counts cases per tag; ``REQUIRED_TAGS`` is what the differential test
demands at least 20 cases of (at 2,000 cases). Tags are added where the generator decides to use a
feature, plus a few from scanning the finished case (``scan_tags``: the system-default spreading
selectors that match the pod, the first pod of an affinity group).

``as_stored(case)`` returns the case with every pod as kube-apiserver 1.37.2 stores it on create
(pkg/registry/core/pod PrepareForCreate, as far as scheduling sees it): for each pod (anti-)affinity
term with a labelSelector, ``key In [value]`` for each matchLabelKeys key and ``key NotIn [value]``
for each mismatchLabelKeys key the pod has as a label are appended to
labelSelector.matchExpressions (MatchLabelKeysInPodAffinity, GA); the same for topology spread
matchLabelKeys (MatchLabelKeysInPodTopologySpreadSelectorMerge, on by default). The field lists are
kept. The Go harness applies upstream's own code; tests check that both agree.

Pure: no I/O; the same seed gives the same cases (each case draws from its own
``random.Random(f"{seed}/{index}")``). ``python -m draxr_dev.scheduling.casegen --count 2000
--tally`` prints the coverage.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "FAMILIES",
    "REQUIRED_TAGS",
    "as_stored",
    "feature_tally",
    "format_tally",
    "generate",
    "generate_case",
    "scan_tags",
    "selector_matches",
]

JSON = dict[str, Any]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
RACK = "example.com/rack"
DISK = "example.com/disk"
GPUS = "example.com/gpu-count"  # integer values: the keys of Gt / Lt
POOL = "node-pool"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

ZONES = ("zone-a", "zone-b", "zone-c")
REGION_OF = {"zone-a": "region-1", "zone-b": "region-1", "zone-c": "region-2"}
RACKS = ("rack-0", "rack-1", "rack-2", "rack-3")
DISKS = ("ssd", "hdd")
POOLS = ("general", "highmem", "batch")
# Topology keys of spread constraints and affinity terms (any node label, some nodes lack some).
TOPOLOGY_KEYS = (HOSTNAME, ZONE, REGION, RACK, DISK, POOL)
SHORT = {HOSTNAME: "hostname", ZONE: "zone", REGION: "region", RACK: "rack", DISK: "disk", POOL: "pool", GPUS: "gpus"}

NAMESPACES = ("default", "team-a", "team-b", "batch")
NAMESPACE_LABELS = {
    "default": {"env": "prod"},
    "team-a": {"team": "a", "env": "prod"},
    "team-b": {"team": "b", "env": "dev"},
    "batch": {"env": "dev"},
}
APPS = ("web", "db", "cache", "batch")
TIERS = ("frontend", "backend")
VERSIONS = ("v1", "v2")
HASHES = ("6d4f8", "7c9b2")
TAINT_KEYS = ("dedicated", "gpu", "spot", "maintenance")
TAINT_VALUES = ("", "true", "a", "b")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
HOST_PORTS = (80, 443, 8080, 9000)
HOST_IPS = ("", "", "", "0.0.0.0", "10.0.0.1", "10.0.0.2")

MB = 1024 * 1024
# (name in pod specs, size): sizes around ImageLocality's thresholds (23 MB per image, 1000 MB per
# container); names without a tag are ":latest" to the plugin; one name differs in the registry.
IMAGES = (
    ("registry.example.com/web:1.0", 310 * MB),
    ("registry.example.com/web:2.0", 330 * MB),
    ("registry.example.com/db:15", 1500 * MB),
    ("registry.example.com/cache", 90 * MB),
    ("registry.example.com/tiny:1", 8 * MB),
    ("registry.example.com/ml:3", 3200 * MB),
    ("docker.io/library/busybox:1.36", 4 * MB),
    ("registry.example.com/batch:7", 640 * MB),
)

CPU_ALLOC = ("1", "2", "4", "8", "16", "3500m")
MEM_ALLOC = ("2Gi", "4Gi", "8Gi", "16Gi", "32Gi", "7800Mi")
PODS_ALLOC = ("110", "110", "110", "32", "8", "4")
CPU_REQ = ("50m", "100m", "250m", "500m", "1", "1500m", "2")
MEM_REQ = ("64Mi", "128Mi", "256Mi", "512Mi", "1Gi", "2Gi", "3Gi")

# Base probabilities; each family raises some (FOCUS).
BASE = {
    "hostname_missing": 0.05,
    "hostname_differs": 0.04,
    "taints": 0.35,
    "unschedulable": 0.06,
    "images": 0.6,
    "pod_affinity_existing": 0.12,
    "pod_anti_existing": 0.15,
    "pod_preferred_existing": 0.15,
    "terminating": 0.06,
    "terminal": 0.03,
    "missing_node": 0.02,
    "existing_ports": 0.15,
    "controllers": 0.4,
    "node_selector": 0.15,
    "node_affinity_required": 0.2,
    "node_affinity_preferred": 0.2,
    "tolerations": 0.35,
    "requests": 0.85,
    "large_requests": 0.1,
    "init_containers": 0.08,
    "host_ports": 0.15,
    "pod_images": 0.7,
    "spread": 0.3,
    "affinity_required": 0.15,
    "affinity_preferred": 0.15,
    "anti_required": 0.15,
    "anti_preferred": 0.15,
    "first_pod": 0.04,
}
FOCUS: dict[str, dict[str, float]] = {
    "mixed": {},
    "spread": {"spread": 0.97, "controllers": 0.5},
    "default-spread": {"spread": 0.0, "controllers": 0.97, "pod_affinity_existing": 0.05},
    "pod-affinity": {
        "affinity_required": 0.55,
        "affinity_preferred": 0.55,
        "anti_required": 0.45,
        "anti_preferred": 0.45,
        "first_pod": 0.15,
    },
    "existing-affinity": {"pod_affinity_existing": 0.6, "pod_anti_existing": 0.6, "pod_preferred_existing": 0.6},
    "node-affinity": {"node_selector": 0.5, "node_affinity_required": 0.8, "node_affinity_preferred": 0.7},
    "taints": {"taints": 0.9, "tolerations": 0.85, "unschedulable": 0.25},
    "resources": {"requests": 1.0, "large_requests": 0.4, "init_containers": 0.3},
    "ports": {"host_ports": 0.9, "existing_ports": 0.7},
    "images": {"images": 0.95, "pod_images": 1.0},
}
FAMILIES = tuple(FOCUS)
FAMILY_WEIGHTS = (4, 3, 2, 3, 2, 2, 2, 1, 1, 1)

# Every feature the differential test must see in at least 20 cases (at 2,000 cases).
REQUIRED_TAGS = (
    "node:hostname-missing",
    "node:hostname-differs",
    "node:zone",
    "node:region",
    "node:zone-missing",
    "node:random-labels",
    "node:taint:NoSchedule",
    "node:taint:PreferNoSchedule",
    "node:taint:NoExecute",
    "node:unschedulable",
    "node:unschedulable-taint",
    "node:images",
    "node:pods-allocatable-small",
    "nodes:small",
    "nodes:large",
    "pods:none",
    "pods:many",
    "pods:namespaces",
    "pods:requests",
    "pods:hostPorts",
    "pods:hostIP",
    "pods:terminating",
    "pods:terminal",
    "pods:on-missing-node",
    "pods:required-affinity",
    "pods:required-anti-affinity",
    "pods:preferred-affinity",
    "pods:preferred-anti-affinity",
    "pods:affinity-namespaces",
    "pods:affinity-namespaceSelector",
    "namespaces:labels",
    "controllers:service",
    "controllers:replicationController",
    "controllers:replicaSet",
    "controllers:statefulSet",
    "spread:system-default",
    "pod:nodeSelector",
    "nodeAffinity:required",
    "nodeAffinity:preferred",
    "nodeAffinity:op:In",
    "nodeAffinity:op:NotIn",
    "nodeAffinity:op:Exists",
    "nodeAffinity:op:DoesNotExist",
    "nodeAffinity:op:Gt",
    "nodeAffinity:op:Lt",
    "nodeAffinity:matchFields",
    "nodeAffinity:matchFields-absent-node",
    "nodeAffinity:multiple-terms",
    "nodeAffinity:preferred-matchFields",
    "tolerations",
    "tolerations:Exists",
    "tolerations:Equal",
    "tolerations:operator-omitted",
    "tolerations:empty-key",
    "tolerations:all-effects",
    "tolerations:NoExecute-seconds",
    "tolerations:unschedulable",
    "pod:requests",
    "pod:best-effort",
    "pod:large-requests",
    "pod:multiple-containers",
    "pod:init-containers",
    "pod:sidecar-containers",
    "pods:init-containers",
    "pods:sidecar-containers",
    "pod:hostPorts",
    "pod:hostPort-UDP",
    "pod:images",
    "pod:image-untagged",
    "spread",
    "spread:DoNotSchedule",
    "spread:ScheduleAnyway",
    "spread:maxSkew>1",
    "spread:minDomains",
    "spread:nodeAffinityPolicy:Honor",
    "spread:nodeAffinityPolicy:Ignore",
    "spread:nodeTaintsPolicy:Honor",
    "spread:nodeTaintsPolicy:Ignore",
    "spread:matchLabelKeys",
    "spread:multiple",
    "spread:key:hostname",
    "spread:key:zone",
    "spread:key:region",
    "spread:key:other",
    "affinity:required",
    "affinity:preferred",
    "anti-affinity:required",
    "anti-affinity:preferred",
    "affinity:namespaces",
    "affinity:namespaceSelector",
    "affinity:namespaceSelector-all",
    "affinity:matchLabelKeys",
    "affinity:mismatchLabelKeys",
    "affinity:key:hostname",
    "affinity:key:zone",
    "affinity:key:other",
    "affinity:first-pod",
)


class Gen:
    """One case under construction: its random source, probabilities and tags."""

    def __init__(self, r: random.Random, family: str) -> None:
        self.r = r
        self.family = family
        self.p = {**BASE, **FOCUS[family]}
        self.tags: set[str] = set()

    def chance(self, key: str) -> bool:
        return self.r.random() < self.p[key]

    def tag(self, *tags: str) -> None:
        self.tags.update(tags)


# -- nodes ----------------------------------------------------------------------------------------


def _node_count(r: random.Random) -> int:
    return r.choice((3, 3, 4, 4, 5, 5, 6, 7, 8, 10, 12, 16, 20, 25, 30))


def _taint(r: random.Random) -> JSON:
    t: JSON = {"key": r.choice(TAINT_KEYS), "effect": r.choice(EFFECTS)}
    value = r.choice(TAINT_VALUES)
    if value:
        t["value"] = value
    return t


def make_node(g: Gen, i: int) -> JSON:
    r = g.r
    name = f"node-{i}"
    labels: dict[str, str] = {}
    if g.chance("hostname_missing"):
        g.tag("node:hostname-missing")
    elif g.chance("hostname_differs"):
        labels[HOSTNAME] = f"host-{i % 7}"  # may even collide with another node's: one domain
        g.tag("node:hostname-differs")
    else:
        labels[HOSTNAME] = name
    if r.random() < 0.88:
        zone = r.choice(ZONES)
        labels[ZONE] = zone
        g.tag("node:zone")
        if r.random() < 0.9:
            labels[REGION] = REGION_OF[zone]
            g.tag("node:region")
    else:
        g.tag("node:zone-missing")
        if r.random() < 0.5:
            labels[REGION] = r.choice(("region-1", "region-2"))
            g.tag("node:region")
    for key, values, p in ((RACK, RACKS, 0.6), (DISK, DISKS, 0.5), (POOL, POOLS, 0.35)):
        if r.random() < p:
            labels[key] = r.choice(values)
            g.tag("node:random-labels")
    if r.random() < 0.45:
        labels[GPUS] = str(r.randint(0, 8))
        g.tag("node:random-labels")

    spec: JSON = {}
    taints: list[JSON] = []
    if g.chance("taints"):
        for _ in range(r.choice((1, 1, 2))):
            t = _taint(r)
            if not any(x["key"] == t["key"] and x["effect"] == t["effect"] for x in taints):
                taints.append(t)
                g.tag(f"node:taint:{t['effect']}")
    if g.chance("unschedulable"):
        spec["unschedulable"] = True
        g.tag("node:unschedulable")
        if r.random() < 0.6:  # what the node lifecycle controller adds
            taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
            g.tag("node:unschedulable-taint")
    if taints:
        spec["taints"] = taints

    allocatable = {"cpu": r.choice(CPU_ALLOC), "memory": r.choice(MEM_ALLOC), "pods": r.choice(PODS_ALLOC)}
    if int(allocatable["pods"]) <= 8:
        g.tag("node:pods-allocatable-small")
    status: JSON = {"capacity": dict(allocatable), "allocatable": allocatable}
    if g.chance("images"):
        images = []
        for image, size in r.sample(IMAGES, r.randint(1, 4)):
            repo = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
            names = [image if ":" in image.rsplit("/", 1)[-1] else image + ":latest", f"{repo}@sha256:{i:064x}"]
            images.append({"names": names, "sizeBytes": size + r.randint(0, 5) * MB})
        status["images"] = images
        g.tag("node:images")
    return {"metadata": {"name": name, "uid": f"node-uid-{i}", "labels": labels}, "spec": spec, "status": status}


# -- selectors, terms -----------------------------------------------------------------------------


def _pod_labels(r: random.Random) -> dict[str, str]:
    labels: dict[str, str] = {}
    if r.random() < 0.85:
        labels["app"] = r.choice(APPS)
    if r.random() < 0.5:
        labels["tier"] = r.choice(TIERS)
    if r.random() < 0.5:
        labels["version"] = r.choice(VERSIONS)
    if r.random() < 0.35:
        labels["pod-template-hash"] = r.choice(HASHES)
    return labels


def _label_selector(r: random.Random, like: Mapping[str, str], avoid: Iterable[str] = ()) -> JSON:
    """A selector that often matches pods labelled like `like`, in every form upstream accepts."""
    avoid = set(avoid)
    keys = [k for k in ("app", "tier", "version") if k not in avoid]
    sel: JSON = {}
    form = r.random()
    if form < 0.45 and "app" in keys:
        sel["matchLabels"] = {"app": like.get("app") or r.choice(APPS)}
    elif form < 0.8 and keys:
        key = r.choice(keys)
        values = {"app": APPS, "tier": TIERS, "version": VERSIONS}[key]
        op = r.choice(("In", "In", "NotIn", "Exists", "DoesNotExist"))
        expr: JSON = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            vals = sorted({like.get(key) or r.choice(values), r.choice(values)})
            expr["values"] = vals
        sel["matchExpressions"] = [expr]
    elif keys:
        sel["matchLabels"] = {k: like[k] for k in keys if k in like} or {"app": r.choice(APPS)}
    # else: {} selects every pod
    return sel


def selector_matches(sel: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: None matches nothing, {} everything."""
    if sel is None:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _affinity_term(g: Gen, own_labels: Mapping[str, str], own_ns: str, *, incoming: bool) -> JSON:
    r = g.r
    prefix = "affinity" if incoming else "pods:affinity"
    key = r.choice((HOSTNAME, HOSTNAME, ZONE, ZONE, REGION, RACK, POOL))
    term: JSON = {"topologyKey": key}
    if incoming:
        g.tag(f"affinity:key:{SHORT[key] if key in (HOSTNAME, ZONE) else 'other'}")
    label_keys: list[str] = []
    mismatch_keys: list[str] = []
    if incoming and r.random() < 0.25:
        candidates = [k for k in ("version", "pod-template-hash", "tier") if k in own_labels] or ["version"]
        label_keys = [r.choice(candidates)]
        g.tag("affinity:matchLabelKeys")
    if incoming and r.random() < 0.15:
        candidates = [k for k in ("version", "pod-template-hash", "tier") if k not in label_keys]
        present = [k for k in candidates if k in own_labels]
        mismatch_keys = [r.choice(present if present and r.random() < 0.75 else candidates)]
        g.tag("affinity:mismatchLabelKeys")
    term["labelSelector"] = _label_selector(r, own_labels, avoid=label_keys + mismatch_keys)
    if label_keys:
        term["matchLabelKeys"] = label_keys
    if mismatch_keys:
        term["mismatchLabelKeys"] = mismatch_keys
    ns_form = r.random()
    if ns_form < 0.2:
        term["namespaces"] = sorted(set(r.sample(NAMESPACES, r.randint(1, 2))))
        g.tag(f"{prefix}-namespaces" if not incoming else "affinity:namespaces")
    elif ns_form < 0.4:
        choice = r.random()
        if choice < 0.3:
            term["namespaceSelector"] = {}
            if incoming:
                g.tag("affinity:namespaceSelector-all")
        elif choice < 0.6:
            term["namespaceSelector"] = {"matchLabels": {"env": r.choice(("prod", "dev"))}}
        else:
            term["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [r.choice(NAMESPACES), own_ns]}
                ]
            }
        if r.random() < 0.25:
            term["namespaces"] = [r.choice(NAMESPACES)]
        g.tag(f"{prefix}-namespaceSelector" if not incoming else "affinity:namespaceSelector")
    return term


def _affinity(g: Gen, labels: Mapping[str, str], ns: str, *, incoming: bool) -> JSON | None:
    r = g.r
    if incoming:
        want = {
            ("podAffinity", "required"): g.chance("affinity_required"),
            ("podAffinity", "preferred"): g.chance("affinity_preferred"),
            ("podAntiAffinity", "required"): g.chance("anti_required"),
            ("podAntiAffinity", "preferred"): g.chance("anti_preferred"),
        }
    else:
        want = {
            ("podAffinity", "required"): g.chance("pod_affinity_existing"),
            ("podAntiAffinity", "required"): g.chance("pod_anti_existing"),
            ("podAffinity", "preferred"): g.chance("pod_preferred_existing"),
            ("podAntiAffinity", "preferred"): g.chance("pod_preferred_existing"),
        }
    out: JSON = {}
    for (kind, strength), on in want.items():
        if not on:
            continue
        terms = [_affinity_term(g, labels, ns, incoming=incoming) for _ in range(r.choice((1, 1, 2)))]
        section = out.setdefault(kind, {})
        if strength == "required":
            section["requiredDuringSchedulingIgnoredDuringExecution"] = terms
        else:
            section["preferredDuringSchedulingIgnoredDuringExecution"] = [
                {"weight": r.choice((1, 5, 10, 50, 100)), "podAffinityTerm": t} for t in terms
            ]
        what = "affinity" if kind == "podAffinity" else "anti-affinity"
        g.tag(f"{what}:{strength}" if incoming else f"pods:{strength}-{what}")
    return out or None


# -- pods -----------------------------------------------------------------------------------------


def _requests(r: random.Random, large: bool = False) -> JSON:
    req: JSON = {}
    if r.random() < 0.85:
        req["cpu"] = r.choice(("3", "6", "12")) if large else r.choice(CPU_REQ)
    if r.random() < 0.8:
        req["memory"] = r.choice(("6Gi", "12Gi", "24Gi")) if large else r.choice(MEM_REQ)
    return req


def _container(g: Gen, name: str, *, requests: bool, large: bool = False, image: bool = True) -> JSON:
    r = g.r
    c: JSON = {"name": name, "image": r.choice(IMAGES)[0] if image else "registry.example.com/app:0"}
    if requests:
        req = _requests(r, large)
        if req:
            c["resources"] = {"requests": req}
            if r.random() < 0.3:
                c["resources"]["limits"] = dict(req)
    return c


def _host_port(g: Gen, *, incoming: bool) -> JSON:
    r = g.r
    port: JSON = {"containerPort": r.choice((8080, 8443, 53)), "hostPort": r.choice(HOST_PORTS)}
    protocol = r.choice(("TCP", "TCP", "TCP", "UDP"))
    port["protocol"] = protocol
    ip = r.choice(HOST_IPS)
    if ip:
        port["hostIP"] = ip
        if not incoming:
            g.tag("pods:hostIP")
    if incoming and protocol == "UDP":
        g.tag("pod:hostPort-UDP")
    return port


def make_existing_pod(g: Gen, i: int, nodes: Sequence[JSON]) -> JSON:
    r = g.r
    ns = r.choice(NAMESPACES)
    labels = _pod_labels(r)
    containers = [_container(g, "c0", requests=r.random() < 0.8)]
    if r.random() < 0.2:
        containers.append(_container(g, "c1", requests=r.random() < 0.7))
    init: list[JSON] = []
    if r.random() < 0.08:
        init.append(_container(g, "init", requests=True))
        if r.random() < 0.4:
            init[0]["restartPolicy"] = "Always"
            g.tag("pods:sidecar-containers")
        g.tag("pods:init-containers")
    if any("resources" in c for c in containers):
        g.tag("pods:requests")
    if g.chance("existing_ports"):
        containers[0]["ports"] = [_host_port(g, incoming=False)]
        g.tag("pods:hostPorts")
    node = r.choice(nodes)["metadata"]["name"]
    if g.chance("missing_node"):
        node = "node-gone"
        g.tag("pods:on-missing-node")
    meta: JSON = {"name": f"pod-{i}", "namespace": ns, "uid": f"pod-uid-{i}"}
    if labels:
        meta["labels"] = labels
    if g.chance("terminating"):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
        g.tag("pods:terminating")
    spec: JSON = {"nodeName": node, "containers": containers}
    if init:
        spec["initContainers"] = init
    affinity = _affinity(g, labels, ns, incoming=False)
    if affinity:
        spec["affinity"] = affinity
    phase = "Running"
    if g.chance("terminal"):
        phase = r.choice(("Succeeded", "Failed"))
        g.tag("pods:terminal")
    elif r.random() < 0.05:
        phase = "Pending"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def _node_selector_requirement(g: Gen, nodes: Sequence[JSON]) -> JSON:
    r = g.r
    op = r.choice(("In", "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"))
    g.tag(f"nodeAffinity:op:{op}")
    if op in ("Gt", "Lt"):
        return {"key": GPUS, "operator": op, "values": [str(r.randint(0, 8))]}
    key = r.choice((ZONE, REGION, RACK, DISK, POOL, HOSTNAME, GPUS))
    if op in ("Exists", "DoesNotExist"):
        return {"key": key, "operator": op}
    pool = {
        ZONE: ZONES,
        REGION: ("region-1", "region-2"),
        RACK: RACKS,
        DISK: DISKS,
        POOL: POOLS,
        HOSTNAME: tuple(n["metadata"]["name"] for n in nodes),
        GPUS: tuple(str(x) for x in range(9)),
    }[key]
    return {"key": key, "operator": op, "values": sorted(set(r.sample(pool, min(len(pool), r.randint(1, 2)))))}


def _node_selector_term(g: Gen, nodes: Sequence[JSON]) -> JSON:
    r = g.r
    term: JSON = {}
    if r.random() < 0.85:
        term["matchExpressions"] = [_node_selector_requirement(g, nodes) for _ in range(r.choice((1, 1, 2)))]
    if r.random() < 0.25 or not term:
        # metadata.name takes exactly one value (API validation; the filter cannot parse more).
        names = [n["metadata"]["name"] for n in nodes]
        fields = []
        for _ in range(r.choice((1, 1, 1, 2))):
            value = r.choice(names)
            if r.random() < 0.12:
                value = "node-absent"
                g.tag("nodeAffinity:matchFields-absent-node")
            fields.append({"key": "metadata.name", "operator": r.choice(("In", "In", "NotIn")), "values": [value]})
        term["matchFields"] = fields
        g.tag("nodeAffinity:matchFields")
    return term


def _tolerations(g: Gen, nodes: Sequence[JSON]) -> list[JSON]:
    r = g.r
    taints = [t for n in nodes for t in n["spec"].get("taints", [])]
    out: list[JSON] = []
    for _ in range(r.choice((1, 1, 2, 3))):
        if taints and r.random() < 0.7:
            t = r.choice(taints)
            tol: JSON = {"key": t["key"]}
        else:
            tol = {"key": r.choice((*TAINT_KEYS, UNSCHEDULABLE_TAINT))}
            t = {"effect": r.choice(EFFECTS), "value": r.choice(TAINT_VALUES)}
        form = r.random()
        if form < 0.08:
            tol = {"operator": "Exists"}  # empty key + Exists: tolerates everything
            g.tag("tolerations:empty-key", "tolerations:Exists")
        elif form < 0.45:
            tol["operator"] = "Exists"
            g.tag("tolerations:Exists")
        else:
            if r.random() < 0.3:
                g.tag("tolerations:operator-omitted")  # "" is Equal
            else:
                tol["operator"] = "Equal"
            value = t.get("value", "") if r.random() < 0.75 else r.choice(TAINT_VALUES)
            if value:
                tol["value"] = value
            g.tag("tolerations:Equal")
        if r.random() < 0.25:
            g.tag("tolerations:all-effects")  # no effect: matches every effect
        else:
            tol["effect"] = t["effect"] if r.random() < 0.8 else r.choice(EFFECTS)
            if tol["effect"] == "NoExecute" and r.random() < 0.4:
                tol["tolerationSeconds"] = r.choice((0, 30, 300))
                g.tag("tolerations:NoExecute-seconds")
        if tol.get("key") == UNSCHEDULABLE_TAINT:
            g.tag("tolerations:unschedulable")
        out.append(tol)
    g.tag("tolerations")
    return out


def _spread_constraints(g: Gen, labels: Mapping[str, str]) -> list[JSON]:
    r = g.r
    out: list[JSON] = []
    keys_used: set[str] = set()
    for _ in range(r.choice((1, 1, 1, 2))):
        key = r.choice((HOSTNAME, HOSTNAME, ZONE, ZONE, REGION, RACK, DISK, POOL))
        if key in keys_used:
            continue
        keys_used.add(key)
        g.tag(f"spread:key:{SHORT[key] if key in (HOSTNAME, ZONE, REGION) else 'other'}")
        when = r.choice(("DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"))
        g.tag(f"spread:{when}")
        match_keys: list[str] = []
        if r.random() < 0.25:
            candidates = [k for k in ("pod-template-hash", "version") if k in labels] or ["pod-template-hash"]
            match_keys = [r.choice(candidates)]
            g.tag("spread:matchLabelKeys")
        c: JSON = {
            "maxSkew": r.choice((1, 1, 1, 2, 3)),
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": _label_selector(r, labels, avoid=match_keys),
        }
        if c["maxSkew"] > 1:
            g.tag("spread:maxSkew>1")
        if match_keys:
            c["matchLabelKeys"] = match_keys
        if when == "DoNotSchedule" and r.random() < 0.25:
            c["minDomains"] = r.choice((2, 3, 4, 6))
            g.tag("spread:minDomains")
        if r.random() < 0.4:
            c["nodeAffinityPolicy"] = r.choice(("Honor", "Ignore"))
            g.tag(f"spread:nodeAffinityPolicy:{c['nodeAffinityPolicy']}")
        if r.random() < 0.4:
            c["nodeTaintsPolicy"] = r.choice(("Honor", "Ignore"))
            g.tag(f"spread:nodeTaintsPolicy:{c['nodeTaintsPolicy']}")
        out.append(c)
    g.tag("spread")
    if len(out) > 1:
        g.tag("spread:multiple")
    return out


def make_incoming_pod(g: Gen, nodes: Sequence[JSON], pods: Sequence[JSON]) -> JSON:
    r = g.r
    ns = r.choice(("default", "default", "team-a", "team-b", "batch"))
    labels = _pod_labels(r)
    if "app" not in labels and r.random() < 0.7:
        labels["app"] = r.choice(APPS)
    with_requests = g.chance("requests")
    large = with_requests and g.chance("large_requests")
    images = g.chance("pod_images")
    containers = [_container(g, "main", requests=with_requests, large=large, image=images)]
    if r.random() < 0.25:
        containers.append(_container(g, "sidecar", requests=with_requests, image=images))
        g.tag("pod:multiple-containers")
    spec: JSON = {"containers": containers}
    if g.chance("init_containers"):
        spec["initContainers"] = [_container(g, "init", requests=True, large=r.random() < 0.3, image=images)]
        g.tag("pod:init-containers")
        if r.random() < 0.35:
            # A sidecar (restartPolicy Always): its requests add to the containers'.
            sidecar = _container(g, "init-sidecar", requests=True, image=images)
            sidecar["restartPolicy"] = "Always"
            spec["initContainers"].insert(r.randint(0, 1), sidecar)
            g.tag("pod:sidecar-containers")
    if any("resources" in c for c in [*containers, *spec.get("initContainers", [])]):
        g.tag("pod:requests")
    else:
        g.tag("pod:best-effort")
    if large:
        g.tag("pod:large-requests")
    if images:
        g.tag("pod:images")
        if any(":" not in c["image"].rsplit("/", 1)[-1] for c in containers):
            g.tag("pod:image-untagged")
    if g.chance("host_ports"):
        ports: dict[tuple[int, str], JSON] = {}
        for _ in range(r.choice((1, 1, 2))):
            port = _host_port(g, incoming=True)
            ports.setdefault((port["hostPort"], port["protocol"]), port)
        containers[0]["ports"] = list(ports.values())
        g.tag("pod:hostPorts")
    if g.chance("node_selector"):
        node = r.choice(nodes)["metadata"]["labels"]
        keys = sorted(k for k in node if k != GPUS) or [ZONE]
        key = r.choice(keys)
        spec["nodeSelector"] = {key: node.get(key, "zone-a")}
        g.tag("pod:nodeSelector")
    node_affinity: JSON = {}
    if g.chance("node_affinity_required"):
        terms = [_node_selector_term(g, nodes) for _ in range(r.choice((1, 1, 2)))]
        if len(terms) > 1:
            g.tag("nodeAffinity:multiple-terms")
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
        g.tag("nodeAffinity:required")
    if g.chance("node_affinity_preferred"):
        prefs = []
        for _ in range(r.randint(1, 3)):
            term = {"matchExpressions": [_node_selector_requirement(g, nodes)]}
            if r.random() < 0.1:
                name = r.choice(nodes)["metadata"]["name"]
                term["matchFields"] = [
                    {"key": "metadata.name", "operator": r.choice(("In", "NotIn")), "values": [name]}
                ]
                g.tag("nodeAffinity:preferred-matchFields")
            prefs.append({"weight": r.choice((1, 10, 30, 50, 100)), "preference": term})
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = prefs
        g.tag("nodeAffinity:preferred")
    if g.chance("tolerations"):
        spec["tolerations"] = _tolerations(g, nodes)
    if g.chance("spread"):
        spec["topologySpreadConstraints"] = _spread_constraints(g, labels)
    affinity: JSON = {}
    if node_affinity:
        affinity["nodeAffinity"] = node_affinity
    pod_affinity = _affinity(g, labels, ns, incoming=True)
    if pod_affinity:
        affinity.update(pod_affinity)
    if g.chance("first_pod"):
        # The first pod of a group: required affinity to its own labels, nobody else has them.
        group = f"group-{r.randint(0, 999)}"
        labels["group"] = group
        group_term: JSON = {
            "topologyKey": r.choice((HOSTNAME, ZONE)),
            "labelSelector": {"matchLabels": {"group": group}},
        }
        section = affinity.setdefault("podAffinity", {})
        section.setdefault("requiredDuringSchedulingIgnoredDuringExecution", []).append(group_term)
        g.tag("affinity:required")
    if affinity:
        spec["affinity"] = affinity
    meta: JSON = {"name": "incoming", "namespace": ns, "uid": "incoming-uid"}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending"}}


# -- controllers (system-default topology spreading) ----------------------------------------------


def make_controllers(g: Gen, pod: JSON) -> JSON:
    r = g.r
    out: JSON = {"services": [], "replicationControllers": [], "replicaSets": [], "statefulSets": []}
    if not g.chance("controllers"):
        return out
    own = pod["metadata"].get("labels", {})
    own_ns = pod["metadata"]["namespace"]

    def selector_labels() -> dict[str, str]:
        if own and r.random() < 0.7:
            keys = sorted(own)
            chosen = r.sample(keys, r.randint(1, min(2, len(keys))))
            return {k: own[k] for k in chosen}
        return {"app": r.choice(APPS)}

    def namespace() -> str:
        return own_ns if r.random() < 0.75 else r.choice(NAMESPACES)

    for i in range(r.choice((0, 1, 1, 2))):
        out["services"].append(
            {"metadata": {"name": f"svc-{i}", "namespace": namespace()}, "spec": {"selector": selector_labels()}}
        )
        g.tag("controllers:service")
    if r.random() < 0.35:
        out["replicationControllers"].append(
            {"metadata": {"name": "rc-0", "namespace": namespace()}, "spec": {"selector": selector_labels()}}
        )
        g.tag("controllers:replicationController")
    if r.random() < 0.5:
        sel: JSON = {"matchLabels": selector_labels()}
        if r.random() < 0.3:
            sel = {"matchExpressions": [{"key": "app", "operator": "In", "values": sorted({own.get("app", "web")})}]}
        out["replicaSets"].append(
            {
                "metadata": {"name": "rs-0", "namespace": namespace()},
                "spec": {"selector": sel, "template": {"metadata": {"labels": dict(sel.get("matchLabels", {}))}}},
            }
        )
        g.tag("controllers:replicaSet")
    if r.random() < 0.3:
        out["statefulSets"].append(
            {
                "metadata": {"name": "ss-0", "namespace": namespace()},
                "spec": {"selector": {"matchLabels": selector_labels()}, "serviceName": "svc-0"},
            }
        )
        g.tag("controllers:statefulSet")
    return out


def make_namespaces() -> list[JSON]:
    return [
        {"metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **NAMESPACE_LABELS[ns]}}}
        for ns in NAMESPACES
    ]


# -- cases ----------------------------------------------------------------------------------------


def generate_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/{index}")
    family = r.choices(FAMILIES, weights=FAMILY_WEIGHTS)[0]
    g = Gen(r, family)
    nodes = [make_node(g, i) for i in range(_node_count(r))]
    if len(nodes) <= 4:
        g.tag("nodes:small")
    if len(nodes) >= 16:
        g.tag("nodes:large")
    pod_count = r.choice((0, 0, 2, 5, 8, 12, 16, 20, 30, 40, 60))
    pods = [make_existing_pod(g, i, nodes) for i in range(pod_count)]
    if not pods:
        g.tag("pods:none")
    if len(pods) >= 30:
        g.tag("pods:many")
    if len({p["metadata"]["namespace"] for p in pods}) > 1:
        g.tag("pods:namespaces")
    pod = make_incoming_pod(g, nodes, pods)
    case: JSON = {
        "name": f"{family}-{index:05d}",
        "family": family,
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": make_namespaces(),
        **make_controllers(g, pod),
        "pod": pod,
    }
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags | scan_tags(case))
    return case


def generate(
    seed: int, count: int, volume_count: int = 0, claim_count: int = 0, mixed_count: int = 0, large_count: int = 0
) -> list[JSON]:
    """`count` cases, then `volume_count` volume cases (casegen_volumes), then `claim_count` claim
    cases (casegen_claims), then `mixed_count` mixed and `large_count` large cases
    (casegen_mixed), with the large ones one whose search is cut off at any seed; the same for
    the same seed."""
    cases = [generate_case(seed, i) for i in range(count)]
    if volume_count:
        from draxr_dev.scheduling.casegen_volumes import generate_volume_case

        cases += [generate_volume_case(seed, i) for i in range(volume_count)]
    if claim_count:
        from draxr_dev.scheduling.casegen_claims import generate_claim_case

        cases += [generate_claim_case(seed, i) for i in range(claim_count)]
    if mixed_count or large_count:
        from draxr_dev.scheduling.casegen_mixed import generate_cut_off_case, generate_large_case, generate_mixed_case

        cases += [generate_mixed_case(seed, i) for i in range(mixed_count)]
        cases += [generate_large_case(seed, i) for i in range(large_count)]
        if large_count:
            cases.append(generate_cut_off_case(seed))
    return cases


def scan_tags(case: Mapping[str, Any]) -> set[str]:
    """Tags read off the finished case (on the pods as stored)."""
    stored = as_stored(case)
    pod = stored["pod"]
    labels = pod["metadata"].get("labels", {})
    ns = pod["metadata"]["namespace"]
    tags: set[str] = set()
    if not pod["spec"].get("topologySpreadConstraints"):
        selectors = [s["spec"].get("selector") or {} for s in case.get("services", []) if _ns(s) == ns]
        selectors += [
            rc["spec"].get("selector") or {} for rc in case.get("replicationControllers", []) if _ns(rc) == ns
        ]
        matching = any(sel and all(labels.get(k) == v for k, v in sel.items()) for sel in selectors)
        for obj in [*case.get("replicaSets", []), *case.get("statefulSets", [])]:
            if _ns(obj) == ns and selector_matches(obj["spec"].get("selector"), labels):
                matching = True
        if matching:
            tags.add("spread:system-default")
    required = (
        pod["spec"].get("affinity", {}).get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    for term in required or []:
        if term.get("namespaces") or term.get("namespaceSelector") is not None:
            continue
        if selector_matches(term.get("labelSelector"), labels) and not any(
            _ns(p) == ns and selector_matches(term.get("labelSelector"), p["metadata"].get("labels", {}))
            for p in stored["pods"]
        ):
            tags.add("affinity:first-pod")
    return tags


def _ns(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("namespace") or "default")


# -- kube-apiserver's create-time mutation --------------------------------------------------------


def _apply_label_keys(selector: JSON, keys: Iterable[str], op: str, labels: Mapping[str, str]) -> None:
    for key in keys:
        if key in labels:
            selector.setdefault("matchExpressions", []).append({"key": key, "operator": op, "values": [labels[key]]})


def stored_pod(pod: Mapping[str, Any]) -> JSON:
    """The pod as kube-apiserver 1.37.2 stores it on create, as far as scheduling sees it (see the
    module docstring): matchLabelKeys / mismatchLabelKeys merged into the labelSelectors. A new
    pod and spec; only the affinity and spread constraints are copied deeply (what the merge
    changes), the rest is the given pod's (the evaluators copy the pods they store)."""
    out: JSON = dict(pod)
    if "spec" not in out:
        return out
    spec = out["spec"] = dict(out["spec"])
    for key in ("affinity", "topologySpreadConstraints"):
        if spec.get(key):
            spec[key] = copy.deepcopy(spec[key])
    labels = out.get("metadata", {}).get("labels") or {}
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        section = affinity.get(kind) or {}
        terms = list(section.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [w["podAffinityTerm"] for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
        for term in terms:
            selector = term.get("labelSelector")
            if selector is None or not (term.get("matchLabelKeys") or term.get("mismatchLabelKeys")):
                continue
            _apply_label_keys(selector, term.get("matchLabelKeys") or [], "In", labels)
            _apply_label_keys(selector, term.get("mismatchLabelKeys") or [], "NotIn", labels)
    for constraint in spec.get("topologySpreadConstraints") or []:
        selector = constraint.get("labelSelector")
        if selector is not None and constraint.get("matchLabelKeys"):
            _apply_label_keys(selector, constraint["matchLabelKeys"], "In", labels)
    return out


def as_stored(case: Mapping[str, Any]) -> JSON:
    """The case with the incoming (a sequence's too) and the existing pods as stored by
    kube-apiserver (stored_pod)."""
    out = dict(case)
    out["pod"] = stored_pod(case["pod"])
    out["pods"] = [stored_pod(p) for p in case.get("pods", [])]
    if "sequence" in case:  # casegen_sequences
        out["sequence"] = [stored_pod(p) for p in case["sequence"]]
    return out


# -- coverage -------------------------------------------------------------------------------------


def feature_tally(cases: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Number of cases per tag, sorted by tag."""
    counts = Counter(t for c in cases for t in c["tags"])
    return dict(sorted(counts.items()))


def format_tally(tally: Mapping[str, int]) -> str:
    width = max((len(k) for k in tally), default=0)
    return "\n".join(f"  {k:<{width}}  {v:5d}" for k, v in tally.items())


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--volumes", type=int, default=0, help="volume cases after the others (casegen_volumes)")
    ap.add_argument("--claims", type=int, default=0, help="claim cases after the volume cases (casegen_claims)")
    ap.add_argument("--mixed", type=int, default=0, help="mixed cases after the claim cases (casegen_mixed)")
    ap.add_argument("--large", type=int, default=0, help="large cases (100-500 nodes) after those (casegen_mixed)")
    ap.add_argument("-o", "--output", default="-", help="file for the JSON list of cases (- = stdout, '' = none)")
    ap.add_argument("--tally", action="store_true", help="print the coverage tally to stderr")
    args = ap.parse_args(argv)
    cases = generate(args.seed, args.count, args.volumes, args.claims, args.mixed, args.large)
    if args.output:
        text = json.dumps(cases, separators=(",", ":"))
        if args.output == "-":
            sys.stdout.write(text + "\n")
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    if args.tally:
        tally = feature_tally(cases)
        print(format_tally(tally), file=sys.stderr)
        required: tuple[str, ...] = REQUIRED_TAGS
        if args.volumes:
            from draxr_dev.scheduling.casegen_volumes import VOLUME_TAGS

            required += VOLUME_TAGS
        if args.claims:
            from draxr_dev.scheduling.casegen_claims import CLAIM_TAGS

            required += CLAIM_TAGS
        if args.mixed:
            from draxr_dev.scheduling.casegen_mixed import MIXED_TAGS

            required += MIXED_TAGS
        thin = {t: tally.get(t, 0) for t in required if tally.get(t, 0) < 20}
        print(f"{len(cases)} cases; required tags below 20: {thin or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
