"""draxr.core.requests: device-plugin precedence, device requests and request mappings
(contract §2.2, §2.3), and pod request aggregation."""

from __future__ import annotations

import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.mapping import DEVICE_CLASS_PREFIX, ExtendedResourceMapping, OverrideMapping, build_mapping
from draxr.core.pod_view import pod_view
from draxr.core.requests import (
    ALLOCATION_RESULTS_MAX_SIZE,
    DEVICE_REQUESTS_MAX_SIZE,
    DeviceRequest,
    NodeRequests,
    RequestMapping,
    container_requests,
    create_requests_and_mappings,
    is_sidecar,
    node_requests,
    pod_requests,
    prepare_pod,
)

X = "example.com/gpu"  # upstream tests' extendedResourceName; sorts after DEVICE_CLASS_PREFIX
X1 = X + "1"
XINIT = X + "init"
IMPLICIT_INIT = DEVICE_CLASS_PREFIX + "classInit"


class PodBuilder:
    """Mirrors upstream st.MakePod(): Res -> con<n>, InitReq -> init-con<n>, SidecarReq -> sidecar-con<n>;
    each sets requests and limits to the same map."""

    def __init__(self) -> None:
        self.containers: list[dict[str, Any]] = []
        self.init_containers: list[dict[str, Any]] = []

    @staticmethod
    def _c(name: str, res: dict[str, Any], sidecar: bool = False) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name, "image": "pause", "resources": {"requests": dict(res), "limits": dict(res)}}
        if sidecar:
            c["restartPolicy"] = "Always"
        return c

    def res(self, res: dict[str, Any]) -> PodBuilder:
        self.containers.append(self._c(f"con{len(self.containers)}", res))
        return self

    def init_req(self, res: dict[str, Any]) -> PodBuilder:
        self.init_containers.append(self._c(f"init-con{len(self.init_containers)}", res))
        return self

    def sidecar_req(self, res: dict[str, Any]) -> PodBuilder:
        self.init_containers.append(self._c(f"sidecar-con{len(self.init_containers)}", res, sidecar=True))
        return self

    def obj(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": self.containers}
        if self.init_containers:
            spec["initContainers"] = self.init_containers
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod", "namespace": "ns", "uid": "u"},
            "spec": spec,
        }


def make_pod() -> PodBuilder:
    return PodBuilder()


def mapping_of(pairs: dict[str, str]) -> ExtendedResourceMapping:
    """Resolver like upstream's mockDeviceClassResolver: explicit names -> class (implicit names come free)."""
    classes: dict[str, dict[str, Any]] = {}
    for rname, cname in pairs.items():
        cls = classes.setdefault(cname, {"metadata": {"name": cname}, "spec": {}})
        if not rname.startswith(DEVICE_CLASS_PREFIX):
            cls["spec"]["extendedResourceName"] = rname
    m = build_mapping(classes.values())
    for rname, cname in pairs.items():
        assert m.class_for(rname) == cname
    return m


def node(allocatable: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"capacity": dict(allocatable or {})}
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": status}


def req(name: str, cls: str, count: int) -> DeviceRequest:
    return DeviceRequest(name, cls, count)


def sort_mappings(ms: tuple[RequestMapping, ...]) -> list[RequestMapping]:
    # upstream Test_createRequestsAndMappings_mappings sorts by request name, then container name
    return sorted(ms, key=lambda m: (m.request_name, m.container_name))


# --------------------------------------------------------------------------- upstream unit tests

POD1 = make_pod().res({X: "1", X1: "2"}).obj()
POD2 = make_pod().res({X: "1"}).res({X1: "2"}).obj()
POD_INIT = make_pod().res({X: "1"}).init_req({XINIT: "2"}).obj()
POD_INIT2 = make_pod().res({X: "1"}).init_req({XINIT: "1"}).init_req({XINIT: "2"}).obj()
POD_INIT3 = make_pod().res({X: "1"}).init_req({XINIT: "1"}).sidecar_req({XINIT: "1"}).init_req({XINIT: "2"}).obj()
POD1_INIT_IMPLICIT = make_pod().init_req({XINIT: "1", IMPLICIT_INIT: "2"}).obj()
POD_INIT_IMPLICIT = make_pod().res({X: "1"}).init_req({XINIT: "1"}).init_req({IMPLICIT_INIT: "2"}).obj()

DEV_MAP = {X: "class"}
DEV_MAP2 = {X: "class", X1: "class1"}
DEV_MAP_INIT = {X: "class", XINIT: "classInit", IMPLICIT_INIT: "classInit"}


# Test_createRequestsAndMappings_requests (kubernetes/kubernetes extendeddynamicresources_test.go)
@pytest.mark.parametrize(
    ("pod", "resources", "classes", "want"),
    [
        pytest.param(POD1, [], {}, [], id="nil"),
        pytest.param(POD1, [X], DEV_MAP, [req("container-0-request-0", "class", 1)], id="one resource match"),
        pytest.param(POD1, [X, X1], DEV_MAP, [req("container-0-request-0", "class", 1)], id="one match, one not match"),
        pytest.param(
            POD1,
            [X, X1],
            DEV_MAP2,
            [req("container-0-request-0", "class", 1), req("container-0-request-1", "class1", 2)],
            id="two resources match",
        ),
        pytest.param(
            POD2,
            [X, X1],
            DEV_MAP2,
            [req("container-0-request-0", "class", 1), req("container-1-request-0", "class1", 2)],
            id="two containers match",
        ),
        pytest.param(
            POD_INIT,
            [X, XINIT],
            DEV_MAP_INIT,
            [req("container-0-request-0", "classInit", 2), req("container-1-request-0", "class", 1)],
            id="one init container, one regular container",
        ),
        pytest.param(
            POD_INIT2,
            [X, XINIT],
            DEV_MAP_INIT,
            [req("container-1-request-0", "classInit", 2), req("container-2-request-0", "class", 1)],
            id="two init containers, one regular container",
        ),
        pytest.param(
            POD_INIT3,
            [X, XINIT],
            DEV_MAP_INIT,
            [
                req("container-1-request-0", "classInit", 1),
                req("container-2-request-0", "classInit", 2),
                req("container-3-request-0", "class", 1),
            ],
            id="three init containers, one sidecar, one regular container",
        ),
    ],
)
def test_upstream_requests(
    pod: dict[str, Any], resources: list[str], classes: dict[str, str], want: list[DeviceRequest]
) -> None:
    got, _ = create_requests_and_mappings(pod, resources, mapping_of(classes))
    assert list(got) == want


def rm(container: str, resource: str, request: str) -> RequestMapping:
    return RequestMapping(container, resource, request)


# Test_createRequestsAndMappings_mappings
@pytest.mark.parametrize(
    ("pod", "resources", "classes", "want"),
    [
        pytest.param(
            POD1,
            [X, X1],
            DEV_MAP2,
            [rm("con0", X, "container-0-request-0"), rm("con0", X1, "container-0-request-1")],
            id="one container, two requests",
        ),
        pytest.param(
            POD1_INIT_IMPLICIT,
            [X, XINIT, IMPLICIT_INIT],
            DEV_MAP_INIT,
            [rm("init-con0", IMPLICIT_INIT, "container-0-request-0"), rm("init-con0", XINIT, "container-0-request-1")],
            id="one container, one explicit and one implicit request",
        ),
        pytest.param(
            POD2,
            [X, X1],
            DEV_MAP2,
            [rm("con0", X, "container-0-request-0"), rm("con1", X1, "container-1-request-0")],
            id="two containers, two requests",
        ),
        pytest.param(
            POD_INIT,
            [X, XINIT],
            DEV_MAP_INIT,
            [rm("init-con0", XINIT, "container-0-request-0"), rm("con0", X, "container-1-request-0")],
            id="one init container, one regular container, one request",
        ),
        pytest.param(
            POD_INIT2,
            [X, XINIT],
            DEV_MAP_INIT,
            [
                rm("init-con0", XINIT, "container-1-request-0"),
                rm("init-con1", XINIT, "container-1-request-0"),
                rm("con0", X, "container-2-request-0"),
            ],
            id="three containers (two are init container), two requests",
        ),
        pytest.param(
            POD_INIT_IMPLICIT,
            [X, XINIT, IMPLICIT_INIT],
            DEV_MAP_INIT,
            [
                rm("init-con0", XINIT, "container-0-request-0"),
                rm("init-con1", IMPLICIT_INIT, "container-1-request-0"),
                rm("con0", X, "container-2-request-0"),
            ],
            id="three containers (two are init container), both explicit and implicit resources",
        ),
        pytest.param(
            POD_INIT3,
            [X, XINIT],
            DEV_MAP_INIT,
            [
                rm("init-con0", XINIT, "container-1-request-0"),
                rm("sidecar-con1", XINIT, "container-1-request-0"),
                rm("init-con2", XINIT, "container-2-request-0"),
                rm("con0", X, "container-3-request-0"),
            ],
            id="four containers (two are init container, one sidecar), three requests",
        ),
    ],
)
def test_upstream_mappings(
    pod: dict[str, Any], resources: list[str], classes: dict[str, str], want: list[RequestMapping]
) -> None:
    _, got = create_requests_and_mappings(pod, resources, mapping_of(classes))
    assert sort_mappings(got) == want


def test_mapping_order_is_per_resource_long_lived_then_short_lived() -> None:
    # upstream appends long-lived mappings, then short-lived ones, resource by resource (sorted)
    pod = make_pod().res({X: "1", X1: "1"}).init_req({X: "3", X1: "1"}).obj()
    _, got = create_requests_and_mappings(pod, [X1, X], mapping_of(DEV_MAP2))
    assert [(m.container_name, m.resource_name) for m in got] == [
        ("con0", X),
        ("init-con0", X),
        ("init-con0", X),
        ("con0", X1),
        ("init-con0", X1),
    ]


# --------------------------------------------------------------------------- naming and quantities


def test_request_index_counts_all_names_in_the_container() -> None:
    # j is the position among *all* request names, cpu and memory included (sorted)
    pod = make_pod().res({"cpu": "1", "memory": "1Gi", X: "2", "zeta.io/fpga": "1"}).obj()
    m = mapping_of({X: "gpu", "zeta.io/fpga": "fpga"})
    got, maps = create_requests_and_mappings(pod, [X, "zeta.io/fpga"], m)
    # sorted: cpu, example.com/gpu, memory, zeta.io/fpga
    assert list(got) == [req("container-0-request-1", "gpu", 2), req("container-0-request-3", "fpga", 1)]
    assert {mp.request_name for mp in maps} == {"container-0-request-1", "container-0-request-3"}


def test_e2e_one_container_three_resources() -> None:
    # contract §7.1 e2e case 2: container_0_request_{0,1,2}
    names = ["a.example.com/r", "b.example.com/r", "c.example.com/r"]
    pod = make_pod().res(dict.fromkeys(names, "1")).obj()
    got, _ = create_requests_and_mappings(pod, names, mapping_of({n: f"c{i}" for i, n in enumerate(names)}))
    assert [r.name for r in got] == ["container-0-request-0", "container-0-request-1", "container-0-request-2"]


def test_requests_default_from_limits() -> None:
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {X: "3", "cpu": "1"}}}]}}
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-1", "gpu", 3)]  # cpu from limits counts for j
    assert list(maps) == [rm("c", X, "container-0-request-1")]


def test_requests_take_precedence_over_limits() -> None:
    c = {"name": "c", "resources": {"requests": {X: "2"}, "limits": {X: "4", "memory": "1Gi"}}}
    assert container_requests(c) == {X: "2", "memory": "1Gi"}
    assert container_requests({"name": "c"}) == {}
    assert container_requests({"name": "c", "resources": {"requests": None, "limits": None}}) == {}


@pytest.mark.parametrize("qty", ["0", "1.5", "500m", "10E", "8Ei"])
def test_quantities_that_are_not_positive_int64_get_no_request(qty: str) -> None:
    pod = make_pod().res({X: qty}).res({X: "1"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-1-request-0", "gpu", 1)]
    assert [mp.container_name for mp in maps] == ["con1"]


def test_canonical_integer_spellings_count() -> None:
    pod = make_pod().res({X: "1k"}).res({X: "2000m"}).obj()
    got, _ = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert [r.count for r in got] == [1000, 2]


def test_unmapped_and_duplicate_resource_names_are_skipped() -> None:
    pod = make_pod().res({X: "1", X1: "1"}).obj()
    got, _ = create_requests_and_mappings(pod, [X, X, "example.com/none"], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-0", "gpu", 1)]


def test_ephemeral_containers_never_count() -> None:
    pod = make_pod().res({X: "1"}).obj()
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "resources": {"requests": {X: "5"}}}]
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-0", "gpu", 1)]
    assert [mp.container_name for mp in maps] == ["con0"]
    assert pod_requests(pod)[X] == 1


# --------------------------------------------------------------------------- init containers and sidecars


def test_is_sidecar() -> None:
    assert is_sidecar({"restartPolicy": "Always"})
    assert not is_sidecar({"restartPolicy": "Never"})
    assert not is_sidecar({})


def test_init_container_reuses_later_long_lived_in_order_until_covered() -> None:
    pod = make_pod().init_req({X: "3"}).res({X: "1"}).res({X: "1"}).res({X: "2"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    # 1 + 1 < 3, + 2 covers it: no own request
    assert list(got) == [
        req("container-1-request-0", "gpu", 1),
        req("container-2-request-0", "gpu", 1),
        req("container-3-request-0", "gpu", 2),
    ]
    assert [mp.request_name for mp in maps if mp.container_name == "init-con0"] == [
        "container-1-request-0",
        "container-2-request-0",
        "container-3-request-0",
    ]


def test_init_container_tops_up_with_its_own_request() -> None:
    pod = make_pod().init_req({X: "5"}).res({X: "2"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-0", "gpu", 3), req("container-1-request-0", "gpu", 2)]
    assert [mp.request_name for mp in maps if mp.container_name == "init-con0"] == [
        "container-1-request-0",
        "container-0-request-0",
    ]


def test_init_container_cannot_borrow_from_an_earlier_sidecar() -> None:
    # the sidecar at index 0 is running while init-con1 runs; only the regular container lends
    pod = make_pod().sidecar_req({X: "1"}).init_req({X: "2"}).res({X: "1"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [
        req("container-0-request-0", "gpu", 1),
        req("container-1-request-0", "gpu", 1),
        req("container-2-request-0", "gpu", 1),
    ]
    assert sorted(mp.request_name for mp in maps if mp.container_name == "init-con1") == [
        "container-1-request-0",
        "container-2-request-0",
    ]


def test_init_container_borrows_from_a_later_sidecar() -> None:
    pod = make_pod().init_req({X: "2"}).sidecar_req({X: "2"}).res({"cpu": "1"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-1-request-0", "gpu", 2)]
    assert rm("init-con0", X, "container-1-request-0") in maps


def test_only_the_largest_short_lived_request_is_kept_first_on_ties() -> None:
    pod = make_pod().init_req({X: "2"}).init_req({X: "2"}).init_req({X: "1"}).obj()
    got, maps = create_requests_and_mappings(pod, [X], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-0", "gpu", 2)]
    assert all(mp.request_name == "container-0-request-0" for mp in maps)
    assert [mp.container_name for mp in maps] == ["init-con0", "init-con1", "init-con2"]


def test_init_containers_of_different_resources_are_not_merged() -> None:
    # two names for one class (explicit + implicit): still one short-lived request per name
    implicit = DEVICE_CLASS_PREFIX + "gpu"
    pod = make_pod().init_req({X: "1"}).init_req({implicit: "2"}).obj()
    got, _ = create_requests_and_mappings(pod, [X, implicit], mapping_of({X: "gpu"}))
    assert list(got) == [req("container-0-request-0", "gpu", 1), req("container-1-request-0", "gpu", 2)]


def test_request_names_sort_as_strings() -> None:
    pod = make_pod()
    for _ in range(11):
        pod.res({X: "1"})
    got, _ = create_requests_and_mappings(pod.obj(), [X], mapping_of({X: "gpu"}))
    names = [r.name for r in got]
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]


# --------------------------------------------------------------------------- device-plugin precedence


def test_device_plugin_wins_when_node_advertises_the_resource() -> None:
    pod = make_pod().res({X: "2"}).obj()
    got = node_requests(pod, node({X: "4"}), mapping_of({X: "gpu"}))
    assert got == NodeRequests(device_plugin={X: 2}, dra={})
    assert not got.needs_claim
    assert got.unschedulable is None


@pytest.mark.parametrize("alloc", [None, {}, {X: "0"}, {"cpu": "8"}])
def test_dra_when_allocatable_absent_or_zero_and_mapped(alloc: dict[str, Any] | None) -> None:
    pod = make_pod().res({X: "2"}).obj()
    got = node_requests(pod, node(alloc), mapping_of({X: "gpu"}))
    assert dict(got.dra) == {X: 2}
    assert dict(got.device_plugin) == {}
    assert got.dra_requests == (req("container-0-request-0", "gpu", 2),)
    assert got.mappings == (rm("con0", X, "container-0-request-0"),)
    assert got.needs_claim


@pytest.mark.parametrize("alloc", [None, {X: "0"}])
def test_unmapped_and_not_advertised_is_insufficient(alloc: dict[str, Any] | None) -> None:
    pod = make_pod().res({X: "2", X1: "1"}).obj()
    got = node_requests(pod, node(alloc), mapping_of({"other.io/x": "c"}))
    assert got.reasons == (f"Insufficient {X}", f"Insufficient {X1}")
    assert got.unschedulable == f"Insufficient {X}, Insufficient {X1}"
    assert got.dra_requests == ()
    assert got.mappings == ()
    assert not got.needs_claim


def test_mixed_pod_device_plugin_and_dra_on_one_node() -> None:
    pod = make_pod().res({X: "1", X1: "2"}).obj()
    got = node_requests(pod, node({X: "8"}), mapping_of({X: "gpu", X1: "fpga"}))
    assert dict(got.device_plugin) == {X: 1}
    assert dict(got.dra) == {X1: 2}
    # X1 is still the second name in the container, so request index 1
    assert got.dra_requests == (req("container-0-request-1", "fpga", 2),)


def test_implicit_name_backed_by_dra() -> None:
    name = DEVICE_CLASS_PREFIX + "gpu.example.com"
    pod = make_pod().res({name: "1"}).obj()
    m = build_mapping([{"metadata": {"name": "gpu.example.com"}, "spec": {}}])
    got = node_requests(pod, node({}), m)
    assert got.dra_requests == (req("container-0-request-0", "gpu.example.com", 1),)
    assert got.request_mappings() == [
        {"containerName": "con0", "resourceName": name, "requestName": "container-0-request-0"}
    ]


def test_non_extended_resources_are_not_classified() -> None:
    pod = make_pod().res({"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi", "kubernetes.io/foo": "1"}).obj()
    p = prepare_pod(pod, mapping_of({X: "gpu"}))
    assert dict(p.candidates) == {}
    assert not p.uses_dra
    assert p.for_node(node({})) == NodeRequests(device_plugin={}, dra={})


def test_pod_level_zero_is_ignored_and_fractions_round_up() -> None:
    pod = make_pod().res({X: "0", X1: "500m"}).obj()
    p = prepare_pod(pod, mapping_of({X: "gpu", X1: "fpga"}))
    assert dict(p.candidates) == {X1: 1}
    got = p.for_node(node({}))
    # Upstream: served by DRA on this node, yet no int64 container quantity -> no request at all.
    assert dict(got.dra) == {X1: 1}
    assert got.dra_requests == ()
    assert not got.needs_claim


def test_allocatable_fractions_round_up_like_the_scheduler() -> None:
    pod = make_pod().res({X: "1"}).obj()
    got = node_requests(pod, node({X: "100m"}), mapping_of({X: "gpu"}))
    assert dict(got.device_plugin) == {X: 1}


def test_for_allocatable_accepts_numbers_and_memoises_per_dra_set() -> None:
    pod = make_pod().res({X: "1", X1: "1"}).obj()
    p = prepare_pod(pod, mapping_of({X: "gpu", X1: "fpga"}))
    a, b = p.for_allocatable({}), p.for_allocatable({"cpu": 4})
    assert a.dra_requests is b.dra_requests
    c = p.for_allocatable({X: 2})
    assert dict(c.device_plugin) == {X: 1}
    assert c.dra_requests == (req("container-0-request-1", "fpga", 1),)


def test_uses_dra() -> None:
    pod = make_pod().res({X: "1"}).obj()
    assert prepare_pod(pod, mapping_of({X: "gpu"})).uses_dra
    assert not prepare_pod(pod, mapping_of({X1: "gpu"})).uses_dra


def test_pod_view_accepts_precomputed_requests() -> None:
    pod = make_pod().res({X: "1"}).obj()
    p = prepare_pod(pod_view(pod, {X: Decimal(3)}), mapping_of({X: "gpu"}))
    assert dict(p.candidates) == {X: 3}


def test_a_pod_view_and_its_dict_prepare_alike() -> None:
    pod = make_pod().res({X: "2", X1: "1"}).obj()
    mapping = mapping_of({X: "gpu", X1: "fpga"})
    node = {"status": {"allocatable": {}}}
    assert prepare_pod(pod_view(pod), mapping).for_node(node) == prepare_pod(pod, mapping).for_node(node)
    assert prepare_pod(pod_view(pod), mapping).for_node(node).dra == {X: 2, X1: 1}


# --------------------------------------------------------------------------- claim limits


def test_32_requests_fit_33_do_not() -> None:
    m = mapping_of({X: "gpu"})
    pod = make_pod()
    for _ in range(DEVICE_REQUESTS_MAX_SIZE):
        pod.res({X: "1"})
    ok = node_requests(pod.obj(), node({}), m)
    assert len(ok.dra_requests) == DEVICE_REQUESTS_MAX_SIZE
    assert ok.unschedulable is None
    pod.res({X: "1"})
    too_many = node_requests(pod.obj(), node({}), m)
    assert too_many.unschedulable is not None
    assert "33 device requests" in too_many.unschedulable
    assert too_many.dra_requests == ()
    assert not too_many.needs_claim
    # served by a device plugin, the same pod is fine
    assert node_requests(pod.obj(), node({X: "64"}), m).unschedulable is None


def test_more_than_32_devices_do_not_fit_one_claim() -> None:
    m = mapping_of({X: "gpu"})
    assert node_requests(make_pod().res({X: str(ALLOCATION_RESULTS_MAX_SIZE)}).obj(), node({}), m).needs_claim
    got = node_requests(make_pod().res({X: str(ALLOCATION_RESULTS_MAX_SIZE + 1)}).obj(), node({}), m)
    assert got.unschedulable is not None
    assert "33 devices" in got.unschedulable


# --------------------------------------------------------------------------- API rendering


def test_api_rendering() -> None:
    pod = make_pod().init_req({X: "2"}).res({X: "1"}).obj()
    got = node_requests(pod, node({}), mapping_of({X: "gpu"}))
    assert got.claim_requests() == [
        {
            "name": "container-0-request-0",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1},
        },
        {
            "name": "container-1-request-0",
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1},
        },
    ]
    assert got.request_mappings() == [
        {"containerName": "con0", "resourceName": X, "requestName": "container-1-request-0"},
        {"containerName": "init-con0", "resourceName": X, "requestName": "container-1-request-0"},
        {"containerName": "init-con0", "resourceName": X, "requestName": "container-0-request-0"},
    ]
    assert got.device_count == 2


# --------------------------------------------------------------------------- pod_requests


def test_pod_requests_sums_containers() -> None:
    pod = make_pod().res({"cpu": "1", X: "1"}).res({"cpu": "500m", "memory": "1Gi"}).obj()
    assert pod_requests(pod) == {"cpu": Decimal("1.5"), "memory": Decimal(2**30), X: Decimal(1)}


def test_pod_requests_init_containers_take_the_max() -> None:
    pod = make_pod().res({"cpu": "1", X: "1"}).init_req({"cpu": "2"}).init_req({X: "3", "memory": "1"}).obj()
    assert pod_requests(pod) == {"cpu": 2, X: 3, "memory": 1}


def test_pod_requests_sidecar_formula() -> None:
    # KEP-753: InitContainerUse(i) = sum(sidecars before i) + init i; sidecars also add to the total
    pod = (
        make_pod()
        .sidecar_req({"cpu": "1"})
        .init_req({"cpu": "3"})  # runs next to sidecar 0: 4
        .sidecar_req({"cpu": "2"})
        .init_req({"cpu": "1"})  # 1 + 2 + 1 = 4
        .res({"cpu": "1"})  # steady state: 1 + 2 + 1 = 4
        .obj()
    )
    assert pod_requests(pod)["cpu"] == 4
    pod["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = "4"  # 1 + 4 = 5 beats 4
    assert pod_requests(pod)["cpu"] == 5


def test_pod_requests_pod_level_and_overhead() -> None:
    pod = make_pod().res({"cpu": "1", "memory": "1Gi", X: "1"}).obj()
    pod["spec"]["resources"] = {"requests": {"cpu": "4", X: "9"}}  # extended names are not pod-level
    pod["spec"]["overhead"] = {"cpu": "100m", "memory": "10Mi"}
    assert pod_requests(pod) == {"cpu": Decimal("4.1"), "memory": Decimal(2**30 + 10 * 2**20), X: 1}
    assert pod_requests(pod, include_overhead=False)["cpu"] == 4
    assert pod_requests(pod, use_pod_level=False, include_overhead=False)["cpu"] == 1


def test_pod_requests_empty_pod() -> None:
    assert pod_requests({}) == {}
    assert pod_requests({"spec": {"containers": [{"name": "c"}]}}) == {}


# --------------------------------------------------------------------------- properties

A, B, IMPL = "a.example.com/dev", "b.example.com/dev", DEVICE_CLASS_PREFIX + "c-class"
RESOURCES = [A, B, IMPL, "cpu"]


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    def container(name: str) -> dict[str, Any]:
        names = draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=4))
        reqs = {n: str(draw(st.integers(min_value=0, max_value=5))) for n in names}
        c: dict[str, Any] = {"name": name, "resources": {"requests": reqs}}
        return c

    inits = []
    for i in range(draw(st.integers(min_value=0, max_value=4))):
        c = container(f"i{i}")
        if draw(st.booleans()):
            c["restartPolicy"] = "Always"
        inits.append(c)
    regular = [container(f"c{i}") for i in range(draw(st.integers(min_value=0, max_value=4)))]
    return {"metadata": {"name": "p"}, "spec": {"initContainers": inits, "containers": regular}}


_CLASSES = [
    {"metadata": {"name": "a-class"}, "spec": {"extendedResourceName": A}},
    {"metadata": {"name": "b-class"}, "spec": {"extendedResourceName": B}},
    {"metadata": {"name": "c-class"}, "spec": {}},
]
mappings = st.sampled_from(
    [
        build_mapping(_CLASSES),
        build_mapping(_CLASSES[:1] + _CLASSES[2:]),  # B unmapped
        build_mapping(_CLASSES, [OverrideMapping(B, ("a-class",))]),  # A and B share a class
        build_mapping([]),
    ]
)
allocatables = st.dictionaries(st.sampled_from([A, B, IMPL]), st.sampled_from(["0", "1", "4"]), max_size=3)


def _containers(pod: dict[str, Any]) -> list[tuple[int, dict[str, Any], bool]]:
    spec = pod["spec"]
    inits = spec["initContainers"]
    return [
        (i, c, i >= len(inits) or c.get("restartPolicy") == "Always") for i, c in enumerate(inits + spec["containers"])
    ]


def _qty(c: dict[str, Any], r: str) -> int:
    return int(c["resources"]["requests"].get(r, "0"))


@settings(max_examples=300)
@given(pods(), mappings, allocatables)
def test_prop_requests_and_mappings_invariants(
    pod: dict[str, Any], mapping: ExtendedResourceMapping, alloc: dict[str, str]
) -> None:
    got = node_requests(pod, node(alloc), mapping)
    if got.reasons:
        assert got.dra_requests == ()
        assert got.mappings == ()
        return
    by_name = {r.name: r for r in got.dra_requests}
    names = [r.name for r in got.dra_requests]
    assert names == sorted(names)
    assert len(set(names)) == len(names)
    assert len(set(got.mappings)) == len(got.mappings)
    assert {m.request_name for m in got.mappings} == set(names)  # no dangling, no unused requests
    containers = _containers(pod)
    by_container = {c["name"]: (i, c, ll) for i, c, ll in containers}
    for m in got.mappings:
        assert m.resource_name in got.dra  # only DRA-served resources on this node
        i, c, _ = by_container[m.container_name]
        assert m.resource_name in c["resources"]["requests"]  # API validation of requestMappings
        assert by_name[m.request_name].device_class_name == mapping.class_for(m.resource_name)
    for r in got.dra:
        for i, c, long_lived in containers:
            q = _qty(c, r)
            mine = [
                by_name[m.request_name] for m in got.mappings if m.container_name == c["name"] and m.resource_name == r
            ]
            if q == 0:
                assert mine == []
            elif long_lived:  # exactly its own request with its full quantity
                assert mine == [
                    DeviceRequest(
                        f"container-{i}-request-{sorted(c['resources']['requests']).index(r)}",
                        mapping.class_for(r) or "",
                        q,
                    )
                ]
            else:  # covered, by later long-lived requests and/or the one kept short-lived request
                assert sum(x.count for x in mine) >= q
                for x in mine:
                    j = int(x.name.split("-")[1])
                    assert j > i or not containers[j][2]
        # total devices for r: all long-lived + the largest extra any init container still needs
        long_total = sum(_qty(c, r) for _, c, ll in containers if ll)
        extras = [
            _qty(c, r) - sum(_qty(c2, r) for j, c2, ll2 in containers if ll2 and j > i)
            for i, c, ll in containers
            if not ll and _qty(c, r) > 0
        ]
        devices = sum(
            x.count
            for x in got.dra_requests
            if any(m.request_name == x.name and m.resource_name == r for m in got.mappings)
        )
        assert devices == long_total + max([0, *extras])
        assert devices >= pod_requests(pod)[r]  # enough for the pod's peak


@settings(max_examples=200)
@given(pods(), mappings, allocatables)
def test_prop_classification_partitions_candidates(
    pod: dict[str, Any], mapping: ExtendedResourceMapping, alloc: dict[str, str]
) -> None:
    got = node_requests(pod, node(alloc), mapping)
    reqs = pod_requests(pod)
    wanted = {r for r in (A, B, IMPL) if reqs.get(r, 0) > 0}
    rejected = {reason.removeprefix("Insufficient ") for reason in got.reasons if reason.startswith("Insufficient ")}
    assert set(got.device_plugin) | set(got.dra) | rejected == wanted
    assert not set(got.device_plugin) & set(got.dra)
    for r in wanted:
        advertised = int(alloc.get(r, "0")) > 0
        if advertised:
            assert got.device_plugin[r] == reqs[r]
        elif r in mapping:
            assert got.dra[r] == reqs[r]
        else:
            assert r in rejected


@given(pods(), mappings, st.randoms(use_true_random=False))
def test_prop_independent_of_dict_order(
    pod: dict[str, Any], mapping: ExtendedResourceMapping, rnd: random.Random
) -> None:
    def shuffled(d: dict[str, Any]) -> dict[str, Any]:
        items = list(d.items())
        rnd.shuffle(items)
        return dict(items)

    other = {
        "spec": {
            k: [dict(c, resources={"requests": shuffled(c["resources"]["requests"])}) for c in v]
            for k, v in pod["spec"].items()
        }
    }
    resources = [A, B, IMPL]
    rnd.shuffle(resources)
    assert create_requests_and_mappings(other, resources, mapping) == create_requests_and_mappings(
        pod, [A, B, IMPL], mapping
    )


@given(pods())
def test_prop_pod_requests_bounds(pod: dict[str, Any]) -> None:
    reqs = pod_requests(pod)
    for r in RESOURCES:
        containers = _containers(pod)
        steady = sum(Fraction(_qty(c, r)) for _, c, ll in containers if ll)
        assert reqs.get(r, 0) >= steady
        for i, c, ll in containers:
            if not ll:
                before = sum(_qty(c2, r) for j, c2, ll2 in containers if ll2 and j < i)
                assert reqs.get(r, 0) >= before + _qty(c, r)
