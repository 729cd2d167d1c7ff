"""Compare draxr's Python scheduler plugins with kube-scheduler's Go plugins, case by case.

Results (both sides) follow draxr_dev.scheduling's schema. Equal means, everything that both
sides report being compared:

- errors: neither side reports one, or both report the same text (a Python exception never
  equals a harness error: such a case is a mismatch);
- ``filter``: the same nodes, and for each node either both None (feasible) or the same plugin,
  code and reasons (in order; NodeResourcesFit's scalar resources in any order, _fit_order).
  DynamicResources' "cannot allocate all claims" is upstream's whole
  reason: its allocator returns no reason for a node where the claims do not fit (Allocate gives
  nil, nil) and the Filter prints that constant; draxr says why after ": " (the allocator's
  detail), so its reason is upstream's or upstream's followed by ": <detail>";
- ``scores``: the score plugins each side runs for the pod are the same (upstream's minus those
  whose PreScore returned Skip, ``scoreSkipped``; a plugin missing on one side is a mismatch),
  and each one's normalised, unweighted score on every node either side found feasible, with its
  weight, and every feasible node's weighted ``total``. A plugin draxr does not port
  (NOT_PORTED_SCORES, none today) must score 0 upstream;
- ``reference``, ``decision`` and ``cached``: placement.schedule() without the equivalence cache
  (every node evaluated), with it (production), and with it again (its verdicts reused), each
  against upstream's outcome (_diff_decision): the node (one of the highest total), the scores
  of that node, every node's status, and, when no node fits, the FailedScheduling message
  ("0/N nodes are available: ...", upstream_message), or, when a Filter failed with an error on
  some node, upstream's error and no node's status (_diff_decision). For a case with ``partialScoring``
  (100 nodes or more) the production paths are compared with upstream's ``partial`` result, the
  search stopped after numFeasibleNodesToFind feasible nodes and scored over those;
- ``steps``: for a sequence case, each step's result as above, in order.

As a script, for debugging: ``python -m tests.differential.compare_scheduling [--sequences]
cases.json go.json`` re-runs the Python side (draxr_dev.scheduling.evaluate.evaluate_case, or
evaluate_sequence) and prints the mismatches.
"""

from __future__ import annotations

import json
import re
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from draxr.core.plugins.dynamic_resources import CANNOT_ALLOCATE
from draxr_dev.scheduling.casegen import as_stored

__all__ = ["Mismatch", "compare", "diff_results", "format_mismatch", "run_each", "run_python", "two_phase_scoring"]

JSON = dict[str, Any]


class Mismatch(dict[str, Any]):
    """name, family, tags, differences, go and python results, and the case itself."""


# Score plugins of the default profile draxr does not port, and why; upstream must score them 0 on
# every feasible node (a non-zero score is a mismatch).
NOT_PORTED_SCORES: dict[str, str] = {}


def _feasible(result: Mapping[str, Any]) -> list[str]:
    return sorted(n for n, s in (result.get("filter") or {}).items() if s is None)


def _reason_differs(go: str, py: str) -> bool:
    """draxr's reason against upstream's: the same, or upstream's "cannot allocate all claims"
    with draxr's detail after ": " (upstream's allocator returns no reason for a node where the
    claims do not fit, and DynamicResources' Filter prints only that constant)."""
    if go == py:
        return False
    return not (go == CANNOT_ALLOCATE and py.startswith(f"{CANNOT_ALLOCATE}: ") and len(py) > len(CANNOT_ALLOCATE) + 2)


_FIT_FIXED = ("Too many pods", "Insufficient cpu", "Insufficient memory", "Insufficient ephemeral-storage")


def _fit_order(reasons: list[str]) -> list[str]:
    """NodeResourcesFit's reasons with those after pods, cpu, memory and ephemeral-storage (the
    scalar resources: extended resources, hugepages) sorted: fitsRequest checks pods, cpu, memory
    and ephemeral-storage in that order, then walks the scalar resources in Go's map order, which
    varies from run to run."""
    tail = max((i + 1 for i, r in enumerate(reasons) if r in _FIT_FIXED), default=0)
    return reasons[:tail] + sorted(reasons[tail:])


def _diff_status(where: str, g: Mapping[str, Any] | None, p: Mapping[str, Any] | None) -> list[str]:
    if g is None and p is None:
        return []
    if g is None or p is None:
        return [f"{where}: go={g} python={p}"]
    out = [
        f"{where}.{field}: go={g.get(field)!r} python={p.get(field)!r}"
        for field in ("plugin", "code")
        if g.get(field) != p.get(field)
    ]
    g_reasons, p_reasons = list(g.get("reasons") or ()), list(p.get("reasons") or ())
    if g.get("plugin") == p.get("plugin") == "NodeResourcesFit":
        g_reasons, p_reasons = _fit_order(g_reasons), _fit_order(p_reasons)
    if len(g_reasons) != len(p_reasons) or any(map(_reason_differs, g_reasons, p_reasons)):
        out.append(f"{where}.reasons: go={g_reasons!r} python={p_reasons!r}")
    return out


def upstream_message(message: str) -> str:
    """A FailedScheduling message in upstream's words: each "cannot allocate all claims: <detail>"
    (see _reason_differs) becomes "cannot allocate all claims", and the "N reason" parts of the
    "0/M nodes are available: ..." summary are counted again and sorted as FitError does."""
    if f"{CANNOT_ALLOCATE}: " not in message:
        return message

    def recount(m: re.Match[str]) -> str:
        counts: dict[str, int] = {}
        for part in _parts(m.group(2)):
            n, _, reason = part.partition(" ")
            if reason.startswith(f"{CANNOT_ALLOCATE}: "):
                reason = CANNOT_ALLOCATE
            counts[reason] = counts.get(reason, 0) + int(n)
        return m.group(1) + ", ".join(sorted(f"{n} {r}" for r, n in counts.items())) + "."

    return re.sub(r"^(0/\d+ nodes are available: )(.*)\.$", recount, message, flags=re.DOTALL)


def _parts(summary: str) -> list[str]:
    """The "N reason" parts of a summary (a reason may hold ", ": a part starts with a count)."""
    parts: list[str] = []
    for piece in summary.split(", "):
        if parts and not re.match(r"\d+ ", piece):
            parts[-1] += ", " + piece
        else:
            parts.append(piece)
    return parts


def diff_results(go: Mapping[str, Any], py: Mapping[str, Any]) -> list[str]:
    """What differs between two results, one line each (empty: equal); a sequence's steps too."""
    out = _diff_one(go, py)
    if "steps" in go or "steps" in py:
        g_steps, p_steps = go.get("steps") or [], py.get("steps") or []
        if len(g_steps) != len(p_steps):
            out.append(f"steps: go={len(g_steps)} python={len(p_steps)}")
        for i, (g, p) in enumerate(zip(g_steps, p_steps, strict=False), start=1):
            out += [f"step {i}: {d}" for d in _diff_one(g, p)]
    return out


def _diff_one(go: Mapping[str, Any], py: Mapping[str, Any]) -> list[str]:
    if "error" in go or "error" in py:
        if go.get("error") != py.get("error"):
            return [f"error: go={go.get('error', '-')!r} python={py.get('error', '-')!r}"]
        return []
    out: list[str] = []
    g_filter: Mapping[str, Any] = go.get("filter") or {}
    p_filter: Mapping[str, Any] = py.get("filter") or {}
    if set(g_filter) != set(p_filter):
        out.append(f"filter: nodes differ: go={sorted(g_filter)} python={sorted(p_filter)}")
    for node in sorted(set(g_filter) & set(p_filter)):
        out += _diff_status(f"filter[{node}]", g_filter[node], p_filter[node])
    feasible = sorted(set(_feasible(go)) | set(_feasible(py)))
    if feasible:
        g_scores: Mapping[str, Mapping[str, int]] = go.get("scores") or {}
        p_scores: Mapping[str, Mapping[str, int]] = py.get("scores") or {}
        g_skipped = set(go.get("scoreSkipped") or ())
        g_ran = set(g_scores) - g_skipped - set(NOT_PORTED_SCORES)
        for plugin in sorted(set(NOT_PORTED_SCORES) & (set(g_scores) - g_skipped)):
            nonzero = {n: v for n, v in g_scores[plugin].items() if v}
            if nonzero:
                out.append(f"scores[{plugin}]: not ported ({NOT_PORTED_SCORES[plugin]}), go scores {nonzero}")
        if g_ran != set(p_scores):
            out.append(
                f"scores: plugins run: go={sorted(g_ran)} (skipped {sorted(g_skipped)}) python={sorted(p_scores)}"
            )
        if g_skipped != set(py.get("scoreSkipped") or ()):
            out.append(f"scoreSkipped: go={sorted(g_skipped)} python={sorted(py.get('scoreSkipped') or ())}")
        for plugin in sorted(g_ran & set(p_scores)):
            g_plugin, p_plugin = g_scores[plugin], p_scores[plugin]
            if (go.get("weights") or {}).get(plugin) != (py.get("weights") or {}).get(plugin):
                out.append(f"weights[{plugin}]: go={go['weights'].get(plugin)} python={py['weights'].get(plugin)}")
            for node in feasible:
                if g_plugin.get(node) != p_plugin.get(node):
                    out.append(f"scores[{plugin}][{node}]: go={g_plugin.get(node)} python={p_plugin.get(node)}")
        g_total, p_total = go.get("total") or {}, py.get("total") or {}
        for node in feasible:
            if g_total.get(node) != p_total.get(node):
                out.append(f"total[{node}]: go={g_total.get(node)} python={p_total.get(node)}")
    for key in ("reference", "decision", "cached"):
        if key not in py:
            out.append(f"{key}: python reports no decision")
            continue
        # schedule() as production runs it stops searching where upstream does: against the
        # harness's search cut off at numFeasibleNodesToFind when the case asked for it.
        upstream = go["partial"] if key != "reference" and "partial" in go else go
        out += [f"{key}: {d}" for d in _diff_decision(upstream, py[key], every_node=key == "reference")]
    return out


def _diff_decision(go: Mapping[str, Any], decision: Mapping[str, Any], *, every_node: bool) -> list[str]:
    """placement.schedule()'s own decision against upstream's outcome.

    A node fits on Go's side: a node of the highest weighted total (upstream breaks ties at
    random), the scores draxr gives it upstream's, and every node draxr rejected before the
    choice rejected by upstream with the same status. With ``every_node`` (the reference path,
    which evaluates every node) no node upstream rejects is left out, but for DynamicResources'
    rejections of pods without claims of their own: draxr runs the allocator on the candidates
    best first and stops at the first fit.

    No node fits: unschedulable, every node's status upstream's (the PreFilter's on every node),
    and the FailedScheduling message upstream's (upstream_message).

    A Filter failed with an error on some node (code Error: RunFilterPlugins' ``running "<plugin>"
    filter plugin: ...``): upstream's findNodesThatPassFilters returns that error, whether other
    nodes fit or not, and schedulePod fails the attempt with it: no FitError, so no diagnosis (no
    node's status, no PostFilter) and the error as the FailedScheduling message. The nodes run in
    parallel, so with several such nodes the error is any one of theirs."""
    g_filter: Mapping[str, Any] = go.get("filter") or {}
    statuses: Mapping[str, Any] = decision.get("statuses") or {}
    errors = [s["reasons"][0] for s in g_filter.values() if s is not None and s.get("code") == "Error" and s["reasons"]]
    if errors:
        if "node" in decision:
            return [f"go=error {errors[0]!r} python={decision['node']}"]
        failed: list[str] = []
        if statuses or decision.get("everyNode") is not None:
            failed.append(f"statuses: go=none (the attempt failed with an error) python={sorted(statuses)}")
        if decision.get("unschedulable") not in errors:
            failed.append(f"message: go={errors[0]!r} python={decision.get('unschedulable')!r}")
        return failed
    feasible = _feasible(go)
    out: list[str] = []
    if feasible:
        if "node" not in decision:
            return [f"go={feasible} python unschedulable: {decision.get('unschedulable')!r}"]
        totals: Mapping[str, int] = go.get("total") or {}
        best = max(totals.get(n, 0) for n in feasible)
        top = sorted(n for n in feasible if totals.get(n, 0) == best)
        node = decision["node"]
        if node not in top:
            out.append(f"node: go={top} (total {best}) python={node}")
        g_scores: Mapping[str, Mapping[str, int]] = go.get("scores") or {}
        for plugin, score in sorted((decision.get("scores") or {}).items()):
            if (g_scores.get(plugin) or {}).get(node) != score:
                out.append(f"scores[{plugin}][{node}]: go={(g_scores.get(plugin) or {}).get(node)} python={score}")
        for name, status in sorted(statuses.items()):
            out += _diff_status(f"statuses[{name}]", g_filter.get(name), status)
        if every_node:
            left_out = [
                n
                for n, s in g_filter.items()
                if s is not None and n not in statuses and s.get("plugin") != "DynamicResources"
            ]
            if left_out:
                out.append(f"statuses: nodes upstream rejects left out: {sorted(left_out)}")
        return out
    if "node" in decision:
        return [f"go=unschedulable python={decision['node']}"]
    every = decision.get("everyNode")
    got = dict.fromkeys(g_filter, every) if every is not None else statuses
    if set(got) != set(g_filter):
        out.append(f"statuses: nodes differ: go={sorted(g_filter)} python={sorted(got)}")
    for name in sorted(set(got) & set(g_filter)):
        out += _diff_status(f"statuses[{name}]", g_filter[name], got[name])
    message = upstream_message(str(decision.get("unschedulable")))
    if message != go.get("message"):
        out.append(f"message: go={go.get('message')!r} python={message!r}")
    return out


def two_phase_scoring(m: Mapping[str, Any]) -> bool:
    """A mismatch of draxr's known deviation (found by the sequence differential): a pod without
    claims of its own whose extended resources DRA serves (the special claim) is scored by
    schedule() over the nodes that pass the filters before the allocator (phase 1), and the
    allocator then tries them best score first (phase 2); upstream scores only the nodes
    DynamicResources' Filter leaves. When a node the allocator would reject holds the extreme raw
    score of a plugin normalised over the nodes (TaintToleration, NodeAffinity, PodTopologySpread,
    InterPodAffinity; PodTopologySpread's domains count too), the chosen node's normalised scores
    differ, and so may the chosen node: draxr's choice passes every filter and the allocator
    upstream too, but is not one of upstream's best. So: only the decisions' node and the chosen
    node's scores differ (never a node's status, a per-node score, a total or a message), and
    only at steps where upstream's DynamicResources rejects a node."""
    case = m.get("case") or {}
    pods = [case.get("pod") or {}, *(case.get("sequence") or ())]
    if any((p.get("spec") or {}).get("resourceClaims") for p in pods):
        return False
    results = [m.get("go") or {}, *((m.get("go") or {}).get("steps") or [])]
    pattern = re.compile(r"^(?:step (\d+): )?(?:reference|decision|cached): (?:scores\[[A-Za-z]+\]\[[^]]+\]|node): ")
    for difference in m["differences"]:
        matched = pattern.match(difference)
        if matched is None:
            return False
        step = int(matched.group(1) or 0)
        statuses = (results[step].get("filter") or {}).values() if step < len(results) else ()
        if not any(s is not None and s.get("plugin") == "DynamicResources" for s in statuses):
            return False
    return True


def compare(
    cases: Sequence[JSON],
    go: Sequence[JSON],
    py: Sequence[JSON],
    diff: Callable[[JSON, JSON], list[str]] = diff_results,
    extra: Callable[[JSON, JSON], Mapping[str, Any]] = lambda case, go: {},
) -> list[Mismatch]:
    """The cases whose results ``diff`` tells apart, in order; ``extra(case, go)``: more fields
    of the Mismatch (the preemption differential's group)."""
    if not len(cases) == len(go) == len(py):
        raise AssertionError(f"result counts differ: {len(cases)} cases, {len(go)} from Go, {len(py)} from Python")
    mismatches = []
    for case, g, p in zip(cases, go, py, strict=True):
        if g.get("name") != case["name"] or p.get("name") != case["name"]:
            raise AssertionError(f"results out of order at {case['name']}: go={g.get('name')} python={p.get('name')}")
        diffs = diff(g, p)
        if diffs:
            mismatches.append(
                Mismatch(
                    name=case["name"],
                    family=case.get("family"),
                    **extra(case, g),
                    tags=case.get("tags"),
                    differences=diffs,
                    go=g,
                    python=p,
                    case=case,
                )
            )
    return mismatches


def python_runner(*, sequences: bool = False) -> tuple[Callable[[Mapping[str, Any]], JSON], str]:
    """The Python side (evaluate_sequence for sequence cases), imported only when called."""
    from draxr_dev.scheduling.evaluate import evaluate_case, evaluate_sequence

    evaluate = evaluate_sequence if sequences else evaluate_case

    def run(case: Mapping[str, Any]) -> JSON:
        out: JSON = evaluate(as_stored(case))
        return out

    return run, f"draxr_dev.scheduling.evaluate.{evaluate.__name__}(as_stored(case))"


def run_each(cases: Sequence[Mapping[str, Any]], run: Callable[[Mapping[str, Any]], JSON]) -> tuple[list[JSON], float]:
    """``run`` on every case (a Python exception is reported as the case's error), and the seconds
    it took."""
    results: list[JSON] = []
    start = time.perf_counter()
    for case in cases:
        try:
            results.append(run(case))
        except Exception as exc:  # a bug in the port, reported per case
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            where = traceback.extract_tb(exc.__traceback__)[-1:]
            loc = f" at {where[0].filename}:{where[0].lineno}" if where else ""
            results.append({"name": case.get("name"), "error": f"python exception: {tb}{loc}"})
    return results, time.perf_counter() - start


def run_python(cases: Sequence[Mapping[str, Any]], *, sequences: bool = False) -> tuple[list[JSON], float, str]:
    """Results of all cases (see run_each), the seconds it took, and which runner was used."""
    run, which = python_runner(sequences=sequences)
    results, seconds = run_each(cases, run)
    return results, seconds, which


def format_mismatch(m: Mapping[str, Any], max_lines: int = 12) -> str:
    lines = [f"--- {m['name']} (family {m['family']})"]
    diffs = list(m["differences"])
    lines += [f"    {d}" for d in diffs[:max_lines]]
    if len(diffs) > max_lines:
        lines.append(f"    ... {len(diffs) - max_lines} more")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    sequences = bool(argv) and argv[0] == "--sequences"
    argv = argv[1:] if sequences else argv
    if len(argv) != 2:
        usage = "usage: python -m tests.differential.compare_scheduling [--sequences] cases.json go.json"
        print(usage, file=sys.stderr)
        return 2
    cases = json.loads(Path(argv[0]).read_text())
    go = json.loads(Path(argv[1]).read_text())
    py, seconds, which = run_python(cases, sequences=sequences)
    mismatches = compare(cases, go, py)
    for m in mismatches:
        print(format_mismatch(m))
    print(f"{len(mismatches)} of {len(cases)} cases differ ({which}, {seconds:.1f}s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
