"""draxr.migrator.plans with its memo: a settled node is not planned again, and the memo never
changes what a pass writes (a hypothesis run of record, pod, claim, slice and class changes)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.migration import ID_ATTRIBUTE_ANNOTATION, AdoptionClaim
from draxr.migrator import Memo, plans
from draxr_dev.devcluster.records import fake_record
from tests.unit.cluster_builders import GPU_CLASS, cluster, gpu_class, gpu_slice, pod

OBSERVED = "2026-12-05T07:00:00Z"
NOW = 1_796_454_010.0  # 10 s after the records were observed (2026-12-05T07:00:00Z): fresh
NODES = ("n1", "n2")
PODS = ("a", "b", "c")
GPU = "example.com/gpu"


def record(node: str, held: dict[str, int], version: int) -> dict[str, Any]:
    """The node agent's record: pod -> the device it holds (gpu-<i> of the node)."""
    obj = fake_record(node, {("ns", name): {GPU: [f"{node}-gpu-{i}"]} for name, i in held.items()}, observed=OBSERVED)
    obj["metadata"] |= {"uid": f"rec-{node}", "resourceVersion": str(version)}
    return obj


def _state() -> Any:
    state = cluster({n: 3 for n in NODES})
    cls = gpu_class()
    cls["metadata"]["annotations"] = {ID_ATTRIBUTE_ANNOTATION: "uuid"}
    state.upsert_class(cls)
    held: dict[str, dict[str, int]] = {n: {} for n in NODES}
    for i, name in enumerate(PODS):
        node = NODES[i % 2]
        state.upsert_pod(pod(name, uid=f"uid-{name}", gpus=1, node_name=node, phase="Running", scheduler="x"))
        held[node][name] = i // 2
    for node in NODES:
        state.adoption.upsert_record(record(node, held[node], 1))
    return state


def _apply(state: Any, planned: dict[str, Any], status: bool = True) -> None:
    """What the migrator's writes do to the state: all succeed, or the status writes fail and the
    claims stay unallocated (the migrator deletes them; the watch may show them first)."""
    for p in planned.values():
        for key in p.delete:
            state.remove_claim(*key.split("/", 1))
        for claim in p.create:
            state.upsert_claim({**claim.body(), "status": claim.status()} if status else claim.body())


def test_a_settled_node_is_not_planned_again_until_something_it_reads_changes() -> None:
    state, memo = _state(), Memo()
    _apply(state, plans(state, NOW, memo=memo))  # the adoption claims are written
    first = plans(state, NOW, memo=memo)
    assert all(not p.create and not p.delete for p in first.values())
    again = plans(state, NOW, memo=memo)
    assert all(again[n] is first[n] for n in first)  # the memo's plans, not new ones
    state.upsert_pod(pod("a", uid="uid-a", gpus=1, node_name="n1", phase="Succeeded", scheduler="x"))
    after = plans(state, NOW, memo=memo)
    assert after["n2"] is first["n2"]
    a_claim = [k for k, c in state.adoption.claims_by_node()["n1"].items() if c.adopts and c.adopts[0] == "uid-a"]
    assert len(a_claim) == 1
    assert after["n1"].delete == a_claim  # its pod ended: planned again


DEVICE = st.integers(0, 3)  # gpu-3 matches no device (3 per node, 0 once its slice goes)


@st.composite
def changes(draw: st.DrawFn) -> list[tuple[str, Any]]:
    step = st.one_of(
        st.tuples(st.just("record"), st.tuples(st.sampled_from(NODES), st.dictionaries(st.sampled_from(PODS), DEVICE))),
        st.tuples(st.just("phase"), st.tuples(st.sampled_from(PODS), st.sampled_from(["Running", "Succeeded"]))),
        st.tuples(st.just("remove_pod"), st.sampled_from(PODS)),
        st.tuples(st.just("slice"), st.tuples(st.sampled_from(NODES), st.integers(0, 3))),
        st.tuples(st.just("identity"), st.booleans()),
        st.tuples(st.just("write"), st.sampled_from(["none", "all", "claims only"])),  # the pass's writes
        st.tuples(st.just("remove_claim"), st.integers(0, 5)),
        st.tuples(st.just("stray"), st.sampled_from(PODS)),  # a previous leader's claim, never allocated
    )
    return draw(st.lists(step, max_size=25))


@settings(max_examples=150, deadline=None)
@given(changes())
def test_the_memo_never_changes_what_a_pass_writes(steps: list[tuple[str, Any]]) -> None:
    state, memo = _state(), Memo()
    version = 2
    for kind, arg in steps:
        if kind == "record":
            node, held = arg
            state.adoption.upsert_record(record(node, held, version))
            version += 1
        elif kind == "phase":
            name, phase = arg
            i = PODS.index(name)
            state.upsert_pod(pod(name, uid=f"uid-{name}", gpus=1, node_name=NODES[i % 2], phase=phase, scheduler="x"))
        elif kind == "remove_pod":
            state.remove_pod(f"uid-{arg}")
        elif kind == "slice":
            node, count = arg
            if count:
                state.upsert_slice(gpu_slice(node, count))
            else:
                state.remove_slice(gpu_slice(node, 1)["metadata"]["name"])
        elif kind == "identity":
            cls = gpu_class()
            if arg:
                cls["metadata"]["annotations"] = {ID_ATTRIBUTE_ANNOTATION: "uuid"}
            state.upsert_class(cls)
        elif kind == "remove_claim":
            keys = sorted(k for claims in state.adoption.claims_by_node().values() for k in claims)
            if keys:
                state.remove_claim(*keys[arg % len(keys)].split("/", 1))
        elif kind == "stray":
            i = PODS.index(arg)
            stray = AdoptionClaim("ns", arg, f"uid-{arg}", NODES[i % 2], ((GPU, GPU_CLASS, ()),))
            state.upsert_claim(stray.body())
        with_memo = plans(state, NOW, memo=memo)
        assert with_memo == plans(state, NOW)
        if kind == "write" and arg != "none":
            _apply(state, with_memo, status=arg == "all")
