"""Kueue's manager as a local process beside a dev control plane (tests/integration/test_kueue.py).

The binary and the manifests come from hack/build-kueue.sh (Kueue built from the Go module proxy;
its ``config/components`` copied from the same module zip). What the tests install is what Kueue's
``config/default`` would, rendered with ``kubectl kustomize`` from those components, with the changes
a process on loopback needs and nothing else:

* every clientConfig (the webhooks and the CRDs' conversion webhook) names a Service nothing here may
  connect to; it becomes ``url: https://127.0.0.1:<port><path>`` with the control plane's CA as
  caBundle; the serving certificate is issued by that CA (``pki.issue_serving_cert``), so Kueue's
  internal certificate management is off;
* names get Kueue's ``kueue-`` prefix (config/default's namePrefix);
* every webhook's namespaceSelector also requires the label ``NAMESPACE_LABEL``: the session's other
  tests create pods and Deployments while Kueue runs, and its webhooks (failurePolicy Fail) must
  not stand in their way. The selectors Kueue's kustomization sets stay as they are.

The manager runs with the admin kubeconfig, leader election off, metrics and health on free loopback
ports, and only the integrations the tests use (batch/job, pod). Without internal certificate
management, Kueue reads its metrics serving certificate from the fixed path
``/etc/kueue/metrics/certs`` (cmd/kueue/main.go); the process gets it in a mount namespace of its
own, where an overlay on /etc adds that directory (the host's /etc is not written). That needs
root, or unprivileged user namespaces (then ``unshare --user --map-root-user``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .binaries import REPO_ROOT, built, ensure_binaries
from .controlplane import LOOPBACK, ControlPlane, free_port
from .pki import issue_serving_cert

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kueue.sh"
NAMESPACE_LABEL = "draxr.io/kueue-test"  # a namespace with this label is served by the test's Kueue
NAME_PREFIX = "kueue-"  # config/default's namePrefix
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
METRICS_CERT_DIR = "kueue/metrics/certs"  # under /etc, fixed in Kueue's cmd/kueue/main.go

JSON = dict[str, Any]


def ensure_kueue() -> Path:
    """The directory of hack/build-kueue.sh's output (the ``kueue`` binary and ``config/``), built
    first when the cache is cold; ``DRAXR_KUEUE_DIR`` names a ready one (hack/test.sh sets it)."""
    out = built("Kueue", "DRAXR_KUEUE_DIR", BUILD_SCRIPT)
    missing = [p for p in ("kueue", "config/components/crd", "config/components/webhook") if not (out / p).exists()]
    if missing:
        raise RuntimeError(f"Kueue's build is incomplete in {out}: {', '.join(missing)} missing")
    return out


def kustomize(cp: ControlPlane, directory: Path) -> list[JSON]:
    """``kubectl kustomize DIRECTORY`` (the control plane's kubectl) as a list of objects."""
    out = subprocess.run(
        [str(ensure_binaries() / "kubectl"), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed: {out.stderr}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _url_config(client_config: JSON, base_url: str, ca_bundle: str) -> JSON:
    service = client_config.get("service")
    if not service:
        raise ValueError(f"a clientConfig without a service: {client_config}")
    return {"url": f"{base_url}{service.get('path', '/')}", "caBundle": ca_bundle}


def manifests(cp: ControlPlane, kueue_dir: Path, webhook_port: int) -> list[JSON]:
    """Kueue's CRDs and webhook configurations as the tests install them (see the module's doc)."""
    import base64

    ca_bundle = base64.b64encode(cp.pki.ca_crt.read_bytes()).decode()
    base_url = f"https://{LOOPBACK}:{webhook_port}"
    components = kueue_dir / "config" / "components"
    crds = kustomize(cp, components / "crd")
    hooks = kustomize(cp, components / "webhook")
    out: list[JSON] = []
    for crd in crds:
        if crd.get("kind") != "CustomResourceDefinition":
            continue
        conversion = crd["spec"].get("conversion") or {}
        webhook = conversion.get("webhook")
        if webhook:
            webhook["clientConfig"] = _url_config(webhook["clientConfig"], base_url, ca_bundle)
        out.append(crd)
    kinds = {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
    configs = [h for h in hooks if h.get("kind") in kinds]
    if len(configs) != 2:
        raise RuntimeError(f"expected Kueue's two webhook configurations, got {[h.get('kind') for h in hooks]}")
    for config in configs:
        config["metadata"] = {"name": NAME_PREFIX + config["metadata"]["name"]}
        for hook in config["webhooks"]:
            hook["clientConfig"] = _url_config(hook["clientConfig"], base_url, ca_bundle)
            selector = hook.setdefault("namespaceSelector", {})
            selector.setdefault("matchExpressions", []).append({"key": NAMESPACE_LABEL, "operator": "Exists"})
        out.append(config)
    return out


def configuration(
    *,
    webhook_port: int,
    cert_dir: Path,
    health_port: int,
    metrics_port: int,
    frameworks: tuple[str, ...] = ("batch/job", "pod"),
    extra: JSON | None = None,
) -> JSON:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a process on loopback; ``extra`` is
    merged at the top level (e.g. ``resources.deviceClassMappings``, ``featureGates``,
    ``waitForPodsReady``)."""
    cfg: JSON = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health_port}"},
        "metrics": {"bindAddress": f"{LOOPBACK}:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": LOOPBACK, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": list(frameworks)},
    }
    cfg.update(extra or {})
    return cfg


@dataclass
class KueueProcess:
    """One Kueue manager (``kueue --config``) for the control plane ``cp``, started by ``start`` and
    ready (its webhooks serving) when it returns. ``feature_gates`` go into its Configuration's
    ``featureGates`` and so does ``extra`` (see ``configuration``)."""

    cp: ControlPlane
    kueue_dir: Path
    run_dir: Path
    webhook_port: int
    feature_gates: dict[str, bool] = field(default_factory=dict)
    extra: JSON = field(default_factory=dict)
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.run_dir / "kueue.log"

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self, timeout: float = 120.0) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        certs = self.run_dir / "certs"
        certs.mkdir(exist_ok=True)
        issue_serving_cert(self.cp.pki, certs, "tls", "kueue-webhook", (LOOPBACK,))
        # The overlay's upper layer: /etc/kueue/metrics/certs/tls.{crt,key} inside the mount namespace.
        upper, work = self.run_dir / "etc-upper", self.run_dir / "etc-work"
        shutil.rmtree(upper, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
        (upper / METRICS_CERT_DIR).mkdir(parents=True)
        work.mkdir()
        issue_serving_cert(self.cp.pki, upper / METRICS_CERT_DIR, "tls", "kueue-metrics", (LOOPBACK,))
        config = self.run_dir / "config.yaml"
        cfg = configuration(
            webhook_port=self.webhook_port,
            cert_dir=certs,
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            extra=self.extra,
        )
        # The visibility API server (VisibilityOnDemand, beta) would bind every address: off.
        cfg["featureGates"] = {"VisibilityOnDemand": False, **self.feature_gates}
        config.write_text(yaml.safe_dump(cfg))
        argv = [str(self.kueue_dir / "kueue"), f"--config={config}", "--zap-log-level=2"]
        mount = f"mount -t overlay overlay -o lowerdir=/etc,upperdir={upper},workdir={work} /etc"
        userns = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        cmd = [
            "unshare", *userns, "--mount", "--propagation", "private", "--",
            "sh", "-c", f'{mount} && exec "$@"', "kueue", *argv,
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBECONFIG")}
        env["KUBECONFIG"] = str(self.cp.kubeconfig)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited with {self.proc.returncode}:\n{self.text()[-6000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kueue not ready after {timeout:.0f}s:\n{self.text()[-6000:]}")
            time.sleep(0.25)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.health_port}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns once it is gone."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
