"""draxr.core.migration: device-plugin IDs to DRA devices, the node records, and the adoption claims."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.allocator.model import DeviceInfo, parse_slice
from draxr.core.mapping import build_mapping
from draxr.core.migration import (
    FENCE_KEY,
    ID_ATTRIBUTE_ANNOTATION,
    REPLICA_SEPARATOR_ANNOTATION,
    AdoptionClaim,
    Fence,
    Identity,
    NodeRecord,
    PodRef,
    adoption_claim_from_api,
    class_identity,
    fence_from_api,
    identities,
    is_adoption_claim,
    match,
    parse_record,
    plan,
)
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.plugins.dynamic_resources import NOT_ADOPTED
from draxr.core.plugins.node_resources_fit import DRA_HOLDS_DEVICES
from draxr.core.state import ClusterState, PodInfo
from draxr.core.status import Code
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.records import fake_record
from tests.unit.cluster_builders import (
    GPU_CLASS,
    allocation,
    cluster,
    devices_of,
    gpu_class,
    gpu_slice,
    node,
    plain_claim,
    pod,
)

DRIVER = fakedriver.DRIVER
GPU = "example.com/gpu"
CLASS = "gpu.example.com"
UUID = Identity("uuid")


def devices(node: str, uuids: list[str]) -> list[DeviceInfo]:
    raw = fakedriver.resource_slice(node, [fakedriver.device(f"gpu-{i}", uid=u) for i, u in enumerate(uuids)])
    return list(parse_slice(raw).devices)


def record(node: str = "n1", pods: list[tuple[str, str, list[str]]] | None = None, **spec: Any) -> dict[str, Any]:
    held = {(ns, name): {GPU: ids} for ns, name, ids in pods or []}
    obj = fake_record(node, held, observed="2026-12-05T07:00:00Z", **spec)
    obj["metadata"]["uid"] = f"rec-{node}"
    return obj


# ---- identity --------------------------------------------------------------------------------


def test_identity_reads_bare_and_qualified_attributes() -> None:
    [d] = devices("n1", ["GPU-1"])
    assert Identity("uuid").value_of(d) == "GPU-1"
    assert Identity(f"{DRIVER}/uuid").value_of(d) == "GPU-1"  # the driver's own domain
    assert Identity("other.example.com/uuid").value_of(d) is None
    assert Identity("model").value_of(d) == "fake-a100"
    assert Identity("numa").value_of(d) is None  # not a string


def test_replicas_name_their_base_device() -> None:
    assert UUID.base_id("GPU-1::3") == "GPU-1"
    assert Identity("uuid", replica_separator="").base_id("GPU-1::3") == "GPU-1::3"


def test_match_takes_exactly_one_device_and_reports_the_rest() -> None:
    devs = devices("n1", ["GPU-1", "GPU-2", "GPU-2"])
    found, unmatched = match(["GPU-1::0", "GPU-1::1", "GPU-2", "GPU-9"], UUID, devs, GPU, "n1", CLASS)
    assert found == [(DRIVER, "n1", "gpu-0")]  # two replicas of GPU-1: its one device, once
    assert [(u.device_id, u.reason) for u in unmatched] == [
        ("GPU-2", f"matches 2 devices: {DRIVER}/n1/gpu-1, {DRIVER}/n1/gpu-2"),
        ("GPU-9", f"matches no device of DeviceClass {CLASS}"),
    ]


# ---- records ---------------------------------------------------------------------------------


def test_record_is_read_and_goes_stale_after_three_refreshes() -> None:
    r = parse_record(record(pods=[("ns", "p", ["GPU-1"])]))
    assert not isinstance(r, str)
    assert [(h.namespace, h.pod, h.resource, h.device_ids) for h in r.held] == [("ns", "p", GPU, ("GPU-1",))]
    assert not r.stale(r.observed + 90)
    assert r.stale(r.observed + 91)


def test_unreadable_records_say_why() -> None:
    assert "is not the record's name" in str(parse_record(record(nodeName="n2")))
    assert "is not a time" in str(parse_record(record(observedTime="yesterday")))
    assert "not a positive number" in str(parse_record(record(refreshSeconds=0)))


# ---- the plan --------------------------------------------------------------------------------

RUNNING = PodRef("uid-p", "n1", True)
IDS = {GPU: (UUID, CLASS)}


def _plan(
    rec: dict[str, Any], pods: dict[tuple[str, str], PodRef], existing: dict[str, AdoptionClaim | None] | None = None
):  # type: ignore[no-untyped-def]
    parsed = parse_record(rec)
    assert not isinstance(parsed, str)
    return plan(parsed, pods, IDS, {CLASS: devices("n1", ["GPU-1", "GPU-2"])}, existing or {})


def test_a_running_pod_gets_one_claim_with_exactly_its_devices() -> None:
    p = _plan(record(pods=[("ns", "p", ["GPU-2"])]), {("ns", "p"): RUNNING})
    [claim] = p.create
    assert (claim.namespace, claim.pod, claim.pod_uid, claim.node) == ("ns", "p", "uid-p", "n1")
    assert claim.devices == ((DRIVER, "n1", "gpu-1"),)
    body, status = claim.body(), claim.status()
    tolerates = [{"key": FENCE_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    exactly = {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1, "tolerations": tolerates}
    assert body["spec"]["devices"]["requests"] == [{"name": "dp-0", "exactly": exactly}]
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-p"
    assert status["reservedFor"] == [
        {"apiGroup": "draxr.io", "resource": "devicepluginrecords", "name": "n1", "uid": "rec-n1"}
    ]
    assert status["allocation"]["devices"]["results"] == [
        {"request": "dp-0", "driver": DRIVER, "pool": "n1", "device": "gpu-1"}
    ]
    assert p.delete == p.unmatched == p.waiting == []


def test_ended_foreign_and_unknown_pods_get_nothing() -> None:
    rec = record(pods=[("ns", "done", ["GPU-1"]), ("ns", "elsewhere", ["GPU-1"]), ("ns", "unknown", ["GPU-1"])])
    pods = {("ns", "done"): PodRef("u1", "n1", False), ("ns", "elsewhere"): PodRef("u2", "n2", True)}
    assert _plan(rec, pods).create == []


def test_an_unmatched_id_holds_the_pods_claim_back() -> None:
    p = _plan(record(pods=[("ns", "p", ["GPU-1", "GPU-7"])]), {("ns", "p"): RUNNING})
    assert p.create == []
    assert [u.device_id for u in p.unmatched] == ["GPU-7"]
    assert p.waiting == ["ns/p: device IDs without exactly one DRA device"]


def test_resources_without_identity_are_the_device_plugins_alone() -> None:
    rec = record(pods=[("ns", "p", ["GPU-1"])])
    rec["spec"]["pods"][0]["containers"][0]["devices"][0]["resourceName"] = "example.com/nic"
    assert _plan(rec, {("ns", "p"): RUNNING}).create == []


def test_claims_of_pods_gone_changed_or_unreadable_are_deleted() -> None:
    kept = _plan(record(pods=[("ns", "p", ["GPU-1"])]), {("ns", "p"): RUNNING}).create[0]
    changed = _plan(record(pods=[("ns", "q", ["GPU-1"])]), {("ns", "q"): PodRef("uid-q", "n1", True)}).create[0]
    rec = record(pods=[("ns", "p", ["GPU-1"]), ("ns", "q", ["GPU-2"])])
    pods = {("ns", "p"): RUNNING, ("ns", "q"): PodRef("uid-q", "n1", True)}
    gone = _plan(record(pods=[("ns", "r", ["GPU-2"])]), {("ns", "r"): PodRef("uid-r", "n1", True)}).create[0]
    p = _plan(rec, pods, {kept.key: kept, changed.key: changed, gone.key: gone, "ns/broken": None})
    assert sorted(p.delete) == sorted([changed.key, gone.key, "ns/broken"])
    assert p.create == []  # q's new claim comes once its old one is gone (same name)


@given(
    st.lists(st.sampled_from(["GPU-1", "GPU-2", "GPU-3"]), min_size=1, max_size=3, unique=True),
    st.text("abc-", min_size=1, max_size=300),
)
def test_a_written_claim_reads_back_as_the_same_claim(ids: list[str], pod: str) -> None:
    rec = record(pods=[("ns", pod, ids)])
    parsed = parse_record(rec)
    assert not isinstance(parsed, str)
    [claim] = plan(
        parsed, {("ns", pod): PodRef("uid-x", "n1", True)}, IDS, {CLASS: devices("n1", ["GPU-1", "GPU-2", "GPU-3"])}, {}
    ).create
    written = {**claim.body(), "status": claim.status()}
    assert is_adoption_claim(written)
    assert len(claim.name) <= 253
    assert adoption_claim_from_api(written) == claim
    assert adoption_claim_from_api({**claim.body()}) is None  # not allocated yet


def test_identities_come_from_the_classes_that_serve_each_name() -> None:
    plain = fakedriver.device_class("plain.example.com", extended_resource_name="example.com/plain")
    nvidia = fakedriver.device_class(CLASS, extended_resource_name=GPU)
    nvidia["metadata"]["annotations"] = {ID_ATTRIBUTE_ANNOTATION: "uuid", REPLICA_SEPARATOR_ANNOTATION: ""}
    classes = {c["metadata"]["name"]: c for c in (plain, nvidia)}
    found = identities(build_mapping(classes.values()), classes)
    assert found[GPU] == (Identity("uuid", ""), CLASS)
    assert found[f"deviceclass.resource.kubernetes.io/{CLASS}"] == (Identity("uuid", ""), CLASS)  # the implicit name
    assert "example.com/plain" not in found
    assert class_identity(plain) is None


# ---- DynamicResources while device-plugin pods are not adopted --------------------------------


def _migrating(identity: bool = True) -> ClusterState:
    """n1: 2 DRA devices of the class, one device-plugin pod running there since before."""
    state = cluster({"n1": 2})
    cls = gpu_class()
    if identity:
        cls["metadata"]["annotations"] = {ID_ATTRIBUTE_ANNOTATION: "uuid"}
    state.upsert_class(cls)
    state.upsert_pod(pod("old", gpus=1, node_name="n1", phase="Running", scheduler="default-scheduler"))
    return state


def _schedule(state: ClusterState, p: dict[str, Any]) -> Decision | Unschedulable:
    return schedule(PodInfo.from_api(state.upsert_pod(p).raw), state, features=DEFAULT_FEATURES, binds_claims=True)


def _adopt(state: ClusterState, device: str) -> None:
    [claim] = plan(
        _record_of(state, device),
        {("ns", "old"): PodRef("uid-old", "n1", True)},
        state.identities(),
        {GPU_CLASS: list(parse_slice(gpu_slice("n1", 2)).devices)},
        {},
    ).create
    state.upsert_claim({**claim.body(), "status": claim.status()})


def _record_of(state: ClusterState, device: str) -> Any:
    parsed = parse_record(record(pods=[("ns", "old", [f"n1-{device}"])]))
    assert not isinstance(parsed, str)
    return parsed


def test_a_device_plugin_pod_not_adopted_yet_keeps_its_nodes_devices_from_dra() -> None:
    state = _migrating()
    result = _schedule(state, pod("new", gpus=1))
    assert isinstance(result, Unschedulable)
    status = result.statuses["n1"]
    assert (status.plugin, status.code, status.reasons) == ("DynamicResources", Code.UNSCHEDULABLE, (NOT_ADOPTED,))
    assert result.message == f"0/1 nodes are available: 1 {NOT_ADOPTED}."
    _adopt(state, "gpu-0")
    decision = _schedule(state, pod("after", gpus=1))
    assert isinstance(decision, Decision)
    assert devices_of(decision.allocation) == [(DRIVER, "n1", "gpu-1")]  # never the adopted one
    assert isinstance(_schedule(state, pod("third", gpus=2)), Unschedulable)


def test_pods_with_claims_of_their_own_wait_for_the_adoption_too() -> None:
    state = _migrating()
    claim = plain_claim("mine")
    claim["spec"]["devices"]["requests"] = [{"name": "r", "exactly": {"deviceClassName": GPU_CLASS, "count": 1}}]
    state.upsert_claim(claim)
    p = pod("with-claim", resourceClaims=[{"name": "gpu", "resourceClaimName": "mine"}])
    result = _schedule(state, p)
    assert isinstance(result, Unschedulable)
    assert result.statuses["n1"].reasons == (NOT_ADOPTED,)


def test_without_an_identity_or_with_dra_devices_nothing_waits() -> None:
    assert isinstance(_schedule(_migrating(identity=False), pod("new", gpus=1)), Decision)
    state = _migrating()
    state.remove_pod("uid-old")
    state.upsert_pod(pod("old", gpus=1, node_name="n1", phase="Running", claim_name="old-claim"))  # a special claim
    assert isinstance(_schedule(state, pod("new", gpus=1)), Decision)


# ---- back from DRA to the device plugin --------------------------------------------------------


def _moving_back(identity: bool = True) -> ClusterState:
    """n1 serves the name by its device plugin again (allocatable 2) while its DRA slice is still
    there and a DRA claim holds gpu-0."""
    state = _migrating(identity)
    state.remove_pod("uid-old")
    state.upsert_node(node("n1", extended={GPU: "2"}))
    state.upsert_claim(plain_claim("dra-held", alloc=allocation("n1", "gpu-0")))
    return state


def test_device_plugin_pods_wait_while_dra_claims_hold_the_nodes_devices() -> None:
    state = _moving_back()
    result = _schedule(state, pod("dp", gpus=1))
    assert isinstance(result, Unschedulable)
    status = result.statuses["n1"]
    assert (status.plugin, status.code, status.reasons) == ("NodeResourcesFit", Code.UNRESOLVABLE, (DRA_HOLDS_DEVICES,))
    state.remove_claim("ns", "dra-held")
    decision = _schedule(state, pod("dp-after", gpus=1))
    assert isinstance(decision, Decision)
    assert decision.allocation is None  # the device plugin's


def test_adoption_claims_and_classes_without_identity_do_not_hold_the_device_plugin_back() -> None:
    assert isinstance(_schedule(_moving_back(identity=False), pod("dp", gpus=1)), Decision)
    state = _moving_back()
    state.remove_claim("ns", "dra-held")
    _adopt(state, "gpu-0")  # the adopted device is the plugin's own
    assert isinstance(_schedule(state, pod("dp", gpus=1)), Decision)


def test_a_pod_made_after_the_record_was_read_does_not_get_the_devices_of_its_namesake() -> None:
    rec = record(pods=[("ns", "p", ["GPU-1"])])  # observed 07:00:00
    parsed = parse_record(rec)
    assert not isinstance(parsed, str)
    later = PodRef("uid-new", "n1", True, parsed.observed + 5)
    assert _plan(rec, {("ns", "p"): later}).create == []
    earlier = PodRef("uid-old", "n1", True, parsed.observed - 5)
    assert [c.pod_uid for c in _plan(rec, {("ns", "p"): earlier}).create] == ["uid-old"]


def test_a_running_pods_claim_stays_while_its_ids_match_no_device_for_a_while() -> None:
    """kubelet deletes its node's slices when it starts; the driver publishes them again later."""
    kept = _plan(record(pods=[("ns", "p", ["GPU-1"])]), {("ns", "p"): RUNNING}).create[0]
    parsed = parse_record(record(pods=[("ns", "p", ["GPU-1"])]))
    assert not isinstance(parsed, str)
    no_slices = plan(parsed, {("ns", "p"): RUNNING}, IDS, {CLASS: []}, {kept.key: kept})
    assert no_slices.delete == []
    assert [u.device_id for u in no_slices.unmatched] == ["GPU-1"]
    gone = plan(parsed, {}, IDS, {CLASS: []}, {kept.key: kept})
    assert gone.delete == [kept.key]  # the pod itself went: its claim goes
    empty = parse_record(record(pods=[]))  # kubelet starting may list no pod for a moment
    assert not isinstance(empty, str)
    still = plan(empty, {}, IDS, {CLASS: []}, {kept.key: kept}, holds=lambda uid: uid == "uid-p")
    assert still.delete == []
    ended = plan(empty, {}, IDS, {CLASS: []}, {kept.key: kept}, holds=lambda uid: False)
    assert ended.delete == [kept.key]


def test_a_missing_record_says_so_and_names_the_crd_when_it_is_not_installed() -> None:
    from draxr.migrator import report

    state = _migrating()
    [installed] = report(state, 0.0)
    assert (installed.record, installed.safe) == ("missing", False)
    [absent] = report(state, 0.0, records_installed=False)
    assert absent.record.startswith("missing: the DevicePluginRecord CRD (devicepluginrecords.draxr.io) is not")
    assert "kubectl apply -k crds/" in absent.record


# ---- the fence: DeviceTaintRules over devices device-plugin pods may hold unadopted ------------


def _fences(state: ClusterState, now: float = 0.0) -> dict[str, frozenset[tuple[str, str, str]]]:
    from draxr.migrator import fences

    return {node: devices for node, (devices, _) in fences(state, now).items()}


def _dev(name: str) -> tuple[str, str, str]:
    return (DRIVER, "n1", name)


def test_without_a_record_every_device_of_the_class_on_the_node_is_fenced() -> None:
    state = _migrating()
    assert _fences(state) == {"n1": frozenset({_dev("gpu-0"), _dev("gpu-1")})}
    from draxr.migrator import fences

    [why] = fences(state, 0.0)["n1"][1]
    assert "all 2 devices of DeviceClass" in why
    assert "no DevicePluginRecord" in why
    assert _fences(_migrating(identity=False)) == {}  # no identity: no migration, no fence


def test_a_fresh_record_fences_exactly_the_devices_of_pods_not_adopted_yet() -> None:
    state = _migrating()
    state.adoption.upsert_record(record(pods=[("ns", "old", ["n1-gpu-1"])]))
    observed = state.adoption.records["n1"]
    assert isinstance(observed, NodeRecord)
    assert _fences(state, observed.observed) == {"n1": frozenset({_dev("gpu-1")})}
    _adopt(state, "gpu-1")
    assert _fences(state, observed.observed) == {}  # safe: no fence


def test_a_stale_record_an_unmatched_id_or_an_unlisted_pod_fence_the_whole_class() -> None:
    state = _migrating()
    state.adoption.upsert_record(record(pods=[("ns", "old", ["n1-gpu-1"])]))
    observed = state.adoption.records["n1"]
    assert isinstance(observed, NodeRecord)
    both = {"n1": frozenset({_dev("gpu-0"), _dev("gpu-1")})}
    assert _fences(state, observed.observed + 4 * observed.refresh_seconds) == both  # stale
    state.adoption.upsert_record(record(pods=[("ns", "old", ["GPU-elsewhere"])]))
    assert _fences(state, observed.observed) == both  # an ID that matches no device
    state.adoption.upsert_record(record(pods=[("ns", "other", ["n1-gpu-1"])]))
    assert _fences(state, observed.observed) == both  # the record does not list "old"


def test_a_fence_rule_names_its_node_and_device_and_reads_back() -> None:
    fence = Fence("n1", _dev("gpu-1"))
    body = fence.body("node-uid")
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["kind"] == "DeviceTaintRule"
    assert fence.name.startswith("draxr-fence-n1-gpu-1-")
    assert body["spec"] == {
        "deviceSelector": {"driver": DRIVER, "pool": "n1", "device": "gpu-1"},
        "taint": {"key": FENCE_KEY, "effect": "NoSchedule"},
    }
    assert body["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert fence_from_api(body) == fence
    edited = {**body, "spec": {**body["spec"], "taint": {"key": FENCE_KEY, "effect": "None"}}}
    assert fence_from_api(edited) is None
    long = Fence("n" * 253, _dev("gpu-1"))
    assert len(long.name) <= 253
    assert fence_from_api(long.body()) == long


def test_the_adoption_claim_tolerates_the_fence() -> None:
    claim = AdoptionClaim("ns", "old", "uid-old", "n1", ((GPU, GPU_CLASS, (_dev("gpu-1"),)),))
    [request] = claim.body()["spec"]["devices"]["requests"]
    assert request["exactly"]["tolerations"] == [{"key": FENCE_KEY, "operator": "Exists", "effect": "NoSchedule"}]
