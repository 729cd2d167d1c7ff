"""The operator process: initial sync, kopf watches, the scheduling loop and the claim releaser."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client, config
from prometheus_client import start_http_server

from draxr import logs
from draxr.core import gc, mappings_crd
from draxr.core.state import ClusterState
from draxr.core.steering import DEFAULT_SCHEDULER
from draxr.events import Recorder
from draxr.handlers import Sink, build_registry
from draxr.kube import Kube
from draxr.leader import LeaderElector, default_identity
from draxr.mapping_status import MappingStatusWriter
from draxr.scheduler import Scheduler
from draxr.settings import Settings
from draxr.snapshot import list_cluster
from draxr.webhook import WebhookServer
from draxr.webhook_tls import CertKeeper

log = logs.get("draxr.app")


async def connect(settings: Settings) -> tuple[Kube, client.Configuration]:
    cfg = client.Configuration()
    if settings.kubeconfig:
        await config.load_kube_config(config_file=settings.kubeconfig, client_configuration=cfg)
    else:
        sa = Path(settings.serviceaccount_dir)
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg, token_filename=str(sa / "token"), cert_filename=str(sa / "ca.crt")
        )
    return Kube(client.ApiClient(cfg)), cfg


def kopf_login(cfg: client.Configuration) -> Any:
    """kopf authenticates with exactly what our own client uses (kubeconfig or in-cluster)."""

    async def login(**_: Any) -> kopf.ConnectionInfo:
        api_key: dict[str, Any] = cfg.api_key or {}
        bearer = str(api_key.get("BearerToken") or "")
        scheme, _sep, value = bearer.partition(" ")
        return kopf.ConnectionInfo(
            server=str(cfg.host),
            ca_path=cfg.ssl_ca_cert,
            insecure=not cfg.verify_ssl,
            scheme=scheme or None,
            token=value or None,
            certificate_path=cfg.cert_file,
            private_key_path=cfg.key_file,
        )

    return login


class Operator(Sink):
    def __init__(self, settings: Settings, kube: Kube, cfg: client.Configuration) -> None:
        self.settings = settings
        self.kube = kube
        self.cfg = cfg
        self.state = ClusterState()
        self.recorder = Recorder(kube, settings.scheduler_name)
        self.scheduler = Scheduler(kube, self.state, settings, self.recorder)
        self.releaser = self.scheduler.releaser
        self.synced = asyncio.Event()
        self.mapping_objects: dict[str, dict[str, Any]] = {}  # ExtendedResourceMapping CRs by name
        self.mapping_status = MappingStatusWriter(
            kube,
            self.state,
            lambda: self.mapping_objects,
            features=self.scheduler.features,
            interval=settings.mapping_status_seconds,
            gone=self._mapping_gone,
        )
        self.lost_leadership = False
        self._release_wake = asyncio.Event()
        self.release_plan = gc.ReleasePlan(settings.release_policy)
        self.certs = CertKeeper(kube, settings) if settings.webhook_port else None
        self.webhook = (
            WebhookServer(self.certs, settings, lambda: self.state.mapping if self.synced.is_set() else None)
            if self.certs is not None
            else None
        )

    # ---- Sink: called by the kopf handlers ------------------------------------------------------
    def pod_upserted(self, pod: dict[str, Any]) -> None:
        old = self.state.pods.get(pod["metadata"]["uid"])
        info = self.state.upsert_pod(pod)
        self.scheduler.pod_changed(info, old)
        if info.terminal and info.uid in self.state.special_claims:
            self._release_wake.set()
        self.scheduler.cluster_changed()

    def pod_deleted(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        self.state.remove_pod(uid)
        self.scheduler.pod_deleted(uid)
        if uid in self.state.special_claims:
            self._release_wake.set()
        self.scheduler.cluster_changed()

    def claim_upserted(self, claim: dict[str, Any]) -> None:
        self.state.upsert_claim(claim)
        self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    def claim_deleted(self, claim: dict[str, Any]) -> None:
        self.state.remove_claim(claim["metadata"]["namespace"], claim["metadata"]["name"])
        self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    def cluster_changed(self) -> None:
        self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    def mapping_upserted(self, obj: dict[str, Any]) -> None:
        self.mapping_objects[obj["metadata"]["name"]] = obj
        self._remap()

    def mapping_deleted(self, obj: dict[str, Any]) -> None:
        self._mapping_gone(obj["metadata"]["name"])

    def _mapping_gone(self, name: str) -> None:
        if self.mapping_objects.pop(name, None) is not None:
            self._remap()

    def _remap(self) -> None:
        """Overrides from the CRs; only a change of what they map (not our own status writes)
        re-resolves the names and wakes the scheduler."""
        overrides = mappings_crd.overrides(mappings_crd.parse_all(self.mapping_objects.values()))
        if overrides != self.state.overrides:
            self.state.set_overrides(overrides)
            self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    # ---- start-up ---------------------------------------------------------------------------------
    async def initial_sync(self) -> None:
        """List everything once so that decisions (and orphan detection) start from a full view;
        kopf's watches keep it current afterwards."""
        listing = await list_cluster(self.kube)
        listing.apply(self.state, upsert_pod=self.pod_upserted)
        for m in listing.mappings or ():
            self.mapping_objects[m["metadata"]["name"]] = m
        self._remap()
        log.info(
            "initial sync done",
            nodes=len(listing.nodes),
            slices=len(listing.slices),
            classes=len(listing.classes),
            claims=len(listing.claims),
            pods=len(listing.pods),
            mappings=len(listing.mappings) if listing.mappings is not None else "CRD not installed",
        )
        self.synced.set()

    async def roll_back_stale_claims(self) -> int:
        names = {self.settings.scheduler_name}
        if self.settings.adopt_unschedulable:
            names.add(DEFAULT_SCHEDULER)
        actions = gc.claims_to_roll_back(self.state, names, self.scheduler.queue.in_flight())
        return await self.releaser.run_all(actions, "rollback")

    async def release_loop(self) -> None:
        while True:
            wait = self.release_plan.wait_seconds(time.monotonic(), self.settings.release_sweep_seconds)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release_wake.wait(), wait)
            self._release_wake.clear()
            await self.releaser.run_all(self.release_plan.due(self.state, time.monotonic()), "release")
            await self.roll_back_stale_claims()

    # ---- run ----------------------------------------------------------------------------------------
    def kopf_settings(self) -> kopf.OperatorSettings:
        s = kopf.OperatorSettings()
        s.posting.enabled = False
        s.watching.server_timeout = 600
        s.watching.client_timeout = 660
        s.watching.connect_timeout = 60
        s.watching.chunk_size = 500
        s.networking.request_timeout = 120
        return s

    async def lead(self) -> None:
        """What only the leader does: roll back what a crashed leader left, schedule, release, and
        write the mapping CRs' status."""
        await self.roll_back_stale_claims()
        log.info("leading: scheduling and releasing claims", scheduler_name=self.settings.scheduler_name)
        duties = [self.scheduler.run(), self.release_loop(), self.mapping_status.run()]
        if self.certs is not None and self.settings.webhook_self_signed:
            duties.append(self.certs.ensure_loop())
        try:
            await asyncio.gather(*duties)
        finally:
            self.scheduler.cancel_writes()  # a replica that stops leading must stop writing

    def elector(self) -> LeaderElector | None:
        s = self.settings
        if not s.leader_elect:
            return None
        return LeaderElector(
            self.kube,
            s.leader_election_namespace,
            s.leader_election_lease_name or s.scheduler_name,
            default_identity(),
            s.lease_duration_seconds,
            s.renew_deadline_seconds,
            s.retry_period_seconds,
        )

    async def check_adoption(self) -> None:
        """Adoption is for kube-schedulers without DRAExtendedResource (1.34/1.35). From 1.36 on
        kube-scheduler schedules these pods itself (on by default, locked on in 1.37): two
        schedulers racing for the same pods is refused outright."""
        if not self.settings.adopt_unschedulable:
            return
        version = await self.kube.request("GET", "/version")
        minor = adoption_refused(version)
        if minor is not None:
            log.error("adoption mode refused", kubernetes=version.get("gitVersion"))
            raise AdoptionRefused(
                f"--adopt-unschedulable refused: the cluster runs Kubernetes {version.get('gitVersion', minor)}, "
                "whose kube-scheduler schedules default-scheduler pods with DRA-mapped extended resources itself "
                "(DRAExtendedResource is on by default from 1.36 and locked on in 1.37). Turn adoption off and "
                "opt pods in with schedulerName or the namespace label instead."
            )
        log.info("adoption mode on", kubernetes=version.get("gitVersion"))

    async def run(self, stop: asyncio.Event) -> None:
        """Watches and state run in every replica; scheduling only while leading. Losing the lease
        ends the process's leadership for good (the caller exits), as kube-scheduler does."""
        await self.check_adoption()
        await self.initial_sync()
        if self.settings.metrics_port:
            start_http_server(self.settings.metrics_port, addr=self.settings.bind_address)
        liveness = (
            f"http://{self.settings.bind_address}:{self.settings.health_port}/healthz"
            if self.settings.health_port
            else None
        )
        registry = build_registry(self, kopf_login(self.cfg))
        not_ours = _NotKopfTasks()
        kopf_tasks = await kopf.spawn_tasks(
            registry=registry,
            settings=self.kopf_settings(),
            standalone=True,
            clusterwide=True,
            stop_flag=stop,
            liveness_endpoint=liveness,
        )
        _own_signals(stop)  # kopf installed its handlers; ours stop everything through the stop flag
        elector = self.elector()
        leading = asyncio.create_task(elector.run(self.lead) if elector else self.lead(), name="leadership")
        kopf_task = asyncio.create_task(kopf.run_tasks(kopf_tasks, ignored=not_ours), name="kopf")
        webhook = asyncio.create_task(self.webhook.serve(), name="webhook") if self.webhook is not None else None
        log.info("draxr running", scheduler_name=self.settings.scheduler_name, leader_election=elector is not None)
        stopper = asyncio.create_task(stop.wait())
        try:
            watched = [stopper, kopf_task, leading, *([webhook] if webhook else [])]
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if leading in done and not stop.is_set():
                self.lost_leadership = True
            if webhook in done and not webhook.cancelled() and webhook.exception() is not None:
                # e.g. the port is taken: exit (and be restarted) rather than run without admission
                log.error("admission webhook failed", error=repr(webhook.exception()))
                raise webhook.exception()  # type: ignore[misc]
        finally:
            stopper.cancel()
            stop.set()
            leading.cancel()
            if webhook is not None:
                webhook.cancel()
            await asyncio.gather(leading, kopf_task, *([webhook] if webhook else []), return_exceptions=True)
            await self.scheduler.drain()
            if elector is not None and not self.lost_leadership:
                await elector.release()


class AdoptionRefused(SystemExit):
    """A start-up refusal with a message for the admin (the process exits non-zero)."""


def adoption_refused(version: dict[str, Any]) -> str | None:
    """The server's minor version if adoption must be refused there (1.36+), else None."""
    digits = "".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
    major = str(version.get("major", "1"))
    if major == "1" and digits and int(digits) < 36:
        return None
    return f"{major}.{digits or '?'}"


def _is_kopf_task(task: object) -> bool:
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    filename = getattr(getattr(coro, "cr_code", None), "co_filename", "")
    return f"{os.sep}kopf{os.sep}" in filename


class _NotKopfTasks(Collection["asyncio.Task[Any]"]):
    """kopf.operator() cancels, on exit, every task of the loop it did not see at start-up (our
    bindings, a test's tasks, another embedded operator's watchers). Passed as run_tasks'
    ``ignored``, this limits that to kopf's own tasks created from ``__init__`` on (call it just
    before spawning): the kopf tasks already running belong to someone else."""

    def __init__(self) -> None:
        self._others = frozenset(t for t in asyncio.all_tasks() if _is_kopf_task(t))

    def __contains__(self, task: object) -> bool:
        return not _is_kopf_task(task) or task in self._others

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _own_signals(stop: asyncio.Event) -> None:
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)


async def main(settings: Settings) -> None:
    logs.configure(settings.log_level, settings.log_format)
    kube, cfg = await connect(settings)
    stop = asyncio.Event()
    _own_signals(stop)
    op = Operator(settings, kube, cfg)
    try:
        await op.run(stop)
    finally:
        await kube.close()
    if op.lost_leadership:
        raise SystemExit("lost leadership: exiting so that no write can follow (restart to stand by again)")
