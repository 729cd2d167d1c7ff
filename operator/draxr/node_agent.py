"""``draxr node-agent``: publishes, for its own node, the device-plugin devices that running pods hold.

Issue 27, step 1 (moving a node from a device plugin to a DRA driver without draining it): running
pods keep the devices a device plugin gave them, and only kubelet knows which. The agent (a
DaemonSet, manifests/components/node-agent) asks kubelet's pod-resources API (v1 ``List`` on the unix
socket /var/lib/kubelet/pod-resources/kubelet.sock, gRPC ``v1.PodResourcesLister``; generated stubs
in git, ``draxr.podresources``) every ``--poll-seconds`` and writes the DevicePluginRecord named
after its node (crds/devicepluginrecords.draxr.io.yaml) when what it read changed, and at least every
``--refresh-seconds`` (``spec.observedTime``), so that the leader can tell a live record from a stale
one (older than 3 x refreshSeconds: unknown).

Least privilege: its ClusterRole allows get/create/update of devicepluginrecords, and the
component's ValidatingAdmissionPolicy lets its ServiceAccount write only the record named after the
node its pod-bound token carries (``authentication.kubernetes.io/node-name``).

Failure policy: one ``GuardedLoop`` (transient errors, kubelet unreachable included, retried with
backoff; a non-transient error five times in a row ends the process non-zero). The record's CRD not
installed (404) and a refused write (403: RBAC, the admission policy) are retried too, never fatal:
they heal when the admin installs the CRD or fixes the grant, and the log and /healthz say which
CRD or which permission, and how to fix it. While it cannot read kubelet or write the record it
does not refresh it (the record goes stale: unknown, which is the truth), and /healthz fails once
nothing was written for 2 x refreshSeconds, so kubelet restarts it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes_asyncio import client, config

from draxr import __version__, logs
from draxr.kube import JSON, ApiException, Kube, Resource, api_message
from draxr.loops import GuardedLoop, LoopFailed, NotInstalled, Refused, retry_conflicts, sleeper

log = logs.get("draxr.node_agent")

RECORDS = Resource("draxr.io", "v1alpha1", "devicepluginrecords", False)
API_VERSION = "draxr.io/v1alpha1"
KIND = "DevicePluginRecord"
CRD_NAME = "devicepluginrecords.draxr.io"
NOT_INSTALLED = (
    f"the CustomResourceDefinition {CRD_NAME} is not installed (the API server answers 404 for "
    f"{API_VERSION} devicepluginrecords): install it with `kubectl apply -k crds/` from the draxr "
    "repository (or the Helm chart, whose crds/ has it); retrying until it is there"
)
DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# kubelet's own pod-resources client allows 16 MiB answers (podresources.DefaultMaxMsgSize).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
STALE_FACTOR = 3  # the leader: a record older than 3 x refreshSeconds is unknown
UNHEALTHY_FACTOR = 2  # /healthz: nothing written for 2 x refreshSeconds


# ---- the record: pod-resources List answer -> DevicePluginRecord spec (pure) -----------------------


def wanted(resource_name: str, only: frozenset[str] = frozenset()) -> bool:
    """Whether a device-plugin resource goes into the record: the ``--resource`` names when given,
    else every name with a domain prefix outside kubernetes.io (what device plugins register)."""
    if only:
        return resource_name in only
    domain, slash, name = resource_name.partition("/")
    if not (slash and domain and name):
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def pods_from(response: Any, only: frozenset[str] = frozenset()) -> list[JSON]:
    """The record's ``spec.pods`` from a ``ListPodResourcesResponse``: pods holding wanted
    device-plugin devices (``devices``, never ``dynamic_resources``), sorted by namespace and name;
    their containers sorted by name; per container one entry per resource name (kubelet reports one
    per device, with its NUMA node), device IDs sorted and unique. A pod listed twice (a same-name
    pod still terminating beside its successor) is merged: every device either holds is taken."""
    merged: dict[tuple[str, str], dict[str, dict[str, set[str]]]] = {}
    for pod in response.pod_resources:
        for ctr in pod.containers:
            for dev in ctr.devices:
                if not dev.device_ids or not wanted(dev.resource_name, only):
                    continue
                containers = merged.setdefault((pod.namespace, pod.name), {})
                containers.setdefault(ctr.name, {}).setdefault(dev.resource_name, set()).update(dev.device_ids)
    return [
        {
            "namespace": namespace,
            "name": name,
            "containers": [
                {
                    "name": ctr,
                    "devices": [{"resourceName": res, "deviceIDs": sorted(ids)} for res, ids in sorted(by_res.items())],
                }
                for ctr, by_res in sorted(containers.items())
            ],
        }
        for (namespace, name), containers in sorted(merged.items())
    ]


def device_count(pods: Iterable[JSON]) -> int:
    return sum(len(d["deviceIDs"]) for p in pods for c in p["containers"] for d in c["devices"])


def rfc3339(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def record(
    node: str, pods: list[JSON], observed: dt.datetime, refresh_seconds: int, node_uid: str | None = None
) -> JSON:
    """The whole DevicePluginRecord object for ``node`` (no resourceVersion). With the node's uid
    (from the pod-bound token) it is owned by the Node: the garbage collector deletes the record
    with its node."""
    metadata: JSON = {
        "name": node,
        "labels": {"app.kubernetes.io/name": "draxr", "app.kubernetes.io/component": "node-agent"},
    }
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "nodeName": node,
            "observedTime": rfc3339(observed),
            "refreshSeconds": refresh_seconds,
            "agentVersion": __version__,
            "podCount": len(pods),
            "deviceCount": device_count(pods),
            "pods": pods,
        },
    }


def node_uid_from_token(token: str, node: str) -> str | None:
    """The node's uid in a pod-bound ServiceAccount token (claim ``kubernetes.io.node``, Kubernetes
    1.32+), if the token names ``node``; None otherwise. Read, not verified: it is the agent's own
    token, and a wrong uid only makes the garbage collector delete the record."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        bound = claims["kubernetes.io"]["node"]
    except (IndexError, KeyError, TypeError, ValueError):
        return None
    if not isinstance(bound, dict) or bound.get("name") != node or not bound.get("uid"):
        return None
    return str(bound["uid"])


def is_stale(rec: JSON, now: dt.datetime) -> bool:
    """The leader's reading of a record: stale (unknown) when its observedTime is older than
    3 x its refreshSeconds, or unreadable."""
    spec = rec.get("spec") or {}
    try:
        observed = dt.datetime.fromisoformat(str(spec["observedTime"]).replace("Z", "+00:00"))
        refresh = float(spec["refreshSeconds"])
    except (KeyError, TypeError, ValueError):
        return True
    return (now - observed).total_seconds() > STALE_FACTOR * refresh


# ---- kubelet's pod-resources API --------------------------------------------------------------------


class KubeletUnavailable(ConnectionError):
    """kubelet did not answer (restarting, throttling, socket gone): transient for GuardedLoop."""


class PodResourcesError(RuntimeError):
    """kubelet answered with an error that retrying will not heal (UNIMPLEMENTED, PERMISSION_DENIED...)."""


class PodResourcesClient:
    """``v1.PodResourcesLister/List`` over the unix socket (grpc.aio; made inside the event loop)."""

    def __init__(self, socket: str | Path, timeout: float = 10.0) -> None:
        import grpc

        from draxr.podresources import api_pb2_grpc

        self.socket = str(socket)
        self.timeout = timeout
        self._grpc = grpc
        self.channel = grpc.aio.insecure_channel(
            f"unix://{os.path.abspath(self.socket)}",
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
        )
        self.stub: Any = api_pb2_grpc.PodResourcesListerStub(self.channel)  # type: ignore[no-untyped-call]

    async def list(self) -> Any:
        from draxr.podresources import api_pb2

        grpc = self._grpc
        try:
            return await self.stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            code = e.code()
            transient = (
                grpc.StatusCode.UNAVAILABLE,
                grpc.StatusCode.DEADLINE_EXCEEDED,
                grpc.StatusCode.RESOURCE_EXHAUSTED,  # kubelet's pod-resources rate limit
                grpc.StatusCode.CANCELLED,
                grpc.StatusCode.ABORTED,
            )
            message = f"pod-resources List on {self.socket}: {code.name}: {e.details()}"
            if code in transient:
                raise KubeletUnavailable(message) from e
            raise PodResourcesError(message) from e

    async def close(self) -> None:
        await self.channel.close()


# ---- the agent ----------------------------------------------------------------------------------------


@dataclass
class NodeAgent:
    kube: Kube
    read: Callable[[], Awaitable[Any]]  # a ListPodResourcesResponse
    node: str
    refresh_seconds: int = 30
    poll_seconds: float = 2.0
    only: frozenset[str] = frozenset()
    node_uid: str | None = None  # the Node's uid: the record's owner (garbage-collected with it)
    clock: Callable[[], float] = time.monotonic
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
    loop: GuardedLoop = field(default_factory=lambda: GuardedLoop("node-agent"))
    written_pods: list[JSON] | None = None  # what the record says, as this agent last wrote it
    last_write: float | None = None  # clock() of the last write
    writes: int = 0
    resource_version: str | None = None
    started: float = 0.0
    last_error: str = ""  # why the last write failed ("" after a write): /healthz says it
    records: Resource = RECORDS  # (tests: a group no CRD serves)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def due(self, pods: list[JSON]) -> bool:
        """A write is due when what kubelet says changed, or the refresh bound has come."""
        if self.written_pods is None or self.last_write is None or pods != self.written_pods:
            return True
        return self.clock() - self.last_write >= self.refresh_seconds

    async def step(self) -> None:
        pods = pods_from(await self.read(), self.only)
        if self.due(pods):
            changed = pods != self.written_pods
            try:
                await self.write(pods)
            except (NotInstalled, Refused) as e:
                self.last_error = str(e)
                raise
            if changed:
                log.info("record written", node=self.node, pods=len(pods), devices=device_count(pods))

    async def write(self, pods: list[JSON]) -> None:
        """Create or update the record (optimistic concurrency: the resourceVersion this agent last
        saw; on a conflict it reads the record again and retries)."""
        body = record(self.node, pods, self.now(), self.refresh_seconds, self.node_uid)
        body["apiVersion"] = f"{self.records.group}/{self.records.version}"

        async def put(rv: str) -> JSON:
            if rv:
                try:
                    meta = {**body["metadata"], "resourceVersion": rv}
                    return await self.kube.replace(self.records, {**body, "metadata": meta})
                except ApiException as e:
                    if e.status != 404:  # (deleted meanwhile: create it again)
                        raise
            # None exists: create (a 409 AlreadyExists, one created meanwhile, reads it and updates).
            try:
                return await self.kube.create(self.records, body)
            except ApiException as e:
                if e.status == 404:  # (a POST to the collection: the kind is not served)
                    raise NotInstalled(f"DevicePluginRecord {self.node} not written: {NOT_INSTALLED}") from e
                raise

        try:
            await self._put(put)
        except ApiException as e:
            if e.status in (401, 403):  # RBAC, the component's admission policy, a token
                raise Refused(
                    f"DevicePluginRecord {self.node} not written: refused ({e.status}: {api_message(e)}): the "
                    f"agent's ServiceAccount needs get, create and update of {CRD_NAME} "
                    "(manifests/components/node-agent, or the chart's nodeAgent.enabled=true) and may write "
                    "only the record of the node its pod-bound token names; retrying"
                ) from e
            raise
        self.last_error = ""
        self.written_pods = pods
        self.last_write = self.clock()
        self.writes += 1

    async def _put(self, put: Callable[[str], Awaitable[JSON]]) -> None:
        async def current() -> str:
            try:
                got = await self.kube.get(self.records, self.node)
            except ApiException as e:
                if e.status == 404:
                    return ""
                raise
            return str(got["metadata"]["resourceVersion"])

        rv = self.resource_version if self.resource_version is not None else await current()
        answer = await retry_conflicts(rv, put, current, what=f"DevicePluginRecord {self.node}")
        self.resource_version = str((answer or {}).get("metadata", {}).get("resourceVersion") or "") or None

    def problems(self) -> list[str]:
        since = self.last_write if self.last_write is not None else self.started
        idle = self.clock() - since
        if idle > UNHEALTHY_FACTOR * self.refresh_seconds:
            what = "no DevicePluginRecord written" if self.last_write is None else "record not refreshed"
            why = f": {self.last_error}" if self.last_error else ""
            return [f"{what} for {idle:.0f}s (bound {UNHEALTHY_FACTOR} x {self.refresh_seconds}s){why}"]
        return []

    async def run(self) -> None:
        log.info(
            "node agent running",
            node=self.node,
            refresh_seconds=self.refresh_seconds,
            poll_seconds=self.poll_seconds,
            resources=sorted(self.only) or "all with a domain prefix",
        )
        await self.loop.run(self.step, sleeper(self.poll_seconds))


def health_app(agent: NodeAgent) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        problems = agent.problems()
        if problems:
            return web.Response(status=503, text="\n".join(problems) + "\n")
        return web.Response(text=f"ok ({agent.writes} writes)\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    return app


async def serve_health(agent: NodeAgent, host: str, port: int) -> None:
    runner = web.AppRunner(health_app(agent), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        log.info("health endpoint serving", address=host, port=port, paths=["/healthz"])
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


# ---- the process --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options:
    node_name: str
    socket: str = DEFAULT_SOCKET
    refresh_seconds: int = 30
    poll_seconds: float = 2.0
    resources: frozenset[str] = frozenset()
    kubeconfig: str | None = None
    serviceaccount_dir: str = "/var/run/secrets/kubernetes.io/serviceaccount"
    health_port: int = 8081
    bind_address: str = "0.0.0.0"

    def check(self) -> None:
        if not self.node_name:
            raise SystemExit("draxr node-agent: --node-name (or NODE_NAME) is required")
        if self.refresh_seconds < 1:
            raise SystemExit("draxr node-agent: --refresh-seconds must be at least 1")
        if not 0 < self.poll_seconds <= self.refresh_seconds:
            raise SystemExit("draxr node-agent: --poll-seconds must be > 0 and at most --refresh-seconds")


async def connect(opts: Options) -> Kube:
    """As the operator: a kubeconfig when given, else the pod's ServiceAccount (token re-read as
    kubelet rotates it)."""
    cfg = client.Configuration()
    if opts.kubeconfig:
        await config.load_kube_config(config_file=opts.kubeconfig, client_configuration=cfg)
    else:
        sa = Path(opts.serviceaccount_dir)
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg, token_filename=str(sa / "token"), cert_filename=str(sa / "ca.crt")
        )
    return Kube(client.ApiClient(cfg))


async def main(opts: Options) -> int:
    """Runs until SIGTERM/SIGINT (0) or a failure that does not heal (1)."""
    opts.check()
    kube = await connect(opts)
    node_uid = None
    if not opts.kubeconfig:  # in-cluster: the pod-bound token names the node and its uid
        token = Path(opts.serviceaccount_dir, "token")
        node_uid = node_uid_from_token(await asyncio.to_thread(token.read_text), opts.node_name)
        if node_uid is None:
            log.warning(
                "the ServiceAccount token names no node uid: the record will have no owner", node=opts.node_name
            )
    kubelet = PodResourcesClient(opts.socket)
    agent = NodeAgent(
        kube,
        kubelet.list,
        opts.node_name,
        refresh_seconds=opts.refresh_seconds,
        poll_seconds=opts.poll_seconds,
        only=opts.resources,
        node_uid=node_uid,
    )
    tasks: dict[str, asyncio.Task[Any]] = {"agent": asyncio.create_task(agent.run(), name="node-agent")}
    if opts.health_port:
        tasks["health"] = asyncio.create_task(serve_health(agent, opts.bind_address, opts.health_port), name="health")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopping = asyncio.create_task(stop.wait(), name="signal")
    rc = 0
    try:
        done, _ = await asyncio.wait([*tasks.values(), stopping], return_when=asyncio.FIRST_COMPLETED)
        for name, task in tasks.items():
            if task in done:  # a long-running task never ends on its own: that is a failure
                error = None if task.cancelled() else task.exception()
                if isinstance(error, LoopFailed):
                    log.error("node agent failed for good: exiting", error=str(error))
                else:
                    log.error("task ended: exiting", task=name, error=repr(error))
                rc = 1
        if rc == 0:
            log.info("signal received: stopping", node=opts.node_name)
    finally:
        for task in [*tasks.values(), stopping]:
            task.cancel()
        for task in [*tasks.values(), stopping]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await kubelet.close()
        await kube.close()
    return rc
