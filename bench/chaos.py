"""The chaos run: two draxr replicas under faults, checked by an independent observer.

    nice -n 5 .venv/bin/python bench/chaos.py --seed 1 --out bench/results/chaos.json   # full, ~14 min
    .venv/bin/python bench/chaos.py --ci                                                # CI size, ~4 min

One fresh control plane (etcd, kube-apiserver, kube-controller-manager, kwok; no kube-scheduler) in a
temp dir, draxr installed with ``kubectl apply -k manifests/`` (its Deployment scaled to 0: the
replicas run here instead), a fakedriver fleet of N kwok nodes × M fake GPUs (``example.com/gpu``)
plus two probe nodes of their own class (``example.com/probe``, used by the probes only). Two
``draxr run`` replicas run as the Deployment's pods would: in-cluster configuration with the
manifests' ServiceAccount token, leader election on (short lease), one listing through the watch
(``sendInitialEvents``) and one in pages, and they reach the API server
ONLY through the fault proxy (tests/faultproxy.py, in a child process; KUBERNETES_SERVICE_HOST/PORT
name it, its certificate is signed by the control plane's CA). A replica that exits is started
again by the harness after a second (as the kubelet would), and the reason is counted.

Workload (straight to the API server): Jobs whose pods ask for 1, 2 or 4 devices and complete after
``draxr.io/run-for`` (kwok; TTL-after-finished deletes them), Deployments whose pods stay and that
are scaled up and down at random, and one Deployment asking for more devices than a node has (it
never fits: its pods must carry a true FailedScheduling). A priority mix: PriorityClasses chaos-low
(0), chaos-never (1000, preemptionPolicy Never) and chaos-high (100000); a never-scaled low
Deployment of 1-device pods (``fill_share`` of the devices) keeps the devices nearly taken, the
scaled Deployments alternate low and never, a share of the Jobs is never, and a stream of high
Jobs mostly fits only by evicting. So that the preemption checks never go vacuous by chance, a wave
(``wave``: so many pods) of high pods that each take a whole node comes at once at the start of the
first quiet window (``quiet_after``; none without one): with the devices nearly taken, most of them
fit only by evicting. (Amid an errors-500 fault, the wave's evictions failed by the dozen: a fault
is for the random stream to meet, the wave is for the floors.)

Faults, one at a time, in a seeded random order (each kind once per round), with random gaps, now
and then a long quiet one: SIGKILL of the leader; SIGSTOP of the leader for longer than the lease,
then SIGCONT (it must find its lease lost and exit); SIGKILL of kube-apiserver and a restart on the
same port; and through the proxy: drop every connection and refuse new ones for a few seconds,
stall every response, add latency, cut the watches mid-event, answer 410 Gone to lists and
watches, 429 with Retry-After, 500, 503 with Retry-After. After each fault a probe pod is created
and must be bound within the grace (30 s).

The observer is independent of draxr's code: its own aiohttp client with the admin certificate,
straight to kube-apiserver (never through the proxy), polling every ``--poll`` seconds the
ResourceClaims, then the pods (and FailedScheduling Events, nodes and slices less often). It
checks continuously (time limits count from the end of the last fault, and not while one is on):

* no device (driver, pool, device) is in two allocated claims at once: at each poll, and at each
  claim event (its own list+watch of the claims, events in the API server's order, so that a
  victim's device given to its preemptor between two polls is judged too);
* no special claim is left more than the grace after its pod is terminal or gone;
* no pod is bound twice (nodeName or its claim changing once bound);
* a bound pod's claim holds exactly the devices it asked for, on its own node, reserved for it;
  and at every later poll, while the pod runs (not ended, not being deleted), that claim is still
  there, allocated with the same devices and reserved for it (a claim released under a running pod);
* a pending pod that fits (its own model: free devices per node = devices - allocated, handed to the
  pending pods oldest first, best fit) is bound within the grace; a pending pod that fits nowhere
  carries PodScheduled=False/Unschedulable and a FailedScheduling Event from draxr whose messages
  are true as a whole: every node counted once, each with a true lack of the devices it asked for
  ("cannot allocate all claims: C device(s) of class K requested, only F free ...", F < C), a
  preemption part that counts every node too (exactly "N No preemption victims found" for a pod
  asking for more than any node has, of the lowest priority; "not eligible" for Never);
* a pending pod that may preempt (priority above the lowest, not Never) and fits by evicting (on
  some node: free devices + those of claims whose users are of lower priority, or ended or gone;
  handed out in the queue's order, priority then age, a nominated pod on its node first) is bound
  within the grace;
* a pod seen preempted (DisruptionTarget/PreemptionByScheduler, or draxr's Preempted Event) is of
  lower priority than its preemptor (when the Event names one it saw) and than some pod seen
  nominated to or bound on its node from a minute before on;
* a preemptor evicts on one node only: the Preempted Events ("Preempted by pod <uid> on node
  <node>") that name it name one node. Exempt: a move to another node after the earlier one was
  seen unusable (gone from the node list, ``spec.unschedulable``, or a NoSchedule/NoExecute taint)
  at a node inventory (every 20 s) whose previous one saw it usable before the first eviction on
  the later node: kube-scheduler too preempts again elsewhere once its nomination is lost that way.
  (The preemptor's nominatedNodeName changing is not required: a nomination shorter than a poll is
  missed.) Exempt too: a move after its binding to the earlier node, or one of its evictions there,
  failed (a replica's "binding failed, pod requeued" or "victim not preempted" line naming that
  node, between the first evictions on the two nodes): kube-scheduler's handleBindingCycleError
  clears the nomination (clearNominatedNode), and a failed eviction ends that preemption
  (prepareCandidateAsync), so its next attempt chooses among every node again. The chaos run
  deletes and cordons no node: a preemptor on two nodes with no such failure is a violation;
* no preemptor has more victims on a node than its dry runs there named: the distinct pods whose
  Preempted Events name it and that node are at most the sum, over its nominations of that node, of
  N in draxr's "preemption: found a potential placement for pod on node <node>, preempting N
  victims" (the FailedScheduling Events' messages, a repeated one counted by its series, and the
  PodScheduled condition's, one per lastTransitionTime; per message the larger of the two counts).
  Those reports are written after the evictions began and may be lost to a fault (or a SIGKILL):
  the replicas' own "preempting" log lines (written before the evictions, in the run directory)
  count too, the larger sum of the two is the bound. Judged at the end, after a last look at the
  Events;
* the probe after each fault is bound within the grace;
* a SIGSTOPped leader stays stopped until the Lease is seen held by another replica (no sleep: if
  nobody takes it within the lease + 10 s, that is a violation), and exits after SIGCONT;
* no split brain: from kube-apiserver's audit log (each replica has a token of its own; the event's
  credential ID names it), no write of a replica received after another's Lease write completed
  (and before its own next one);
* every replica exit is explained by a fault (on, or ended at most 15 s before; SIGKILL only by the
  leader-sigkill that targeted it; else "lost leadership"; one exit per replica per fault);
* the observer's own polls (straight to kube-apiserver) fail only while kube-apiserver is down.

The time limits can run out only when no fault is on and the last ended more than the grace ago:
the observer counts the polls at which they could, per phase (faults, settle), and the CI size has a
quiet window longer than the grace amid the faults (``quiet_after``) and a settle phase longer than
the grace.

The audit log holds every request of draxr's: the run also compares them with what the RBAC of
manifests/ grants its ServiceAccount (``judge_rbac``: the grants no request used, less those the
run cannot reach, draxr_dev/rbac_audit.py; the requests no grant allows), reported in the table
and asserted by tests/integration/test_chaos.py.

It prints a table (pods, preemptions, faults with their worst recovery, violations, replica restarts), saves the
JSON (``--out``) and exits 1 if any invariant was violated. Everything listens on 127.0.0.1; every
loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import bisect
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

REPO = Path(__file__).resolve().parents[1]

from draxr.kube import Kube  # noqa: E402  (set-up only: the fleet; the observer has its own client)
from draxr_dev import helmchart, rbac_audit  # noqa: E402
from draxr_dev.devcluster import fakedriver  # noqa: E402
from draxr_dev.devcluster.binaries import ensure_binaries  # noqa: E402
from draxr_dev.devcluster.controlplane import LOOPBACK, RUN_FOR_ANNOTATION, ControlPlane, Options, free_port  # noqa: E402
from draxr_dev.devcluster.pki import issue_serving_cert  # noqa: E402

JSON = dict[str, Any]
NS = "chaos"
DRAXR_NS, DRAXR_SA, SCHEDULER = "draxr-system", "draxr", "draxr"
GPU, PROBE = "example.com/gpu", "example.com/probe"
DRIVERS = {GPU: "gpu.example.com", PROBE: "probe.example.com"}
SPECIAL_CLAIM = "resource.kubernetes.io/extended-resource-claim"
LEASE = ("--lease-duration-seconds", "6", "--renew-deadline-seconds", "4", "--retry-period-seconds", "1")
LEASE_SECONDS = 6.0
SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 5
profiles:
- schedulerName: {scheduler}
"""
# --scoring binpack (the default): GPUs packed, as GPU clusters configure it; --scoring default:
# kube-scheduler's default profile (LeastAllocated over cpu and memory: GPUs spread).
BINPACK_CONFIG = """  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources:
        - {name: cpu, weight: 1}
        - {name: memory, weight: 1}
        - {name: example.com/gpu, weight: 1}
"""
SCORING = {"binpack": BINPACK_CONFIG, "default": ""}
RENEW_DEADLINE_SECONDS = 4.0  # (LEASE's --renew-deadline-seconds)
FROZEN_WRITE_SECONDS = (
    2.0  # a request frozen by SIGSTOP after draxr's fence reaches the API server this soon after SIGCONT
)
TAKEOVER_SECONDS = 10.0  # a stopped leader's lease must be taken over within the lease + this (seen: 6-7 s)
EXIT_WINDOW = 15.0  # a replica's exit is explained by a fault on at the time or ended this long before
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
DRAXR_USER = f"system:serviceaccount:{DRAXR_NS}:{DRAXR_SA}"
# Every request of draxr's, logged with the request's credential (which replica): its writes, and its
# lease's, for the split-brain judge; all of them for the comparison with its RBAC (judge_rbac).
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["ResponseStarted"],
    "rules": [{"level": "Metadata", "users": [DRAXR_USER]}, {"level": "None"}],
}
KINDS = (
    "leader-sigkill",
    "leader-sigstop",
    "apiserver-kill",
    "drop-all",
    "stall",
    "latency",
    "cut-watches",
    "gone",
    "throttle",
    "errors-500",
    "errors-503",
)
# PriorityClasses: name -> (value, preemptionPolicy). Low fills the devices, never (mid) is scheduled
# before low but may not preempt, high preempts both.
LOW, NEVER, HIGH = "chaos-low", "chaos-never", "chaos-high"
PRIORITY_CLASSES = {LOW: (0, "PreemptLowerPriority"), NEVER: (1000, "Never"), HIGH: (100000, "PreemptLowerPriority")}
LOWEST_PRIORITY = 0  # no pod of the run has less: a pod of this priority has no one to evict
PREEMPTED_BY = re.compile(r"^Preempted by pod (\S+) on node (\S+)$")  # the Preempted Event's note
# The end of draxr's FailedScheduling message (and PodScheduled condition) for a preemption that
# chose a node (core/preemption.py: ``found_one`` and the message after it).
DRY_RUN = re.compile(r"preemption: found a potential placement for pod on node (\S+), preempting (\d+) victims$")
INVARIANTS = {
    "double_allocation": "no device in two allocated claims (every poll, every claim event)",
    "stale_claim": "no special claim left > grace after its pod ended or went",
    "rebound": "no pod bound twice",
    "wrong_placement": "bound pod's claim: its node, its count, reserved for it",
    "fitting_unbound": "pending pod that fits bound within grace",
    "untrue_reason": "pending pod that fits nowhere has a true FailedScheduling",
    "preemptor_unbound": "pending pod that fits by evicting lower priority bound within grace",
    "victim_priority": "preemption victim below a pod nominated to or bound on its node",
    "preemptor_several_nodes": "a preemptor's victims on one node (unless its node, binding or eviction there failed)",
    "victims_beyond_dry_run": "a preemptor's victims on a node no more than its dry runs there named",
    "claim_lost": "bound pod still running: its claim allocated (same devices) and reserved for it, every poll",
    "probe": "probe bound within grace after each fault",
    "stopped_leader": "SIGSTOPped leader: its lease taken over, it exits after SIGCONT",
    "split_brain": "no write by a replica after another took the lease (audit log)",
    "replica_exit": "every replica exit explained by a fault (its kind, its time, one per replica)",
    "poll_failed": "observer's polls fail only while kube-apiserver is down",
}
FIT_ERROR = re.compile(r"^0/(\d+) nodes are available: (.+)\.$")
NEVER_MSG = "not eligible due to preemptionPolicy=Never."
NO_ROOM = "cannot allocate all claims"  # DynamicResources' reason: the allocator found no devices
NO_ROOM_DETAIL = re.compile(
    r"^cannot allocate all claims: (\d+) device\(s\) of class (\S+) requested, "
    r"only (\d+) free and matching on this node$"
)
PREEMPTION_REASONS = {
    "No preemption victims found for incoming pod",
    "Preemption is not helpful for scheduling",
    NO_ROOM,
}


def fit_error_parts(message: str) -> tuple[int, Counter[str], str | None] | None:
    """kube-scheduler's FitError message: (N, reason -> nodes, the preemption part), None when it has
    not that shape."""
    message, _, preemption = message.partition(" preemption: ")
    m = FIT_ERROR.match(message)
    if m is None:
        return None
    reasons: Counter[str] = Counter()
    for part in re.split(r", (?=\d+ )", m.group(2)):
        count, _, reason = part.partition(" ")
        if not count.isdigit():
            return None
        reasons[reason] += int(count)
    return int(m.group(1)), reasons, preemption or None


def nodes_message(n: int, reasons: Counter[str]) -> str:
    return f"0/{n} nodes are available: " + ", ".join(f"{c} {r}" for r, c in sorted(reasons.items())) + "."


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass
class Config:
    seed: int = 1
    nodes: int = 200
    devices: int = 4
    fault_seconds: float = 600.0  # faults are started for this long
    settle_seconds: float = 45.0  # then quiet (no faults, no new workload), the observer goes on
    grace: float = 30.0
    poll: float = 1.5
    job_rate: float = 1.1  # Jobs created per second
    job_max_parallelism: int = 3
    never_job_share: float = 0.25  # of those Jobs, the share of priority class chaos-never (the rest chaos-low)
    high_every: tuple[float, float] = (1.5, 4.0)  # a chaos-high Job every so many seconds
    high_max_parallelism: int = 3
    wave: int = 0  # high pods of a whole node each, at the start of the first quiet window
    fill_share: float = 0.5  # a chaos-low Deployment of 1-device pods asks for this share of the devices
    deployments: tuple[int, ...] = (1, 2, 1, 2)  # devices per pod of each scaled Deployment
    deployment_max: int = 40
    whole_max: int = 100  # the Deployment whose pods take a whole node (``devices`` each)
    scale_every: tuple[float, float] = (6.0, 15.0)
    gap: tuple[float, float] = (4.0, 10.0)
    long_gap: tuple[float, float] = (35.0, 45.0)
    long_gap_chance: float = 0.15
    quiet_after: tuple[int, ...] = ()  # a long gap after this many faults, whatever the chance
    fault_scale: float = 1.0  # multiplies the fault durations
    kinds: tuple[str, ...] = KINDS  # the faults to inject (each once per round, in random order)
    min_rounds: int = 1  # go on past fault_seconds (by at most 90 s) until every kind had its turn this often
    scoring: str = "binpack"  # a key of SCORING
    keep: bool = False
    out: str | None = None

    @classmethod
    def ci(cls, seed: int = 1) -> Config:
        return cls(
            seed=seed,
            nodes=16,
            devices=4,
            fault_seconds=165.0,  # (and the quiet window: about 3 minutes in all)
            poll=1.0,
            job_rate=0.25,
            job_max_parallelism=2,
            high_every=(6.0, 12.0),
            high_max_parallelism=2,
            # The random high Jobs made 5 preemptors at seed 135904 (12-17 at others): the wave of
            # half the nodes' worth of whole-node pods adds about as many again at every seed.
            wave=8,
            fill_share=0.6,  # with the rest, more than the devices most of the time: high pods must evict
            deployments=(1, 2),
            deployment_max=6,
            whole_max=6,
            scale_every=(8.0, 16.0),
            gap=(3.0, 6.0),
            # One quiet window longer than the grace amid the faults (the time limits run out while
            # the workload goes on), and the settle phase as long as the grace and 12 s more.
            long_gap=(38.0, 40.0),
            long_gap_chance=0.0,
            quiet_after=(5,),
            settle_seconds=42.0,
            fault_scale=0.7,
        )


# ---- the harness's own API client (observer, workload, faults): straight to kube-apiserver --------------


class Api:
    """aiohttp with the admin client certificate. No draxr code: the observer must not share its bugs."""

    def __init__(self, cp: ControlPlane) -> None:
        ctx = ssl.create_default_context(cafile=str(cp.pki.ca_crt))
        ctx.load_cert_chain(str(cp.pki.client_crt("admin")), str(cp.pki.client_key("admin")))
        self.base = cp.api_url
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=16),
            timeout=aiohttp.ClientTimeout(total=30, sock_connect=5),
            headers={"User-Agent": "draxr-chaos"},
            trust_env=False,
        )
        self.errors = 0

    async def close(self) -> None:
        await self.session.close()

    async def call(
        self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None, ctype: str | None = None
    ) -> tuple[int, JSON]:
        """(status, body); status 0 when the API server did not answer."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", "Content-Type": ctype or "application/json"}
        try:
            async with self.session.request(method, self.base + path, data=data, params=query, headers=headers) as r:
                raw = await r.read()
                try:
                    obj = json.loads(raw) if raw else {}
                except ValueError:
                    obj = {"raw": raw[:300].decode(errors="replace")}
                return r.status, obj
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            self.errors += 1
            return 0, {"error": repr(e)}

    async def list(self, path: str, query: dict[str, str] | None = None) -> list[JSON] | None:
        """Every item (pages of 500 from one consistent snapshot), None if the server did not answer."""
        items: list[JSON] = []
        q = dict(query or {}, limit="500")
        for _ in range(1000):
            status, page = await self.call("GET", path, query=q)
            if status != 200:
                return None
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue")
            if not cont:
                return items
            q["continue"] = cont
        return None

    async def must(self, method: str, path: str, body: Any = None, ctype: str | None = None, ok: tuple[int, ...] = ()):
        """A write that has to happen (set-up, workload): retried while the API server is away."""
        for attempt in range(60):
            status, obj = await self.call(method, path, body, ctype=ctype)
            if 200 <= status < 300 or status in ok:
                return status, obj
            if status in (0, 429, 500, 503, 504) or "serviceaccount" in json.dumps(obj).lower():
                await asyncio.sleep(min(0.25 * (attempt + 1), 2.0))
                continue
            raise RuntimeError(f"{method} {path}: {status} {json.dumps(obj)[:400]}")
        raise RuntimeError(f"{method} {path}: the API server did not answer")


# ---- the fault proxy, in a child process (its own GIL: it forwards all of draxr's traffic) ---------------


def proxy_child(upstream: str, ca: str, cert: str, key: str, seed: int) -> int:
    """``chaos.py _proxy ...``: runs tests/faultproxy.FaultProxy and executes JSON commands from stdin."""
    sys.path.insert(0, str(REPO))
    from tests.faultproxy import FaultProxy, lists, watches, writes

    matches: dict[str | None, Any] = {None: None, "watches": watches, "lists": lists, "writes": writes}
    proxy = FaultProxy(upstream, Path(ca), Path(cert), Path(key), seed=seed).start()
    print(json.dumps({"port": proxy.port}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            name = cmd.pop("cmd")
            try:
                result: Any = None
                if name == "counts":
                    result = dict(proxy.counts)
                elif name == "clear":
                    proxy.clear()
                elif name in ("drop_all", "stall", "latency", "cut_watches", "gone", "throttle", "errors"):
                    getattr(proxy, name)(match=matches[cmd.pop("match", None)], **cmd)
                else:
                    raise ValueError(f"unknown command {name!r}")
                print(json.dumps({"ok": True, "result": result}), flush=True)
            except Exception as e:
                print(json.dumps({"ok": False, "error": repr(e)}), flush=True)
    finally:
        proxy.stop()
    return 0


class ProxyProcess:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self._lock = asyncio.Lock()

    async def start(self, cp: ControlPlane, run_dir: Path, seed: int) -> None:
        certs = run_dir / "faultproxy-pki"
        certs.mkdir()
        cert, key = issue_serving_cert(cp.pki, certs, "faultproxy", "draxr-faultproxy")
        with (run_dir / "faultproxy.log").open("ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, __file__, "_proxy", cp.api_url, str(cp.pki.ca_crt), str(cert), str(key), str(seed),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
            )  # fmt: skip
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        self.port = int(json.loads(line)["port"])

    async def command(self, cmd: str, **params: Any) -> Any:
        assert self.proc is not None
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        async with self._lock:
            self.proc.stdin.write((json.dumps({"cmd": cmd, **params}) + "\n").encode())
            await self.proc.stdin.drain()
            answer = json.loads(await asyncio.wait_for(self.proc.stdout.readline(), 20))
        if not answer["ok"]:
            raise RuntimeError(f"faultproxy {cmd}: {answer['error']}")
        return answer["result"]

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


# ---- draxr replicas ----------------------------------------------------------------------------------------


class Replica:
    """One ``draxr run`` as a Deployment pod runs it (in-cluster config, the SA token), through the proxy."""

    def __init__(self, name: str, sa_dir: Path, proxy_port: int, run_dir: Path, scoring: str = "binpack") -> None:
        self.name, self.sa_dir, self.run_dir, self.scoring = name, sa_dir, run_dir, scoring
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAXR_", "KUBECONFIG"))}
        self.env.update(
            KUBERNETES_SERVICE_HOST=LOOPBACK,
            KUBERNETES_SERVICE_PORT=str(proxy_port),
            POD_NAME=name,
            POD_NAMESPACE=DRAXR_NS,
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kill_requested = False
        self.stopped = False  # SIGSTOPped right now

    @property
    def log_path(self) -> Path:
        return self.run_dir / f"{self.name}.{self.starts}.log"

    def argv(self) -> list[str]:
        return [
            sys.executable, "-m", "draxr", "run",
            "--serviceaccount-dir", str(self.sa_dir),
            "--scheduler-name", SCHEDULER,
            "--bind-address", LOOPBACK,
            "--metrics-port", str(free_port()),
            "--health-port", str(free_port()),
            "--webhook-port", str(free_port()),
            "--webhook-extra-hosts", LOOPBACK,
            *LEASE,
            # Short watch deadlines, so that a stuck replica is noticed (and restarted) quickly.
            "--watch-timeout-seconds", "60",
            "--watch-idle-seconds", "15",
            "--watch-deadline-seconds", "30",
            "--liveness-exit-seconds", "5",
            "--scheduling-stall-seconds", "20",
            # GPU clusters bin-pack: kube-scheduler's own way (NodeResourcesFit MostAllocated with
            # the GPUs weighted), with short backoffs (the file's, the flags' only way with it).
            "--config", str(self.scheduler_config()),
            "--unschedulable-flush-seconds", "10",
            "--release-sweep-seconds", "5",
            "--log-format", "json",
            # draxr-b lists in pages (as on a server without streaming lists, and after an expired
            # one), draxr-a through the watch: both ways under the faults, and every informer's
            # list in the audit log (judge_rbac).
            "--watch-streaming-list", str(self.name != "draxr-b").lower(),
        ]  # fmt: skip

    def scheduler_config(self) -> Path:
        path = self.log_path.parent / "scheduler-config.yaml"
        if not path.exists():
            path.write_text(SCHEDULER_CONFIG.format(scheduler=SCHEDULER) + SCORING[self.scoring])
        return path

    def start(self) -> None:
        self.starts += 1
        self.kill_requested = self.stopped = False
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv(), env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def identity(self) -> str | None:
        """The lease identity this process took (its log says so when it became leader)."""
        for line in reversed(self.text().splitlines()):
            if '"became leader"' in line:
                with contextlib.suppress(ValueError):
                    return str(json.loads(line).get("identity"))
        return None

    def synced(self) -> bool:
        return "initial sync done" in self.text()

    def exit_reason(self) -> str:
        rc = self.proc.returncode if self.proc is not None else None
        if self.kill_requested and rc == -signal.SIGKILL:
            return "SIGKILL (fault)"
        tail = "\n".join(self.text().splitlines()[-30:])
        if "lost leadership" in tail:
            return "lost leadership"
        if "liveness failed" in tail:
            m = re.search(r"liveness failed: (watch \w+|scheduling loop|task \S+)", tail)
            return f"liveness ({m.group(1)})" if m else "liveness"
        if "long-running task ended" in tail:
            return "task ended"
        if "leading failed" in tail:
            return "leading failed"
        return f"exit code {rc}"

    def signal(self, sig: int) -> None:
        if self.alive and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Replicas:
    """Keeps the replicas running: one that exits is started again after ``restart_delay``, the reason counted."""

    def __init__(self, replicas: list[Replica], restart_delay: float = 1.0, max_restarts: int = 400) -> None:
        self.replicas = replicas
        self.restart_delay = restart_delay
        self.max_restarts = max_restarts
        self.restarts: Counter[str] = Counter()
        self.exits: list[JSON] = []
        self.t0 = time.monotonic()

    async def watch(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for r in self.replicas:
                if r.proc is not None and not r.alive:
                    reason = r.exit_reason()
                    self.restarts[reason] += 1
                    self.exits.append(
                        {"replica": r.name, "at": round(time.monotonic() - self.t0, 1), "t": time.monotonic(),
                         "reason": reason, "code": r.proc.returncode, "log": r.log_path.name}
                    )  # fmt: skip
                    log(f"replica {r.name} exited ({reason}); restarting")
                    if sum(self.restarts.values()) > self.max_restarts:
                        raise RuntimeError(f"more than {self.max_restarts} replica restarts: {dict(self.restarts)}")
                    await asyncio.sleep(self.restart_delay)
                    r.start()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.3)

    def stop(self) -> None:
        for r in self.replicas:
            r.stop()


# ---- workload ----------------------------------------------------------------------------------------------


def pod_spec(resource: str, count: int, restart: str = "Never", priority_class: str | None = None) -> JSON:
    spec: JSON = {
        "schedulerName": SCHEDULER,
        "restartPolicy": restart,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "c", "image": "registry.invalid/chaos:1", "resources": {"limits": {resource: str(count)}}}
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def deployment(name: str, count: int, replicas: int, priority_class: str = LOW) -> JSON:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(GPU, count, "Always", priority_class)},
        },
    }


class Workload:
    def __init__(self, api: Api, cfg: Config, rng: random.Random) -> None:
        self.api, self.cfg, self.rng = api, cfg, rng
        self.jobs = 0
        self.high_jobs = 0
        self.job_pods = 0
        self.scalings = 0
        self.scaled: dict[str, int] = {}
        self.creating: set[asyncio.Task[Any]] = set()

    def deployments(self) -> dict[str, tuple[int, int, str]]:
        """The scaled Deployments: name -> (devices per pod, max replicas, priority class)."""
        out = {
            f"dep-{i}": (n, self.cfg.deployment_max, NEVER if i % 2 else LOW)
            for i, n in enumerate(self.cfg.deployments)
        }
        out["whole"] = (self.cfg.devices, self.cfg.whole_max, LOW)
        return out

    async def create_deployments(self) -> None:
        for name, (count, most, priority_class) in self.deployments().items():
            self.scaled[name] = most // 2
            await self.api.must(
                "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment(name, count, most // 2, priority_class)
            )
        # Never fits: more devices than a node has.
        too = deployment("too-large", self.cfg.devices + 1, 2)
        await self.api.must("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", too)
        # Low priority, never scaled: with the rest it keeps the devices nearly taken, so that the
        # high-priority Jobs mostly fit only by evicting (its pods come back, pending, when evicted).
        fill = round(self.cfg.fill_share * self.cfg.nodes * self.cfg.devices)
        if fill:
            await self.api.must("POST", f"/apis/apps/v1/namespaces/{NS}/deployments", deployment("fill", 1, fill))

    async def _create_job(
        self, name: str, parallelism: int, completions: int, count: int, run_for: str, priority_class: str
    ) -> None:
        self.job_pods += completions
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "parallelism": parallelism,
                "completions": completions,
                "backoffLimit": 2,
                "ttlSecondsAfterFinished": 10,
                "template": {
                    "metadata": {"labels": {"app": "job" if priority_class != HIGH else "high"},
                                 "annotations": {RUN_FOR_ANNOTATION: run_for}},
                    "spec": pod_spec(GPU, count, priority_class=priority_class),
                },
            },
        }  # fmt: skip
        task = asyncio.create_task(self.api.must("POST", f"/apis/batch/v1/namespaces/{NS}/jobs", body))
        self.creating.add(task)
        task.add_done_callback(self.creating.discard)

    async def jobs_loop(self, until: float) -> None:
        while time.monotonic() < until:
            await asyncio.sleep(min(self.rng.expovariate(self.cfg.job_rate), max(0.0, until - time.monotonic())))
            if time.monotonic() >= until:
                return
            parallelism = self.rng.randint(1, self.cfg.job_max_parallelism)
            completions = self.rng.randint(parallelism, 2 * parallelism + 1)
            count = self.rng.choices([1, 2, self.cfg.devices], weights=[5, 3, 1])[0]
            run_for = self.rng.choice(["3s", "5s", "8s", "12s"])
            priority_class = NEVER if self.rng.random() < self.cfg.never_job_share else LOW
            self.jobs += 1
            await self._create_job(f"job-{self.jobs:05d}", parallelism, completions, count, run_for, priority_class)
        await asyncio.gather(*list(self.creating))

    async def high_loop(self, until: float) -> None:
        """chaos-high Jobs, one pod per completion: with the devices nearly taken by lower
        priorities, most fit only by evicting."""
        while time.monotonic() < until:
            await asyncio.sleep(min(self.rng.uniform(*self.cfg.high_every), max(0.0, until - time.monotonic())))
            if time.monotonic() >= until:
                return
            parallelism = self.rng.randint(1, self.cfg.high_max_parallelism)
            count = self.rng.choices([1, 2, self.cfg.devices], weights=[1, 2, 2])[0]
            run_for = self.rng.choice(["5s", "8s", "10s"])
            self.high_jobs += 1
            await self._create_job(f"high-{self.high_jobs:05d}", parallelism, parallelism, count, run_for, HIGH)
        await asyncio.gather(*list(self.creating))

    async def wave_at(self, quiet: asyncio.Event, until: float) -> None:
        """The wave of whole-node high pods (Config.wave), once, when ``quiet`` is set (the first
        quiet window begins); it draws nothing from the seeded random numbers, so the faults and
        the rest of the workload replay as without it. None when no quiet window began by ``until``."""
        if not self.cfg.wave:
            return
        try:
            await asyncio.wait_for(quiet.wait(), timeout=max(0.0, until - time.monotonic()))
        except TimeoutError:
            return
        log(f"wave: {self.cfg.wave} high pods of {self.cfg.devices} devices each")
        await self._create_job("wave", self.cfg.wave, self.cfg.wave, self.cfg.devices, "8s", HIGH)
        await asyncio.gather(*list(self.creating))

    async def scale_loop(self, until: float) -> None:
        deps = self.deployments()
        while time.monotonic() < until:
            await asyncio.sleep(min(self.rng.uniform(*self.cfg.scale_every), max(0.0, until - time.monotonic())))
            if time.monotonic() >= until:
                return
            name = self.rng.choice(sorted(deps))
            replicas = self.rng.randint(0, deps[name][1])
            self.scaled[name] = replicas
            self.scalings += 1
            await self.api.must(
                "PATCH",
                f"/apis/apps/v1/namespaces/{NS}/deployments/{name}/scale",
                {"spec": {"replicas": replicas}},
                ctype="application/merge-patch+json",
            )


# ---- the observer -------------------------------------------------------------------------------------------


def requested(pod: JSON) -> tuple[str, int] | None:
    """(extended resource, count) the pod asks for (our pods ask for one kind in one container)."""
    for c in (pod.get("spec") or {}).get("containers") or ():
        limits = (c.get("resources") or {}).get("limits") or {}
        for name in (GPU, PROBE):
            if name in limits:
                return name, int(limits[name])
    return None


def special_owner(claim: JSON) -> str | None:
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(SPECIAL_CLAIM) != "true":
        return None
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == "Pod":
            return str(ref.get("uid"))
    return None


class Observer:
    """Polls the API server directly and counts invariant violations (see the module docstring)."""

    def __init__(self, api: Api, cfg: Config) -> None:
        self.api, self.cfg = api, cfg
        self.violations: Counter[str] = Counter({k: 0 for k in INVARIANTS})
        self.details: list[JSON] = []
        self._flagged: set[tuple[str, str]] = set()
        self.fault_active = False
        self.last_fault_end = 0.0
        self.t0 = time.monotonic()
        # the cluster's devices: (driver, node) -> device names; nodes
        self.devices: dict[tuple[str, str], set[str]] = {}
        self.node_count = 0
        # pod uid -> the messages of its FailedScheduling Events from draxr
        self.failed_events: dict[str, set[str]] = defaultdict(set)
        # what it saw
        self.created: dict[str, str] = {}  # uid -> role (job, deployment, probe)
        self.bound: dict[str, tuple[str, str]] = {}  # uid -> (node, claim) when first seen bound
        self.completed: set[str] = set()
        self.placement_checked: set[str] = set()
        # uid -> (claim uid, devices, poll) of a pod whose placement was found right at that poll
        self.holding: dict[str, tuple[str, frozenset[tuple[str, str, str]], int]] = {}
        self.held_checks = 0
        self.checks = 0  # snapshots checked
        self.claim_missing: Counter[str] = Counter()
        self.suspect: Counter[str] = Counter()
        self.fit_since: dict[str, float] = {}
        self.nofit_since: dict[str, float] = {}
        self.reason_ok: set[str] = set()
        self.stale_since: dict[str, float] = {}
        self.ended_claims_seen = 0  # claims seen after their pod ended (and then gone: released)
        self.polls = 0
        self.poll_failures = 0
        self.poll_failed_at: list[float] = []
        self.phase = "faults"
        self.armed: Counter[str] = Counter()  # checks at which the time limits could run out, per phase
        self.max_allocated = 0
        # preemption
        self.priority: dict[str, int] = {}  # uid -> spec.priority, as last seen
        self.node_of: dict[str, str] = {}  # uid -> the node it was seen bound to
        # node -> uid -> [priority, first seen there, last seen nominated there] of the pods seen
        # nominated to or bound on it
        self.on_node: dict[str, dict[str, list[float]]] = defaultdict(dict)
        self.victims: dict[str, JSON] = {}  # uid -> what is known of a preemption victim
        self.preemptors: set[str] = set()  # seen nominated, or named by a Preempted Event
        self.evict_since: dict[str, float] = {}
        self.evict_fit: set[str] = set()  # pods seen fitting only by evicting
        self.preemptor_waits: list[float] = []  # such a pod: from fitting to seen bound, s
        self.victims_checked = 0
        # Marked (DisruptionTarget) by a leader that lost its lease before the deletion, and never
        # deleted: not evicted (kube-controller-manager clears such a stale condition), not judged.
        self.marked_not_evicted = 0
        self.present: set[str] = set()  # the pods of the last poll
        self.deleting: set[str] = set()  # pods seen with a deletionTimestamp before they ended
        self.preempted_on: dict[str, set[str]] = defaultdict(set)  # preemptor -> nodes of its victims (Events)
        # (preemptor, node) -> victim uid -> when it was evicted (its Preempted Event's eventTime, as
        # monotonic time; else when first seen)
        self.evicted: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
        self.names: dict[str, str] = {}  # uid -> pod name (pods polled, Events' objects)
        # The dry runs that chose a node: FailedScheduling Event uid -> (preemptor, message, series
        # count); (preemptor, message) -> the lastTransitionTimes of PodScheduled conditions seen
        # with it; (preemptor, node) -> the victims named by the replicas' "preempting" log lines.
        self.dry_run_events: dict[str, tuple[str, str, int]] = {}
        self.dry_run_conditions: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.dry_run_logged: Counter[tuple[str, str]] = Counter()
        self.dry_run_log_lines = 0
        self.preemptions_judged = False
        # preemptor -> why its move was exempt (the earlier node lost, or its binding or an eviction there failed)
        self.moved_after_node_lost: dict[str, JSON] = {}
        # preemptor uid -> [(node, monotonic time, what)]: its binding there failed, or an eviction
        # there did (the replicas' "binding failed, pod requeued" and "victim not preempted" lines)
        self.attempt_failed: dict[str, list[tuple[str, float, str]]] = defaultdict(list)
        # node -> [(last inventory that saw it usable, first that saw it unusable)], monotonic
        self.usable_nodes: set[str] | None = None
        self.last_inventory = 0.0
        self.node_unusable: dict[str, list[tuple[float, float]]] = defaultdict(list)
        # the claim watch: claim uid -> devices, device -> claim uids, claim uid -> name
        self.claim_devices: dict[str, set[tuple[str, str, str]]] = {}
        self.device_claims: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self.claim_names: dict[str, str] = {}
        self.claim_events = 0
        self.claim_relists = 0

    # -- time limits -------------------------------------------------------------------------------------------
    def fault_started(self) -> None:
        self.fault_active = True

    def fault_ended(self, at: float) -> None:
        self.fault_active = False
        self.last_fault_end = at

    def overdue(self, since: float, now: float) -> bool:
        return not self.fault_active and now - max(since, self.last_fault_end) > self.cfg.grace

    def violate(self, kind: str, key: str, **detail: Any) -> None:
        if (kind, key) in self._flagged:
            return
        self._flagged.add((kind, key))
        self.violations[kind] += 1
        entry = {"invariant": kind, "at": round(time.monotonic() - self.t0, 1), "key": key, **detail}
        if len(self.details) < 300:
            self.details.append(entry)
        log(f"VIOLATION {kind}: {json.dumps(entry)[:600]}")

    # -- the loop ------------------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        watch = asyncio.create_task(self.watch_claims(stop), name="claim-watch")
        last_inventory = last_events = 0.0
        try:
            while not stop.is_set():
                t = time.monotonic()
                if watch.done():
                    watch.result()  # a bug in the watch ends the run
                if t - last_inventory > 20 and await self.inventory():
                    last_inventory = t
                if t - last_events > 4 and await self.events():
                    last_events = t
                await self.poll()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), max(0.05, self.cfg.poll - (time.monotonic() - t)))
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)

    # -- every claim event, in the API server's order --------------------------------------------------------
    async def watch_claims(self, stop: asyncio.Event) -> None:
        """A list, then a watch from its resourceVersion (again from the last one seen when it ends;
        a new list after an error or a 410). Between two polls a victim's claim can be deallocated
        and its device given to the preemptor: the events show whether the allocation came first."""
        path = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
        rv: str | None = None
        while not stop.is_set():
            if rv is None:
                rv = await self._relist_claims(path)
                if rv is None:
                    await asyncio.sleep(1.0)
                    continue
            rv = await self._watch_claims(path, rv, stop)

    async def _relist_claims(self, path: str) -> str | None:
        status, page = await self.api.call("GET", path)  # no limit: one snapshot and its resourceVersion
        if status != 200:
            return None
        self.claim_relists += 1
        self.claim_devices.clear()
        self.device_claims.clear()
        for c in page.get("items") or ():
            self.claim_event("ADDED", c)
        return str((page.get("metadata") or {}).get("resourceVersion") or "") or None

    async def _watch_claims(self, path: str, rv: str, stop: asyncio.Event) -> str | None:
        """Events until the watch ends: the resourceVersion to go on from, None to list again."""
        query = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "45"}
        try:
            async with self.api.session.get(
                self.api.base + path, params=query, timeout=aiohttp.ClientTimeout(total=None, sock_read=60)
            ) as r:
                if r.status != 200:
                    return None
                async for line in r.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        return None
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self.claim_event(kind, obj)
                    if stop.is_set():
                        break
                return rv
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            await asyncio.sleep(0.5)
            return None

    def claim_event(self, kind: str, claim: JSON) -> None:
        self.claim_events += 1
        uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
        self.claim_names[uid] = name
        old = self.claim_devices.pop(uid, set())
        new = set() if kind == "DELETED" else _allocated(claim)
        for d in old - new:
            self.device_claims[d].discard(uid)
        for d in new - old:
            others = self.device_claims[d] - {uid}
            if others:
                names = sorted({name, *(self.claim_names.get(o, o) for o in others)})
                self.violate(
                    "double_allocation", f"{d[0]}/{d[1]}/{d[2]}:{','.join(names)}", claims=names, seen=f"watch {kind}"
                )
            self.device_claims[d].add(uid)
        if new:
            self.claim_devices[uid] = new

    async def inventory(self) -> bool:
        slices = await self.api.list("/apis/resource.k8s.io/v1/resourceslices")
        nodes = await self.api.list("/api/v1/nodes")
        if slices is None or nodes is None:
            return False
        devices: dict[tuple[str, str], set[str]] = defaultdict(set)
        for s in slices:
            spec = s.get("spec") or {}
            devices[(spec.get("driver", ""), spec.get("nodeName", ""))] |= {
                d["name"] for d in spec.get("devices") or ()
            }
        self.devices = dict(devices)
        self.node_count = len(nodes)
        self.node_inventory(nodes, time.monotonic())
        return True

    def node_inventory(self, nodes: list[JSON], now: float) -> None:
        """Which nodes went unusable (gone, cordoned, tainted NoSchedule/NoExecute) since the last
        inventory: a preemptor may then preempt again elsewhere."""
        usable = {str(n["metadata"]["name"]) for n in nodes if _usable_node(n)}
        if self.usable_nodes is not None:
            for node in self.usable_nodes - usable:
                self.node_unusable[node].append((self.last_inventory, now))
        self.usable_nodes, self.last_inventory = usable, now

    async def events(self) -> bool:
        items = await self.api.list(f"/api/v1/namespaces/{NS}/events", {"fieldSelector": "reason=FailedScheduling"})
        if items is None:
            return False
        for e in items:
            who = e.get("reportingComponent") or (e.get("source") or {}).get("component")
            if who == SCHEDULER:
                pod = e.get("involvedObject") or {}
                uid, message = str(pod.get("uid")), str(e.get("message") or "")
                self.failed_events[uid].add(message)
                self.names.setdefault(uid, str(pod.get("name")))
                if DRY_RUN.search(message):
                    self.dry_run_events[str(e["metadata"].get("uid") or e["metadata"]["name"])] = (
                        uid, message, _event_count(e)
                    )  # fmt: skip
        items = await self.api.list(f"/api/v1/namespaces/{NS}/events", {"fieldSelector": "reason=Preempted"})
        if items is None:
            return False
        now = time.monotonic()
        for e in items:
            who = e.get("reportingComponent") or (e.get("source") or {}).get("component")
            m = PREEMPTED_BY.match(e.get("message") or "")
            if who != SCHEDULER or m is None:
                continue
            victim = e.get("involvedObject") or {}
            self.preemptors.add(m.group(1))
            self.victim(
                str(victim.get("uid")), str(victim.get("name")), now, node=m.group(2), preemptor=m.group(1),
                evicted=_event_time(e, now),
            )  # fmt: skip
        return True

    def victim(
        self, uid: str, name: str, now: float, node: str | None = None, preemptor: str | None = None,
        evicted: float | None = None,
    ) -> None:  # fmt: skip
        """A pod seen preempted (its DisruptionTarget condition, or draxr's Preempted Event, which
        names its preemptor and node; ``evicted``: the Event's time, default ``now``)."""
        v = self.victims.setdefault(uid, {"name": name, "at": now, "node": None, "preemptor": None, "judged": False})
        v["node"] = v["node"] or node or self.node_of.get(uid)
        v["preemptor"] = v["preemptor"] or preemptor
        self.names.setdefault(uid, name)
        if preemptor and node:
            self.preempted_on[preemptor].add(node)
            at = evicted if evicted is not None else now
            seen = self.evicted[(preemptor, node)]
            seen[uid] = min(seen.get(uid, at), at)

    def judge_victims(self, now: float, final: bool = False) -> None:
        """A victim must be of lower priority than its preemptor: the one its Event names, when
        the observer saw that pod; else some pod seen nominated to or bound on its node from a
        minute before it was seen preempted on (a nomination that lasts less than a poll is
        missed: hence the Event first). Judged once the grace has passed (at the end: all)."""
        for uid, v in self.victims.items():
            if v["judged"] or not (final or self.overdue(v["at"], now)):
                continue
            by = v["preemptor"]
            # Evicted: seen being deleted, or gone without having completed (a Job's pod that
            # completed on its own after its preemption was cut short was not evicted).
            evicted = uid in self.deleting or (uid not in self.present and uid not in self.completed)
            if by is None and not evicted:
                # Only its condition was written: not evicted (yet). Judged if it is later; at the
                # end, counted apart.
                if final:
                    v["judged"] = v["not_evicted"] = True
                    self.marked_not_evicted += 1
                continue
            v["judged"] = True
            mine = self.priority.get(uid)
            if mine is None or v["node"] is None:
                v["unknown"] = True  # gone before any poll saw it: nothing to compare
                continue
            self.victims_checked += 1
            if by is not None and by in self.priority:
                if self.priority[by] <= mine:
                    self.violate("victim_priority", uid, pod=v["name"], priority=mine, node=v["node"],
                                 why=f"its preemptor {by} has priority {self.priority[by]}")  # fmt: skip
                continue
            since = v["at"] - 60
            above = [
                o for o, (pr, first, nom) in self.on_node[v["node"]].items() if pr > mine and max(first, nom) >= since
            ]
            if not above:
                seen = {o: pr for o, (pr, _, _) in self.on_node[v["node"]].items()}
                self.violate("victim_priority", uid, pod=v["name"], priority=mine, node=v["node"],
                             why="no pod of higher priority nominated to or bound on its node", seen=seen)  # fmt: skip

    def dry_run_named(self, preemptor: str, node: str) -> tuple[int, int, list[str]]:
        """The victims the dry runs of ``preemptor`` that chose ``node`` named, summed over its
        nominations of it: (by the API's record, by the replicas' logs, the messages). Per message,
        its nominations are the larger of its Events' series counts summed and the PodScheduled
        conditions seen with it (one per lastTransitionTime): either record may miss one."""
        nominations: Counter[str] = Counter()
        for who, message, count in self.dry_run_events.values():
            if who == preemptor:
                nominations[message] += count
        for (who, message), times in self.dry_run_conditions.items():
            if who == preemptor:
                nominations[message] = max(nominations[message], len(times))
        named, messages = 0, []
        for message, n in sorted(nominations.items()):
            m = DRY_RUN.search(message)
            if m is not None and m.group(1) == node:
                named += int(m.group(2)) * n
                messages.append(f"{n}× {m.group(0)}")
        return named, self.dry_run_logged[(preemptor, node)], messages

    def judge_preemptions(self) -> None:
        """At the end (once): no preemptor has more victims on a node than its dry runs there
        named, and none has victims on two nodes unless the earlier one was seen unusable (gone,
        cordoned, tainted) at an inventory after its first eviction there whose previous inventory
        saw it usable before the first eviction on the later one, or its binding to the earlier one
        or an eviction there failed between the two (the replicas' logs, ``read_replica_logs``)."""
        if self.preemptions_judged:
            return
        self.preemptions_judged = True
        on_nodes: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
        for (preemptor, node), victims in sorted(self.evicted.items()):
            on_nodes[preemptor][node] = victims
            api, logged, messages = self.dry_run_named(preemptor, node)
            if len(victims) > max(api, logged):
                self.violate(
                    "victims_beyond_dry_run", f"{preemptor}@{node}", preemptor=self.names.get(preemptor, preemptor),
                    uid=preemptor, node=node, victims=sorted(self.names.get(v, v) for v in victims),
                    named_by_events=api, named_by_logs=logged, dry_runs=messages,
                )  # fmt: skip
        for preemptor, nodes in on_nodes.items():
            if len(nodes) < 2:
                continue
            first = {node: min(victims.values()) for node, victims in nodes.items()}
            order = sorted(nodes, key=lambda n: (first[n], n))
            moves, unexplained = [], []
            for k, node in enumerate(order[1:], 1):
                lost = [
                    (earlier, round(was - self.t0, 1), round(gone - self.t0, 1))
                    for earlier in order[:k]
                    for was, gone in self.node_unusable.get(earlier, ())
                    if was < first[node] and gone > first[earlier]
                ]
                # A fault refused its binding to an earlier node, or one of its evictions there:
                # kube-scheduler's handleBindingCycleError clears the nomination (clearNominatedNode),
                # and a failed eviction ends that preemption (prepareCandidateAsync: Activate); either
                # way its next attempt chooses among every node again.
                failed = [
                    (earlier, round(at - self.t0, 1), what)
                    for earlier in order[:k]
                    for on, at, what in self.attempt_failed.get(preemptor, ())
                    if on == earlier and first[earlier] - 1.0 <= at <= first[node] + 1.0
                ]
                moves.append({"to": node, "after_lost": lost, "after_failed": failed})
                if not lost and not failed:
                    unexplained.append(node)
            detail = {
                "preemptor": self.names.get(preemptor, preemptor),
                "uid": preemptor,
                "nodes": {
                    n: {
                        "victims": sorted(self.names.get(v, v) for v in nodes[n]),
                        "first_evicted_s": round(first[n] - self.t0, 1),
                        "dry_runs": self.dry_run_named(preemptor, n)[2],
                    }
                    for n in order
                },
                "nominated_seen": sorted(n for n, pods in self.on_node.items() if preemptor in pods),
                "bound_on": self.node_of.get(preemptor),
                "moves": moves,
            }
            if unexplained:
                self.violate("preemptor_several_nodes", preemptor, **detail)
            else:
                self.moved_after_node_lost[preemptor] = detail

    async def poll(self) -> None:
        # Claims first: a claim created after this list belongs to a pod the next list still shows.
        claims = await self.api.list(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims")
        pods = await self.api.list(f"/api/v1/namespaces/{NS}/pods") if claims is not None else None
        if claims is None or pods is None:
            self.poll_failures += 1
            self.poll_failed_at.append(time.monotonic())
            return
        self.polls += 1
        self.check(time.monotonic(), claims, pods)

    def check(self, now: float, claims: list[JSON], pods: list[JSON]) -> None:
        self.checks += 1
        if not self.fault_active and now - self.last_fault_end > self.cfg.grace:
            self.armed[self.phase] += 1
        pods_by_uid = {p["metadata"]["uid"]: p for p in pods}
        claims_by_name = {c["metadata"]["name"]: c for c in claims}
        self.present = set(pods_by_uid)
        self.deleting.update(
            u
            for u, p in pods_by_uid.items()
            if p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )

        # 1. no device in two allocated claims
        holders: dict[tuple[str, str, str], list[str]] = defaultdict(list)
        for c in claims:
            alloc = (c.get("status") or {}).get("allocation")
            for r in ((alloc or {}).get("devices") or {}).get("results") or ():
                holders[(r.get("driver", ""), r.get("pool", ""), r.get("device", ""))].append(c["metadata"]["name"])
        used: Counter[tuple[str, str]] = Counter()
        for (driver, pool, device), names in holders.items():
            used[(driver, pool)] += 1
            if len(names) > 1:
                self.violate("double_allocation", f"{driver}/{pool}/{device}:{','.join(sorted(names))}", claims=names)
        self.max_allocated = max(self.max_allocated, sum(n for (d, _), n in used.items() if d == DRIVERS[GPU]))

        # 2. no special claim left after its pod ended or went
        present = set()
        for c in claims:
            owner = special_owner(c)
            if owner is None:
                continue
            uid = c["metadata"]["uid"]
            present.add(uid)
            pod = pods_by_uid.get(owner)
            ended = pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
            if not ended:
                self.stale_since.pop(uid, None)
                continue
            if uid not in self.stale_since:
                self.ended_claims_seen += 1
            since = self.stale_since.setdefault(uid, now)
            if self.overdue(since, now):
                self.violate(
                    "stale_claim",
                    uid,
                    claim=c["metadata"]["name"],
                    pod="gone" if pod is None else pod["metadata"]["name"],
                    seconds=round(now - since, 1),
                    allocated=bool((c.get("status") or {}).get("allocation")),
                )
        for uid in set(self.stale_since) - present:
            del self.stale_since[uid]

        # 3./4. bindings: once, where they fit, as asked
        pending: list[tuple[int, str, str, JSON, str, int]] = []
        for p in pods:
            meta, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
            if spec.get("schedulerName") != SCHEDULER:
                continue
            uid = meta["uid"]
            req = requested(p)
            if req is None:
                continue
            labels = meta.get("labels") or {}
            self.created.setdefault(uid, "probe" if labels.get("role") == "probe" else labels.get("app", "?"))
            self.priority[uid] = priority = int(spec.get("priority") or 0)
            self.names[uid] = meta["name"]
            scheduled = _scheduled_condition(p)
            if scheduled is not None and DRY_RUN.search(str(scheduled.get("message") or "")):
                self.dry_run_conditions[(uid, str(scheduled["message"]))].add(
                    str(scheduled.get("lastTransitionTime") or "")
                )
            phase = status.get("phase")
            if phase == "Succeeded":
                self.completed.add(uid)
            node = spec.get("nodeName")
            nominated = status.get("nominatedNodeName")
            if nominated:
                self.preemptors.add(uid)
                self.on_node[nominated].setdefault(uid, [priority, now, now])[2] = now
            if _preempted(p):
                self.victim(uid, meta["name"], now, node=node)
            claim_name = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName") or ""
            if node:
                self.node_of[uid] = node
                self.on_node[node].setdefault(uid, [priority, now, 0.0])
                if uid in self.evict_fit and uid in self.evict_since:
                    self.preemptor_waits.append(round(now - self.evict_since.pop(uid), 1))
                first = self.bound.setdefault(uid, (node, claim_name))
                if first != (node, claim_name):
                    self.violate("rebound", uid, pod=meta["name"], first=first, now=(node, claim_name))
                if uid not in self.placement_checked and phase not in ("Succeeded", "Failed"):
                    self.check_placement(p, node, claim_name, claims_by_name.get(claim_name), req)
                elif uid in self.holding and _live(p):
                    self.check_held(p, claims_by_name.get(claim_name))
                continue
            if meta.get("deletionTimestamp") or phase not in (None, "Pending"):
                continue
            pending.append((-priority, meta.get("creationTimestamp", ""), uid, p, *req))

        # 5. pending pods: bound when they fit (on free devices, or by evicting lower priority), a
        # true reason when they fit nowhere. The free devices go to the pending pods in the
        # queue's order (priority, then age), a nominated pod's on its node first.
        free = {k: len(v) for k, v in self.devices.items()}
        for (driver, pool), n in used.items():
            if (driver, pool) in free:
                free[(driver, pool)] -= n
        unclaimed = dict(free)  # before the handout: "fits nowhere" ignores the competition
        # The devices a pod of higher priority could have by eviction: (driver, node) -> [[priority,
        # devices], ...] of the allocated claims' users (-inf: the pod ended or went, the claim is
        # being released), lowest first.
        evictable: dict[tuple[str, str], list[list[float]]] = defaultdict(list)
        for c in claims:
            devices = Counter((d, pool) for d, pool, _ in _allocated(c))
            if not devices:
                continue
            users = [special_owner(c)] if special_owner(c) else [
                r.get("uid") for r in (c.get("status") or {}).get("reservedFor") or () if r.get("resource") == "pods"
            ]  # fmt: skip
            live = [pods_by_uid[u] for u in users if u in pods_by_uid and _live(pods_by_uid[u])]
            prio = max((int((u.get("spec") or {}).get("priority") or 0) for u in live), default=float("-inf"))
            for key, n in devices.items():
                evictable[key].append([prio, n])
        for lst in evictable.values():
            lst.sort()
        pending.sort(key=lambda x: (x[0], x[1], x[2]))
        waiting = set()
        for neg_priority, _, uid, p, resource, count in pending:
            waiting.add(uid)
            driver, priority = DRIVERS[resource], -neg_priority
            preempts = priority > LOWEST_PRIORITY and (p.get("spec") or {}).get("preemptionPolicy") != "Never"
            nominated = (p.get("status") or {}).get("nominatedNodeName")
            fitting = [(n, node) for (d, node), n in free.items() if d == driver and n >= count]
            if nominated and free.get((driver, nominated), 0) >= count:
                fitting = [(free[(driver, nominated)], nominated)]
            if fitting:
                self.nofit_since.pop(uid, None)
                best = min(fitting)  # best fit, as draxr's MostAllocated device scoring packs
                free[(driver, best[1])] -= count
                since = self.fit_since.setdefault(uid, now)
                if preempts:
                    self.evict_since.setdefault(uid, now)
                if self.overdue(since, now):
                    self.violate(
                        "fitting_unbound", uid, pod=p["metadata"]["name"], wants=f"{count} {resource}",
                        fits_on=best[1], free=best[0], seconds=round(now - since, 1),
                        condition=_scheduled_condition(p),
                    )  # fmt: skip
                self.preemptor_overdue(uid, p, now, f"{count} {resource}", best[1], f"{best[0]} free")
                continue
            self.fit_since.pop(uid, None)
            if preempts:
                room = {
                    node: free.get((d, node), 0) + sum(n for pr, n in lst if pr < priority)
                    for (d, node), lst in evictable.items()
                    if d == driver
                }
                choices = [(n, node) for node, n in room.items() if n >= count]
                if nominated and room.get(nominated, 0) >= count:
                    choices = [(room[nominated], nominated)]
                if choices:
                    self.nofit_since.pop(uid, None)
                    n, node = min(choices)
                    what = (
                        f"{free.get((driver, node), 0)} free, {evictable[(driver, node)]} held by (priority, devices)"
                    )
                    _take(free, evictable[(driver, node)], (driver, node), count)
                    self.evict_since.setdefault(uid, now)
                    self.evict_fit.add(uid)
                    self.preemptor_overdue(uid, p, now, f"{count} {resource}", node, what)
                    continue
            self.evict_since.pop(uid, None)
            if any(d == driver and n >= count for (d, _), n in unclaimed.items()):
                self.nofit_since.pop(uid, None)  # fits, but other pods come first: no claim either way
                continue
            since = self.nofit_since.setdefault(uid, now)
            if uid in self.reason_ok or not self.overdue(since, now):
                continue
            structural = all(len(v) < count for (d, _), v in self.devices.items() if d == driver)
            why = self.untrue_reason(p, count, resource, structural)
            if why is None:
                self.reason_ok.add(uid)
            else:
                self.violate("untrue_reason", uid, pod=p["metadata"]["name"], why=why, wants=f"{count} {resource}")
        for d in (self.fit_since, self.nofit_since, self.evict_since):
            for uid in set(d) - waiting:
                del d[uid]
        self.judge_victims(now)

    def preemptor_overdue(self, uid: str, p: JSON, now: float, wants: str, node: str, what: str) -> None:
        """A pod that fits by evicting (it was seen so) and has fitted, one way or the other, for
        longer than the grace."""
        since = self.evict_since.get(uid)
        if since is None or uid not in self.evict_fit or not self.overdue(since, now):
            return
        self.violate(
            "preemptor_unbound", uid, pod=p["metadata"]["name"], wants=wants, node=node, there=what,
            nominated=(p.get("status") or {}).get("nominatedNodeName"), seconds=round(now - since, 1),
            condition=_scheduled_condition(p),
        )  # fmt: skip

    def check_placement(self, p: JSON, node: str, claim_name: str, claim: JSON | None, req: tuple[str, int]) -> None:
        uid, name = p["metadata"]["uid"], p["metadata"]["name"]
        if not claim_name:
            self.violate("wrong_placement", uid, pod=name, why="bound without extendedResourceClaimStatus")
            self.placement_checked.add(uid)
            return
        # The claims were listed before the pods: a binding written in between shows a bound pod
        # with its claim as it was before (missing, or not yet allocated). Judged on a later list
        # (taken after the pod was seen bound) only.
        if claim is None:
            self.claim_missing[uid] += 1
            if self.claim_missing[uid] >= 3:
                self.violate("wrong_placement", uid, pod=name, why=f"claim {claim_name} missing")
                self.placement_checked.add(uid)
            return
        resource, count = req
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        reserved = [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or ()]
        problems = []
        if len(results) != count:
            problems.append(f"{len(results)} devices for a request of {count}")
        for r in results:
            if r.get("pool") != node or r.get("driver") != DRIVERS[resource]:
                problems.append(f"device {r.get('driver')}/{r.get('pool')}/{r.get('device')} not on node {node}")
            elif r.get("device") not in self.devices.get((r["driver"], node), set()):
                problems.append(f"device {r.get('device')} does not exist on {node}")
        if special_owner(claim) != uid:
            problems.append("claim is not the pod's special claim")
        if uid not in reserved:
            problems.append(f"claim reserved for {reserved}")
        if problems:
            self.suspect[uid] += 1
            if self.suspect[uid] < 2:
                return
            self.violate("wrong_placement", uid, pod=name, claim=claim_name, node=node, why=problems)
        else:
            self.holding[uid] = (claim["metadata"]["uid"], frozenset(_allocated(claim)), self.checks)
        self.placement_checked.add(uid)

    def check_held(self, p: JSON, claim: JSON | None) -> None:
        """At every poll after its placement was found right: a pod still running (no deletion, not
        ended) still has that claim, allocated with the same devices and reserved for it. The claims
        are listed before the pods: a pod running at this list ran at this claims list too, and was
        bound before it (it was seen bound at an earlier poll)."""
        uid, name = p["metadata"]["uid"], p["metadata"]["name"]
        claim_uid, devices, since_poll = self.holding[uid]
        if self.checks <= since_poll:
            return
        self.held_checks += 1
        problems = []
        if claim is None or claim["metadata"]["uid"] != claim_uid:
            problems.append("its claim is gone" if claim is None else "its claim was replaced")
        else:
            now_devices = _allocated(claim)
            if now_devices != devices:
                problems.append(f"allocation {sorted(now_devices)} (was {sorted(devices)})")
            reserved = [r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or ()]
            if uid not in reserved:
                problems.append(f"reserved for {reserved}")
        if problems:
            self.violate("claim_lost", uid, pod=name, phase=(p.get("status") or {}).get("phase"), why=problems)

    def untrue_reason(self, p: JSON, count: int, resource: str, structural: bool = False) -> str | None:
        """None when the pod, which fits nowhere, carries a FailedScheduling that is true, read whole
        (its condition's message, and a FailedScheduling Event of draxr's for it, each ``untrue_message``
        None): PodScheduled=False/Unschedulable."""
        cond = _scheduled_condition(p)
        if cond is None or cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
            return f"no PodScheduled=False/Unschedulable condition: {cond}"
        why = self.untrue_message(str(cond.get("message") or ""), p, count, resource, structural)
        if why is not None:
            return f"condition: {why}"
        events = self.failed_events.get(p["metadata"]["uid"])
        if not events:
            return "no FailedScheduling Event from draxr"
        whys = [self.untrue_message(m, p, count, resource, structural) for m in sorted(events)]
        if all(w is not None for w in whys):
            return f"no FailedScheduling Event from draxr says something true: {whys}"
        return None

    def untrue_message(self, message: str, p: JSON, count: int, resource: str, structural: bool) -> str | None:
        """kube-scheduler's FitError for a pod no node can serve now, every part of it: every node
        of the cluster (N) is accounted for once, each with DynamicResources' "cannot allocate all
        claims: C device(s) of class K requested, only F free and matching on this node" for the
        pod's count and class and F < C (fewer nodes with F > 0 than the GPU nodes, their F no
        more than the devices there are); the preemption part accounts for the N nodes too (a pod of
        preemptionPolicy Never: not eligible). A pod that asks for more devices than any node has
        (``structural``) and is of the lowest priority has nothing to evict anywhere: its
        preemption part is "0/N nodes are available: N No preemption victims found for incoming pod."."""
        n = self.node_count
        parts = fit_error_parts(message)
        if parts is None or parts[0] != n or sum(parts[1].values()) != n:
            return f"does not account for the {n} nodes once: {message!r}"
        driver = DRIVERS[resource]
        capacity = {node: len(v) for (d, node), v in self.devices.items() if d == driver}
        nodes_with_free = 0
        for reason, nodes in parts[1].items():
            m = NO_ROOM_DETAIL.match(reason)
            if m is None or (int(m.group(1)), m.group(2)) != (count, driver) or int(m.group(3)) >= count:
                return f"{nodes} node(s) with a reason that is not a true lack of {count} {driver}: {reason!r}"
            free = int(m.group(3))
            if free > max(capacity.values(), default=0):
                return f"{free} free on a node: more than any node has ({reason!r})"
            nodes_with_free += nodes if free else 0
        if nodes_with_free > len(capacity):
            return f"{nodes_with_free} nodes with free {driver} devices: there are {len(capacity)} such nodes"
        preemption = parts[2]
        if (p.get("spec") or {}).get("preemptionPolicy") == "Never":
            return None if preemption == NEVER_MSG else f"a pod of preemptionPolicy Never: preemption {preemption!r}"
        sub = fit_error_parts(preemption or "")
        if sub is None or sub[0] != n or sum(sub[1].values()) != n:
            return f"preemption part does not account for the {n} nodes once: {preemption!r}"
        strange = [r for r in sub[1] if r not in PREEMPTION_REASONS and not NO_ROOM_DETAIL.match(r)]
        if strange:
            return f"preemption part with unknown reasons {strange}: {preemption!r}"
        if structural and int((p.get("spec") or {}).get("priority") or 0) <= LOWEST_PRIORITY:
            want = nodes_message(n, Counter({"No preemption victims found for incoming pod": n}))
            if preemption != want:
                return f"preemption part {preemption!r}, not {want!r}"
        return None

    def summary(self) -> JSON:
        self.judge_victims(time.monotonic(), final=True)
        self.judge_preemptions()
        roles = Counter(self.created.values())
        probes = {u for u, r in self.created.items() if r == "probe"}
        work = set(self.created) - probes
        return {
            "pods_created": len(work),
            "pods_bound": len(work & set(self.bound)),
            "pods_completed": len(work & self.completed),
            "pods_by_role": dict(roles),
            "probes_seen": len(probes),
            "polls": self.polls,
            "poll_failures": self.poll_failures,
            "max_devices_allocated": self.max_allocated,
            "preemptions": len(self.preemptors),
            "preemption_victims": len(self.victims),
            # Preemptors whose Events name victims on more than one node (the violations of
            # preemptor_several_nodes, and those exempt: moved after the earlier node was lost, or
            # after their binding or an eviction there failed).
            "preemptors_on_several_nodes": sum(1 for nodes in self.preempted_on.values() if len(nodes) > 1),
            "preemptors_moved_after_node_lost": self.moved_after_node_lost,
            "dry_runs_seen": {
                "events": len(self.dry_run_events),
                "conditions": sum(len(t) for t in self.dry_run_conditions.values()),
                "log_lines": self.dry_run_log_lines,
            },
            "preemptor_wait_s": {
                "worst": max(self.preemptor_waits, default=None),
                "mean": round(sum(self.preemptor_waits) / len(self.preemptor_waits), 1)
                if self.preemptor_waits
                else None,
            },
            "checked": {
                "placements": len(self.placement_checked),
                "held_claims": self.held_checks,
                "armed": dict(self.armed),  # checks at which the time limits could run out, per phase
                "true_reasons": len(self.reason_ok),
                "special_claims_ended_seen": self.ended_claims_seen,
                "preemptors": len(self.evict_fit & set(self.bound)),  # bound after fitting only by evicting
                "victims": self.victims_checked,
                "marked_not_evicted": self.marked_not_evicted,
                "claim_events": self.claim_events,
                "claim_relists": self.claim_relists,
            },
            "violations": dict(self.violations),
            "violation_details": self.details,
        }


def _scheduled_condition(p: JSON) -> JSON | None:
    for c in (p.get("status") or {}).get("conditions") or ():
        if c.get("type") == "PodScheduled":
            return dict(c)
    return None


def _preempted(p: JSON) -> bool:
    """DisruptionTarget=True with reason PreemptionByScheduler: the scheduler is preempting it."""
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"
        for c in (p.get("status") or {}).get("conditions") or ()
    )


def _usable_node(node: JSON) -> bool:
    """Not cordoned, no NoSchedule/NoExecute taint (our pods tolerate none for scheduling)."""
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    return not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in spec.get("taints") or ())


def _event_count(event: JSON) -> int:
    """How many times an Event was reported: its series' count (events.k8s.io), else its count."""
    return max(int((event.get("series") or {}).get("count") or 0), int(event.get("count") or 0), 1)


def _event_time(event: JSON, now: float) -> float:
    """When an Event was first reported, as monotonic time (its eventTime, else its
    creationTimestamp; ``now`` when it has neither)."""
    stamp = (
        event.get("eventTime") or event.get("firstTimestamp") or (event.get("metadata") or {}).get("creationTimestamp")
    )
    if not stamp:
        return now
    try:
        return time.monotonic() - (time.time() - _ts(str(stamp)))
    except ValueError:
        return now


def read_replica_logs(observer: Observer, run_dir: Path) -> None:
    """From the replicas' logs (a pod named by key: its uid from what the observer saw, polls and
    Events):
    * the "preempting" lines (draxr logs each chosen node and its victims before evicting):
      (preemptor, node) -> the victims they named, summed, into ``observer.dry_run_logged``;
    * the "binding failed, pod requeued" and "victim not preempted" lines: (node, when, which) per
      pod, into ``observer.attempt_failed``."""
    uids = {name: uid for uid, name in observer.names.items()}
    failures = {"binding failed, pod requeued": "pod", "victim not preempted": "preemptor"}
    for path in sorted(run_dir.glob("draxr-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if '"preempting"' not in line and not any(f'"{event}"' in line for event in failures):
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            event = str(rec.get("event"))
            name = str(rec.get(failures.get(event, "pod")) or "").partition("/")[2]
            uid = uids.get(name, name)
            if event == "preempting":
                observer.dry_run_log_lines += 1
                observer.dry_run_logged[(uid, str(rec.get("node")))] += len(rec.get("victims") or ())
            elif event in failures and rec.get("timestamp"):
                try:
                    at = time.monotonic() - (time.time() - _ts(str(rec["timestamp"])))
                except ValueError:
                    continue
                observer.attempt_failed[uid].append((str(rec.get("node")), at, event))


def _live(p: JSON) -> bool:
    """Neither ended nor being deleted: its claim stays allocated until it is evicted."""
    return not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _allocated(claim: JSON) -> set[tuple[str, str, str]]:
    """(driver, pool, device) of the claim's allocation."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return {
        (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
        for r in (alloc.get("devices") or {}).get("results") or ()
    }


def _take(free: dict[tuple[str, str], int], held: list[list[float]], key: tuple[str, str], count: int) -> None:
    """Hand ``count`` devices out on one node: the free ones first, then the lowest priority's."""
    n = min(free.get(key, 0), count)
    free[key] = free.get(key, 0) - n
    count -= n
    for entry in held:
        if count <= 0:
            break
        n = min(int(entry[1]), count)
        entry[1] -= n
        count -= n


# ---- faults ------------------------------------------------------------------------------------------------


@dataclass
class FaultRecord:
    kind: str
    started: float
    ended: float = 0.0
    params: JSON = field(default_factory=dict)
    recovery_s: float | None = None
    skipped: str = ""


class Chaos:
    def __init__(
        self, cfg: Config, rng: random.Random, api: Api, cp: ControlPlane, proxy: ProxyProcess,
        replicas: Replicas, observer: Observer,
    ) -> None:  # fmt: skip
        self.cfg, self.rng, self.api, self.cp, self.proxy = cfg, rng, api, cp, proxy
        self.replicas, self.observer = replicas, observer
        self.records: list[FaultRecord] = []
        self.quiet = asyncio.Event()  # set when the first quiet window begins (Workload.wave_at)
        self.background: set[asyncio.Task[None]] = set()
        self.t0 = time.monotonic()
        self.probes = 0

    def seconds(self, lo: float, hi: float) -> float:
        return round(self.rng.uniform(lo, hi) * self.cfg.fault_scale, 1)

    async def lease_holder(self) -> str:
        status, lease = await self.api.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{DRAXR_NS}/leases/draxr")
        return str((lease.get("spec") or {}).get("holderIdentity") or "") if status == 200 else ""

    async def leader(self, timeout: float = 30.0) -> Replica | None:
        """The replica whose current process holds the lease (and leads)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            holder = await self.lease_holder()
            for r in self.replicas.replicas:
                if holder and r.alive and not r.stopped and r.identity() == holder:
                    return r
            await asyncio.sleep(0.5)
        return None

    async def run(self, until: float) -> None:
        """Faults until ``until``, and on (at most 90 s) until every kind had ``min_rounds`` turns."""
        bag: list[str] = []
        rounds = 0
        hard_stop = until + 90.0
        while True:
            now = time.monotonic()
            if now >= hard_stop or (now >= until and (rounds >= self.cfg.min_rounds or not bag)):
                return
            if not bag:
                bag = list(self.cfg.kinds)
                self.rng.shuffle(bag)
            kind = bag.pop()
            rec = FaultRecord(kind, time.monotonic())
            self.observer.fault_started()
            try:
                await self.inject(rec)
            finally:
                rec.ended = rec.ended or time.monotonic()
                self.observer.fault_ended(rec.ended)
            self.records.append(rec)
            log(f"fault {kind} {rec.params} {'skipped: ' + rec.skipped if rec.skipped else 'ended'}")
            if not rec.skipped:
                await self.probe(rec)
            if not bag:
                rounds += 1
            quiet = len(self.records) in self.cfg.quiet_after
            if quiet:
                self.quiet.set()
            long = self.rng.random() < self.cfg.long_gap_chance or quiet
            gap = self.rng.uniform(*(self.cfg.long_gap if long else self.cfg.gap))
            now = time.monotonic()
            await asyncio.sleep(max(0.0, min(gap, (until if now < until else hard_stop) - now)))

    async def inject(self, rec: FaultRecord) -> None:
        kind, p = rec.kind, rec.params
        if kind in ("leader-sigkill", "leader-sigstop"):
            leader = await self.leader()
            if leader is None:
                rec.skipped = "no leader within 30 s"
                return
            p["replica"] = leader.name
            if kind == "leader-sigkill":
                leader.kill_requested = True
                leader.signal(signal.SIGKILL)
                return
            # A standby to take over: the other replica, alive and synced (it may be restarting).
            other = [r for r in self.replicas.replicas if r is not leader]
            for _ in range(120):
                if all(r.alive and r.synced() for r in other):
                    break
                await asyncio.sleep(0.5)
            identity = leader.identity()
            leader.stopped = True
            leader.signal(signal.SIGSTOP)
            t_stop = time.monotonic()
            p["stopped_at"] = time.time()  # (wall clock, as the audit log's)
            # Stopped until another replica holds the lease (seen in the Lease), at most this long.
            limit = LEASE_SECONDS + TAKEOVER_SECONDS
            holder = ""
            while time.monotonic() < t_stop + limit:
                holder = await self.lease_holder()
                if holder and holder != identity:
                    break
                await asyncio.sleep(0.25)
            p["seconds"] = round(time.monotonic() - t_stop, 1)
            leader.stopped = False
            # (read before the signal: the process may run, and its frozen write reach the API
            # server, before this coroutine reads the clock again; read after, such a write looked
            # sent before the SIGCONT and was judged a split brain, 2 ms early, in a session-20 run)
            p["continued_at"] = time.time()
            leader.signal(signal.SIGCONT)
            rec.ended = time.monotonic()
            p["taken_over_by"] = holder if holder != identity else ""
            if holder and holder != identity:
                self._spawn(self.expect_exit(leader, leader.proc, rec))
            else:
                self.observer.violate(
                    "stopped_leader", f"{leader.name}.{leader.starts}", replica=leader.name,
                    why=f"no other replica took the lease within {limit:.0f} s (holder {holder!r})",
                )  # fmt: skip
        elif kind == "apiserver-kill":
            p["down_seconds"] = down = self.seconds(0.0, 3.0)
            p["restart_s"] = round(await asyncio.to_thread(self.cp.restart_apiserver, down), 1)
        elif kind == "drop-all":
            p["refuse_seconds"] = s = self.seconds(2.0, 5.0)
            await self.proxy.command("drop_all", refuse_seconds=s)
            await asyncio.sleep(s)
        elif kind == "stall":
            p["seconds"] = s = self.seconds(3.0, 12.0)
            await self.proxy.command("stall", seconds=s)
            await asyncio.sleep(s)
        elif kind == "latency":
            p["latency"] = lat = round(self.rng.uniform(0.2, 1.0), 2)
            p["seconds"] = s = self.seconds(8.0, 15.0)
            await self.proxy.command("latency", seconds=lat, duration=s)
            await asyncio.sleep(s + lat)
        elif kind == "cut-watches":
            p["seconds"] = s = self.seconds(0.0, 3.0)
            await self.proxy.command("cut_watches", mid_event=True, seconds=s)
            await asyncio.sleep(s)
        elif kind == "gone":
            p["seconds"] = s = self.seconds(3.0, 8.0)
            await self.proxy.command("gone", seconds=s)
            await asyncio.sleep(s)
        elif kind == "throttle":
            p["seconds"] = s = self.seconds(3.0, 8.0)
            await self.proxy.command("throttle", seconds=s, retry_after=1)
            await asyncio.sleep(s)
        elif kind in ("errors-500", "errors-503"):
            p["seconds"] = s = self.seconds(4.0, 10.0)
            p["fraction"] = f = round(self.rng.uniform(0.3, 1.0), 2)
            code = int(kind.rsplit("-", 1)[1])
            await self.proxy.command("errors", seconds=s, code=code, fraction=f, retry_after=1)
            await asyncio.sleep(s)
        else:
            raise ValueError(kind)

    async def expect_exit(self, r: Replica, proc: subprocess.Popen[bytes] | None, rec: FaultRecord) -> None:
        """The SIGSTOPped leader lost its lease meanwhile: after SIGCONT it must exit, without writing on."""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc is None or proc.poll() is not None:
                rec.params["exited_after_s"] = round(time.monotonic() - rec.ended, 1)
                return
            await asyncio.sleep(0.2)
        self.observer.violate("stopped_leader", f"{r.name}.{r.starts}", replica=r.name, log=r.log_path.name)

    async def probe(self, rec: FaultRecord) -> None:
        """A pod of its own (probe nodes and class, never crowded out) must be bound within the grace."""
        self.probes += 1
        name = f"probe-{self.probes:03d}"
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"role": "probe"}},
            "spec": pod_spec(PROBE, 1),
        }
        await self.api.must("POST", f"/api/v1/namespaces/{NS}/pods", body)
        deadline = time.monotonic() + self.cfg.grace + 30
        while time.monotonic() < deadline:
            status, pod = await self.api.call("GET", f"/api/v1/namespaces/{NS}/pods/{name}")
            if status == 200 and (pod.get("spec") or {}).get("nodeName"):
                rec.recovery_s = round(time.monotonic() - rec.ended, 2)
                break
            await asyncio.sleep(0.25)
        if rec.recovery_s is None or rec.recovery_s > self.cfg.grace:
            self.observer.violate("probe", name, fault=rec.kind, recovery_s=rec.recovery_s, params=rec.params)
        await self.api.must("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}", {"gracePeriodSeconds": 0}, ok=(404,))

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def drain(self) -> None:
        await asyncio.gather(*list(self.background), return_exceptions=True)

    def summary(self) -> JSON:
        kinds: dict[str, JSON] = {}
        for kind in KINDS:
            recs = [r for r in self.records if r.kind == kind]
            done = [r.recovery_s for r in recs if r.recovery_s is not None]
            kinds[kind] = {
                "count": sum(1 for r in recs if not r.skipped),
                "skipped": sum(1 for r in recs if r.skipped),
                "worst_recovery_s": max(done) if done else None,
                "mean_recovery_s": round(sum(done) / len(done), 2) if done else None,
            }
        timeline = [
            {**asdict(r), "started": round(r.started - self.t0, 1), "ended": round(r.ended - self.t0, 1)}
            for r in self.records
        ]
        return {"faults": kinds, "timeline": timeline}


# ---- after the run: the replicas' exits, the observer's failed polls, the audit log ------------------------------


def judge_exits(observer: Observer, records: list[FaultRecord], exits: list[JSON]) -> None:
    """Every replica exit is explained by a fault: on at the time, or ended at most EXIT_WINDOW before
    it; of that fault's kind (SIGKILL: the leader-sigkill that killed this replica; else 'lost
    leadership', which every fault may cause); at most one exit per replica per fault. A crash, a
    liveness exit, an exit in a quiet time is a violation."""
    used: set[tuple[int, str]] = set()
    for e in sorted(exits, key=lambda e: e["t"]):
        who, reason = e["replica"], e["reason"]
        for i, rec in enumerate(records):
            if rec.skipped or (i, who) in used or not rec.started - 1.0 <= e["t"] <= rec.ended + EXIT_WINDOW:
                continue
            if reason == "SIGKILL (fault)" and (rec.kind != "leader-sigkill" or rec.params.get("replica") != who):
                continue
            if reason not in ("SIGKILL (fault)", "lost leadership") or (reason == "lost leadership" and e["code"] != 1):
                continue  # (draxr exits 1 when it lost the lease; a log that says so and another code is a crash)
            used.add((i, who))
            e["explained_by"] = f"{rec.kind}#{i}"
            break
        else:
            detail = {k: v for k, v in e.items() if k != "t"}
            observer.violate("replica_exit", f"{who}@{e['at']}", **detail)


def judge_poll_failures(observer: Observer, records: list[FaultRecord]) -> None:
    """The observer talks to kube-apiserver directly (not through the proxy): a poll fails only while
    kube-apiserver is down (an apiserver-kill, until a few seconds after it is ready again)."""
    down = [(r.started - 1.0, r.ended + 10.0) for r in records if r.kind == "apiserver-kill"]
    for t in observer.poll_failed_at:
        if not any(a <= t <= b for a, b in down):
            observer.violate("poll_failed", f"{t - observer.t0:.1f}", at=round(t - observer.t0, 1))


def _frozen_in_flight(
    w: JSON, freezes: Sequence[tuple[str, float, float]], leases: list[tuple[float, str, bool]]
) -> bool:
    for replica, stopped, continued in freezes:
        if replica != w["replica"] or not continued <= w["received"] <= continued + FROZEN_WRITE_SECONDS:
            continue
        renewed = max((t for t, r, certain in leases if r == replica and certain and t <= stopped), default=None)
        if renewed is not None and stopped - renewed < RENEW_DEADLINE_SECONDS:
            return True
    return False


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()


def judge_audit(
    observer: Observer, run_dir: Path, replicas_by_jti: dict[str, str], freezes: Sequence[tuple[str, float, float]] = ()
) -> JSON:
    """Split brain, from kube-apiserver's audit log (draxr's writes: each replica has a token of its
    own, the event's credential ID names it). The holder of the Lease is the replica whose write of
    it last succeeded (by the time the API server completed it); a write of anything else by one
    replica received after another's Lease write completed (and before its own next Lease write) is
    a write by a replica that no longer led: a violation. A Lease write whose outcome the log does
    not show (kube-apiserver killed meanwhile) may have succeeded: it makes its replica a possible
    holder, and a write judged against another's such write is not judged.

    One exception, counted apart (``frozen_in_flight``) and not a violation: a write of a replica
    that was SIGSTOPped (``freezes``: replica, stop, SIGCONT, wall clock) received at most
    FROZEN_WRITE_SECONDS after its SIGCONT, when its last Lease write had completed less than the
    renew deadline before the stop. Such a request passed draxr's fence (checked before the send)
    and was frozen with the process before it reached the socket: a delayed packet, which no
    time-based lease can stop (only a precondition on the object written can)."""
    requests: dict[str, JSON] = {}
    for path in sorted(run_dir.glob("audit*.log")):
        with path.open() as f:
            for line in f:
                try:
                    ev = json.loads(line)
                except ValueError:
                    continue  # (a line being written)
                user = ev.get("user") or {}
                if user.get("username") != DRAXR_USER or ev.get("verb") not in WRITE_VERBS:
                    continue
                creds = " ".join((user.get("extra") or {}).get("authentication.kubernetes.io/credential-id") or ())
                ref = ev.get("objectRef") or {}
                req = requests.setdefault(ev["auditID"], {
                    "replica": next((n for jti, n in replicas_by_jti.items() if jti in creds), None),
                    "received": _ts(ev["requestReceivedTimestamp"]),
                    "lease": ref.get("resource") == "leases" and ref.get("name") in (None, "draxr")
                    and ref.get("namespace") == DRAXR_NS,  # (a create's objectRef has no name)
                    "what": f"{ev['verb']} {ref.get('resource')}/{ref.get('subresource') or ''}"
                            f"{ref.get('namespace', '')}/{ref.get('name', '')}",
                    "code": None, "completed": None,
                })  # fmt: skip
                if ev.get("stage") == "ResponseComplete":
                    req["code"] = int((ev.get("responseStatus") or {}).get("code") or 0)
                    req["completed"] = _ts(ev["stageTimestamp"])
    leases: list[tuple[float, str, bool]] = []  # (time, replica, certain)
    writes: list[JSON] = []
    unattributed = 0
    for req in requests.values():
        if req["replica"] is None:
            unattributed += 1
        elif req["lease"]:
            if req["code"] is None:
                leases.append((req["received"], req["replica"], False))
            elif 200 <= req["code"] < 300:
                leases.append((req["completed"], req["replica"], True))
        else:
            writes.append(req)
    leases.sort()
    times = [t for t, _, _ in leases]
    takeovers = sum(1 for a, b in itertools.pairwise(leases) if a[2] and b[2] and a[1] != b[1])
    unjudged = 0
    frozen: list[JSON] = []
    for w in sorted(writes, key=lambda w: w["received"]):
        i = bisect.bisect_left(times, w["received"]) - 1
        if i >= 0 and leases[i][1] == w["replica"]:
            continue
        if i >= 0 and not leases[i][2]:
            unjudged += 1
            continue
        if _frozen_in_flight(w, freezes, leases):
            frozen.append({k: w[k] for k in ("replica", "what", "code", "received")})
            continue
        holder = leases[i][1] if i >= 0 else None
        since = leases[i][0] if i >= 0 else None
        observer.violate(
            "split_brain", f"{w['replica']} in {holder}'s term from {since}", replica=w["replica"], holder=holder,
            write=w["what"], code=w["code"],
            after_takeover_s=None if since is None else round(w["received"] - since, 3),
        )  # fmt: skip
    return {
        "writes": len(writes),
        "lease_writes": len(leases),
        "takeovers": takeovers,
        "unattributed": unattributed,
        "unjudged": unjudged,
        "frozen_in_flight": frozen,
        "by_replica": dict(Counter(w["replica"] for w in writes)),
    }


def judge_rbac(run_dir: Path, kubectl: Path) -> JSON:
    """draxr's requests in the audit log (its every request is logged) against what the RBAC of
    manifests/ grants its ServiceAccount (``kubectl kustomize``, as applied): the grants no request
    used (less rbac_audit's allowances for what this run cannot reach), the requests no grant allows,
    the stale allowances. Reported, not an invariant: a longer run may reach an allowance;
    tests/integration/test_chaos.py asserts all three empty at the CI size."""
    used: frozenset[rbac_audit.Request] = frozenset()
    for path in sorted(run_dir.glob("audit*.log")):
        with path.open() as f:
            used |= rbac_audit.requests(f, [DRAXR_USER])[DRAXR_USER]
    granted = rbac_audit.grants(helmchart.rendered_base(kubectl))[DRAXR_USER]
    diff = rbac_audit.compare(granted, used, rbac_audit.CHAOS_UNEXERCISED, rbac_audit.CHAOS_SOMETIMES)
    return {
        "requests": len(used),
        "grants": len(granted),
        "unused": [str(g) for g in diff.unused],
        "ungranted": [str(r) for r in diff.ungranted],
        "stale": list(diff.stale),
    }


# ---- set-up ---------------------------------------------------------------------------------------------------


async def bounded(coros: list[Awaitable[Any]], limit: int = 16) -> None:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[Any]) -> None:
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


def kubectl(cp: ControlPlane, *args: str) -> str:
    out = subprocess.run(
        [str(cp.binaries / "kubectl"), *args],
        env={**os.environ, "KUBECONFIG": str(cp.kubeconfig)},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
    return out.stdout


async def set_up(cfg: Config, cp: ControlPlane, api: Api, names: tuple[str, ...]) -> dict[str, tuple[Path, str]]:
    """Install, fleets, namespace, a ServiceAccount directory per replica: name -> (dir, the token's
    JTI). The same ServiceAccount, a token each: the audit log tells their requests apart by the
    credential ID (authentication.kubernetes.io/credential-id, JTI=...)."""
    await asyncio.to_thread(kubectl, cp, "apply", "-k", str(REPO / "manifests"))
    # The replicas run here, as processes: the Deployment's own pods would stay Pending anyway.
    await asyncio.to_thread(kubectl, cp, "-n", DRAXR_NS, "scale", "deployment/draxr", "--replicas=0")
    fleets = [
        fakedriver.Fleet(prefix="node", dra_nodes=cfg.nodes, devices_per_node=cfg.devices,
                         driver=DRIVERS[GPU], classes={DRIVERS[GPU]: GPU}),
        fakedriver.Fleet(prefix="probe", dra_nodes=2, devices_per_node=4,
                         driver=DRIVERS[PROBE], classes={DRIVERS[PROBE]: PROBE}),
    ]  # fmt: skip
    kube = await Kube.from_kubeconfig(cp.kubeconfig)
    try:
        await bounded([fakedriver.apply(kube, [o]) for f in fleets for o in f.manifests()])
    finally:
        await kube.close()
    want = sum(f.dra_nodes for f in fleets)
    for _ in range(600):
        nodes = await api.list("/api/v1/nodes", {"labelSelector": "type=kwok"}) or []
        if sum(1 for n in nodes if fakedriver._ready(n)) >= want:
            break
        await asyncio.sleep(0.5)
    else:
        raise TimeoutError(f"{want} nodes not Ready after 300 s")
    await api.must("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name, (value, policy) in PRIORITY_CLASSES.items():
        pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
              "value": value, "preemptionPolicy": policy}  # fmt: skip
        await api.must("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", pc, ok=(409,))
    for _ in range(200):
        if (await api.call("GET", f"/api/v1/namespaces/{NS}/serviceaccounts/default"))[0] == 200:
            break
        await asyncio.sleep(0.2)
    req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 6 * 3600}}
    out: dict[str, tuple[Path, str]] = {}
    for name in names:
        _, tok = await api.must("POST", f"/api/v1/namespaces/{DRAXR_NS}/serviceaccounts/{DRAXR_SA}/token", req)
        token = tok["status"]["token"]
        sa_dir = cp.run_dir / f"serviceaccount-{name}"
        sa_dir.mkdir()
        (sa_dir / "token").write_text(token)
        shutil.copyfile(cp.pki.ca_crt, sa_dir / "ca.crt")
        out[name] = (sa_dir, token_jti(token))
    return out


def token_jti(token: str) -> str:
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])


# ---- the run ----------------------------------------------------------------------------------------------------


async def run_chaos(cfg: Config, binaries: Path | None = None) -> JSON:
    """The whole run on its own control plane; returns the result (``result["violations"]`` all 0 is a pass)."""
    t_start = time.monotonic()
    rng = random.Random(cfg.seed)
    log(f"chaos run: seed {cfg.seed}, {cfg.nodes} nodes × {cfg.devices} devices, faults for {cfg.fault_seconds:.0f} s")
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-chaos."))
    bins = binaries or await asyncio.to_thread(ensure_binaries)
    (run_dir / "audit-policy.json").write_text(json.dumps(AUDIT_POLICY))
    audit_args = (
        f"--audit-policy-file={run_dir / 'audit-policy.json'}",
        f"--audit-log-path={run_dir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=100000",
        "--audit-log-mode=blocking",  # each event written before the request goes on: none lost to a SIGKILL
    )
    cp = ControlPlane(
        binaries=bins, run_dir=run_dir, options=Options(scheduler=False, kwok=True, apiserver_extra_args=audit_args)
    )
    proxy = ProxyProcess()
    replicas: Replicas | None = None
    api: Api | None = None
    result: JSON = {"config": asdict(cfg), "run_dir": str(run_dir)}
    failed = True
    try:
        await asyncio.to_thread(cp.start)
        log(f"control plane up in {cp.timings['total']:.1f}s ({run_dir})")
        api = Api(cp)
        tokens = await set_up(cfg, cp, api, ("draxr-a", "draxr-b"))
        await proxy.start(cp, run_dir, cfg.seed)
        replicas = Replicas([Replica(n, d, proxy.port, run_dir, cfg.scoring) for n, (d, _) in tokens.items()])
        for r in replicas.replicas:
            r.start()
        observer = Observer(api, cfg)
        chaos = Chaos(cfg, rng, api, cp, proxy, replicas, observer)
        for _ in range(240):
            if all(r.synced() for r in replicas.replicas) and await chaos.leader(timeout=0.5):
                break
            if not all(r.alive for r in replicas.replicas):
                raise RuntimeError("a replica exited during start-up; see " + str(run_dir))
            await asyncio.sleep(0.5)
        else:
            raise TimeoutError("replicas not synced and leading after 120 s")
        log(f"set-up done in {time.monotonic() - t_start:.0f}s; proxy on port {proxy.port}")
        workload = Workload(api, cfg, rng)
        await workload.create_deployments()

        stop = asyncio.Event()
        t_faults = time.monotonic()
        until = t_faults + cfg.fault_seconds
        tasks = [
            asyncio.create_task(observer.run(stop), name="observer"),
            asyncio.create_task(replicas.watch(stop), name="replicas"),
        ]
        work = [
            asyncio.create_task(workload.jobs_loop(until), name="jobs"),
            asyncio.create_task(workload.scale_loop(until), name="scaling"),
            asyncio.create_task(workload.high_loop(until), name="high"),
            asyncio.create_task(workload.wave_at(chaos.quiet, until), name="wave"),
        ]
        try:
            chaos_task = asyncio.create_task(chaos.run(until), name="chaos")
            done, _ = await asyncio.wait([chaos_task, *tasks], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # a harness task that ended early raises here
            await asyncio.gather(*work)
            await chaos.drain()
            t_settle = time.monotonic()
            observer.phase = "settle"
            log(f"faults over after {t_settle - t_faults:.0f}s; settling for {cfg.settle_seconds:.0f}s")
            done, _ = await asyncio.wait(tasks, timeout=max(cfg.settle_seconds, 0))
            for t in done:
                t.result()
        finally:
            stop.set()
            for t in [*work, *tasks]:
                t.cancel()
            await asyncio.gather(*work, *tasks, return_exceptions=True)
        judge_exits(observer, chaos.records, replicas.exits)
        judge_poll_failures(observer, chaos.records)
        freezes = [
            (r.params["replica"], r.params["stopped_at"], r.params["continued_at"])
            for r in chaos.records
            if r.kind == "leader-sigstop" and "continued_at" in r.params
        ]
        audit = judge_audit(observer, run_dir, {jti: name for name, (_, jti) in tokens.items()}, freezes)
        rbac = await asyncio.to_thread(judge_rbac, run_dir, bins / "kubectl")
        # A last look at the Events (the dry runs' reports come after the evictions), then the logs.
        for _ in range(3):
            if await observer.events():
                break
            await asyncio.sleep(1.0)
        read_replica_logs(observer, run_dir)
        result |= {
            "seed": cfg.seed,
            "fault_phase_s": round(t_settle - t_faults, 1),
            "settle_s": cfg.settle_seconds,
            **observer.summary(),
            **chaos.summary(),
            "jobs_created": workload.jobs,
            "high_jobs_created": workload.high_jobs,
            "scalings": workload.scalings,
            "replica_restarts": dict(replicas.restarts),
            "replica_exits": replicas.exits,
            "proxy_counts": await proxy.command("counts"),
            "observer_api_errors": api.errors,
            "audit": audit,
            "rbac": rbac,
        }
        failed = any(result["violations"].values())
    finally:
        if replicas is not None:
            replicas.stop()
        await proxy.stop()
        if api is not None:
            await api.close()
        await asyncio.to_thread(cp.stop)
        result["wall_s"] = round(time.monotonic() - t_start, 1)
        if failed or cfg.keep:
            log(f"run directory kept: {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    return result


def table(result: JSON) -> str:
    c = result["config"]
    d = result.get("dry_runs_seen") or {"events": None, "conditions": None, "log_lines": None}
    lines = [
        f"chaos run: seed {result['seed']}, {c['nodes']} nodes × {c['devices']} devices (+2 probe nodes), "
        f"2 draxr replicas through the fault proxy, faults for {result['fault_phase_s']:.0f} s + "
        f"{result['settle_s']:.0f} s settle, wall {result['wall_s']:.0f} s",
        "",
        "| pods created | bound | completed | probes | Jobs (high) | scalings | peak devices allocated |",
        "|---|---|---|---|---|---|---|",
        f"| {result['pods_created']} | {result['pods_bound']} | {result['pods_completed']} | {result['probes_seen']} "
        f"| {result['jobs_created']} ({result['high_jobs_created']}) | {result['scalings']} "
        f"| {result['max_devices_allocated']}/{c['nodes'] * c['devices']} |",
        "",
        "| preemptors (on several nodes) | victims | victims checked "
        "| bound after fitting by evicting (worst, mean wait s) | claim events | dry runs (Events, conditions, logs) |",
        "|---|---|---|---|---|---|",
        f"| {result['preemptions']} ({result['preemptors_on_several_nodes']}) | {result['preemption_victims']} "
        f"| {result['checked']['victims']} | {result['checked']['preemptors']} ({result['preemptor_wait_s']['worst']}, "
        f"{result['preemptor_wait_s']['mean']}) | {result['checked']['claim_events']} "
        f"| {d['events']}, {d['conditions']}, {d['log_lines']} |",
        "",
        "| fault | count | worst recovery s | mean recovery s |",
        "|---|---|---|---|",
    ]
    for kind, f in result["faults"].items():
        skipped = f" ({f['skipped']} skipped)" if f["skipped"] else ""
        lines.append(f"| {kind} | {f['count']}{skipped} | {f['worst_recovery_s']} | {f['mean_recovery_s']} |")
    lines += ["", "| invariant | violations |", "|---|---|"]
    for key, what in INVARIANTS.items():
        lines.append(f"| {what} | {result['violations'].get(key, 0)} |")
    a = result.get("audit") or {}
    lines += [
        "",
        f"audit log: {a.get('writes')} writes of draxr's judged ({a.get('by_replica')}), "
        f"{a.get('lease_writes')} Lease writes, {a.get('takeovers')} takeovers, "
        f"{a.get('unattributed')} unattributed, {a.get('unjudged')} unjudged, "
        f"{len(a.get('frozen_in_flight') or ())} frozen in flight by SIGSTOP; "
        f"checks with the time limits armed: {result['checked'].get('armed')}; "
        f"running pods' claims checked again: {result['checked'].get('held_claims')}; "
        f"observer polls {result.get('polls')} ({result.get('poll_failures')} failed)",
    ]
    r = result.get("rbac") or {}
    lines += [
        "",
        f"RBAC (audit log): {r.get('requests')} distinct requests of draxr's, {r.get('grants')} grants; "
        f"granted, never used: {r.get('unused')}; used, never granted: {r.get('ungranted')}; "
        f"stale allowances: {r.get('stale')}",
    ]
    lines += ["", "| replica restarts (reason) | count |", "|---|---|"]
    for reason, n in sorted(result["replica_restarts"].items()):
        lines.append(f"| {reason} | {n} |")
    if not result["replica_restarts"]:
        lines.append("| (none) | 0 |")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_proxy":
        upstream, ca, cert, key, seed = sys.argv[2:7]
        return proxy_child(upstream, ca, cert, key, int(seed))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ci", action="store_true", help="the CI size (16 nodes, 3 min of faults)")
    p.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    p.add_argument("--nodes", type=int)
    p.add_argument("--devices", type=int)
    p.add_argument("--fault-seconds", type=float)
    p.add_argument("--settle-seconds", type=float)
    p.add_argument("--job-rate", type=float, help="Jobs per second")
    p.add_argument("--kinds", help=f"comma-separated fault kinds (default all: {','.join(KINDS)})")
    p.add_argument(
        "--scoring",
        choices=sorted(SCORING),
        default="binpack",
        help="the replicas' NodeResourcesFit scoring: binpack (MostAllocated, GPUs weighted) or "
        "default (kube-scheduler's default profile)",
    )
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    p.add_argument("--out", default=None, help="JSON path")
    args = p.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 1_000_000)
    cfg = Config.ci(seed) if args.ci else Config(seed=seed)
    for name in ("nodes", "devices", "fault_seconds", "settle_seconds", "job_rate"):
        if getattr(args, name) is not None:
            setattr(cfg, name, getattr(args, name))
    if args.kinds:
        unknown = set(args.kinds.split(",")) - set(KINDS)
        if unknown:
            p.error(f"unknown fault kinds {sorted(unknown)}")
        cfg.kinds = tuple(args.kinds.split(","))
    cfg.keep, cfg.out, cfg.scoring = args.keep, args.out, args.scoring
    result = asyncio.run(run_chaos(cfg))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        log(f"results in {args.out}")
    print(table(result))
    bad = {k: v for k, v in result["violations"].items() if v}
    if bad:
        print(f"\nFAILED: invariants violated: {bad}; seed {cfg.seed}")
        return 1
    print(f"\nall invariants held (seed {cfg.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
