"""draxr node-agent without an API server: the record built from kubelet's pod-resources answer, the
write/refresh decisions and /healthz on a fake clock, the gRPC client against a real grpc.aio server
on a unix socket (draxr_dev.devcluster.podresources), and the generated stubs themselves. The writes
to a real API server, and the admission policy, are in tests/integration/test_node_agent.py."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import filecmp
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from draxr.node_agent import (
    KubeletUnavailable,
    NodeAgent,
    Options,
    PodResourcesClient,
    PodResourcesError,
    health_app,
    is_stale,
    node_uid_from_token,
    pods_from,
    record,
    wanted,
)
from draxr.podresources import api_pb2
from draxr_dev import podresources_stubs
from draxr_dev.devcluster.podresources import FakeKubelet, pod_resources

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "devicepluginrecords.draxr.io.yaml"
GPU = "example.com/gpu"
T0 = dt.datetime(2026, 12, 5, 7, 0, 0, tzinfo=dt.UTC)


def response(*pods: Any) -> Any:
    return api_pb2.ListPodResourcesResponse(pod_resources=list(pods))


# ---- the record ------------------------------------------------------------------------------------


def test_one_entry_per_device_is_merged_per_container_and_resource_and_sorted() -> None:
    # kubelet reports one ContainerDevices per device (each with its NUMA node): merged, sorted, unique.
    resp = response(
        pod_resources(
            "team",
            "train-1",
            {
                "worker": [(GPU, ["GPU-b"]), (GPU, ["GPU-a"]), ("example.com/nic", ["nic-0"]), (GPU, ["GPU-a"])],
                "init": [(GPU, ["GPU-c"])],
            },
        ),
        pod_resources("default", "infer", {"main": [(GPU, ["GPU-d::1", "GPU-d::0"])]}),
    )
    assert pods_from(resp) == [
        {
            "namespace": "default",
            "name": "infer",
            "containers": [{"name": "main", "devices": [{"resourceName": GPU, "deviceIDs": ["GPU-d::0", "GPU-d::1"]}]}],
        },
        {
            "namespace": "team",
            "name": "train-1",
            "containers": [
                {"name": "init", "devices": [{"resourceName": GPU, "deviceIDs": ["GPU-c"]}]},
                {
                    "name": "worker",
                    "devices": [
                        {"resourceName": GPU, "deviceIDs": ["GPU-a", "GPU-b"]},
                        {"resourceName": "example.com/nic", "deviceIDs": ["nic-0"]},
                    ],
                },
            ],
        },
    ]


def test_only_device_plugin_devices_with_a_domain_and_pods_that_hold_some() -> None:
    resp = response(
        # DRA devices (dynamic_resources) are not the record's: ResourceClaims say those.
        pod_resources("a", "dra-only", {"c": []}, dynamic={"c": "claim-1"}),
        pod_resources("a", "mixed", {"c": [(GPU, ["g0"])]}, dynamic={"c": "claim-2"}),
        # No domain, kubernetes.io's own names, an empty ID list: not device-plugin devices.
        pod_resources("a", "odd", {"c": [("gpu", ["x"]), ("kubernetes.io/foo", ["y"]), (GPU, [])]}),
        pod_resources("a", "empty", {}),
    )
    assert [(p["namespace"], p["name"]) for p in pods_from(resp)] == [("a", "mixed")]
    assert wanted("nvidia.com/gpu")
    assert wanted("nvidia.com/mig-1g.10gb")
    assert not wanted("gpu")
    assert not wanted("/gpu")
    assert not wanted("example.com/")
    assert not wanted("hugepages.kubernetes.io/x")


def test_resource_filter_keeps_only_the_names_asked_for() -> None:
    resp = response(pod_resources("a", "p", {"c": [(GPU, ["g0"]), ("example.com/nic", ["n0"]), ("gpu", ["x"])]}))
    only = frozenset({"example.com/nic", "gpu"})  # an explicit name is taken as it is, domain or not
    [p] = pods_from(resp, only)
    assert p["containers"][0]["devices"] == [
        {"resourceName": "example.com/nic", "deviceIDs": ["n0"]},
        {"resourceName": "gpu", "deviceIDs": ["x"]},
    ]
    assert pods_from(resp, frozenset({"other.com/x"})) == []


def test_a_pod_listed_twice_is_merged() -> None:
    # A same-name pod still terminating beside its successor: every device either holds is taken.
    resp = response(
        pod_resources("a", "sts-0", {"c": [(GPU, ["g1"])]}),
        pod_resources("a", "sts-0", {"c": [(GPU, ["g0"])], "d": [(GPU, ["g2"])]}),
    )
    [p] = pods_from(resp)
    assert p["containers"] == [
        {"name": "c", "devices": [{"resourceName": GPU, "deviceIDs": ["g0", "g1"]}]},
        {"name": "d", "devices": [{"resourceName": GPU, "deviceIDs": ["g2"]}]},
    ]


def test_record_object_and_the_crd_agree() -> None:
    pods = pods_from(response(pod_resources("a", "p", {"c": [(GPU, ["g0", "g1"])]})))
    rec = record("gpu-node-1", pods, T0 + dt.timedelta(microseconds=123), 30)
    assert rec["apiVersion"] == "draxr.io/v1alpha1"
    assert rec["kind"] == "DevicePluginRecord"
    assert rec["metadata"]["name"] == rec["spec"]["nodeName"] == "gpu-node-1"
    spec = rec["spec"]
    assert spec["observedTime"] == "2026-12-05T07:00:00Z"
    assert (spec["refreshSeconds"], spec["podCount"], spec["deviceCount"]) == (30, 1, 2)
    # Every field written is in the CRD's schema, and every required one is written.
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec) <= set(schema["properties"])
    assert set(schema["required"]) <= set(spec)
    pod_schema = schema["properties"]["pods"]["items"]
    assert set(pods[0]) == set(pod_schema["properties"])
    ctr_schema = pod_schema["properties"]["containers"]["items"]
    assert set(pods[0]["containers"][0]) == set(ctr_schema["properties"])
    dev_schema = ctr_schema["properties"]["devices"]["items"]
    assert set(pods[0]["containers"][0]["devices"][0]) == set(dev_schema["properties"])


def _jwt(claims: dict[str, Any]) -> str:
    def part(d: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def test_the_record_is_owned_by_the_node_named_in_the_pod_bound_token() -> None:
    bound = {"kubernetes.io": {"namespace": "draxr-node-agent", "node": {"name": "n1", "uid": "u-1"}}}
    assert node_uid_from_token(_jwt(bound), "n1") == "u-1"
    assert node_uid_from_token(_jwt(bound), "n2") is None  # another node's token: no owner
    assert node_uid_from_token(_jwt({"kubernetes.io": {"namespace": "x"}}), "n1") is None  # not pod-bound
    assert node_uid_from_token("not-a-jwt", "n1") is None
    rec = record("n1", [], T0, 30, node_uid="u-1")
    assert rec["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u-1"}]
    assert "ownerReferences" not in record("n1", [], T0, 30)["metadata"]


def test_stale_after_three_refresh_intervals() -> None:
    rec = record("n", [], T0, 30)
    assert not is_stale(rec, T0 + dt.timedelta(seconds=90))
    assert is_stale(rec, T0 + dt.timedelta(seconds=91))
    assert is_stale({"spec": {"observedTime": "yesterday", "refreshSeconds": 30}}, T0)
    assert is_stale({}, T0)


# ---- the agent's decisions, on a fake clock, with a recording writer ---------------------------------


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def agent_on(clock: Clock, answers: list[Any]) -> tuple[NodeAgent, list[list[Any]]]:
    written: list[list[Any]] = []

    async def read() -> Any:
        return answers[0]

    agent = NodeAgent(kube=None, read=read, node="n1", refresh_seconds=30, poll_seconds=2, clock=clock)  # type: ignore[arg-type]

    async def write(pods: list[Any]) -> None:  # what NodeAgent.write records, without the API
        written.append(pods)
        agent.written_pods, agent.last_write, agent.writes = pods, clock(), agent.writes + 1

    agent.write = write  # type: ignore[method-assign]
    return agent, written


async def test_writes_on_change_and_at_the_refresh_bound_only() -> None:
    clock = Clock()
    one = response(pod_resources("a", "p", {"c": [(GPU, ["g0"])]}))
    answers = [one]
    agent, written = agent_on(clock, answers)
    await agent.step()  # the first read: written
    assert len(written) == 1
    for _ in range(14):  # unchanged for 28 s of polls: nothing
        clock.t += 2
        await agent.step()
    assert len(written) == 1
    clock.t += 2  # 30 s since the write: refreshed with the same pods
    await agent.step()
    assert len(written) == 2
    assert written[1] == written[0]
    answers[0] = response()  # the pod ended: written at the next poll
    clock.t += 2
    await agent.step()
    assert written[-1] == []
    assert len(written) == 3


async def test_healthz_fails_when_nothing_was_written_for_twice_the_refresh() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    clock = Clock()
    agent, _ = agent_on(clock, [response()])
    async with TestClient(TestServer(health_app(agent))) as http:
        assert (await http.get("/healthz")).status == 200  # starting: within the bound
        clock.t += 61
        r = await http.get("/healthz")
        assert r.status == 503
        assert "no DevicePluginRecord written for 61s" in await r.text()
        await agent.step()
        assert (await http.get("/healthz")).status == 200
        clock.t += 60
        assert (await http.get("/healthz")).status == 200
        clock.t += 1.5
        r = await http.get("/healthz")
        assert r.status == 503
        assert "record not refreshed" in await r.text()


def test_options_are_checked() -> None:
    for bad in (Options(node_name=""), Options(node_name="n", refresh_seconds=0), Options("n", poll_seconds=31)):
        with pytest.raises(SystemExit):
            bad.check()
    Options(node_name="n").check()


# ---- the gRPC client against a real server on a unix socket -------------------------------------------


async def test_client_lists_through_the_socket_and_classifies_errors() -> None:
    async with FakeKubelet() as kubelet:
        kubelet.lister.pods = [pod_resources("a", "p", {"c": [(GPU, ["g0"])]})]
        client = PodResourcesClient(kubelet.socket, timeout=5)
        try:
            got = await client.list()
            assert [(p.namespace, p.name) for p in got.pod_resources] == [("a", "p")]
            assert pods_from(got)[0]["containers"][0]["devices"] == [{"resourceName": GPU, "deviceIDs": ["g0"]}]
            kubelet.lister.fail = grpc.StatusCode.RESOURCE_EXHAUSTED  # kubelet's rate limit: transient
            with pytest.raises(KubeletUnavailable):
                await client.list()
            kubelet.lister.fail = grpc.StatusCode.PERMISSION_DENIED  # does not heal by retrying
            with pytest.raises(PodResourcesError):
                await client.list()
        finally:
            await client.close()
    # No server behind the socket at all (kubelet restarting): transient, never fatal.
    client = PodResourcesClient("/nonexistent/kubelet.sock", timeout=2)
    try:
        with pytest.raises(KubeletUnavailable):
            await client.list()
    finally:
        await client.close()


# ---- the generated stubs ------------------------------------------------------------------------------


def test_stubs_are_in_git_and_fresh(tmp_path: Path) -> None:
    """The stubs are in git (a wheel built from a clean clone has them) and are what the pinned
    grpcio-tools writes from the pinned k8s.io/kubelet module's api.proto, byte for byte; the service
    is kubelet's."""
    files = [f"operator/draxr/podresources/{name}" for name in podresources_stubs.GENERATED]
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", *files],
        cwd=ROOT,
        check=False,
        timeout=30,
        capture_output=True,
    )
    assert tracked.returncode == 0, tracked.stderr
    subprocess.run(
        [sys.executable, str(ROOT / "operator" / "draxr_dev" / "podresources_stubs.py"), "--out", str(tmp_path)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    for name in podresources_stubs.GENERATED:
        assert filecmp.cmp(tmp_path / name, podresources_stubs.OUT_DIR / name, shallow=False), (
            f"{name} is not fresh: run operator/draxr_dev/podresources_stubs.py"
        )
    [service] = api_pb2.DESCRIPTOR.services_by_name.values()
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]


async def test_the_loop_survives_kubelet_outages() -> None:
    """Transient kubelet errors never end the agent's loop (no write meanwhile: the record goes stale)."""
    calls = 0

    async def read() -> Any:
        nonlocal calls
        calls += 1
        if calls < 8:
            raise KubeletUnavailable("kubelet restarting")
        raise asyncio.CancelledError

    agent = NodeAgent(kube=None, read=read, node="n1", poll_seconds=0.01)  # type: ignore[arg-type]
    agent.loop.backoff.initial = agent.loop.backoff.maximum = 0.001
    with pytest.raises(asyncio.CancelledError):
        await agent.run()
    assert calls == 8
    assert agent.writes == 0


async def test_an_error_that_does_not_heal_ends_the_loop() -> None:
    """kubelet refusing for good (PodResourcesError) five times in a row: LoopFailed, which ends the
    process non-zero (node_agent.main), never a silent, idle agent."""
    from draxr.loops import LoopFailed

    calls = 0

    async def read() -> Any:
        nonlocal calls
        calls += 1
        raise PodResourcesError("PERMISSION_DENIED")

    agent = NodeAgent(kube=None, read=read, node="n1", poll_seconds=0.01)  # type: ignore[arg-type]
    agent.loop.backoff.initial = agent.loop.backoff.maximum = 0.001
    with pytest.raises(LoopFailed):
        await agent.run()
    assert calls == 5


def test_cli_takes_the_node_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from draxr import logs, node_agent
    from draxr.cli import main

    with pytest.raises(SystemExit) as helped:
        main(["node-agent", "--help"])
    assert helped.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--node-name", "--socket", "--refresh-seconds", "--poll-seconds", "--resource", "--health-port"):
        assert flag in text
    seen: list[Options] = []

    async def run(opts: Options) -> int:
        seen.append(opts)
        return 0

    monkeypatch.setattr(node_agent, "main", run)
    monkeypatch.setattr(logs, "configure", lambda *_: None)
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")  # the DaemonSet's fieldRef spec.nodeName
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["node-agent", "--resource", "a.com/x", "--resource", "b.com/y"]) == 0
    [opts] = seen
    assert opts.node_name == "gpu-node-7"
    assert opts.resources == frozenset({"a.com/x", "b.com/y"})
    assert opts.socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert (opts.refresh_seconds, opts.poll_seconds, opts.kubeconfig) == (30, 2.0, None)
