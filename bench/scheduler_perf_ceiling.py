"""bench/api_ceiling.py for scheduler_perf's workloads (bench/scheduler_perf.py starts it).

    .venv/bin/python bench/scheduler_perf_ceiling.py --classes '{"example.com/gpu-0": "test-class-0"}' \\
        --kubeconfig K --scheduler-name default-scheduler --concurrency 64

The same four writes per pod; only the special claim's ``deviceClassName`` is looked up in
``--classes`` (extended resource name -> DeviceClass: upstream's classes are ``test-class-<i>`` for
``example.com/gpu-<i>``, or the implicit ``deviceclass.resource.kubernetes.io/test-class-<i>``),
where api_ceiling.py assumes bench/e2e.py's ``gpu-<i>`` for ``example.com/gpu-<i>``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import api_ceiling


def main() -> int:
    argv = sys.argv[1:]
    i = argv.index("--classes")
    classes: dict[str, str] = json.loads(argv[i + 1])
    del argv[i : i + 2]
    original = api_ceiling.requested

    def requested(pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        requests, mappings = original(pod)
        for r, m in zip(requests, mappings, strict=True):
            r["exactly"]["deviceClassName"] = classes[m["resourceName"]]
        return requests, mappings

    api_ceiling.requested = requested
    sys.argv = [sys.argv[0], *argv]
    return api_ceiling.main()


if __name__ == "__main__":
    sys.exit(main())
