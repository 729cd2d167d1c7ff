"""The golden digests of tests/unit/test_allocator_golden.py, made from upstream's answers.

    .venv/bin/python -m tests.differential.golden           # print the digests
    .venv/bin/python -m tests.differential.golden --write   # and write them into the test

The cases are ``draxr_dev.allocator.casegen.golden_cases()`` (the differential's generator, on its
own seed and scale), in order; their answers come from the Go harness (tests/allocator_harness:
k8s.io/dynamic-resource-allocation as pinned there, built by hack/build-allocator-harness.sh),
never from draxr's port, which the digests exist to check.

A digest is one letter (A allocated, N no fit, F node failure, X fatal) and the first 10 hex digits of
sha256 over the JSON (sorted keys, no spaces) of {"outcome", "results"}, plus "error": [class,
subject] (compare.error_class) for node failures and fatal errors. shareIDs (random in Go) are
"SHARE", as the port's case runner writes them. A no fit has nothing more to compare: upstream's
Allocate returns nil, nil.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.differential.compare import build_harness, error_class, run_go

__all__ = ["digest", "from_go", "golden_digests"]

TEST_FILE = Path(__file__).resolve().parents[1] / "unit" / "test_allocator_golden.py"
_CODE = {"allocated": "A", "noFit": "N", "nodeFailure": "F", "fatal": "X"}
_FROM_GO = {"allocated": "allocated", "nofit": "noFit", "node_failure": "nodeFailure", "fatal": "fatal"}
SHARE_ID = "SHARE"  # operator/draxr_dev/allocator/cases.py writes this for every shareID


def digest(output: Mapping[str, Any]) -> str:
    """The digest of one outcome in the shape of the port's case runner (cases.run_case)."""
    outcome = str(output["outcome"])
    body: dict[str, Any] = {"outcome": outcome, "results": output.get("results") or []}
    if outcome in ("nodeFailure", "fatal"):
        body["error"] = list(error_class(str(output.get("error") or "")))
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return _CODE[outcome] + hashlib.sha256(text.encode()).hexdigest()[:10]


def _shares(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: (SHARE_ID if k == "shareID" and v else _shares(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_shares(v) for v in value]
    return value


def from_go(outcome: Mapping[str, Any]) -> dict[str, Any]:
    """The harness's outcome in the shape of the port's case runner."""
    kind = str(outcome.get("kind"))
    if kind not in _FROM_GO:  # "panic" or "invalid_case": no answer to freeze
        raise RuntimeError(f"case {outcome.get('name')}: the harness says {kind}: {outcome.get('error', '')[:2000]}")
    return {"outcome": _FROM_GO[kind], "results": _shares(outcome.get("results") or []), "error": outcome.get("error")}


def golden_digests(harness: Path) -> list[str]:
    from draxr_dev.allocator.casegen import golden_cases

    return [digest(from_go(o)) for o in run_go(harness, golden_cases())]


def format_block(digests: Sequence[str], per_line: int = 9) -> str:
    return "\n".join(" ".join(digests[i : i + per_line]) for i in range(0, len(digests), per_line))


def write(digests: Sequence[str], path: Path = TEST_FILE) -> None:
    text = path.read_text()
    new, n = re.subn(
        r'(_UPSTREAM_TEXT = """\n)(.*?)(\n""")', lambda m: m[1] + format_block(digests) + m[3], text, flags=re.S
    )
    if n != 1:
        raise RuntimeError(f"no _UPSTREAM_TEXT block in {path}")
    path.write_text(new)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write the digests into {TEST_FILE.name}")
    args = parser.parse_args(argv)
    digests = golden_digests(build_harness())
    print(format_block(digests))
    if args.write:
        write(digests)
        print(f"written to {TEST_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
