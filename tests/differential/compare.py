"""Run cases through draxr's Python allocator and compare outcomes with upstream Go's.

Outcome (both sides): {"name", "kind", "results", "error"} with kind one of
"allocated" | "nofit" | "node_failure" | "fatal" (Go may also say "panic" or "invalid_case";
the Python side says "python_exception" when the port raises something it should not).

Equal means: same kind; for "allocated" the same AllocationResults once serialisation trivia is
removed (null / empty fields, which the API server drops as well) and shareID values, which are
random UUIDs, are reduced to their presence; for "fatal" and "node_failure" the same error class
(``error_class``: what went wrong, e.g. "CEL runtime error", and the claim, request or device the
message names before it). The rest of an error text is the port's own wording and is not compared.

As a script, for debugging: `python -m tests.differential.compare cases.json go-outcomes.json`
prints the mismatches (go-outcomes.json: the harness's stdout for cases.json).
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "ERROR_CLASSES",
    "Mismatch",
    "build_harness",
    "compare",
    "error_class",
    "format_mismatch",
    "normalize",
    "python_runner",
    "run_go",
    "run_python",
]

JSON = dict[str, Any]
SHARE_ID = "<shareID>"
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-allocator-harness.sh"

# Python adapter kinds (operator/draxr_dev/allocator/cases.py) -> harness kinds.
_KINDS = {"allocated": "allocated", "noFit": "nofit", "nodeFailure": "node_failure", "fatal": "fatal"}
_FAILED = ("fatal", "node_failure")

# Classes of upstream's error messages (the harness prints Allocate's error text), by a pattern of
# the words upstream uses; the port says the same words.
ERROR_CLASSES = (
    ("CEL runtime error", r"CEL runtime error"),
    ("CEL compile error", r"CEL compile error"),
    ("more than 32 devices", r"exceeds the claim limit"),
    ("All + incomplete pool", r"asks for all devices, but resource pool .* is currently being updated"),
    ("All + invalid pool", r"asks for all devices, but resource pool .* is currently invalid"),
    ("invalid pools (node)", r"invalid resource pools were encountered"),
    ("feature disabled", r"feature is disabled"),
    ("missing class", r"could not retrieve device class|missing device class name"),
    ("node selector", r"node selection|NodeSelector"),
    ("All + constraint", r"claim constraint would not be satisfied"),
    ("unsupported request or constraint", r"unsupported (count mode|constraint type|selector type)"),
    ("capacity arithmetic", r"capacity value is negative|cannot be represented"),
    ("timeout", r"aborted"),
)


def error_class(message: str) -> tuple[str, str]:
    """(class, subject) of an allocation error: the first of ERROR_CLASSES whose pattern is found,
    and the text before it, which names what the error is about ("claim default/claim-0, request
    req-1: ", "class class-0: selector #0 on device driver-a/pool-1/dev-0: "). A message of no known
    class is ("other", the whole message): to match, it must then be the same word for word."""
    for name, pattern in ERROR_CLASSES:
        found = re.search(pattern, message)
        if found:
            return name, message[: found.start()]
    return "other", message


def build_harness() -> Path:
    """The Go harness binary, built (or reused) by hack/build-allocator-harness.sh; raises if impossible."""
    try:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600, check=False)
    except FileNotFoundError as exc:  # no bash
        raise RuntimeError(f"cannot run {BUILD_SCRIPT}: {exc}") from exc
    if proc.returncode != 0:
        raise RuntimeError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    binary = Path(proc.stdout.strip().splitlines()[-1])
    if not binary.is_file():
        raise RuntimeError(f"{BUILD_SCRIPT} printed {binary}, which is not a file")
    return binary


def run_go(harness: Path, cases: Sequence[Mapping[str, Any]]) -> list[JSON]:
    """Upstream's outcome for every case, from one harness process."""
    proc = subprocess.run(
        [str(harness)], input=json.dumps(cases), capture_output=True, text=True, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"allocator harness failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    outcomes: list[JSON] = json.loads(proc.stdout)
    return outcomes


def python_runner() -> tuple[Callable[[Mapping[str, Any]], JSON], str]:
    """The Python side: the allocator's own case runner, with its outcome names mapped to the harness's."""
    from draxr_dev.allocator.cases import run_case

    def run(case: Mapping[str, Any]) -> JSON:
        out = run_case(case)
        outcome = str(out.get("outcome"))
        return {
            "name": out.get("name", case.get("name")),
            "kind": _KINDS.get(outcome, outcome),
            "results": out.get("results") or [],
            "error": out.get("error", ""),
        }

    return run, "draxr_dev.allocator.cases.run_case"


def run_python(cases: Sequence[Mapping[str, Any]]) -> tuple[list[JSON], float, str]:
    """Outcomes of all cases, the seconds it took, and which runner was used."""
    run, which = python_runner()
    outcomes = []
    start = time.perf_counter()
    for case in cases:
        try:
            outcomes.append(run(case))
        except Exception as exc:  # a bug in the port, reported per case
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            where = traceback.extract_tb(exc.__traceback__)[-1:]
            loc = f" at {where[0].filename}:{where[0].lineno}" if where else ""
            outcomes.append({"name": case.get("name"), "kind": "python_exception", "results": [], "error": tb + loc})
    return outcomes, time.perf_counter() - start, which


def normalize(value: Any) -> Any:
    """Drop null and empty values (the API server does too) and reduce shareIDs to their presence."""
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if k == "shareID" and v:
                out[k] = SHARE_ID
                continue
            n = normalize(v)
            if n is None or n == {} or n == []:
                continue
            out[k] = n
        return out
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    return value


class Mismatch(dict[str, Any]):
    """name, family, tags, go and python outcomes, and the case itself."""


def compare(cases: Sequence[JSON], go: Sequence[JSON], py: Sequence[JSON]) -> list[Mismatch]:
    if len(go) != len(cases) or len(py) != len(cases):
        raise AssertionError(f"outcome counts differ: {len(cases)} cases, {len(go)} from Go, {len(py)} from Python")
    mismatches = []
    for case, g, p in zip(cases, go, py, strict=True):
        if g.get("name") != case["name"] or p.get("name") != case["name"]:
            raise AssertionError(f"outcomes out of order at {case['name']}: go={g.get('name')} python={p.get('name')}")
        g_res = normalize(g.get("results") or []) if g.get("kind") == "allocated" else []
        p_res = normalize(p.get("results") or []) if p.get("kind") == "allocated" else []
        g_err = error_class(g.get("error") or "") if g.get("kind") in _FAILED else None
        p_err = error_class(p.get("error") or "") if p.get("kind") in _FAILED else None
        if g.get("kind") != p.get("kind") or g_res != p_res or g_err != p_err:
            mismatches.append(
                Mismatch(
                    name=case["name"],
                    family=case.get("family"),
                    tags=case.get("tags"),
                    go={"kind": g.get("kind"), "error": g.get("error", ""), "results": g_res},
                    python={"kind": p.get("kind"), "error": p.get("error", ""), "results": p_res},
                    case=case,
                )
            )
    return mismatches


def _short(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def format_mismatch(m: Mapping[str, Any], max_diff_lines: int = 40) -> str:
    g, p = m["go"], m["python"]
    lines = [f"--- {m['name']} (family {m['family']})"]
    lines.append(f"    go:     {g['kind']}" + (f": {_short(g['error'])}" if g["error"] else ""))
    lines.append(f"    python: {p['kind']}" + (f": {_short(p['error'])}" if p["error"] else ""))
    if g["kind"] == p["kind"] == "allocated":
        diff = list(
            difflib.unified_diff(
                json.dumps(g["results"], indent=1, sort_keys=True).splitlines(),
                json.dumps(p["results"], indent=1, sort_keys=True).splitlines(),
                "go",
                "python",
                lineterm="",
                n=2,
            )
        )
        if len(diff) > max_diff_lines:
            diff = [*diff[:max_diff_lines], f"... ({len(diff) - max_diff_lines} more diff lines)"]
        lines.extend("    " + d for d in diff)
    elif g["kind"] == "allocated" or p["kind"] == "allocated":
        res = g["results"] if g["kind"] == "allocated" else p["results"]
        picks = [
            [
                f"{d.get('request')}={d.get('driver')}/{d.get('pool')}/{d.get('device')}"
                for d in (r.get("devices") or {}).get("results", [])
            ]
            for r in res
        ]
        lines.append(f"    {'go' if g['kind'] == 'allocated' else 'python'} picked: {picks}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        cases = json.load(f)
    with open(argv[1], encoding="utf-8") as f:
        go = json.load(f)
    py, seconds, which = run_python(cases)
    mismatches = compare(cases, go, py)
    for m in mismatches:
        print(format_mismatch(m))
    print(f"{len(mismatches)} mismatches in {len(cases)} cases (python: {which}, {seconds:.1f}s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
