"""Liveness that means it: a watch that cannot come back fails /healthz and ends the process.

draxr runs as its Deployment would (in-cluster, a ServiceAccount bound to the manifests'
ClusterRole). Then the binding is deleted: open watch streams keep flowing until the server ends
them (``--watch-timeout-seconds 3``), after which every re-open is refused (403). Nothing heals
that without an admin, so no watch makes progress again: /healthz must turn 503 naming the watch,
and the process must exit non-zero by itself.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

from draxr.kube import CLUSTER_ROLE_BINDINGS, SERVICE_ACCOUNTS, Kube
from draxr_dev.devcluster.controlplane import ControlPlane

from .clusters import service_account_dir
from .test_install import NAMESPACE, Draxr
from .test_install import installed as installed  # the fixture
from .test_platform import eventually


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:  # not listening (yet, or any more)
        return 0, str(e.reason)


async def test_a_watch_that_cannot_come_back_fails_liveness_and_ends_the_process(
    kube: Kube, control_plane: ControlPlane, installed: object, names: str, tmp_path: Path
) -> None:
    sa = f"doomed-{names}"
    await kube.create(
        SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}, NAMESPACE
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": sa},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "draxr"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}],
    }
    await kube.create(CLUSTER_ROLE_BINDINGS, binding)
    sa_dir = await service_account_dir(kube, control_plane, NAMESPACE, sa, tmp_path / "sa")
    draxr = Draxr(
        control_plane,
        sa_dir,
        f"draxr-{names}",
        tmp_path / "draxr.log",
        health=True,
        extra=[
            "--leader-elect", "false",
            "--watch-timeout-seconds", "3",
            "--watch-deadline-seconds", "8",
            "--liveness-exit-seconds", "5",
        ],
    )  # fmt: skip
    try:

        async def ready() -> bool:
            return (await asyncio.to_thread(http_get, draxr.health_port, "/readyz"))[0] == 200

        await draxr.until(ready, timeout=60)
        status, body = await asyncio.to_thread(http_get, draxr.health_port, "/healthz")
        assert status == 200, body

        await kube.delete(CLUSTER_ROLE_BINDINGS, sa)
        revoked = time.monotonic()

        async def failing() -> str | None:
            status, body = await asyncio.to_thread(http_get, draxr.health_port, "/healthz")
            return body if status == 503 else None

        body = await draxr.until(failing, timeout=60)
        # Which watches are stale first depends on when each stream's 3 s ran out; all are refused.
        assert re.search(r"^watch \w+: no progress for \d+s \(deadline 8s, backing-off\)$", body, re.M), body

        async def exited() -> int | None:
            return draxr.proc.poll()

        code = await eventually(exited, timeout=30)
        assert code != 0, draxr.text()[-3000:]
        lines = draxr.lines()
        exits = [line for line in lines if line.get("event") == "liveness failed: exiting"]
        assert exits, draxr.text()[-3000:]
        assert any(re.match(r"watch \w+: no progress for", p) for p in exits[0]["problems"]), exits
        # Each refused re-open was counted as a loop error of its watch, kind forbidden.
        refused = [
            line
            for line in lines
            if line.get("event") == "loop step failed, retrying" and line.get("kind") == "forbidden"
        ]
        assert len({line["loop"] for line in refused if line["loop"].startswith("watch-")}) >= 2, refused[:5]
        print(f"\n[liveness] binding deleted -> process exited: {time.monotonic() - revoked:.1f}s (code {code})")
    finally:
        if draxr.proc.poll() is None:
            draxr.stop()
        await kube.delete_if_exists(CLUSTER_ROLE_BINDINGS, sa)
        await kube.delete_if_exists(SERVICE_ACCOUNTS, sa, NAMESPACE)
