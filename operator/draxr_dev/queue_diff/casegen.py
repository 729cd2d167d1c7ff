"""Sequences for the queue differential: a small cluster (nodes, a DeviceClass, ResourceSlices,
claims, pending and assigned pods, PVs and PVCs) and a random walk of steps over it, from a seed.

A sequence (the harness's input, tests/scheduler_harness/queue.go):
``{"name", "objects": [{"kind", "object"}], "steps": [...]}``; steps are ``upsert``/``delete`` of an
object, ``pop``, ``fail`` (a pop's attempt ends: unschedulable with ``plugins``, or an error without),
``byPod``: one of the plugins the popped pod's spec may be rejected by, ``pod_rejections``),
``bind`` and ``nominate`` (of a pop's pod: ``object`` is the pod as the watch then sees it), and
``advance`` (the clock, ``seconds``). An upsert of a pod keeps the ``spec.nodeName`` and
``status.nominatedNodeName`` the pod has (a bind or a nomination the generator cannot know of:
both sides apply that rule). ``fail`` also carries ``draxr``: how draxr's own cycle would
have reported that rejection to its queue ("unschedulable", or "inventory": unresolvable until the
classes, slices or mappings change, as placement's broken-class and allocator-fatal outcomes; those
are reported in the cycle itself, so an "inventory" fail follows its pop at once). Other fails may
come steps after their pop: draxr's PostFilter (preemption's dry runs) hands the event loop back,
and events arrive meanwhile.

A pop's pod is only known once upstream ran (the harness pops its head): ``fail``, ``bind`` and
``nominate`` name the pop step (``pop``); both sides build the pod's new object from its current
one (``node`` / ``nominated`` say where, ``rv`` is its new resourceVersion)."""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

NS = "default"
SCHEDULER = "default-scheduler"  # the harness's profile; draxr runs with this scheduler name
DRIVER = "gpu.example.com"
CLASS = "gpu.example.com"
ZONES = ("zone-a", "zone-b")
EPOCH = "2026-01-01T00:00:"  # creationTimestamp prefix: pods created a second apart

# The rejecting plugins of a failed attempt (kube-scheduler's names), each with how draxr's own
# cycle reports it to its queue (placement.Unschedulable: plain unschedulable, or unresolvable
# until the inventory changes).
REJECTIONS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("NodeResourcesFit",), "unschedulable"),
    (("NodeResourcesFit",), "unschedulable"),
    (("DynamicResources",), "unschedulable"),
    (("DynamicResources",), "unschedulable"),
    (("DynamicResources",), "inventory"),
    (("NodeAffinity",), "unschedulable"),
    (("TaintToleration",), "unschedulable"),
    (("NodeUnschedulable",), "unschedulable"),
    (("VolumeBinding",), "unschedulable"),
    (("PodTopologySpread",), "unschedulable"),
    (("InterPodAffinity",), "unschedulable"),
    (("NodeResourcesFit", "DynamicResources"), "unschedulable"),
    (("NodeAffinity", "TaintToleration", "NodeResourcesFit"), "unschedulable"),
)

# Weighted step kinds.
STEP_WEIGHTS: tuple[tuple[str, int], ...] = (
    ("pop", 22),
    ("fail", 16),
    ("error", 2),
    ("bind", 4),
    ("nominate", 2),
    ("add_pod", 4),
    ("update_pod", 6),
    ("delete_pod", 2),
    ("assigned_pod", 5),
    ("node", 7),
    ("claim", 9),
    ("slice", 4),
    ("device_class", 2),
    ("volume", 3),
    ("advance", 10),
)


@dataclass
class _World:
    r: random.Random
    rv: int = 0
    nodes: dict[str, JSON] = field(default_factory=dict)
    pods: dict[str, JSON] = field(default_factory=dict)  # every pod, by name
    claims: dict[str, JSON] = field(default_factory=dict)
    slices: dict[str, JSON] = field(default_factory=dict)
    classes: dict[str, JSON] = field(default_factory=dict)
    pvs: dict[str, JSON] = field(default_factory=dict)
    pvcs: dict[str, JSON] = field(default_factory=dict)
    pod_count: int = 0
    node_count: int = 0
    open_pops: list[int] = field(default_factory=list)  # pop steps whose attempt has not ended

    def version(self, obj: JSON) -> JSON:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj


def _meta(name: str, namespaced: bool = True, **extra: Any) -> JSON:
    meta: JSON = {"name": name, "uid": f"uid-{name}", **extra}
    if namespaced:
        meta["namespace"] = NS
    return meta


def pod_rejections(pod: JSON) -> list[str]:
    """The plugins that may reject ``pod``, from its spec (the harness's podRejections)."""
    spec = pod.get("spec") or {}
    out = []
    if spec.get("resourceClaims"):
        out.append("DynamicResources")
    if (spec.get("affinity") or {}).get("nodeAffinity"):
        out.append("NodeAffinity")
    if spec.get("tolerations"):
        out.append("TaintToleration")
    if any(v.get("persistentVolumeClaim") for v in spec.get("volumes") or ()):
        out.append("VolumeBinding")
    if spec.get("topologySpreadConstraints"):
        out.append("PodTopologySpread")
    return [*out, "NodeResourcesFit"]


def make_node(w: _World) -> JSON:
    name = f"node-{w.node_count}"
    w.node_count += 1
    r = w.r
    node: JSON = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, False, labels={"kubernetes.io/hostname": name, "zone": r.choice(ZONES)}),
        "spec": {},
        "status": {"allocatable": {"cpu": str(r.choice((2, 4, 8))), "memory": "16Gi", "pods": "110"}},
    }
    if r.random() < 0.3:
        node["spec"]["taints"] = [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
    return node


def make_slice(w: _World, node: str, devices: int) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": _meta(f"{node}-{DRIVER}", False),
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(devices)],
        },
    }


def make_class(selector: bool = True) -> JSON:
    spec: JSON = {}
    if selector:
        spec["selectors"] = [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": _meta(CLASS, False), "spec": spec}


def make_claim(name: str) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": _meta(name),
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}},
    }


def allocate(claim: JSON, node: str, device: int, consumer: JSON | None) -> JSON:
    claim = copy.deepcopy(claim)
    status: JSON = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{device}"}]},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    if consumer is not None:
        meta = consumer["metadata"]
        status["reservedFor"] = [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
    claim["status"] = status
    return claim


def make_pod(w: _World, *, node: str = "") -> JSON:
    r = w.r
    name = f"pod-{w.pod_count}"
    w.pod_count += 1
    labels = {"app": r.choice(("web", "db", "batch"))}
    container: JSON = {
        "name": "c",
        "image": "busybox",
        "resources": {"requests": {"cpu": r.choice(("100m", "1", "3"))}},
    }
    spec: JSON = {"schedulerName": SCHEDULER, "containers": [container], "priority": r.choice((0, 0, 0, 10, 100))}
    if node:
        spec["nodeName"] = node
    elif r.random() < 0.45:
        claim = f"claim-{name}"
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": "gpu"}]
        if r.random() < 0.5:  # created now; else later (or never)
            w.claims[claim] = w.version(make_claim(claim))
    if not node and r.random() < 0.25:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": [r.choice(ZONES)]}]}
                    ]
                }
            }
        }
    if not node and r.random() < 0.25:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    if not node and r.random() < 0.15:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": labels["app"]}},
            }
        ]
    if not node and r.random() < 0.1:
        spec["schedulingGates"] = [{"name": "example.com/wait"}]  # (removed by an update_pod "ungate")
    if not node and r.random() < 0.1:
        pvc = f"pvc-{name}"
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": pvc}}]
        if r.random() < 0.5:
            w.pvcs[pvc] = w.version(make_pvc(pvc))
    created = (
        f"{EPOCH}{w.pod_count % 60:02d}Z"
        if w.pod_count < 60
        else f"2026-01-01T00:{w.pod_count // 60:02d}:{w.pod_count % 60:02d}Z"
    )
    pod: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, labels=labels, creationTimestamp=created),
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }
    w.pods[name] = w.version(pod)
    return pod


def make_pvc(name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(name),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": "",
        },
        "status": {"phase": "Pending"},
    }


def make_pv(name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": _meta(name, False),
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": f"/tmp/{name}"},
        },
        "status": {"phase": "Available"},
    }


def _obj(kind: str, obj: JSON) -> JSON:
    return {"kind": kind, "object": copy.deepcopy(obj)}


def _upsert(kind: str, obj: JSON) -> JSON:
    return {"op": "upsert", **_obj(kind, obj)}


def _delete(kind: str, obj: JSON) -> JSON:
    return {"op": "delete", **_obj(kind, obj)}


def _pending(w: _World) -> list[JSON]:
    return [p for p in w.pods.values() if not p["spec"].get("nodeName")]


def _assigned(w: _World) -> list[JSON]:
    return [p for p in w.pods.values() if p["spec"].get("nodeName")]


def _step(w: _World, kind: str, index: int) -> JSON | None:
    r = w.r
    if kind == "pop":
        w.open_pops.append(index)
        return {"op": "pop"}
    if kind in ("fail", "error", "bind", "nominate"):
        if not w.open_pops:
            return None
        pop = r.choice(w.open_pops)
        if kind == "fail" and r.random() < 0.5:
            # a plugin the popped pod's spec may be rejected by (pod_rejections; the harness picks)
            w.open_pops.remove(pop)
            return {
                "op": "fail",
                "pop": pop,
                "plugins": [],
                "byPod": True,
                "pick": r.randrange(6),
                "draxr": "unschedulable",
            }
        if kind == "fail":
            plugins, flavor = r.choice(REJECTIONS)
            if flavor == "inventory" and pop != index - 1:
                # draxr reports these outcomes in the cycle itself (no PostFilter): nothing can
                # arrive while such a pod is in flight
                plugins, flavor = ("DynamicResources",), "unschedulable"
            w.open_pops.remove(pop)
            return {"op": "fail", "pop": pop, "plugins": list(plugins), "draxr": flavor}
        if kind == "error":
            w.open_pops.remove(pop)
            return {"op": "fail", "pop": pop, "plugins": [], "draxr": "error"}
        if kind == "bind":
            w.open_pops.remove(pop)
            w.rv += 1
            return {"op": "bind", "pop": pop, "node": r.choice(sorted(w.nodes)), "rv": str(w.rv)} if w.nodes else None
        # nominate: the attempt goes on (PostFilter nominated a node); it still ends later
        w.rv += 1
        return (
            {"op": "nominate", "pop": pop, "nominated": r.choice(sorted(w.nodes)), "rv": str(w.rv)} if w.nodes else None
        )
    if kind == "add_pod":
        return _upsert("Pod", make_pod(w))
    if kind == "update_pod":
        pending = _pending(w)
        if not pending:
            return None
        pod = copy.deepcopy(r.choice(pending))
        change = r.choice(("labels", "status", "toleration", "scale_down", "annotation", "ungate"))
        if change == "ungate" and pod["spec"].get("schedulingGates"):
            del pod["spec"]["schedulingGates"]
        elif change == "labels" or change == "ungate":
            pod["metadata"]["labels"]["rev"] = str(w.rv)
        elif change == "annotation":
            pod["metadata"].setdefault("annotations", {})["note"] = str(w.rv)
        elif change == "status":
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": f"m{w.rv}"}
            ]
        elif change == "toleration":
            pod["spec"]["tolerations"] = [
                *(pod["spec"].get("tolerations") or ()),
                {"key": f"k{w.rv}", "operator": "Exists", "effect": "NoSchedule"},
            ]
        else:
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "50m"
        w.pods[pod["metadata"]["name"]] = w.version(pod)
        return _upsert("Pod", pod)
    if kind == "delete_pod":
        pending = _pending(w)
        if not pending:
            return None
        pod = r.choice(pending)
        del w.pods[pod["metadata"]["name"]]
        return _delete("Pod", pod)
    if kind == "assigned_pod":
        assigned = _assigned(w)
        if assigned and r.random() < 0.5:
            pod = r.choice(assigned)
            del w.pods[pod["metadata"]["name"]]
            return _delete("Pod", pod)
        if not w.nodes:
            return None
        return _upsert("Pod", make_pod(w, node=r.choice(sorted(w.nodes))))
    if kind == "node":
        roll = r.random()
        if not w.nodes or roll < 0.2:
            node = make_node(w)
            w.nodes[node["metadata"]["name"]] = w.version(node)
            return _upsert("Node", node)
        name = r.choice(sorted(w.nodes))
        if roll < 0.28:
            return _delete("Node", w.nodes.pop(name))
        node = copy.deepcopy(w.nodes[name])
        change = r.choice(("allocatable", "labels", "taints", "unschedulable", "heartbeat"))
        if change == "allocatable":
            node["status"]["allocatable"]["cpu"] = str(r.choice((2, 4, 8, 16)))
        elif change == "labels":
            node["metadata"]["labels"]["zone"] = r.choice(ZONES)
        elif change == "taints":
            node["spec"]["taints"] = (
                [] if node["spec"].get("taints") else [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
            )
        elif change == "unschedulable":
            node["spec"]["unschedulable"] = not node["spec"].get("unschedulable", False)
        else:
            node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": f"r{w.rv}"}]
        w.nodes[name] = w.version(node)
        return _upsert("Node", node)
    if kind == "claim":
        wanted = sorted(
            {e["resourceClaimName"] for p in _pending(w) for e in p["spec"].get("resourceClaims") or ()} | set(w.claims)
        )
        if not wanted:
            return None
        name = r.choice(wanted)
        claim = w.claims.get(name)
        if claim is None:
            w.claims[name] = w.version(make_claim(name))
            return _upsert("ResourceClaim", w.claims[name])
        roll = r.random()
        if roll < 0.15:
            return _delete("ResourceClaim", w.claims.pop(name))
        if claim.get("status", {}).get("allocation") and roll < 0.6:
            new = copy.deepcopy(claim)
            new.pop("status", None)  # deallocated
        elif roll < 0.75 and w.nodes:
            consumer = w.pods.get(name.removeprefix("claim-"))
            new = allocate(claim, r.choice(sorted(w.nodes)), r.randrange(2), consumer)
        else:
            new = copy.deepcopy(claim)
            new["metadata"].setdefault("labels", {})["touched"] = str(w.rv)  # status unchanged
        w.claims[name] = w.version(new)
        return _upsert("ResourceClaim", new)
    if kind == "slice":
        if not w.nodes:
            return None
        on = r.choice(sorted(w.nodes))
        name = f"{on}-{DRIVER}"
        if name in w.slices and r.random() < 0.25:
            return _delete("ResourceSlice", w.slices.pop(name))
        s = make_slice(w, on, r.choice((1, 2, 4)))
        w.slices[name] = w.version(s)
        return _upsert("ResourceSlice", s)
    if kind == "device_class":
        if CLASS in w.classes and r.random() < 0.3:
            return _delete("DeviceClass", w.classes.pop(CLASS))
        c = make_class(selector=r.random() < 0.8)
        if CLASS in w.classes:
            c["metadata"]["labels"] = {"rev": str(w.rv)}
        w.classes[CLASS] = w.version(c)
        return _upsert("DeviceClass", c)
    if kind == "volume":
        wanted = sorted(
            {v["persistentVolumeClaim"]["claimName"] for p in _pending(w) for v in p["spec"].get("volumes") or ()}
        )
        if wanted and r.random() < 0.6:
            name = r.choice(wanted)
            pvc = w.pvcs.get(name)
            if pvc is None:
                w.pvcs[name] = w.version(make_pvc(name))
                return _upsert("PersistentVolumeClaim", w.pvcs[name])
            new = copy.deepcopy(pvc)
            new["metadata"].setdefault("labels", {})["rev"] = str(w.rv)
            w.pvcs[name] = w.version(new)
            return _upsert("PersistentVolumeClaim", new)
        name = f"pv-{len(w.pvs)}"
        pv = make_pv(name)
        w.pvs[name] = w.version(pv)
        return _upsert("PersistentVolume", pv)
    if kind == "advance":
        return {"op": "advance", "seconds": r.choice((0.3, 1.0, 1.5, 2.0, 5.0, 12.0, 30.0, 61.0))}
    raise ValueError(kind)


def generate_sequence(seed: int, index: int, steps: int) -> JSON:
    r = random.Random(f"queue-diff/{seed}/{index}")
    w = _World(r)
    objects: list[JSON] = []
    for _ in range(r.choice((1, 2, 3))):
        node = make_node(w)
        w.nodes[node["metadata"]["name"]] = w.version(node)
    if r.random() < 0.8:
        w.classes[CLASS] = w.version(make_class())
    for name in list(w.nodes):
        if r.random() < 0.7:
            s = make_slice(w, name, r.choice((1, 2)))
            w.slices[s["metadata"]["name"]] = w.version(s)
    for _ in range(r.randrange(0, 3)):
        make_pod(w, node=r.choice(sorted(w.nodes)))
    for _ in range(r.randrange(2, 6)):
        make_pod(w)
    objects += [_obj("Node", o) for o in w.nodes.values()]
    objects += [_obj("DeviceClass", o) for o in w.classes.values()]
    objects += [_obj("ResourceSlice", o) for o in w.slices.values()]
    objects += [_obj("ResourceClaim", o) for o in w.claims.values()]
    objects += [_obj("PersistentVolumeClaim", o) for o in w.pvcs.values()]
    objects += [_obj("Pod", o) for o in w.pods.values()]
    kinds = [k for k, _ in STEP_WEIGHTS]
    weights = [n for _, n in STEP_WEIGHTS]
    out: list[JSON] = []
    while len(out) < steps:
        step = _step(w, r.choices(kinds, weights)[0], len(out))
        if step is not None:
            out.append(step)
    return {"name": f"queue-{seed}-{index:05d}", "objects": objects, "steps": out}


def generate(seed: int, count: int, steps: int = 40) -> list[JSON]:
    return [generate_sequence(seed, i, steps) for i in range(count)]


def step_kinds(sequences: Sequence[JSON]) -> dict[str, int]:
    """How many steps of each op (and kind) the sequences hold."""
    tally: dict[str, int] = {}
    for seq in sequences:
        for step in seq["steps"]:
            key = step["op"] + (f":{step['kind']}" if "kind" in step else "")
            tally[key] = tally.get(key, 0) + 1
    return dict(sorted(tally.items()))


__all__ = ["SCHEDULER", "generate", "generate_sequence", "step_kinds"]
