"""A fake DRA driver: fake nodes (managed by kwok), one ResourceSlice per node and DeviceClasses.

Nothing runs on the nodes; the objects only have to look like what a real driver publishes.
Node addresses are labels only.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid as uuidlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from draxr.kube import DEVICE_CLASSES, JSON, NODES, RESOURCE_SLICES, ApiException, Kube, Resource

DRIVER = "gpu.example.com"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
FLEET_LABEL = "draxr.io/fake-fleet"


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[JSON] | None = None,
    extended: dict[str, str] | None = None,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
) -> JSON:
    """A kwok-managed Node. ``extended`` adds device-plugin style allocatable such as
    ``{"example.com/gpu": "4"}``: that node then serves the name by device plugin, not DRA."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods, **(extended or {})}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "spec": {"taints": list(taints or [])},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def device(
    name: str,
    *,
    model: str = "fake-a100",
    numa: int = 0,
    memory: str = "80Gi",
    driver_version: str = "1.2.3",
    uid: str | None = None,
    taints: list[JSON] | None = None,
) -> JSON:
    dev: JSON = {
        "name": name,
        "attributes": {
            "model": {"string": model},
            "uuid": {"string": uid or str(uuidlib.uuid4())},
            "driverVersion": {"version": driver_version},
            "numa": {"int": numa},
        },
        "capacity": {"memory": {"value": memory}},
    }
    if taints:
        dev["taints"] = taints
    return dev


def resource_slice(
    node_name: str,
    devices: list[JSON],
    *,
    driver: str = DRIVER,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    name: str | None = None,
    labels: dict[str, str] | None = None,
) -> JSON:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": name or f"{node_name}-{driver.replace('.', '-')}",
            "labels": dict(labels or {}),
        },
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": pool or node_name, "generation": generation, "resourceSliceCount": slice_count},
            "devices": devices,
        },
    }


def device_class(
    name: str,
    *,
    driver: str = DRIVER,
    extended_resource_name: str | None = None,
    extra_selectors: list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> JSON:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
    selectors += [{"cel": {"expression": expr}} for expr in extra_selectors or []]
    spec: JSON = {"selectors": selectors}
    if extended_resource_name:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


@dataclass
class Fleet:
    """A fleet of fake GPU nodes.

    ``dra_nodes`` nodes publish ``devices_per_node`` devices each through ResourceSlices;
    ``device_plugin_nodes`` nodes advertise ``device_plugin_resource`` in allocatable instead.
    ``classes`` maps DeviceClass name to its extendedResourceName (None: implicit name only).
    """

    prefix: str = "gpu-node"
    dra_nodes: int = 2
    device_plugin_nodes: int = 0
    devices_per_node: int = 8
    driver: str = DRIVER
    models: tuple[str, ...] = ("fake-a100",)
    numa_nodes: int = 2
    device_plugin_resource: str = "example.com/gpu"
    classes: dict[str, str | None] = field(default_factory=lambda: {"gpu.example.com": "example.com/gpu"})
    node_taints: list[JSON] = field(default_factory=list)
    zones: tuple[str, ...] = ()  # node i gets topology.kubernetes.io/zone zones[i % len(zones)]

    def node_names(self) -> list[str]:
        total = self.dra_nodes + self.device_plugin_nodes
        return [f"{self.prefix}-{i}" for i in range(total)]

    def manifests(self) -> list[JSON]:
        labels = {FLEET_LABEL: self.prefix}
        objs: list[JSON] = []
        for cls, ext in self.classes.items():
            objs.append(device_class(cls, driver=self.driver, extended_resource_name=ext, labels=labels))
        for i, name in enumerate(self.node_names()):
            if i < self.dra_nodes:
                model = self.models[i % len(self.models)]
                node_labels = {**labels, "draxr.io/gpu-model": model}
                if self.zones:
                    node_labels["topology.kubernetes.io/zone"] = self.zones[i % len(self.zones)]
                objs.append(node(name, labels=node_labels, taints=self.node_taints))
                per_numa = max(1, self.devices_per_node // max(1, self.numa_nodes))
                devs = [
                    device(
                        f"gpu-{d}",
                        model=model,
                        numa=d // per_numa,
                        uid=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{name}.gpu-{d}")),
                    )
                    for d in range(self.devices_per_node)
                ]
                objs.append(resource_slice(name, devs, driver=self.driver, labels=labels))
            else:
                objs.append(
                    node(
                        name,
                        labels=labels,
                        taints=self.node_taints,
                        extended={self.device_plugin_resource: str(self.devices_per_node)},
                    )
                )
        return objs


_KINDS: dict[str, Resource] = {"Node": NODES, "ResourceSlice": RESOURCE_SLICES, "DeviceClass": DEVICE_CLASSES}


async def apply(kube: Kube, objs: list[JSON]) -> None:
    """Create the objects; replace those that already exist (idempotent for the demo and bench).
    Node status is written through the status subresource so that allocatable sticks on re-apply."""
    for obj in objs:
        res = _KINDS[obj["kind"]]
        try:
            await kube.create(res, obj)
        except ApiException as e:
            if e.status != 409:
                raise
            current = await kube.get(res, obj["metadata"]["name"])
            body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}}
            await kube.replace(res, body)
            if obj["kind"] == "Node":
                await kube.patch(res, obj["metadata"]["name"], {"status": obj["status"]}, subresource="status")


async def delete(kube: Kube, objs: list[JSON]) -> None:
    for obj in reversed(objs):
        await kube.delete_if_exists(_KINDS[obj["kind"]], obj["metadata"]["name"])


async def wait_nodes_ready(kube: Kube, names: list[str], timeout: float = 90.0) -> None:
    """Wait until kwok reports the nodes Ready and KCM has removed the not-ready taint."""
    deadline = asyncio.get_running_loop().time() + timeout
    pending = set(names)
    while pending:
        for name in sorted(pending):
            n = await kube.get(NODES, name)
            if _ready(n):
                pending.discard(name)
        if not pending:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"nodes not Ready and untainted after {timeout:.0f}s: {sorted(pending)}")
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def deployed(kube: Kube, fleet: Fleet, *, ready: bool = True) -> AsyncIterator[list[JSON]]:
    """The fleet's objects exist (and its nodes are Ready) inside the block, and are deleted after."""
    objs = fleet.manifests()
    await apply(kube, objs)
    try:
        if ready:
            await wait_nodes_ready(kube, fleet.node_names())
        yield objs
    finally:
        await delete(kube, objs)


def _ready(n: JSON) -> bool:
    conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
    taints = [t["key"] for t in n.get("spec", {}).get("taints", []) or []]
    return conds.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints


def summary(objs: list[JSON]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for o in objs:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    return kinds
