"""A fake kubelet pod-resources server: the generated ``v1.PodResourcesLister`` servicer on a real
grpc.aio server on a unix socket, answering ``List`` with what the test sets. For the node agent's
tests (no kubelet needed); ``Get`` and ``GetAllocatableResources`` answer UNIMPLEMENTED."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import grpc

from draxr.podresources import api_pb2, api_pb2_grpc

# container name -> [(resource name, device IDs), ...]: one ContainerDevices entry per tuple
Containers = Mapping[str, Iterable[tuple[str, Iterable[str]]]]


def pod_resources(namespace: str, name: str, containers: Containers, dynamic: Mapping[str, str] | None = None) -> Any:
    """A ``PodResources`` message; ``dynamic`` (container -> claim name) adds a DRA entry to it."""
    out = []
    for cname, devices in containers.items():
        ctr = api_pb2.ContainerResources(
            name=cname,
            devices=[api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids)) for r, ids in devices],
        )
        if dynamic and cname in dynamic:
            ctr.dynamic_resources.append(
                api_pb2.DynamicResource(
                    claim_name=dynamic[cname],
                    claim_namespace=namespace,
                    claim_resources=[
                        api_pb2.ClaimResource(driver_name="gpu.example.com", pool_name="p", device_name="gpu-9")
                    ],
                )
            )
        out.append(ctr)
    return api_pb2.PodResources(namespace=namespace, name=name, containers=out)


class FakeLister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.pods: list[Any] = []
        self.calls = 0
        self.fail: grpc.StatusCode | None = None  # answer List with this status instead

    async def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        if self.fail is not None:
            await context.abort(self.fail, f"fake kubelet: {self.fail.name}")
        return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods))


class FakeKubelet:
    """``async with FakeKubelet() as k``: ``k.socket`` serves List; set ``k.lister.pods``. The socket
    lives in a short temp dir of its own (unix socket paths are limited to 107 bytes)."""

    def __init__(self, socket: Path | None = None) -> None:
        self._dir = None if socket is not None else Path(tempfile.mkdtemp(prefix="draxr-pr."))
        self.socket = (socket or self._dir / "kubelet.sock").absolute()  # type: ignore[operator]
        self.lister = FakeLister()
        self.server: Any = None

    async def start(self) -> FakeKubelet:
        self.server = grpc.aio.server()
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.lister, self.server)  # type: ignore[no-untyped-call]
        self.server.add_insecure_port(f"unix://{self.socket}")
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    async def __aenter__(self) -> FakeKubelet:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
