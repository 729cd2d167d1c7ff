"""draxr's informers: one supervised list+watch per kind the scheduler reads.

Each informer lists (the API server's streaming list, ``sendInitialEvents``, where it is served;
else pages of ``limit``), then watches from the list's resourceVersion with bookmarks. It resumes
from the last resourceVersion after a server timeout, a dropped connection or a silent stream;
when the server says that version is gone (410), or a stream breaks off in the middle of a list,
it lists again and reconciles: whatever it knew but the fresh list lacks was deleted in the gap
and is dispatched as a delete, so the state and the scheduling queue learn about it.

Progress (an event, a bookmark, a list page, a stream opened) is time-stamped. The supervisor in
``app`` fails liveness and ends the process when an informer ends or makes no progress past its
deadline: a scheduler must never run on with a stale view.

kopf's watcher cannot do this: it re-lists without telling its handlers, so objects deleted in a
gap stay in the state for good, and a 410 on a list continuation ended its whole task set.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from draxr import logs, metrics
from draxr.core import json_codec
from draxr.kube import JSON, Kube, Resource
from draxr.loops import Backoff, GuardedLoop

log = logs.get("draxr.watch")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Seconds of event processing before an informer hands the event loop back: as long as the
# scheduling loop's turn, so that under load the view of the cluster keeps up with the decisions.
_YIELD_AFTER = 0.05


class Expired(Exception):
    """The resourceVersion (or a list's continue token) is too old: list again."""


class NotServed(Exception):
    """The kind is not served (an optional CRD that is not installed)."""


class Phase(enum.StrEnum):
    LISTING = "listing"
    WATCHING = "watching"
    BACKING_OFF = "backing-off"
    ABSENT = "absent"  # optional kind not installed: nothing to watch, nothing stale


@dataclass(frozen=True)
class Target:
    """What to watch and where its events go. ``delete`` gets the last object's identity
    (metadata name, namespace, uid) for deletions found by a re-list."""

    name: str
    resource: Resource
    upsert: Callable[[JSON], None]
    delete: Callable[[JSON], None]
    optional: bool = False


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def _stub(key: str, uid: str) -> JSON:
    namespace, _, name = key.partition("/")
    meta: JSON = {"name": name, "uid": uid}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


class Informer:
    def __init__(
        self,
        target: Target,
        kube: Kube,
        *,
        timeout_seconds: int = 300,
        idle_seconds: float = 90.0,
        page_size: int = 500,
        absent_poll_seconds: float = 10.0,
        streaming_list: bool = True,
    ) -> None:
        self.target = target
        self.kube = kube
        self.timeout_seconds = timeout_seconds
        self.idle_seconds = idle_seconds
        self.page_size = page_size
        self.absent_poll_seconds = absent_poll_seconds
        self.streaming_list: bool | None = None if streaming_list else False  # None: not tried yet
        self.known: dict[str, str] = {}  # "namespace/name" -> uid of what the state holds
        self.resource_version: str | None = None
        # time.monotonic() when the request of the last complete list was sent: that list (a
        # consistent read) holds every write made before then (takeover.catch_up skips such kinds).
        self.listed_since: float | None = None
        self.synced = asyncio.Event()
        self.phase = Phase.LISTING
        self.progress = time.monotonic()
        self.guard = GuardedLoop(f"watch-{target.name}", backoff=Backoff(0.8, 30.0), escalate_after=10)
        self._relists = Backoff(0.2, 10.0)  # 410 after 410 (a compacting etcd, a proxy): do not spin
        self._pages_next = False  # the last streaming list expired: list the next time in pages
        self._absent_since: float | None = None  # the kind is not served: lists are only polls
        self._yielded = time.monotonic()
        self._event_counters: dict[str, Any] = {}
        metrics.WATCH_LAST_EVENT_AGE.labels(watch=target.name).set_function(self.idle_for)

    @property
    def name(self) -> str:
        return self.target.name

    def idle_for(self) -> float:
        """Seconds without progress; 0 while the kind is not installed."""
        return 0.0 if self.phase is Phase.ABSENT else time.monotonic() - self.progress

    def _progressed(self) -> None:
        self.progress = time.monotonic()

    # ---- the loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        reason = "initial"
        while True:
            try:
                if self.resource_version is None:
                    await self._relist(reason)
                    if self.resource_version is None:  # a streaming list that broke off: list again
                        reason = "incomplete"
                        await self._pause(self._relists.next())
                    continue
                ended = await self._stream(initial=False)
                metrics.WATCH_RESTARTS.labels(watch=self.name, reason=ended).inc()
                self.guard.succeeded()
            except Expired:
                log.info("watch expired: listing again", watch=self.name, phase=self.phase.value)
                if self.phase is Phase.LISTING:
                    self._pages_next = True  # a streaming list expired: the next list goes in pages
                self.resource_version, reason = None, "expired"
                metrics.LOOP_ERRORS.labels(loop=self.guard.name, kind="expired").inc()
                await self._pause(self._relists.next())
            except NotServed:
                await self._absent()
                reason = "installed"
            except (TimeoutError, aiohttp.ServerTimeoutError):
                # No byte for idle_seconds (the server sends bookmarks each minute): resume.
                metrics.WATCH_RESTARTS.labels(watch=self.name, reason="idle").inc()
                log.info("watch silent: resuming", watch=self.name, idle_seconds=self.idle_seconds)
                reason = "idle"
            except asyncio.CancelledError:
                raise
            except Exception as e:  # connection resets, 5xx, 429 ...: back off, resume from where we were
                metrics.WATCH_RESTARTS.labels(watch=self.name, reason="error").inc()
                await self._pause(self.guard.failed(e, watch=self.name, phase=self.phase.value))
                reason = "error"

    async def _pause(self, seconds: float) -> None:
        self.phase = Phase.BACKING_OFF
        await asyncio.sleep(seconds)

    async def _absent(self) -> None:
        if self._absent_since is None:
            self._absent_since = time.monotonic()
            log.info("kind not served, waiting for it", watch=self.name, poll_seconds=self.absent_poll_seconds)
        self.phase = Phase.ABSENT
        self._progressed()  # the server answered: not served
        self.resource_version = None
        self._reconcile(set())  # a CRD deleted: so are its objects
        self.synced.set()
        await asyncio.sleep(self.absent_poll_seconds)

    # ---- listing -----------------------------------------------------------------------------------
    async def _relist(self, reason: str) -> None:
        # A poll for a kind that is not served is no re-list, and it stays ABSENT meanwhile: a
        # slow answer under load must not read as a watch without progress (liveness).
        if self._absent_since is None:
            self.phase = Phase.LISTING
            metrics.WATCH_RELISTS.labels(watch=self.name, reason=reason).inc()
            log.info("listing", watch=self.name, reason=reason, streaming=self.streaming_list is not False)
        if self.streaming_list is not False and not self._pages_next:
            try:
                await self._stream(initial=True)  # (it goes on watching once the list is complete)
                return
            except ApiException as e:
                if e.status not in (400, 422) or self.streaming_list:
                    raise
                # Refused outright the first time: this server does not offer streaming lists.
                log.info("streaming list not offered, listing in pages", watch=self.name, error=e.reason)
                self.streaming_list = False
        self._pages_next = False
        await self._list_pages()

    async def _list_pages(self) -> None:
        seen: set[str] = set()
        query: dict[str, Any] = {"limit": self.page_size}
        path = self.target.resource.path()
        sent = time.monotonic()  # (every page is read at the first page's snapshot)
        while True:
            try:
                page = await self.kube.request("GET", path, query=query)
            except ApiException as e:
                if e.status == 410:
                    raise Expired from e
                if e.status == 404 and self.target.optional:
                    raise NotServed from e
                raise
            self._progressed()
            for obj in page.get("items") or ():
                seen.add(self._upsert(obj))
                await self._maybe_yield()
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                self._listed(seen, str(meta.get("resourceVersion") or ""), sent)
                return
            query["continue"] = meta["continue"]

    def _listed(self, seen: set[str], resource_version: str, sent: float) -> None:
        """A complete list is in (``sent``: when its request went out)."""
        if self._absent_since is not None:
            metrics.WATCH_RELISTS.labels(watch=self.name, reason="installed").inc()
            waited = round(time.monotonic() - self._absent_since, 1)
            log.info("kind now served, listed", watch=self.name, objects=len(seen), waited_seconds=waited)
            self._absent_since = None
        self._reconcile(seen)
        self.resource_version = resource_version or None
        self.listed_since = sent
        if not self.synced.is_set():
            log.info("watch synced", watch=self.name, objects=len(self.known))
        self.synced.set()

    def _reconcile(self, seen: set[str]) -> None:
        gone = [key for key in self.known if key not in seen]
        for key in gone:
            uid = self.known.pop(key)
            self._dispatch(self.target.delete, _stub(key, uid), "deleted-in-gap")
        if gone:
            log.info("objects deleted while not watched, removed", watch=self.name, count=len(gone), first=gone[:3])

    # ---- watching ----------------------------------------------------------------------------------
    async def _stream(self, *, initial: bool) -> str:
        """One watch request, until the server ends it ("timeout") or it breaks off in the middle of
        an event ("cut"). ``initial``: a streaming list (every object as ADDED, then a bookmark that
        ends the list), reconciled at its end; a stream that breaks off before that end leaves
        ``resource_version`` None, so the next attempt lists again."""
        query: dict[str, Any] = {"watch": "true", "allowWatchBookmarks": "true", "timeoutSeconds": self.timeout_seconds}
        if initial:
            query |= {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
            self.resource_version = None
        else:
            query["resourceVersion"] = self.resource_version
        sent = time.monotonic()  # (a streaming list: what its end holds was written before this)
        seen: set[str] = set()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.idle_seconds)
        async with contextlib.AsyncExitStack() as stack:
            resp = await stack.enter_async_context(
                await self.kube.stream(self.target.resource.path(), query=query, timeout=timeout)
            )
            if resp.status != 200:
                body = await resp.text()
                if resp.status == 410:
                    raise Expired
                if resp.status == 404 and self.target.optional:
                    raise NotServed
                raise ApiException(status=resp.status, reason=_message(body) or resp.reason)
            if initial and self.streaming_list is None:
                self.streaming_list = True
            self.phase = Phase.LISTING if initial else Phase.WATCHING
            self._progressed()
            async for line in resp.content:
                if not line.endswith(b"\n"):
                    return "cut"  # in the middle of an event: resume (or list again) from what we have
                event = json_codec.loads(line)
                self._progressed()
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Expired
                    raise ApiException(status=int(obj.get("code") or 0), reason=str(obj.get("message") or obj))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    annotations = (obj.get("metadata") or {}).get("annotations") or {}
                    if initial and annotations.get(INITIAL_EVENTS_END) == "true":
                        initial = False
                        self._listed(seen, str(rv or ""), sent)
                        self.phase = Phase.WATCHING
                    elif not initial and rv:
                        self.resource_version = str(rv)
                    continue
                if kind in ("ADDED", "MODIFIED"):
                    key = self._upsert(obj)
                    if initial:
                        seen.add(key)
                elif kind == "DELETED":
                    self._delete(obj)
                self._counted(str(kind)).inc()
                if not initial:
                    self._relists.reset()
                    if rv:
                        self.resource_version = str(rv)
                await self._maybe_yield()
        return "timeout"

    # ---- dispatch -----------------------------------------------------------------------------------
    def _counted(self, kind: str) -> Any:
        """The events counter of ``kind`` (labels() looks the child up under a lock: once per kind)."""
        counter = self._event_counters.get(kind)
        if counter is None:
            counter = self._event_counters[kind] = metrics.WATCH_EVENTS.labels(watch=self.name, type=kind)
        return counter

    def apply(self, obj: JSON) -> None:
        """An object read elsewhere (a new leader's catch-up list), handled as if this watch had
        delivered it: the handlers see it, and the next re-list knows it (so reconciles it)."""
        self._upsert(obj)

    def _upsert(self, obj: JSON) -> str:
        key = _key(obj)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        old = self.known.get(key)
        if old is not None and old != uid:  # deleted and created again with the same name in a gap
            self._dispatch(self.target.delete, _stub(key, old), "replaced-in-gap")
        self.known[key] = uid
        self._dispatch(self.target.upsert, obj, "upsert")
        return key

    def _delete(self, obj: JSON) -> None:
        self.known.pop(_key(obj), None)
        self._dispatch(self.target.delete, obj, "delete")

    def _dispatch(self, handler: Callable[[JSON], None], obj: JSON, what: str) -> None:
        try:
            handler(obj)
        except Exception:  # a bug in one object's handling must not stop the stream for every other
            metrics.LOOP_ERRORS.labels(loop=f"watch-{self.name}", kind="bug").inc()
            log.exception("watch event handler failed", watch=self.name, object=_key(obj), kind=what)

    async def _maybe_yield(self) -> None:
        """Hand the event loop back after a time budget: a long stream (a list of 40,000 pods) must
        not starve the scheduler, the lease renewal or the health server."""
        now = time.monotonic()
        if now - self._yielded >= _YIELD_AFTER:
            await asyncio.sleep(0)
            self._yielded = time.monotonic()


def _message(body: str) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(json.loads(body).get("message") or "")
    return ""


__all__ = ["INITIAL_EVENTS_END", "Expired", "Informer", "NotServed", "Phase", "Target"]
