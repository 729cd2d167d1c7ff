"""A fault-injecting TLS proxy between a client (draxr) and kube-apiserver, for reliability tests.

    with FaultProxy.for_control_plane(cp) as proxy:
        kube = Kube.from_token(proxy.url, token, cp.pki.ca_crt)
        with proxy.gone(lists=True, watches=True):    # or: fault = proxy.gone(5); ...; fault.lift()
            ...

It listens on 127.0.0.1 with a certificate from the control plane's own CA (so every client that
trusts the API server trusts the proxy), and forwards every request to the API server over TLS,
headers and bodies unchanged (Authorization included: clients use bearer tokens, client
certificates do not pass through). Responses stream chunk by chunk; a JSON watch stream is
forwarded in whole lines, so that an injected ERROR event never lands inside a real one.

The proxy runs its own event loop in its own thread: a test whose loop runs the operator can still
talk through it, and every command is a plain method call, from sync or async code. A command
returns a ``Fault`` handle (lift it, or use it as a context manager); ``clear()`` lifts every
fault. ``counts`` and ``records`` say what the proxy did, so that a test asserts a fault happened
from the proxy's own account rather than from wall-clock timing. Upgrade requests (exec,
port-forward) are not supported.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import shutil
import ssl
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import yarl
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict, CIMultiDictProxy

from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane
from draxr_dev.devcluster.pki import issue_serving_cert

T = TypeVar("T")

# Hop-by-hop headers (RFC 9110 §7.6.1) and the ones aiohttp sets itself for the next hop.
_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Host",
        "Content-Length",
    )
)
_HOP_RESPONSE = _HOP - {"content-length"}  # a body passes through unchanged, so its length holds
# aiohttp would add these when the client sent none; a proxy must not (an unasked-for
# Accept-Encoding would get the client a gzip body it cannot read).
_NO_AUTO_HEADERS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")

# What a cut stream ends with when no real partial event is pending: a watch event's first bytes.
_PARTIAL_EVENT = b'{"type":"MODIFIED","object":{"kind":"'

# The API server's messages for a compacted continue token (apiserver/pkg/storage/etcd3/store.go):
# with a new, inconsistent token in the Status's metadata.continue, or (the token unreadable) without.
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list."
)
CONTINUE_EXPIRED_NO_TOKEN = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter."
)


def status(
    code: int,
    reason: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A metav1.Status failure as kube-apiserver writes it (same keys, same order)."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": dict(metadata or {}),
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        body["details"] = dict(details)
    body["code"] = code
    return body


def _true(value: str | None) -> bool:
    return (value or "").lower() in ("1", "t", "true")  # Go's strconv.ParseBool, as the API server


@dataclass(frozen=True)
class Call:
    """What a fault's ``match`` sees of a request. ``path`` is decoded, ``query`` holds the first
    value of each parameter."""

    method: str
    path: str
    query: Mapping[str, str]

    @property
    def is_watch(self) -> bool:
        return _true(self.query.get("watch")) or "/watch/" in self.path

    @property
    def is_write(self) -> bool:
        return self.method not in ("GET", "HEAD", "OPTIONS")

    @property
    def resource(self) -> str | None:
        """The plural of the collection the path names (``pods`` for a pod, its list and its
        subresources), or None outside /api and /apis."""
        rest = self._segments()
        return rest[0] if rest else None

    @property
    def is_collection(self) -> bool:
        """A list or watch of a collection rather than one object (by the shape of the path)."""
        return len(self._segments()) == 1

    def _segments(self) -> list[str]:
        """The path after /api/v1 or /apis/<group>/<version> (and a legacy /watch), without the
        namespace prefix of a namespaced resource: [plural, name?, subresource?]."""
        parts = [p for p in self.path.split("/") if p]
        rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
        if rest[:1] == ["watch"]:
            rest = rest[1:]
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            rest = rest[2:]
        return rest

    @property
    def is_list(self) -> bool:
        return self.method == "GET" and not self.is_watch and self.is_collection

    @property
    def resource_version(self) -> str:
        return self.query.get("resourceVersion", "")


Match = Callable[[Call], bool]


def watches(call: Call) -> bool:
    return call.is_watch


def lists(call: Call) -> bool:
    return call.is_list


def writes(call: Call) -> bool:
    return call.is_write


def resource(*plurals: str) -> Match:
    """Only requests for these collections (and their objects and subresources)."""
    wanted = frozenset(plurals)
    return lambda call: call.resource in wanted


@dataclass(frozen=True)
class Record:
    """One thing the proxy did. ``at`` is time.monotonic() when it happened (for a stall: when the
    response was released; ``detail["held"]`` is when it was held, ``detail["until"]`` the end of
    the stall)."""

    kind: str
    at: float
    method: str = ""
    path: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class Fault:
    """An active fault. ``until`` is a time.monotonic() deadline, None until lifted."""

    kind: str
    params: Mapping[str, Any]
    match: Match | None
    started: float
    until: float | None
    _proxy: FaultProxy = field(repr=False)
    lifted: bool = False

    def active(self, now: float | None = None) -> bool:
        return not self.lifted and (self.until is None or (now if now is not None else time.monotonic()) < self.until)

    def applies(self, call: Call) -> bool:
        return self.match is None or self.match(call)

    def lift(self) -> None:
        self._proxy._lift(self)

    def __enter__(self) -> Fault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lift()


@dataclass(frozen=True)
class _Interrupt:
    """What ends an open watch stream: a cut (``mid_event``: after a partial line) or an ERROR ``event``."""

    kind: str  # "cut" or "gone"
    mid_event: bool = False
    event: bytes = b""


@dataclass(eq=False)
class _Exchange:
    """One request in flight; watch streams also take interruptions (cut, gone)."""

    call: Call
    request: web.BaseRequest
    upstream: aiohttp.ClientResponse | None = None
    interrupt: asyncio.Future[_Interrupt] | None = None
    pending: bytes = b""  # a JSON watch's incomplete last line, not yet forwarded


class _Server(web.Server):
    """aiohttp's low-level server, resetting connections while the proxy refuses them."""

    def __init__(self, handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]], proxy: FaultProxy) -> None:
        # A client gone cancels its upstream request; no access log (the records say what happened).
        super().__init__(handler, handler_cancellation=True, access_log=None)
        self.proxy = proxy

    def connection_made(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if self.proxy._refusing():
            self.proxy._record(Record("refuse", time.monotonic()))
            transport.abort()


class FaultProxy:
    """The proxy: ``start()``/``stop()`` or a context manager; the fault commands return ``Fault``s;
    ``counts``/``records()`` say what it did. See the module docstring."""

    def __init__(self, upstream: str, ca: Path, cert: Path, key: Path, *, seed: int = 0) -> None:
        """``upstream`` is the API server's URL, ``ca`` the CA its certificate (and ``cert``, the
        proxy's own serving certificate) is signed by."""
        self.upstream = upstream.rstrip("/")
        self.ca = ca
        self._server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_ssl.load_cert_chain(str(cert), str(key))
        self._server_ssl.set_alpn_protocols(["http/1.1"])
        self._client_ssl = ssl.create_default_context(cafile=str(ca))
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._counts: Counter[str] = Counter()
        self._holding = 0
        self._records: deque[Record] = deque(maxlen=10_000)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self.port = 0
        # Created on the proxy's loop:
        self._stop: asyncio.Event
        self._changed: asyncio.Event  # set (and replaced) whenever the faults change
        self._session: aiohttp.ClientSession
        self._server: _Server
        self._exchanges: set[_Exchange] = set()

    @classmethod
    def for_control_plane(cls, cp: ControlPlane, *, seed: int = 0) -> FaultProxy:
        """A proxy in front of ``cp``'s API server, its certificate signed by ``cp``'s CA."""
        tmp = Path(tempfile.mkdtemp(prefix="draxr-faultproxy."))
        try:
            cert, key = issue_serving_cert(cp.pki, tmp, "faultproxy", "draxr-faultproxy")
            return cls(cp.api_url, cp.pki.ca_crt, cert, key, seed=seed)  # the key is loaded: drop the files
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---- lifecycle -------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return LOOPBACK

    @property
    def url(self) -> str:
        return f"https://{LOOPBACK}:{self.port}"

    def start(self, timeout: float = 10.0) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        self._thread = threading.Thread(target=self._thread_main, name="faultproxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the fault proxy did not start")
        if self._startup_error is not None:
            self._thread.join(timeout)
            raise RuntimeError("the fault proxy did not start") from self._startup_error
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection and the listener, then end the thread. Idempotent."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(self._stop.set)
        thread.join(timeout)
        if thread.is_alive():
            raise TimeoutError("the fault proxy did not stop")

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._changed = asyncio.Event()
            self._session = self._new_session()
            self._server = _Server(self._handle, self)
            listener = await self._loop.create_server(self._server, LOOPBACK, 0, ssl=self._server_ssl)
            self.port = int(listener.sockets[0].getsockname()[1])
        except BaseException as e:
            self._startup_error = e
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            listener.close()
            self._abort_connections()
            await self._session.close()
            await listener.wait_closed()

    def _new_session(self) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._client_ssl, limit=0),  # watches hold connections
            auto_decompress=False,  # bodies pass through as the API server encoded them
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            trust_env=False,
        )

    # ---- what it did -------------------------------------------------------------------------
    @property
    def counts(self) -> Counter[str]:
        """A snapshot. Keys: ``requests`` (received), ``forwarded`` (answered by the API server),
        ``watches`` (watch streams opened), and per fault: ``latency``, ``stall`` (responses or
        chunks held), ``gone``, ``throttle``, ``error``, ``cut`` (streams), ``drop`` (drop_all
        commands; the record's detail counts the connections closed), ``refuse`` (connections)."""
        with self._lock:
            return Counter(self._counts)

    def records(self, kind: str | None = None) -> list[Record]:
        with self._lock:
            return [r for r in self._records if kind is None or r.kind == kind]

    def open_watches(self) -> int:
        with self._lock:
            return sum(1 for ex in self._exchanges if ex.interrupt is not None and not ex.interrupt.done())

    def holding(self) -> int:
        """Responses (or stream chunks) a stall holds right now."""
        with self._lock:
            return self._holding

    async def until_count(self, kind: str, at_least: int, timeout: float = 10.0) -> None:
        """Wait (on the caller's loop) until ``counts[kind] >= at_least``."""
        await self._until(lambda: self.counts[kind] >= at_least, f"counts[{kind!r}] >= {at_least}", timeout)

    async def until_holding(self, at_least: int, timeout: float = 10.0) -> None:
        """Wait (on the caller's loop) until a stall holds ``at_least`` responses or chunks."""
        await self._until(lambda: self.holding() >= at_least, f"holding >= {at_least}", timeout)

    async def _until(self, check: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"faultproxy: not {what} within {timeout}s (counts {dict(self.counts)})")
            await asyncio.sleep(0.01)

    def _record(self, record: Record) -> None:
        with self._lock:
            self._counts[record.kind] += 1
            self._records.append(record)

    def _count(self, kind: str) -> None:
        with self._lock:
            self._counts[kind] += 1

    # ---- commands --------------------------------------------------------------------------------
    def drop_all(self, refuse_seconds: float | None = 0, match: Match | None = None) -> Fault:
        """Close every open connection now, client side (abruptly: no final chunk) and upstream. Then
        reset new connections for ``refuse_seconds`` (None: until lifted; they are reset right after
        the TLS handshake, before any request is read). ``match`` limits the drop to the connections
        whose current request matches; the refusal ignores it (a connection has no request yet)."""
        fault = self._add("refuse", {}, None, refuse_seconds)
        dropped = self._on_loop(self._drop_all(match))
        self._record(Record("drop", time.monotonic(), detail={"connections": dropped}))
        return fault

    def stall(self, seconds: float | None, match: Match | None = None) -> Fault:
        """Hold every response for ``seconds`` (None: until lifted): new responses before their
        headers, open streams before their next chunk. Lifting releases them at once."""
        return self._add("stall", {"seconds": seconds}, match, seconds)

    def latency(self, seconds: float, duration: float | None = None, match: Match | None = None) -> Fault:
        """Delay every request by ``seconds`` before it is forwarded, for ``duration`` (None: until
        lifted). Of several latency faults, the newest that matches applies."""
        return self._add("latency", {"seconds": seconds}, match, duration)

    def cut_watches(self, mid_event: bool = True, seconds: float | None = 0, match: Match | None = None) -> Fault:
        """Cut every open watch stream: the connection closes without the final chunk, after a partial
        JSON line when ``mid_event`` (the pending bytes of a real event, else the start of one). For
        ``seconds`` (None: until lifted) watches opened meanwhile are cut right after their headers."""
        fault = self._add("cut", {"mid_event": mid_event}, match, seconds)
        self._interrupt(fault, lambda ex: _Interrupt("cut", mid_event=mid_event))
        return fault

    def gone(
        self,
        seconds: float | None = None,
        lists: bool = True,
        watches: bool = True,
        unversioned_watches: bool = False,
        reason: str = "Expired",
        match: Match | None = None,
    ) -> Fault:
        """For ``seconds`` (None: until lifted), answer as an API server whose history was compacted:
        ``lists``: a list with ``continue`` gets HTTP 410 (reason ``reason``, the API server's message and,
        as it does, an inconsistent continue token in ``metadata.continue`` that works once lifted);
        ``watches``: open watch streams get an ERROR event with a 410 Status and end, and a new watch
        with a resourceVersion (not "" or "0", and without sendInitialEvents=true; with
        ``unversioned_watches`` every watch) is answered HTTP 200 with that single event."""
        params = {"lists": lists, "watches": watches, "unversioned_watches": unversioned_watches, "reason": reason}
        fault = self._add("gone", params, match, seconds)
        if watches:
            self._interrupt(fault, lambda ex: _Interrupt("gone", event=_expired_event(ex.call, reason)))
        return fault

    def throttle(self, seconds: float | None = None, retry_after: int = 1, match: Match | None = None) -> Fault:
        """Answer 429 with Retry-After, as API Priority and Fairness does."""
        return self._add("throttle", {"retry_after": retry_after}, match, seconds)

    def errors(
        self,
        seconds: float | None = None,
        code: int = 500,
        fraction: float = 1.0,
        retry_after: int = 1,
        match: Match | None = None,
    ) -> Fault:
        """Answer ``code`` (500 InternalError, 503 ServiceUnavailable with Retry-After, or any other
        5xx) to ``fraction`` of the matching requests (drawn from the proxy's seeded random)."""
        return self._add("error", {"code": code, "fraction": fraction, "retry_after": retry_after}, match, seconds)

    def clear(self) -> None:
        """Lift every fault (streams held by a stall are released)."""
        with self._lock:
            for f in self._faults:
                f.lifted = True
            self._faults.clear()
        self._notify()

    def write_kubeconfig(self, path: Path, token: str) -> Path:
        """A kubeconfig for ``draxr run --kubeconfig``: the proxy's URL, the control plane's CA, the token."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "faultproxy", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}
            ],
            "users": [{"name": "faultproxy", "user": {"token": token}}],
            "contexts": [{"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy"}}],
            "current-context": "faultproxy",
        }
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        return path

    def in_cluster_env(self) -> dict[str, str]:
        """What the in-cluster loader reads besides the serviceaccount dir (whose ca.crt, the control
        plane's CA, also verifies the proxy)."""
        return {"KUBERNETES_SERVICE_HOST": LOOPBACK, "KUBERNETES_SERVICE_PORT": str(self.port)}

    @contextlib.contextmanager
    def in_cluster(self) -> Iterator[None]:
        """Point the in-cluster loader at the proxy, restoring the environment afterwards (it is read
        only when a client is configured, e.g. by draxr.app.connect)."""
        saved = {k: os.environ.get(k) for k in self.in_cluster_env()}
        os.environ.update(self.in_cluster_env())
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # ---- fault bookkeeping ---------------------------------------------------------------------
    def _add(self, kind: str, params: Mapping[str, Any], match: Match | None, seconds: float | None) -> Fault:
        now = time.monotonic()
        fault = Fault(kind, params, match, now, None if seconds is None else now + seconds, self)
        with self._lock:
            self._faults.append(fault)
        self._notify()
        return fault

    def _lift(self, fault: Fault) -> None:
        with self._lock:
            fault.lifted = True
            if fault in self._faults:
                self._faults.remove(fault)
        self._notify()

    def _active(self, kind: str, call: Call | None = None) -> list[Fault]:
        """The active faults of ``kind`` that apply to ``call``, newest first; expired ones are pruned."""
        now = time.monotonic()
        with self._lock:
            self._faults = [f for f in self._faults if f.active(now)]
            found = [f for f in reversed(self._faults) if f.kind == kind]
        return [f for f in found if call is None or f.applies(call)]

    def _refusing(self) -> bool:
        return bool(self._active("refuse"))

    def _notify(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _on_loop(self, coro: Awaitable[T], timeout: float = 10.0) -> T:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the fault proxy is not running")
        if threading.current_thread() is self._thread:
            raise RuntimeError("fault commands block; do not call them from the proxy's own loop")

        async def run() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    def _interrupt(self, fault: Fault, action: Callable[[_Exchange], _Interrupt]) -> None:
        """Hand an interruption to every open watch stream the fault applies to."""

        async def run() -> None:
            for ex in list(self._exchanges):
                if ex.interrupt is not None and not ex.interrupt.done() and fault.applies(ex.call):
                    ex.interrupt.set_result(action(ex))

        self._on_loop(run())

    async def _drop_all(self, match: Match | None) -> int:
        if match is None:
            dropped = self._abort_connections()
            old, self._session = self._session, self._new_session()
            await old.close()  # idle keep-alive connections to the API server too
            return dropped
        dropped = 0
        for ex in list(self._exchanges):
            if match(ex.call) and ex.request.transport is not None:
                ex.request.transport.abort()
                if ex.upstream is not None:
                    ex.upstream.close()
                dropped += 1
        return dropped

    def _abort_connections(self) -> int:
        for ex in list(self._exchanges):
            if ex.upstream is not None:
                ex.upstream.close()
        dropped = 0
        for handler in self._server.connections:
            if handler.transport is not None:
                handler.transport.abort()
                dropped += 1
        return dropped

    # ---- the request path ------------------------------------------------------------------------
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        query = {k: request.query.getone(k) for k in request.query}
        ex = _Exchange(Call(request.method, request.path, query), request)
        self._count("requests")
        with self._lock:
            self._exchanges.add(ex)
        try:
            await self._delay(ex.call)
            synthetic = self._synthetic(ex.call)
            if synthetic is not None:
                await self._hold(ex)
                if isinstance(synthetic, bytes):  # a watch answered with an ERROR event
                    return await self._stream_once(request, synthetic)
                return synthetic
            return await self._forward(ex)
        finally:
            with self._lock:
                self._exchanges.discard(ex)

    async def _delay(self, call: Call) -> None:
        for fault in self._active("latency", call)[:1]:
            seconds, held = float(fault.params["seconds"]), time.monotonic()
            # The loop's timers may fire a hair early; the record must show the whole delay.
            while (left := held + seconds - time.monotonic()) > 0:  # noqa: ASYNC110 (a deadline, no event)
                await asyncio.sleep(left)
            self._record(
                Record("latency", time.monotonic(), call.method, call.path, {"seconds": seconds, "held": held})
            )

    def _synthetic(self, call: Call) -> web.Response | bytes | None:
        """The answer of the first fault that replaces the API server's, if any."""
        for fault in self._active("gone", call):
            p = fault.params
            if p["lists"] and call.is_list and call.query.get("continue"):
                self._record(Record("gone", time.monotonic(), call.method, call.path, {"what": "list"}))
                return _json_response(_continue_expired(call.query["continue"], p["reason"]))
            if p["watches"] and call.is_watch and (p["unversioned_watches"] or _versioned(call)):
                self._record(Record("gone", time.monotonic(), call.method, call.path, {"what": "watch"}))
                return _expired_event(call, p["reason"])
        for fault in self._active("throttle", call)[:1]:
            retry = int(fault.params["retry_after"])
            self._record(Record("throttle", time.monotonic(), call.method, call.path))
            body = status(
                429, "TooManyRequests", "Too many requests, please try again later.", {"retryAfterSeconds": retry}
            )
            return _json_response(body, {"Retry-After": str(retry)})
        for fault in self._active("error", call):
            if self._random.random() >= float(fault.params["fraction"]):
                continue
            code = int(fault.params["code"])
            self._record(Record("error", time.monotonic(), call.method, call.path, {"code": code}))
            if code == 503:
                retry = int(fault.params["retry_after"])
                msg = "The server is currently unable to handle the request"
                body = status(503, "ServiceUnavailable", msg, {"retryAfterSeconds": retry})
                return _json_response(body, {"Retry-After": str(retry)})
            cause = "injected by faultproxy"
            body = status(code, "InternalError", f"Internal error occurred: {cause}", {"causes": [{"message": cause}]})
            return _json_response(body)
        return None

    async def _hold(self, ex: _Exchange) -> None:
        """Wait while a stall applies; the record says when the response was released."""
        held: float | None = None
        until: float | None = None
        try:
            while stalls := self._active("stall", ex.call):
                changed = self._changed
                if held is None:
                    held = time.monotonic()
                    with self._lock:
                        self._holding += 1
                deadlines = [f.until for f in stalls]
                until = None if None in deadlines else max(d for d in deadlines if d is not None)
                timeout = None if until is None else max(0.0, until - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), timeout)
        finally:
            if held is not None:
                with self._lock:
                    self._holding -= 1
        if held is not None:
            call = ex.call
            self._record(Record("stall", time.monotonic(), call.method, call.path, {"held": held, "until": until}))

    async def _stream_once(self, request: web.BaseRequest, body: bytes) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(body)
        await resp.write_eof()
        return resp

    async def _forward(self, ex: _Exchange) -> web.StreamResponse:
        request = ex.request
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP)
        body = await request.content.read() if request.can_read_body else None
        url = yarl.URL(self.upstream + request.raw_path, encoded=True)
        try:
            async with self._session.request(
                request.method,
                url,
                headers=headers,
                data=body,
                allow_redirects=False,
                skip_auto_headers=_NO_AUTO_HEADERS,
            ) as up:
                ex.upstream = up
                self._count("forwarded")
                return await self._relay(ex, up)
        except (aiohttp.ClientError, ConnectionError):
            # The API server unreachable, or the stream broken (by drop_all): the client sees its
            # connection break, as it would without the proxy.
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=502)  # never delivered: the connection is gone

    async def _relay(self, ex: _Exchange, up: aiohttp.ClientResponse) -> web.StreamResponse:
        await self._hold(ex)
        resp = web.StreamResponse(status=up.status, reason=up.reason)
        _copy_headers(up.headers, resp)
        watch = ex.call.is_watch and up.status == 200
        # Whole lines only where lines are events: JSON, not compressed (protobuf streams pass as is).
        lines = watch and "json" in up.headers.get("Content-Type", "") and "Content-Encoding" not in up.headers
        if watch:
            ex.interrupt = asyncio.get_running_loop().create_future()
            self._count("watches")
            for fault in self._active("cut", ex.call)[:1]:
                ex.interrupt.set_result(_Interrupt("cut", mid_event=bool(fault.params["mid_event"])))
        await resp.prepare(ex.request)
        read: asyncio.Future[bytes] | None = None
        try:
            while True:
                read = read or asyncio.ensure_future(up.content.readany())
                if ex.interrupt is not None:
                    waiting: set[asyncio.Future[Any]] = {read, ex.interrupt}
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                    if ex.interrupt.done():
                        return await self._interrupted(ex, resp, ex.interrupt.result())
                chunk = await read
                read = None
                if not chunk:
                    break
                if lines:
                    data = ex.pending + chunk
                    end = data.rfind(b"\n") + 1
                    ex.pending, chunk = data[end:], data[:end]
                    if not chunk:
                        continue
                await self._hold(ex)
                await resp.write(chunk)
        finally:
            if read is not None:
                read.cancel()
            if ex.interrupt is not None and not ex.interrupt.done():
                ex.interrupt.cancel()
        if ex.pending:
            await resp.write(ex.pending)
        await resp.write_eof()
        return resp

    async def _interrupted(self, ex: _Exchange, resp: web.StreamResponse, why: _Interrupt) -> web.StreamResponse:
        call = ex.call
        if why.kind == "gone":  # the API server ends the stream cleanly after an ERROR event
            self._record(Record("gone", time.monotonic(), call.method, call.path, {"what": "stream"}))
            await resp.write(why.event)
            await resp.write_eof()
            return resp
        partial = (ex.pending or _PARTIAL_EVENT) if why.mid_event else b""
        self._record(
            Record("cut", time.monotonic(), call.method, call.path, {"partial": partial.decode(errors="replace")})
        )
        if partial:
            await resp.write(partial)
        # No final chunk: close (flushing what was written), so the client sees the stream break.
        if ex.request.transport is not None:
            ex.request.transport.close()
        return resp


def inconsistent_continue(token: str) -> str | None:
    """The token the API server offers with an expired one: the same start key at resourceVersion -1
    ("continue at the latest version"); None when ``token`` is not an API server continue token."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        start = decoded["start"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(start, str):
        return None
    new = json.dumps({"v": "meta.k8s.io/v1", "rv": -1, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(new.encode()).decode().rstrip("=")


def _continue_expired(token: str, reason: str) -> dict[str, Any]:
    new = inconsistent_continue(token)
    if new is None:
        return status(410, reason, CONTINUE_EXPIRED_NO_TOKEN)
    return status(410, reason, CONTINUE_EXPIRED, metadata={"continue": new})


def _versioned(call: Call) -> bool:
    return call.resource_version not in ("", "0") and not _true(call.query.get("sendInitialEvents"))


def _expired_event(call: Call, reason: str) -> bytes:
    rv = call.resource_version or "0"
    newer = str(int(rv) + 1) if rv.isdigit() else rv
    obj = status(410, reason, f"too old resource version: {rv} ({newer})")
    return json.dumps({"type": "ERROR", "object": obj}, separators=(",", ":")).encode() + b"\n"


def _json_response(body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        status=int(body["code"]),
        body=json.dumps(body, separators=(",", ":")).encode(),
        content_type="application/json",
        headers=dict(headers or {}),
    )


def _copy_headers(headers: CIMultiDictProxy[str], resp: web.StreamResponse) -> None:
    for k, v in headers.items():
        if k.lower() not in _HOP_RESPONSE:
            resp.headers.add(k, v)


__all__ = [
    "CONTINUE_EXPIRED",
    "CONTINUE_EXPIRED_NO_TOKEN",
    "Call",
    "Fault",
    "FaultProxy",
    "Match",
    "Record",
    "inconsistent_continue",
    "lists",
    "resource",
    "status",
    "watches",
    "writes",
]
