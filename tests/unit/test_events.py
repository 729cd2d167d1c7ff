"""draxr.events.Recorder: repeated FailedScheduling events become a series; nothing is kept per bound pod."""

from __future__ import annotations

from typing import Any

import aiohttp

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
