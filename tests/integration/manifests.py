"""The install base as the tests apply it: ``kubectl kustomize manifests/``, with one change. The
webhook's clientConfig names a Service, whose ClusterIP nothing here may connect to; the tests point
it at the operator's loopback listener (``url: https://127.0.0.1:<port>/mutate-pods``) instead."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, free_port

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
# The session operator's webhook port (every install of the session points the webhook here).
WEBHOOK_PORT = free_port()


def webhook_url(port: int = WEBHOOK_PORT) -> str:
    return f"https://127.0.0.1:{port}/mutate-pods"


def kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig)}
    return subprocess.run(
        [str(ensure_binaries() / "kubectl"), *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def rendered(cp: ControlPlane, url: str) -> str:
    out = kubectl(cp, "kustomize", str(MANIFESTS))
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    hooks = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
    assert hooks, "manifests/ lost its MutatingWebhookConfiguration"
    for config in hooks:
        for hook in config["webhooks"]:
            assert "service" in hook["clientConfig"], hook
            hook["clientConfig"] = {"url": url}
    return yaml.safe_dump_all(docs)


def apply(cp: ControlPlane, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    """``kubectl apply`` of the rendered base (extra ``args``, e.g. --dry-run=server)."""
    return kubectl(cp, "apply", "-f", "-", *args, stdin=rendered(cp, url or webhook_url()))


def delete(cp: ControlPlane) -> subprocess.CompletedProcess[str]:
    return kubectl(cp, "delete", "-f", "-", "--ignore-not-found", "--wait=false", stdin=rendered(cp, webhook_url()))
