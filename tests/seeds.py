"""The seeds of the generated tests (the differentials' cases, the chaos run's faults).

Each test reads its own variable first (``DRAXR_SCHED_DIFF_SEED``, ``DRAXR_CHAOS_SEED``, ...),
then ``DRAXR_TEST_SEED``, then its fixed default, the reference seed the known deviations are
pinned at (tests/differential/known_deviations.json). ``DRAXR_TEST_SEED=random bash hack/test.sh``
draws a new one and prints it; pytest's header repeats it with the command that replays the run
(docs/developer/testing.md, "Seeds and known deviations").
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
        return f"seeds: the tests' fixed defaults ({RUN_SEED} unset; {RUN_SEED}=random bash hack/test.sh draws one)"
    return f"seeds: {RUN_SEED}={value}; replay: {RUN_SEED}={value} bash hack/test.sh [tests/differential ...]"
