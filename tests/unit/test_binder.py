"""Binder failure paths against a scripted API: a lost answer to the allocation write, with a
rollback that fails too, keeps the claim's devices counted as allocated (the API server may have
written the allocation). Found by bench/chaos.py (drop-all: a device in two claims)."""

from __future__ import annotations

import copy
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from draxr.binder import STATUS_DROPPED, Binder, BindingFailed
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.extended_resources import GATE_RECHECK_SECONDS
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.state import ClusterState

from . import cluster_builders as cb
from .cluster_builders import GPU, cluster, pod


class Api:
    """create answers; the allocation write (status replace) and every later write fail with
    ``fail_with``; the claim is never deleted."""

    def __init__(self, fail_with: BaseException) -> None:
        self.fail_with = fail_with
        self.writes: list[str] = []

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None, **_: Any) -> dict[str, Any]:
        self.writes.append("create")
        made = copy.deepcopy(body)
        made["metadata"] |= {"name": "p-extended-resources-x", "uid": "claim-uid", "resourceVersion": "5"}
        return made

    async def replace(self, *_: Any, **__: Any) -> dict[str, Any]:
        self.writes.append("replace")
        raise self.fail_with

    async def patch(self, *_: Any, **__: Any) -> dict[str, Any]:
        self.writes.append("patch")
        raise self.fail_with

    async def get(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise self.fail_with

    async def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise self.fail_with


class Recorder:
    async def pod_event(self, *_: Any, **__: Any) -> None:
        pass

    def forget(self, uid: str) -> None:
        pass


def decide(state: ClusterState) -> tuple[Any, Decision]:
    info = state.upsert_pod(pod("p", gpus=2))
    decision = schedule(info, state, features=DEFAULT_FEATURES)
    assert isinstance(decision, Decision)
    state.assume_allocation(f"<assumed>/{info.uid}", decision.allocation or {})
    return info, decision


@pytest.mark.parametrize(
    ("error", "held"),
    [
        (aiohttp.ServerDisconnectedError(), True),  # no answer: it may have been written
        (TimeoutError(), True),
        (ApiException(status=503, reason="ServiceUnavailable"), True),
        (ApiException(status=422, reason="Invalid"), False),  # refused: nothing was written
    ],
)
async def test_devices_of_a_claim_whose_allocation_may_have_been_written_stay_allocated(
    error: BaseException, held: bool
) -> None:
    state = cluster({"n1": 2})
    info, decision = decide(state)
    binder = Binder(Api(error), state, Recorder())  # type: ignore[arg-type]
    with pytest.raises(BindingFailed):
        await binder.bind(info, decision)
    assert "ns/p-extended-resources-x" in state.claims  # the rollback failed: the claim stays
    allocated = state.allocated().allocated_devices
    assert (len(allocated) == 2) is held, allocated
    # The next pod gets nothing on n1 while the claim may hold both devices.
    other = state.upsert_pod(pod("q", gpus=1))
    assert isinstance(schedule(other, state, features=DEFAULT_FEATURES), Decision) is not held
    # Once the watch shows the claim again (or it is deleted), the truth counts.
    state.remove_claim("ns", "p-extended-resources-x")
    assert not state.allocated().allocated_devices


class Recording:
    """Answers every write as the API server would (managedFields included) and records the bodies."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, Any]] = []
        self.answers: list[dict[str, Any]] = []
        self.rv = 5

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        made = copy.deepcopy(body)
        made.setdefault("metadata", {})
        made["metadata"] |= {"resourceVersion": str(self.rv), "managedFields": [{"manager": "draxr"}]}
        return made

    async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None, **_: Any) -> dict[str, Any]:
        self.bodies.append(("create", body))
        made = self._answer(body)
        if "generateName" in made["metadata"]:
            made["metadata"] |= {"name": "p-extended-resources-x", "uid": "claim-uid"}
        self.answers.append(copy.deepcopy(made))
        return made

    async def replace(self, res: Any, body: dict[str, Any], *_: Any, **__: Any) -> dict[str, Any]:
        self.bodies.append(("replace", body))
        return self._answer(body)

    async def patch(self, res: Any, name: str, body: Any, *_: Any, **__: Any) -> dict[str, Any]:
        self.bodies.append(("patch", body))
        return copy.deepcopy(body)  # (the pod status patch: the API server kept it)


async def test_the_allocation_is_written_without_managed_fields_and_nothing_else_changes() -> None:
    """The status update leaves managedFields out (the API server keeps the live object's on a
    status write whatever the body says): the rest of the body is the created claim as answered."""
    state = cluster({"n1": 2})
    info, decision = decide(state)
    api = Recording()
    await Binder(api, state, Recorder()).bind(info, decision)  # type: ignore[arg-type]
    assert [what for what, _ in api.bodies] == ["create", "replace", "patch", "create"]
    status_write, answered = api.bodies[1][1], api.answers[0]
    assert answered["metadata"]["managedFields"]
    assert "managedFields" not in status_write["metadata"]
    del answered["metadata"]["managedFields"]
    assert {k: v for k, v in status_write.items() if k != "status"} == answered
    assert status_write["status"]["allocation"]["devices"] == decision.allocation["devices"]  # type: ignore[index]


class DroppingStatus(Recording):
    """kube-apiserver without DRAExtendedResource (1.34/1.35's default): the pod status patch is
    answered without the field (``drop``); records which writes asked for their answer."""

    def __init__(self, drop: bool) -> None:
        super().__init__()
        self.drop = drop
        self.asked: list[bool] = []
        self.deleted: list[str] = []

    async def patch(self, res: Any, name: str, body: Any, *_: Any, **kw: Any) -> dict[str, Any]:
        self.bodies.append(("patch", body))
        if res.plural != "pods":
            return {}
        self.asked.append(kw.get("answer", True))
        return {"status": {}} if self.drop else copy.deepcopy(body)

    async def get(self, res: Any, name: str, *_: Any, **__: Any) -> dict[str, Any]:
        return self.answers[0]

    async def delete(self, res: Any, name: str, *_: Any, **__: Any) -> dict[str, Any]:
        self.deleted.append(name)
        return {}

    async def request(self, method: str, path: str, *_: Any, **__: Any) -> dict[str, Any]:
        self.deleted.append(path.rsplit("/", 1)[1])
        return {}


async def test_a_pod_status_the_api_server_drops_fails_the_binding_and_rolls_the_claim_back() -> None:
    """Without the gate the API server drops status.extendedResourceClaimStatus silently: a pod bound
    then would run without its devices. The binding fails naming the gate, before the Binding, and
    the claim is deleted. Every answer is read, also after a status was kept (1.36 can turn the
    gate off under a running draxr)."""
    state = cluster({"n1": 2})
    info, decision = decide(state)
    api = DroppingStatus(drop=True)
    binder = Binder(api, state, Recorder())  # type: ignore[arg-type]
    with pytest.raises(BindingFailed) as failed:
        await binder.bind(info, decision)
    assert str(failed.value) == f"write pod status: {STATUS_DROPPED}"
    assert [what for what, _ in api.bodies][:3] == ["create", "replace", "patch"]
    assert "create" not in [what for what, _ in api.bodies[3:]]  # no Binding
    assert api.deleted == ["p-extended-resources-x"]
    assert api.asked == [True]
    # As kube-scheduler with the gate off: the extended resource is a node's own from now on, so the
    # pod's next attempt gets upstream's "Insufficient" (integration/dra/extendedresource.go), and a
    # DeviceClass that comes later maps nothing.
    assert not state.extended.served
    assert GPU not in state.mapping
    state.upsert_class(cb.gpu_class("late"))
    assert GPU not in state.mapping
    again = schedule(info, state, features=DEFAULT_FEATURES)
    assert isinstance(again, Unschedulable)
    assert again.message == f"0/1 nodes are available: 1 Insufficient {GPU}."  # (PostFilter adds preemption's)
    # The gate comes back with a restart of kube-apiserver: after a while a pod tries again.
    off_at = state.extended._off_at
    state.extended.recheck(off_at + GATE_RECHECK_SECONDS - 1)
    assert not state.extended.served
    state.extended.recheck(off_at + GATE_RECHECK_SECONDS)
    assert state.extended.served
    assert GPU in state.mapping
    assert isinstance(schedule(info, state, features=DEFAULT_FEATURES), Decision)

    kept = DroppingStatus(drop=False)
    state = cluster({"n1": 4})
    binder = Binder(kept, state, Recorder())  # type: ignore[arg-type]
    for name in ("p", "q"):
        info = state.upsert_pod(pod(name, gpus=2))
        decision = schedule(info, state, features=DEFAULT_FEATURES)
        assert isinstance(decision, Decision)
        state.assume_allocation(f"<assumed>/{info.uid}", decision.allocation or {})
        await binder.bind(info, decision)
    assert kept.asked == [True, True]
    assert state.extended.served

    # Turned off under a running draxr: the next status is dropped, and that is seen.
    kept.drop = True
    info = state.upsert_pod(pod("s", gpus=1))
    decision = schedule(info, state, features=DEFAULT_FEATURES)
    assert isinstance(decision, Decision)
    with pytest.raises(BindingFailed, match="dropped"):
        await binder.bind(info, decision)
    assert not state.extended.served
