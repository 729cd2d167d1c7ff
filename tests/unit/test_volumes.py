"""draxr.core.volumes and draxr.core.storage: kube-scheduler 1.37.2's volume plugins, hand-worked
outcomes (messages as upstream's code writes them) and properties (VolumeBinding's smallest fit,
the assume cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core import volumes as v
from draxr.core.storage import StorageState, VolumeDecision

JSON = dict[str, Any]


@dataclass
class Node:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


NODE_A = Node("a", {"kubernetes.io/hostname": "a", "topology.kubernetes.io/zone": "zone-a"})
NODE_B = Node("b", {"kubernetes.io/hostname": "b", "topology.kubernetes.io/zone": "zone-b"})
NODES = {"a", "b"}


def sc(name: str, mode: str = "WaitForFirstConsumer", provisioner: str = "csi.example.com", **extra: Any) -> JSON:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode, **extra}


def pv(
    name: str,
    size: str = "10Gi",
    cls: str = "fast",
    *,
    phase: str = "Available",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    host: str | None = None,
    claim: tuple[str, str, str] | None = None,
    labels: dict[str, str] | None = None,
    rv: str = "1",
) -> JSON:
    spec: JSON = {
        "capacity": {"storage": size},
        "accessModes": list(modes),
        "storageClassName": cls,
        "volumeMode": "Filesystem",
        "csi": {"driver": "csi.example.com", "volumeHandle": f"h-{name}"},
    }
    if host is not None:
        spec["nodeAffinity"] = {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}]}
                ]
            }
        }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1], "uid": claim[2]}
    meta: JSON = {"name": name, "resourceVersion": rv, "labels": labels or {}}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pvc(
    name: str,
    size: str = "5Gi",
    cls: str | None = "fast",
    *,
    ns: str = "default",
    bound_to: str | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    owner_uid: str | None = None,
    **meta: Any,
) -> JSON:
    spec: JSON = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, "volumeMode": "Filesystem"}
    if cls is not None:
        spec["storageClassName"] = cls
    m: JSON = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "1", **meta}
    status = {"phase": "Pending"}
    if bound_to is not None:
        spec["volumeName"] = bound_to
        m.setdefault("annotations", {})["pv.kubernetes.io/bind-completed"] = "yes"
        status = {"phase": "Bound"}
    if owner_uid is not None:
        m["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}]
    return {"metadata": m, "spec": spec, "status": status}


def pod(*volumes: JSON, name: str = "p", node: str | None = None, uid: str = "uid-p") -> JSON:
    spec: JSON = {"containers": [{"name": "c"}], "volumes": list(volumes)}
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def claim_vol(claim: str, name: str = "data") -> JSON:
    return {"name": name, "persistentVolumeClaim": {"claimName": claim}}


def storage(*objs: JSON) -> StorageState:
    s = StorageState()
    for o in objs:
        if "provisioner" in o:
            s.upsert_class(o)
        elif "claimRef" in o.get("spec", {}) or "capacity" in o.get("spec", {}):
            s.upsert_pv(o)
        else:
            s.upsert_pvc(o)
    return s


def run(s: StorageState, p: JSON, node: Node = NODE_A) -> v.VolumeVerdict:
    return v.filter_node(v.prefilter(p, s, NODES), s, node)


# --------------------------------------------------------------------------- PreFilter


def test_missing_claim_is_volume_restrictions_not_found() -> None:
    cycle = v.prefilter(pod(claim_vol("gone")), storage(), NODES)
    assert cycle.rejected == v.Status(v.UNRESOLVABLE, "VolumeRestrictions", ('persistentvolumeclaim "gone" not found',))


def test_generic_ephemeral_claim_must_exist_and_be_owned_by_the_pod() -> None:
    eph = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}
    cycle = v.prefilter(pod(eph), storage(), NODES)
    assert cycle.rejected is not None
    assert cycle.rejected.reasons == (
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"',
    )
    s = storage(sc("fast"), pvc("p-scratch", owner_uid="someone-else"))
    cycle = v.prefilter(pod(eph), s, NODES)
    assert cycle.rejected is not None
    assert cycle.rejected.reasons == ("PVC default/p-scratch was not created for pod default/p (pod is not owner)",)
    s = storage(sc("fast"), pvc("p-scratch", owner_uid="uid-p"))
    assert v.prefilter(pod(eph), s, NODES).rejected is None


def test_unbound_immediate_claims_deleting_and_lost() -> None:
    s = storage(sc("standard", "Immediate"), pvc("data", cls="standard"))
    cycle = v.prefilter(pod(claim_vol("data")), s, NODES)
    assert cycle.rejected == v.Status(
        v.UNRESOLVABLE, "VolumeBinding", ("pod has unbound immediate PersistentVolumeClaims",)
    )
    # A claim of a class that does not exist is an immediate one too; so is a user's pre-binding.
    s = storage(pvc("data", cls="nowhere"))
    assert v.prefilter(pod(claim_vol("data")), s, NODES).rejected.reasons == (v.ERR_UNBOUND_IMMEDIATE,)  # type: ignore[union-attr]
    s = storage(sc("fast"), pvc("data", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert v.prefilter(pod(claim_vol("data")), s, NODES).rejected.reasons == (  # type: ignore[union-attr]
        'persistentvolumeclaim "data" is being deleted',
    )
    lost = pvc("data", bound_to="pv-x")
    lost["status"]["phase"] = "Lost"
    assert v.prefilter(pod(claim_vol("data")), storage(sc("fast"), lost), NODES).rejected.reasons == (  # type: ignore[union-attr]
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "pv-x"',
    )


def test_volume_zone_prefilter_rejects_a_bound_claim_without_its_pv() -> None:
    s = storage(sc("fast"), pvc("data", bound_to="pv-x"))
    cycle = v.prefilter(pod(claim_vol("data")), s, NODES)
    assert cycle.rejected == v.Status(v.UNRESOLVABLE, "VolumeZone", ('persistentvolume "pv-x" not found',))


# --------------------------------------------------------------------------- Filter


def test_bound_pv_node_affinity() -> None:
    s = storage(sc("fast"), pv("pv-1", host="a", phase="Bound", claim=("default", "data", "uid-data")))
    s.upsert_pvc(pvc("data", bound_to="pv-1"))
    p = pod(claim_vol("data"))
    assert run(s, p, NODE_A).rejection is None
    assert run(s, p, NODE_B).rejection == v.Status(v.UNRESOLVABLE, "VolumeBinding", (v.ERR_NODE_CONFLICT,))


def test_wait_for_first_consumer_static_binding_and_provisioning() -> None:
    s = storage(sc("fast"), pv("pv-small", "4Gi", host="a"), pv("pv-big", "20Gi"), pv("pv-mid", "8Gi"), pvc("data"))
    p = pod(claim_vol("data"))
    verdict = run(s, p, NODE_A)
    assert verdict.rejection is None
    assert verdict.decision is not None
    assert [(c.name, x.name) for c, x in verdict.decision.static_bindings] == [("data", "pv-mid")]
    # No provisioner: the claim must find a PV, and on node b none fits a 30Gi claim.
    s = storage(sc("local", provisioner="kubernetes.io/no-provisioner"), pv("pv-1", "10Gi", "local"))
    s.upsert_pvc(pvc("data", "30Gi", "local"))
    assert run(s, p, NODE_B).rejection == v.Status(v.UNRESOLVABLE, "VolumeBinding", (v.ERR_BIND_CONFLICT,))
    # A provisioner: provisioned instead, unless allowedTopologies exclude the node.
    topo = [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["zone-a"]}]}]
    s = storage(sc("fast", allowedTopologies=topo), pvc("data", "30Gi"))
    decision = run(s, p, NODE_A).decision
    assert decision is not None
    assert [c.name for c, _ in decision.provisions] == ["data"]
    assert run(s, p, NODE_B).rejection == v.Status(v.UNRESOLVABLE, "VolumeBinding", (v.ERR_BIND_CONFLICT,))


def test_storage_capacity_tracking() -> None:
    s = storage(sc("fast"), pvc("data", "30Gi"))
    s.upsert_csi_driver({"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}})
    s.upsert_capacity(
        {
            "metadata": {"name": "cap-a", "namespace": "kube-system"},
            "storageClassName": "fast",
            "nodeTopology": {"matchLabels": {"topology.kubernetes.io/zone": "zone-a"}},
            "capacity": "100Gi",
        }
    )
    p = pod(claim_vol("data"))
    verdict = run(s, p, NODE_A)
    assert verdict.decision is not None
    (claim, capacity), *_ = verdict.decision.provisions
    assert claim.name == "data"
    assert capacity is not None
    assert capacity.name == "cap-a"
    assert run(s, p, NODE_B).rejection == v.Status(v.UNRESOLVABLE, "VolumeBinding", (v.ERR_NOT_ENOUGH_SPACE,))
    # Score: 30Gi of 100Gi used -> 100 - 30.
    assert v.score_nodes(v.prefilter(p, s, NODES), {"a": verdict.decision}) == {"a": 70}


def test_static_binding_score() -> None:
    s = storage(sc("fast"), pv("pv-1", "20Gi"), pvc("data", "10Gi"))
    p = pod(claim_vol("data"))
    cycle = v.prefilter(p, s, NODES)
    verdict = v.filter_node(cycle, s, NODE_A)
    assert v.score_nodes(cycle, {"a": verdict.decision}) == {"a": 50}


def test_volume_zone_and_the_beta_labels() -> None:
    zoned = pv("pv-1", phase="Bound", claim=("default", "data", "uid-data"))
    zoned["metadata"]["labels"] = {"failure-domain.beta.kubernetes.io/zone": "zone-a__zone-c"}
    s = storage(sc("fast"), zoned, pvc("data", bound_to="pv-1"))
    p = pod(claim_vol("data"))
    assert run(s, p, NODE_A).rejection is None  # beta key on the PV, GA label on the node
    assert run(s, p, NODE_B).rejection == v.Status(v.UNRESOLVABLE, "VolumeZone", (v.ERR_ZONE_CONFLICT,))
    assert run(s, p, Node("c", {"kubernetes.io/hostname": "c"})).rejection is None  # no topology label at all


def test_read_write_once_pod_conflict_counts_pods_on_known_nodes() -> None:
    s = storage(sc("fast"), pv("pv-1", phase="Bound", claim=("default", "data", "uid-data")))
    s.upsert_pvc(pvc("data", bound_to="pv-1", modes=("ReadWriteOncePod",)))
    s.upsert_pod(pod(claim_vol("data"), name="other", node="gone-node", uid="uid-other"))
    p = pod(claim_vol("data"))
    assert run(s, p).rejection is None
    s.upsert_pod(pod(claim_vol("data"), name="other", node="b", uid="uid-other"))
    assert run(s, p).rejection == v.Status(v.UNSCHEDULABLE, "VolumeRestrictions", (v.ERR_RWOP_CONFLICT,))


def test_disk_conflict() -> None:
    disk = {"name": "d", "gcePersistentDisk": {"pdName": "disk-0", "readOnly": True}}
    s = storage()
    s.upsert_pod(pod(disk, name="other", node="a", uid="uid-other"))
    assert run(s, pod(disk)).rejection is None  # both read-only
    rw = {"name": "d", "gcePersistentDisk": {"pdName": "disk-0"}}
    assert run(s, pod(rw)).rejection == v.Status(v.UNSCHEDULABLE, "VolumeRestrictions", (v.ERR_DISK_CONFLICT,))
    assert run(s, pod(rw), NODE_B).rejection is None


def test_csi_volume_limits() -> None:
    s = storage(sc("fast"), pvc("data"))
    s.upsert_csi_node(
        {"metadata": {"name": "a"}, "spec": {"drivers": [{"name": "csi.example.com", "allocatable": {"count": 1}}]}}
    )
    p = pod(claim_vol("data"))
    assert run(s, p).rejection is None
    s.upsert_pv(pv("pv-att", phase="Bound", claim=("default", "x", "uid-x")))
    s.upsert_attachment(
        {
            "metadata": {"name": "va"},
            "spec": {"attacher": "csi.example.com", "nodeName": "a", "source": {"persistentVolumeName": "pv-att"}},
        }
    )
    assert run(s, p).rejection == v.Status(v.UNSCHEDULABLE, "NodeVolumeLimits", (v.ERR_MAX_VOLUME_COUNT,))


# --------------------------------------------------------------------------- assume / forget


def test_assumed_binding_keeps_a_pv_from_a_second_claim() -> None:
    s = storage(sc("fast"), pv("pv-1", "10Gi"), pvc("one"), pvc("two"))
    first = run(s, pod(claim_vol("one")))
    assert first.decision is not None
    assert first.decision.static_bindings[0][1].name == "pv-1"
    s.assume(first.decision, "a")
    assert s.pv("pv-1").claim_ref is not None  # type: ignore[union-attr]
    second = run(s, pod(claim_vol("two"), name="q", uid="uid-q"))
    assert second.decision is not None
    assert second.decision.static_bindings == ()
    assert [c.name for c, _ in second.decision.provisions] == ["two"]  # provisioned instead
    # The same pod's claim still finds its assumed PV (pre-bound to it now).
    again = run(s, pod(claim_vol("one")))
    assert again.decision is not None
    assert again.decision.static_bindings[0][1].name == "pv-1"
    s.forget(first.decision)
    assert s.pv("pv-1").claim_ref is None  # type: ignore[union-attr]


def test_an_api_update_ends_the_assumption() -> None:
    s = storage(sc("fast"), pv("pv-1"), pvc("one"))
    decision = run(s, pod(claim_vol("one"))).decision
    assert decision is not None
    s.assume(decision, "a")
    s.upsert_pv(pv("pv-1", rv="1"))  # a resync of the same version keeps it
    assert s.assumed[0] == {"pv-1"}
    s.upsert_pv(pv("pv-1", rv="2"))
    assert s.assumed[0] == frozenset()
    assert s.pv("pv-1").claim_ref is None


def test_assumed_provisioning_selects_the_node() -> None:
    s = storage(sc("fast"), pvc("data"))
    decision = run(s, pod(claim_vol("data"))).decision
    assert decision is not None
    assert decision.provisions
    s.assume(decision, "a")
    assert run(s, pod(claim_vol("data")), NODE_B).rejection == v.Status(
        v.UNRESOLVABLE, "VolumeBinding", (v.ERR_BIND_CONFLICT,)
    )
    s.forget(decision)
    assert run(s, pod(claim_vol("data")), NODE_B).rejection is None
    assert VolumeDecision().empty


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 100), min_size=1, max_size=8, unique=True),
    phases=st.lists(st.sampled_from(["Available", "Available", "Bound", "Released"]), min_size=8, max_size=8),
    rwx=st.lists(st.booleans(), min_size=8, max_size=8),
    request=st.integers(1, 100),
)
def test_smallest_fit(sizes: list[int], phases: list[str], rwx: list[bool], request: int) -> None:
    """The chosen PV is the smallest available one of the class that holds the request and has
    every access mode the claim asks for; none when there is no such PV."""
    s = storage(sc("fast"))
    for i, size in enumerate(sizes):
        modes = ("ReadWriteOnce", "ReadWriteMany") if rwx[i] else ("ReadWriteOnce",)
        claim = ("default", "someone", "uid-someone") if phases[i] != "Available" else None
        s.upsert_pv(pv(f"pv-{i}", f"{size}Gi", phase=phases[i], modes=modes, claim=claim))
    s.upsert_pvc(pvc("data", f"{request}Gi", modes=("ReadWriteMany",)))
    claim = s.pvc("default", "data")
    assert claim is not None
    chosen = v.find_matching_volume(claim, s.pvs_of_class("fast"), NODE_A.labels, set())
    fits = [
        (size, f"pv-{i}") for i, size in enumerate(sizes) if phases[i] == "Available" and rwx[i] and size >= request
    ]
    assert (chosen.name if chosen else None) == (min(fits)[1] if fits else None)


# --------------------------------------------------------------------------- PreBind


def test_prebind_objects_and_binding_progress() -> None:
    from draxr.core.storage import bound_pv_object, selected_node_pvc_object

    s = storage(sc("fast"), pv("pv-1", "10Gi"), pvc("one"), pvc("two", "50Gi"))
    p = pod(claim_vol("one"), claim_vol("two", name="more"))
    decision = run(s, p).decision
    assert decision is not None
    assert not v.all_bound(p, s)
    (claim, vol), *_ = decision.static_bindings
    written = bound_pv_object(vol, claim)
    assert written["spec"]["claimRef"]["uid"] == "uid-one"
    assert written["metadata"]["annotations"] == {"pv.kubernetes.io/bound-by-controller": "yes"}
    (to_provision, _), *_ = decision.provisions
    annotated = selected_node_pvc_object(to_provision, "a")
    assert annotated["metadata"]["annotations"] == {"volume.kubernetes.io/selected-node": "a"}
    # The writes arrive; the PV controller has not bound anything yet: wait.
    s.upsert_pv({**written, "metadata": {**written["metadata"], "resourceVersion": "5"}})
    s.upsert_pvc({**annotated, "metadata": {**annotated["metadata"], "resourceVersion": "5"}})
    progress = v.binding_progress(s, decision, "a", NODE_A.labels, {"pv/pv-1": "5", "pvc/default/two": "5"})
    assert progress == v.BindingProgress(False)
    # The static binding completes; the provisioner gives up (it drops the annotation): failed.
    s.upsert_pvc(pvc("one", bound_to="pv-1"))
    gave_up = pvc("two", "50Gi", annotations={"other": "x"})
    gave_up["metadata"]["resourceVersion"] = "6"
    s.upsert_pvc(gave_up)
    assert v.binding_progress(s, decision, "a", NODE_A.labels).error == 'provisioning failed for PVC "two"'
    # Both bound: done.
    s.upsert_pv(pv("pv-2", "50Gi", phase="Bound", claim=("default", "two", "uid-two")))
    bound_two = pvc("two", "50Gi", bound_to="pv-2")
    bound_two["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] = "a"
    s.upsert_pvc(bound_two)
    assert v.binding_progress(s, decision, "a", NODE_A.labels) == v.BindingProgress(True)
    assert v.all_bound(p, s)
