"""The preemption differential's comparison (compare_preemption.diff_preemption) of the nominated
node: draxr's node must be one upstream may choose, among its dry run's choices or tied with one on
every criterion but a start time read from the clock (``clock_tied``); a node that differs in
anything upstream decides deterministically still fails. No Go needed."""

from __future__ import annotations

import copy
from typing import Any

from tests.differential.compare_preemption import clock_tied, compare, diff_preemption

JSON = dict[str, Any]
REJECTED = {"plugin": "NodeResourcesFit", "code": "Unschedulable", "reasons": ["Insufficient cpu"]}
START = "2024-03-02T00:00:00Z"

# node -> its victims: (priority, start time or None), in upstream's order.
VICTIMS: dict[str, list[tuple[int, str | None]]] = {
    "a": [(10, None), (10, None)],  # upstream's choice
    "b": [(10, None), (10, None)],  # its twin: only the clock tells them apart
    "set": [(10, START), (10, START)],  # a start time set: upstream prefers the clock's "now"
    "set-twin": [(10, START), (10, START)],  # tied with "set" without the clock
    "mixed": [(10, START), (10, None)],  # the earliest is the start time set
    "more": [(10, None), (10, None), (-5, None)],  # one more victim
    "higher": [(20, None), (0, None)],  # the same sum, a higher first priority
    "sum": [(10, None), (5, None)],  # a smaller sum (upstream would have chosen it)
    "pdb": [(10, None), (10, None)],  # one PDB violation
}
VIOLATIONS = {"pdb": 1}


def _pod(node: str, i: int, priority: int, start: str | None) -> JSON:
    status: JSON = {"phase": "Running"}
    if start:
        status["startTime"] = start
    return {
        "metadata": {"name": f"{node}-{i}", "namespace": "default"},
        "spec": {"nodeName": node, "priority": priority, "containers": [{"name": "c0"}]},
        "status": status,
    }


CASE: JSON = {
    "name": "c",
    "family": "preemption-start-unset",
    "pods": [_pod(node, i, p, s) for node, victims in VICTIMS.items() for i, (p, s) in enumerate(victims)],
}
CANDIDATES = {
    node: {"victims": [f"default/{node}-{i}" for i in range(len(victims))], "numPDBViolations": VIOLATIONS.get(node, 0)}
    for node, victims in VICTIMS.items()
}


def _message(node: str) -> str:
    return f"preemption: found a potential placement for pod on node {node}, preempting {len(VICTIMS[node])} victims"


def _fit_error(node: str) -> str:
    return f"0/10 nodes are available: 10 Insufficient cpu. {_message(node)}"


GO: JSON = {
    "name": "c",
    "filter": {node: REJECTED for node in [*VICTIMS, "none"]},
    "preemption": {
        "code": "Success",
        "plugin": "DefaultPreemption",
        "message": _message("a"),
        "nominatedNode": "a",
        "fitError": _fit_error("a"),
        "evicted": sorted(CANDIDATES["a"]["victims"]),
        "candidates": CANDIDATES,
        "choices": ["a"],
        "statuses": {"none": REJECTED},
        "pdbOrders": 1,
    },
}


def _python(node: str) -> JSON:
    victims = list(CANDIDATES[node]["victims"]) if node in CANDIDATES else ["default/x"]
    return {
        "name": "c",
        "filter": copy.deepcopy(GO["filter"]),
        "preemption": {
            "nominatedNode": node,
            "victims": victims,
            "numPDBViolations": VIOLATIONS.get(node, 0),
            "message": _message(node) if node in VICTIMS else _message("a").replace("node a", f"node {node}"),
            "fitError": _fit_error(node) if node in VICTIMS else _fit_error("a").replace("node a", f"node {node}"),
            "statuses": {"none": REJECTED},
        },
    }


def test_upstreams_choice_matches() -> None:
    assert diff_preemption(GO, _python("a"), CASE) == []
    assert diff_preemption(GO, _python("a")) == []


def test_a_node_tied_on_the_clock_matches() -> None:
    assert clock_tied(CASE, GO, "b")
    assert diff_preemption(GO, _python("b"), CASE) == []
    assert compare([CASE], [GO], [_python("b")]) == []
    # Without the case's pods the comparison cannot tell: only the dry run's choices count.
    assert diff_preemption(GO, _python("b"))


def test_a_node_tied_on_the_clock_still_needs_upstreams_victims_and_words() -> None:
    wrong_order = _python("b")
    wrong_order["preemption"]["victims"].reverse()
    assert [d.split(":")[0] for d in diff_preemption(GO, wrong_order, CASE)] == ["victims[b]"]
    wrong_count = _python("b")
    wrong_count["preemption"]["numPDBViolations"] = 1
    assert [d.split(":")[0] for d in diff_preemption(GO, wrong_count, CASE)] == ["numPDBViolations[b]"]
    wrong_message = _python("b")
    wrong_message["preemption"]["message"] = _message("a")
    assert [d.split(":")[0] for d in diff_preemption(GO, wrong_message, CASE)] == ["message"]


def test_a_genuinely_different_choice_fails() -> None:
    """Every node that differs from upstream's choice in a criterion upstream decides without the
    clock, or is not a candidate at all, is a mismatch of the nomination."""
    for node in ("set", "mixed", "more", "higher", "sum", "pdb", "none", "gone"):
        assert not clock_tied(CASE, GO, node), node
        differences = diff_preemption(GO, _python(node), CASE)
        assert differences, node
        assert differences[0].startswith("nominatedNode: go may choose ['a']"), (node, differences)
        assert len(compare([CASE], [GO], [_python(node)])) == 1, node


def test_the_clock_must_decide_on_both_sides() -> None:
    """Upstream's choice with a start time set: a clock-filled node of the same criteria is not
    tied with it (the clock's "now" is later, so upstream would have chosen it)."""
    go = copy.deepcopy(GO)
    go["preemption"]["choices"] = ["set"]
    assert not clock_tied(CASE, go, "a")
    assert not clock_tied(CASE, go, "b")
    # Tied without the clock: upstream's dry run tells (its map order), the rule does not apply.
    assert not clock_tied(CASE, go, "set-twin")
    go["preemption"]["choices"] = ["a", "b"]
    assert clock_tied(CASE, go, "b")
