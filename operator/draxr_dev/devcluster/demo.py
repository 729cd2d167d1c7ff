"""The demo workload: a Job whose pods ask for `example.com/gpu: 2` the device-plugin way, scheduled
by draxr onto DRA devices; prints pod -> node -> claim -> devices as it happens, then shows that
the claims are released when the pods complete."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from draxr.kube import NAMESPACES, PODS, RESOURCE_CLAIMS, ApiException, Kube, Resource

from .controlplane import RUN_FOR_ANNOTATION

JOBS = Resource("batch", "v1", "jobs", True)
NAMESPACE = "demo"


def job(name: str, completions: int, parallelism: int, gpus: int, scheduler: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": {RUN_FOR_ANNOTATION: "4s"}},
                "spec": {
                    "schedulerName": scheduler,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.invalid/trainer:1",
                            "resources": {"limits": {"example.com/gpu": str(gpus), "cpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


async def run(kubeconfig: Path, scheduler: str = "draxr", timeout: float = 180) -> int:
    async with await Kube.from_kubeconfig(kubeconfig) as kube:
        try:
            await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except ApiException as e:
            if e.status != 409:
                raise
        name = f"train-{int(time.time()) % 100000}"
        await kube.create(JOBS, job(name, completions=6, parallelism=3, gpus=2, scheduler=scheduler), NAMESPACE)
        print(f"submitted Job {NAMESPACE}/{name}: 6 pods, 3 at a time, each limits example.com/gpu: 2")
        seen: set[str] = set()
        done: set[str] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = [p for p in await kube.list(PODS, NAMESPACE) if p["metadata"]["name"].startswith(name)]
            claims = {c["metadata"]["name"]: c for c in await kube.list(RESOURCE_CLAIMS, NAMESPACE)}
            for p in pods:
                pname = p["metadata"]["name"]
                ercs = p.get("status", {}).get("extendedResourceClaimStatus")
                node = p["spec"].get("nodeName")
                if pname not in seen and node and ercs:
                    seen.add(pname)
                    claim = claims.get(ercs["resourceClaimName"], {})
                    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
                    devices = ", ".join(f"{r['pool']}/{r['device']}" for r in results)
                    print(f"  {pname:<20} -> {node:<12} claim {ercs['resourceClaimName']} [{devices}]")
                elif pname not in seen and node and p.get("status", {}).get("phase") in ("Running", "Succeeded"):
                    seen.add(pname)  # bound to a node that serves the name by device plugin: no claim
                    print(f"  {pname:<20} -> {node:<12} device plugin (allocatable), no claim")
                if p.get("status", {}).get("phase") == "Succeeded" and pname not in done:
                    done.add(pname)
                    print(f"  {pname:<20} completed")
            if len(done) >= 6:
                left = [
                    c
                    for c in await kube.list(RESOURCE_CLAIMS, NAMESPACE)
                    if any(c["metadata"]["name"].startswith(d) for d in done)
                ]
                if not left:
                    print("all pods completed; their claims were released (0 left in the namespace)")
                    return 0
            await asyncio.sleep(0.5)
        print("timed out waiting for the Job; see .dev/draxr.log")
        return 1
