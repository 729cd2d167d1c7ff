"""Shared fixtures. The tests that need a cluster (tests/integration, tests/realnode) get one real
control plane per test session (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok on
127.0.0.1, with room for a real node), a namespace plus unique names per test, and draxr embedded
in the test process; unit tests need nothing.

A cold machine builds the binaries on first use (20-40 min, progress on stderr). The tests never skip
for want of a control plane: if it cannot be built or started, they error.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from draxr.app import Operator
from draxr.kube import NAMESPACES, Kube
from draxr.webhook_tls import MUTATING_WEBHOOKS
from draxr_dev import rbac_audit
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries
from draxr_dev.devcluster.controlplane import ControlPlane, Options

from . import late_builds, seeds
from .integration import manifests
from .integration.clusters import service_account_dir
from .integration.embedded import OperatorThread, fast_settings
from .integration.helpers import certs_loaded, eventually

# No wall-clock bound on a hypothesis example (its default 200 ms deadline): a test asserts
# behaviour, never speed, and CI's fast tier runs beside Go builds on two cores.
settings.register_profile("draxr", deadline=None)
settings.load_profile("draxr")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules whose binaries hack/test.sh builds in the background run last (tests/late_builds.py)."""
    items[:] = [items[i] for i in late_builds.order([Path(str(item.fspath)) for item in items])]


_late_waited: set[str] = set()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each late module's first test waits for the background build it needs before its timeout
    starts (this wrapper is outside pytest-timeout's)."""
    path = Path(str(item.fspath))
    if path.name not in _late_waited and late_builds.rank(path) is not None:
        _late_waited.add(path.name)
        late_builds.wait_until_built(path.name)
    yield


def pytest_report_header() -> str:
    """The run's seed (tests/seeds.py) and the command that replays it, at the top of the output."""
    return seeds.header()


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    binaries = ensure_binaries()
    run_dir = Path(tempfile.mkdtemp(prefix="draxr-cp."))
    # The node agent's requests in kube-apiserver's audit log (audit.log), for the comparison with its
    # RBAC (tests/integration/test_node_agent.py); nothing else is logged.
    (run_dir / "audit-policy.json").write_text(json.dumps(rbac_audit.audit_policy([rbac_audit.NODE_AGENT])))
    audit = (
        f"--audit-policy-file={run_dir / 'audit-policy.json'}",
        f"--audit-log-path={run_dir / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-mode=blocking",
    )
    options = Options(scheduler=True, kwok=True, real_node=True, apiserver_extra_args=audit)
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=options)
    atexit.register(cp.stop)  # also on an interrupted session
    cp.start()
    print(f"\n[draxr] control plane up in {cp.timings['total']:.1f}s: {cp.api_url} ({run_dir})", file=sys.__stderr__)
    try:
        yield cp
    finally:
        rss = cp.rss_mib()
        cp.stop()
        summary = ", ".join(f"{k}={v:.0f}MiB" for k, v in sorted(rss.items()) if k.endswith(".peak"))
        print(f"\n[draxr] control plane peak memory: {summary}", file=sys.__stderr__)
        if request.session.testsfailed or os.environ.get("DRAXR_KEEP_RUN_DIR"):
            print(f"[draxr] logs kept in {run_dir}", file=sys.__stderr__)
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="session")
async def kube(control_plane: ControlPlane) -> AsyncIterator[Kube]:
    async with await Kube.from_kubeconfig(control_plane.kubeconfig) as k:
        yield k


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


@pytest.fixture
def names(request: pytest.FixtureRequest) -> str:
    """A short unique stem for the cluster-scoped objects of one test."""
    stem = request.node.name.removeprefix("test_").replace("_", "-").lower()[:20].strip("-")
    return unique(stem)


@pytest.fixture
async def namespace(kube: Kube, names: str) -> AsyncIterator[str]:
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names}})
    yield names
    await kube.delete_if_exists(NAMESPACES, names)


@pytest.fixture
async def fleet(kube: Kube, names: str) -> AsyncIterator[fakedriver.Fleet]:
    """Two DRA nodes with 4 devices each, one DeviceClass per test, all with unique names."""
    f = fakedriver.Fleet(
        prefix=names,
        dra_nodes=2,
        devices_per_node=4,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    objs = f.manifests()
    await fakedriver.apply(kube, objs)
    yield f
    await fakedriver.delete(kube, objs)


@pytest.fixture(scope="session")
async def operator_thread(
    control_plane: ControlPlane, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[OperatorThread]:
    """draxr embedded in the test process (scheduler name "draxr") as the Deployment's pod runs it:
    in-cluster configuration with the token of the manifests' ServiceAccount, so every scenario
    exercises the least-privilege RBAC of manifests/ (and its leader-election Lease). It runs on a
    thread and event loop of its own (see OperatorThread)."""
    applied = await asyncio.to_thread(manifests.apply, control_plane)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    into = tmp_path_factory.mktemp("serviceaccount") / "sa"
    sa_dir = await service_account_dir(kube, control_plane, "draxr-system", "draxr", into, seconds=7200)
    os.environ["KUBERNETES_SERVICE_HOST"] = "127.0.0.1"  # read by the in-cluster loader only
    os.environ["KUBERNETES_SERVICE_PORT"] = str(control_plane.ports["api"])
    settings = fast_settings(
        kubeconfig=None,
        serviceaccount_dir=str(sa_dir),
        leader_election_namespace="draxr-system",
        backoff_max_seconds=5,
        unschedulable_flush_seconds=10,
        release_sweep_seconds=5,
        # A binding waits this long for its claims (upstream: 600 s): tests/integration/test_volumes.py
        # sees a provisioner that is down fail the binding within the test.
        volume_bind_timeout_seconds=10,
        # The admission webhook on loopback; the installed MutatingWebhookConfiguration calls it by url.
        bind_address="127.0.0.1",
        webhook_port=manifests.WEBHOOK_PORT,
        webhook_process=True,  # (the default is the thread: the suite exercises the process; test_webhook the thread)
        webhook_namespace="draxr-system",
        webhook_extra_hosts="127.0.0.1",
        webhook_cert_check_seconds=1,
        webhook_rotation_grace_seconds=2,
    )
    thread = OperatorThread(settings)
    try:
        await asyncio.to_thread(thread.start)
        yield thread
    finally:
        await asyncio.to_thread(thread.stop)


@pytest.fixture
def operator(operator_thread: OperatorThread) -> Iterator[Operator]:
    """The session's operator (see operator_thread); read its state, never await its events (they
    belong to its loop). A test that needs it fails at once, with the reason, if it has ended,
    rather than waiting out every timeout; and a test during which it ended fails for it."""
    before = operator_thread.problem()
    assert before is None, f"the session's embedded operator is not running: {before}"
    assert operator_thread.operator is not None
    yield operator_thread.operator
    after = operator_thread.problem()
    assert after is None, f"the session's embedded operator ended during this test: {after}"


@pytest.fixture
async def webhook_ready(operator: Operator, kube: Kube) -> Operator:
    """The operator serves, and the installed configuration trusts its CA."""
    await certs_loaded(operator)

    async def trusted() -> bool:
        config = await kube.get(MUTATING_WEBHOOKS, "draxr")
        return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

    await eventually(trusted, timeout=30)
    return operator
