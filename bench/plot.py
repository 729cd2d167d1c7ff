"""One PNG from a bench/e2e.py result: pods bound over time (burst phase) and the scheduling-latency
CDF (burst solid, steady state dashed, mixed dotted), both schedulers on the same axes.

    .venv/bin/python bench/plot.py bench/results/e2e-500x8.json        # -> bench/results/e2e-500x8.png

Needs the ``bench`` extra: ``.venv/bin/pip install -c hack/constraints.txt -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COLORS = {"kube-scheduler": "tab:blue", "draxr": "tab:orange"}
STYLES = {"burst": "-", "steady": "--", "mixed": ":"}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("result", type=Path)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    result = json.loads(args.result.read_text())
    cfg = result["config"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    for ph in result["phases"]:
        sched, phase = ph["scheduler"], ph["phase"]
        color, style = COLORS.get(sched, "gray"), STYLES.get(phase, "-.")
        if phase in ("burst", "steady"):
            cumulative = list(itertools.accumulate(ph["bound_per_second"]))
            left.plot(
                range(1, len(cumulative) + 1),
                cumulative,
                color=color,
                linestyle=style,
                label=f"{sched}, {phase}: {ph['pods_per_s']} pods/s",
            )
        lat = ph["latencies_s"]
        if lat:
            n = len(lat)
            right.plot(
                lat,
                [(i + 1) / n for i in range(n)],
                color=color,
                linestyle=style,
                label=f"{sched}, {phase}: p50 {ph['latency_s']['p50']:.2f}s, p99 {ph['latency_s']['p99']:.2f}s",
            )
    left.set(xlabel="seconds since the first pod was created", ylabel="pods bound", title="Pods bound over time")
    right.set(
        xlabel="scheduling latency, s (create request → pod bound)",
        ylabel="fraction of pods",
        title="Scheduling latency CDF",
        xscale="log",
    )
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"draxr vs kube-scheduler 1.37: {cfg['nodes']} nodes × {cfg['devices']} devices, {cfg['classes']} classes, "
        f"client QPS {cfg['qps']:g} / burst {cfg['burst']} for both ({result['machine']['cpus']} CPUs, shared)"
    )
    fig.tight_layout()
    out = args.out or args.result.with_suffix(".png")
    fig.savefig(out, dpi=90)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
