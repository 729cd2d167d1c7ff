"""draxr's side of the preemption differential test: one preemption case (casegen_preemption)
through the core as the shell runs it: the incoming pod in the state, ``placement.schedule()``, and,
when it returns a FitError (``Unschedulable`` with a diagnosis), ``preemption.preempt()`` with the
state's PodDisruptionBudgets (in the case's order) and offset 0.

The result, next to the Go harness's (tests/scheduler_harness, its preemption.go)::

    {"name": str,
     "decision": {"node": str}                       # schedule() found a node, or
     "filter": {node: None | {"plugin", "code", "reasons"}},   # the diagnosis of each node
     "preemption": {"message": str,                  # PostFilter's ("" when it says nothing)
                    "fitError": str,                 # the FailedScheduling message
                    "nominatedNode": None | "" | str,  # unchanged, cleared, or the node chosen
                    "victims": [ns/name, ...],       # the chosen node's, most important first
                    "numPDBViolations": int,
                    "statuses": {node: {...}}}}      # the dry run's rejected nodes
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from draxr.core.allocator import Features
from draxr.core.placement import Decision, schedule
from draxr.core.preemption import preempt
from draxr.core.status import Status
from draxr_dev.scheduling.evaluate import _with_identity, build_state

__all__ = ["evaluate_preemption_case"]


def _status(status: Status) -> dict[str, Any]:
    return {"plugin": status.plugin, "code": str(status.code), "reasons": list(status.reasons)}


def evaluate_preemption_case(case: Mapping[str, Any]) -> dict[str, Any]:
    state = build_state(case)
    for pdb in case.get("podDisruptionBudgets") or ():
        state.upsert_budget(pdb)
    pod = state.upsert_pod(_with_identity(case["pod"], "incoming", 0))
    features = Features()
    result = schedule(pod, state, features=features, device_scoring=None, binds_volumes=True, binds_claims=True)
    out: dict[str, Any] = {"name": case.get("name", "")}
    if isinstance(result, Decision):
        out["decision"] = {"node": result.node}
        return out
    names = [n["metadata"]["name"] for n in case.get("nodes") or ()]
    filters: dict[str, dict[str, Any] | None] = {}
    for name in names:
        status = result.status_of(name)
        filters[name] = _status(status) if status is not None else None
    out["filter"] = filters
    if not result.statuses and result.every_node is None:
        out["preemption"] = None  # not a FitError: no PostFilter
        return out
    outcome = preempt(
        pod,
        state,
        result,
        features=features,
        budgets=list(state.budgets.values()),
        offset=lambda n: 0,
    )
    chosen = outcome.chosen
    nominated: str | None = None
    if chosen is not None:
        nominated = chosen.node
    elif outcome.clear_nomination:
        nominated = ""
    out["preemption"] = {
        "message": outcome.message,
        "fitError": f"{result.message} {outcome.message}" if outcome.message else result.message,
        "nominatedNode": nominated,
        "victims": [v.key for v in chosen.victims] if chosen is not None else [],
        "numPDBViolations": chosen.pdb_violations if chosen is not None else 0,
        "statuses": {n: _status(s) for n, s in outcome.statuses.items()},
    }
    return out
