"""What the admission webhook costs pod creation: the same pods created in a namespace the webhook
does not see, in an opted-in namespace (draxr steers every pod), and there again with draxr stopped
(failurePolicy Ignore: connection refused, pods admitted unchanged).

    .venv/bin/python bench/webhook_admission.py --pods 1000 --concurrency 16

A fresh control plane on 127.0.0.1 (no kube-scheduler, no kwok: pods stay Pending, so only admission
is measured), one DeviceClass mapping ``example.com/gpu``, the manifests' MutatingWebhookConfiguration
pointed at ``draxr run`` on a loopback port by url. Latency is the bench client's create request,
end to end. Results: a table on stdout and bench/results/webhook-admission.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from draxr.kube import NAMESPACES, PODS, Kube
from draxr.webhook_tls import MUTATING_WEBHOOKS
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane, Options, free_port
from draxr_dev.devcluster.process import DraxrProcess

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
RESOURCE = "example.com/gpu"


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


async def create_all(kube: Kube, namespace: str, pods: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    steered = 0
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        nonlocal steered
        async with sem:
            t0 = time.perf_counter()
            created = await kube.create(PODS, pod(i), namespace)
            latencies.append(time.perf_counter() - t0)
            steered += created["spec"].get("schedulerName") == "draxr"

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(pods)))
    wall = time.perf_counter() - t0
    return {
        "pods": pods,
        "steered": steered,
        "pods_per_s": round(pods / wall, 1),
        "p50_ms": round(pct(latencies, 0.5) * 1000, 2),
        "p90_ms": round(pct(latencies, 0.9) * 1000, 2),
        "p99_ms": round(pct(latencies, 0.99) * 1000, 2),
    }


def webhook_metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=10).read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("draxr_webhook_duration_seconds_sum", "draxr_webhook_duration_seconds_count")):
            name, value = line.split()
            found[name] = float(value)
    return found


def start_draxr(cp: ControlPlane, port: int, metrics_port: int) -> DraxrProcess:
    args = [
        "--kubeconfig", str(cp.kubeconfig), "--leader-elect", "false",
        "--bind-address", LOOPBACK, "--metrics-port", str(metrics_port), "--health-port", "0",
        "--webhook-port", str(port), "--webhook-namespace", "draxr-bench", "--webhook-extra-hosts", LOOPBACK,
        "--log-level", "warning",
    ]  # fmt: skip
    return DraxrProcess(args, new_session=True)


async def run(args: argparse.Namespace, cp: ControlPlane) -> dict[str, Any]:
    async with await Kube.from_kubeconfig(cp.kubeconfig) as kube:
        for ns, labels in (("plain", {}), ("opted-in", {"draxr.io/enabled": "true"}), ("draxr-bench", {})):
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
        draxr = start_draxr(cp, port, metrics_port)
        try:
            deadline = time.monotonic() + 60
            while True:
                mwc = await kube.get(MUTATING_WEBHOOKS, config["metadata"]["name"])
                if mwc["webhooks"][0]["clientConfig"].get("caBundle"):
                    break
                if time.monotonic() > deadline or draxr.poll() is not None:
                    raise RuntimeError("draxr did not set up its webhook")
                await asyncio.sleep(0.2)
            await asyncio.sleep(2)  # serving, and the API server has the caBundle
            log(f"webhook up on {LOOPBACK}:{port}; {args.pods} pods per phase, concurrency {args.concurrency}")
            result: dict[str, Any] = {}
            result["not called (namespace without the label)"] = await create_all(
                kube, "plain", args.pods, args.concurrency
            )
            before = await asyncio.to_thread(webhook_metrics, metrics_port)
            result["steered (opted-in namespace)"] = await create_all(kube, "opted-in", args.pods, args.concurrency)
            after = await asyncio.to_thread(webhook_metrics, metrics_port)
            served = after["draxr_webhook_duration_seconds_count"] - before.get(
                "draxr_webhook_duration_seconds_count", 0
            )
            spent = after["draxr_webhook_duration_seconds_sum"] - before.get("draxr_webhook_duration_seconds_sum", 0)
            result["steered (opted-in namespace)"]["webhook_handler_mean_ms"] = round(spent / served * 1000, 3)
            draxr.send_signal(signal.SIGTERM)
            await asyncio.to_thread(draxr.proc.wait, 30)
            ns2 = "opted-in-2"
            await kube.create(
                NAMESPACES,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": ns2, "labels": {"draxr.io/enabled": "true"}},
                },
            )
            result["draxr stopped (opted-in, Ignore)"] = await create_all(kube, ns2, args.pods, args.concurrency)
            return result
        finally:
            if draxr.poll() is None:
                draxr.send_signal(signal.SIGKILL)
                draxr.proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000, help="pods per phase (at most 5000)")
    parser.add_argument("--concurrency", type=int, default=16, help="create requests in flight")
    parser.add_argument("--out", type=Path, default=RESULTS / "webhook-admission.json")
    args = parser.parse_args()
    args.pods = min(args.pods, 5000)
    cp = ControlPlane(
        ensure_binaries(), Path(tempfile.mkdtemp(prefix="draxr-bench-webhook.")), Options(scheduler=False, kwok=False)
    )
    cp.start()
    try:
        result = asyncio.run(run(args, cp))
    finally:
        cp.stop()
    rows = [("phase", "pods", "steered", "pods/s", "p50 ms", "p90 ms", "p99 ms", "handler mean ms")]
    for phase, r in result.items():
        rows.append(
            (
                phase,
                str(r["pods"]),
                str(r["steered"]),
                str(r["pods_per_s"]),
                str(r["p50_ms"]),
                str(r["p90_ms"]),
                str(r["p99_ms"]),
                str(r.get("webhook_handler_mean_ms", "-")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    table = "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"pods": args.pods, "concurrency": args.concurrency, "phases": result}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
