"""The fault proxy (tests/faultproxy.py) against the session's real API server: it passes requests
through unchanged, and each fault does what it says, as the proxy's own records show.

Clients talk to the proxy as draxr does in a pod: a ServiceAccount's bound token, the control
plane's CA (which signed the proxy's certificate too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from draxr.app import connect
from draxr.kube import NAMESPACES, SERVICE_ACCOUNTS, ApiException, Kube, Resource
from draxr.settings import Settings
from draxr_dev.devcluster.controlplane import ControlPlane

from ..faultproxy import CONTINUE_EXPIRED, FaultProxy, inconsistent_continue, resource, status, watches, writes
from .clusters import bound_token, service_account_dir
from .conftest import unique

CONFIG_MAPS = Resource("", "v1", "configmaps", True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True)
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", False)
SA = "prober"
LABEL = {"faultproxy-test": "true"}
PAGED = {"limit": 1, "labelSelector": "faultproxy-test=true"}
READ_TIMEOUT = 10.0


@pytest.fixture(scope="module")
async def prober(kube: Kube) -> AsyncIterator[tuple[str, str]]:
    """A namespace and the bound token of a ServiceAccount that may edit it: (namespace, token)."""
    ns = unique("faultproxy")
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube.create(SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SA}}, ns)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": SA},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}],
    }
    await kube.create(ROLE_BINDINGS, binding, ns)
    yield ns, await bound_token(kube, ns, SA)
    await kube.delete_if_exists(NAMESPACES, ns)


@pytest.fixture
def proxy(control_plane: ControlPlane) -> Iterator[FaultProxy]:
    with FaultProxy.for_control_plane(control_plane) as p:
        yield p


@pytest.fixture
async def via(proxy: FaultProxy, prober: tuple[str, str], control_plane: ControlPlane) -> AsyncIterator[Kube]:
    """The prober's client, through the proxy; waits until its RoleBinding is in force."""
    ns, token = prober
    async with Kube.from_token(proxy.url, token, control_plane.pki.ca_crt) as k:
        k.server_retries = 0  # these tests look at the proxy's raw answers, not draxr's resends
        for _ in range(100):  # RBAC reads the binding from an informer: a moment after the create
            try:
                await k.request("GET", CONFIG_MAPS.path(ns), query={"limit": 1})
                break
            except ApiException as e:
                if e.status != 403:
                    raise
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the prober's RoleBinding was not in force after 10 s")
        yield k


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": LABEL}, "data": data}


@contextlib.asynccontextmanager
async def watching(k: Kube, ns: str, **query: str) -> AsyncIterator[aiohttp.ClientResponse]:
    """A raw JSON watch of the namespace's ConfigMaps, entered once the response headers arrived."""
    resp: aiohttp.ClientResponse = await k.api.call_api(
        CONFIG_MAPS.path(ns),
        "GET",
        query_params=[("watch", "true"), *query.items()],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
        _preload_content=False,
        _return_http_data_only=True,
    )
    try:
        yield resp
    finally:
        resp.close()


def body(e: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(e.value.body or "{}")
    return parsed


def retry_after(e: pytest.ExceptionInfo[ApiException]) -> str | None:
    headers = e.value.headers
    return None if headers is None else headers.get("Retry-After")


async def next_event(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    line = await asyncio.wait_for(resp.content.readline(), READ_TIMEOUT)
    assert line.endswith(b"\n"), line
    event: dict[str, Any] = json.loads(line)
    return event


async def read_to_end(resp: aiohttp.ClientResponse) -> tuple[bytes, BaseException | None]:
    """Every byte until the stream ends, and the error it ended with (None: a clean end)."""
    data = b""
    try:
        async with asyncio.timeout(READ_TIMEOUT):
            while chunk := await resp.content.readany():
                data += chunk
    except aiohttp.ClientError as e:
        return data, e
    return data, None


async def first_page(k: Kube, ns: str) -> str:
    """The continue token after the first of several pages of the labelled ConfigMaps."""
    page = await k.request("GET", CONFIG_MAPS.path(ns), query=PAGED)
    token = page["metadata"].get("continue")
    assert token, page["metadata"]
    return str(token)


async def list_rv(k: Kube, ns: str) -> str:
    return str((await k.request("GET", CONFIG_MAPS.path(ns), query={"limit": 1}))["metadata"]["resourceVersion"])


async def test_requests_pass_through_unchanged(
    proxy: FaultProxy, via: Kube, kube: Kube, prober: tuple[str, str]
) -> None:
    ns, _ = prober
    name = unique("pass")
    created = await via.create(CONFIG_MAPS, config_map(name, a="1"), ns)
    assert created == await kube.get(CONFIG_MAPS, name, ns)
    patched = await via.patch(CONFIG_MAPS, name, {"data": {"b": "2"}}, ns)
    assert patched["data"] == {"a": "1", "b": "2"}
    assert await via.get(CONFIG_MAPS, name, ns) == await kube.get(CONFIG_MAPS, name, ns)
    # (The labelled ones: KCM adds kube-root-ca.crt to the namespace when it gets to it.)
    mine = "faultproxy-test=true"
    assert await via.list(CONFIG_MAPS, ns, labelSelector=mine) == await kube.list(CONFIG_MAPS, ns, labelSelector=mine)
    # A large list: the API server gzips it for a client that asks (over 128 KiB, Accept-Encoding as
    # aiohttp sends it; draxr's clients ask for identity, see kube.set_default_compression), and the
    # client gets those very bytes, compressed or not.
    big = unique("big")
    await kube.create(CONFIG_MAPS, config_map(big, blob="x" * 300_000), ns)
    for asked, encoding in (("gzip, deflate", "gzip"), ("identity", None)):
        via.api.set_default_header("Accept-Encoding", asked)
        raw = await via.api.call_api(
            CONFIG_MAPS.path(ns),
            "GET",
            query_params=[("labelSelector", mine)],
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
        )
        async with raw:
            assert raw.headers.get("Content-Encoding") == encoding
            assert (await raw.json())["items"] == await kube.list(CONFIG_MAPS, ns, labelSelector=mine)
    await kube.delete(CONFIG_MAPS, big, ns)
    # An error passes through as the API server wrote it, in the shape the proxy's own answers take.
    with pytest.raises(ApiException) as missing:
        await via.get(CONFIG_MAPS, unique("missing"), ns)
    assert missing.value.status == 404
    assert list(body(missing)) == list(status(404, "NotFound", "", {"name": ""}))
    # The bearer token reached the API server: it sees the ServiceAccount, not the proxy.
    review = await via.create(
        SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{ns}:{SA}"
    await via.delete(CONFIG_MAPS, name, ns)
    assert not await kube.delete_if_exists(CONFIG_MAPS, name, ns)
    counts = proxy.counts
    assert counts["requests"] == counts["forwarded"] >= 7
    assert set(counts) == {"requests", "forwarded"}  # no fault applied


async def test_a_watch_streams_through(proxy: FaultProxy, via: Kube, kube: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    async with watching(via, ns, resourceVersion=await list_rv(via, ns)) as resp:
        assert resp.status == 200
        assert proxy.open_watches() == 1
        names = [unique("watched") for _ in range(3)]
        for name in names:
            await kube.create(CONFIG_MAPS, config_map(name), ns)
        seen = [await next_event(resp) for _ in names]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen] == [("ADDED", n) for n in names]
    assert proxy.counts["watches"] == 1


async def test_gone_answers_410_to_continued_lists_and_watches(
    proxy: FaultProxy, via: Kube, kube: Kube, prober: tuple[str, str]
) -> None:
    ns, _ = prober
    for _ in range(3):
        await kube.create(CONFIG_MAPS, config_map(unique("paged")), ns)
    token = await first_page(via, ns)
    rv = await list_rv(via, ns)
    expired = {"type": "ERROR", "object": status(410, "Expired", f"too old resource version: {rv} ({int(rv) + 1})")}

    async with watching(via, ns, resourceVersion=rv) as open_stream:
        with proxy.gone():
            # The open watch ends cleanly after the API server's ERROR event.
            assert await next_event(open_stream) == expired
            assert await read_to_end(open_stream) == (b"", None)

            with pytest.raises(ApiException) as e:
                await via.request("GET", CONFIG_MAPS.path(ns), query={**PAGED, "continue": token})
            assert e.value.status == 410
            inconsistent = inconsistent_continue(token)
            assert inconsistent
            assert body(e) == status(410, "Expired", CONTINUE_EXPIRED, metadata={"continue": inconsistent})
            assert CONTINUE_EXPIRED.startswith("The provided continue parameter is too old")

            # A watch from a resourceVersion: HTTP 200 and a single ERROR event, then the end.
            async with watching(via, ns, resourceVersion=rv) as versioned:
                assert versioned.status == 200
                assert await next_event(versioned) == expired
                assert await read_to_end(versioned) == (b"", None)

            # A first list and a watch without resourceVersion are served.
            assert await via.request("GET", CONFIG_MAPS.path(ns), query={"limit": 1})
            async with watching(via, ns, labelSelector="faultproxy-test=true") as unversioned:
                assert (await next_event(unversioned))["type"] == "ADDED"
    assert [r.detail["what"] for r in proxy.records("gone")] == ["stream", "list", "watch"]

    # Lifted: the continued list and the watch are served again.
    rest = await via.request("GET", CONFIG_MAPS.path(ns), query={**PAGED, "continue": token})
    assert rest["items"]
    # The API server takes the inconsistent token the 410 offered, as it takes its own.
    assert (await via.request("GET", CONFIG_MAPS.path(ns), query={**PAGED, "continue": inconsistent}))["items"]
    async with watching(via, ns, resourceVersion=rv) as resumed:
        await kube.create(CONFIG_MAPS, config_map(name := unique("after")), ns)
        event = await next_event(resumed)
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", name)
    assert proxy.counts["gone"] == 3


async def test_gone_for_unversioned_watches_and_reason_gone(
    proxy: FaultProxy, via: Kube, prober: tuple[str, str]
) -> None:
    ns, _ = prober
    with proxy.gone(lists=False, unversioned_watches=True, reason="Gone"):
        async with watching(via, ns) as resp:
            event = await next_event(resp)
            assert (event["type"], event["object"]["code"], event["object"]["reason"]) == ("ERROR", 410, "Gone")
        streaming_list = {"sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        async with watching(via, ns, allowWatchBookmarks="true", **streaming_list) as resp:
            assert (await next_event(resp))["type"] == "ERROR"
    assert proxy.counts["gone"] == 2


async def test_throttle_answers_429_with_retry_after(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    with proxy.throttle(retry_after=3), pytest.raises(ApiException) as e:
        await via.list(CONFIG_MAPS, ns)
    assert e.value.status == 429
    assert retry_after(e) == "3"
    status_ = body(e)
    assert (status_["reason"], status_["code"], status_["details"]) == (
        "TooManyRequests",
        429,
        {"retryAfterSeconds": 3},
    )
    await via.list(CONFIG_MAPS, ns)  # lifted

    with proxy.throttle(match=writes):  # scoped: reads pass
        await via.list(CONFIG_MAPS, ns)
        with pytest.raises(ApiException) as e:
            await via.create(CONFIG_MAPS, config_map(unique("throttled")), ns)
        assert e.value.status == 429
    assert proxy.counts["throttle"] == 2


async def test_errors_answer_500_and_503(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    fault = proxy.errors(code=500, match=resource("configmaps"))
    with pytest.raises(ApiException) as e:
        await via.list(CONFIG_MAPS, ns)
    assert e.value.status == 500
    assert body(e)["reason"] == "InternalError"
    assert retry_after(e) is None
    # Another resource is not in scope.
    await via.create(SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    fault.lift()

    with proxy.errors(seconds=60, code=503, retry_after=2), pytest.raises(ApiException) as e:
        await via.list(CONFIG_MAPS, ns)
    assert e.value.status == 503
    assert retry_after(e) == "2"
    assert (body(e)["reason"], body(e)["details"]) == ("ServiceUnavailable", {"retryAfterSeconds": 2})

    with proxy.errors(code=500, fraction=0.0):
        await via.list(CONFIG_MAPS, ns)
    assert [r.detail["code"] for r in proxy.records("error")] == [500, 503]


async def test_stall_delays_a_response_by_the_stall(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    # The request is held first by a stall without end, so that it surely meets the timed one
    # however slowly it reaches the proxy; the timed stall then decides its release.
    gate = proxy.stall(None)
    request = asyncio.create_task(via.list(CONFIG_MAPS, ns))
    await proxy.until_holding(1)
    fault = proxy.stall(0.5)
    gate.lift()
    await asyncio.wait_for(request, READ_TIMEOUT)
    (record,) = proxy.records("stall")
    assert record.path == CONFIG_MAPS.path(ns)
    assert fault.until is not None
    assert record.detail["until"] == fault.until
    assert record.at >= fault.until  # released no earlier than the end of the stall
    await via.list(CONFIG_MAPS, ns)  # over: not held
    assert proxy.counts["stall"] == 1


async def test_stall_holds_open_streams_until_lifted(
    proxy: FaultProxy, via: Kube, kube: Kube, prober: tuple[str, str]
) -> None:
    ns, _ = prober
    async with watching(via, ns, resourceVersion=await list_rv(via, ns)) as resp:
        fault = proxy.stall(None)
        await kube.create(CONFIG_MAPS, config_map(name := unique("stalled")), ns)  # directly: not held
        request = asyncio.create_task(via.get(CONFIG_MAPS, name, ns))
        event = asyncio.create_task(next_event(resp))
        await proxy.until_holding(2)  # the watch's event and the get's response
        assert not request.done()
        assert not event.done()
        fault.lift()
        assert (await asyncio.wait_for(request, READ_TIMEOUT))["metadata"]["name"] == name
        assert (await event)["object"]["metadata"]["name"] == name
    assert {r.path for r in proxy.records("stall")} == {CONFIG_MAPS.path(ns, name), CONFIG_MAPS.path(ns)}
    assert proxy.holding() == 0


async def test_latency_delays_requests(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    with proxy.latency(0.2, match=resource("configmaps")):
        await via.list(CONFIG_MAPS, ns)
        await via.create(SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    (record,) = proxy.records("latency")
    assert record.path == CONFIG_MAPS.path(ns)
    assert record.detail["seconds"] == 0.2
    assert record.at >= record.detail["held"] + 0.2
    assert proxy.counts["forwarded"] >= 3


async def test_drop_all_breaks_open_watches_and_refuses(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    async with watching(via, ns, resourceVersion=await list_rv(via, ns)) as resp:
        refusal = proxy.drop_all(refuse_seconds=None)
        data, error = await read_to_end(resp)
    assert data == b""
    assert error is not None  # broken, not ended: no final chunk
    assert proxy.records("drop")[0].detail["connections"] >= 1
    with pytest.raises(aiohttp.ClientError):
        await via.list(CONFIG_MAPS, ns)
    assert proxy.counts["refuse"] >= 1
    refusal.lift()
    await via.list(CONFIG_MAPS, ns)


async def test_cut_watches_mid_event(proxy: FaultProxy, via: Kube, kube: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    async with watching(via, ns, resourceVersion=await list_rv(via, ns)) as resp:
        await kube.create(CONFIG_MAPS, config_map(name := unique("cut")), ns)
        assert (await next_event(resp))["object"]["metadata"]["name"] == name  # the stream flows
        proxy.cut_watches(mid_event=True)
        data, error = await read_to_end(resp)
    assert data
    assert b"\n" not in data
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)
    assert error is not None  # ... and then the connection breaks
    assert proxy.counts["cut"] == 1
    assert proxy.open_watches() == 0
    await via.list(CONFIG_MAPS, ns)  # only watches were cut


async def test_cut_watches_for_a_while(proxy: FaultProxy, via: Kube, prober: tuple[str, str]) -> None:
    ns, _ = prober
    with proxy.cut_watches(mid_event=False, seconds=None, match=watches):
        async with watching(via, ns) as resp:
            data, error = await read_to_end(resp)
        assert data == b""
        assert error is not None  # cut, not ended
    assert proxy.counts["cut"] == 1


async def test_clients_configured_for_the_proxy(
    proxy: FaultProxy, kube: Kube, control_plane: ControlPlane, prober: tuple[str, str], tmp_path: Path
) -> None:
    """draxr's own ways to connect: in-cluster (env + serviceaccount dir), and a kubeconfig."""
    ns, token = prober
    sa_dir = await service_account_dir(kube, control_plane, ns, SA, tmp_path / "sa")
    with proxy.in_cluster():
        k, cfg = await connect(Settings(kubeconfig=None, serviceaccount_dir=str(sa_dir)))
    assert cfg.host == proxy.url
    async with k:
        await k.list(CONFIG_MAPS, ns)
    async with await Kube.from_kubeconfig(proxy.write_kubeconfig(tmp_path / "kubeconfig", token)) as k2:
        await k2.list(CONFIG_MAPS, ns)
    assert proxy.counts["forwarded"] == 2


async def test_draxr_client_resends_after_429_and_503_with_retry_after(
    proxy: FaultProxy, via: Kube, prober: tuple[str, str]
) -> None:
    """As client-go: a 429, or a 5xx with Retry-After, was not processed; the client waits as asked
    and resends, so the caller sees the answer after the fault (at most its retries)."""
    ns, _ = prober
    via.server_retries = 5
    before = proxy.counts.copy()
    with proxy.throttle(seconds=1.5, retry_after=1):
        listed = await via.list(CONFIG_MAPS, ns)
    assert isinstance(listed, list)
    assert proxy.counts["throttle"] > before["throttle"]
    with proxy.errors(seconds=1.5, code=503, retry_after=1):
        await via.list(CONFIG_MAPS, ns)
    assert proxy.counts["error"] > before["error"]
    with proxy.errors(code=500, match=resource("configmaps")), pytest.raises(ApiException) as e:
        await via.list(CONFIG_MAPS, ns)  # a 500 without Retry-After is the caller's to handle
    assert e.value.status == 500
