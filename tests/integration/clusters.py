"""Extra control planes for the modules that need a differently configured cluster than the session's,
and ServiceAccount credentials as a pod would get them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from draxr.kube import SERVICE_ACCOUNTS, Kube
from draxr_dev.devcluster.binaries import KUBERNETES_BINARIES, ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, Options


@contextlib.contextmanager
def extra_control_plane(
    prefix: str, options: Options, k8s_version: str | None = None, kubernetes: tuple[str, ...] = KUBERNETES_BINARIES
) -> Iterator[ControlPlane]:
    """Started in a fresh temp dir, stopped and removed afterwards (kept with DRAXR_KEEP_RUN_DIR).
    ``kubernetes``: the Kubernetes binaries ``k8s_version`` needs built (see ensure_binaries)."""
    binaries = ensure_binaries(k8s_version, kubernetes)
    cp = ControlPlane(binaries, Path(tempfile.mkdtemp(prefix=f"draxr-cp-{prefix}.")), options)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
        if not os.environ.get("DRAXR_KEEP_RUN_DIR"):
            shutil.rmtree(cp.run_dir, ignore_errors=True)


async def bound_token(kube: Kube, namespace: str, sa: str, seconds: int = 3600) -> str:
    """A TokenRequest for the ServiceAccount, as the kubelet makes one for a pod."""
    token = await kube.create(
        SERVICE_ACCOUNTS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": seconds}},
        namespace,
        name=sa,
        subresource="token",
    )
    return str(token["status"]["token"])


async def service_account_dir(
    kube: Kube, cp: ControlPlane, namespace: str, sa: str, into: Path, seconds: int = 3600
) -> Path:
    """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount: a bound token and ca.crt."""
    token = await bound_token(kube, namespace, sa, seconds)
    return await asyncio.to_thread(_write_sa_dir, into, token, cp.pki.ca_crt)


def _write_sa_dir(into: Path, token: str, ca: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)  # (again: a fresh token for a recreated ServiceAccount)
    (into / "token").write_text(token)
    shutil.copyfile(ca, into / "ca.crt")
    return into
