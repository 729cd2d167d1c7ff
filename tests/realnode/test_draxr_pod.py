"""draxr as its own pods on the real node: the image (hack/build-image.sh) imported into the node's
containerd and installed, once with ``kubectl apply -k`` and once with the Helm chart, through the
test overlay (tests/realnode/overlay: hostNetwork, loopback addresses, ports of their own for the
second replica, exec probes, a url clientConfig; nothing else). kubelet then runs the containers as
the install asks (uid 65532, runAsNonRoot, a read-only root filesystem, no capabilities, the
projected ServiceAccount token, the probes), the two replicas elect one leader, the leader
schedules a pod onto the node's devices, and when its container is killed a new process (the standby,
or the killed container restarted by kubelet: a race, as with client-go) takes the Lease over and
schedules the next pod.

The pods use the install's real names (Lease ``draxr``, scheduler ``draxr``, the
MutatingWebhookConfiguration ``draxr``, the ServiceAccount ``draxr-system/draxr`` and its RBAC), so
the session's embedded operator lends them: the module pauses it (a clean stop: it gives its Lease
up) and takes the session's install down (all but the namespace and the CRD), and afterwards
re-applies the session's install, gives the operator a token of the re-created ServiceAccount and
restarts it.

Everything listens on and connects to 127.0.0.1 only (the test reads the pods' servers there too);
nothing connects to the address kubelet reports for the node.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import errno
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from draxr import __version__
from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import EVENTS, NAMESPACES, PODS, Kube, Resource
from draxr_dev.devcluster import realnode
from draxr_dev.devcluster.binaries import ensure_binaries, ensure_helm, ensure_image
from draxr_dev.devcluster.controlplane import ControlPlane, free_port
from draxr_dev.devcluster.realnode import RealNode

from ..integration import manifests
from ..integration.clusters import service_account_dir
from ..integration.embedded import OperatorThread
from ..integration.helpers import NAMESPACE, eventually, get_or_none
from .test_kubelet_runs_pods import _check_kubelet_and_plugin, env_key, run_pod, single

JSON = dict[str, Any]
HERE = Path(__file__).resolve().parent
OVERLAY = HERE / "overlay"
POST_RENDERER = OVERLAY / "post-render.sh"
CHART = manifests.MANIFESTS / "helm" / "draxr"
IMAGE = f"ghcr.io/draxr/draxr:{__version__}"
LEASES = Resource("coordination.k8s.io", "v1", "leases", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SELF_SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SELECTOR = "app.kubernetes.io/name=draxr,app.kubernetes.io/component=scheduler"
PRIMARY, STANDBY = "draxr", "draxr-standby"  # the overlay's two single-replica Deployments
DEPLOYMENT_LABEL = "draxr.dev/deployment"
UID = 65532
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_USER = f"system:serviceaccount:{NAMESPACE}:draxr"
# What a permission problem looks like in the operator's log (as tests/integration/test_install.py).
REFUSALS = ("forbidden", "api request refused", "not enough permissions", "(403)", '"status": 403')
EXT = realnode.EXTENDED_RESOURCE


def log(msg: str) -> None:
    print(f"[draxr] {msg}", file=sys.__stderr__, flush=True)


# ---- the overlay's run directory: the machine's numbers and a kustomization ---------------------


@dataclass
class Machine:
    """The numbers of this run: the API server's port and free ports for each Deployment."""

    api_port: int
    ports: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def free(cls, api_port: int) -> Machine:
        return cls(
            api_port, {d: {s: free_port() for s in ("metrics", "health", "webhook")} for d in (PRIMARY, STANDBY)}
        )

    @property
    def webhook_url(self) -> str:
        return manifests.webhook_url(self.ports[PRIMARY]["webhook"])  # the API server calls draxr's pod

    def object(self) -> JSON:
        return {
            "apiVersion": "test.draxr.dev/v1",
            "kind": "Machine",
            "metadata": {"name": "machine", "annotations": {"config.kubernetes.io/local-config": "true"}},
            "spec": {"apiPort": self.api_port, "webhookUrl": self.webhook_url, "ports": self.ports},
        }


def kustomization(into: Path, machine: Machine, *, chart: bool) -> Path:
    """A directory whose kustomization is the install (manifests/, or the chart's rendered objects
    that helm's post-renderer writes as chart.yaml) with the overlay as a component."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "machine.yaml").write_text(yaml.safe_dump(machine.object()))
    base = "chart.yaml" if chart else os.path.relpath(manifests.MANIFESTS, into)
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base, "machine.yaml"],
        "components": [os.path.relpath(OVERLAY, into)],
    }
    (into / "kustomization.yaml").write_text(yaml.safe_dump(body, sort_keys=False))
    return into


def kubectl_bin() -> str:
    return str(ensure_binaries() / "kubectl")


def helm(home: Path, *args: str, kubeconfig: Path | None = None) -> subprocess.CompletedProcess[str]:
    """helm with its cache, config and data in ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBECONFIG"))}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        env[var] = str(home / sub)
    return subprocess.run(
        [str(ensure_helm()), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def post_renderer_args(directory: Path) -> list[str]:
    return [
        "--post-renderer",
        str(POST_RENDERER),
        "--post-renderer-args",
        kubectl_bin(),
        "--post-renderer-args",
        str(directory),
    ]


def parse(text: str) -> list[JSON]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind_name(objs: list[JSON]) -> dict[tuple[str, str], JSON]:
    out = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    assert len(out) == len(objs), "an object rendered twice"
    return out


# ---- the overlay adapts to the machine, and to nothing else -------------------------------------


def _undo_adaptation(dep: JSON, base: JSON, machine: Machine) -> JSON:
    """The overlay's Deployment with exactly the machine's adaptations taken out (each one checked
    on the way): what is left must be the install's Deployment."""
    d = copy.deepcopy(dep)
    name = d["metadata"]["name"]
    d["metadata"]["name"] = "draxr"
    for where in (d["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]):
        assert where.pop(DEPLOYMENT_LABEL) == name
    assert d["spec"]["replicas"] == 1
    d["spec"]["replicas"] = base["spec"]["replicas"]
    pod = d["spec"]["template"]["spec"]
    assert pod.pop("hostNetwork") is True
    assert pod.pop("nodeSelector") == {realnode.NODE_LABEL: "true"}
    assert pod.pop("tolerations") == [realnode.TOLERATION]
    [c] = pod["containers"]
    [want] = base["spec"]["template"]["spec"]["containers"]
    assert c["imagePullPolicy"] == "Never"
    c["imagePullPolicy"] = want["imagePullPolicy"]
    env = {e["name"]: e for e in c.pop("env")}
    ports = machine.ports[name]
    assert env.pop("KUBERNETES_SERVICE_HOST") == {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"}
    assert env.pop("KUBERNETES_SERVICE_PORT")["value"] == str(machine.api_port)
    assert env.pop("DRAXR_WEBHOOK_EXTRA_HOSTS")["value"] == "127.0.0.1"
    assert env["DRAXR_BIND_ADDRESS"]["value"] == "127.0.0.1"
    base_env = {e["name"]: e for e in want["env"]}
    env["DRAXR_BIND_ADDRESS"] = base_env["DRAXR_BIND_ADDRESS"]
    for server, var in (
        ("metrics", "DRAXR_METRICS_PORT"),
        ("health", "DRAXR_HEALTH_PORT"),
        ("webhook", "DRAXR_WEBHOOK_PORT"),
    ):
        assert env[var]["value"] == str(ports[server])
        env[var] = base_env[var]
        [port] = [p for p in c["ports"] if p["name"] == server]
        assert port["containerPort"] == ports[server]
        [base_port] = [p for p in want["ports"] if p["name"] == server]
        port["containerPort"] = base_port["containerPort"]
    # The env order changes (the patch's entries come first); nothing refers to another variable.
    assert env == base_env
    c["env"] = want["env"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        command = c[probe].pop("exec")["command"]
        assert command[:2] == ["python3", "-c"]
        assert f"'http://127.0.0.1:%s{path}' % os.environ['DRAXR_HEALTH_PORT']" in command[2]
        assert want[probe]["httpGet"] == {"path": path, "port": "health"}
        c[probe]["httpGet"] = want[probe]["httpGet"]
    return d


def check_overlay(base_objs: list[JSON], overlay_objs: list[JSON], machine: Machine) -> None:
    base, out = by_kind_name(base_objs), by_kind_name(overlay_objs)
    assert set(out) - set(base) == {("Deployment", STANDBY)}
    assert set(base) == set(out) - {("Deployment", STANDBY)}
    for key, want in base.items():
        got = copy.deepcopy(out[key])
        if key == ("Namespace", NAMESPACE):
            labels = got["metadata"]["labels"]
            assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
            labels["pod-security.kubernetes.io/enforce"] = want["metadata"]["labels"][
                "pod-security.kubernetes.io/enforce"
            ]
        elif key == ("MutatingWebhookConfiguration", "draxr"):
            [hook] = got["webhooks"]
            assert hook["clientConfig"] == {"url": machine.webhook_url}
            hook["clientConfig"] = want["webhooks"][0]["clientConfig"]
        elif key == ("Deployment", "draxr"):
            got = _undo_adaptation(got, want, machine)
            assert _undo_adaptation(out[("Deployment", STANDBY)], want, machine) == want
        assert got == want, key
    assert sum(out[("Deployment", d)]["spec"]["replicas"] for d in (PRIMARY, STANDBY)) == 2


def test_overlay_adapts_the_install_to_the_machine_only(tmp_path: Path) -> None:
    """Both ways in (manifests/ by kustomize, the chart through helm's post-renderer) come out of the
    overlay as the install's own objects plus exactly the machine's adaptations."""
    machine = Machine.free(api_port=6443)
    kubectl = kubectl_bin()
    base = subprocess.run([kubectl, "kustomize", str(manifests.MANIFESTS)], capture_output=True, text=True, check=True)
    d = kustomization(tmp_path / "kustomize", machine, chart=False)
    out = subprocess.run([kubectl, "kustomize", str(d)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "from-the-machine" not in out.stdout
    check_overlay(parse(base.stdout), parse(out.stdout), machine)

    home = tmp_path / "helm"
    plain = helm(home, "template", "draxr", str(CHART), "--namespace", NAMESPACE)
    assert plain.returncode == 0, plain.stderr
    d = kustomization(tmp_path / "chart", machine, chart=True)
    rendered = helm(home, "template", "draxr", str(CHART), "--namespace", NAMESPACE, *post_renderer_args(d))
    assert rendered.returncode == 0, rendered.stderr
    assert "from-the-machine" not in rendered.stdout
    # (the chart renders no Namespace: helm install wants it beforehand)
    check_overlay(parse(plain.stdout), parse(rendered.stdout), machine)
    # The check fails when the overlay changes anything else.
    broken = parse(rendered.stdout)
    dep = next(o for o in broken if o["kind"] == "Deployment" and o["metadata"]["name"] == STANDBY)
    dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = "2Gi"
    with pytest.raises(AssertionError):
        check_overlay(parse(plain.stdout), broken, machine)


# ---- lending the session's names ---------------------------------------------------------------


async def _no_draxr_pods(kube: Kube) -> bool:
    return not await kube.list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=draxr")


def _uninstall(cp: ControlPlane, rendered: str) -> None:
    """Delete what an install rendered, but not the namespace (the session's Lease, Secret and token
    live there) and not the CRD (other tests' mappings)."""
    keep = ("Namespace", "CustomResourceDefinition")
    objs = yaml.safe_dump_all([o for o in parse(rendered) if o["kind"] not in keep])
    _kubectl(cp, "delete", "-f", "-", "--ignore-not-found", stdin=objs)


def _kubectl(cp: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    out = manifests.kubectl(cp, *args, stdin=stdin)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stdout}{out.stderr}"
    return out


@pytest.fixture(scope="module")
async def lent_names(
    kube: Kube, control_plane: ControlPlane, operator_thread: OperatorThread, real_node: RealNode
) -> AsyncIterator[None]:
    """The session's operator paused and its install taken down for this module; afterwards the
    install re-applied and the operator restarted (leading again), as the session had them. An
    operator that had already ended stays ended, with its reason (the ``operator`` fixture's
    fail-fast)."""
    cp = control_plane
    session_deployment = await get_or_none(kube, DEPLOYMENTS, "draxr", NAMESPACE)
    ended = operator_thread.problem()
    if ended is None:
        why = "its names are lent to draxr's pods (tests/realnode/test_draxr_pod.py)"
        await asyncio.to_thread(operator_thread.pause, why)
    try:
        lease = await kube.get(LEASES, "draxr", NAMESPACE)
        assert not lease["spec"].get("holderIdentity"), f"the paused operator kept its Lease: {lease['spec']}"
        session_install = await asyncio.to_thread(manifests.rendered, cp, manifests.webhook_url())
        await asyncio.to_thread(_uninstall, cp, session_install)
        await eventually(lambda: _no_draxr_pods(kube), timeout=90)
        yield
    finally:
        applied = await asyncio.to_thread(manifests.apply, cp)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        if session_deployment is not None and session_deployment["spec"]["replicas"] != 2:
            replicas = f"--replicas={session_deployment['spec']['replicas']}"
            await asyncio.to_thread(_kubectl, cp, "-n", NAMESPACE, "scale", "deployment/draxr", replicas)
        # The ServiceAccount was re-created (a new uid): the old token is void.
        sa_dir = Path(operator_thread.settings.serviceaccount_dir)
        await service_account_dir(kube, cp, NAMESPACE, "draxr", sa_dir, seconds=7200)
        if ended is None:
            operator = await asyncio.to_thread(operator_thread.restart)

            async def leading() -> bool:
                return operator.leading

            await eventually(leading, timeout=60)
            assert operator_thread.problem() is None


@pytest.fixture(scope="module")
async def draxr_image(real_node: RealNode) -> Path:
    archive = await asyncio.to_thread(ensure_image)
    t0 = time.monotonic()
    images = await asyncio.to_thread(real_node.import_image, archive)
    log(f"image {IMAGE} imported into the node's containerd in {time.monotonic() - t0:.1f}s")
    assert IMAGE in images, images
    return archive


# ---- the install, both ways --------------------------------------------------------------------


@dataclass
class Install:
    how: str
    machine: Machine
    directory: Path


@pytest.fixture(params=["kubectl-apply-k", "helm"])
async def installed(
    request: pytest.FixtureRequest,
    kube: Kube,
    control_plane: ControlPlane,
    real_node: RealNode,
    lent_names: None,
    draxr_image: Path,
    tmp_path: Path,
) -> AsyncIterator[Install]:
    cp, how = control_plane, str(request.param)
    machine = Machine.free(cp.ports["api"])
    directory = kustomization(tmp_path / "overlay-run", machine, chart=how == "helm")
    home = tmp_path / "helm-home"
    try:
        if how == "helm":
            # The chart renders no Namespace (helm stores the release in it first): label it as the
            # overlay does, for the same reason (hostNetwork needs the privileged level).
            await asyncio.to_thread(
                _kubectl,
                cp,
                "label",
                "namespace",
                NAMESPACE,
                "pod-security.kubernetes.io/enforce=privileged",
                "--overwrite",
            )
            args = ["install", "draxr", str(CHART), "--namespace", NAMESPACE, *post_renderer_args(directory)]
            out = await asyncio.to_thread(helm, home, *args, kubeconfig=cp.kubeconfig)
            assert out.returncode == 0, out.stdout + out.stderr
        else:
            await asyncio.to_thread(_kubectl, cp, "apply", "-k", str(directory))
        yield Install(how, machine, directory)
    finally:
        # The Deployments first, their pods gone, then the rest: a replica shutting down gives the
        # Lease up, which it cannot once its Role is deleted (the session's operator would then
        # wait out the Lease).
        await asyncio.to_thread(
            _kubectl, cp, "-n", NAMESPACE, "delete", "deployment", PRIMARY, STANDBY, "--ignore-not-found"
        )
        await eventually(lambda: _no_draxr_pods(kube), timeout=90)
        if how == "helm":
            out = await asyncio.to_thread(
                helm, home, "uninstall", "draxr", "--namespace", NAMESPACE, "--wait", kubeconfig=cp.kubeconfig
            )
            # (a failed install may have left no release: then there is nothing to uninstall)
            assert out.returncode == 0 or "not found" in out.stderr, out.stdout + out.stderr
        else:
            rendered = await asyncio.to_thread(_kubectl, cp, "kustomize", str(directory))
            await asyncio.to_thread(_uninstall, cp, rendered.stdout)
        await eventually(lambda: _no_draxr_pods(kube), timeout=90)


# ---- looking into the containers ----------------------------------------------------------------


def container_pid(node: RealNode, container_id: str) -> int:
    """The PID of the container's process, from the node's containerd (kubelet's namespace)."""
    out = node.ctr("tasks", "ls")
    assert out.returncode == 0, out.stderr
    for line in out.stdout.splitlines()[1:]:
        task, pid, status = line.split()[:3]
        if task == container_id:
            assert status == "RUNNING", line
            return int(pid)
    raise AssertionError(f"no task {container_id} in containerd:\n{out.stdout}")


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _mounts(pid: int) -> dict[str, tuple[str, list[str]]]:
    """The container's mounts as it sees them: mount point -> (fs type, per-mount options)."""
    out = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        out[fields[4]] = (fields[sep + 1], fields[5].split(","))
    return out


def _listening(pid: int) -> list[str]:
    """local addresses of the process's listening TCP sockets (IPv4 as a.b.c.d:port, IPv6 as hex)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            addr, port = local.split(":")
            if table == "tcp":
                ip = ".".join(str(b) for b in reversed(bytes.fromhex(addr)))
                out.append(f"{ip}:{int(port, 16)}")
            else:
                out.append(f"[{addr}]:{int(port, 16)}")
    return sorted(out)


def _jwt_claims(token: str) -> JSON:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def _as_token(api_port: int, ca: Path, token: str, path: str, body: JSON) -> JSON:
    """POST ``body`` to the API server on loopback with ``token`` (the pod's own credentials)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(
        f"https://127.0.0.1:{api_port}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        return dict(json.loads(resp.read()))


def _can(api_port: int, ca: Path, token: str, **attributes: str) -> bool:
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview"}
    body = {**review, "spec": {"resourceAttributes": attributes}}
    return bool(_as_token(api_port, ca, token, SELF_SUBJECT_ACCESS_REVIEWS, body)["status"]["allowed"])


def check_container(node: RealNode, pod: JSON, install: Install) -> None:
    """kubelet ran the container as the install asks: seen from the host, in /proc of its process."""
    name = pod["metadata"]["name"]
    deployment = pod["metadata"]["labels"][DEPLOYMENT_LABEL]
    [status] = pod["status"]["containerStatuses"]
    pid = container_pid(node, status["containerID"].removeprefix("containerd://"))
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"/usr/local/bin/draxr" in cmdline, cmdline
    assert b"run" in cmdline, cmdline
    st = _proc_status(pid)
    assert st["Uid"].split() == [str(UID)] * 4, st["Uid"]  # runAsUser, runAsNonRoot
    assert st["Gid"].split() == [str(UID)] * 4, st["Gid"]
    assert st["NoNewPrivs"] == "1"  # allowPrivilegeEscalation: false
    assert st["Seccomp"] == "2"  # RuntimeDefault: a filter
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[caps], 16) == 0, (caps, st[caps])  # drop: [ALL]
    mounts = _mounts(pid)
    assert "ro" in mounts["/"][1], mounts["/"]  # readOnlyRootFilesystem
    assert "rw" in mounts["/tmp"][1], mounts["/tmp"]  # the emptyDir scratch
    # Even root cannot write there, through the container's own mounts.
    with pytest.raises(OSError, match="Read-only file system") as refused:
        Path(f"/proc/{pid}/root/draxr-write-test").write_text("x")
    assert refused.value.errno == errno.EROFS, refused.value
    # The projected volume (Debian's /var/run is a symlink to /run: runc mounts it there).
    [token_dir] = [m for m in mounts if m in (TOKEN_DIR, TOKEN_DIR.removeprefix("/var"))]
    assert mounts[token_dir][0] == "tmpfs", mounts[token_dir]

    environ = dict(
        e.decode().split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in e
    )
    assert environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert environ["KUBERNETES_SERVICE_PORT"] == str(install.machine.api_port)
    assert environ["POD_NAME"] == name
    assert not {"KUBECONFIG", "DRAXR_KUBECONFIG", "DRAXR_SERVICEACCOUNT_DIR"} & set(environ)  # in-cluster only
    # Every server of the process listens on 127.0.0.1, on its Deployment's ports (the webhook's
    # starts once the certificate is loaded: a few seconds are allowed).
    want = sorted(f"127.0.0.1:{p}" for p in install.machine.ports[deployment].values())
    deadline = time.monotonic() + 30
    while _listening(pid) != want and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _listening(pid) == want

    # The token kubelet projected is bound to this pod and is the ServiceAccount, not an admin.
    projected = Path(f"/proc/{pid}/root") / token_dir.lstrip("/")
    token = (projected / "token").read_text()
    ca = projected / "ca.crt"
    claims = _jwt_claims(token)["kubernetes.io"]
    assert claims["namespace"] == NAMESPACE
    assert claims["serviceaccount"]["name"] == "draxr"
    assert claims["pod"] == {"name": name, "uid": pod["metadata"]["uid"]}
    api = install.machine.api_port
    review = _as_token(
        api, ca, token, SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    user = review["status"]["userInfo"]
    assert user["username"] == SERVICE_ACCOUNT_USER
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [name]
    assert _can(api, ca, token, verb="create", resource="pods", subresource="binding", namespace="default")
    lease = {"resource": "leases", "group": "coordination.k8s.io", "namespace": NAMESPACE}
    assert _can(api, ca, token, verb="update", name="draxr", **lease)  # its own Lease only
    assert not _can(api, ca, token, verb="update", name="another", **lease)
    assert not _can(api, ca, token, verb="delete", resource="namespaces")
    assert not _can(api, ca, token, verb="create", resource="clusterrolebindings", group="rbac.authorization.k8s.io")


def _metrics(port: int) -> dict[str, float]:
    """The pod's /metrics, read on 127.0.0.1 (its hostNetwork servers listen there)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


LEADER_METRIC = 'draxr_leader_election_master_status{name="draxr"}'


def probes_run(cp: ControlPlane, node: RealNode, pod: str) -> dict[tuple[str, str], float]:
    """kubelet's own count of the probes it ran for the pod's container: (type, result) -> count,
    from its /metrics/probes on 127.0.0.1 (the API server's node proxy refuses loopback targets)."""
    ctx = ssl.create_default_context(cafile=str(cp.pki.ca_crt))
    url = f"https://127.0.0.1:{node.ports['kubelet']}/metrics/probes"
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        text = resp.read().decode()
    counts: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("prober_probe_total{") and f'pod="{pod}"' in line and 'container="draxr"' in line:
            labels, _, value = line.rpartition(" ")
            kind = labels.split('probe_type="')[1].split('"')[0]
            result = labels.split('result="')[1].split('"')[0]
            counts[(kind, result)] = counts.get((kind, result), 0) + float(value)
    return counts


# ---- the scenario -------------------------------------------------------------------------------


async def draxr_pods(kube: Kube) -> dict[str, JSON]:
    """Deployment name -> its one pod (None while there are not exactly two)."""
    pods = await kube.list(PODS, NAMESPACE, labelSelector=SELECTOR)
    out = {p["metadata"]["labels"].get(DEPLOYMENT_LABEL, "?"): p for p in pods}
    return out if len(pods) == 2 and set(out) == {PRIMARY, STANDBY} else {}


def _ready(pod: JSON) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses", [])
    conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return (
        pod.get("status", {}).get("phase") == "Running"
        and len(statuses) == 1
        and statuses[0].get("ready") is True
        and conditions.get("Ready") == "True"
    )


async def lease_holder(kube: Kube) -> str:
    lease = await kube.get(LEASES, "draxr", NAMESPACE)
    return str(lease["spec"].get("holderIdentity") or "")


async def scheduled_by(kube: Kube, namespace: str, pod: str) -> list[str]:
    """reportingInstance of draxr's Scheduled events for the pod (draxr-<its POD_NAME>)."""
    events = await kube.list(EVENTS, namespace)
    return [
        e["reportingInstance"]
        for e in events
        if e.get("regarding", {}).get("name") == pod
        and e.get("reason") == "Scheduled"
        and e.get("reportingController") == "draxr"
    ]


async def logs(cp: ControlPlane, pod: str, *extra: str) -> str:
    out = await asyncio.to_thread(manifests.kubectl, cp, "-n", NAMESPACE, "logs", pod, "-c", "draxr", *extra)
    assert out.returncode == 0, out.stderr
    return out.stdout


async def failover_report(
    kube: Kube, cp: ControlPlane, names: dict[str, str], history: list[tuple[float, str, str]]
) -> str:
    """Why no new process took the Lease: the Lease as it changed, both pods' containers, and
    the end of each container's log (the killed one's too)."""
    lines = ["no new process took the Lease within 60s of the kill", f"Lease changes: {history}"]
    for n in names.values():
        pod = await kube.get(PODS, n, NAMESPACE)
        lines.append(f"{n}: {json.dumps(pod.get('status', {}).get('containerStatuses'), sort_keys=True)}")
        for extra in ((), ("--previous",)):
            out = await asyncio.to_thread(manifests.kubectl, cp, "-n", NAMESPACE, "logs", n, "-c", "draxr", *extra)
            tail = "\n    ".join((out.stdout or out.stderr).splitlines()[-25:])
            lines.append(f"{n} log{' (previous)' if extra else ''}:\n    {tail}")
    return "\n".join(lines)


async def test_draxr_pods_elect_schedule_and_fail_over(
    installed: Install, kube: Kube, control_plane: ControlPlane, real_node: RealNode, namespace: str
) -> None:
    cp, t0 = control_plane, time.monotonic()

    # 1. Both pods Running and Ready on the real node (kubelet's exec readiness probes passed).
    async def both_ready() -> dict[str, JSON]:
        pods = await draxr_pods(kube)
        return pods if pods and all(_ready(p) for p in pods.values()) else {}

    pods = await eventually(both_ready, timeout=150, interval=1)
    ready_s = time.monotonic() - t0
    names = {d: p["metadata"]["name"] for d, p in pods.items()}
    for p in pods.values():
        spec = p["spec"]
        assert spec["nodeName"] == real_node.name
        assert spec["hostNetwork"] is True
        assert spec["serviceAccountName"] == "draxr"
        assert spec["schedulerName"] == "default-scheduler"  # draxr itself runs by kube-scheduler
        [status] = p["status"]["containerStatuses"]
        assert status["image"] == IMAGE
        assert status["containerID"].startswith("containerd://")
        assert status["restartCount"] == 0
        await asyncio.to_thread(check_container, real_node, p, installed)
    if installed.how == "helm":
        dep = await kube.get(DEPLOYMENTS, STANDBY, NAMESPACE)
        assert dep["metadata"]["annotations"]["meta.helm.sh/release-name"] == "draxr"

    # 2. Exactly one leads: the Lease names one pod, and each replica's own gauge agrees.
    async def holder_pod() -> str | None:
        pod = (await lease_holder(kube)).rsplit("_", 1)[0]
        return pod if pod in names.values() else None

    leader_name = await eventually(holder_pod, timeout=60)
    leader = next(d for d, n in names.items() if n == leader_name)
    standby = STANDBY if leader == PRIMARY else PRIMARY
    ports = installed.machine.ports

    async def gauges_agree() -> bool:
        values = {d: (await asyncio.to_thread(_metrics, ports[d]["metrics"])).get(LEADER_METRIC) for d in names}
        return values == {leader: 1.0, standby: 0.0}

    await eventually(gauges_agree, timeout=30)
    for d in names:
        assert await asyncio.to_thread(_http_status, ports[d]["health"], "/healthz") == 200
        assert await asyncio.to_thread(_http_status, ports[d]["health"], "/readyz") == 200

    # 3. The webhook, called by url on the first Deployment's pod, steers an unmodified pod (a
    #    server-side dry run: nothing is created, the answer is the admitted object).
    await kube.patch(NAMESPACES, namespace, {"metadata": {"labels": {"draxr.io/enabled": "true"}}})
    unmodified = single("unmodified", 1, scheduler="default-scheduler")
    del unmodified["spec"]["schedulerName"]

    async def steered() -> JSON | None:
        p = await kube.request("POST", PODS.path(namespace), unmodified, query={"dryRun": "All"})
        return p if p["spec"].get("schedulerName") == "draxr" else None

    admitted = await eventually(steered, timeout=60, interval=1)
    assert STEERED_ANNOTATION in admitted["metadata"]["annotations"]
    primary_metrics = await asyncio.to_thread(_metrics, ports[PRIMARY]["metrics"])
    assert primary_metrics.get('draxr_webhook_admissions_total{result="steered"}', 0) >= 1

    # 4. The leader schedules a pod onto the node's devices; kubelet runs it with them.
    before = await run_pod(kube, cp, real_node, namespace, single("before", 1))
    _check_kubelet_and_plugin(before)
    assert len(before.env["main"]["DRAXR_DEVICES_" + env_key("container-0-request-0")].split(",")) == 1
    assert await scheduled_by(kube, namespace, "before") == [f"draxr-{leader_name}"]

    # 5. Kill the leader's container (SIGKILL to its task: no clean shutdown, the Lease is not
    #    given up): a new process takes the Lease when it expires and schedules the next pod. Which
    #    one is a race, as with client-go: expiry is judged from each candidate's own observation of
    #    the last renewal, and kubelet restarts the killed container within a second, so the
    #    restarted process (first read at its start) and the standby (which polls every 2 s and may
    #    have read the last renewal up to 2 s late) become eligible within the same poll period.
    killed_identity = await lease_holder(kube)
    assert killed_identity.rsplit("_", 1)[0] == leader_name
    [killed] = pods[leader]["status"]["containerStatuses"]
    killed_id = killed["containerID"].removeprefix("containerd://")
    out = await asyncio.to_thread(real_node.ctr, "tasks", "kill", "--signal", "SIGKILL", killed_id)
    assert out.returncode == 0, out.stdout + out.stderr
    t_kill = time.monotonic()

    history: list[tuple[float, str, str]] = []  # (seconds after the kill, holder, renewTime) as it changed

    async def a_new_process_leads() -> str | None:
        spec = (await kube.get(LEASES, "draxr", NAMESPACE))["spec"]
        seen = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        if not history or history[-1][1:] != seen:
            history.append((round(time.monotonic() - t_kill, 1), *seen))
        return seen[0] if seen[0] and seen[0] != killed_identity else None

    try:
        new_identity = await eventually(a_new_process_leads, timeout=60, interval=0.5)
    except pytest.fail.Exception:
        pytest.fail(await failover_report(kube, cp, names, history))
    takeover_s = time.monotonic() - t_kill
    successor = next(d for d, n in names.items() if n == new_identity.rsplit("_", 1)[0])
    other = STANDBY if successor == PRIMARY else PRIMARY
    after = await run_pod(kube, cp, real_node, namespace, single("after", 2))
    _check_kubelet_and_plugin(after)
    assert await scheduled_by(kube, namespace, "after") == [f"draxr-{names[successor]}"]

    # 6. kubelet restarted the killed container (same pod, new container): Ready again.
    async def restarted() -> JSON | None:
        p = await kube.get(PODS, names[leader], NAMESPACE)
        [s] = p["status"]["containerStatuses"]
        return p if s["restartCount"] == 1 and _ready(p) else None

    again = await eventually(restarted, timeout=90, interval=1)
    [s] = again["status"]["containerStatuses"]
    assert s["lastState"]["terminated"]["exitCode"] == 137  # SIGKILL
    assert s["containerID"].removeprefix("containerd://") != killed_id
    await asyncio.to_thread(check_container, real_node, again, installed)
    survivor = await kube.get(PODS, names[standby], NAMESPACE)
    assert survivor["status"]["containerStatuses"][0]["restartCount"] == 0
    assert await lease_holder(kube) == new_identity

    async def gauges_follow() -> bool:
        values = {d: (await asyncio.to_thread(_metrics, ports[d]["metrics"])).get(LEADER_METRIC) for d in names}
        return values == {successor: 1.0, other: 0.0}

    await eventually(gauges_follow, timeout=30)
    # kubelet ran both exec probes of both pods, and they passed (the liveness probe every 10 s).
    for n in names.values():
        counts = await asyncio.to_thread(probes_run, cp, real_node, n)
        assert counts.get(("Liveness", "successful"), 0) >= 1, (n, counts)
        assert counts.get(("Readiness", "successful"), 0) >= 1, (n, counts)

    # 7. The logs say the same, and nothing was refused: the ServiceAccount's RBAC carried both.
    first = await logs(cp, names[leader], "--previous")  # the killed container's
    current = {d: await logs(cp, names[d]) for d in names}  # the restarted container's, the standby's
    assert "became leader" in first
    assert {d: "became leader" in text for d, text in current.items()} == {successor: True, other: False}
    for text in (first, *current.values()):
        assert not [r for r in REFUSALS if r in text.lower()], text[-4000:]
    log(
        f"{installed.how}: both pods Ready {ready_s:.1f}s after the install; leader {leader_name}; "
        f"{'the standby' if successor == standby else 'its restarted container'} {names[successor]} took the Lease "
        f"{takeover_s:.1f}s after the kill; total {time.monotonic() - t0:.1f}s"
    )
