"""The binder's DynamicResources PreBind for the pod's own claims, against an in-memory API with
resourceVersions: the write order (pod claims in spec order, then the special claim, then the
Binding), what each claim gets (bindClaim), Unreserve on failure, and the queueing of pods that
wait for a claim (scheduler.claim_changed, resourceClaimStatuses)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from draxr.binder import Binder, BindingFailed
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.claims import DELETE_PROTECTION_FINALIZER
from draxr.core.placement import Decision, schedule
from draxr.core.state import ClusterState, PodInfo
from draxr.kube import STRATEGIC_MERGE_PATCH
from draxr.scheduler import Scheduler, pod_claim_keys
from draxr.settings import Settings

from .cluster_builders import cluster
from .test_pod_claims import by_name, claim, claim_pod

JSON = dict[str, Any]


class Api:
    """Claims by name with resourceVersions (a stale PUT conflicts), the claim's strategic-merge
    reservedFor delete, special claim create, pod status patch and the Binding (``fail_bind``)."""

    def __init__(self, claims: list[JSON], fail_bind: ApiException | None = None) -> None:
        self.claims = {c["metadata"]["name"]: copy.deepcopy(c) for c in claims}
        self.fail_bind = fail_bind
        self.writes: list[str] = []
        self.rv = 10

    def _stored(self, body: JSON) -> JSON:
        self.rv += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.claims[body["metadata"]["name"]] = body
        return copy.deepcopy(body)

    async def get(self, res: Any, name: str, namespace: str | None = None) -> JSON:
        if name not in self.claims:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.claims[name])

    async def replace(self, res: Any, body: JSON, namespace: str | None = None, subresource: str | None = None) -> JSON:
        name = body["metadata"]["name"]
        self.writes.append(f"put {name}{'/' + subresource if subresource else ''}")
        current = self.claims[name]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        new = copy.deepcopy(current)
        if subresource == "status":
            new["status"] = body.get("status")
        else:
            new["metadata"] = {**body["metadata"]}
            new["spec"] = body["spec"]
        return self._stored(new)

    async def create(self, res: Any, body: JSON, namespace: str | None = None, **kw: Any) -> JSON:
        if kw.get("subresource") == "binding":
            self.writes.append("bind")
            if self.fail_bind is not None:
                raise self.fail_bind
            return {}
        made = copy.deepcopy(body)
        made["metadata"] |= {"name": "p-extended-resources-x", "uid": "special-uid", "namespace": "ns"}
        self.writes.append("create special")
        return self._stored(made)

    async def patch(self, res: Any, name: str, body: Any, namespace: str | None = None, **kw: Any) -> JSON:
        if res.plural == "pods":
            self.writes.append(f"patch pod/{kw.get('subresource')}")
            return copy.deepcopy(body) if isinstance(body, dict) else {}  # (the status patch: kept)
        if kw.get("content_type") == STRATEGIC_MERGE_PATCH:
            self.writes.append(f"unreserve {name}")
            new = copy.deepcopy(self.claims[name])
            assert body["metadata"]["uid"] == new["metadata"]["uid"]
            [drop] = body["status"]["reservedFor"]
            keep = [r for r in new["status"].get("reservedFor") or () if r["uid"] != drop["uid"]]
            new["status"]["reservedFor"] = keep
            return self._stored(new)
        self.writes.append(f"patch {name}")  # the special claim's finalizer removal
        new = copy.deepcopy(self.claims[name])
        new["metadata"]["finalizers"] = []
        return self._stored(new)

    async def delete(self, res: Any, name: str, namespace: str | None = None, **_: Any) -> JSON:
        self.writes.append(f"delete {name}")
        self.claims.pop(name, None)
        return {}

    async def request(self, method: str, path: str, *_: Any, **__: Any) -> JSON:
        name = path.rsplit("/", 1)[1]
        self.writes.append(f"{method.lower()} {name}")
        if method == "DELETE":
            self.claims.pop(name, None)
        return {}


class Recorder:
    async def pod_event(self, *_: Any, **__: Any) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass


def decide(state: ClusterState, p: JSON) -> tuple[PodInfo, Decision]:
    state.upsert_pod(p)
    info = PodInfo.from_api(p, keep_object=True)
    decision = schedule(info, state, features=DEFAULT_FEATURES, binds_claims=True)
    assert isinstance(decision, Decision), decision
    if decision.allocation is not None:
        state.assume_allocation(f"<assumed>/{info.uid}", decision.allocation)
    for key, allocation in decision.claim_allocations:
        state.assume_allocation(key, allocation)
    return info, decision


async def test_pod_claims_are_written_in_spec_order_before_the_special_claim_and_the_binding() -> None:
    state = cluster({"n1": 4})
    stored = [claim("b"), claim("a")]
    for c in stored:
        state.upsert_claim(c)
    p = claim_pod([by_name("first", "b"), by_name("second", "a")], gpus=1)
    info, decision = decide(state, p)
    assert [c.name for c in decision.claims] == ["b", "a"]
    api = Api(stored)
    await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    assert api.writes == [
        "put b",  # the finalizer, by Update
        "put b/status",  # allocation + reservedFor
        "put a",
        "put a/status",
        "create special",
        "put p-extended-resources-x/status",
        "patch pod/status",
        "bind",
    ]
    for name in ("a", "b"):
        c = api.claims[name]
        assert c["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert c["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": info.uid}]
        assert c["status"]["allocation"]["allocationTimestamp"]
        assert state.claims[f"ns/{name}"].allocated  # the write's answer is recorded ...
        assert not state.allocation_in_flight(f"ns/{name}")  # ... and the assumption is gone
        assert not state.tracker.is_assumed(f"ns/{name}")
    # Three different devices: the two claims and the special claim, on n1.
    assert len(state.allocated().allocated_devices) == 3


async def test_a_claim_allocated_already_only_gains_the_reservation() -> None:
    state = cluster({"n1": 4})
    first = claim_pod([by_name("gpu", "shared")], name="first")
    state.upsert_claim(claim("shared"))
    info, decision = decide(state, first)
    api = Api([claim("shared")])
    await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    allocation = api.claims["shared"]["status"]["allocation"]
    state.upsert_claim(api.claims["shared"])
    api.writes.clear()
    second = claim_pod([by_name("gpu", "shared")], name="second")
    second["metadata"]["uid"] = "uid-second"
    info2, decision2 = decide(state, second)
    [cd] = decision2.claims
    assert cd.allocation is None
    await Binder(api, state, Recorder()).bind(info2, decision2)  # type: ignore[arg-type]
    assert api.writes == ["put shared/status", "bind"]  # no finalizer write, no new allocation
    c = api.claims["shared"]
    assert c["status"]["allocation"] == allocation
    assert [r["uid"] for r in c["status"]["reservedFor"]] == [info.uid, "uid-second"]


async def test_a_failed_binding_unreserves_the_pod_claims_in_reverse_and_keeps_their_allocation() -> None:
    state = cluster({"n1": 4})
    stored = [claim("b"), claim("a")]
    for c in stored:
        state.upsert_claim(c)
    info, decision = decide(state, claim_pod([by_name("first", "b"), by_name("second", "a")], gpus=1))
    api = Api(stored, fail_bind=ApiException(status=422, reason="Invalid"))
    with pytest.raises(BindingFailed):
        await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    assert api.writes[api.writes.index("bind") + 1 :] == [
        "patch pod/status",  # the pod's status no longer names the special claim
        "patch p-extended-resources-x",  # the special claim: finalizer off, deleted
        "delete p-extended-resources-x",
        "unreserve a",  # then the pod's claims, in reverse
        "unreserve b",
    ]
    for name in ("a", "b"):
        c = api.claims[name]
        assert c["status"]["reservedFor"] == []
        assert c["status"]["allocation"]  # kube-controller-manager's to deallocate, as upstream
        assert state.claims[f"ns/{name}"].allocated
        assert not state.claims[f"ns/{name}"].reserved
        assert not state.tracker.is_assumed(f"ns/{name}")
    assert "ns/p-extended-resources-x" not in state.claims


async def test_a_claim_allocated_meanwhile_fails_the_attempt_before_anything_else_is_written() -> None:
    state = cluster({"n1": 4})
    state.upsert_claim(claim("c"))
    info, decision = decide(state, claim_pod([by_name("gpu", "c")], gpus=1))
    elsewhere = claim("c", alloc={"devices": {"results": []}})
    elsewhere["metadata"]["resourceVersion"] = "7"
    api = Api([elsewhere])
    with pytest.raises(BindingFailed, match="claim ns/c got allocated elsewhere in the meantime"):
        await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    assert api.writes == ["put c"]  # the stale finalizer Update conflicted; the re-read refused
    assert not state.tracker.is_assumed("ns/c")
    assert not state.tracker.is_assumed(f"<assumed>/{info.uid}")


async def test_a_claim_being_deleted_meanwhile_is_refused() -> None:
    state = cluster({"n1": 4})
    state.upsert_claim(claim("c"))
    info, decision = decide(state, claim_pod([by_name("gpu", "c")]))
    api = Api([claim("c", deleting=True) | {"metadata": {**claim("c")["metadata"], "resourceVersion": "8"}}])
    api.claims["c"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(BindingFailed, match="claim ns/c got deleted in the meantime"):
        await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    assert "bind" not in api.writes


# ---- queueing -------------------------------------------------------------------------------------


def scheduler(state: ClusterState) -> Scheduler:
    return Scheduler(None, state, Settings(), Recorder())  # type: ignore[arg-type]


def test_pod_claim_keys_follow_the_pods_status_for_template_claims() -> None:
    p = claim_pod([by_name("a", "x"), {"name": "t", "resourceClaimTemplateName": "tpl"}])
    assert pod_claim_keys(PodInfo.from_api(p)) == {"ns/x"}
    p["status"]["resourceClaimStatuses"] = [{"name": "t", "resourceClaimName": "p-t-abc"}]
    assert pod_claim_keys(PodInfo.from_api(p)) == {"ns/x", "ns/p-t-abc"}


async def test_a_pod_waiting_for_its_claim_is_queued_by_that_claims_events_only() -> None:
    state = cluster({"n1": 4})
    s = scheduler(state)
    p = claim_pod([by_name("gpu", "c")])
    info = state.upsert_pod(p)
    s.pod_changed(info)
    assert s.queue.next_ready(state.generation)[0] == info.uid
    s.queue.failed(info.uid, state.generation, unschedulable=True)  # "could not find ResourceClaim"
    s.queue._entries[info.uid].ready_at = 0  # (its backoff over)
    s.claim_changed("ns/other", None, claim("other"))  # unrelated claim
    assert s.queue.next_ready(state.generation)[0] is None
    assert s.named("ns/c")
    s.claim_changed("ns/c", None, claim("c"))  # its claim appears
    assert s.queue.next_ready(state.generation)[0] == info.uid


async def test_a_pod_waiting_for_its_template_claim_is_queued_when_its_status_names_it() -> None:
    state = cluster({"n1": 4})
    s = scheduler(state)
    p = claim_pod([{"name": "t", "resourceClaimTemplateName": "tpl"}])
    old = state.upsert_pod(p)
    s.pod_changed(old)
    assert s.queue.next_ready(state.generation)[0] == old.uid
    s.queue.failed(old.uid, state.generation, unschedulable=True)  # "ResourceClaim not created yet"
    s.queue._entries[old.uid].ready_at = 0
    conditions = copy.deepcopy(p)
    conditions["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    conditions["metadata"]["resourceVersion"] = "2"
    new = state.upsert_pod(conditions)
    s.pod_changed(new, old)  # our own condition: no retry
    assert s.queue.next_ready(state.generation)[0] is None
    named = copy.deepcopy(conditions)
    named["status"]["resourceClaimStatuses"] = [{"name": "t", "resourceClaimName": "p-t-abc"}]
    named["metadata"]["resourceVersion"] = "3"
    s.pod_changed(state.upsert_pod(named), new)  # kube-controller-manager made the claim
    assert s.queue.next_ready(state.generation)[0] == old.uid
    assert s.named("ns/p-t-abc")
