"""Mixed and large cases for the scheduling differential test: the shapes the single-family
generators leave out, together on one pod and one cluster.

``generate_mixed_case(seed, index)`` (family "mixed-dra"): a small cluster where the incoming pod
combines ResourceClaims (casegen_claims' states) with PersistentVolumeClaims and ephemeral volumes
(casegen_volumes), topology spreading and pod (anti-)affinity, and resources beyond cpu and
memory; the devices come in the shapes casegen_claims keeps node-local and simple:

- network-attached pools (a slice with a ``nodeSelector`` on the zone, or ``allNodes``) and
  per-device node selection (``perDeviceNodeSelection``: each device its ``nodeName``,
  ``nodeSelector`` or ``allNodes``);
- pools of several slices (``resourceSliceCount`` 2, and now and then 3 with only 2 published: an
  incomplete pool);
- partitionable devices consuming a slice's shared counters (a counter slice and a device slice
  in one pool);
- device taints (NoSchedule, NoExecute, None) and requests that tolerate them;
- ``firstAvailable`` requests (DynamicResources then scores by the subrequest each node gets) and
  ``adminAccess`` requests (in a namespace labelled for it);
- existing pods that hold a device plugin's extended resource, or an extended resource DRA serves
  through their special claim (``status.extendedResourceClaimStatus``), next to existing pods'
  ordinary claims;
- ephemeral-storage, hugepages-2Mi/1Gi, pod overhead (``spec.overhead``) and pod-level resources
  (``spec.resources``) on the incoming and the existing pods, those resources on the nodes.

``generate_large_case(seed, index)`` (family "large"): 100 to 500 nodes (kube-scheduler then
stops searching after numFeasibleNodesToFind feasible nodes: the case asks the harness for that
search too, ``partialScoring``), a pod per node or so, the other resources, and in some cases
node-local devices and claims.

Each case draws from its own ``random.Random(f"{seed}/mixed/{index}")`` or
``random.Random(f"{seed}/large/{index}")``: the other families' cases do not change.
``MIXED_TAGS`` and ``LARGE_TAGS``: what the differential test demands at least 20 (large: 3)
cases of.
"""

from __future__ import annotations

import random
from typing import Any

from draxr_dev.scheduling import casegen as cg
from draxr_dev.scheduling import casegen_claims as cc
from draxr_dev.scheduling import casegen_volumes as cv

__all__ = ["LARGE_TAGS", "MIXED_TAGS", "generate_large_case", "generate_mixed_case"]

JSON = dict[str, Any]

FABRIC_DRIVER = "fabric.example.com"
PART_DRIVER = "part.example.com"
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
HEALTH = "example.com/health"

MIXED_TAGS = (
    "mixed:claims+volumes",
    "mixed:claims+spread",
    "mixed:claims+affinity",
    "mixed:claims+volumes+spread+affinity",
    "slices:network-attached",
    "slices:all-nodes",
    "slices:per-device-node-selection",
    "slices:multi-slice-pool",
    "slices:incomplete-pool",
    "slices:counters",
    "slices:device-taints",
    "claim:network-attached",
    "claim:counters",
    "claim:firstAvailable",
    "claim:device-toleration",
    "claim:admin-access",
    "pods:device-plugin",
    "pods:special-claim",
    "node:ephemeral-storage",
    "node:hugepages",
    "pod:ephemeral-storage",
    "pod:hugepages",
    "pod:overhead",
    "pod:pod-level-resources",
    "pods:ephemeral-storage",
    "pods:hugepages",
    "pods:overhead",
    "pods:pod-level-resources",
)
LARGE_TAGS = ("nodes:100+", "nodes:300+", "large:claims")

_MIXED_P = {
    "taints": 0.12,
    "unschedulable": 0.03,
    "node_affinity_required": 0.1,
    "node_selector": 0.05,
    "spread": 0.45,
    "affinity_required": 0.15,
    "affinity_preferred": 0.2,
    "anti_required": 0.12,
    "anti_preferred": 0.2,
    "large_requests": 0.04,
    "host_ports": 0.05,
    "first_pod": 0.05,
    "missing_node": 0.03,
}
# Most large cases must have more feasible nodes than kube-scheduler looks for.
_LARGE_P = {
    "taints": 0.06,
    "unschedulable": 0.01,
    "missing_node": 0.01,
    "large_requests": 0.02,
    "node_selector": 0.04,
    "node_affinity_required": 0.1,
    "affinity_required": 0.04,
    "anti_required": 0.06,
    "host_ports": 0.08,
    "first_pod": 0.0,
    "pod_anti_existing": 0.03,
    "pod_affinity_existing": 0.05,
}


# -- resources beyond cpu and memory ---------------------------------------------------------------


def node_resources(g: cg.Gen, node: JSON) -> None:
    """ephemeral-storage and hugepages on a node (allocatable and capacity)."""
    r = g.r
    alloc = node["status"]["allocatable"]
    if r.random() < 0.85:
        alloc["ephemeral-storage"] = r.choice(("8Gi", "20Gi", "100Gi", "30000Mi"))
        g.tag("node:ephemeral-storage")
    if r.random() < 0.5:
        alloc["hugepages-2Mi"] = r.choice(("0", "1Gi", "2Gi", "4Gi"))
        g.tag("node:hugepages")
    if r.random() < 0.15:
        alloc["hugepages-1Gi"] = r.choice(("1Gi", "2Gi"))
        g.tag("node:hugepages")
    node["status"]["capacity"] = dict(alloc)


def pod_resources(g: cg.Gen, pod: JSON, *, incoming: bool) -> None:
    """ephemeral-storage, hugepages, overhead and pod-level resources on a pod."""
    r = g.r
    spec = pod["spec"]
    prefix = "pod" if incoming else "pods"
    scale = 1.0 if incoming else 0.5
    for c in spec["containers"] + spec.get("initContainers", []):
        if r.random() < 0.45 * scale:
            res = c.setdefault("resources", {})
            res.setdefault("requests", {})["ephemeral-storage"] = r.choice(("500Mi", "1Gi", "4Gi", "12Gi", "40Gi"))
            g.tag(f"{prefix}:ephemeral-storage")
        if r.random() < 0.25 * scale:
            res = c.setdefault("resources", {})
            size = r.choice(("256Mi", "1Gi", "3Gi"))
            name = "hugepages-1Gi" if r.random() < 0.15 else "hugepages-2Mi"
            if name == "hugepages-1Gi":
                size = r.choice(("1Gi", "2Gi"))
            res.setdefault("requests", {})[name] = size
            res.setdefault("limits", {})[name] = size
            res["requests"].setdefault("memory", "128Mi")
            g.tag(f"{prefix}:hugepages")
    if r.random() < 0.2 * scale:
        spec["runtimeClassName"] = "kata"
        spec["overhead"] = {"cpu": r.choice(("100m", "250m")), "memory": r.choice(("64Mi", "160Mi"))}
        g.tag(f"{prefix}:overhead")
    if r.random() < 0.2 * scale:
        requests: JSON = {}
        if r.random() < 0.8:
            requests["cpu"] = r.choice(("500m", "1", "2", "3500m", "6"))
        if r.random() < 0.7 or not requests:
            requests["memory"] = r.choice(("512Mi", "1Gi", "3Gi", "6Gi", "20Gi"))
        if r.random() < 0.15:
            requests["hugepages-2Mi"] = "1Gi"
        spec["resources"] = {"requests": requests}
        if r.random() < 0.4:
            spec["resources"]["limits"] = dict(requests)
        # Container requests above the pod's are invalid: the pod's then cover the containers'
        # (a limit goes with its request: kube-apiserver would default the request from it).
        for c in spec["containers"] + spec.get("initContainers", []):
            res = c.get("resources") or {}
            reqs, limits = res.get("requests") or {}, res.get("limits") or {}
            for name in list(reqs):
                if name in requests and r.random() < 0.7:
                    del reqs[name]
                    limits.pop(name, None)
        g.tag(f"{prefix}:pod-level-resources")


# -- devices ---------------------------------------------------------------------------------------


def _zone_selector(zone: str) -> JSON:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": cg.ZONE, "operator": "In", "values": [zone]}]}]}


class DraWorld(cc._World):
    """casegen_claims' world with the device shapes it leaves out (see the module docstring)."""

    def __init__(self, g: cg.Gen, nodes: list[JSON]) -> None:
        super().__init__(g, nodes)
        self.admin = False  # a request asks for admin access: the namespaces are labelled for it

    def make_classes(self) -> None:
        super().make_classes()
        for name, driver in (("fabric.example.com", FABRIC_DRIVER), ("gpu-part.example.com", PART_DRIVER)):
            self.classes.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name, "uid": f"uid-class-{driver}", "resourceVersion": "1"},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
                }
            )

    def make_slices(self) -> None:
        super().make_slices()
        r, g = self.r, self.g
        # Device taints on some GPUs (before any allocation: existing claims may hold them).
        for s in self.slices:
            if s["spec"]["driver"] != cc.GPU_DRIVER:
                continue
            for d in s["spec"]["devices"]:
                if r.random() < 0.2:
                    effect = r.choice(("NoSchedule", "NoSchedule", "NoExecute", "None"))
                    d["taints"] = [{"key": HEALTH, "value": r.choice(("degraded", "failing")), "effect": effect}]
                    g.tag("slices:device-taints")
        # Pools of several slices: a node's GPUs split in two.
        for s in list(self.slices):
            devices = s["spec"]["devices"]
            if s["spec"]["driver"] != cc.GPU_DRIVER or len(devices) < 2 or r.random() > 0.35:
                continue
            half = len(devices) // 2
            count = 3 if r.random() < 0.12 else 2
            second = {
                **s,
                "metadata": {**s["metadata"], "name": s["metadata"]["name"] + "-b", "uid": s["metadata"]["uid"] + "-b"},
                "spec": {**s["spec"], "devices": devices[half:]},
            }
            s["spec"]["devices"] = devices[:half]
            for part in (s, second):
                part["spec"]["pool"] = {**s["spec"]["pool"], "resourceSliceCount": count}
            self.slices.append(second)
            g.tag("slices:multi-slice-pool" if count == 2 else "slices:incomplete-pool")
            if count == 3:  # the incomplete pool's devices cannot be allocated: not free either
                node = s["spec"]["nodeName"]
                self.devices[node] = [d for d in self.devices[node] if d[0] != cc.GPU_DRIVER]
        # Partitionable devices: a counter slice and a device slice in one pool.
        for node in self.nodes:
            name = node["metadata"]["name"]
            if r.random() > 0.3:
                continue
            pool = {"name": f"{name}-part", "generation": 1, "resourceSliceCount": 2}
            total = r.choice((20, 40))
            self.slices.append(
                self._raw_slice(
                    f"{name}-part-counters",
                    PART_DRIVER,
                    pool,
                    {
                        "nodeName": name,
                        "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": f"{total}Gi"}}}],
                    },
                )
            )
            parts = []
            for i in range(r.choice((2, 3, 4, 6))):
                size = r.choice((10, 10, 20))
                parts.append(
                    {
                        "name": f"part-{i}",
                        "attributes": {"size": {"int": size}},
                        "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": f"{size}Gi"}}}],
                    }
                )
            self.slices.append(self._raw_slice(f"{name}-part", PART_DRIVER, pool, {"nodeName": name, "devices": parts}))
            g.tag("slices:counters")
        # Network-attached pools: per zone (a node selector) or for all nodes.
        if r.random() < 0.7:
            zones = sorted({n["metadata"]["labels"][cg.ZONE] for n in self.nodes if cg.ZONE in n["metadata"]["labels"]})
            for zone in zones[: r.choice((1, 2, 3))]:
                devices = [
                    {"name": f"fab-{i}", "attributes": {"zone": {"string": zone}}} for i in range(r.choice((1, 2)))
                ]
                pool = {"name": f"fabric-{zone}", "generation": 1, "resourceSliceCount": 1}
                spec: JSON = {"nodeSelector": _zone_selector(zone), "devices": devices}
                self.slices.append(self._raw_slice(f"fabric-{zone}", FABRIC_DRIVER, pool, spec))
                g.tag("slices:network-attached")
        if r.random() < 0.3:
            pool = {"name": "fabric-global", "generation": 1, "resourceSliceCount": 1}
            devices = [{"name": f"glob-{i}"} for i in range(r.choice((1, 2)))]
            self.slices.append(
                self._raw_slice("fabric-global", FABRIC_DRIVER, pool, {"allNodes": True, "devices": devices})
            )
            g.tag("slices:network-attached", "slices:all-nodes")
        if r.random() < 0.35:
            pool = {"name": "fabric-mixed", "generation": 1, "resourceSliceCount": 1}
            devices = []
            for i in range(r.choice((2, 3, 4))):
                device: JSON = {"name": f"mix-{i}"}
                kind = r.random()
                if kind < 0.5:
                    device["nodeName"] = r.choice(self.nodes)["metadata"]["name"]
                elif kind < 0.75:
                    device["nodeSelector"] = _zone_selector(r.choice(cg.ZONES))
                else:
                    device["allNodes"] = True
                devices.append(device)
            spec = {"perDeviceNodeSelection": True, "devices": devices}
            self.slices.append(self._raw_slice("fabric-mixed", FABRIC_DRIVER, pool, spec))
            g.tag("slices:per-device-node-selection", "slices:network-attached")

    def _raw_slice(self, name: str, driver: str, pool: JSON, spec: JSON) -> JSON:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": f"uid-slice-{name}", "resourceVersion": "1"},
            "spec": {"driver": driver, "pool": pool, **spec},
        }

    def requests(self) -> list[JSON]:
        r, g = self.r, self.g
        kind = r.random()
        if kind < 0.12:
            g.tag("claim:network-attached")
            return [cc._exact("fab", "fabric.example.com", 1)]
        if kind < 0.24:
            g.tag("claim:counters")
            return [cc._exact("part", "gpu-part.example.com", r.choice((1, 1, 2, 3)))]
        if kind < 0.42:
            g.tag("claim:firstAvailable")
            subs = [
                {"name": "big", "deviceClassName": "gpu-a100.example.com", "allocationMode": "ExactCount", "count": 1},
                {"name": "any", "deviceClassName": "gpu.example.com", "allocationMode": "ExactCount", "count": 1},
            ]
            if r.random() < 0.4:
                subs.insert(
                    r.randint(0, 2),
                    {
                        "name": "part",
                        "deviceClassName": "gpu-part.example.com",
                        "allocationMode": "ExactCount",
                        "count": 1,
                    },
                )
            if r.random() < 0.3:
                subs[0]["count"] = 2
            if r.random() < 0.3:
                subs.append(
                    {"name": "fab", "deviceClassName": "fabric.example.com", "allocationMode": "ExactCount", "count": 1}
                )
            return [{"name": "gpu", "firstAvailable": subs}]
        reqs = super().requests()
        for q in reqs:
            exactly = q["exactly"]
            if exactly["deviceClassName"].startswith("gpu") and r.random() < 0.3:
                toleration: JSON = {"key": HEALTH, "operator": "Exists"}
                if r.random() < 0.6:
                    toleration["effect"] = r.choice(("NoSchedule", "NoExecute"))
                exactly["tolerations"] = [toleration]
                g.tag("claim:device-toleration")
            if exactly["deviceClassName"].startswith("gpu") and r.random() < 0.15:
                exactly["adminAccess"] = True
                self.admin = True
                g.tag("claim:admin-access")
        return reqs

    def maybe_allocate(self, claim: JSON, nodes: list[str]) -> None:
        first = claim["spec"]["devices"]["requests"][0]
        if "exactly" not in first or first["exactly"]["deviceClassName"] not in (
            "gpu.example.com",
            "gpu-a100.example.com",
            "nic.example.com",
        ):
            self.g.tag("claim:unallocated")
            return
        super().maybe_allocate(claim, nodes)

    def device_plugin_nodes(self) -> None:
        """Some nodes serve the extended resource by a device plugin (their allocatable)."""
        for node in self.nodes:
            if self.r.random() < 0.3:
                node["status"]["allocatable"][cc.EXTENDED] = "4"
                node["status"].setdefault("capacity", {})[cc.EXTENDED] = "4"

    def existing_extended(self, pods: list[JSON], dra_serves: bool) -> None:
        """Existing pods asking for the extended resource: served by the node's device plugin,
        or by DRA through their special claim (allocated on their node, reserved for them)."""
        r, g = self.r, self.g
        by_name = {n["metadata"]["name"]: n for n in self.nodes}
        for p in pods:
            node = by_name.get(p["spec"].get("nodeName", ""))
            if node is None or r.random() > 0.35:
                continue
            count = r.choice((1, 1, 2))
            c = p["spec"]["containers"][0]
            res = c.setdefault("resources", {})
            if cc.EXTENDED in node["status"]["allocatable"]:
                res.setdefault("requests", {})[cc.EXTENDED] = str(count)
                res.setdefault("limits", {})[cc.EXTENDED] = str(count)
                g.tag("pods:device-plugin")
                continue
            if not dra_serves:
                continue
            reqs = res.setdefault("requests", {})
            reqs[cc.EXTENDED] = str(count)
            res.setdefault("limits", {})[cc.EXTENDED] = str(count)
            index = len(p["spec"].get("initContainers", []))
            request = f"container-{index}-request-{sorted(reqs).index(cc.EXTENDED)}"
            alloc = self._allocation(node["metadata"]["name"], cc.GPU_DRIVER, count, request)
            if alloc is None:  # no devices left: the pod asks for none
                del reqs[cc.EXTENDED], res["limits"][cc.EXTENDED]
                continue
            meta = p["metadata"]
            name = f"{meta['name']}-extended-resources-{r.randint(10000, 99999)}"
            owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True}
            claim = self.claim(
                name,
                meta.get("namespace") or "default",
                [cc._exact(request, "gpu.example.com", count)],
                annotations={"resource.kubernetes.io/extended-resource-claim": "true"},
                ownerReferences=[owner],
                finalizers=["resource.kubernetes.io/delete-protection"],
            )
            claim["status"] = {
                "allocation": alloc,
                "reservedFor": [{"resource": "pods", "name": meta["name"], "uid": meta["uid"]}],
            }
            p["status"]["extendedResourceClaimStatus"] = {
                "resourceClaimName": name,
                "requestMappings": [{"containerName": c["name"], "resourceName": cc.EXTENDED, "requestName": request}],
            }
            g.tag("pods:special-claim")


def _namespaces(admin: bool) -> list[JSON]:
    out = cg.make_namespaces()
    if admin:
        for ns in out:
            ns["metadata"]["labels"][ADMIN_LABEL] = "true"
    return out


def generate_mixed_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/mixed/{index}")
    g = cg.Gen(r, "mixed")
    g.family = "mixed-dra"
    g.p.update(_MIXED_P)
    nodes = [cg.make_node(g, i) for i in range(r.choice((2, 3, 4, 4, 5, 6, 8)))]
    for n in nodes:
        node_resources(g, n)
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.choice((0, 2, 4, 6, 10)))]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-existing-{i}"
        pod_resources(g, p, incoming=False)
    pod = cg.make_incoming_pod(g, nodes, pods)
    pod["metadata"]["name"] = "incoming"
    pod["metadata"]["uid"] = cc.POD_UID
    pod_resources(g, pod, incoming=True)

    w = DraWorld(g, nodes)
    w.make_classes()
    w.device_plugin_nodes()
    w.make_slices()
    dra_serves = "extendedResourceName" in w.classes[0]["spec"]
    w.existing_extended(pods, dra_serves)
    w.existing_claims(pods)
    claims = r.random() < 0.85
    if claims:
        cc._incoming_claims(w, pod)
    cc._extended_resources(w, pod)
    if not pod["spec"].get("resourceClaims"):
        pod["spec"].pop("resourceClaims", None)

    storage = cv._World(g, nodes)
    storage.make_classes()
    storage.make_drivers()
    storage.make_csi_nodes()
    storage.make_capacities()
    rwop: list[JSON] = []
    for p in pods:
        if r.random() < 0.3:
            cv._existing_pod_volumes(storage, p, rwop)
    volumes = r.random() < 0.6
    if volumes:
        cv._incoming_volumes(storage, pod, rwop, [])
        volumes = bool(pod["spec"].get("volumes"))

    spec = pod["spec"]
    affinity = spec.get("affinity") or {}
    spread = bool(spec.get("topologySpreadConstraints"))
    inter = bool(affinity.get("podAffinity") or affinity.get("podAntiAffinity"))
    if spec.get("resourceClaims"):
        if volumes:
            g.tag("mixed:claims+volumes")
        if spread:
            g.tag("mixed:claims+spread")
        if inter:
            g.tag("mixed:claims+affinity")
        if volumes and spread and inter:
            g.tag("mixed:claims+volumes+spread+affinity")
    case: JSON = {
        "name": f"mixed-dra-{index:05d}",
        "family": "mixed-dra",
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": _namespaces(w.admin),
        **cg.make_controllers(g, pod),
        "persistentVolumes": storage.pvs,
        "persistentVolumeClaims": storage.pvcs,
        "storageClasses": list(storage.classes.values()),
        "csiNodes": storage.csi_nodes,
        "csiDrivers": storage.drivers,
        "csiStorageCapacities": storage.capacities,
        "volumeAttachments": storage.attachments,
        "deviceClasses": w.classes,
        "resourceSlices": w.slices,
        "resourceClaims": w.claims,
        "resourceClaimTemplates": w.templates,
        "pod": pod,
    }
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags | cg.scan_tags(case))
    return case


def _large_case(name: str, g: cg.Gen, nodes: list[JSON], pods: list[JSON], pod: JSON) -> JSON:
    """A large case's objects (the caller adds claims and tags); partial scoring, as upstream's
    search stops once it has enough feasible nodes."""
    return {
        "name": name,
        "family": "large",
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": cg.make_namespaces(),
        **cg.make_controllers(g, pod),
        "pod": pod,
        "partialScoring": True,
    }


def generate_large_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/large/{index}")
    g = cg.Gen(r, "mixed")
    g.family = "large"
    g.p.update(_LARGE_P)
    count = r.choice((100, 120, 150, 200, 260, 300, 400, 500))
    nodes = [cg.make_node(g, i) for i in range(count)]
    g.tag("nodes:100+")
    if count >= 300:
        g.tag("nodes:300+")
    for n in nodes:
        node_resources(g, n)
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.randint(count // 4, count))]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-existing-{i}"
        pod_resources(g, p, incoming=False)
    pod = cg.make_incoming_pod(g, nodes, pods)
    pod["metadata"]["name"] = "incoming"
    pod["metadata"]["uid"] = cc.POD_UID
    pod_resources(g, pod, incoming=True)
    case = _large_case(f"large-{index:05d}", g, nodes, pods, pod)
    if r.random() < 0.4:
        w = cc._World(g, nodes)
        w.make_classes()
        w.make_slices()
        w.existing_claims(pods)
        cc._incoming_claims(w, pod)
        case.update(
            deviceClasses=w.classes,
            resourceSlices=w.slices,
            resourceClaims=w.claims,
            resourceClaimTemplates=w.templates,
        )
        g.tag("large:claims")
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags | cg.scan_tags(case))
    return case


def generate_cut_off_case(seed: int) -> JSON:
    """A large case whose pod fits nearly every node, so that kube-scheduler's search stops at
    numFeasibleNodesToFind, before the last node (the generated large cases do in one or two of
    16 at most seeds, and in none at some: seed 639494). Its nodes have no taints and none is
    cordoned; the pod asks for little, with a label no placed pod's terms select."""
    r = random.Random(f"{seed}/large-cut-off")
    g = cg.Gen(r, "mixed")
    g.family = "large"
    g.p.update(_LARGE_P)
    count = r.choice((200, 260, 300))
    nodes = [cg.make_node(g, i) for i in range(count)]
    for n in nodes:
        n["spec"].pop("taints", None)
        n["spec"].pop("unschedulable", None)
        node_resources(g, n)
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.randint(count // 4, count // 2))]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-existing-{i}"
    requests = {"cpu": "100m", "memory": "64Mi"}
    pod: JSON = {
        "metadata": {"name": "incoming", "namespace": "default", "uid": cc.POD_UID, "labels": {"app": "cut-off"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.example.com/app:0", "resources": {"requests": requests}}]
        },
        "status": {"phase": "Pending"},
    }
    case = _large_case("large-cut-off", g, nodes, pods, pod)
    g.tag("large:cut-off")
    case["tags"] = sorted(g.tags | cg.scan_tags(case))
    return case
