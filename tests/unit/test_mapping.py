"""draxr.core.mapping: resource-name rules and DeviceClass resolution (contract §1.1, §1.2, §2.1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draxr.core.mapping import (
    DEVICE_CLASS_PREFIX,
    OverrideMapping,
    ResolvedMapping,
    build_mapping,
    implicit_resource_name,
    is_dra_extended_resource_name,
    is_extended_resource_name,
    is_native_resource,
)

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def rfc3339(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_class(name: str, explicit: str | None = None, created: datetime | str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if isinstance(created, datetime):
        meta["creationTimestamp"] = rfc3339(created)
    elif created is not None:
        meta["creationTimestamp"] = created
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if explicit is not None:
        spec["extendedResourceName"] = explicit
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta, "spec": spec}


# --------------------------------------------------------------------------- name rules


# Cases of upstream pkg/apis/core/v1/helper TestIsExtendedResourceName (+ component-helpers').
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pod.alpha.kubernetes.io/opaque-int-resource-foo", False),
        ("kubernetes.io/resource-foo", False),
        ("foo", False),
        ("a/b", True),
        ("requests.foobar", False),
        ("c/d/", False),
        ("", False),
        ("example.com/foo", True),
        ("cpu", False),
        ("requests.example.com/gpu", False),
        ("example.com/gpu", True),
        ("BAD!!", False),
        ("hugepages-2Mi", False),
        ("nvidia.com/gpu", True),
    ],
)
def test_is_extended_resource_name_upstream_cases(name: str, expected: bool) -> None:
    assert is_extended_resource_name(name) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("example.com/" + "a" * 63, True),  # name part at most 63
        ("example.com/" + "a" * 64, False),
        # the prefix is validated as "requests.<prefix>", a DNS subdomain of at most 253 (9 + 244)
        ("a" * 60 + "." + "b" * 60 + "." + "c" * 60 + "." + "d" * 61 + "/x", True),
        ("a" * 60 + "." + "b" * 60 + "." + "c" * 60 + "." + "d" * 62 + "/x", False),
        ("x" * 70 + ".com/gpu", True),  # IsDNS1123Subdomain has no per-label limit
        ("Example.com/gpu", False),  # DNS subdomains are lower case
        ("example.com/GPU_x-1.a", True),  # the name part may use upper case, _ - .
        ("example.com/-gpu", False),
        ("example.com/gpu-", False),
        ("example.com/", False),
        ("/gpu", False),
        ("example.com/gpu\n", False),
        ("example..com/gpu", False),
        ("foo.kubernetes.io/gpu", False),  # any *kubernetes.io/ domain is native
        ("deviceclass.resource.kubernetes.io/gpu", False),
    ],
)
def test_is_extended_resource_name_edges(name: str, expected: bool) -> None:
    assert is_extended_resource_name(name) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pod.alpha.kubernetes.io/opaque-int-resource-foo", True),
        ("kubernetes.io/resource-foo", True),
        ("foo", True),
        ("", True),
        ("a/b", False),
    ],
)
def test_is_native_resource_upstream_cases(name: str, expected: bool) -> None:
    assert is_native_resource(name) is expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("example.com/gpu", True),
        ("deviceclass.resource.kubernetes.io/gpu.example.com", True),
        (DEVICE_CLASS_PREFIX + "x" * 300, True),  # prefix check only, as upstream
        ("cpu", False),
        ("kubernetes.io/foo", False),
        ("requests.example.com/gpu", False),
        ("deviceclass.resource.kubernetes.io", False),
    ],
)
def test_is_dra_extended_resource_name(name: str, expected: bool) -> None:
    assert is_dra_extended_resource_name(name) is expected


def test_implicit_resource_name() -> None:
    assert implicit_resource_name("gpu.example.com") == "deviceclass.resource.kubernetes.io/gpu.example.com"


# --------------------------------------------------------------------------- resolution


def test_explicit_and_implicit_mappings() -> None:
    m = build_mapping([device_class("gpu-class", "example.com/gpu", NOW), device_class("fpga-class")])
    assert m.class_for("example.com/gpu") == "gpu-class"
    assert m.class_for("deviceclass.resource.kubernetes.io/fpga-class") == "fpga-class"
    # the implicit name stays usable when an explicit one is set (kubernetes#133363)
    assert m.class_for("deviceclass.resource.kubernetes.io/gpu-class") == "gpu-class"
    assert m.names == {
        "example.com/gpu",
        "deviceclass.resource.kubernetes.io/gpu-class",
        "deviceclass.resource.kubernetes.io/fpga-class",
    }
    assert m.lookup("example.com/gpu") == ResolvedMapping("example.com/gpu", ("gpu-class",), "explicit")
    assert m.lookup("deviceclass.resource.kubernetes.io/fpga-class") == ResolvedMapping(
        "deviceclass.resource.kubernetes.io/fpga-class", ("fpga-class",), "implicit"
    )
    assert m.lookup("example.com/tpu") is None
    assert m.class_for("example.com/tpu") is None
    assert "example.com/gpu" in m
    assert "example.com/tpu" not in m
    assert len(m) == 3
    assert list(m) == sorted(m.names)


def test_upstream_cache_sequence_recomputed() -> None:
    """The event sequence of upstream's TestExtendedResourceCache, replayed as full lists."""
    c1 = device_class("gpu-class", "example.com/gpu", NOW)
    c2 = device_class("fpga-class")
    c3 = device_class("gpu-class-3", "example.com/gpu", NOW - timedelta(hours=24))
    c4 = device_class("gpu-class-4", "example.com/gpu", NOW + timedelta(hours=1))
    c0 = device_class("gpu-class-0", "example.com/gpu", NOW + timedelta(hours=1))

    assert build_mapping([c1, c2]).class_for("example.com/gpu") == "gpu-class"
    # older class does not replace the newer one
    assert build_mapping([c1, c2, c3]).class_for("example.com/gpu") == "gpu-class"
    # newer class replaces
    assert build_mapping([c1, c2, c3, c4]).class_for("example.com/gpu") == "gpu-class-4"
    # same timestamp: the lexicographically smaller name wins
    assert build_mapping([c1, c2, c3, c4, c0]).class_for("example.com/gpu") == "gpu-class-0"

    c0_renamed = device_class("gpu-class-0", "test.com/gpu", NOW + timedelta(hours=1))
    m = build_mapping([c1, c2, c3, c4, c0_renamed])
    assert m.class_for("test.com/gpu") == "gpu-class-0"
    # Upstream's incremental cache loses example.com/gpu here although three classes still declare
    # it; recomputing gives the documented answer: the newest remaining declarer.
    assert m.class_for("example.com/gpu") == "gpu-class-4"

    m = build_mapping([c1, c2, c3, c4])  # gpu-class-0 deleted
    assert m.class_for("test.com/gpu") is None
    assert m.class_for("deviceclass.resource.kubernetes.io/gpu-class-0") is None


def test_losing_class_keeps_its_implicit_name() -> None:
    # Upstream's cache returns early for an older clashing class and so never adds its implicit
    # name; the API contract says every class is reachable under it.
    older = device_class("old", "example.com/gpu", NOW - timedelta(days=1))
    newer = device_class("new", "example.com/gpu", NOW)
    m = build_mapping([newer, older])
    assert m.class_for("example.com/gpu") == "new"
    assert m.class_for("deviceclass.resource.kubernetes.io/old") == "old"


def test_reverse_map_upstream_cases() -> None:
    """upstream TestDeviceClassMapping (GetExtendedResource)."""
    gpu = device_class("gpu-class", "example.com/gpu")
    tpu = device_class("tpu-class")
    m = build_mapping([gpu, tpu])
    assert m.explicit_name("gpu-class") == "example.com/gpu"
    assert m.explicit_name("tpu-class") is None
    m = build_mapping([device_class("gpu-class", "my.com/gpu"), tpu])
    assert m.explicit_name("gpu-class") == "my.com/gpu"
    assert build_mapping([tpu]).explicit_name("gpu-class") is None


def test_reverse_map_includes_classes_that_lost_the_name() -> None:
    m = build_mapping([device_class("a", "example.com/gpu", NOW), device_class("b", "example.com/gpu", NOW)])
    assert m.class_for("example.com/gpu") == "a"
    assert dict(m.explicit_names) == {"a": "example.com/gpu", "b": "example.com/gpu"}


def test_missing_timestamp_is_oldest() -> None:
    m = build_mapping([device_class("a", "example.com/gpu"), device_class("z", "example.com/gpu", NOW)])
    assert m.class_for("example.com/gpu") == "z"
    m = build_mapping([device_class("z", "example.com/gpu"), device_class("a", "example.com/gpu")])
    assert m.class_for("example.com/gpu") == "a"  # both missing: equal, so the smaller name


def test_timestamp_spellings_compare_by_instant() -> None:
    same_instant = [
        device_class("c", "example.com/gpu", "2026-01-02T03:04:05Z"),
        device_class("b", "example.com/gpu", "2026-01-02T04:04:05+01:00"),
        {"metadata": {"name": "d", "creationTimestamp": NOW}, "spec": {"extendedResourceName": "example.com/gpu"}},
    ]
    assert build_mapping(same_instant).class_for("example.com/gpu") == "b"
    one_second_later = device_class("z", "example.com/gpu", "2026-01-02T03:04:06Z")
    assert build_mapping([*same_instant, one_second_later]).class_for("example.com/gpu") == "z"


def test_unreadable_timestamp_counts_as_oldest() -> None:
    m = build_mapping([device_class("a", "example.com/gpu", "yesterday"), device_class("b", "example.com/gpu", NOW)])
    assert m.class_for("example.com/gpu") == "b"


@pytest.mark.parametrize("bad", ["deviceclass.resource.kubernetes.io/other", "cpu", "requests.example.com/x", ""])
def test_invalid_explicit_names_are_ignored(bad: str) -> None:
    other = device_class("other")
    m = build_mapping([device_class("c", bad), other])
    assert m.class_for("deviceclass.resource.kubernetes.io/other") == "other"
    assert m.class_for("deviceclass.resource.kubernetes.io/c") == "c"
    assert m.explicit_name("c") is None
    assert bad not in m or bad == "deviceclass.resource.kubernetes.io/other"


def test_classes_without_name_are_skipped() -> None:
    m = build_mapping([{"metadata": {}, "spec": {"extendedResourceName": "example.com/gpu"}}, {}])
    assert len(m) == 0


def test_empty() -> None:
    m = build_mapping([])
    assert len(m) == 0
    assert m.lookup("example.com/gpu") is None


# --------------------------------------------------------------------------- overrides


def test_override_wins_over_explicit_and_implicit() -> None:
    classes = [device_class("gpu", "example.com/gpu", NOW), device_class("other")]
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}
    overrides = [
        OverrideMapping("example.com/gpu", ("big-gpu", "gpu"), node_selector=selector, selectors=("cel",)),
        OverrideMapping("deviceclass.resource.kubernetes.io/other", ("gpu",)),
    ]
    m = build_mapping(classes, overrides)
    got = m.lookup("example.com/gpu")
    assert got == ResolvedMapping("example.com/gpu", ("big-gpu", "gpu"), "override", selector, ("cel",))
    assert got is not None
    assert got.class_name == "big-gpu"
    assert got.node_selector is selector
    assert m.class_for("deviceclass.resource.kubernetes.io/other") == "gpu"
    assert m.class_for("deviceclass.resource.kubernetes.io/gpu") == "gpu"  # untouched
    assert m.explicit_name("gpu") == "example.com/gpu"  # the reverse map is about DeviceClasses


def test_override_for_a_new_name() -> None:
    m = build_mapping([], [OverrideMapping("example.com/tpu", ("tpu",))])
    assert m.class_for("example.com/tpu") == "tpu"


def test_override_without_classes_is_ignored() -> None:
    m = build_mapping([device_class("gpu", "example.com/gpu")], [OverrideMapping("example.com/gpu", ())])
    assert m.class_for("example.com/gpu") == "gpu"


def test_override_conflicts_the_oldest_wins() -> None:
    a = OverrideMapping("example.com/gpu", ("a",), origin="m-a", creation_timestamp=rfc3339(NOW))
    b = OverrideMapping("example.com/gpu", ("b",), origin="m-b", creation_timestamp=rfc3339(NOW))
    c = OverrideMapping("example.com/gpu", ("c",), origin="m-c", creation_timestamp=NOW + timedelta(seconds=1))
    z = OverrideMapping("example.com/gpu", ("z",), origin="m-z", creation_timestamp=NOW - timedelta(seconds=1))
    assert build_mapping([], [b, a]).class_for("example.com/gpu") == "a"  # same age: the smaller CR name
    assert build_mapping([], [c, b, a]).class_for("example.com/gpu") == "a"  # the newer c loses
    assert build_mapping([], [a, b, c, z]).class_for("example.com/gpu") == "z"
    resolved = build_mapping([], [c, z]).lookup("example.com/gpu")
    assert resolved is not None
    assert resolved.origin == "m-z"


def test_resolved_mapping_is_hashable_with_opaque_data() -> None:
    r = ResolvedMapping("example.com/gpu", ("a",), "override", {"x": [1]}, ({"cel": "true"},))
    assert hash(r) == hash(ResolvedMapping("example.com/gpu", ("a",), "override"))


# --------------------------------------------------------------------------- properties

class_names = st.sampled_from(["a", "b", "c", "gpu", "gpu-2", "z"])
explicit_names = st.none() | st.sampled_from(["example.com/gpu", "example.com/tpu", "other.org/x", "cpu"])
timestamps = st.none() | st.sampled_from([NOW - timedelta(days=1), NOW, NOW + timedelta(seconds=1)])


@st.composite
def class_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(class_names, unique=True, max_size=6))
    return [device_class(n, draw(explicit_names), draw(timestamps)) for n in names]


def _oracle_winner(classes: list[dict[str, Any]], name: str) -> str | None:
    """Independent of the implementation: stable sorts, name ascending then newest first."""
    declaring = [c for c in classes if c["spec"].get("extendedResourceName") == name]
    declaring.sort(key=lambda c: c["metadata"]["name"])
    oldest = "0001-01-01T00:00:00Z"
    declaring.sort(key=lambda c: c["metadata"].get("creationTimestamp", oldest), reverse=True)
    return declaring[0]["metadata"]["name"] if declaring else None


@given(class_lists(), st.randoms(use_true_random=False))
def test_prop_independent_of_input_order(classes: list[dict[str, Any]], rnd: Any) -> None:
    shuffled = list(classes)
    rnd.shuffle(shuffled)
    assert build_mapping(shuffled) == build_mapping(classes)


@given(class_lists())
def test_prop_matches_oracle(classes: list[dict[str, Any]]) -> None:
    m = build_mapping(classes)
    for c in classes:
        name = c["metadata"]["name"]
        assert m.class_for(DEVICE_CLASS_PREFIX + name) == name
    declared = {c["spec"].get("extendedResourceName") for c in classes} - {None}
    valid = {n for n in declared if is_extended_resource_name(n)}
    for n in valid:
        assert m.class_for(n) == _oracle_winner(classes, n)
    assert m.names == {DEVICE_CLASS_PREFIX + c["metadata"]["name"] for c in classes} | valid
    assert dict(m.explicit_names) == {
        c["metadata"]["name"]: c["spec"]["extendedResourceName"]
        for c in classes
        if c["spec"].get("extendedResourceName") in valid
    }


@given(
    class_lists(),
    st.lists(
        st.builds(
            OverrideMapping,
            resource_name=st.sampled_from(["example.com/gpu", "example.com/new", DEVICE_CLASS_PREFIX + "a"]),
            class_names=st.lists(class_names, max_size=3).map(tuple),
            origin=st.sampled_from(["m1", "m2", "m3"]),
            creation_timestamp=timestamps,
        ),
        max_size=4,
    ),
    st.randoms(use_true_random=False),
)
def test_prop_overrides_win_and_order_does_not_matter(
    classes: list[dict[str, Any]], overrides: list[OverrideMapping], rnd: Any
) -> None:
    m = build_mapping(classes, overrides)
    shuffled = list(overrides)
    rnd.shuffle(shuffled)
    assert build_mapping(classes, shuffled) == m
    for ov in overrides:
        if ov.class_names:
            got = m.lookup(ov.resource_name)
            assert got is not None
            assert got.source == "override"
    without = build_mapping(classes)
    for name in without.names:
        if not any(ov.resource_name == name and ov.class_names for ov in overrides):
            assert m.lookup(name) == without.lookup(name)


def test_mapping_survives_its_json_data_for_the_webhook_process() -> None:
    """Every field the webhook's decision and annotation read, the override's CR name included
    (which ``==`` ignores), comes back from ``mapping_to_data`` through JSON."""
    import json

    from draxr.core.mapping import mapping_from_data, mapping_to_data

    classes = [
        {"metadata": {"name": n, "creationTimestamp": f"2026-01-0{d}T00:00:00Z"}, "spec": {"extendedResourceName": e}}
        for n, d, e in (("a", 1, "x/g"), ("b", 2, "x/g"))
    ]
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}]}
    override = OverrideMapping("x/acc", ("b", "a"), selector, ('device.attributes["x"].numa == 1',), origin="acc")
    original = build_mapping(classes, [override])
    back = mapping_from_data(json.loads(json.dumps(mapping_to_data(original))))
    assert back == original
    assert [back.lookup(n) for n in back] == [original.lookup(n) for n in original]
    assert [r.origin for r in map(back.lookup, back) if r] == [r.origin for r in map(original.lookup, original) if r]
    assert dict(back.explicit_names) == {"a": "x/g", "b": "x/g"}
    acc = back.lookup("x/acc")
    assert acc is not None
    assert (acc.source, acc.class_names, acc.node_selector, acc.origin) == ("override", ("b", "a"), selector, "acc")
