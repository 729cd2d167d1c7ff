"""Kubernetes Events and the PodScheduled condition, written like kube-scheduler writes them."""

from __future__ import annotations

import asyncio
import collections
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp

from draxr import logs, metrics
from draxr.core.claims import micro_time, rfc3339
from draxr.core.state import PodInfo
from draxr.kube import EVENTS, MERGE_PATCH, PODS, STRATEGIC_MERGE_PATCH, ApiException, Kube

log = logs.get("draxr.events")


WRITERS = 1  # queued events written at once (kube-scheduler's broadcaster: one at a time)
MAX_QUEUED = 10_000  # events waiting for a writer, at most (a few MB); beyond, dropped and counted


@dataclass
class _Series:
    name: str
    note: str
    count: int


@dataclass(frozen=True, slots=True)
class _Ref:
    """The pod an Event regards (what is kept of it while its Event waits to be written)."""

    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, pod: PodInfo) -> _Ref:
        return cls(pod.namespace, pod.name, pod.uid)


@dataclass(frozen=True, slots=True)
class _Queued:
    pod: _Ref
    reason: str
    action: str
    note: str
    at: datetime


class Recorder:
    """Posts events.k8s.io/v1 Events. A repeated FailedScheduling with the same note updates the
    existing Event's series instead of creating a new one (like the client-go event broadcaster).
    Only warnings can repeat: the series of a pod are remembered for those alone, until the pod is
    bound or deleted (``forget``)."""

    def __init__(self, kube: Kube, controller: str, *, writers: int = WRITERS, max_queued: int = MAX_QUEUED) -> None:
        self.kube = kube
        self.controller = controller
        self.instance = f"{controller}-{os.environ.get('POD_NAME') or socket.gethostname()}"
        self._last: dict[str, dict[str, _Series]] = {}  # pod uid -> reason -> latest series
        self.writers = writers
        self.max_queued = max_queued
        self._queued: collections.deque[_Queued] = collections.deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._dropped = 0

    async def pod_event(
        self, pod: PodInfo, *, reason: str, action: str, note: str, warning: bool = False, later: bool = False
    ) -> None:
        """Write the Event now, or (``later``, a Normal event: the binder's Scheduled) queue it for
        the background writers and return at once. As kube-scheduler's event broadcaster, which
        writes from a goroutine of its own, one at a time: the binding does not wait for its
        report, and in a burst the reports trail the bindings instead of taking a fifth of the API
        server's writes from them. Past ``max_queued`` waiting, an event is dropped and counted
        (upstream drops past 1,000)."""
        if later and not warning:
            self._post(_Queued(_Ref.of(pod), reason, action, note, datetime.now(UTC)))
            return
        await self._write(_Ref.of(pod), reason, action, note, warning, datetime.now(UTC))

    def _post(self, queued: _Queued) -> None:
        if len(self._queued) >= self.max_queued:
            metrics.EVENTS_DROPPED.inc()
            self._dropped += 1
            if self._dropped % 1000 == 1:
                log.warning(
                    "events dropped: too many waiting to be written", dropped=self._dropped, queued=len(self._queued)
                )
            return
        self._queued.append(queued)
        if len(self._tasks) < self.writers:
            task = asyncio.get_running_loop().create_task(self._write_queued())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_queued(self) -> None:
        while self._queued:
            q = self._queued.popleft()
            try:
                await self._write(q.pod, q.reason, q.action, q.note, False, q.at)
            except Exception:  # (a refusal is handled in _write; this is a bug: the next event goes on)
                log.exception("event not recorded", pod=q.pod.key, reason=q.reason)

    def queued(self) -> int:
        """Events waiting for a writer (and being written)."""
        return len(self._queued) + len(self._tasks)

    def cancel(self) -> None:
        """Stop writing: a replica that stops leading (what is queued is dropped)."""
        self._queued.clear()
        for task in list(self._tasks):
            task.cancel()

    async def drain(self) -> None:
        """Until every queued event is written (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _write(self, pod: _Ref, reason: str, action: str, note: str, warning: bool, now: datetime) -> None:
        last = self._last.get(pod.uid, {}).get(reason)
        try:
            if last is not None and last.note == note:
                last.count += 1
                patch = {"series": {"count": last.count, "lastObservedTime": micro_time(now)}}
                await self.kube.patch(EVENTS, last.name, patch, pod.namespace, content_type=MERGE_PATCH)
                return
            name = f"{pod.name}.{secrets.token_hex(8)}"
            await self.kube.create(EVENTS, self._event(pod, name, reason, action, note, warning, now), pod.namespace)
            if warning:
                self._last.setdefault(pod.uid, {})[reason] = _Series(name, note, 1)
        except ApiException as e:
            log.warning("event not recorded", pod=pod.key, reason=reason, status=e.status, error=e.reason)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:  # no answer (or not leading): best effort
            log.warning("event not recorded", pod=pod.key, reason=reason, error=f"{type(e).__name__}: {e}")

    async def object_event(
        self, regarding: dict[str, Any], *, reason: str, action: str, note: str, warning: bool = True
    ) -> None:
        """An Event about another object (a cluster-scoped one's Events live in "default")."""
        namespace = str(regarding.get("namespace") or "default")
        name = f"{regarding.get('name', 'object')}.{secrets.token_hex(8)}"
        event = self._event(
            _Ref(namespace, str(regarding.get("name") or ""), ""),
            name,
            reason,
            action,
            note,
            warning,
            datetime.now(UTC),
        )
        event["regarding"] = regarding
        try:
            await self.kube.create(EVENTS, event, namespace)
        except ApiException as e:
            log.warning(
                "event not recorded", regarding=regarding.get("name"), reason=reason, status=e.status, error=e.reason
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:  # best effort
            log.warning(
                "event not recorded", regarding=regarding.get("name"), reason=reason, error=f"{type(e).__name__}: {e}"
            )

    def forget(self, pod_uid: str) -> None:
        self._last.pop(pod_uid, None)

    def _event(
        self, pod: _Ref, name: str, reason: str, action: str, note: str, warning: bool, now: datetime
    ) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": pod.namespace},
            "eventTime": micro_time(now),
            "reportingController": self.controller,
            "reportingInstance": self.instance,
            "action": action,
            "reason": reason,
            "type": "Warning" if warning else "Normal",
            "note": note[:1024],
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
        }


async def set_unschedulable(kube: Kube, pod: PodInfo, message: str, nominated: str | None = None) -> None:
    """PodScheduled=False/Unschedulable, written only when it changes (no write per retry), and
    with ``nominated`` set, status.nominatedNodeName in the same patch ("" clears it), as
    kube-scheduler's handleSchedulingFailure."""
    want = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    status = pod.raw.get("status") or {}
    same_nomination = nominated is None or (status.get("nominatedNodeName") or "") == nominated
    for cond in status.get("conditions") or ():
        if all(cond.get(k) == v for k, v in want.items()) and same_nomination:
            return
    patch: dict[str, Any] = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastProbeTime": None,
                    "lastTransitionTime": rfc3339(datetime.now(UTC)),
                }
            ]
        }
    }
    if nominated is not None:
        patch["status"]["nominatedNodeName"] = nominated or None
    try:
        await kube.patch(PODS, pod.name, patch, pod.namespace, subresource="status", content_type=STRATEGIC_MERGE_PATCH)
    except ApiException as e:
        if e.status != 404:
            log.warning("pod condition not written", pod=pod.key, status=e.status, error=e.reason)
    except (aiohttp.ClientError, OSError, TimeoutError) as e:  # written again on the next attempt
        log.warning("pod condition not written", pod=pod.key, error=f"{type(e).__name__}: {e}")
