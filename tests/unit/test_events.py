"""draxr.events.Recorder: repeated FailedScheduling events become a series; nothing is kept per bound pod."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from prometheus_client import REGISTRY

from draxr.core.state import PodInfo
from draxr.events import Recorder, set_unschedulable
from draxr.kube import Kube, Resource
from draxr.leader import NotLeading
from tests.unit.cluster_builders import pod

JSON = dict[str, Any]


class RecordingKube(Kube):
    def __init__(self) -> None:
        self.limiter = None
        self.calls: list[tuple[str, str]] = []

    async def create(self, res: Resource, body: JSON, namespace: str | None = None, **_: Any) -> JSON:
        self.calls.append(("create", body["reason"]))
        return body

    async def patch(self, res: Resource, name: str, body: Any, namespace: str | None = None, **_: Any) -> JSON:
        self.calls.append(("patch", str(body["series"]["count"])))
        return {}


async def test_repeated_warning_is_a_series_and_bound_pods_leave_nothing_behind() -> None:
    kube = RecordingKube()
    rec = Recorder(kube, "draxr")
    info = PodInfo.from_api(pod("a"))
    for _ in range(3):
        await rec.pod_event(info, reason="FailedScheduling", action="Scheduling", note="no fit", warning=True)
    assert kube.calls == [("create", "FailedScheduling"), ("patch", "2"), ("patch", "3")]
    await rec.pod_event(info, reason="FailedScheduling", action="Scheduling", note="other", warning=True)
    assert kube.calls[-1] == ("create", "FailedScheduling")  # a new note: a new Event
    rec.forget(info.uid)  # bound (the binder) or deleted
    assert rec._last == {}
    await rec.pod_event(info, reason="Scheduled", action="Binding", note="assigned")
    await rec.pod_event(PodInfo.from_api(pod("b")), reason="Scheduled", action="Binding", note="assigned")
    assert kube.calls[-2:] == [("create", "Scheduled"), ("create", "Scheduled")]
    assert rec._last == {}  # a Normal event never repeats: nothing is remembered for it


class UnreachableKube(Kube):
    def __init__(self, error: BaseException) -> None:
        self.limiter = None
        self.error = error

    async def create(self, *_: Any, **__: Any) -> JSON:
        raise self.error

    async def patch(self, *_: Any, **__: Any) -> JSON:
        raise self.error


async def test_events_and_conditions_that_get_no_answer_are_dropped_not_raised() -> None:
    """Best effort, like a refusal: the chaos run's dropped connections (and a replica whose lease
    is not fresh, NotLeading) left "Task exception was never retrieved" behind instead."""
    info = PodInfo.from_api(pod("a"))
    for error in (aiohttp.ServerDisconnectedError(), NotLeading("not leading"), TimeoutError()):
        kube = UnreachableKube(error)
        await Recorder(kube, "draxr").pod_event(info, reason="FailedScheduling", action="Scheduling", note="x")
        await set_unschedulable(kube, info, "0/1 nodes are available.")


class SlowKube(RecordingKube):
    """Each write waits until released: shows how many are in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.open = 0
        self.most = 0
        self.gate = asyncio.Event()
        self.bodies: list[JSON] = []

    async def create(self, res: Resource, body: JSON, namespace: str | None = None, **_: Any) -> JSON:
        self.open += 1
        self.most = max(self.most, self.open)
        await self.gate.wait()
        self.open -= 1
        self.bodies.append(body)
        return await super().create(res, body, namespace)


async def test_queued_events_are_written_in_order_by_one_writer_after_the_caller_returns() -> None:
    kube = SlowKube()
    rec = Recorder(kube, "draxr")
    pods = [PodInfo.from_api(pod(f"p{i}")) for i in range(5)]
    for p in pods:
        await rec.pod_event(p, reason="Scheduled", action="Binding", note=f"assigned {p.name}", later=True)
    assert rec.queued() == 6  # five waiting, one writer (the caller did not wait for any)
    await asyncio.sleep(0)
    kube.gate.set()
    await rec.drain()
    assert rec.queued() == 0
    assert kube.most == 1
    assert [b["note"] for b in kube.bodies] == [f"assigned p{i}" for i in range(5)]
    assert [b["regarding"]["uid"] for b in kube.bodies] == [p.uid for p in pods]
    assert all(b["type"] == "Normal" and b["reason"] == "Scheduled" for b in kube.bodies)


async def test_warnings_are_never_queued() -> None:
    kube = SlowKube()
    kube.gate.set()
    rec = Recorder(kube, "draxr")
    info = PodInfo.from_api(pod("a"))
    await rec.pod_event(info, reason="FailedScheduling", action="Scheduling", note="x", warning=True, later=True)
    assert kube.calls == [("create", "FailedScheduling")]
    assert rec.queued() == 0


async def test_past_the_bound_events_are_dropped_and_counted_and_cancel_drops_the_rest() -> None:
    kube = SlowKube()
    rec = Recorder(kube, "draxr", max_queued=3)
    before = REGISTRY.get_sample_value("draxr_events_dropped_total") or 0.0
    for i in range(5):
        await rec.pod_event(PodInfo.from_api(pod(f"p{i}")), reason="Scheduled", action="Binding", note="n", later=True)
    assert REGISTRY.get_sample_value("draxr_events_dropped_total") == before + 2
    rec.cancel()  # (a replica that stops leading)
    await rec.drain()
    kube.gate.set()
    await asyncio.sleep(0)
    assert kube.bodies == []
    assert rec.queued() == 0
