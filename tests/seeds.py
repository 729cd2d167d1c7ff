"""The seeds of the generated tests (the differentials' cases, the chaos run's faults).

Each test reads its own variable first (``DRAXR_SCHED_DIFF_SEED``, ``DRAXR_CHAOS_SEED``, ...),
then ``DRAXR_TEST_SEED``, then its fixed default, the reference seed the known deviations are
pinned at (tests/differential/known_deviations.json). ``bash hack/test.sh`` (CI's command) draws a
new ``DRAXR_TEST_SEED`` every run unless one is given (``fixed``: the defaults) and prints it with
the command that replays the run, before and after pytest; pytest's header repeats it
(docs/developer/testing.md, "Seeds and known deviations"). pytest run directly, without
``DRAXR_TEST_SEED``, uses the fixed defaults.
"""

from __future__ import annotations

import os

RUN_SEED = "DRAXR_TEST_SEED"


def seed(variable: str, default: int) -> int:
    """The seed: ``variable``, else the run's ``DRAXR_TEST_SEED``, else ``default``."""
    return int(os.environ.get(variable) or os.environ.get(RUN_SEED) or default)


def header() -> str:
    """pytest's header line: the run's seed and how to replay it."""
    value = os.environ.get(RUN_SEED)
    if not value:
        return f"seeds: the tests' fixed defaults ({RUN_SEED} unset; bash hack/test.sh draws one every run)"
    return f"seeds: {RUN_SEED}={value}; replay: {RUN_SEED}={value} bash hack/test.sh [tests/differential ...]"
