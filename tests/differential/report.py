"""How every differential test reports its mismatches (allocator, scheduling, sequences, preemption):
the cases, upstream's answers and the mismatches written beside the test, the command that re-runs
the Python side on them, the first few mismatches, and a count by family and by field."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest

SHOW_MISMATCHES = 5


def by_field(mismatches: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Mismatches per differing field (the part of each difference before ':' or '[')."""
    fields = Counter(d.split(":", 1)[0].split("[", 1)[0] for m in mismatches for d in m.get("differences", ()))
    return dict(sorted(fields.items()))


def by_family(mismatches: Sequence[dict[str, Any]]) -> dict[str, int]:
    return dict(sorted(Counter(m["family"] for m in mismatches if "family" in m).items()))


def fail(
    out_dir: Path,
    cases: Sequence[Any],
    go: Sequence[Any],
    mismatches: Sequence[dict[str, Any]],
    *,
    headline: str,
    rerun: str,
    format_mismatch: Callable[[dict[str, Any]], str],
    report: str = "",
) -> NoReturn:
    """Writes cases.json, go.json and mismatches.json to ``out_dir`` and fails the test with
    ``headline``, where they are, ``python -m <rerun> cases.json go.json`` to re-run the Python side,
    the first mismatches and ``report`` (the run's own summary)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cases.json").write_text(json.dumps(list(cases)))
    (out_dir / "go.json").write_text(json.dumps(list(go)))
    mismatch_file = out_dir / "mismatches.json"
    mismatch_file.write_text(json.dumps(list(mismatches), indent=1))
    shown = "\n".join(format_mismatch(m) for m in mismatches[:SHOW_MISMATCHES])
    print(f"[differential] mismatches written to {mismatch_file}")
    pytest.fail(
        f"{headline}\n"
        f"All mismatches (with their cases): {mismatch_file}\n"
        f"Re-run the Python side: python -m {rerun} {out_dir}/cases.json {out_dir}/go.json\n"
        f"First {min(SHOW_MISMATCHES, len(mismatches))}:\n{shown}" + (f"\n\n{report}" if report else ""),
        pytrace=False,
    )
