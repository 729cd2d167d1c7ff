"""Compare draxr's Python scheduler plugins with kube-scheduler's Go plugins, case by case.

Results (both sides) follow draxr_dev.scheduling's schema. Equal means:

- both report an error, or neither does (error texts are not compared);
- ``filter``: the same nodes, and for each node either both None (feasible) or the same
  plugin, code and reasons (in order);
- ``scores``: for every score plugin either side reports and every node upstream found feasible,
  the same normalised, unweighted score; a plugin (or a node) missing on one side counts as 0.

- ``decision`` (when the Python side reports it): placement.schedule()'s own choice is a node of
  the highest ``total`` upstream reports, or, when no node fits, it counts the same nodes per
  reason.

``weights`` and ``total`` are not compared (the Python side may omit them).

As a script, for debugging: ``python -m tests.differential.compare_scheduling cases.json go.json``
re-runs the Python side (draxr_dev.scheduling.evaluate.evaluate_case) and prints the mismatches.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from draxr_dev.scheduling.casegen import as_stored

__all__ = ["Mismatch", "compare", "diff_results", "format_mismatch", "run_each", "run_python"]

JSON = dict[str, Any]


class Mismatch(dict[str, Any]):
    """name, family, tags, differences, go and python results, and the case itself."""


def _feasible(result: Mapping[str, Any]) -> list[str]:
    return sorted(n for n, s in (result.get("filter") or {}).items() if s is None)


def diff_results(go: Mapping[str, Any], py: Mapping[str, Any]) -> list[str]:
    """What differs between two results, one line each (empty: equal)."""
    if "error" in go or "error" in py:
        if ("error" in go) != ("error" in py):
            return [f"error: go={go.get('error', '-')!r} python={py.get('error', '-')!r}"]
        return []
    out: list[str] = []
    g_filter: Mapping[str, Any] = go.get("filter") or {}
    p_filter: Mapping[str, Any] = py.get("filter") or {}
    if set(g_filter) != set(p_filter):
        out.append(f"filter: nodes differ: go={sorted(g_filter)} python={sorted(p_filter)}")
    for node in sorted(set(g_filter) & set(p_filter)):
        g, p = g_filter[node], p_filter[node]
        if g is None and p is None:
            continue
        if g is None or p is None:
            out.append(f"filter[{node}]: go={g} python={p}")
            continue
        for field in ("plugin", "code", "reasons"):
            if g.get(field) != p.get(field):
                out.append(f"filter[{node}].{field}: go={g.get(field)!r} python={p.get(field)!r}")
    feasible = _feasible(go)
    g_scores: Mapping[str, Mapping[str, int]] = go.get("scores") or {}
    p_scores: Mapping[str, Mapping[str, int]] = py.get("scores") or {}
    for plugin in sorted(set(g_scores) | set(p_scores)):
        g_plugin, p_plugin = g_scores.get(plugin) or {}, p_scores.get(plugin) or {}
        for node in feasible:
            if g_plugin.get(node, 0) != p_plugin.get(node, 0):
                out.append(f"scores[{plugin}][{node}]: go={g_plugin.get(node, 0)} python={p_plugin.get(node, 0)}")
    out += _diff_decision(go, py.get("decision"))
    return out


def _diff_decision(go: Mapping[str, Any], decision: Mapping[str, Any] | None) -> list[str]:
    """placement.schedule()'s own decision (when the Python side reports it) against upstream's
    outcome: a node of the highest weighted total (upstream breaks ties at random), or, when no
    node fits, the same count of nodes per reason (what kube-scheduler's FitError summarises)."""
    if decision is None:
        return []
    feasible = _feasible(go)
    if feasible:
        totals: Mapping[str, int] = go.get("total") or {}
        best = max(totals.get(n, 0) for n in feasible)
        top = sorted(n for n in feasible if totals.get(n, 0) == best)
        if decision.get("node") not in top:
            return [f"decision: go={top} (total {best}) python={dict(decision)}"]
        return []
    if "node" in decision:
        return [f"decision: go=unschedulable python={dict(decision)}"]
    reasons: Counter[str] = Counter()
    for status in (go.get("filter") or {}).values():
        reasons.update(status["reasons"])
    got = decision.get("reasons") or {}
    # A PreFilter rejection (an invalid pod, conflicting node names) is summarised on its own.
    if got and got != dict(reasons):
        return [f"decision.reasons: go={dict(reasons)} python={dict(got)}"]
    return []


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


def python_runner() -> tuple[Callable[[Mapping[str, Any]], JSON], str]:
    """The Python side, imported only when called (it may not exist yet)."""
    from draxr_dev.scheduling.evaluate import evaluate_case

    def run(case: Mapping[str, Any]) -> JSON:
        out: JSON = evaluate_case(as_stored(case))
        return out

    return run, "draxr_dev.scheduling.evaluate.evaluate_case(as_stored(case))"


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


def run_python(cases: Sequence[Mapping[str, Any]]) -> tuple[list[JSON], float, str]:
    """Results of all cases (see run_each), the seconds it took, and which runner was used."""
    run, which = python_runner()
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
    if len(argv) != 2:
        print("usage: python -m tests.differential.compare_scheduling cases.json go.json", file=sys.stderr)
        return 2
    cases = json.loads(Path(argv[0]).read_text())
    go = json.loads(Path(argv[1]).read_text())
    py, seconds, which = run_python(cases)
    mismatches = compare(cases, go, py)
    for m in mismatches:
        print(format_mismatch(m))
    print(f"{len(mismatches)} of {len(cases)} cases differ ({which}, {seconds:.1f}s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
