"""draxr's informers against the real API server: list (streaming or in pages), watch, resume, and
a fresh list whose reconciliation removes what was deleted in the gap. (A fresh API server's watch
cache still serves every resourceVersion, so the 410s come from the fault proxy: test_watch_faults.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from draxr import metrics
from draxr.kube import Kube, Resource
from draxr.watch import Informer, Phase, Target

from .test_platform import eventually

CONFIG_MAPS = Resource("", "v1", "configmaps", True)


class Recorder:
    """What a Target's handlers were called with, for one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.objects: dict[str, dict[str, Any]] = {}
        self.deleted: list[dict[str, Any]] = []

    def upsert(self, obj: dict[str, Any]) -> None:
        if obj["metadata"].get("namespace") == self.namespace:
            self.objects[obj["metadata"]["name"]] = obj

    def delete(self, obj: dict[str, Any]) -> None:
        if obj["metadata"].get("namespace") == self.namespace:
            self.objects.pop(obj["metadata"]["name"], None)
            self.deleted.append(obj)


def config_map(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


@contextlib.asynccontextmanager
async def running(inf: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(inf.run())
    try:
        await asyncio.wait_for(inf.synced.wait(), 30)
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _relists(name: str, reason: str) -> float:
    return metrics.WATCH_RELISTS.labels(watch=name, reason=reason)._value.get()


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming-list", "paged-list"])
async def test_lists_watches_and_a_relist_reconciles_what_was_deleted_in_the_gap(
    kube: Kube, namespace: str, streaming: bool
) -> None:
    for name in ("a", "b"):
        await kube.create(CONFIG_MAPS, config_map(name), namespace)
    rec = Recorder(namespace)
    watch_name = f"cm-{namespace}-{streaming}"
    inf = Informer(Target(watch_name, CONFIG_MAPS, rec.upsert, rec.delete), kube, page_size=2, streaming_list=streaming)
    async with running(inf):
        assert inf.streaming_list is streaming  # 1.37 serves sendInitialEvents
        assert {"a", "b"} <= set(rec.objects)
        await kube.create(CONFIG_MAPS, config_map("c"), namespace)
        await kube.patch(CONFIG_MAPS, "a", {"data": {"v": "2"}}, namespace)

        async def watched() -> bool:
            return "c" in rec.objects and rec.objects["a"]["data"]["v"] == "2"

        assert await eventually(watched, timeout=20)
        assert inf.phase is Phase.WATCHING

    # A gap: nothing watches while "b" is deleted and "d" created; then, as after a 410, a fresh list.
    await kube.delete(CONFIG_MAPS, "b", namespace)
    await kube.create(CONFIG_MAPS, config_map("d"), namespace)
    old_c = rec.objects["c"]["metadata"]["uid"]
    await kube.delete(CONFIG_MAPS, "c", namespace)  # and "c" is deleted and made again: a new uid
    new_c = (await kube.create(CONFIG_MAPS, config_map("c", "new"), namespace))["metadata"]["uid"]
    inf.resource_version = None
    relisted = _relists(watch_name, "initial")
    async with running(inf):

        async def reconciled() -> bool:
            return _relists(watch_name, "initial") == relisted + 1 and "d" in rec.objects

        assert await eventually(reconciled, timeout=30)
        assert "b" not in rec.objects
        assert "b" not in {k.split("/")[1] for k in inf.known}
        gone = sorted((d["metadata"] for d in rec.deleted), key=lambda m: m["name"])
        assert gone[0] == {"name": "b", "namespace": namespace, "uid": gone[0]["uid"]}
        assert gone[0]["uid"]  # the identity of the deleted object, as the state needs it
        assert gone[1] == {"name": "c", "namespace": namespace, "uid": old_c}  # the old "c" is gone
        assert len(gone) == 2
        assert rec.objects["c"]["metadata"]["uid"] == new_c
        # and it goes on watching from the fresh list
        await kube.delete(CONFIG_MAPS, "a", namespace)
        assert await eventually(lambda: _absent(rec, "a"), timeout=20)
        assert [d["metadata"]["name"] for d in rec.deleted][-1] == "a"
        assert len(rec.deleted) == 3


async def _absent(rec: Recorder, name: str) -> bool:
    return name not in rec.objects


async def test_an_optional_kind_that_is_not_served_is_synced_and_not_stale(
    kube: Kube, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = Resource("nothing.draxr.io", "v1", "widgets", False)
    original = kube.stream

    async def slow(*args: Any, **kwargs: Any) -> Any:  # an API server under load answers late
        await asyncio.sleep(0.15)
        return await original(*args, **kwargs)

    monkeypatch.setattr(kube, "stream", slow)
    rec = Recorder("")
    inf = Informer(Target("widgets", missing, rec.upsert, rec.delete, optional=True), kube, absent_poll_seconds=0.2)
    async with running(inf):
        assert inf.phase is Phase.ABSENT
        assert inf.idle_for() == 0.0
        # Polled every 0.2 s: between and during the polls it stays ABSENT with no idle time (a
        # poll once read as a listing without progress, and /healthz failed after 180 s).
        samples = []
        for _ in range(60):
            await asyncio.sleep(0.05)
            samples.append((inf.phase, inf.idle_for()))
        assert set(samples) == {(Phase.ABSENT, 0.0)}


async def test_a_required_kind_that_is_not_served_is_an_error_not_a_silent_wait(kube: Kube) -> None:
    missing = Resource("nothing.draxr.io", "v1", "widgets", False)
    rec = Recorder("")
    inf = Informer(Target("widgets-required", missing, rec.upsert, rec.delete), kube)
    task = asyncio.create_task(inf.run())
    try:
        errors = metrics.LOOP_ERRORS.labels(loop="watch-widgets-required", kind="client")

        async def counted() -> bool:
            return errors._value.get() >= 1

        assert await eventually(counted, timeout=20)
        assert not inf.synced.is_set()
        assert inf.phase is Phase.BACKING_OFF
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
