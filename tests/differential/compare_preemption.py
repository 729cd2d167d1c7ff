"""Compare draxr's preemption (draxr_dev.scheduling.evaluate_preemption) with kube-scheduler's
DefaultPreemption (the Go harness's "preemption", tests/scheduler_harness/preemption.go), case by case.

Equal means:

- upstream found a feasible node: draxr's schedule() chose a node of the highest weighted total;
- otherwise every node's diagnosis (plugin, code, reasons) is the same, and PostFilter's outcome:
  - the nomination: unchanged (null) or cleared ("") on both sides, with the same PostFilter
    message and the same FailedScheduling message; or draxr chose a node among those upstream's
    SelectCandidate may choose (its last tie-break is Go's map order), or one tied with such a node
    on every criterion but a start time upstream reads from the clock (``clock_tied``), with that
    node's victims in upstream's order, its number of PDB violations, and the messages upstream
    writes, for that node;
  - the dry run's rejected nodes and their statuses, when upstream's dry run ran.

For the device family upstream means the harness's DRA preemption reference
(tests/scheduler_harness/dra_preemption.go). DynamicResources' "cannot allocate all claims" is
compared in upstream's words: draxr adds why (``upstream_reasons``).

As a script, for debugging: ``python -m tests.differential.compare_preemption cases.json go.json``
re-runs the Python side and prints the mismatches.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from draxr.core.plugins.dynamic_resources import CANNOT_ALLOCATE
from draxr_dev.scheduling.casegen import as_stored
from draxr_dev.scheduling.casegen_preemption import DEVICE_FAMILY, FAMILIES, NOMINATED_SCORING_FAMILY
from tests.differential.compare_scheduling import Mismatch, format_mismatch, run_each
from tests.differential.compare_scheduling import compare as compare_cases

__all__ = ["GROUPS", "clock_tied", "compare", "diff_preemption", "format_mismatch", "group_of", "run_python"]

JSON = dict[str, Any]

# The groups cases are counted (and asserted) in: the generator's families, each isolating one
# thing a difference may come from (casegen_preemption). A case of another family that found a node
# without preemption while a pod of at least its priority is nominated to a feasible node joins
# the nominated-scoring family's group (the nominated pod counts in the filters, not in the scores).
SCORING_NOMINATED = NOMINATED_SCORING_FAMILY
GROUPS = (*FAMILIES, DEVICE_FAMILY)


def _found(node: str, victims: int) -> str:
    return f"found a potential placement for pod on node {node}, preempting {victims} victims"


def _summary(message: str, plain: Mapping[str, str]) -> str:
    """``message`` with each of draxr's detailed reasons in ``plain`` replaced by upstream's, and
    the "N reason" parts of each "0/M nodes are available: ..." summary counted again and sorted
    as upstream's FitError does."""
    for detailed in sorted(plain, key=len, reverse=True):
        message = message.replace(f" {detailed}", f" {plain[detailed]}")

    def recount(m: re.Match[str]) -> str:
        counts: dict[str, int] = {}
        for part in m.group(2).split(", "):
            n, _, reason = part.partition(" ")
            counts[reason] = counts.get(reason, 0) + int(n)
        return m.group(1) + ", ".join(sorted(f"{n} {r}" for r, n in counts.items())) + "."

    # (a summary ends with "." before a space or the end; a reason may hold dots: example.com/gpu)
    return re.sub(r"(0/\d+ nodes are available: )(.*?)\.(?= |$)", recount, message)


def upstream_reasons(py: Mapping[str, Any]) -> JSON:
    """draxr's result in upstream's words: DynamicResources' "cannot allocate all claims" carries
    draxr's more telling detail ("...: claim ns/name, request r: not enough suitable devices on
    this node", or the devices of a class it found free), which upstream's reason leaves out. The
    statuses keep upstream's reason; in the messages the detailed reasons are replaced and the
    summary's counts added up again."""
    plain: dict[str, str] = {}
    statuses: list[Mapping[str, Any]] = [s for s in (py.get("filter") or {}).values() if s]
    statuses += (py.get("preemption") or {}).get("statuses", {}).values()
    for status in statuses:
        for reason in status["reasons"]:
            if reason.startswith(f"{CANNOT_ALLOCATE}:") or reason.startswith(f"{CANNOT_ALLOCATE} "):
                plain[reason] = CANNOT_ALLOCATE
    if not plain:
        return dict(py)

    def words(status: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        if status is None:
            return None
        return {**status, "reasons": [plain.get(r, r) for r in status["reasons"]]}

    out = dict(py)
    if "filter" in py:
        out["filter"] = {n: words(s) for n, s in py["filter"].items()}
    if py.get("preemption"):
        pre = dict(py["preemption"])
        pre["statuses"] = {n: words(s) for n, s in pre.get("statuses", {}).items()}
        pre["message"] = _summary(pre["message"], plain)
        pre["fitError"] = _summary(pre["fitError"], plain)
        out["preemption"] = pre
    return out


_OFFSET = 2**31  # pickOneNodeForPreemption adds MaxInt32+1 to every victim's priority in its sum


def _criteria(pods: Sequence[Mapping[str, Any]], violations: int) -> tuple[tuple[int, ...], str | None]:
    """pickOneNodeForPreemption's view of a candidate (its victims ``pods``, in upstream's order):
    the criteria it evaluates deterministically (PDB violations, the first victim's priority, the
    sum of priorities, the number of victims; each the smaller the better), and the earliest start
    time of the highest-priority victims (util.GetEarliestPodStartTime), None when none of them has
    a status.startTime: util.GetPodStartTime then reads time.Now(), later than any start time set
    (the cases' are in 2024), and different for every node it scores."""
    priorities = [int(p["spec"].get("priority") or 0) for p in pods]
    top = max(priorities)
    starts = [
        p.get("status", {}).get("startTime") for p, priority in zip(pods, priorities, strict=True) if priority == top
    ]
    known = [s for s in starts if s]
    deterministic = (violations, priorities[0], sum(p + _OFFSET for p in priorities), len(pods))
    return deterministic, min(known) if known else None


def clock_tied(case: Mapping[str, Any], go: Mapping[str, Any], node: str | None) -> bool:
    """Whether upstream may choose ``node`` although its dry run did not (``choices``): some choice
    ties with it on every criterion pickOneNodeForPreemption evaluates deterministically, and the
    last one, the latest earliest start time of the highest-priority victims, reads the clock for
    both (no start time set: util.GetPodStartTime takes time.Now(), so the node scored later wins,
    and the order is Go's map order). A start time set on either side decides, and so does any
    other criterion."""
    pre: Mapping[str, Any] = go.get("preemption") or {}
    candidates: Mapping[str, Any] = pre.get("candidates") or {}
    pods = {f"{p['metadata'].get('namespace', 'default')}/{p['metadata']['name']}": p for p in case.get("pods") or ()}

    def criteria(name: str | None) -> tuple[tuple[int, ...], str | None] | None:
        c = candidates.get(name) if name is not None else None
        if not c or not c["victims"] or any(v not in pods for v in c["victims"]):
            return None
        return _criteria([pods[v] for v in c["victims"]], int(c["numPDBViolations"]))

    mine = criteria(node)
    if mine is None or mine[1] is not None:
        return False
    return any(criteria(choice) == mine for choice in pre.get("choices") or ())


def diff_preemption(go: Mapping[str, Any], py: Mapping[str, Any], case: Mapping[str, Any] | None = None) -> list[str]:
    """What differs, one line each (empty: equal). ``case``: the case's pods, which tell a node
    tied with upstream's choices on the clock (``clock_tied``); without it draxr's node must be
    among the choices."""
    py = upstream_reasons(py)
    if "error" in go:
        return [f"harness error: {go['error'][:2000]}"]
    if "error" in py:
        return [f"python error: {py['error']}"]
    g_filter: Mapping[str, Any] = go.get("filter") or {}
    feasible = sorted(n for n, s in g_filter.items() if s is None)
    if feasible:
        totals: Mapping[str, int] = go.get("total") or {}
        best = max(totals.get(n, 0) for n in feasible)
        top = sorted(n for n in feasible if totals.get(n, 0) == best)
        node = (py.get("decision") or {}).get("node")
        if node not in top:
            return [f"decision: go={top} (total {best}) python={py.get('decision') or 'unschedulable'}"]
        return []
    if "decision" in py:
        return [f"decision: go=unschedulable python={py['decision']}"]
    out: list[str] = []
    p_filter: Mapping[str, Any] = py.get("filter") or {}
    if set(g_filter) != set(p_filter):
        out.append(f"filter: nodes differ: go={sorted(g_filter)} python={sorted(p_filter)}")
    for node in sorted(set(g_filter) & set(p_filter)):
        g, p = g_filter[node], p_filter[node]
        if g != p:
            out.append(f"filter[{node}]: go={g} python={p}")
    gp: Mapping[str, Any] | None = go.get("preemption")
    pp: Mapping[str, Any] | None = py.get("preemption")
    if gp is None or pp is None:
        if gp is not pp:
            out.append(f"preemption: go={gp} python={pp}")
        return out
    g_node, p_node = gp.get("nominatedNode"), pp.get("nominatedNode")
    message, fit_error = gp["message"], gp["fitError"]
    if not g_node:
        if g_node != p_node:
            out.append(f"nominatedNode: go={g_node!r} python={p_node!r}")
    else:
        choices: list[str] = gp.get("choices") or []
        candidates: Mapping[str, Any] = gp.get("candidates") or {}
        if p_node not in choices and not (case is not None and clock_tied(case, go, p_node)):
            chosen = {n: candidates[n] for n in choices}
            out.append(
                f"nominatedNode: go may choose {choices} ({chosen}) python={p_node!r} "
                f"(victims {pp.get('victims')}, {pp.get('numPDBViolations')} PDB violations); "
                f"python's node upstream: {candidates.get(p_node) if p_node else None}"
            )
        else:
            cand = candidates[p_node]
            if pp.get("victims") != cand["victims"]:
                out.append(f"victims[{p_node}]: go={cand['victims']} python={pp.get('victims')}")
            if pp.get("numPDBViolations") != cand["numPDBViolations"]:
                out.append(
                    f"numPDBViolations[{p_node}]: go={cand['numPDBViolations']} python={pp.get('numPDBViolations')}"
                )
            # Upstream's words for the node draxr chose among the tied, with the victims of the
            # budgets in the case's order (the real PostFilter's budgets come in the lister's
            # random order, which can change how many it evicts: the harness checked that some
            # order gives what it did).
            said = re.search(r"preempting (\d+) victims", message)
            was = _found(g_node, int(said.group(1)) if said else len(candidates[g_node]["victims"]))
            now = _found(p_node, len(cand["victims"]))
            message, fit_error = message.replace(was, now), fit_error.replace(was, now)
    if pp.get("message") != message:
        out.append(f"message: go={message!r} python={pp.get('message')!r}")
    if pp.get("fitError") != fit_error:
        out.append(f"fitError: go={fit_error!r} python={pp.get('fitError')!r}")
    g_statuses = gp.get("statuses")
    if g_statuses is not None and g_statuses != pp.get("statuses"):
        p_statuses: Mapping[str, Any] = pp.get("statuses") or {}
        for node in sorted(set(g_statuses) | set(p_statuses)):
            if g_statuses.get(node) != p_statuses.get(node):
                out.append(f"statuses[{node}]: go={g_statuses.get(node)} python={p_statuses.get(node)}")
    return out


def group_of(case: Mapping[str, Any], go: Mapping[str, Any]) -> str:
    """The case's group (GROUPS)."""
    feasible = {n for n, s in (go.get("filter") or {}).items() if s is None}
    if feasible:
        priority = int(case["pod"]["spec"].get("priority") or 0)
        for p in case.get("pods") or ():
            status = p.get("status") or {}
            if (
                not p["spec"].get("nodeName")
                and status.get("nominatedNodeName") in feasible
                and status.get("phase") not in ("Succeeded", "Failed")
                and int(p["spec"].get("priority") or 0) >= priority
            ):
                return SCORING_NOMINATED
    return str(case["family"])


def compare(cases: Sequence[JSON], go: Sequence[JSON], py: Sequence[JSON]) -> list[Mismatch]:
    by_name = {case["name"]: case for case in cases}

    def diff(g: JSON, p: JSON) -> list[str]:
        return diff_preemption(g, p, by_name[g["name"]])

    return compare_cases(cases, go, py, diff, lambda case, g: {"group": group_of(case, g)})


def run_python(cases: Sequence[Mapping[str, Any]]) -> tuple[list[JSON], float]:
    """draxr's result for every case (a Python exception is the case's error) and the seconds taken."""
    from draxr_dev.scheduling.evaluate_preemption import evaluate_preemption_case

    return run_each(cases, lambda case: evaluate_preemption_case(as_stored(case)))


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.differential.compare_preemption cases.json go.json", file=sys.stderr)
        return 2
    cases = json.loads(Path(argv[0]).read_text())
    go = json.loads(Path(argv[1]).read_text())
    py, seconds = run_python(cases)
    mismatches = compare(cases, go, py)
    for m in mismatches:
        print(format_mismatch(m))
    print(f"{len(mismatches)} of {len(cases)} cases differ ({seconds:.1f}s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
