"""The mutating admission webhook: on Pod CREATE in opted-in namespaces, steer pods that request a
mapped extended resource to draxr's scheduler name. It only steers: no object is created at
admission, and the decision reads the warm in-memory view (no API call on the admission path)."""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from draxr import logs, metrics
from draxr.core import json_codec
from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.steering import admission_verdict, steering_patch
from draxr.tls_context import load_chain

if TYPE_CHECKING:  # (the server process imports this module, and must not pull in the API client)
    from draxr.settings import Settings
    from draxr.webhook_tls import CertKeeper

log = logs.get("draxr.webhook")
PATH = "/mutate-pods"
# The only version the installed configuration asks for (admissionReviewVersions: [v1]).
REVIEW_API_VERSION = "admission.k8s.io/v1"


class Tally(Protocol):
    """Where the answers are counted: the metrics of this process, or (in the webhook's server
    process) a batch sent to the operator, which counts them in the same metrics."""

    def admitted(self, result: str) -> None: ...
    def answered(self, seconds: float) -> None: ...


class _Metrics:
    def admitted(self, result: str) -> None:
        metrics.WEBHOOK_ADMISSIONS.labels(result=result).inc()

    def answered(self, seconds: float) -> None:
        metrics.WEBHOOK_SECONDS.observe(seconds)


METRICS: Tally = _Metrics()


def malformed(review: Any) -> str | None:
    """Why ``review`` is not an AdmissionReview this webhook can answer (None: it is one). The
    API server never sends such a thing; answering 400 says so, where a made-up answer (another
    version, an empty uid the API server cannot match) would hide it."""
    if not isinstance(review, dict):
        return "not a JSON object"
    api_version, kind = review.get("apiVersion"), review.get("kind")
    if api_version != REVIEW_API_VERSION or kind != "AdmissionReview":
        return f"expected an AdmissionReview of {REVIEW_API_VERSION}, got {kind!r} of {api_version!r}"
    request = review.get("request")
    if not isinstance(request, dict):
        return "request is missing or not an object"
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return "request.uid must be a non-empty string"
    for key in ("kind", "object"):
        if request.get(key) is not None and not isinstance(request[key], dict):
            return f"request.{key} is not an object"
    return None


def allowed_unchanged(review: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answer that admits the pod as it is."""
    uid = (review.get("request") or {}).get("uid", "")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": uid, "allowed": True}}


def review_response(
    review: dict[str, Any], mapping: ExtendedResourceMapping | None, scheduler_name: str, tally: Tally = METRICS
) -> dict[str, Any]:
    """AdmissionReview in, AdmissionReview out. Always allowed; patched or not. ``mapping`` None:
    the view is not synced yet, so nothing is steered rather than steered on partial knowledge."""
    request = review.get("request") or {}
    out = allowed_unchanged(review)
    response = out["response"]
    pod = request.get("object") or {}
    kind = request.get("kind") or {}
    meta = pod.get("metadata") or {}
    who = f"{request.get('namespace') or meta.get('namespace', '')}/{meta.get('name') or meta.get('generateName', '')}"
    if kind.get("kind") != "Pod" or request.get("operation") != "CREATE" or request.get("subResource"):
        tally.admitted("ignored")
        return out
    if mapping is None:
        tally.admitted("not-synced")
        log.warning("pod admitted unchanged: draxr has not synced its cluster view yet", pod=who)
        return out
    verdict = admission_verdict(pod, mapping)
    if not verdict.steer:
        tally.admitted(verdict.result)
        if verdict.unsupported:  # an admin wants to know which pods draxr could not take, and why
            log.info("pod admitted unchanged", pod=who, unsupported=list(verdict.unsupported), why=verdict.reason)
        else:
            log.debug("pod admitted unchanged", pod=who, why=verdict.reason)
        return out
    patch = steering_patch(pod, scheduler_name, verdict.reason)
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json_codec.dumps(patch)).decode()
    tally.admitted("steered")
    log.info("pod steered to draxr", pod=who, scheduler_name=scheduler_name, why=verdict.reason)
    return out


def application(
    mapping: Callable[[], ExtendedResourceMapping | None], scheduler_name: str, tally: Tally = METRICS
) -> web.Application:
    async def mutate(request: web.Request) -> web.Response:
        t0 = time.monotonic()
        try:
            review = json_codec.loads(await request.read())
        except ValueError as e:  # not JSON, or not UTF-8
            why: str | None = str(e)
        except RecursionError:
            why = "nested too deeply"
        else:
            why = malformed(review)
        if why is not None:
            tally.admitted("bad-request")
            log.warning("malformed AdmissionReview", error=why)
            return web.json_response({"error": f"malformed AdmissionReview: {why}"}, status=400)
        try:
            body = review_response(review, mapping(), scheduler_name, tally)
        except Exception:  # a bug must not fail admission: allow unchanged (the pod keeps its scheduler)
            log.exception("webhook decision failed; pod admitted unchanged")
            tally.admitted("error")
            body = allowed_unchanged(review)
        tally.answered(time.monotonic() - t0)
        return web.Response(body=json_codec.dumps(body), content_type="application/json")

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post(PATH, mutate)
    app.router.add_get("/healthz", healthz)
    return app


@dataclass(frozen=True)
class _Running:
    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event


class WebhookServer:
    """HTTPS on ``bind_address:webhook_port`` with the certificate the keeper loads from the Secret,
    in a thread of this process (the default; ``--webhook-process true``: ``webhook_proc``).

    It runs in a thread with its own event loop: admission latency must not queue behind the main
    loop's watch events and scheduling cycles (under a burst of pod creations the main loop is busy
    by design, and a reply later than the configuration's timeout admits the pod unsteered). The
    decision only reads the current mapping, an immutable object swapped by reference. (The thread
    still shares the GIL with that loop: bench/NOTEBOOK.md measures what that costs.)

    Every replica serves from its own warm view; only the leader runs ``CertKeeper.ensure_loop``.
    Until a certificate exists nothing listens: the API server's calls fail and, failurePolicy
    Ignore, pods are admitted unchanged."""

    def __init__(
        self, certs: CertKeeper, settings: Settings, mapping: Callable[[], ExtendedResourceMapping | None]
    ) -> None:
        self.certs = certs
        self.settings = settings
        self.mapping = mapping

    def mapping_changed(self) -> None:
        """(The thread reads the mapping itself.)"""

    def problems(self) -> list[str]:
        return []  # (the thread ending ends ``serve``: a task that ended fails liveness)

    def alive(self) -> bool:
        return any(t.name == "draxr-webhook" and t.is_alive() for t in threading.enumerate())

    async def serve(self) -> None:
        reload = asyncio.create_task(self.certs.reload_loop(), name="webhook-cert-reload")
        started: concurrent.futures.Future[_Running] = concurrent.futures.Future()
        ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        thread = threading.Thread(target=self._thread_main, args=(started, ended), name="draxr-webhook", daemon=True)
        running: _Running | None = None
        try:
            await self.certs.loaded.wait()
            thread.start()
            running = await asyncio.wrap_future(started)  # raises if the port cannot be bound
            loop = running.loop

            def in_server_thread(tls_crt: bytes, tls_key: bytes) -> None:
                loop.call_soon_threadsafe(load_chain, self.certs.ssl, tls_crt, tls_key)

            self.certs.deliver = in_server_thread
            # The server thread or the certificate reload ending on its own is a failure: no silent death.
            await asyncio.wait([asyncio.wrap_future(ended), reload], return_when=asyncio.FIRST_COMPLETED)
            raise RuntimeError("admission webhook server stopped on its own")
        finally:
            reload.cancel()
            self.certs.deliver = self.certs.load_here
            if running is not None:
                running.loop.call_soon_threadsafe(running.stop.set)
            if thread.is_alive():
                await asyncio.to_thread(thread.join, 10)

    def _thread_main(
        self, started: concurrent.futures.Future[_Running], ended: concurrent.futures.Future[None]
    ) -> None:
        async def main() -> None:
            s = self.settings
            runner = web.AppRunner(application(self.mapping, s.scheduler_name), access_log=None)
            try:
                await runner.setup()
                await web.TCPSite(runner, s.bind_address, s.webhook_port, ssl_context=self.certs.ssl).start()
            except BaseException as e:
                started.set_exception(e)
                await runner.cleanup()
                return
            log.info("admission webhook serving", address=s.bind_address, port=s.webhook_port, path=PATH)
            stop = asyncio.Event()
            started.set_result(_Running(asyncio.get_running_loop(), stop))
            try:
                await stop.wait()
            finally:
                await runner.cleanup()

        try:
            asyncio.run(main())
        finally:
            if not started.done():
                started.set_exception(RuntimeError("admission webhook server thread ended before it served"))
            ended.set_result(None)
