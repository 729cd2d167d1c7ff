"""Volume cases for the scheduling differential test: kube-scheduler's VolumeRestrictions,
NodeVolumeLimits, VolumeBinding and VolumeZone on generated storage.

``generate_volume_case(seed, index)`` returns one case of family "volumes" (the schema of
draxr_dev.scheduling): a small cluster built like casegen's (nodes, bound pods, workloads, with
fewer of the features that would reject nodes before the volume filters), plus StorageClasses,
CSIDrivers, CSINodes, CSIStorageCapacities, PersistentVolumes, PersistentVolumeClaims and
VolumeAttachments, and volumes on the incoming and the existing pods. Each case draws from its own
``random.Random(f"{seed}/volumes/{index}")``: the other families' cases do not change.

Objects are what kube-apiserver stores (defaulted fields included: volumeMode Filesystem, the
reclaim policy, a class's volumeBindingMode, a CSIDriver's defaults, iscsi/rbd defaults) in the
states the PV controller leaves them: an Available PV has no claimRef or one pre-binding it to a
claim by name; a Bound PV and its Bound claim point at each other (the claim has the
bind-completed and bound-by-controller annotations); a Released PV's claim is gone; a claim whose
PV is gone is Lost; a claim the user pre-bound by spec.volumeName waits in Pending.

Volumes use CSI or local PVs and CSI (and two in-tree, migrated) provisioners: in-tree PV sources
are out of scope (draxr.core.volumes does not translate them). Where upstream's choice depends on
an informer's map order, the cases avoid the ambiguity: PV sizes are unique within a case, one PV
at most is pre-bound to a claim, a class's CSIStorageCapacities cover disjoint nodes, and one
driver at most keeps pods off nodes without it.

``VOLUME_TAGS``: what the differential test demands at least 20 volume cases of.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from draxr_dev.scheduling import casegen as cg

__all__ = ["VOLUME_TAGS", "generate_volume_case"]

JSON = dict[str, Any]

ZONE_BETA = "failure-domain.beta.kubernetes.io/zone"
REGION_BETA = "failure-domain.beta.kubernetes.io/region"
GIB = 1024

DRIVER_CAPACITY = "csi.capacity.example.com"  # storageCapacity: true
DRIVER_PLAIN = "csi.plain.example.com"  # a CSIDriver without capacity tracking (or none at all)
DRIVER_REQUIRED = "csi.required.example.com"  # preventPodSchedulingIfMissing: true
GCE_DRIVER = "pd.csi.storage.gke.io"
EBS_DRIVER = "ebs.csi.aws.com"
DRIVERS = (DRIVER_CAPACITY, DRIVER_PLAIN, DRIVER_REQUIRED)

# name -> (provisioner, binding mode, may have allowedTopologies)
CLASSES = {
    "fast": (DRIVER_CAPACITY, "WaitForFirstConsumer", True),
    "standard": (DRIVER_PLAIN, "Immediate", False),
    "zonal": (DRIVER_PLAIN, "WaitForFirstConsumer", True),
    "local": ("kubernetes.io/no-provisioner", "WaitForFirstConsumer", False),
    "pd": ("kubernetes.io/gce-pd", "WaitForFirstConsumer", False),
    "required": (DRIVER_REQUIRED, "WaitForFirstConsumer", False),
}
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
TIERS = ("gold", "silver")
DISKS = ("disk-0", "disk-1", "disk-2")
MONITORS = ("10.0.0.1:6789", "10.0.0.2:6789", "10.0.0.3:6789")

VOLUME_TAGS = (
    "vol:pvc-bound",
    "vol:pvc-bound-pv-missing",
    "vol:pvc-lost",
    "vol:pvc-missing",
    "vol:pvc-deleting",
    "vol:pvc-immediate-unbound",
    "vol:pvc-prebound-volumeName",
    "vol:pvc-wffc",
    "vol:pvc-wffc-selected-node",
    "vol:pvc-class-missing",
    "vol:pvc-no-class",
    "vol:pvc-selector",
    "vol:pvc-block",
    "vol:pvc-rwop",
    "vol:pvc-rwop-in-use",
    "vol:pvc-multiple",
    "vol:pvc-vac",
    "vol:pvc-no-request",
    "vol:pv-available",
    "vol:pv-bound",
    "vol:pv-released",
    "vol:pv-prebound-claimRef",
    "vol:pv-node-affinity",
    "vol:pv-node-affinity-matchFields",
    "vol:pv-zone-label",
    "vol:pv-zone-beta-label",
    "vol:pv-region-label",
    "vol:pv-multi-zone",
    "vol:pv-block",
    "vol:pv-deleting",
    "vol:pv-vac",
    "vol:pv-local",
    "vol:pv-csi",
    "vol:class-immediate",
    "vol:class-wffc",
    "vol:class-no-provisioner",
    "vol:class-allowedTopologies",
    "vol:class-in-tree-provisioner",
    "vol:csidriver-capacity",
    "vol:csidriver-no-capacity",
    "vol:csidriver-prevent-missing",
    "vol:capacity-zone",
    "vol:capacity-hostname",
    "vol:capacity-max-volume-size",
    "vol:capacity-no-topology",
    "vol:csinode",
    "vol:csinode-limits",
    "vol:csinode-missing",
    "vol:csinode-migrated",
    "vol:attachments",
    "vol:ephemeral",
    "vol:ephemeral-missing",
    "vol:ephemeral-not-owned",
    "vol:ephemeral-pv-missing",
    "vol:inline-gce",
    "vol:inline-ebs",
    "vol:inline-iscsi",
    "vol:inline-rbd",
    "vol:inline-readonly",
    "vol:no-volumes",
    "pods:pvc",
    "pods:pvc-on-missing-node",
    "pods:ephemeral",
    "pods:inline-disk",
    "node:zone-beta",
)

# The other features, less often: more nodes reach the volume filters.
_VOLUME_P = {
    "taints": 0.15,
    "unschedulable": 0.03,
    "node_affinity_required": 0.08,
    "node_selector": 0.05,
    "spread": 0.12,
    "affinity_required": 0.05,
    "anti_required": 0.05,
    "large_requests": 0.04,
    "host_ports": 0.05,
    "first_pod": 0.0,
    "missing_node": 0.05,
}


def _meta(name: str, namespace: str | None = None, **extra: Any) -> JSON:
    m: JSON = {"name": name, "uid": f"uid-{namespace + '-' if namespace else ''}{name}", "resourceVersion": "1"}
    if namespace is not None:
        m["namespace"] = namespace
    m.update(extra)
    return m


class _World:
    """The storage objects of one case under construction."""

    def __init__(self, g: cg.Gen, nodes: Sequence[JSON]) -> None:
        self.g = g
        self.r = g.r
        self.nodes = nodes
        self.classes: dict[str, JSON] = {}
        self.drivers: list[JSON] = []
        self.csi_nodes: list[JSON] = []
        self.capacities: list[JSON] = []
        self.pvs: list[JSON] = []
        self.pvcs: list[JSON] = []
        self.attachments: list[JSON] = []
        self.sizes: set[int] = set()

    # -- cluster-level objects

    def make_classes(self) -> None:
        r, g = self.r, self.g
        for name, (provisioner, mode, topo) in CLASSES.items():
            if r.random() < 0.05:
                continue  # absent: its claims are immediate ones to upstream (no class to wait for)
            sc: JSON = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": _meta(name),
                "provisioner": provisioner,
                "reclaimPolicy": "Delete",
                "volumeBindingMode": mode,
            }
            g.tag("vol:class-wffc" if mode == "WaitForFirstConsumer" else "vol:class-immediate")
            if provisioner == "kubernetes.io/no-provisioner":
                g.tag("vol:class-no-provisioner")
            if provisioner == "kubernetes.io/gce-pd":
                g.tag("vol:class-in-tree-provisioner")
            if topo and r.random() < 0.45:
                zones = sorted(set(r.sample(cg.ZONES, r.randint(1, 2))))
                terms = [{"matchLabelExpressions": [{"key": cg.ZONE, "values": zones}]}]
                if r.random() < 0.25:
                    terms.append({"matchLabelExpressions": [{"key": cg.HOSTNAME, "values": [self._node_name()]}]})
                sc["allowedTopologies"] = terms
                g.tag("vol:class-allowedTopologies")
            self.classes[name] = sc

    def make_drivers(self) -> None:
        r, g = self.r, self.g
        for name in DRIVERS:
            if name == DRIVER_PLAIN and r.random() < 0.3:
                continue  # no CSIDriver object: no capacity tracking either
            spec: JSON = {
                "attachRequired": True,
                "podInfoOnMount": False,
                "requiresRepublish": False,
                "storageCapacity": False,
                "fsGroupPolicy": "ReadWriteOnceWithFSType",
                "seLinuxMount": False,
                "volumeLifecycleModes": ["Persistent"],
            }
            if name == DRIVER_CAPACITY:
                spec["storageCapacity"] = r.random() < 0.85
            if name == DRIVER_REQUIRED and r.random() < 0.7:
                spec["preventPodSchedulingIfMissing"] = True
                g.tag("vol:csidriver-prevent-missing")
            g.tag("vol:csidriver-capacity" if spec["storageCapacity"] else "vol:csidriver-no-capacity")
            self.drivers.append(
                {"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": _meta(name), "spec": spec}
            )

    def make_csi_nodes(self) -> None:
        r, g = self.r, self.g
        for node in self.nodes:
            name = node["metadata"]["name"]
            if r.random() < 0.15:
                g.tag("vol:csinode-missing")
                continue
            drivers = []
            for driver in (*DRIVERS, GCE_DRIVER, EBS_DRIVER):
                if r.random() < 0.25:
                    continue
                d: JSON = {"name": driver, "nodeID": f"{name}-id", "topologyKeys": [cg.ZONE]}
                if r.random() < 0.65:
                    d["allocatable"] = {"count": r.choice((0, 1, 1, 2, 2, 3, 4, 8))}
                    g.tag("vol:csinode-limits")
                drivers.append(d)
            meta = _meta(name)
            if r.random() < 0.3:
                meta["annotations"] = {
                    "storage.alpha.kubernetes.io/migrated-plugins": "kubernetes.io/aws-ebs,kubernetes.io/gce-pd"
                }
                g.tag("vol:csinode-migrated")
            self.csi_nodes.append(
                {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": meta, "spec": {"drivers": drivers}}
            )
            g.tag("vol:csinode")

    def make_capacities(self) -> None:
        r, g = self.r, self.g
        for cls in ("fast", "zonal", "required"):
            if r.random() < 0.25:
                continue
            by_zone = r.random() < 0.5  # one partitioning per class: each node sees one object at most
            segments = list(cg.ZONES) if by_zone else [n["metadata"]["name"] for n in self.nodes]
            for seg in segments:
                if r.random() < 0.2:
                    continue
                i = len(self.capacities)
                cap: JSON = {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "CSIStorageCapacity",
                    "metadata": _meta(f"csisc-{i}", "kube-system"),
                    "storageClassName": cls,
                    "capacity": f"{r.choice((0, 1, 5, 10, 20, 50, 100))}Gi",
                }
                if r.random() < 0.06:
                    g.tag("vol:capacity-no-topology")
                else:
                    key = cg.ZONE if by_zone else cg.HOSTNAME
                    cap["nodeTopology"] = {"matchLabels": {key: seg}}
                    g.tag("vol:capacity-zone" if by_zone else "vol:capacity-hostname")
                if r.random() < 0.25:
                    cap["maximumVolumeSize"] = f"{r.choice((1, 5, 10, 20))}Gi"
                    g.tag("vol:capacity-max-volume-size")
                self.capacities.append(cap)

    # -- helpers

    def _node_name(self) -> str:
        return str(self.r.choice(self.nodes)["metadata"]["name"])

    def _size_mi(self) -> int:
        """A PV size in Mi, unique in the case (upstream breaks ties by map order)."""
        while True:
            size = self.r.choice((1, 2, 5, 10, 20, 50)) * GIB + self.r.randint(0, 400)
            if size not in self.sizes:
                self.sizes.add(size)
                return size

    def _request(self) -> str:
        return (
            f"{self.r.choice((1, 2, 5, 10, 20, 50))}Gi" if self.r.random() < 0.5 else f"{self.r.randint(1, 60) * 512}Mi"
        )

    def _access_modes(self, *, rwop: float = 0.1) -> list[str]:
        r = self.r
        if r.random() < rwop:
            return ["ReadWriteOncePod"]
        return sorted(set(r.sample(ACCESS_MODES[:3], r.randint(1, 2))), key=ACCESS_MODES.index)

    def _node_affinity(self) -> JSON:
        r, g = self.r, self.g
        g.tag("vol:pv-node-affinity")
        form = r.random()
        if form < 0.45:
            expr: JSON = {"key": cg.HOSTNAME, "operator": "In", "values": [self._node_name()]}
        elif form < 0.8:
            expr = {"key": cg.ZONE, "operator": "In", "values": sorted(set(r.sample(cg.ZONES, r.randint(1, 2))))}
        else:
            expr = {"key": cg.DISK, "operator": r.choice(("In", "NotIn", "Exists")), "values": ["ssd"]}
            if expr["operator"] == "Exists":
                del expr["values"]
        term: JSON = {"matchExpressions": [expr]}
        if r.random() < 0.07:
            # Upstream matches PV affinity on the node's labels only: matchFields are ignored.
            term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["node-absent"]}]
            g.tag("vol:pv-node-affinity-matchFields")
        terms = [term]
        if r.random() < 0.15:
            terms.append({"matchExpressions": [{"key": cg.HOSTNAME, "operator": "In", "values": [self._node_name()]}]})
        return {"required": {"nodeSelectorTerms": terms}}

    def _pv_labels(self) -> dict[str, str]:
        r, g = self.r, self.g
        labels: dict[str, str] = {}
        if r.random() < 0.5:
            labels["tier"] = r.choice(TIERS)
        if r.random() < 0.35:
            zones = sorted(set(r.sample(cg.ZONES, r.choice((1, 1, 2)))))
            key = ZONE_BETA if r.random() < 0.35 else cg.ZONE
            labels[key] = "__".join(zones)
            g.tag("vol:pv-zone-beta-label" if key == ZONE_BETA else "vol:pv-zone-label")
            if len(zones) > 1:
                g.tag("vol:pv-multi-zone")
            if r.random() < 0.4:
                region = cg.REGION_OF[zones[0]]
                labels[REGION_BETA if key == ZONE_BETA else cg.REGION] = region
                g.tag("vol:pv-region-label")
        return labels

    def make_pv(
        self,
        class_name: str,
        *,
        phase: str = "Available",
        claim: JSON | None = None,
        claim_uid: bool = True,
        size_mi: int | None = None,
        modes: list[str] | None = None,
        volume_mode: str = "Filesystem",
    ) -> JSON:
        r, g = self.r, self.g
        i = len(self.pvs)
        name = f"pv-{i}"
        size = size_mi if size_mi is not None else self._size_mi()
        meta = _meta(name)
        labels = self._pv_labels()
        if labels:
            meta["labels"] = labels
        meta["finalizers"] = ["kubernetes.io/pv-protection"]
        spec: JSON = {
            "capacity": {"storage": f"{size}Mi"},
            "accessModes": modes or self._access_modes(rwop=0.08),
            "persistentVolumeReclaimPolicy": "Retain" if class_name in ("local", "") else "Delete",
            "storageClassName": class_name,
            "volumeMode": volume_mode,
        }
        if class_name == "" and r.random() < 0.5:
            del spec["storageClassName"]
        if volume_mode == "Block":
            g.tag("vol:pv-block")
        provisioner = CLASSES.get(class_name, ("", "", False))[0]
        if class_name == "local" or (not provisioner.startswith("csi.") and r.random() < 0.5):
            spec["local"] = {"path": f"/mnt/disks/{name}"}
            g.tag("vol:pv-local")
            if r.random() < 0.9:
                spec["nodeAffinity"] = self._node_affinity()
        else:
            driver = provisioner if provisioner.startswith("csi.") else r.choice(DRIVERS)
            spec["csi"] = {"driver": driver, "volumeHandle": f"handle-{name}", "fsType": "ext4"}
            g.tag("vol:pv-csi")
            if r.random() < 0.5:
                spec["nodeAffinity"] = self._node_affinity()
        if r.random() < 0.04:
            spec["volumeAttributesClassName"] = "gold-iops"
            g.tag("vol:pv-vac")
        if claim is not None:
            ref: JSON = {
                "kind": "PersistentVolumeClaim",
                "namespace": claim["metadata"]["namespace"],
                "name": claim["metadata"]["name"],
                "apiVersion": "v1",
            }
            if claim_uid:
                ref["uid"] = claim["metadata"]["uid"]
                ref["resourceVersion"] = "1"
            spec["claimRef"] = ref
        if r.random() < 0.04:
            meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            meta["deletionGracePeriodSeconds"] = 0
            g.tag("vol:pv-deleting")
        if phase == "Bound":
            meta["annotations"] = {"pv.kubernetes.io/bound-by-controller": "yes"}
        pv: JSON = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": meta,
            "spec": spec,
            "status": {"phase": phase},
        }
        self.pvs.append(pv)
        return pv

    def make_pvc(
        self,
        namespace: str,
        name: str,
        class_name: str | None,
        *,
        modes: list[str] | None = None,
        owner: JSON | None = None,
    ) -> JSON:
        r, g = self.r, self.g
        meta = _meta(name, namespace)
        meta["finalizers"] = ["kubernetes.io/pvc-protection"]
        spec: JSON = {"accessModes": modes or self._access_modes(), "volumeMode": "Filesystem"}
        if r.random() < 0.95:
            spec["resources"] = {"requests": {"storage": self._request()}}
        else:
            spec["resources"] = {}
            g.tag("vol:pvc-no-request")
        if class_name is not None:
            spec["storageClassName"] = class_name
        if r.random() < 0.1:
            spec["volumeMode"] = "Block"
            g.tag("vol:pvc-block")
        if r.random() < 0.12:
            if r.random() < 0.6:
                spec["selector"] = {"matchLabels": {"tier": r.choice(TIERS)}}
            else:
                spec["selector"] = {
                    "matchExpressions": [
                        {"key": "tier", "operator": r.choice(("In", "NotIn")), "values": [r.choice(TIERS)]}
                    ]
                }
            g.tag("vol:pvc-selector")
        if r.random() < 0.04:
            spec["volumeAttributesClassName"] = "gold-iops"
            g.tag("vol:pvc-vac")
        if "ReadWriteOncePod" in spec["accessModes"]:
            g.tag("vol:pvc-rwop")
        if owner is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": owner["name"],
                    "uid": owner["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": meta,
            "spec": spec,
            "status": {"phase": "Pending"},
        }
        self.pvcs.append(pvc)
        return pvc

    # -- claims in their states

    def claim(self, namespace: str, name: str, *, owner: JSON | None = None, existing_pod: bool = False) -> JSON | None:
        """A claim in one of the states the PV controller leaves, with its PV; None: no object."""
        r, g = self.r, self.g
        roll = r.random()
        if not existing_pod and roll < (0.04 if owner is None else 0.14):
            g.tag("vol:pvc-missing" if owner is None else "vol:ephemeral-missing")
            return None
        wffc = [c for c, (_, mode, _) in CLASSES.items() if mode == "WaitForFirstConsumer"]
        if existing_pod or roll < 0.45:
            # Bound to a PV (maybe one that is gone).
            class_name = r.choice((*CLASSES, "", "fast", "local"))
            pvc = self.make_pvc(namespace, name, class_name, owner=owner)
            self.bind(pvc, class_name, existing_pod=existing_pod)
            return pvc
        if roll < 0.88:
            class_name = r.choice(wffc) if r.random() < 0.95 else "missing-class"
            pvc = self.make_pvc(namespace, name, class_name, owner=owner)
            if class_name == "missing-class":
                g.tag("vol:pvc-class-missing")
            else:
                g.tag("vol:pvc-wffc")
                self.offer_pvs(pvc, class_name)
                if r.random() < 0.12:
                    pvc["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": self._node_name()}
                    g.tag("vol:pvc-wffc-selected-node")
            return pvc
        if roll < 0.935:
            class_name = r.choice(("standard", ""))
            pvc = self.make_pvc(namespace, name, class_name, owner=owner)
            g.tag("vol:pvc-immediate-unbound" if class_name else "vol:pvc-no-class")
            if r.random() < 0.3:
                self.make_pv(class_name)
            return pvc
        if roll < 0.965:
            # Pre-bound by the user (spec.volumeName), not bound yet: unbound immediate to upstream.
            class_name = r.choice(wffc)
            pvc = self.make_pvc(namespace, name, class_name, owner=owner)
            pv = self.make_pv(class_name, claim=pvc, claim_uid=False)
            pvc["spec"]["volumeName"] = pv["metadata"]["name"]
            g.tag("vol:pvc-prebound-volumeName", "vol:pv-prebound-claimRef")
            return pvc
        class_name = r.choice((*CLASSES,))
        pvc = self.make_pvc(namespace, name, class_name, owner=owner)
        self.bind(pvc, class_name)
        pvc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        pvc["metadata"]["deletionGracePeriodSeconds"] = 0
        g.tag("vol:pvc-deleting")
        return pvc

    def bind(
        self, pvc: JSON, class_name: str, *, existing_pod: bool = False, gone: float = 0.1, lost: float = 0.55
    ) -> None:
        r, g = self.r, self.g
        request = pvc["spec"].get("resources", {}).get("requests", {}).get("storage", "1Gi")
        pv = self.make_pv(
            class_name,
            phase="Bound",
            claim=pvc,
            modes=list(pvc["spec"]["accessModes"]),
            volume_mode=pvc["spec"]["volumeMode"],
        )
        pvc["spec"]["volumeName"] = pv["metadata"]["name"]
        pvc["metadata"]["annotations"] = {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
        }
        pvc["status"] = {
            "phase": "Bound",
            "accessModes": list(pvc["spec"]["accessModes"]),
            "capacity": dict(pv["spec"]["capacity"]),
        }
        del request
        g.tag("vol:pvc-bound", "vol:pv-bound")
        if not existing_pod and r.random() < gone:
            self.pvs.remove(pv)  # the PV is gone
            if r.random() < lost:
                pvc["status"]["phase"] = "Lost"
                g.tag("vol:pvc-lost")
            else:
                g.tag("vol:pvc-bound-pv-missing")
        elif r.random() < 0.15 and "csi" in pv["spec"]:
            node = self._node_name()
            self.attachments.append(
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "VolumeAttachment",
                    "metadata": _meta(f"csi-va-{len(self.attachments)}"),
                    "spec": {
                        "attacher": pv["spec"]["csi"]["driver"],
                        "nodeName": node,
                        "source": {"persistentVolumeName": pv["metadata"]["name"]},
                    },
                    "status": {"attached": True},
                }
            )
            g.tag("vol:attachments")

    def offer_pvs(self, pvc: JSON, class_name: str) -> None:
        """Available PVs that may or may not fit the claim (for WaitForFirstConsumer claims)."""
        r, g = self.r, self.g
        prebound = False  # one PV at most pre-bound to the claim (upstream takes the first it sees)
        for _ in range(r.choice((0, 0, 1, 2, 3, 4))):
            modes = list(pvc["spec"]["accessModes"]) if r.random() < 0.7 else None
            mode = pvc["spec"]["volumeMode"] if r.random() < 0.9 else r.choice(("Filesystem", "Block"))
            cls = class_name if r.random() < 0.85 else r.choice((*CLASSES,))
            if not prebound and r.random() < 0.1:
                prebound = True
                self.make_pv(cls, phase="Available", claim=pvc, claim_uid=False, modes=modes, volume_mode=mode)
                g.tag("vol:pv-prebound-claimRef")
            elif r.random() < 0.1:
                gone = {"metadata": {"namespace": pvc["metadata"]["namespace"], "name": "gone", "uid": "uid-gone"}}
                self.make_pv(cls, phase="Released", claim=gone, modes=modes, volume_mode=mode)
                g.tag("vol:pv-released")
            else:
                self.make_pv(cls, modes=modes, volume_mode=mode)
                g.tag("vol:pv-available")
            if self.pvs[-1]["metadata"].get("labels", {}).get("tier") is None and r.random() < 0.3:
                self.pvs[-1]["metadata"].setdefault("labels", {})["tier"] = r.choice(TIERS)


def _inline_disk(g: cg.Gen, name: str) -> JSON:
    r = g.r
    kind = r.choice(("gce", "ebs", "iscsi", "rbd"))
    read_only = r.random() < 0.3
    if read_only:
        g.tag("vol:inline-readonly")
    disk = r.choice(DISKS)
    if kind == "gce":
        src: JSON = {"pdName": disk, "fsType": "ext4"}
        if read_only:
            src["readOnly"] = True
        g.tag("vol:inline-gce")
        return {"name": name, "gcePersistentDisk": src}
    if kind == "ebs":
        src = {"volumeID": f"vol-{disk}", "fsType": "ext4"}
        if read_only:
            src["readOnly"] = True
        g.tag("vol:inline-ebs")
        return {"name": name, "awsElasticBlockStore": src}
    if kind == "iscsi":
        src = {
            "targetPortal": "10.0.0.9:3260",
            "iqn": f"iqn.2026-01.com.example:{disk}",
            "lun": 0,
            "iscsiInterface": "default",
            "fsType": "ext4",
        }
        if read_only:
            src["readOnly"] = True
        g.tag("vol:inline-iscsi")
        return {"name": name, "iscsi": src}
    src = {
        "monitors": sorted(set(r.sample(MONITORS, r.randint(1, 2)))),
        "image": disk,
        "fsType": "ext4",
        "pool": r.choice(("rbd", "rbd", "kube")),
        "user": "admin",
        "keyring": "/etc/ceph/keyring",
    }
    if read_only:
        src["readOnly"] = True
    g.tag("vol:inline-rbd")
    return {"name": name, "rbd": src}


def _ephemeral_volume(w: _World, name: str) -> JSON:
    spec: JSON = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}


def _existing_pod_volumes(w: _World, pod: JSON, rwop_claims: list[JSON]) -> None:
    r, g = w.r, w.g
    ns = pod["metadata"]["namespace"]
    volumes: list[JSON] = []
    for j in range(r.choice((1, 1, 2))):
        kind = r.random()
        if kind < 0.5:
            name = f"{pod['metadata']['name']}-data-{j}"
            pvc = w.claim(ns, name, existing_pod=True)
            if pvc is not None and r.random() < 0.45:
                pvc["spec"]["accessModes"] = ["ReadWriteOncePod"]
                pvc["status"]["accessModes"] = ["ReadWriteOncePod"]
                for pv in w.pvs:
                    if pv["metadata"]["name"] == pvc["spec"].get("volumeName"):
                        pv["spec"]["accessModes"] = ["ReadWriteOncePod"]
                rwop_claims.append(pvc)
            volumes.append({"name": f"data-{j}", "persistentVolumeClaim": {"claimName": name}})
            g.tag("pods:pvc")
            if pod["spec"]["nodeName"] == "node-gone":
                g.tag("pods:pvc-on-missing-node")
        elif kind < 0.65:
            vol = f"scratch-{j}"
            claim_name = f"{pod['metadata']['name']}-{vol}"
            owner = {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            pvc = w.make_pvc(ns, claim_name, r.choice(("fast", "zonal")), owner=owner)
            w.bind(pvc, pvc["spec"]["storageClassName"], existing_pod=True)
            volumes.append(_ephemeral_volume(w, vol))
            g.tag("pods:ephemeral")
        elif kind < 0.85:
            volumes.append(_inline_disk(g, f"disk-{j}"))
            g.tag("pods:inline-disk")
        else:
            volumes.append({"name": f"tmp-{j}", "emptyDir": {}})
    pod["spec"]["volumes"] = volumes


def _incoming_volumes(w: _World, pod: JSON, rwop_claims: list[JSON], inline: list[JSON]) -> None:
    r, g = w.r, w.g
    ns = pod["metadata"]["namespace"]
    if r.random() < 0.05:
        g.tag("vol:no-volumes")
        return
    volumes: list[JSON] = []
    count = r.choice((1, 1, 1, 2, 2, 3))
    pvcs = 0
    for j in range(count):
        kind = r.random()
        same_ns = [c for c in rwop_claims if c["metadata"]["namespace"] == ns]
        if kind < 0.2 and same_ns:
            shared = r.choice(same_ns)
            if shared["metadata"]["name"] not in {v.get("persistentVolumeClaim", {}).get("claimName") for v in volumes}:
                volumes.append(
                    {"name": f"shared-{j}", "persistentVolumeClaim": {"claimName": shared["metadata"]["name"]}}
                )
                g.tag("vol:pvc-rwop-in-use")
                pvcs += 1
                continue
        if kind < 0.68:
            name = f"data-{j}"
            w.claim(ns, name)
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
            pvcs += 1
        elif kind < 0.86:
            vol = f"scratch-{j}"
            owner = {"name": "incoming", "uid": pod["metadata"]["uid"]}
            if r.random() < 0.1:
                owner = {"name": "incoming", "uid": "uid-some-other-pod"}
                g.tag("vol:ephemeral-not-owned")
            if r.random() < 0.2:
                # Bound (the PV controller has not noticed yet) to a PV that is gone.
                pvc = w.make_pvc(ns, f"incoming-{vol}", "fast", owner=owner)
                w.bind(pvc, "fast", gone=1.0, lost=0.0)
                g.tag("vol:ephemeral-pv-missing")
            else:
                w.claim(ns, f"incoming-{vol}", owner=owner)
            volumes.append(_ephemeral_volume(w, vol))
            g.tag("vol:ephemeral")
        elif kind < 0.97:
            disk = _inline_disk(g, f"disk-{j}")
            if inline and r.random() < 0.8:
                # The same disk as a pod's on some node (read-only or not): a disk conflict there.
                disk = {**r.choice(inline), "name": f"disk-{j}"}
            volumes.append(disk)
        else:
            volumes.append({"name": f"cfg-{j}", "configMap": {"name": "settings", "defaultMode": 420}})
    if pvcs > 1:
        g.tag("vol:pvc-multiple")
    pod["spec"]["volumes"] = volumes


def generate_volume_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/volumes/{index}")
    g = cg.Gen(r, "mixed")
    g.family = "volumes"
    g.p.update(_VOLUME_P)
    nodes = [cg.make_node(g, i) for i in range(r.choice((2, 3, 3, 4, 4, 5, 6, 8)))]
    for n in nodes:
        labels = n["metadata"]["labels"]
        if cg.ZONE in labels and r.random() < 0.25:
            labels[ZONE_BETA] = labels[cg.ZONE]
            if r.random() < 0.4:
                del labels[cg.ZONE]  # an old node: only the beta label
            if cg.REGION in labels:
                labels[REGION_BETA] = labels[cg.REGION]
            g.tag("node:zone-beta")
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.choice((0, 2, 4, 6, 10)))]
    pod = cg.make_incoming_pod(g, nodes, pods)
    pod["metadata"]["uid"] = "uid-incoming"

    w = _World(g, nodes)
    w.make_classes()
    w.make_drivers()
    w.make_csi_nodes()
    w.make_capacities()
    rwop_claims: list[JSON] = []
    for p in pods:
        if r.random() < 0.5:
            _existing_pod_volumes(w, p, rwop_claims)
    inline = [
        v
        for p in pods
        for v in p["spec"].get("volumes", ())
        if not ({"persistentVolumeClaim", "ephemeral", "emptyDir"} & set(v))
    ]
    _incoming_volumes(w, pod, rwop_claims, inline)
    for _ in range(r.choice((0, 1, 2))):  # PVs nobody asked for
        w.make_pv(r.choice((*CLASSES, "")))
        g.tag("vol:pv-available")

    case: JSON = {
        "name": f"volumes-{index:05d}",
        "family": "volumes",
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": cg.make_namespaces(),
        **cg.make_controllers(g, pod),
        "persistentVolumes": w.pvs,
        "persistentVolumeClaims": w.pvcs,
        "storageClasses": list(w.classes.values()),
        "csiNodes": w.csi_nodes,
        "csiDrivers": w.drivers,
        "csiStorageCapacities": w.capacities,
        "volumeAttachments": w.attachments,
        "pod": pod,
    }
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags | cg.scan_tags(case))
    return case
