"""The scheduling differential's comparison (compare_scheduling.diff_results) is strict: each part
of a result it claims to compare makes a difference when one side changes it. No Go needed."""

from __future__ import annotations

import copy
from typing import Any

from tests.differential.compare_scheduling import diff_results, two_phase_scoring, upstream_message

REJECTED = {"plugin": "NodeResourcesFit", "code": "Unschedulable", "reasons": ["Insufficient cpu"]}
DRA = {"plugin": "DynamicResources", "code": "UnschedulableAndUnresolvable", "reasons": ["cannot allocate all claims"]}
SCORES = {"TaintToleration": {"a": 100}, "NodeResourcesFit": {"a": 40}, "DynamicResources": {"a": 0}}
GO: dict[str, Any] = {
    "name": "c",
    "filter": {"a": None, "b": REJECTED, "c": DRA},
    "scores": {**SCORES, "NodeAffinity": {"a": 0}},
    "scoreSkipped": ["NodeAffinity"],
    "weights": {"TaintToleration": 3, "NodeResourcesFit": 1, "NodeAffinity": 2, "DynamicResources": 2},
    "total": {"a": 340},
}
DETAIL = "cannot allocate all claims: 1 device(s) of class gpu requested, only 0 free and matching on this node"
PY: dict[str, Any] = {
    "name": "c",
    "filter": {"a": None, "b": REJECTED, "c": {**DRA, "reasons": [DETAIL]}},
    "scores": {"TaintToleration": {"a": 100}, "NodeResourcesFit": {"a": 40}, "DynamicResources": {"a": 0}},
    "scoreSkipped": ["NodeAffinity"],
    "weights": {"TaintToleration": 3, "NodeResourcesFit": 1, "DynamicResources": 2},
    "total": {"a": 340},
    **{
        key: {"node": "a", "scores": {"TaintToleration": 100}, "statuses": {"b": REJECTED}}
        for key in ("reference", "decision", "cached")
    },
}


def changed(result: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(result)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


def test_equal_results_and_the_allocators_detail() -> None:
    assert diff_results(GO, PY) == []
    bare = changed(PY, ("filter", "c", "reasons"), ["cannot allocate all claims: "])
    assert diff_results(GO, bare), "an empty detail is not upstream's reason"


def test_every_part_counts() -> None:
    for path, value in [
        (("filter", "b", "reasons"), ["Insufficient memory"]),
        (("filter", "b", "code"), "UnschedulableAndUnresolvable"),
        (("scores", "NodeResourcesFit", "a"), 41),
        (("scores", "ImageLocality"), {"a": 0}),  # a plugin upstream does not run
        (("scoreSkipped",), []),
        (("total", "a"), 341),
        (("decision", "node"), "b"),
        (("cached", "scores", "TaintToleration"), 99),
        (("reference", "statuses", "b", "reasons"), ["Insufficient memory"]),
    ]:
        assert diff_results(GO, changed(PY, path, value)), path
    missing = copy.deepcopy(PY)
    del missing["scores"]["NodeResourcesFit"]  # a plugin missing on one side
    assert diff_results(GO, missing)
    assert diff_results(GO, changed(GO, ("scores", "DynamicResources", "a"), 5)), "DynamicResources' score counts"


def test_fit_reasons_of_scalar_resources_in_any_order() -> None:
    """fitsRequest walks the scalar resources in Go's map order: only their order may differ."""
    reasons = ["Insufficient cpu", "Insufficient hugepages-2Mi", "Insufficient example.com/gpu"]
    go = changed(GO, ("filter", "b", "reasons"), reasons)

    def node_b(py_reasons: list[str]) -> list[str]:
        return [d for d in diff_results(go, changed(PY, ("filter", "b", "reasons"), py_reasons)) if "filter[b]" in d]

    assert node_b([reasons[0], reasons[2], reasons[1]]) == []
    assert node_b([reasons[1], reasons[0], reasons[2]]), "cpu is checked before the scalar resources"
    assert node_b(reasons[:2]), "a reason missing"


def test_errors_are_compared_by_text() -> None:
    assert diff_results({"error": "x"}, {"error": "x"}) == []
    assert diff_results({"error": "x"}, {"error": "y"})
    assert diff_results({"error": "x"}, PY)


def test_unschedulable_message_and_statuses() -> None:
    go = {**GO, "filter": {"b": REJECTED, "c": DRA}, "scores": {}, "total": {}}
    go["message"] = "0/2 nodes are available: 1 Insufficient cpu, 1 cannot allocate all claims."
    decision = {
        "unschedulable": f"0/2 nodes are available: 1 Insufficient cpu, 1 {DETAIL}.",
        "statuses": {"b": REJECTED, "c": {**DRA, "reasons": [DETAIL]}},
        "everyNode": None,
    }
    py = {"filter": PY["filter"] | {"a": REJECTED}, "scores": {}}
    py["filter"].pop("a")
    py.update(reference=decision, decision=decision, cached=decision)
    assert diff_results(go, py) == []
    assert upstream_message(decision["unschedulable"]) == go["message"]
    assert diff_results(go, changed(py, ("cached", "unschedulable"), "0/2 nodes are available: 2 Insufficient cpu."))
    assert diff_results(go, changed(py, ("decision", "statuses"), {"b": REJECTED}))


def test_sequence_steps_and_the_known_deviation() -> None:
    go, py = {**GO, "steps": [GO]}, {**PY, "steps": [changed(PY, ("decision", "node"), "z")]}
    case = {"pod": {"spec": {}}, "sequence": [{"spec": {}}]}
    differences = diff_results(go, py)
    assert differences
    assert all(d.startswith("step 1: decision: ") for d in differences)
    assert two_phase_scoring({"case": case, "go": go, "differences": differences})  # DynamicResources rejects c
    at_filter = ["step 1: filter[b].code: go='Unschedulable' python='x'"]
    assert not two_phase_scoring({"case": case, "go": go, "differences": at_filter})
    with_claims = {"pod": {"spec": {"resourceClaims": [{"name": "x"}]}}}
    assert not two_phase_scoring({"case": with_claims, "go": go, "differences": differences})
    assert diff_results({**GO, "steps": [GO]}, PY), "a missing step is a mismatch"
