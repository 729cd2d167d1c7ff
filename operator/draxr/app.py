"""The operator process: supervised watches, the scheduling loop, the claim releaser, health."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from prometheus_client import start_http_server

from draxr import cluster_metrics, logs, metrics
from draxr.core import gc, mappings_crd
from draxr.core.mapping import ExtendedResourceMapping
from draxr.core.state import ClusterState
from draxr.events import Recorder
from draxr.handlers import targets
from draxr.health import Health, supervise
from draxr.heap import ProcessHeap
from draxr.kube import Kube
from draxr.leader import LeaderElector, default_identity
from draxr.loops import GuardedLoop
from draxr.mapping_status import MappingStatusWriter
from draxr.migrator import Migrator
from draxr.scheduler import Scheduler
from draxr.settings import Settings
from draxr.takeover import catch_up
from draxr.watch import Informer, Phase
from draxr.webhook import WebhookServer
from draxr.webhook_proc import WebhookProcess
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


class Operator:  # implements handlers.Sink
    def __init__(
        self, settings: Settings, kube: Kube, cfg: client.Configuration, heap: ProcessHeap | None = None
    ) -> None:
        self.settings = settings
        self.heap = heap  # the process's collector settings (draxr run), not an embedding process's
        self.kube = kube
        self.cfg = cfg
        self.state = ClusterState()
        self.state.profile = settings.profile
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
        self.migrator = Migrator(kube, self.state, self.recorder, features=self.scheduler.features)
        self.mapping_status.unmatched = self.migrator.unmatched
        self.migrator.on_unmatched_change = self.mapping_status.nudge
        self.lost_leadership = False
        self._release_wake = asyncio.Event()
        self.release_plan = gc.ReleasePlan(settings.release_policy)
        self.leading = False
        self._elector: LeaderElector | None = None
        self._started = time.monotonic()  # (reset as the informers start)
        metrics.LEADER.labels(name=settings.leader_election_lease_name or settings.scheduler_name).set_function(
            lambda: 1.0 if self.leading else 0.0
        )
        # Watches hold their connections for minutes: their own client, so that they never take
        # the slots of the binding writes.
        self.watch_kube = Kube(client.ApiClient(cfg))
        self.lease_kube = Kube(client.ApiClient(cfg))
        self.informers = [
            Informer(
                t,
                self.watch_kube,
                timeout_seconds=settings.watch_timeout_seconds,
                idle_seconds=settings.watch_idle_seconds,
                streaming_list=settings.watch_streaming_list,
            )
            for t in targets(self)
        ]
        records = next(i for i in self.informers if i.name == "devicepluginrecords")
        self.migrator.records_served = lambda: records.phase != Phase.ABSENT
        self.health = Health(
            self.informers,
            watch_deadline=settings.watch_deadline_seconds,
            scheduling_stall=settings.scheduling_stall_seconds,
            scheduler_stalled_for=lambda: self.scheduler.stalled_for() if self.leading else 0.0,
        )
        self.certs = CertKeeper(kube, settings) if settings.webhook_port else None
        self.webhook = (
            webhook_server(self.certs, settings, lambda: self.state.mapping if self.synced.is_set() else None)
            if self.certs is not None
            else None
        )
        if self.webhook is not None:
            self.health.checks.append(self.webhook.problems)
            self.health.readiness.append(self.webhook_not_serving)

    def webhook_not_serving(self) -> list[str]:
        if self.certs is not None and not self.certs.loaded.is_set():
            return ["webhook: no serving certificate loaded yet"]
        if self.webhook is not None and not self.webhook.alive():
            return ["webhook: server not serving"]
        return []

    # ---- Sink: called by the watches -----------------------------------------------------------
    def pod_upserted(self, pod: dict[str, Any]) -> None:
        old = self.state.pods.get(pod["metadata"]["uid"])
        info = self.state.upsert_pod(pod)
        self.scheduler.pod_changed(info, old)
        if info.terminal and info.uid in self.state.special_claims:
            self._release_wake.set()
        if info.terminal and info.uid in self.state.adoption.adopted and self.leading:
            self.migrator.pod_ended(info.uid)  # its adoption claim goes at once
        if info.node_name and self.state.identities():  # (a device-plugin pod placed: a fence to write)
            self.migrator.nudge()
        self.scheduler.cluster_changed()

    def pod_deleted(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        self.state.remove_pod(uid)
        if uid in self.state.adoption.adopted and self.leading:
            self.migrator.pod_ended(uid)
        self.scheduler.pod_deleted(uid)
        if uid in self.state.special_claims:
            self._release_wake.set()
        self.scheduler.cluster_changed()

    def claim_upserted(self, claim: dict[str, Any]) -> None:
        key = f"{claim['metadata'].get('namespace', '')}/{claim['metadata']['name']}"
        before = self.state.claims.get(key) if self.scheduler.named(key) else None
        if self.state.upsert_claim(claim) and self.scheduler.named(key):
            self.scheduler.claim_changed(key, before.object() if before is not None else None, claim)
        self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    def claim_deleted(self, claim: dict[str, Any]) -> None:
        self.state.remove_claim(claim["metadata"]["namespace"], claim["metadata"]["name"])
        key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        if self.scheduler.named(key):
            self.scheduler.claim_changed(key, claim, None)
        self.scheduler.cluster_changed()
        self.mapping_status.nudge()

    def cluster_changed(self) -> None:
        self.scheduler.cluster_changed()
        if self.state.identities():  # (a node moving off a device plugin: its fence may change)
            self.migrator.nudge()
        self.mapping_status.nudge()
        self._mapping_maybe_changed()

    def _mapping_maybe_changed(self) -> None:
        """DeviceClasses, mapping CRs and the initial sync change what the webhook steers."""
        if self.webhook is not None:
            self.webhook.mapping_changed()

    def record_upserted(self, obj: dict[str, Any]) -> None:
        found = self.state.adoption.upsert_record(obj)
        if isinstance(found, str):
            log.warning("device-plugin record not readable", node=obj["metadata"]["name"], reason=found)
        self.migrator.nudge()

    def record_deleted(self, obj: dict[str, Any]) -> None:
        self.state.adoption.remove_record(obj["metadata"]["name"])
        self.migrator.nudge()

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
        if overrides != self.state.extended.overrides:
            self.state.extended.set_overrides(overrides)
            self.scheduler.cluster_changed()
            self._mapping_maybe_changed()
        self.mapping_status.nudge()

    def cluster_snapshot(self) -> cluster_metrics.Steps:
        """For the scrape-time metrics (metrics.CLUSTER), run on this operator's event loop."""
        pending = (self.state.pods.get(uid) for uid in self.scheduler.queue.uids())
        return cluster_metrics.steps(
            self.state,
            (p for p in pending if p is not None),
            gc.own_schedulers(self.settings.scheduler_name, self.settings.adopt_unschedulable),
            features=self.scheduler.features,
        )

    # ---- start-up ---------------------------------------------------------------------------------
    async def initial_sync(self) -> None:
        """Every watch has listed its kind once: decisions (and orphan detection) start from a full
        view; the watches keep it current afterwards."""
        t0 = time.monotonic()
        if self.heap is not None:
            self.heap.sync_started()
        await asyncio.gather(*(inf.synced.wait() for inf in self.informers))
        if self.heap is not None:
            self.heap.sync_done()
        log.info(
            "initial sync done",
            seconds=round(time.monotonic() - t0, 2),
            nodes=len(self.state.nodes),
            slices=len(self.state.inventory.all_slices),
            classes=len(self.state.classes),
            claims=len(self.state.claims),
            pods=len(self.state.pods),
            mappings=len(self.mapping_objects),
        )
        self.synced.set()
        self._mapping_maybe_changed()

    async def roll_back_stale_claims(self) -> int:
        names = gc.own_schedulers(self.settings.scheduler_name, self.settings.adopt_unschedulable)
        actions = gc.claims_to_roll_back(self.state, names, self.scheduler.queue.in_flight())
        return await self.releaser.run_all(actions, "rollback")

    async def release_loop(self) -> None:
        async def step() -> None:
            self._release_wake.clear()
            await self.releaser.run_all(self.release_plan.due(self.state, time.monotonic()), "release")
            await self.roll_back_stale_claims()

        async def pause() -> None:
            # (sooner when a foreign claim's grace ends: kube-controller-manager had its chance)
            wait = self.release_plan.wait_seconds(time.monotonic(), self.settings.release_sweep_seconds)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # (not wait_for: see SchedulingQueue.pop)
                    await self._release_wake.wait()

        await pause()
        await GuardedLoop("claim-release").run(step, pause)

    # ---- run ----------------------------------------------------------------------------------------
    async def lead(self) -> None:
        """What only the leader does: roll back what a crashed leader left, schedule, release, and
        write the mapping CRs' status."""
        self.leading = True
        try:
            # What a previous leader wrote, before any rollback or decision (adopted pods: all of them).
            await catch_up(
                self.kube,
                self.informers,
                None if self.settings.adopt_unschedulable else self.settings.scheduler_name,
                quiet_since=self.quiet_since(),
            )
            await self.roll_back_stale_claims()
            self.scheduler.rebuild_holds()
            log.info("leading: scheduling and releasing claims", scheduler_name=self.settings.scheduler_name)
            duties = [self.scheduler.run(), self.release_loop(), self.mapping_status.run(), self.migrator.run()]
            if self.certs is not None and self.settings.webhook_self_signed:
                duties.append(self.certs.ensure_loop())
            await asyncio.gather(*duties)
        finally:
            self.leading = False
            self.scheduler.cancel_writes()  # a replica that stops leading must stop writing
            self.migrator.cancel()

    def quiet_since(self) -> float | None:
        """Since when no other leader can have written (takeover.catch_up): without leader election
        there is no other by contract (one replica; a predecessor ended before this process
        started its watches); with it, what the elector knows of the lease it took over."""
        if self._elector is None:
            return self._started
        return self._elector.quiet_since()

    async def _lease_client(self) -> Kube:
        """The renewal thread's client, made on its own loop (connections belong to a loop)."""
        return Kube(client.ApiClient(self.cfg))

    def elector(self) -> LeaderElector | None:
        s = self.settings
        if not s.leader_elect:
            return None
        return LeaderElector(
            # Its own connections, as kube-scheduler's leader-election client: a renewal must never
            # queue behind a burst of binding writes (and lose the lease for it).
            self.lease_kube,
            s.leader_election_namespace,
            s.leader_election_lease_name or s.scheduler_name,
            default_identity(),
            s.lease_duration_seconds,
            s.renew_deadline_seconds,
            s.retry_period_seconds,
            renewer=self._lease_client,
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
        ends the process's leadership for good (the caller exits), as kube-scheduler does. Any
        watch or task that ends, and liveness failing for longer than its grace, ends the process."""
        await self.check_adoption()
        s = self.settings
        tasks: dict[str, asyncio.Task[None]] = {}

        def spawn(name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
            tasks[name] = asyncio.create_task(coro, name=name)
            return tasks[name]

        elector = self._elector = self.elector()
        if elector is not None:  # the leader's duties write only while the lease is held and fresh
            self.kube.fence = elector.fence
            await elector.observe()  # (before the informers list: see takeover)
        self._started = time.monotonic()
        for inf in self.informers:
            spawn(f"watch-{inf.name}", inf.run())
        spawn("event-loop-lag", self.health.measure_lag())
        if s.health_port:
            spawn("health-server", self.health.serve(s.bind_address, s.health_port))
        self.health.tasks = tasks  # (the webhook joins them once it starts)
        supervisor = asyncio.create_task(supervise(self.health, s.liveness_exit_seconds), name="supervisor")
        stopper = asyncio.create_task(stop.wait(), name="stop")
        leading: asyncio.Task[None] | None = None
        syncing = asyncio.create_task(self.initial_sync(), name="initial-sync")
        try:
            await asyncio.wait([syncing, supervisor, stopper], return_when=asyncio.FIRST_COMPLETED)
            if not syncing.done():
                syncing.cancel()
                if supervisor.done():
                    supervisor.result()  # raises why
                return
            metrics.CLUSTER.attach(self.cluster_snapshot, asyncio.get_running_loop())
            if s.metrics_port:
                start_http_server(s.metrics_port, addr=s.bind_address)
            leading = asyncio.create_task(elector.run(self.lead) if elector else self.lead(), name="leadership")
            if self.webhook is not None:
                spawn("webhook", self.webhook.serve())
            log.info("draxr running", scheduler_name=s.scheduler_name, leader_election=elector is not None)
            done, _ = await asyncio.wait([stopper, supervisor, leading], return_when=asyncio.FIRST_COMPLETED)
            if leading in done and not stop.is_set():
                error = None if leading.cancelled() else leading.exception()
                if error is not None:  # a duty failed for good (LoopFailed) or crashed: not a lost lease
                    log.error("leading failed", error=repr(error))
                    raise error
                self.lost_leadership = True
            if supervisor in done:
                supervisor.result()  # raises Unhealthy with the reason
        finally:
            metrics.CLUSTER.detach(self.cluster_snapshot)
            stop.set()
            running = [stopper, supervisor, syncing, *tasks.values(), *([leading] if leading else [])]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await self.scheduler.drain()
            if elector is not None and not self.lost_leadership:
                await elector.release()
            await self.watch_kube.close()
            await self.lease_kube.close()


def webhook_server(
    certs: CertKeeper, settings: Settings, mapping: Callable[[], ExtendedResourceMapping | None]
) -> WebhookServer | WebhookProcess:
    """The admission webhook's server: a thread of this process (default) or a process of its own."""
    return (WebhookProcess if settings.webhook_process else WebhookServer)(certs, settings, mapping)


class AdoptionRefused(SystemExit):
    """A start-up refusal with a message for the admin (the process exits non-zero)."""


def adoption_refused(version: dict[str, Any]) -> str | None:
    """The server's minor version if adoption must be refused there (1.36+), else None."""
    digits = "".join(ch for ch in str(version.get("minor", "")) if ch.isdigit())
    major = str(version.get("major", "1"))
    if major == "1" and digits and int(digits) < 36:
        return None
    return f"{major}.{digits or '?'}"


def _own_signals(stop: asyncio.Event) -> None:
    if threading.current_thread() is threading.main_thread():
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)


async def main(settings: Settings) -> None:
    logs.configure(settings.log_level, settings.log_format)
    loaded = settings.loaded_config
    if loaded is not None:
        log.info(
            "configuration",
            file=settings.config,
            profile=loaded.profile.scheduler_name,
            scoring=str(loaded.profile.fit.type),
        )
        for note in loaded.not_applied:
            log.warning("configuration field not applied", file=settings.config, field=note)
    kube, cfg = await connect(settings)
    stop = asyncio.Event()
    _own_signals(stop)
    op = Operator(settings, kube, cfg, heap=ProcessHeap())
    try:
        await op.run(stop)
    finally:
        await kube.close()
    if op.lost_leadership:
        raise SystemExit("lost leadership: exiting so that no write can follow (restart to stand by again)")
