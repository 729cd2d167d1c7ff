"""draxr.events.Recorder: repeated FailedScheduling events become a series; nothing is kept per bound pod."""

from __future__ import annotations

from typing import Any

from draxr.core.state import PodInfo
from draxr.events import Recorder
from draxr.kube import Kube, Resource
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
