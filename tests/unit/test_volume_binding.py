"""The operator's VolumeBinding Reserve / PreBind (scheduler.py, binder.py) against a scripted API:
write order (PVs and claims before the special claim and the Binding), the wait until the claims
are Bound (on the watches' view), upstream's errors and timeout, and what a failure leaves behind
(assumptions forgotten, no claim, no Binding); plus the storage watches' queueing wake-ups."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from draxr.binder import Binder, BindingFailed
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.requeue import Change
from draxr.core.state import ClusterState
from draxr.core.storage import ANN_BIND_COMPLETED, ANN_SELECTED_NODE
from draxr.explain import pending_report, render
from draxr.handlers import targets
from draxr.scheduler import Scheduler
from draxr.settings import Settings
from draxr.watch import Target

from .cluster_builders import cluster, pod
from .test_volumes import claim_vol, pv, pvc, sc

NS = "ns"


class Api:
    """Answers every write like the API server (resourceVersion bumped), and records it."""

    def __init__(self, fail: dict[str, ApiException] | None = None) -> None:
        self.writes: list[str] = []
        self.bodies: dict[str, Any] = {}
        self.fail = fail or {}
        self.rv = 100

    def _answer(self, what: str, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(what)
        self.bodies[what] = copy.deepcopy(body)
        if what in self.fail:
            raise self.fail[what]
        self.rv += 1
        made = copy.deepcopy(body)
        made.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        return made

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        if kw.get("subresource") == "binding":
            return self._answer("binding", body)
        made = self._answer(f"create {res.plural}", body)
        made["metadata"] |= {"name": "p-extended-resources-x", "uid": "claim-uid"}
        return made

    async def replace(self, res: Any, body: dict[str, Any], *_: Any, **kw: Any) -> dict[str, Any]:
        return self._answer(f"put {res.plural}{'/' + kw['subresource'] if kw.get('subresource') else ''}", body)

    async def patch(self, res: Any, name: str, body: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        what = f"patch {res.plural}{'/' + kw['subresource'] if kw.get('subresource') else ''}"
        made = self._answer(what, body)
        if res.plural == "persistentvolumeclaims":  # a merge patch of the claim the state holds
            current = copy.deepcopy(STATE.storage.pvcs[f"{namespace}/{name}"].obj)
            current["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
            current["metadata"]["resourceVersion"] = made["metadata"]["resourceVersion"]
            return current
        return made


class Recorder:
    async def pod_event(self, *_: Any, **__: Any) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass


STATE = ClusterState()  # the state the scripted API's claim patch reads (set per test)


def volume_cluster(*objs: dict[str, Any], gpus: int = 2) -> ClusterState:
    global STATE
    STATE = state = cluster({"n1": gpus, "n2": gpus})
    for o in objs:
        if "provisioner" in o:
            state.storage.upsert_class(o)
        elif "resources" in o.get("spec", {}):
            state.storage.upsert_pvc(o)
        else:
            state.storage.upsert_pv(o)
    return state


def decide(state: ClusterState, gpus: int = 0) -> tuple[Any, Decision]:
    info = state.upsert_pod(pod("p", namespace=NS, gpus=gpus, volumes=[claim_vol("data")]))
    decision = schedule(info, state, features=DEFAULT_FEATURES, binds_volumes=True)
    assert isinstance(decision, Decision), decision
    # the scheduling cycle's Reserve (scheduler.Scheduler.cycle)
    state.assume_pod(info.uid, decision.node)
    if decision.allocation is not None:
        state.assume_allocation(f"<assumed>/{info.uid}", decision.allocation)
    assert decision.volumes is not None
    state.storage.assume(decision.volumes, decision.node)
    return info, decision


def binder(api: Api, state: ClusterState, timeout: float = 5.0) -> Binder:
    return Binder(api, state, Recorder(), volume_bind_timeout=timeout, volume_poll=0.02)  # type: ignore[arg-type]


def bound_claim(state: ClusterState, pv_name: str) -> None:
    """What the PV controller does once a PV's claimRef names the claim: the claim is Bound."""
    obj = copy.deepcopy(state.storage.pvcs[f"{NS}/data"].obj)
    obj["spec"]["volumeName"] = pv_name
    obj["metadata"].setdefault("annotations", {})[ANN_BIND_COMPLETED] = "yes"
    obj["metadata"]["resourceVersion"] = "900"
    obj["status"] = {"phase": "Bound"}
    state.storage.upsert_pvc(obj)


async def later(seconds: float, action: Any) -> None:
    await asyncio.sleep(seconds)
    action()


STATIC = (sc("local", provisioner="kubernetes.io/no-provisioner"), pv("pv-n2", cls="local", host="n2"))


async def test_static_binding_writes_the_pv_then_waits_for_the_claim_then_binds() -> None:
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS))
    info, decision = decide(state, gpus=1)
    assert decision.node == "n2"  # the PV's node affinity
    assert state.storage.assumed[0] == {"pv-n2"}  # Reserve: no other pod takes it in flight
    api = Api()
    task = asyncio.create_task(binder(api, state).bind(info, decision))
    await asyncio.sleep(0.2)
    # the PV is written, nothing else until the claim is Bound (the pod must not be bound before)
    assert api.writes == ["put persistentvolumes"]
    ref = api.bodies["put persistentvolumes"]["spec"]["claimRef"]
    assert (ref["namespace"], ref["name"], ref["uid"]) == (NS, "data", "uid-data")
    assert api.bodies["put persistentvolumes"]["metadata"]["resourceVersion"] == "1"  # the PV the cycle saw
    assert not task.done()
    bound_claim(state, "pv-n2")
    await asyncio.wait_for(task, 5)
    # VolumeBinding's PreBind, then DynamicResources' (the special claim), then the Binding
    assert api.writes == [
        "put persistentvolumes",
        "create resourceclaims",
        "put resourceclaims/status",
        "patch pods/status",
        "binding",
    ]
    assert state.storage.assumed == (frozenset(), frozenset())  # the API's objects replaced them


async def test_a_claim_never_bound_times_out_as_upstream_and_leaves_no_claim_nor_binding() -> None:
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS))
    info, decision = decide(state, gpus=1)
    api = Api()
    with pytest.raises(BindingFailed) as failed:
        await binder(api, state, timeout=0.3).bind(info, decision)
    assert str(failed.value) == 'running PreBind plugin "VolumeBinding": binding volumes: context deadline exceeded'
    assert api.writes == ["put persistentvolumes"]  # upstream does not undo the PV write either
    assert state.storage.assumed == (frozenset(), frozenset())
    assert not state.claims


async def test_provisioning_annotates_the_claim_under_its_version_and_waits_for_the_provisioner() -> None:
    state = volume_cluster(sc("wffc"), pvc("data", cls="wffc", ns=NS))
    info, decision = decide(state)
    assert decision.volumes is not None
    assert decision.volumes.provisions
    assert state.storage.assumed[1] == {f"{NS}/data"}
    api = Api()
    task = asyncio.create_task(binder(api, state).bind(info, decision))
    await asyncio.sleep(0.2)
    assert api.writes == ["patch persistentvolumeclaims"]
    body = api.bodies["patch persistentvolumeclaims"]
    assert body == {"metadata": {"annotations": {ANN_SELECTED_NODE: decision.node}, "resourceVersion": "1"}}

    def provisioned() -> None:  # the provisioner's PV, then the PV controller binds the claim
        state.storage.upsert_pv(pv("pvc-data", cls="wffc", host=decision.node, claim=(NS, "data", "uid-data")))
        bound_claim(state, "pvc-data")

    provisioned()
    await asyncio.wait_for(task, 5)
    assert api.writes == ["patch persistentvolumeclaims", "binding"]


async def test_a_provisioner_that_gives_up_fails_the_binding() -> None:
    """A provisioner that cannot serve the node clears the selected node: upstream's error."""
    state = volume_cluster(sc("wffc"), pvc("data", cls="wffc", ns=NS))
    info, decision = decide(state)
    api = Api()

    def rescheduled() -> None:
        obj = copy.deepcopy(state.storage.pvcs[f"{NS}/data"].obj)
        obj["metadata"]["annotations"] = {"other": "x"}
        obj["metadata"]["resourceVersion"] = "950"
        state.storage.upsert_pvc(obj)

    gives_up = asyncio.create_task(later(0.1, rescheduled))
    with pytest.raises(BindingFailed, match='binding volumes: provisioning failed for PVC "data"'):
        await binder(api, state).bind(info, decision)
    await gives_up
    assert api.writes == ["patch persistentvolumeclaims"]
    assert state.storage.assumed == (frozenset(), frozenset())


async def test_a_pv_write_conflict_fails_before_anything_else_is_written() -> None:
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS))
    info, decision = decide(state, gpus=1)
    api = Api(fail={"put persistentvolumes": ApiException(status=409, reason="Conflict")})
    with pytest.raises(BindingFailed):
        await binder(api, state).bind(info, decision)
    assert api.writes == ["put persistentvolumes"]
    assert state.storage.assumed == (frozenset(), frozenset())
    # the PV is free again for the next cycle
    again = schedule(state.pods[info.uid], state, features=DEFAULT_FEATURES, binds_volumes=True)
    assert isinstance(again, Decision)
    assert again.volumes is not None
    assert again.volumes.static_bindings


async def test_a_pod_deleted_while_waiting_fails_as_gone() -> None:
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS))
    info, decision = decide(state)
    gone = asyncio.create_task(later(0.1, lambda: state.remove_pod(info.uid)))
    with pytest.raises(BindingFailed) as failed:
        await binder(Api(), state).bind(info, decision)
    await gone
    assert failed.value.pod_gone
    assert "pod does not exist any more" in str(failed.value)


def test_an_assumed_pv_is_not_given_to_a_second_pod() -> None:
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS), pvc("other", cls="local", ns=NS))
    decide(state)
    second = state.upsert_pod(pod("q", namespace=NS, volumes=[claim_vol("other")]))
    result = schedule(second, state, features=DEFAULT_FEATURES, binds_volumes=True)
    assert isinstance(result, Unschedulable)
    assert "didn't find available persistent volumes to bind" in result.message


# --------------------------------------------------------------------------- the storage watches


class Sink:
    def __init__(self) -> None:
        self.state = ClusterState()
        self.nudges = 0

    def cluster_changed(self) -> None:
        self.nudges += 1

    def __getattr__(self, name: str) -> Any:
        return lambda *_: None


def by_name(sink: Sink) -> dict[str, Target]:
    return {t.name: t for t in targets(sink)}  # type: ignore[arg-type]


def test_storage_events_wake_waiting_pods_as_the_queueing_hints_do() -> None:
    sink = Sink()
    t = by_name(sink)
    state = sink.state

    def bumps(action: Any) -> bool:
        before = (state.generation, state.storage_revision, sink.nudges)
        action()
        after = (state.generation, state.storage_revision, sink.nudges)
        return all(a > b for a, b in zip(after, before, strict=True))

    assert bumps(lambda: t["persistentvolumes"].upsert(pv("a")))
    assert not bumps(lambda: t["persistentvolumes"].upsert(pv("a")))  # the same version again (a re-list)
    assert bumps(lambda: t["persistentvolumes"].upsert(pv("a", rv="2")))
    assert "a" in state.storage.pvs
    assert not bumps(lambda: t["persistentvolumes"].delete(pv("a")))  # a PV gone helps no pod
    assert "a" not in state.storage.pvs
    assert bumps(lambda: t["persistentvolumeclaims"].upsert(pvc("data", ns=NS)))
    assert state.storage.pvc(NS, "data") is not None
    assert bumps(lambda: t["storageclasses"].upsert(sc("fast")))
    csinode = {"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d", "allocatable": {"count": 2}}]}}
    assert bumps(lambda: t["csinodes"].upsert(csinode))
    assert state.storage.csi_nodes["n1"].limits == {"d": 2}
    assert bumps(lambda: t["csidrivers"].upsert({"metadata": {"name": "d"}, "spec": {"storageCapacity": True}}))
    capacity = {"metadata": {"name": "c", "namespace": NS}, "storageClassName": "fast", "capacity": "10Gi"}
    assert bumps(lambda: t["csistoragecapacities"].upsert(capacity))
    attachment = {"metadata": {"name": "va"}, "spec": {"nodeName": "n1", "attacher": "d", "source": {}}}
    assert not bumps(lambda: t["volumeattachments"].upsert(attachment))  # takes a slot, frees none
    assert bumps(lambda: t["volumeattachments"].delete(attachment))
    # managedFields are not kept (they would be most of a PV's memory)
    t["persistentvolumes"].upsert(
        {**pv("m", rv="5"), "metadata": {"name": "m", "resourceVersion": "5", "managedFields": [{}]}}
    )
    assert "managedFields" not in state.storage.pvs["m"].obj["metadata"]


# --------------------------------------------------------------------------- the scheduling queue


async def test_a_pod_whose_claim_is_missing_is_retried_on_the_claims_arrival_not_on_a_timer() -> None:
    """PreFilter's "persistentvolumeclaim not found" is UnschedulableAndUnresolvable: the pod is
    parked against the storage stamp, so the claim's arrival (a storage event) releases it, while
    an unrelated cluster change does not."""
    state = volume_cluster(*STATIC)
    sched = Scheduler(None, state, Settings(backoff_initial_seconds=0.001), None)  # type: ignore[arg-type]
    info = state.upsert_pod(pod("p", namespace=NS, volumes=[claim_vol("data")]))
    result = schedule(info, state, features=DEFAULT_FEATURES, binds_volumes=True)
    assert isinstance(result, Unschedulable)
    assert 'persistentvolumeclaim "data" not found' in result.message
    sched.queue.add(info.uid, 0, info.created)
    assert sched.queue.next_ready(state.generation, sched._inventory_stamp())[0] == info.uid
    stamp = sched._inventory_stamp() if result.until_inventory_changes else None
    sched.queue.failed(info.uid, state.generation, unschedulable=True, unresolvable=result.unresolvable, stamp=stamp)
    await asyncio.sleep(0.01)  # the backoff is over
    state.changes.record(Change.POD_FREED | Change.NODE_UPDATED)  # something else changed (a pod, a node)
    assert sched.queue.next_ready(state.generation, sched._inventory_stamp())[0] is None
    by_name(_SinkOf(state))["persistentvolumeclaims"].upsert(pvc("data", cls="local", ns=NS))
    assert sched.queue.next_ready(state.generation, sched._inventory_stamp())[0] == info.uid
    assert isinstance(schedule(info, state, features=DEFAULT_FEATURES, binds_volumes=True), Decision)


class _SinkOf(Sink):
    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.nudges = 0


def test_explain_gives_the_volume_plugins_reasons() -> None:
    state = volume_cluster(sc("imm", mode="Immediate", provisioner="kubernetes.io/no-provisioner"))
    state.storage.upsert_pvc(pvc("data", cls="imm", ns=NS))
    info = state.upsert_pod(pod("p", namespace=NS, volumes=[claim_vol("data")]), keep_object=True)
    assert render(pending_report(state, info.uid))[1] == (
        "  0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    )
    # a static PV pinned to n2: n1 gets VolumeBinding's reason, n2 fits
    state = volume_cluster(*STATIC, pvc("data", cls="local", ns=NS))
    info = state.upsert_pod(pod("p", namespace=NS, volumes=[claim_vol("data")]), keep_object=True)
    lines = render(pending_report(state, info.uid))
    assert "  it fits now: draxr would choose node n2" in lines
    assert "  n1: node(s) didn't find available persistent volumes to bind" in lines
    assert "  n2: fits" in lines
