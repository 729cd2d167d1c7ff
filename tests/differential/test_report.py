"""tests/differential/report.py: what a differential test leaves behind when it fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.differential.report import by_family, by_field, fail


def test_a_failure_writes_the_cases_and_says_how_to_rerun_them(tmp_path: Path) -> None:
    mismatches = [
        {"name": "c1", "family": "claims", "differences": ["score[n1]: 3 != 4", "message: a != b"]},
        {"name": "c2", "family": "volumes", "differences": ["score[n2]: 1 != 2"]},
    ]
    assert by_field(mismatches) == {"message": 1, "score": 2}
    assert by_family(mismatches) == {"claims": 1, "volumes": 1}
    out = tmp_path / "run"
    with pytest.raises(pytest.fail.Exception) as failed:
        fail(
            out,
            [{"name": "c1"}, {"name": "c2"}, {"name": "c3"}],
            [{"go": 1}, {"go": 2}, {"go": 3}],
            mismatches,
            headline="2 of 3 cases differ",
            rerun="tests.differential.compare_scheduling",
            format_mismatch=lambda m: f"- {m['name']}",
            report="the run's summary",
        )
    text = str(failed.value)
    assert text.startswith("2 of 3 cases differ\n")
    assert f"python -m tests.differential.compare_scheduling {out}/cases.json {out}/go.json" in text
    assert "First 2:\n- c1\n- c2\n\nthe run's summary" in text
    assert len(json.loads((out / "cases.json").read_text())) == 3
    assert json.loads((out / "go.json").read_text())[2] == {"go": 3}
    assert json.loads((out / "mismatches.json").read_text()) == mismatches
