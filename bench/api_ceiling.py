"""The API server's ceiling for the extended-resource workload: a "scheduler" without decisions.

    .venv/bin/python bench/api_ceiling.py --kubeconfig K --scheduler-name draxr-ceiling --concurrency 32

It makes exactly the writes a scheduler must make for each pod, shaped by draxr's own functions
(draxr.core.claims), through draxr's own client (draxr.kube, the same rate limit):

1. create the special ResourceClaim, with its delete-protection finalizer;
2. write its allocation status (one device, chosen round-robin over the nodes' ResourceSlices);
3. patch the pod's ``status.extendedResourceClaimStatus``;
4. create the pod's Binding.

No filter, score or allocator runs: pods/s here is what the control plane (and this client) can
take on this box, the reference both schedulers are measured against. ``bench/e2e.py`` runs it as a
third scheduler (``--schedulers ceiling,kube-scheduler,draxr``) on the same control plane and
workload, and prints both schedulers as fractions of it. The process's CPU is reported next to its
pods/s: near one core means the Python client bounds the ceiling rather than the API server.

Pods of its scheduler name that are deleted get their claim released (finalizer off, claim
deleted), so the bench's clean-up between phases works as with draxr. Prints ``ceiling ready``
once its watch is open, and a line per 1,000 pods bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp

from draxr.core import claims as shape
from draxr.kube import NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES, ApiException, Kube, set_default_rate_limit

MERGE_PATCH = "application/merge-patch+json"


def log(msg: str) -> None:
    print(f"[ceiling {datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


def device_slots(slices: list[dict[str, Any]], ready_nodes: set[str]) -> list[tuple[str, str, str, str]]:
    """(node, driver, pool, device), interleaved over the nodes: node 0's first device, node 1's
    first device, ..., then every node's second device (round-robin, no decision)."""
    per_node: dict[str, list[tuple[str, str, str, str]]] = {}
    for s in sorted(slices, key=lambda s: s["metadata"]["name"]):
        spec = s.get("spec") or {}
        node = spec.get("nodeName")
        if not node or node not in ready_nodes:
            continue
        pool = (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or ():
            per_node.setdefault(node, []).append((node, spec["driver"], pool, d["name"]))
    columns = [per_node[n] for n in sorted(per_node)]
    depth = max((len(c) for c in columns), default=0)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def requested(pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The special claim's requests and the pod's request mappings for a one-container pod with one
    extended resource, named as kube-scheduler names them (container-<i>-request-<j>). The bench's
    DeviceClasses are ``gpu-<k>`` for ``example.com/gpu-<k>``."""
    requests, mappings = [], []
    for ci, c in enumerate(pod["spec"]["containers"]):
        limits = (c.get("resources") or {}).get("limits") or {}
        for ri, (resource, count) in enumerate(sorted(limits.items())):
            name = f"container-{ci}-request-{ri}"
            cls = resource.split("/", 1)[1]
            requests.append(
                {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": int(count)}}
            )
            mappings.append({"containerName": c["name"], "resourceName": resource, "requestName": name})
    return requests, mappings


def allocation(requests: list[dict[str, Any]], slots: list[tuple[str, str, str, str]], k: int) -> dict[str, Any]:
    """Round-robin devices from slot ``k`` on, all on the node of the first (a pod's devices share one node)."""
    node = slots[k % len(slots)][0]
    on_node = [s for s in slots if s[0] == node]
    start = on_node.index(slots[k % len(slots)])
    results, i = [], start
    for r in requests:
        for _ in range(r["exactly"]["count"]):
            _, driver, pool, device = on_node[i % len(on_node)]
            results.append({"request": r["name"], "driver": driver, "pool": pool, "device": device})
            i += 1
    return {
        "devices": {"results": results, "config": []},
        "nodeSelector": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        },
    }


class Ceiling:
    def __init__(self, kube: Kube, scheduler: str, concurrency: int, slots: list[tuple[str, str, str, str]]) -> None:
        self.kube, self.scheduler, self.concurrency, self.slots = kube, scheduler, concurrency, slots
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.releases: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.taken: set[str] = set()  # pod uids handed to a worker
        self.claims: dict[str, tuple[str, str]] = {}  # pod uid -> (namespace, claim name)
        self.next_slot = 0
        self.bound = 0
        self.failed = 0

    async def bind(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        requests, mappings = requested(pod)
        k, self.next_slot = self.next_slot, self.next_slot + sum(r["exactly"]["count"] for r in requests)
        claim = await self.kube.create(RESOURCE_CLAIMS, shape.special_claim(pod, requests), ns)
        claim_name = claim["metadata"]["name"]
        self.claims[meta["uid"]] = (ns, claim_name)
        status = shape.allocated_status(pod, allocation(requests, self.slots, k), datetime.now(UTC))
        await self.kube.replace(RESOURCE_CLAIMS, {**claim, "status": status}, ns, subresource="status")
        patch = shape.pod_status_patch(claim_name, mappings)
        await self.kube.patch(PODS, name, patch, ns, subresource="status", content_type=MERGE_PATCH)
        node = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": ns, "uid": meta["uid"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.kube.create(PODS, binding, ns, name=name, subresource="binding")

    async def binder(self) -> None:
        while True:
            pod = await self.queue.get()
            try:
                await self.bind(pod)
                self.bound += 1
                if self.bound % 1000 == 0:
                    log(f"{self.bound} pods bound")
            except ApiException as e:
                self.failed += 1
                log(f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']}: {e.status} {e.reason}")

    async def releaser(self) -> None:
        while True:
            ns, claim = await self.releases.get()
            with contextlib.suppress(ApiException):
                patch = {"metadata": {"finalizers": None}}
                await self.kube.patch(RESOURCE_CLAIMS, claim, patch, ns, content_type=MERGE_PATCH)
                await self.kube.delete(RESOURCE_CLAIMS, claim, ns)

    def on_event(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            claim = self.claims.pop(uid, None)
            if claim is not None:
                self.releases.put_nowait(claim)
            return
        if uid in self.taken or (pod.get("spec") or {}).get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            return
        self.taken.add(uid)
        self.queue.put_nowait(pod)

    async def watch(self, ready: asyncio.Event) -> None:
        selector = f"spec.schedulerName={self.scheduler}"
        rv = ""
        while True:
            if not rv:
                listed = await self.kube.request("GET", PODS.path(), query={"fieldSelector": selector})
                rv = listed["metadata"]["resourceVersion"]
                for item in listed.get("items") or ():
                    self.on_event("ADDED", item)
            query = {"watch": "1", "fieldSelector": selector, "resourceVersion": rv, "allowWatchBookmarks": "true"}
            try:
                async with await self.kube.stream(PODS.path(), query) as resp:
                    if resp.status == 410:
                        rv = ""
                        continue
                    ready.set()
                    async for line in resp.content:
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            rv = ""
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                            self.on_event(event["type"], obj)
            except (TimeoutError, aiohttp.ClientError) as e:
                log(f"watch interrupted ({e!r}); reconnecting")
                await asyncio.sleep(0.5)


async def run(args: argparse.Namespace) -> int:
    set_default_rate_limit(args.qps, args.burst)
    async with await Kube.from_kubeconfig(args.kubeconfig) as kube:
        nodes = await kube.list(NODES)
        ready = {
            n["metadata"]["name"]
            for n in nodes
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in n["status"].get("conditions") or ())
        }
        slots = device_slots(await kube.list(RESOURCE_SLICES), ready)
        if not slots:
            log("no devices on Ready nodes")
            return 1
        ceiling = Ceiling(kube, args.scheduler_name, args.concurrency, slots)
        watching = asyncio.Event()
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(ceiling.watch(watching))]
        tasks += [asyncio.create_task(ceiling.binder()) for _ in range(args.concurrency)]
        tasks += [asyncio.create_task(ceiling.releaser()) for _ in range(8)]
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await watching.wait()
        log(f"ceiling ready: {len(slots)} devices on {len(ready)} nodes, concurrency {args.concurrency}")
        t0 = time.monotonic()
        waiter: asyncio.Task[Any] = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([waiter, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        crashed = [t for t in done if t is not waiter and not t.cancelled() and t.exception() is not None]
        for t in crashed:
            log(f"task failed: {t.exception()!r}")
        log(f"stopped after {time.monotonic() - t0:.0f}s: {ceiling.bound} bound, {ceiling.failed} failed")
        return 1 if crashed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--scheduler-name", default="draxr-ceiling")
    p.add_argument("--concurrency", type=int, default=32, help="pods written at once")
    p.add_argument("--qps", type=float, default=500, help="client QPS (the schedulers' in bench/e2e.py)")
    p.add_argument("--burst", type=int, default=1000)
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
