"""Kube.request sends through the client's REST layer directly (not ApiClient.call_api, whose body
walk and double decoding cost CPU on every write): it must send exactly what call_api sends and
answer as it did, against a local HTTP server that records every request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from structlog.testing import capture_logs

from draxr import kube as kube_module
from draxr.kube import JSON_PATCH, MERGE_PATCH, Kube


class Server:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.answers: list[web.Response] = []

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": sorted(request.query.items()),
                "headers": {k: request.headers.get(k) for k in ("Accept", "Content-Type", "Authorization", "Cookie")},
                "encoding": request.headers.get("Accept-Encoding"),
                "user_agent": request.headers.get("User-Agent"),
                "body": body,
            }
        )
        return self.answers.pop(0) if self.answers else web.json_response({"kind": "Pod", "n": len(self.seen)})


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Kube]]:
    server = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    cfg = client.Configuration(host=f"http://127.0.0.1:{port}")
    cfg.api_key = {"BearerToken": "Bearer t0ken"}
    kube = Kube(client.ApiClient(cfg), limiter=None)
    kube.server_retries = 1
    try:
        yield server, kube
    finally:
        await kube.close()
        await runner.cleanup()


async def _via_call_api(kube: Kube, method: str, path: str, body: Any, query: dict[str, Any], ctype: str) -> Any:
    """What Kube.request sent before: ApiClient.call_api."""
    return await kube.api.call_api(
        path,
        method,
        query_params=list(query.items()),
        header_params={"Accept": "application/json", "Content-Type": ctype},
        body=body,
        auth_settings=["BearerToken"],
        response_types_map={200: "object", 201: "object", 202: "object"},
        _return_http_data_only=True,
    )


JS = "application/json"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims"
CASES: list[tuple[str, str, Any, dict[str, Any], str]] = [
    ("GET", "/api/v1/pods", None, {"limit": 500, "continue": "abc=", "watch": "false"}, JS),
    ("POST", "/api/v1/namespaces/ns/pods/p/binding", {"target": {"name": "n1"}, "x": [1, 2.5, None]}, {}, JS),
    ("PUT", f"{CLAIMS}/c/status", {"status": {}}, {}, JS),
    ("PATCH", "/api/v1/namespaces/ns/pods/p/status", {"status": {"a": "ü"}}, {}, MERGE_PATCH),
    ("PATCH", f"{CLAIMS}/c", [{"op": "remove", "path": "/x"}], {}, JSON_PATCH),
    ("DELETE", f"{CLAIMS}/c", None, {"propagationPolicy": "Background"}, JS),
    ("POST", "/api/v1/namespaces", {}, {}, JS),
]  # fmt: skip


@pytest.mark.parametrize(("method", "path", "body", "query", "ctype"), CASES)
async def test_the_same_request_as_call_api_and_the_same_answer(
    served: tuple[Server, Kube], method: str, path: str, body: Any, query: dict[str, Any], ctype: str
) -> None:
    server, kube = served
    old = await _via_call_api(kube, method, path, body, query, ctype)
    new = await kube.request(method, path, body, query=query, content_type=ctype)
    before, after = server.seen
    assert after == before
    assert after["headers"]["Authorization"] == "Bearer t0ken"
    if body is not None:
        assert json.loads(after["body"]) == body
    assert old == {"kind": "Pod", "n": 1}
    assert new == {"kind": "Pod", "n": 2}


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (web.Response(status=204), {}),
        (web.Response(status=200, text="not json"), {}),
        (web.json_response([1, 2]), {}),
        (web.json_response({"a": 1}, status=202), {"a": 1}),
    ],
)
async def test_answers_that_are_no_object_are_empty(
    served: tuple[Server, Kube], answer: web.Response, expected: dict[str, Any]
) -> None:
    server, kube = served
    server.answers.append(answer)
    assert await kube.request("GET", "/x") == expected


async def test_errors_raise_api_exception_with_the_status_body_as_text(served: tuple[Server, Kube]) -> None:
    server, kube = served
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object has been modified"}
    server.answers.append(web.json_response(status, status=409))
    with pytest.raises(ApiException) as caught:
        await kube.request("PUT", "/api/v1/namespaces/ns/pods/p", {"metadata": {}})
    assert caught.value.status == 409
    assert isinstance(caught.value.body, str)
    assert json.loads(caught.value.body) == status


_FORBIDDEN = {"kind": "Status", "code": 403, "reason": "Forbidden"}
_TERMINATING = {
    **_FORBIDDEN,
    "message": 'events.events.k8s.io "e" is forbidden: unable to create new content in namespace ns because it is'
    " being terminated",
    "details": {"kind": "events", "causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
}
_RBAC = {**_FORBIDDEN, "message": 'events.events.k8s.io is forbidden: User "x" cannot create resource "events"'}


@pytest.mark.parametrize(("status", "logged"), [(_RBAC, True), (_TERMINATING, False)], ids=["rbac", "terminating"])
async def test_a_missing_permission_is_logged_a_terminating_namespace_is_not(
    served: tuple[Server, Kube], status: dict[str, Any], logged: bool
) -> None:
    """"api request refused" names a missing grant (the version and install tests assert there is
    none); a write into a namespace being deleted is refused by admission, not by RBAC."""
    server, kube = served
    server.answers.append(web.json_response(status, status=403))
    with capture_logs() as logs, pytest.raises(ApiException):
        await kube.request("POST", "/apis/events.k8s.io/v1/namespaces/ns/events", {"a": 1})
    assert [entry["event"] for entry in logs if entry["event"] == "api request refused"] == (
        ["api request refused"] if logged else []
    )


async def test_a_throttled_request_is_sent_again_after_retry_after(served: tuple[Server, Kube]) -> None:
    server, kube = served
    server.answers.append(web.json_response({"code": 429}, status=429, headers={"Retry-After": "0"}))
    assert await kube.request("POST", "/api/v1/namespaces/ns/events", {"a": 1}) == {"kind": "Pod", "n": 2}
    assert [s["method"] for s in server.seen] == ["POST", "POST"]
    assert server.seen[0]["body"] == server.seen[1]["body"]


async def test_an_answer_not_asked_for_is_not_decoded_but_errors_still_raise(served: tuple[Server, Kube]) -> None:
    server, kube = served
    assert await kube.request("PATCH", "/api/v1/namespaces/ns/pods/p/status", {"a": 1}, answer=False) == {}
    server.answers.append(web.json_response({"code": 404, "reason": "NotFound"}, status=404))
    with pytest.raises(ApiException) as caught:
        await kube.request("PATCH", "/api/v1/namespaces/ns/pods/p/status", {"a": 1}, answer=False)
    assert caught.value.status == 404


async def test_requests_and_streams_ask_for_uncompressed_answers_by_default(served: tuple[Server, Kube]) -> None:
    server, kube = served
    await kube.request("GET", "/api/v1/pods", query={"limit": 500})
    async with await kube.stream("/api/v1/pods", query={"watch": "true"}) as resp:
        await resp.read()
    assert [s["encoding"] for s in server.seen] == ["identity", "identity"]


async def test_with_compression_on_gzip_is_asked_for_and_decoded(
    served: tuple[Server, Kube], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, plain = served
    monkeypatch.setattr(kube_module, "_compression", False)
    kube_module.set_default_compression(True)
    kube = Kube(client.ApiClient(plain.api.configuration), limiter=None)
    try:
        answer = web.json_response({"kind": "PodList", "items": [{"n": i} for i in range(2000)]})
        answer.enable_compression(web.ContentCoding.gzip)
        server.answers.append(answer)
        got = await kube.request("GET", "/api/v1/pods")
    finally:
        await kube.close()
    assert "gzip" in (server.seen[0]["encoding"] or "")
    assert len(got["items"]) == 2000
