"""The test modules whose binaries hack/test.sh builds last, in the background (hack/build-late.sh:
helm, Kueue, Kubernetes 1.35, 1.34 and 1.36), while the rest of the suite runs beside the build.

They run after every other module except the real-node tests (whose session-wide node would
join the session cluster those modules share), in the order the script builds what they need. The
first of them waits, outside its own timeout, until the background builds have ended
(``DRAXR_LATE_BUILDS_DONE`` names the file the script writes its exit status into). Without the
variable (pytest run directly, or a selection) nothing waits: a test that needs a build still in
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
# In the order hack/build-late.sh builds what they need.
MODULES = ("test_helm.py", "test_docs.py", "test_kueue.py", "test_adoption.py", "test_versions.py")
DONE_VARIABLE = "DRAXR_LATE_BUILDS_DONE"


def rank(path: Path) -> int | None:
    """The module's place among the late ones, or None for any other test file."""
    if path.parent == INTEGRATION and path.name in MODULES:
        return MODULES.index(path.name)
    return None


def order(paths: Sequence[Path]) -> list[int]:
    """A permutation of the items (given by their files) that moves the late modules' items, each
    module's own order kept, to just before the first real-node item (else to the end)."""
    late = sorted((i for i, p in enumerate(paths) if rank(p) is not None), key=lambda i: rank(paths[i]))
    rest = [i for i, p in enumerate(paths) if rank(p) is None]
    at = next((n for n, i in enumerate(rest) if REALNODE in paths[i].parents), len(rest))
    return rest[:at] + late + rest[at:]


def wait_until_built(poll: float = 2.0) -> None:
    """Blocks until hack/build-late.sh has written its exit status (when hack/test.sh started it)."""
    done = os.environ.get(DONE_VARIABLE)
    if not done:
        return
    marker = Path(done)
    if not marker.exists():
        print(f"\n[draxr] waiting for the background builds ({marker})", file=sys.__stderr__, flush=True)
        started = time.monotonic()
        while not marker.exists():
            time.sleep(poll)
        print(f"[draxr] background builds ended after {time.monotonic() - started:.0f}s", file=sys.__stderr__)
