"""The thin API layer: raw JSON requests through kubernetes-asyncio's ApiClient.

Raw dicts rather than generated models: the models of the client release lag the server (fields the
client does not know are dropped on read), and building them costs CPU on hot paths.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from draxr import logs
from draxr.core import json_codec

log = logs.get("draxr.kube")

JSON = dict[str, Any]
Page = list[JSON]  # (a name: inside Kube, ``list`` is the method)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    """A REST collection: ``group`` is "" for the core API."""

    group: str
    version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", True)
NODES = Resource("", "v1", "nodes", False)
NAMESPACES = Resource("", "v1", "namespaces", False)
SERVICES = Resource("", "v1", "services", True)
REPLICATION_CONTROLLERS = Resource("", "v1", "replicationcontrollers", True)
REPLICA_SETS = Resource("apps", "v1", "replicasets", True)
STATEFUL_SETS = Resource("apps", "v1", "statefulsets", True)
EVENTS = Resource("events.k8s.io", "v1", "events", True)
POD_DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", True)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", False)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", True)
RESOURCE_QUOTAS = Resource("", "v1", "resourcequotas", True)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True)
# What the volume plugins read (VolumeBinding's informers, core.storage) and its PreBind writes.
PERSISTENT_VOLUMES = Resource("", "v1", "persistentvolumes", False)
PERSISTENT_VOLUME_CLAIMS = Resource("", "v1", "persistentvolumeclaims", True)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", False)
CSI_NODES = Resource("storage.k8s.io", "v1", "csinodes", False)
CSI_DRIVERS = Resource("storage.k8s.io", "v1", "csidrivers", False)
CSI_STORAGE_CAPACITIES = Resource("storage.k8s.io", "v1", "csistoragecapacities", True)
VOLUME_ATTACHMENTS = Resource("storage.k8s.io", "v1", "volumeattachments", False)

_OBJECT = {200: "object", 201: "object", 202: "object"}
_AUTH = ["BearerToken"]
_SERVER_RETRIES = 5  # as client-go: a 429, or a 5xx with Retry-After, was not processed; wait and resend
_RETRY_AFTER_MAX = 10.0


def server_wait(e: ApiException) -> float | None:
    """How long the server asks us to wait before resending (429 or 5xx with Retry-After), or None."""
    status = int(e.status or 0)
    headers: Any = e.headers or {}
    header = headers.get("Retry-After") if status == 429 or status >= 500 else None
    if header is None:
        return 1.0 if status == 429 else None
    try:
        return min(_RETRY_AFTER_MAX, max(0.0, float(header)))
    except ValueError:
        return 1.0


class RateLimiter:
    """Client-side token bucket, as client-go's (``qps`` tokens a second, at most ``burst`` saved):
    a request that finds no token waits for its turn. Reservations are taken in call order."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._last = time.monotonic()

    async def acquire(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        if self._tokens < 0:
            await asyncio.sleep(-self._tokens / self.qps)


_default_limit: tuple[float, int] = (0.0, 0)


def set_default_rate_limit(qps: float, burst: int) -> None:
    """QPS/burst of every Kube created afterwards without an explicit limiter (qps 0: unlimited)."""
    global _default_limit
    _default_limit = (qps, burst)


_compression = False


def set_default_compression(on: bool) -> None:
    """Whether every Kube created afterwards asks for gzip-compressed responses. Off by default,
    as kube-scheduler and kube-controller-manager set DisableCompression (kubernetes#80919):
    kube-apiserver gzips lists over 128 KB, which on a control plane's network costs both ends
    CPU for no gain in time."""
    global _compression
    _compression = on


def _default_limiter() -> RateLimiter | None:
    qps, burst = _default_limit
    return RateLimiter(qps, burst or max(1, int(qps))) if qps > 0 else None


class Kube:
    """Async JSON access to the API server. Errors surface as kubernetes-asyncio ``ApiException``.
    Requests pass through ``limiter`` when set (by default the process-wide client rate limit)."""

    def __init__(self, api: client.ApiClient, limiter: RateLimiter | None = None) -> None:
        self.api = api
        self.limiter = limiter if limiter is not None else _default_limiter()
        self.server_retries = _SERVER_RETRIES  # resends after a 429 or a 5xx with Retry-After
        # Called before every write (not GET) is sent; raises to refuse it. The operator installs the
        # leader elector's fence on the client of the leader's duties.
        self.fence: Callable[[], None] | None = None
        # kubernetes-asyncio opens its aiohttp session with trust_env=True: every request then reads
        # ~/.netrc and the proxy variables in a thread (5-30 % of draxr's CPU under load, measured with
        # py-spy). The API server is reached directly; switch that lookup off.
        session = getattr(api.rest_client, "pool_manager", None)
        if session is not None and hasattr(session, "_trust_env"):
            session._trust_env = False
        if not _compression:  # (aiohttp otherwise asks for gzip and deflate on every request)
            api.set_default_header("Accept-Encoding", "identity")

    @classmethod
    async def from_kubeconfig(cls, path: Path | str) -> Kube:
        cfg = client.Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=cfg)
        return cls(client.ApiClient(cfg))

    @classmethod
    def from_token(cls, host: str, token: str, ca_file: Path | str) -> Kube:
        cfg = client.Configuration(host=host)
        cfg.ssl_ca_cert = str(ca_file)
        cfg.api_key = {"BearerToken": f"Bearer {token}"}
        return cls(client.ApiClient(cfg))

    async def close(self) -> None:
        await self.api.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, Any] | None = None,
        content_type: str = "application/json",
        *,
        answer: bool = True,
    ) -> JSON:
        """The API's answer, decoded ({} when it is no object, or with ``answer`` False: a write whose
        answer the caller does not read, such as a whole pod after a status patch)."""
        for attempt in range(self.server_retries + 1):
            if self.limiter is not None:
                await self.limiter.acquire()
            if self.fence is not None and method != "GET":
                self.fence()
            try:
                data = await self._send(method, path, body, query, content_type, answer)
            except ApiException as e:
                wait = server_wait(e)
                if wait is not None and attempt < self.server_retries:
                    log.info("api server asked to retry", verb=method, resource=path, status=e.status, wait=wait)
                    await asyncio.sleep(wait)
                    continue
                if _refused(e):  # a missing permission: name the request, whoever handles the error
                    log.warning(
                        "api request refused", verb=method, resource=path, status=e.status, error=api_message(e)
                    )
                raise
            return data
        raise AssertionError("unreachable")

    async def _send(
        self, method: str, path: str, body: Any, query: dict[str, Any] | None, content_type: str, answer: bool = True
    ) -> JSON:
        """One request through the client's REST layer, as ``ApiClient.call_api`` sends it (its
        default headers, the token from ``update_params_for_auth``, which also refreshes a rotated
        one), less what costs CPU on every write and is of no use here: the recursive walk of the
        body for OpenAPI models (bodies here are plain JSON), the charset regex and the response
        decoded twice. Answers as call_api's: the decoded object (else {}), ApiException with the
        body as text."""
        api = self.api
        headers = {"Accept": "application/json", "Content-Type": content_type, **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        await api.update_params_for_auth(headers, [], _AUTH)  # (the token goes in a header)
        url = f"{api.configuration.host}{path}"
        try:
            resp = await api.rest_client.request(method, url, query_params=query or None, headers=headers, body=body)
        except ApiException as e:
            if isinstance(e.body, bytes):
                e.body = e.body.decode("utf-8")  # type: ignore[assignment]  # (as call_api: text)
            raise
        if resp.status not in _OBJECT or not answer:
            return {}
        try:
            data = json_codec.loads(resp.data)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    async def stream(
        self, path: str, query: dict[str, Any] | None = None, timeout: aiohttp.ClientTimeout | None = None
    ) -> aiohttp.ClientResponse:
        """A streaming GET (a watch): the open response, whatever its status; close it (async with)."""
        if self.limiter is not None:
            await self.limiter.acquire()
        resp: aiohttp.ClientResponse = await self.api.call_api(
            path,
            "GET",
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        return resp

    async def get(self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name, subresource))

    async def list(self, res: Resource, namespace: str | None = None, **query: Any) -> list[JSON]:
        items: list[JSON] = []
        async for page in self.pages(res, namespace, **query):
            items.extend(page)
        return items

    async def pages(self, res: Resource, namespace: str | None = None, **query: Any) -> AsyncIterator[Page]:
        """The items of a list, one page at a time (pass ``limit``): a caller that keeps less
        than whole objects never holds more than one page of them."""
        params = dict(query)
        while True:
            page = await self.request("GET", res.path(namespace), query=params)
            cont = page.get("metadata", {}).get("continue")
            yield page.get("items", [])
            if not cont:
                return
            params["continue"] = cont

    async def create(
        self,
        res: Resource,
        body: JSON,
        namespace: str | None = None,
        subresource: str | None = None,
        name: str | None = None,
    ) -> JSON:
        return await self.request("POST", res.path(namespace, name, subresource), body)

    async def replace(
        self, res: Resource, body: JSON, namespace: str | None = None, subresource: str | None = None
    ) -> JSON:
        name = body["metadata"]["name"]
        return await self.request("PUT", res.path(namespace, name, subresource), body)

    async def patch(
        self,
        res: Resource,
        name: str,
        body: Any,
        namespace: str | None = None,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
        *,
        answer: bool = True,
    ) -> JSON:
        path = res.path(namespace, name, subresource)
        return await self.request("PATCH", path, body, content_type=content_type, answer=answer)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, **query: Any) -> JSON:
        return await self.request("DELETE", res.path(namespace, name), query=query)

    async def delete_if_exists(self, res: Resource, name: str, namespace: str | None = None) -> bool:
        try:
            await self.delete(res, name, namespace)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True


def _body(e: ApiException) -> JSON:
    try:
        body = json.loads(e.body or "{}")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _refused(e: ApiException) -> bool:
    """A missing permission: 403, or 1.37's 422 with a Forbidden cause (resourceclaims/binding is
    checked in validation). Not NamespaceLifecycle's 403 for a write into a namespace being deleted
    (an Event for a pod of that namespace): no grant would allow it."""
    causes = (_body(e).get("details") or {}).get("causes") or ()
    if e.status == 403:
        return not any(c.get("reason") == "NamespaceTerminating" for c in causes)
    return e.status == 422 and any(c.get("reason") == "FieldValueForbidden" for c in causes)


def api_message(e: ApiException) -> str:
    """The API server's own message (the Status body), not the HTTP headers."""
    return str(_body(e).get("message") or f"{e.status} {e.reason}")


__all__ = ["JSON", "ApiException", "Kube", "RateLimiter", "Resource", "api_message", "set_default_rate_limit"]
