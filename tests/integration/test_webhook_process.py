"""The admission webhook's server process (``--webhook-process true``) on the real control
plane: a child that dies is restarted and steers again; one that cannot come back fails /healthz
and ends the operator; every mapping change (DeviceClass, ExtendedResourceMapping) reaches it; what
it counts lands in the operator's metrics. (Certificate rotation through the process:
test_webhook.py's rotation and cert-manager tests, which run on it.)"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from draxr.app import Operator
from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import DEVICE_CLASSES, Kube
from draxr.mapping_status import MAPPINGS
from draxr.webhook_proc import WebhookProcess
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.controlplane import ControlPlane, free_port

from .helpers import Draxr, eventually
from .test_liveness import http_get
from .test_mapping_crd import mapping as mapping_cr
from .test_webhook import ENABLED, bare_pod, dry_run, labelled_namespace, mapped


def process_of(op: Operator) -> WebhookProcess:
    assert isinstance(op.webhook, WebhookProcess), "the session's webhook is not served by a process"
    return op.webhook


def note(p: dict[str, Any]) -> str | None:
    """The steering annotation, if the pod was steered to draxr."""
    if p["spec"].get("schedulerName") != "draxr":
        return None
    return str((p["metadata"].get("annotations") or {}).get(STEERED_ANNOTATION) or "") or None


def admissions(result: str) -> float:
    return REGISTRY.get_sample_value("draxr_webhook_admissions_total", {"result": result}) or 0.0


async def test_a_webhook_process_that_dies_is_restarted_and_steers_again(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str
) -> None:
    resource = await mapped(webhook_ready, fleet)
    proc = process_of(webhook_ready)
    old, restarts = proc.pid, proc.restarts
    assert old is not None
    assert proc.alive()
    os.kill(old, signal.SIGKILL)

    async def replaced() -> bool:
        return proc.pid != old and proc.alive() and not proc.problems()

    await eventually(replaced, timeout=60)
    assert proc.restarts == restarts + 1
    assert webhook_ready.health.problems() == []
    async with labelled_namespace(kube, f"{names}-on", ENABLED) as ns:

        async def steered_again() -> str | None:  # (the API server's first call may still fail open)
            return note(await dry_run(kube, ns, bare_pod("probe", {resource: "1"})))

        await eventually(steered_again, timeout=30)


async def test_mapping_changes_reach_the_webhook_process_and_its_counts_the_metrics(
    kube: Kube, fleet: fakedriver.Fleet, webhook_ready: Operator, names: str, mapping_crd: None
) -> None:
    """A new DeviceClass name, an ExtendedResourceMapping over it, and both going away: each change
    shows in the answers of the session's server process, and each answer in the operator's metrics."""
    await mapped(webhook_ready, fleet)
    process_of(webhook_ready)
    cls, cr = f"{names}-new", f"{names}-cr"
    explicit, overridden = f"{names}.example.com/new", f"{names}.example.com/mapped"
    async with labelled_namespace(kube, f"{names}-on", ENABLED) as ns:

        async def answer(resource: str) -> str | None:
            return note(await dry_run(kube, ns, bare_pod("probe", {resource: "1"})))

        before = admissions("unchanged")
        assert await answer(explicit) is None
        await eventually(lambda: _grew("unchanged", before), timeout=30)

        steered_before = admissions("steered")
        await kube.create(
            DEVICE_CLASSES, fakedriver.device_class(cls, driver=fleet.driver, extended_resource_name=explicit)
        )
        try:

            async def explicit_steered() -> str | None:
                got = await answer(explicit)
                return got if got and f"{explicit} -> DeviceClass {cls} (explicit)" in got else None

            await eventually(explicit_steered, timeout=30)
            await eventually(lambda: _grew("steered", steered_before), timeout=30)

            await kube.create(MAPPINGS, mapping_cr(cr, overridden, [cls]))
            try:

                async def overridden_steered() -> str | None:
                    got = await answer(overridden)
                    return got if got and f"(ExtendedResourceMapping {cr})" in got else None

                await eventually(overridden_steered, timeout=30)
            finally:
                await kube.delete_if_exists(MAPPINGS, cr)

            async def override_gone() -> bool:
                return await answer(overridden) is None

            await eventually(override_gone, timeout=30)
        finally:
            await kube.delete_if_exists(DEVICE_CLASSES, cls)

        async def class_gone() -> bool:
            return await answer(explicit) is None

        await eventually(class_gone, timeout=30)


async def _grew(result: str, before: float) -> bool:
    return admissions(result) > before


@pytest.fixture
def taken_port() -> Iterator[socket.socket]:
    """A listening socket on 127.0.0.1 (bound once its port is free), closed after the test."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        yield sock
    finally:
        sock.close()


async def test_a_webhook_process_that_cannot_come_back_fails_liveness_and_ends_the_operator(
    kube: Kube, control_plane: ControlPlane, namespace: str, names: str, tmp_path: Path, taken_port: socket.socket
) -> None:
    """The child is killed while the operator is stopped (SIGSTOP), and its port taken before the
    operator runs on (SIGCONT): every restart fails to bind, /healthz says so, and the operator
    exits non-zero by itself, leaving no server process behind."""
    port = free_port()
    draxr = Draxr(
        control_plane,
        None,
        f"draxr-{names}",
        tmp_path / "draxr.log",
        health=True,
        extra=[
            "--leader-elect", "false",
            "--webhook-process", "true",
            "--webhook-port", str(port),
            "--webhook-namespace", namespace,
            "--webhook-secret-name", names,
            "--webhook-configuration-name", names,  # (none: the session's caBundle stays the session's)
            "--webhook-extra-hosts", "127.0.0.1",
            "--liveness-exit-seconds", "20",  # (room for a restart that fails to show in /healthz first)
        ],
    )  # fmt: skip
    stopped = False
    try:

        async def serving() -> int | None:
            pids = [line.get("process") for line in draxr.lines() if line.get("event") == "admission webhook serving"]
            return pids[-1] if pids else None

        child = await draxr.until(serving, timeout=90)
        assert isinstance(child, int)
        status, body = await asyncio.to_thread(http_get, draxr.health_port, "/healthz")
        assert status == 200, body

        os.kill(draxr.pid, signal.SIGSTOP)
        stopped = True
        os.kill(child, signal.SIGKILL)

        async def port_taken() -> bool:
            try:
                taken_port.bind(("127.0.0.1", port))
            except OSError:  # the killed child's socket is not closed yet
                return False
            taken_port.listen()
            return True

        await eventually(port_taken, timeout=30)
        os.kill(draxr.pid, signal.SIGCONT)
        stopped = False

        async def failing() -> str | None:  # (first "exited with code -9", then the failed restarts)
            status, body = await asyncio.to_thread(http_get, draxr.health_port, "/healthz")
            return body if status == 503 and "could not start" in body else None

        body = await draxr.until(failing, timeout=60)
        assert "webhook server process down for" in body, body

        async def exited() -> int | None:
            return draxr.proc.poll()

        code = await eventually(exited, timeout=60)
        assert code != 0, draxr.text()[-3000:]
        lines = draxr.lines()
        exits = [line for line in lines if line.get("event") == "liveness failed: exiting"]
        assert exits, draxr.text()[-3000:]
        assert any(p.startswith("webhook server process down for") for p in exits[0]["problems"]), exits
        restarted = [line for line in lines if line.get("event") == "webhook server process ended: restarting it"]
        assert restarted, draxr.text()[-3000:]
        assert restarted[0]["why"] == "exited with code -9", restarted[0]

        async def no_child_left() -> bool:
            return not any(_running(p) for p in (child, *_started(draxr)))

        await eventually(no_child_left, timeout=30)
    finally:
        if stopped:
            os.kill(draxr.pid, signal.SIGCONT)
        if draxr.proc.poll() is None:
            draxr.stop()


def _started(draxr: Draxr) -> list[int]:
    """The pids of the server processes the operator started (logged at each restart's failure too)."""
    return [int(line["process"]) for line in draxr.lines() if isinstance(line.get("process"), int)]


def _running(pid: int) -> bool:
    """The process exists and has not exited (a zombie waiting to be reaped has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")
