"""Claim cases for the scheduling differential test: kube-scheduler's DynamicResources for pods with
``spec.resourceClaims`` (by name and from ResourceClaimTemplates), alone or next to extended
resources served by DRA (a DeviceClass's ``extendedResourceName``) or by a device plugin.

``generate_claim_case(seed, index)`` returns one case of family "claims" (the schema of
draxr_dev.scheduling, with "deviceClasses", "resourceSlices", "resourceClaims" and
"resourceClaimTemplates"): a small cluster built like casegen's (fewer of the features that reject
nodes before DynamicResources), node-local ResourceSlices of two drivers (GPUs with a model and
memory, NICs), claims of other pods already allocated on some nodes, and the incoming pod's claims
in the states the resourceclaim controller and kube-scheduler leave them: unallocated; allocated
with the allocation's nodeSelector (or none, a network device) and reservedFor other pods (some,
or the API's 256), or the pod itself; made from a template and recorded in
``pod.status.resourceClaimStatuses`` (or not yet, or recorded as no claim); owned by another pod;
being deleted; missing; asking for a class that does not exist. Each case draws from its own
``random.Random(f"{seed}/claims/{index}")``.

Out of the cases on purpose: ``firstAvailable`` requests (DynamicResources then scores nodes by the
chosen subrequest, which schedule() cannot know before it allocates), binding conditions, device
taints, admin access, consumable capacity (the allocator's own differential covers them).

``CLAIM_TAGS``: what the differential test demands at least 20 claim cases of.
"""

from __future__ import annotations

import random
from typing import Any

from draxr_dev.allocator import casegen as ac
from draxr_dev.scheduling import casegen as cg

__all__ = ["CLAIM_TAGS", "generate_claim_case"]

JSON = dict[str, Any]

GPU_DRIVER = "gpu.example.com"
NIC_DRIVER = "nic.example.com"
EXTENDED = "example.com/gpu"
MODELS = ("a100", "t4")
POD_UID = "uid-incoming"

CLAIM_TAGS = (
    "claim:by-name",
    "claim:template",
    "claim:template-not-created",
    "claim:template-no-claim",
    "claim:template-not-owned",
    "claim:unallocated",
    "claim:allocated",
    "claim:allocated-no-selector",
    "claim:shared",
    "claim:reservedFor-full",
    "claim:reserved-for-pod",
    "claim:deleting",
    "claim:missing",
    "claim:class-missing",
    "claim:multiple",
    "claim:count",
    "claim:all",
    "claim:selector",
    "claim:constraint",
    "claim:nic",
    "claim:too-many",
    "claim:extended",
    "claim:extended-device-plugin",
    "claim:extended-only",
    "claims:existing-allocated",
    "slices:none-on-node",
)

_CLAIM_P = {
    "taints": 0.1,
    "unschedulable": 0.03,
    "node_affinity_required": 0.06,
    "node_selector": 0.04,
    "spread": 0.08,
    "affinity_required": 0.04,
    "anti_required": 0.04,
    "large_requests": 0.03,
    "host_ports": 0.04,
    "first_pod": 0.0,
    "missing_node": 0.05,
}


def _selector_for(node: str) -> JSON:
    return ac.node_selector(fields=[ac.req_expr("metadata.name", "In", node)])


class _World:
    def __init__(self, g: cg.Gen, nodes: list[JSON]) -> None:
        self.g, self.r, self.nodes = g, g.r, nodes
        self.classes: list[JSON] = []
        self.slices: list[JSON] = []
        self.claims: list[JSON] = []
        self.templates: list[JSON] = []
        self.devices: dict[str, list[tuple[str, str, str]]] = {}  # node -> (driver, device, model) free
        self.serial = 0

    def make_classes(self) -> None:
        r = self.r
        gpu: JSON = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.example.com", "uid": "uid-class-gpu", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}}]},
        }
        if r.random() < 0.75:
            gpu["spec"]["extendedResourceName"] = EXTENDED
        big = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu-a100.example.com", "uid": "uid-class-a100", "resourceVersion": "1"},
            "spec": {
                "selectors": [
                    {"cel": {"expression": f'device.driver == "{GPU_DRIVER}"'}},
                    {"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].model == "a100"'}},
                ]
            },
        }
        nic = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "nic.example.com", "uid": "uid-class-nic", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{NIC_DRIVER}"'}}]},
        }
        self.classes = [gpu, big, nic]

    def make_slices(self) -> None:
        r = self.r
        for node in self.nodes:
            name = node["metadata"]["name"]
            self.devices[name] = []
            if r.random() < 0.15:
                self.g.tag("slices:none-on-node")
                continue
            gpus = []
            for i in range(r.choice((1, 2, 2, 4, 4, 8))):
                model = r.choice(MODELS)
                gpus.append(
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "model": {"string": model},
                            "numa": {"int": i % 2},
                        },
                        "capacity": {"memory": {"value": "40Gi" if model == "a100" else "16Gi"}},
                    }
                )
                self.devices[name].append((GPU_DRIVER, f"gpu-{i}", model))
            self.slices.append(self._slice(name, GPU_DRIVER, gpus))
            if r.random() < 0.5:
                count = r.choice((1, 2))
                nics: list[JSON] = [{"name": f"nic-{i}", "attributes": {"numa": {"int": i % 2}}} for i in range(count)]
                self.devices[name] += [(NIC_DRIVER, f"nic-{i}", "") for i in range(count)]
                self.slices.append(self._slice(name, NIC_DRIVER, nics))

    def _slice(self, node: str, driver: str, devices: list[JSON]) -> JSON:
        short = driver.split(".")[0]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{short}", "uid": f"uid-slice-{node}-{short}", "resourceVersion": "1"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }

    def requests(self) -> list[JSON]:
        """The requests of one of the incoming pod's claims (casegen_mixed widens them)."""
        return _requests(self)

    def maybe_allocate(self, claim: JSON, nodes: list[str]) -> None:
        """Leave ``claim`` unallocated or allocate it, in one of the states upstream leaves."""
        _maybe_allocate(self, claim, nodes)

    def _take(self, node: str, driver: str, n: int) -> list[tuple[str, str, str]]:
        free = [d for d in self.devices.get(node, ()) if d[0] == driver]
        taken = free[:n]
        for d in taken:
            self.devices[node].remove(d)
        return taken

    def _allocation(self, node: str | None, driver: str, n: int, request: str) -> JSON | None:
        """An allocation of ``n`` free devices of ``driver`` on ``node`` (None: none left)."""
        if node is None:
            return {"devices": {"results": []}}
        taken = self._take(node, driver, n)
        if len(taken) < n:
            return None
        results = [{"request": request, "driver": d, "pool": node, "device": dev} for d, dev, _ in taken]
        return {"devices": {"results": results}, "nodeSelector": _selector_for(node)}

    def claim(self, name: str, ns: str, requests: list[JSON], **meta: Any) -> JSON:
        self.serial += 1
        claim: JSON = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": f"uid-claim-{self.serial}-{name}",
                "resourceVersion": "1",
                **meta,
            },
            "spec": {"devices": {"requests": requests}},
        }
        self.claims.append(claim)
        return claim

    def existing_claims(self, pods: list[JSON]) -> None:
        """Claims of bound pods, allocated on their nodes (their devices are taken)."""
        for i, p in enumerate(pods):
            node = p["spec"].get("nodeName")
            if not node or node not in self.devices or self.r.random() > 0.35:
                continue
            alloc = self._allocation(node, GPU_DRIVER, self.r.choice((1, 1, 2)), "gpu")
            if alloc is None:
                continue
            ns = p["metadata"].get("namespace") or "default"
            claim = self.claim(f"existing-{i}", ns, [_exact("gpu", "gpu.example.com", 1)])
            claim["status"] = {
                "allocation": alloc,
                "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": f"uid-existing-{i}"}],
            }
            self.g.tag("claims:existing-allocated")


def _exact(name: str, cls: str, count: int | None, selector: str | None = None) -> JSON:
    """A request of ``count`` devices (None: all) of class ``cls``, by the allocator cases' builders."""
    selectors = () if selector is None else (selector,)
    return ac.request(name, ac.exact(cls, count or 0, all_=count is None, selectors=selectors))


def _requests(w: _World) -> list[JSON]:
    r, g = w.r, w.g
    kind = r.random()
    if kind < 0.12:
        g.tag("claim:nic")
        return [_exact("nic", "nic.example.com", 1)]
    if kind < 0.2:
        g.tag("claim:all")
        return [_exact("gpus", r.choice(("gpu.example.com", "gpu-a100.example.com")), None)]
    if kind < 0.27:
        g.tag("claim:class-missing")
        return [_exact("gpu", "tpu.example.com", 1)]
    if kind < 0.35:
        g.tag("claim:too-many")
        return [_exact("gpu", "gpu.example.com", r.choice((5, 9)))]
    cls = r.choice(("gpu.example.com", "gpu.example.com", "gpu-a100.example.com"))
    selector = None
    if r.random() < 0.2:
        selector = f'device.attributes["{GPU_DRIVER}"].model == "{r.choice(MODELS)}"'
        g.tag("claim:selector")
    count = r.choice((1, 1, 1, 2, 3))
    g.tag("claim:count")
    reqs = [_exact("gpu", cls, count, selector)]
    if r.random() < 0.15:
        reqs.append(_exact("nic", "nic.example.com", 1))
        g.tag("claim:nic")
    return reqs


def _with_constraint(w: _World, claim: JSON) -> None:
    requests = claim["spec"]["devices"]["requests"]
    several = len(requests) > 1 or (requests and ((requests[0].get("exactly") or {}).get("count") or 0) > 1)
    if several and w.r.random() < 0.3:
        names = [q["name"] for q in requests]
        # (a NIC lacks the GPU driver's attribute: with one, the claim cannot fit)
        claim["spec"]["devices"]["constraints"] = [{"requests": names, "matchAttribute": f"{GPU_DRIVER}/numa"}]
        w.g.tag("claim:constraint")


def _incoming_claims(w: _World, pod: JSON) -> None:
    r, g = w.r, w.g
    ns = pod["metadata"]["namespace"]
    pname = pod["metadata"]["name"]
    entries: list[JSON] = []
    statuses: list[JSON] = []
    nodes = [n["metadata"]["name"] for n in w.nodes]
    for i in range(r.choice((1, 1, 1, 2, 2, 3))):
        entry = f"res-{i}"
        state = r.random()
        if r.random() < 0.4:  # from a template
            g.tag("claim:template")
            tmpl = f"tmpl-{i}"
            requests = w.requests()
            w.templates.append(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": tmpl, "namespace": ns, "uid": f"uid-tmpl-{i}", "resourceVersion": "1"},
                    "spec": {"spec": {"devices": {"requests": requests}}},
                }
            )
            entries.append({"name": entry, "resourceClaimTemplateName": tmpl})
            if state < 0.08:
                g.tag("claim:template-not-created")
                continue
            if state < 0.14:
                g.tag("claim:template-no-claim")
                statuses.append({"name": entry})
                continue
            name = f"{pname}-{entry}-x{i}z7"
            statuses.append({"name": entry, "resourceClaimName": name})
            owner_uid = POD_UID
            if state < 0.2:
                owner_uid = "uid-someone-else"
                g.tag("claim:template-not-owned")
            owner = {"apiVersion": "v1", "kind": "Pod", "name": pname, "uid": owner_uid, "controller": True}
            claim = w.claim(name, ns, requests, ownerReferences=[owner])
            claim["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": entry}
        else:
            g.tag("claim:by-name")
            name = f"shared-{i}"
            entries.append({"name": entry, "resourceClaimName": name})
            if state < 0.06:
                g.tag("claim:missing")
                continue
            claim = w.claim(name, ns, w.requests())
        _with_constraint(w, claim)
        if r.random() < 0.05:
            claim["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
            g.tag("claim:deleting")
        w.maybe_allocate(claim, nodes)
    pod["spec"]["resourceClaims"] = entries
    if statuses:
        pod.setdefault("status", {})["resourceClaimStatuses"] = statuses
    if len(entries) > 1:
        g.tag("claim:multiple")


def _maybe_allocate(w: _World, claim: JSON, nodes: list[str]) -> None:
    r, g = w.r, w.g
    if r.random() < 0.55:
        g.tag("claim:unallocated")
        return
    request = claim["spec"]["devices"]["requests"][0]
    driver = NIC_DRIVER if request["exactly"]["deviceClassName"] == "nic.example.com" else GPU_DRIVER
    if r.random() < 0.12:
        node = None
        g.tag("claim:allocated-no-selector")
    else:
        node = r.choice(nodes)
    alloc = w._allocation(node, driver, 1, request["name"])
    if alloc is None:
        g.tag("claim:unallocated")
        return
    g.tag("claim:allocated")
    reserved: list[JSON] = []
    roll = r.random()
    if roll < 0.15:
        g.tag("claim:reserved-for-pod")
        reserved.append({"resource": "pods", "name": "incoming", "uid": POD_UID})
    elif roll < 0.3:
        g.tag("claim:reservedFor-full")
        reserved = [{"resource": "pods", "name": f"user-{k}", "uid": f"uid-user-{k}"} for k in range(256)]
    elif roll < 0.75:
        g.tag("claim:shared")
        reserved = [{"resource": "pods", "name": f"user-{k}", "uid": f"uid-user-{k}"} for k in range(r.choice((1, 3)))]
    claim["status"] = {"allocation": alloc}
    if reserved:
        claim["status"]["reservedFor"] = reserved
    claim["metadata"].setdefault("finalizers", ["resource.kubernetes.io/delete-protection"])


def _extended_resources(w: _World, pod: JSON, *, force: bool = False) -> None:
    r, g = w.r, w.g
    if not force and r.random() > 0.35:
        return
    container = pod["spec"]["containers"][0]
    res = container.setdefault("resources", {})
    n = str(r.choice((1, 1, 2)))
    res.setdefault("requests", {})[EXTENDED] = n
    res.setdefault("limits", {})[EXTENDED] = n
    g.tag("claim:extended")
    if r.random() < 0.5:
        for node in w.nodes:
            if r.random() < 0.4:
                node["status"]["allocatable"][EXTENDED] = "4"
                node["status"].setdefault("capacity", {})[EXTENDED] = "4"
                g.tag("claim:extended-device-plugin")


def generate_claim_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/claims/{index}")
    g = cg.Gen(r, "mixed")
    g.family = "claims"
    g.p.update(_CLAIM_P)
    nodes = [cg.make_node(g, i) for i in range(r.choice((2, 3, 3, 4, 4, 5, 6)))]
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.choice((0, 2, 4, 6)))]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-existing-{i}"
    pod = cg.make_incoming_pod(g, nodes, pods)
    pod["metadata"]["name"] = "incoming"
    pod["metadata"]["uid"] = POD_UID
    w = _World(g, nodes)
    w.make_classes()
    w.make_slices()
    w.existing_claims(pods)
    if r.random() < 0.1:
        g.tag("claim:extended-only")
        pod["spec"]["resourceClaims"] = []
        _extended_resources(w, pod, force=True)
    else:
        _incoming_claims(w, pod)
        _extended_resources(w, pod)
    if not pod["spec"].get("resourceClaims"):
        pod["spec"].pop("resourceClaims", None)
    case: JSON = {
        "name": f"claims-{index:05d}",
        "family": "claims",
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": cg.make_namespaces(),
        **cg.make_controllers(g, pod),
        "deviceClasses": w.classes,
        "resourceSlices": w.slices,
        "resourceClaims": w.claims,
        "resourceClaimTemplates": w.templates,
        "pod": pod,
    }
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags | cg.scan_tags(case))
    return case
