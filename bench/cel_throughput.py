"""CEL selector evaluations per second over fake GPU devices (printed figure, not a test).

.venv/bin/python bench/cel_throughput.py [--devices 1000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import time

from draxr.core.cel import compile_selector, device_view
from draxr_dev.devcluster.fakedriver import device

EXPRESSIONS = {
    "driver": 'device.driver == "gpu.example.com"',
    "string attribute": 'device.attributes["gpu.example.com"].model == "fake-a100"',
    "quantity compareTo": 'device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver isGreaterThan": 'device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.0.0"))',
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    t0 = time.perf_counter()
    views = [
        device_view("gpu.example.com", device(f"gpu-{i}", numa=i % 2, memory=f"{(i % 4 + 1) * 20}Gi"))
        for i in range(args.devices)
    ]
    build = time.perf_counter() - t0
    print(f"device views: {args.devices / build:,.0f}/s")
    for label, expr in EXPRESSIONS.items():
        sel = compile_selector(expr)
        start = time.perf_counter()
        for _ in range(args.rounds):
            for v in views:
                sel.matches(v)
        rate = args.rounds * len(views) / (time.perf_counter() - start)
        print(f"{label:<22} {rate:>10,.0f} evals/s")


if __name__ == "__main__":
    main()
