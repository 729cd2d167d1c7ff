"""plugins.node_ports: upstream's NodePorts (nodeports/node_ports.go): a host port (ip, protocol,
port) must be free on the node, 0.0.0.0 conflicting with every address. Upstream's own answers for
generated cases: tests/differential/test_scheduling_differential.py."""

from __future__ import annotations

from typing import Any

from hypothesis import given

from draxr.core.plugins import node_ports
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code, Status
from tests.unit.cluster_builders import node, pod

from .node_local_laws import PLAIN, PORTS, ForgetfulKey, clusters, key_breaks, twins

TCP_80, UDP_80, TCP_81_ON_IP = PORTS


def _holding(*ports: dict[str, Any]) -> ClusterState:
    state = ClusterState()
    state.upsert_node(node("n"))
    for i, port in enumerate(ports):
        holder = pod(f"holder-{i}", node_name="n", phase="Running")
        holder["spec"]["containers"][0]["ports"] = [port]
        state.upsert_pod(holder)
    return state


def _verdict(state: ClusterState, *ports: dict[str, Any]) -> Status | None:
    wanting = pod("p")
    wanting["spec"]["containers"][0]["ports"] = list(ports)
    check = node_ports.PLUGIN.prefilter(PodInfo.from_api(wanting))
    assert check is not None
    return check(state.nodes["n"], state.usage["n"])


def test_a_taken_host_port_is_unschedulable_since_evicting_its_holder_frees_it() -> None:
    rejected = _verdict(_holding(TCP_80), TCP_80)
    assert rejected is not None
    assert (rejected.code, rejected.plugin, rejected.reasons) == (
        Code.UNSCHEDULABLE, "NodePorts", ("node(s) didn't have free ports for the requested pod ports",)
    )  # fmt: skip


def test_the_protocol_and_the_address_tell_ports_apart_and_any_address_takes_them_all() -> None:
    assert _verdict(_holding(UDP_80), TCP_80) is None  # another protocol
    assert _verdict(_holding(TCP_81_ON_IP), {**TCP_81_ON_IP, "hostIP": "10.0.0.2"}) is None  # another address
    assert _verdict(_holding(TCP_81_ON_IP), {**TCP_81_ON_IP, "hostIP": ""}) is not None  # 0.0.0.0 wants them all
    assert _verdict(_holding({**TCP_81_ON_IP, "hostIP": ""}), TCP_81_ON_IP) is not None
    assert node_ports.PLUGIN.prefilter(PodInfo.from_api(pod("q"))) is None  # no host port: nothing to check


@given(twins(), clusters())
def test_pods_with_the_same_key_get_the_same_verdicts(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(node_ports.PLUGIN, pair, state)


def test_a_key_that_forgets_the_ports_is_caught() -> None:
    fields = {**PLAIN, "ports": [TCP_80]}
    assert key_breaks(ForgetfulKey(node_ports.PLUGIN), (fields, {**fields, "ports": [UDP_80]}), _holding(TCP_80))
