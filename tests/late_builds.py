"""The test modules whose binaries hack/test.sh builds last, in the background (hack/build-late.sh:
helm, Kueue, Kubernetes 1.35, 1.34 and 1.36), while the rest of the suite runs beside the build.

They run after every other module, in the order the script builds what they need: before the
real-node tests (whose session-wide node would join the session cluster those modules share),
except the version matrix, which runs on clusters of its own and goes last. Each one's first test
waits, outside its own timeout, until the build it needs has ended (``DRAXR_LATE_BUILDS_DONE``
names the file the script writes its statuses next to). Without the
variable (pytest run directly) nothing waits: a test that needs a build still in
progress waits for its build lock, and a cold cache is built on first use.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION = ROOT / "tests" / "integration"
REALNODE = ROOT / "tests" / "realnode"
# Each late module and the hack/build-late.sh build it waits for, in the order they run: those
# before the real-node tests, then those after them (the version matrix, on clusters of its own,
# overlaps the real node's tests with the builds of Kubernetes 1.34 and 1.36).
NEEDS = {
    "test_helm.py": "helm",
    "test_docs.py": "helm",
    "test_kueue.py": "kueue",
    "test_adoption.py": "k8s-1.35",
    "test_versions.py": "versions",
}
MODULES = tuple(NEEDS)
AFTER_REAL_NODE = frozenset({"test_versions.py"})
DONE_VARIABLE = "DRAXR_LATE_BUILDS_DONE"


def rank(path: Path) -> int | None:
    """The module's place among the late ones, or None for any other test file."""
    if path.parent == INTEGRATION and path.name in MODULES:
        return MODULES.index(path.name)
    return None


def order(paths: Sequence[Path]) -> list[int]:
    """A permutation of the items (given by their files) that moves the late modules' items, each
    module's own order kept: those not in AFTER_REAL_NODE to just before the first real-node item
    (else to the end), those in it to the end."""
    late = sorted((i for i, p in enumerate(paths) if rank(p) is not None), key=lambda i: rank(paths[i]))
    before = [i for i in late if paths[i].name not in AFTER_REAL_NODE]
    after = [i for i in late if paths[i].name in AFTER_REAL_NODE]
    rest = [i for i, p in enumerate(paths) if rank(p) is None]
    at = next((n for n, i in enumerate(rest) if REALNODE in paths[i].parents), len(rest))
    return rest[:at] + before + rest[at:] + after


def wait_until_built(module: str, poll: float = 2.0) -> None:
    """Blocks until hack/build-late.sh has ended the build ``module`` needs, or the whole chain
    (a build the run did not ask for has no status of its own), when hack/test.sh started it."""
    done = os.environ.get(DONE_VARIABLE)
    if not done or module not in NEEDS:
        return
    chain, step = Path(done), Path(f"{done}.{NEEDS[module]}")
    if step.exists() or chain.exists():
        return
    print(f"\n[draxr] {module} waits for the background build of {NEEDS[module]}", file=sys.__stderr__, flush=True)
    started = time.monotonic()
    while not (step.exists() or chain.exists()):
        time.sleep(poll)
    print(f"[draxr] ... built after {time.monotonic() - started:.0f}s", file=sys.__stderr__, flush=True)
