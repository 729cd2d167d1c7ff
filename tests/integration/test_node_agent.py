"""``draxr node-agent`` on the real control plane, with the node-agent component as shipped (its
namespace, ServiceAccount, RBAC and ValidatingAdmissionPolicy; the DaemonSet only through a
server-side dry run: no kubelet here) and a fake kubelet: a real grpc.aio server implementing the
generated ``v1.PodResourcesLister`` on a unix socket.

The agent runs as its DaemonSet's pod would: in-cluster, with a ServiceAccount token bound to a Pod
that is bound to a Node, so that the API server puts the node's name into the token's user extra
``authentication.kubernetes.io/node-name`` (checked with a SelfSubjectReview). It publishes its
node's DevicePluginRecord, follows kubelet's changes, refreshes observedTime at its bound, and the
admission policy refuses the same token any other node's record (403 with the policy's message).

The policy fails closed (issue 38): it matches every ServiceAccount, so an overlay that renames the
agent (``namePrefix: prod-``) keeps it; with the overlay's own grant of delete, the DELETE branch too;
and kube-controller-manager's garbage collector, a ServiceAccount as well, still deletes a record
with its Node.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from draxr.kube import NODES, PODS, SERVICE_ACCOUNTS, ApiException, Kube, Resource, api_message
from draxr.node_agent import RECORDS
from draxr.podresources import api_pb2
from draxr_dev import helmchart, rbac_audit
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import LOOPBACK, ControlPlane, free_port
from draxr_dev.devcluster.podresources import FakeKubelet, pod_resources
from draxr_dev.devcluster.process import in_cluster
from draxr_dev.devcluster.records import fake_record

from . import manifests
from .helpers import eventually

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "devicepluginrecords.draxr.io.yaml"
CRD_NAME = "devicepluginrecords.draxr.io"
AGENT = "draxr-node-agent"  # the component's namespace, ServiceAccount, ClusterRole, policy, DaemonSet
SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", False)
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
GPU = "example.com/gpu"


def component_objects(prefix: str = "", extra: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The node-agent component's own objects, as kustomize renders manifests/ with it. With a
    ``prefix`` or ``extra`` objects: as an overlay of the base with the component renders them, with
    ``namePrefix: <prefix>`` and ``extra`` among its resources (renamed with the rest)."""
    kubectl = ensure_binaries() / "kubectl"
    if not prefix and not extra:
        base = {helmchart.key(o) for o in helmchart.rendered_base(kubectl)}
        return [o for o in helmchart.rendered_node_agent(kubectl) if helmchart.key(o) not in base]

    def overlay(into: Path, components: list[Path], objs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        into.mkdir()
        resources = [os.path.relpath(manifests.MANIFESTS, into)]
        if objs:
            (into / "extra.yaml").write_text(yaml.safe_dump_all(objs))
            resources.append("extra.yaml")
        kustomization: dict[str, Any] = {
            "resources": resources,
            "components": [os.path.relpath(c, into) for c in components],
        }
        if prefix:
            kustomization["namePrefix"] = prefix
        (into / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return helmchart.kustomize(kubectl, into)

    with tempfile.TemporaryDirectory(prefix="draxr-overlay-") as tmp:
        base = {helmchart.key(o) for o in overlay(Path(tmp) / "base", [], ())}
        every = overlay(Path(tmp) / "with-agent", [helmchart.NODE_AGENT], extra)
    return [o for o in every if helmchart.key(o) not in base]


def _apply(cp: ControlPlane, objs: list[dict[str, Any]], *flags: str) -> None:
    out = manifests.kubectl(cp, "apply", *flags, "-f", "-", stdin=yaml.safe_dump_all(objs))
    assert out.returncode == 0, out.stderr


def install_component(cp: ControlPlane, objs: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The CRD and the component's objects (``objs``: as component_objects renders them, default
    the component as shipped) but its DaemonSet (applied by a server-side dry run only: it passes
    validation and the namespace's Pod Security level, privileged for hostPath and uid 0, without
    running on the kwok nodes of other tests). Returns what to delete afterwards."""
    out = manifests.kubectl(cp, "apply", "-f", str(CRD))
    assert out.returncode == 0, out.stderr
    done = manifests.kubectl(cp, "wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    assert done.returncode == 0, done.stderr
    objs = component_objects() if objs is None else objs
    daemonset = [o for o in objs if o["kind"] == "DaemonSet"]
    assert len(daemonset) == 1
    rest = [o for o in objs if o["kind"] != "DaemonSet"]
    _apply(cp, rest)
    _apply(cp, daemonset, "--dry-run=server")
    return rest


def remove_component(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    """Deleted, and waited for: the namespace is gone before another test applies it again."""
    out = manifests.kubectl(
        cp, "delete", "--ignore-not-found", "--wait=true", "--timeout=120s", "-f", "-", stdin=yaml.safe_dump_all(objs)
    )
    assert out.returncode == 0, out.stderr


@pytest.fixture  # (per test: another test here installs the component renamed, alone)
def component(control_plane: ControlPlane) -> Iterator[list[dict[str, Any]]]:
    objs = install_component(control_plane)
    yield objs
    remove_component(control_plane, objs)


@pytest.fixture
async def kubelet() -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet() as k:
        yield k


async def pod_bound_token(
    kube: Kube, node: str, pod_name: str, spec: dict[str, Any] | None = None, account: str = AGENT
) -> str:
    """What kubelet mounts into the DaemonSet's pod: a token of the agent's ServiceAccount
    (``account``, in namespace draxr-node-agent) bound to a Pod on ``node`` (the API server adds the
    pod's node to it). ``spec``: the pod's own, else one container that never runs (no kubelet
    behind kwok's nodes)."""
    spec = spec or {"containers": [{"name": "node-agent", "image": "registry.invalid/draxr:1"}]}
    pod = await kube.create(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name},
            "spec": {**spec, "nodeName": node, "serviceAccountName": account, "automountServiceAccountToken": False},
        },
        AGENT,
    )
    ref = {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod["metadata"]["uid"]}
    answer = await kube.create(
        SERVICE_ACCOUNTS,
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600, "boundObjectRef": ref},
        },
        AGENT,
        name=account,
        subresource="token",
    )
    return str(answer["status"]["token"])


def write_sa_dir(cp: ControlPlane, into: Path, token: str) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    (into / "token").write_text(token)
    (into / "ca.crt").write_bytes(cp.pki.ca_crt.read_bytes())
    return into


def agent_command(
    cp: ControlPlane, sa_dir: Path, node: str, socket: Path, health_port: int, refresh: int = 3
) -> tuple[list[str], dict[str, str]]:
    """``draxr node-agent`` as the DaemonSet's pod runs it (in-cluster, NODE_NAME from the pod)."""
    flags, env = in_cluster(cp, sa_dir, pod_name=f"{node}-agent", namespace=AGENT)
    env["NODE_NAME"] = node
    cmd = [sys.executable, "-m", "draxr", "node-agent", *flags, "--socket", str(socket)]
    cmd += ["--refresh-seconds", str(refresh), "--poll-seconds", "0.5", "--health-port", str(health_port)]
    cmd += ["--bind-address", LOOPBACK, "--log-format", "console"]
    return cmd, env


async def _user(cp: ControlPlane, token: str) -> dict[str, Any]:
    async with Kube.from_token(cp.api_url, token, cp.pki.ca_crt) as k:
        review = await k.create(
            SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    return dict(review["status"]["userInfo"])


def _record(node: str) -> dict[str, Any]:
    return fake_record(node, {})


async def _refused(write: Any) -> str:
    """The message of the 403 that ``write`` (an awaitable of a write) gets."""
    with pytest.raises(ApiException) as refused:
        await write
    assert refused.value.status == 403, refused.value.body
    return api_message(refused.value)


def start_agent(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)


async def test_agent_publishes_its_own_nodes_record_and_may_write_no_other(
    kube: Kube,
    control_plane: ControlPlane,
    component: list[dict[str, Any]],
    kubelet: FakeKubelet,
    names: str,
    tmp_path: Path,
) -> None:
    cp = control_plane
    mine, other = f"{names}-a", f"{names}-b"
    nodes = [fakedriver.node(mine), fakedriver.node(other)]
    agent: subprocess.Popen[bytes] | None = None
    log = tmp_path / "node-agent.log"
    try:
        await fakedriver.apply(kube, nodes)
        token = await pod_bound_token(kube, mine, f"{names}-agent")
        # The API server put the pod's node into the token's user.
        user = await _user(cp, token)
        assert user["username"] == f"system:serviceaccount:{AGENT}:{AGENT}"
        assert user["extra"][NODE_NAME_EXTRA] == [mine]
        sa_dir = write_sa_dir(cp, tmp_path / "sa", token)

        kubelet.lister.pods = [
            pod_resources("team", "train-0", {"main": [(GPU, ["GPU-1"]), (GPU, ["GPU-0"])]}),
            pod_resources("team", "cpu-only", {"main": []}),
        ]
        health = free_port()
        cmd, env = agent_command(cp, sa_dir, mine, kubelet.socket, health)  # (no --node-name: $NODE_NAME)
        agent = start_agent(cmd, env, log)

        async def record(want_devices: int) -> dict[str, Any] | None:
            assert agent is not None
            assert agent.poll() is None, log.read_text()
            try:
                got = await kube.get(RECORDS, mine)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            return got if got["spec"]["deviceCount"] == want_devices else None

        # Its own record appears with what kubelet reports.
        rec = await eventually(lambda: record(2), timeout=60)
        spec = rec["spec"]
        assert spec["nodeName"] == mine
        # Owned by its Node (uid from the pod-bound token): deleted with it by the garbage collector.
        node_uid = (await kube.get(NODES, mine))["metadata"]["uid"]
        assert rec["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": mine, "uid": node_uid}
        ]
        assert spec["refreshSeconds"] == 3
        assert spec["pods"] == [
            {
                "namespace": "team",
                "name": "train-0",
                "containers": [{"name": "main", "devices": [{"resourceName": GPU, "deviceIDs": ["GPU-0", "GPU-1"]}]}],
            }
        ]
        assert kubelet.lister.calls >= 1

        # It follows a change: a second pod gets devices.
        kubelet.lister.pods.append(
            pod_resources("team", "infer-0", {"srv": [(GPU, ["GPU-2"]), ("example.com/nic", ["nic-0"])]})
        )
        rec = await eventually(lambda: record(4), timeout=30)
        assert [(p["namespace"], p["name"]) for p in rec["spec"]["pods"]] == [("team", "infer-0"), ("team", "train-0")]
        assert rec["spec"]["podCount"] == 2

        # Nothing changes: observedTime still advances at the refresh bound (3 s), pods the same.
        first = rec["spec"]["observedTime"]

        async def refreshed() -> dict[str, Any] | None:
            got = await record(4)
            return got if got is not None and got["spec"]["observedTime"] > first else None

        later = await eventually(refreshed, timeout=30)
        assert later["spec"]["pods"] == rec["spec"]["pods"]
        gap = dt.datetime.fromisoformat(later["spec"]["observedTime"]) - dt.datetime.fromisoformat(first)
        assert gap >= dt.timedelta(seconds=3), (first, later["spec"]["observedTime"])

        # /healthz: it has written within 2 x refresh.
        async with aiohttp.ClientSession() as http, http.get(f"http://{LOOPBACK}:{health}/healthz") as r:
            assert r.status == 200, await r.text()

        # Least privilege both ways, from kube-apiserver's audit log (the session's control plane logs
        # the agent's ServiceAccount; the test's own requests with its token come below): the agent
        # used every grant of the component's role (get: its record's resourceVersion at start), and
        # the role granted every request of the agent's.
        audit = (cp.run_dir / "audit.log").read_text().splitlines()
        used = rbac_audit.requests(audit, [rbac_audit.NODE_AGENT])[rbac_audit.NODE_AGENT]
        difference = rbac_audit.compare(rbac_audit.grants(component)[rbac_audit.NODE_AGENT], used)
        assert not difference, str(difference)

        # The same token, any other node's record: refused by the admission policy (RBAC allows it).
        async with Kube.from_token(cp.api_url, token, cp.pki.ca_crt) as as_agent:
            message = await _refused(as_agent.create(RECORDS, _record(other)))
            assert f"may write only the DevicePluginRecord {mine}, not {other}" in message, message
            # Nor an update of one that exists (made by an admin here).
            await kube.create(RECORDS, _record(other))
            current = await kube.get(RECORDS, other)
            message = await _refused(as_agent.replace(RECORDS, {**_record(other), "metadata": current["metadata"]}))
            assert f"not {other}" in message, message
            # Its own record it may update (as the agent does).
            own = await as_agent.get(RECORDS, mine)
            assert own["spec"]["nodeName"] == mine

        # A token of the same ServiceAccount not bound to a pod carries no node: it writes nothing.
        unbound = await kube.create(
            SERVICE_ACCOUNTS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
            AGENT,
            name=AGENT,
            subresource="token",
        )
        async with Kube.from_token(cp.api_url, unbound["status"]["token"], cp.pki.ca_crt) as unbound_kube:
            await kube.delete_if_exists(RECORDS, other)
            message = await _refused(unbound_kube.create(RECORDS, _record(other)))
            assert "pod-bound ServiceAccount token" in message, message

        # SIGTERM: a clean exit.
        agent.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(agent.wait, 20) == 0, log.read_text()
        text = log.read_text()
        assert "record written" in text
        assert "forbidden" not in text.lower(), text
    finally:
        if agent is not None and agent.poll() is None:
            agent.kill()
            agent.wait()
        if os.environ.get("DRAXR_KEEP_RUN_DIR") and log.exists():
            print(log.read_text()[-4000:], file=sys.__stderr__)
        await kube.delete_if_exists(PODS, f"{names}-agent", AGENT)
        for node in (mine, other):
            await kube.delete_if_exists(RECORDS, node)
            await kube.delete_if_exists(NODES, node)


# An overlay's grant of delete to the agent (the component's own ClusterRole has none): the policy's
# DELETE branch is reached only through it. The subject is renamed with the ServiceAccount.
DELETE_GRANT: list[dict[str, Any]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{AGENT}-delete"},
        "rules": [{"apiGroups": ["draxr.io"], "resources": ["devicepluginrecords"], "verbs": ["delete"]}],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"{AGENT}-delete"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{AGENT}-delete"},
        "subjects": [{"kind": "ServiceAccount", "name": AGENT, "namespace": AGENT}],
    },
]


async def _gone(kube: Kube, res: Resource, name: str) -> bool:
    try:
        await kube.get(res, name)
    except ApiException as e:
        if e.status == 404:
            return True
        raise
    return False


@pytest.mark.parametrize("prefix", ["", "prod-"])
async def test_the_policy_follows_a_renamed_agent_and_refuses_another_nodes_record_on_every_write(
    kube: Kube, control_plane: ControlPlane, names: str, prefix: str
) -> None:
    """The component through an overlay (``namePrefix: prefix``, plus a grant of delete), alone: a
    pod-bound token of its ServiceAccount, whatever the name, creates, updates and deletes its own
    node's record and no other's. Before issue 38 the policy matched ``*:draxr-node-agent`` only:
    renamed ``prod-draxr-node-agent`` kept the grants and wrote any record."""
    cp = control_plane
    account = f"{prefix}{AGENT}"
    objs = await asyncio.to_thread(component_objects, prefix, DELETE_GRANT)
    # The overlay renamed what holds the grants (the namespace keeps its name: kustomize's namePrefix
    # leaves Namespaces alone), and the bindings follow it.
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"] == [
        (AGENT, account)
    ]
    for binding in (o for o in objs if o["kind"] == "ClusterRoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": AGENT}], binding
    installed = await asyncio.to_thread(install_component, cp, objs)
    mine, other = f"{names}-a", f"{names}-b"
    try:
        await fakedriver.apply(kube, [fakedriver.node(mine), fakedriver.node(other)])
        token = await pod_bound_token(kube, mine, f"{names}-agent", account=account)
        user = await _user(cp, token)
        assert user["username"] == f"system:serviceaccount:{AGENT}:{account}"
        assert user["extra"][NODE_NAME_EXTRA] == [mine]
        refusal = f"{user['username']} on node {mine} may write only the DevicePluginRecord {mine}, not {other}"

        async with Kube.from_token(cp.api_url, token, cp.pki.ca_crt) as as_agent:

            async def enforced() -> bool:
                # The API server loads a new policy a moment after it is created: a dry run until refused.
                try:
                    await as_agent.request("POST", RECORDS.path(None), _record(other), query={"dryRun": "All"})
                except ApiException as e:
                    if e.status == 403:
                        return True
                    raise
                return False

            await eventually(enforced, timeout=30)
            # CREATE: another node's record refused, its own allowed.
            message = await _refused(as_agent.create(RECORDS, _record(other)))
            assert refusal in message, message
            await as_agent.create(RECORDS, _record(mine))
            # UPDATE: the same.
            own = await as_agent.get(RECORDS, mine)
            await as_agent.replace(RECORDS, {**_record(mine), "metadata": own["metadata"]})
            await kube.create(RECORDS, _record(other))  # an admin (not a ServiceAccount): not matched
            theirs = await kube.get(RECORDS, other)
            message = await _refused(as_agent.replace(RECORDS, {**_record(other), "metadata": theirs["metadata"]}))
            assert refusal in message, message
            # DELETE (oldObject's name): another node's record refused and still there, its own deleted.
            message = await _refused(as_agent.delete(RECORDS, other))
            assert refusal in message, message
            assert (await kube.get(RECORDS, other))["metadata"]["uid"] == theirs["metadata"]["uid"]
            await as_agent.delete(RECORDS, mine)
            assert await _gone(kube, RECORDS, mine)

        # kube-controller-manager's garbage collector (with --use-service-account-credentials, a
        # ServiceAccount too, whose token names no node) still deletes a record with its Node.
        node_uid = (await kube.get(NODES, other))["metadata"]["uid"]
        owned = {
            **theirs["metadata"],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": other, "uid": node_uid}],
        }
        await kube.replace(RECORDS, {**_record(other), "metadata": owned})
        await kube.delete(NODES, other)
        await eventually(lambda: _gone(kube, RECORDS, other), timeout=120)
    finally:
        await kube.delete_if_exists(PODS, f"{names}-agent", AGENT)
        for node in (mine, other):
            await kube.delete_if_exists(RECORDS, node)
            await kube.delete_if_exists(NODES, node)
        await asyncio.to_thread(remove_component, cp, installed)


async def test_without_its_crd_the_agent_names_it_and_keeps_trying_until_it_is_installed(
    kube: Kube, control_plane: ControlPlane, names: str
) -> None:
    """The record's CRD not installed (the real-node demo of issue 39: "404 page not found", and the
    agent exited "for good"): the agent names the CRD and how to install it, in its log and on
    /healthz, and keeps trying; once the CRD is there its record is written. A group of the test's
    own stands for draxr.io, which other tests install and need."""
    from draxr.loops import Kind
    from draxr.node_agent import CRD_NAME as RECORD_CRD
    from draxr.node_agent import NodeAgent

    group = f"{names}.draxr.test"
    records = Resource(group, "v1alpha1", "devicepluginrecords", False)

    async def read() -> Any:
        held = pod_resources("team", "train-0", {"main": [(GPU, ["g0"])]})
        return api_pb2.ListPodResourcesResponse(pod_resources=[held])

    node = f"{names}-n"
    agent = NodeAgent(kube, read, node, refresh_seconds=1, poll_seconds=0.05, records=records)
    agent.loop.backoff.initial = agent.loop.backoff.maximum = 0.05
    kinds: list[Kind] = []
    failed = agent.loop.failed

    def counted(e: BaseException, **context: object) -> float:
        from draxr.loops import classify

        kinds.append(classify(e))
        return failed(e, **context)

    agent.loop.failed = counted  # type: ignore[method-assign]
    crd = yaml.safe_load(CRD.read_text())
    crd["metadata"]["name"] = f"devicepluginrecords.{group}"
    crd["spec"]["group"] = group
    run = asyncio.create_task(agent.run())
    try:
        # More failures than a loop survives of an error that does not heal: still running.
        async def failing() -> bool:
            return len(kinds) > 2 * agent.loop.escalate_after

        async def unhealthy() -> list[str]:
            return agent.problems()

        await eventually(failing, timeout=60)
        assert not run.done()
        assert set(kinds) == {Kind.NOT_INSTALLED}
        assert agent.writes == 0
        assert RECORD_CRD in agent.last_error
        assert "kubectl apply -k crds/" in agent.last_error
        problems = await eventually(unhealthy, timeout=30)  # (nothing written for 2 x 1 s)
        assert RECORD_CRD in problems[0], problems

        _apply(control_plane, [crd])

        async def written() -> bool:
            assert not run.done()
            try:
                got = await kube.get(records, node)
            except ApiException as e:
                if e.status == 404:
                    return False
                raise
            return bool(got["spec"]["deviceCount"] == 1)

        await eventually(written, timeout=60)
        assert agent.last_error == ""
        assert agent.problems() == []
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        out = manifests.kubectl(control_plane, "delete", "--ignore-not-found", "crd", crd["metadata"]["name"])
        assert out.returncode == 0, out.stderr
