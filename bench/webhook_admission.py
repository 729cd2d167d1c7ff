"""What the admission webhook costs pod creation: the same pods created in a namespace the webhook
does not see; in an opted-in namespace (draxr steers every pod) with draxr leading, so that it also
tries to schedule each (no nodes: a PodScheduled=False patch and a FailedScheduling Event per pod);
in another with draxr standing by behind a Lease this script holds (a second replica's view: watches
and webhook, no writes); with draxr stopped (failurePolicy Ignore: connection refused, pods admitted
unchanged); with the webhook's server process alone (``draxr.webhook_child`` fed by this script);
and, for reference, with no webhook at all but a MutatingAdmissionPolicy (CEL run inside the API
server, once with a JSONPatch and once with an apply configuration) that makes the same change for
the same mapping: what steering costs when the API server makes no call.

    .venv/bin/python bench/webhook_admission.py --pods 2000 --concurrency 16 [--webhook-process false]

A fresh control plane on 127.0.0.1 (no kube-scheduler, no kwok: pods stay Pending), one DeviceClass
mapping ``example.com/gpu``, the manifests' MutatingWebhookConfiguration
pointed at ``draxr run`` on a loopback port by url. Latency is the bench client's create request,
end to end. Per phase also: the CPU each process used (in cores: CPU seconds / wall seconds), the
API server's writes, its own view of the webhook call (apiserver_admission_webhook_admission_duration
_seconds), the webhook's handler latency (draxr_webhook_duration_seconds) and the TCP connections the
API server opened to the webhook (keep-alive: a handful for all pods). Results: tables on stdout and
bench/results/webhook-admission.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from draxr.core import certs
from draxr.core.claims import micro_time
from draxr.core.mapping import ExtendedResourceMapping, build_mapping, mapping_to_data
from draxr.core.steering import STEERED_ANNOTATION, STEERED_POINTER, describe
from draxr.kube import DEVICE_CLASSES, NAMESPACES, PODS, Kube, Resource
from draxr.leader import LEASES
from draxr.webhook_proc import start_child
from draxr.webhook_tls import MUTATING_WEBHOOKS, SECRETS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane, Options, free_port
from draxr_dev.devcluster.process import DraxrProcess

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
RESOURCE = "example.com/gpu"
BENCH_NS = "draxr-bench"
LEADING = "steered, draxr leading (it schedules each pod)"
STANDBY = "steered, draxr standing by (admission only)"
POLICIES = Resource("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicies", False)
POLICY_BINDINGS = Resource("admissionregistration.k8s.io", "v1", "mutatingadmissionpolicybindings", False)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def webhook_config(kubectl: Path, kubeconfig: Path, url: str) -> dict[str, Any]:
    out = subprocess.run(
        [str(kubectl), "kustomize", str(REPO / "manifests")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )
    [config] = [d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "MutatingWebhookConfiguration"]
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": url}
    return dict(config)


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}"},
        "spec": {
            "containers": [
                {"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": {RESOURCE: "1"}}}
            ]
        },
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Batch:
    """Raw figures of pod creations (one batch, or several added up)."""

    pods: int = 0
    steered: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)  # seconds, by process
    writes: dict[str, float] = field(default_factory=dict)  # the API server's, by verb and resource
    calls: float = 0.0  # the API server's webhook calls
    call_seconds: float = 0.0
    connections: set[str] = field(default_factory=set)
    handler: dict[str, float] = field(default_factory=dict)  # draxr's histogram, delta
    load: list[float] = field(default_factory=list)  # the machine's 1-minute load average at the end

    def add(self, other: Batch) -> None:
        self.pods += other.pods
        self.steered += other.steered
        self.wall += other.wall
        self.latencies += other.latencies
        for mine, theirs in ((self.cpu, other.cpu), (self.writes, other.writes), (self.handler, other.handler)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        self.calls += other.calls
        self.call_seconds += other.call_seconds
        self.connections |= other.connections
        self.load += other.load

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pods": self.pods,
            "steered": self.steered,
            "pods_per_s": round(self.pods / self.wall, 1),
            "p50_ms": round(pct(self.latencies, 0.5) * 1000, 2),
            "p90_ms": round(pct(self.latencies, 0.9) * 1000, 2),
            "p99_ms": round(pct(self.latencies, 0.99) * 1000, 2),
            "cpu_cores": {k: round(v / self.wall, 2) for k, v in sorted(self.cpu.items()) if v > 0},
            "apiserver_writes": {k: int(v) for k, v in sorted(self.writes.items())},
            "webhook_connections": len(self.connections),
            "load_average": round(sum(self.load) / len(self.load), 1) if self.load else None,
        }
        if self.calls:
            out["apiserver_webhook_call_mean_ms"] = round(self.call_seconds / self.calls * 1000, 2)
        return out | histogram_summary(self.handler)


async def create_all(kube: Kube, namespace: str, first: int, pods: int, concurrency: int) -> Batch:
    """Pods ``p<first>`` .. in ``namespace``, ``concurrency`` create requests in flight."""
    batch = Batch(pods=pods)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            created = await kube.create(PODS, pod(i), namespace)
            batch.latencies.append(time.perf_counter() - t0)
            batch.steered += created["spec"].get("schedulerName") == "draxr"

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(first, first + pods)))
    batch.wall = time.perf_counter() - t0
    return batch


def webhook_metrics(port: int) -> dict[str, float]:
    """draxr's webhook histogram: sum, count and the cumulative buckets (``le`` as the key)."""
    text = urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "draxr_webhook_duration_seconds":
            for sample in family.samples:
                key = sample.name.rsplit("_", 1)[1] if "le" not in sample.labels else f"le={sample.labels['le']}"
                found[key] = sample.value
    return found


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0}


def histogram_summary(h: dict[str, float]) -> dict[str, Any]:
    """Mean, and p50/p99 as the bucket bound they fall under, of the reviews in a histogram delta."""
    count = h.get("count", 0)
    if count <= 0:
        return {}
    buckets = sorted((float(k[3:]), n) for k, n in h.items() if k.startswith("le=") and k != "le=+Inf")

    def under(q: float) -> str:
        for bound, n in buckets:
            if n >= q * count:
                return f"<= {bound * 1000:g} ms"
        return f"> {buckets[-1][0] * 1000:g} ms"

    mean = h.get("sum", 0) / count * 1000
    return {"handler_mean_ms": round(mean, 3), "handler_p50": under(0.5), "handler_p99": under(0.99)}


def cpu_seconds(pid: int) -> float:
    """utime + stime of a running process (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def cpu_snapshot(procs: dict[str, int]) -> dict[str, float]:
    out = {name: cpu_seconds(pid) for name, pid in procs.items()}
    if "draxr" in procs:  # its webhook server process, if it has one
        out["draxr webhook process"] = sum(cpu_seconds(c) for c in children(procs["draxr"]))
    out["bench client"] = sum(os.times()[:2])
    return out


LABEL = re.compile(r'(\w+)="([^"]*)"')


async def apiserver_metrics(kube: Kube) -> dict[str, float]:
    """From kube-apiserver's /metrics: writes by verb and resource, and the webhook calls' duration."""
    async with await kube.stream("/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name == "apiserver_request_total":
            labels = dict(LABEL.findall(rest))
            if labels.get("verb") not in ("POST", "PATCH", "PUT", "DELETE"):
                continue
            sub = labels.get("subresource")
            key = f"write {labels['verb']} {labels.get('resource', '')}{'/' + sub if sub else ''}"
        elif name in (
            "apiserver_admission_webhook_admission_duration_seconds_sum",
            "apiserver_admission_webhook_admission_duration_seconds_count",
        ):
            key = "webhook call " + name.rsplit("_", 1)[1]
        else:
            continue
        out[key] = out.get(key, 0) + float(rest.rpartition(" ")[2])
    return out


async def apiserver_pprof(kube: Kube, out: Path, seconds: int = 5) -> None:
    """kube-apiserver's CPU profile over the next ``seconds`` (``go tool pprof -top`` reads it)."""
    async with await kube.stream("/debug/pprof/profile", {"seconds": seconds}) as resp:
        data = await resp.read()
    await asyncio.to_thread(out.write_bytes, data)


class Connections:
    """The distinct client ends of TCP connections to the webhook's port, sampled while a phase runs
    (/proc/net/tcp): with keep-alive a handful serve every call, with a handshake per call thousands."""

    def __init__(self, port: int) -> None:
        self.local = f"0100007F:{port:04X}"
        self.seen: set[str] = set()

    def sample(self) -> None:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            parts = line.split()
            if parts[1] == self.local and parts[3] == "01":  # ESTABLISHED, server side
                self.seen.add(parts[2])

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(0.1)


def py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy (not a dependency: ``pip install py-spy``) sampling ``pid`` and its children, every
    thread, idle frames left out, as collapsed stacks; it writes ``out`` when interrupted."""
    exe = Path(sys.executable).with_name("py-spy")
    cmd = [str(exe if exe.exists() else "py-spy"), "record", "--pid", str(pid), "--subprocesses", "--threads"]
    cmd += ["--rate", "250", "--nonblocking", "--format", "raw", "-o", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached
    return proc


async def measured(
    kube: Kube,
    procs: dict[str, int],
    webhook_port: int,
    run: Callable[[], Awaitable[Batch]],
    draxr_metrics_port: int | None = None,
) -> Batch:
    """``run()``'s figures plus what each process and the API server did meanwhile."""
    api0 = await apiserver_metrics(kube)
    hist0 = await asyncio.to_thread(webhook_metrics, draxr_metrics_port) if draxr_metrics_port else {}
    conns = Connections(webhook_port)
    sampler = asyncio.create_task(conns.run())
    cpu0 = cpu_snapshot(procs)
    try:
        batch = await run()
    finally:
        cpu1 = cpu_snapshot(procs)
        sampler.cancel()
    api = delta(api0, await apiserver_metrics(kube))
    batch.cpu = delta(cpu0, cpu1)
    batch.calls = api.pop("webhook call count", 0)
    batch.call_seconds = api.pop("webhook call sum", 0)
    batch.writes = {k.removeprefix("write "): v for k, v in api.items()}
    batch.connections = conns.seen
    batch.load = [os.getloadavg()[0]]
    if draxr_metrics_port:
        batch.handler = delta(hist0, await asyncio.to_thread(webhook_metrics, draxr_metrics_port))
    return batch


class Phases:
    """Each phase interleaved with creations where the webhook is not called, in ``rounds`` rounds:
    a 2-core box shared with other work drifts, and a ratio is only worth something when both of
    its sides saw the same drift."""

    def __init__(self, kube: Kube, procs: dict[str, int], port: int, args: argparse.Namespace) -> None:
        self.kube, self.procs, self.port, self.args = kube, procs, port, args
        self.result: dict[str, Any] = {}

    def _batch(self, namespace: str, first: int, pprof: Path | None = None) -> Callable[[], Awaitable[Batch]]:
        per = self.args.pods // self.args.rounds

        async def batch() -> Batch:
            if pprof is None:
                return await create_all(self.kube, namespace, first, per, self.args.concurrency)
            profile = asyncio.create_task(apiserver_pprof(self.kube, pprof))
            try:
                return await create_all(self.kube, namespace, first, per, self.args.concurrency)
            finally:
                await profile

        return batch

    async def run(self, name: str, namespace: str, metrics_port: int | None = None, spied: int | None = None) -> None:
        a = self.args
        plain, phase = Batch(), Batch()
        per = a.pods // a.rounds
        spy = py_spy(spied, a.profile / f"{namespace}.txt") if a.profile and spied else None
        try:
            for r in range(a.rounds):
                for ns, into, metrics in (("plain", plain, None), (namespace, phase, metrics_port)):
                    first = len(self.result) * a.pods + r * per  # (pod names unique in "plain" too)
                    pprof = None
                    if a.pprof and r == 0:
                        pprof = a.pprof / f"{namespace}-{'plain' if ns == 'plain' else 'steered'}.pb.gz"
                    run = self._batch(ns, first, pprof)
                    into.add(await measured(self.kube, self.procs, self.port, run, metrics))
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                await asyncio.to_thread(spy.wait, 60)
        out = phase.summary()
        out["plain_pods_per_s"] = plain.summary()["pods_per_s"]
        out["x_plain"] = round(out["pods_per_s"] / out["plain_pods_per_s"], 2)
        out["plain"] = plain.summary()
        self.result[name] = out


def start_draxr(
    cp: ControlPlane, port: int, metrics_port: int, webhook_process: str | None, standby: bool = False
) -> DraxrProcess:
    """Leading (no leader election: it schedules every steered pod), or standing by behind the
    bench's Lease (as the second replica of the Deployment: watches and webhook, no writes)."""
    election = (
        ["--leader-elect", "true", "--leader-election-namespace", BENCH_NS] if standby else ["--leader-elect", "false"]
    )
    args = [
        "--kubeconfig", str(cp.kubeconfig), *election,
        "--bind-address", LOOPBACK, "--metrics-port", str(metrics_port), "--health-port", "0",
        "--webhook-port", str(port), "--webhook-namespace", BENCH_NS, "--webhook-extra-hosts", LOOPBACK,
        "--log-level", "warning",
    ]  # fmt: skip
    if webhook_process is not None:  # (unset: the default of the draxr being measured)
        args += ["--webhook-process", webhook_process]
    return DraxrProcess(args, new_session=True)


class LoneWebhook:
    """``draxr.webhook_child`` without the operator: this script sends it what the operator would
    (settings, draxr's certificate from its Secret, the mapping of the DeviceClasses)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: asyncio.subprocess.Process | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def start(self, kube: Kube) -> None:
        secret = await kube.get(SECRETS, "draxr-webhook-tls", BENCH_NS)
        pki = certs.Pki.from_secret_data(secret["data"])
        assert pki is not None
        mapping = build_mapping(await kube.list(DEVICE_CLASSES))
        ours, theirs = socket.socketpair()
        self.proc = await start_child(theirs)
        theirs.close()
        reader, self.writer = await asyncio.open_unix_connection(sock=ours)
        config = {"scheduler_name": "draxr", "bind_address": LOOPBACK, "port": self.port}
        for msg in (
            {"op": "config", **config, "log_level": "warning", "log_format": "json"},
            {"op": "cert", "tls_crt": pki.tls_crt.decode(), "tls_key": pki.tls_key.decode()},
            {"op": "mapping", "mapping": mapping_to_data(mapping)},
            {"op": "start"},
        ):
            self.writer.write(json.dumps(msg).encode() + b"\n")
        answer = json.loads(await reader.readline())
        if answer.get("op") != "serving":
            raise RuntimeError(f"the lone webhook did not serve: {answer}")

    async def stop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.proc is not None:
            await self.proc.wait()


def steering_policy(mapping: ExtendedResourceMapping, patch_type: str, label: str) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy and its binding that steer as the webhook does for the pods of this
    bench (containers' limits naming a mapped resource; default scheduler; not bound): a reference for
    the cost of the mutation when the API server makes no call, not a complete port of the verdict."""
    served = json.dumps({name: describe([name], mapping) for name in sorted(mapping.names)})

    def names(served_map: str) -> str:  # (match conditions see no variables: the map is repeated there)
        return (
            "object.spec.containers.map(c, has(c.resources) && has(c.resources.limits)"
            f" ? c.resources.limits.filter(k, k in {served_map}) : []).flatten()"
        )

    said = "variables.names.map(n, variables.served[n]).join('; ')"
    note = f"'schedulerName set to draxr by a MutatingAdmissionPolicy: requests ' + {said}"
    if patch_type == "JSONPatch":
        first = "JSONPatch{op: 'add', path: '/spec/schedulerName', value: 'draxr'}"
        one = f"JSONPatch{{op: 'add', path: '{STEERED_POINTER}', value: {note}}}"
        all_ = f"JSONPatch{{op: 'add', path: '/metadata/annotations', value: {{'{STEERED_ANNOTATION}': {note}}}}}"
        expression = f"[{first}, has(object.metadata.annotations) ? {one} : {all_}]"
        mutation = {"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}
    else:
        meta = f"Object.metadata{{annotations: {{'{STEERED_ANNOTATION}': {note}}}}}"
        expression = f"Object{{spec: Object.spec{{schedulerName: 'draxr'}}, metadata: {meta}}}"
        mutation = {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": expression}}
    default = "!has(object.spec.schedulerName) || object.spec.schedulerName == 'default-scheduler'"
    rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
    name = f"draxr-bench-{patch_type.lower()}"
    spec = {
        "failurePolicy": "Ignore",
        "reinvocationPolicy": "Never",
        "matchConstraints": {"resourceRules": [rule]},
        "variables": [
            {"name": "served", "expression": served},
            {"name": "names", "expression": names("variables.served")},
        ],
        "matchConditions": [
            {"name": "default-scheduler", "expression": default},
            {"name": "unbound", "expression": "!has(object.spec.nodeName) || object.spec.nodeName == ''"},
            {"name": "mapped", "expression": f"{names(served)}.size() > 0"},
        ],
        "mutations": [mutation],
    }
    binding = {"policyName": name, "matchResources": {"namespaceSelector": {"matchLabels": {label: "true"}}}}
    group = "admissionregistration.k8s.io/v1"
    return [
        {"apiVersion": group, "kind": "MutatingAdmissionPolicy", "metadata": {"name": name}, "spec": spec},
        {"apiVersion": group, "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": name}, "spec": binding},
    ]


async def hold_lease(kube: Kube) -> None:
    """The Lease draxr would take, held by someone else for an hour: a draxr started now stands by."""
    now = micro_time(datetime.now(UTC))
    spec = {"holderIdentity": "bench", "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "draxr"}, "spec": spec}
    await kube.create(LEASES, body, BENCH_NS)


async def steering(kube: Kube, namespace: str, alive: Callable[[], bool]) -> None:
    """Until a dry-run pod in ``namespace`` comes out steered (the webhook serves and is trusted)."""
    deadline = time.monotonic() + 90
    while True:
        probe = await kube.request("POST", PODS.path(namespace), pod(-1), query={"dryRun": "All"})
        if probe["spec"].get("schedulerName") == "draxr":
            return
        if time.monotonic() > deadline or not alive():
            raise RuntimeError("the webhook did not steer")
        await asyncio.sleep(0.2)


def leading(metrics_port: int) -> float | None:
    text = urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith('draxr_leader_election_master_status{name="draxr"}'):
            return float(line.split()[-1])
    return None


async def opted_in(kube: Kube, name: str) -> str:
    labels = {"draxr.io/enabled": "true"}
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
    )
    return name


async def run(args: argparse.Namespace, cp: ControlPlane) -> dict[str, Any]:
    async with await Kube.from_kubeconfig(cp.kubeconfig) as kube:
        for ns, labels in (("plain", {}), ("opted-in", {"draxr.io/enabled": "true"}), (BENCH_NS, {})):
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
            await kube.create(NAMESPACES, body)
        await fakedriver.apply(
            kube, [fakedriver.device_class("gpu", driver="gpu.example.com", extended_resource_name=RESOURCE)]
        )
        port, metrics_port = free_port(), free_port()
        kubectl = cp.binaries / "kubectl"
        config = await asyncio.to_thread(
            webhook_config, kubectl, cp.kubeconfig, f"https://{LOOPBACK}:{port}/mutate-pods"
        )
        await kube.create(MUTATING_WEBHOOKS, config)
        procs = {
            name: pid for name, pid in cp.pids.items() if name in ("etcd", "kube-apiserver", "kube-controller-manager")
        }
        draxr = start_draxr(cp, port, metrics_port, args.webhook_process)
        lone = LoneWebhook(port)
        phases = Phases(kube, procs, port, args)
        try:
            deadline = time.monotonic() + 60
            while True:
                mwc = await kube.get(MUTATING_WEBHOOKS, config["metadata"]["name"])
                if mwc["webhooks"][0]["clientConfig"].get("caBundle"):
                    break
                if time.monotonic() > deadline or draxr.poll() is not None:
                    raise RuntimeError("draxr did not set up its webhook")
                await asyncio.sleep(0.2)
            await steering(kube, "opted-in", lambda: draxr.poll() is None)
            log(f"webhook up on {LOOPBACK}:{port}; {args.pods} pods per phase, concurrency {args.concurrency}")
            procs["draxr"] = draxr.pid
            await phases.run(LEADING, "opted-in", metrics_port, draxr.pid)
            phases.result[LEADING]["leader"] = await asyncio.to_thread(leading, metrics_port)
            draxr.send_signal(signal.SIGTERM)
            await asyncio.to_thread(draxr.proc.wait, 30)
            await hold_lease(kube)
            draxr = start_draxr(cp, port, metrics_port, args.webhook_process, standby=True)
            procs["draxr"] = draxr.pid
            ns = await opted_in(kube, "opted-in-standby")
            await steering(kube, ns, lambda: draxr.poll() is None)
            await phases.run(STANDBY, ns, metrics_port, draxr.pid)
            phases.result[STANDBY]["leader"] = await asyncio.to_thread(leading, metrics_port)
            draxr.send_signal(signal.SIGTERM)
            await asyncio.to_thread(draxr.proc.wait, 30)
            del procs["draxr"]
            await phases.run("draxr stopped (opted-in, Ignore)", await opted_in(kube, "opted-in-2"))
            await lone.start(kube)
            assert lone.proc is not None
            procs["webhook process alone"] = lone.proc.pid
            ns = await opted_in(kube, "opted-in-3")
            await steering(kube, ns, lambda: lone.proc is not None and lone.proc.returncode is None)
            await phases.run("steered by the webhook process alone", ns, spied=lone.proc.pid)
            await lone.stop()
            del procs["webhook process alone"]
            mapping = build_mapping(await kube.list(DEVICE_CLASSES))
            for patch_type in ("JSONPatch", "ApplyConfiguration"):
                label = f"draxr.io/bench-{patch_type.lower()}"
                policy, binding = steering_policy(mapping, patch_type, label)
                await kube.create(POLICIES, policy)
                await kube.create(POLICY_BINDINGS, binding)
                ns = f"policy-{patch_type.lower()}"
                await kube.create(
                    NAMESPACES,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {label: "true"}}},
                )
                await steering(kube, ns, lambda: True)
                await phases.run(f"no webhook: a MutatingAdmissionPolicy ({patch_type})", ns)
            return phases.result
        finally:
            await lone.stop()
            if draxr.poll() is None:
                draxr.send_signal(signal.SIGKILL)
                draxr.proc.wait(10)


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000, help="pods per phase (at most 5000)")
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--out", type=Path, default=RESULTS / "webhook-admission.json")
    parser.add_argument(
        "--webhook-process", choices=("true", "false"), help="draxr's --webhook-process (default: draxr's default)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="each phase in this many batches, each after a plain one")
    parser.add_argument(
        "--profile",
        type=Path,
        help="py-spy the webhook's processes during the steered phases into this directory (best with --rounds 1)",
    )
    parser.add_argument(
        "--pprof", type=Path, help="kube-apiserver's CPU profiles (5 s, first round) into this directory"
    )
    args = parser.parse_args()
    args.pods = min(args.pods, 5000)
    for d in (args.profile, args.pprof):
        if d:
            d.mkdir(parents=True, exist_ok=True)
    extra = ("--profiling=true",) if args.pprof else ()  # (the dev control plane turns it off)
    options = Options(scheduler=False, kwok=False, apiserver_extra_args=extra)
    cp = ControlPlane(ensure_binaries(), Path(tempfile.mkdtemp(prefix="draxr-bench-webhook.")), options)
    cp.start()
    try:
        result = asyncio.run(run(args, cp))
    finally:
        cp.stop()
    head = ("phase", "pods", "steered", "pods/s", "plain pods/s", "x plain", "p50 ms", "p99 ms", "API server's call ms")
    rows: list[tuple[str, ...]] = [head]
    for phase, r in result.items():
        cells = (
            r["pods"],
            r["steered"],
            r["pods_per_s"],
            r["plain_pods_per_s"],
            r["x_plain"],
            r["p50_ms"],
            r["p99_ms"],
        )
        rows.append((phase, *map(str, cells), str(r.get("apiserver_webhook_call_mean_ms", "-"))))
    print(table(rows))
    names = sorted({k for r in result.values() for k in r["cpu_cores"]})
    print(
        table(
            [("phase (CPU, cores)", *names, "load avg")]
            + [
                (p, *(str(r["cpu_cores"].get(n, "-")) for n in names), str(r["load_average"]))
                for p, r in result.items()
            ]
        )
    )
    writes = sorted({k for r in result.values() for k in r["apiserver_writes"]})
    print(
        table(
            [("phase (API writes)", *writes, "webhook conns")]
            + [
                (p, *(str(r["apiserver_writes"].get(w, 0)) for w in writes), str(r["webhook_connections"]))
                for p, r in result.items()
            ]
        )
    )
    for name in (LEADING, STANDBY):
        h = result[name]
        print(
            f"{name}: draxr's handler mean {h.get('handler_mean_ms')} ms, p50 {h.get('handler_p50')}, "
            f"p99 {h.get('handler_p99')}; leader gauge {h.get('leader')}"
        )
    meta = {
        "pods": args.pods,
        "concurrency": args.concurrency,
        "rounds": args.rounds,
        "webhook_process": args.webhook_process,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**meta, "date": time.strftime("%Y-%m-%d"), "phases": result}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
