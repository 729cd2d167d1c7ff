"""One PNG from a bench/e2e.py result: a row per phase (workload), with pods bound over time on the
left and the scheduling-latency CDF on the right; the API ceiling (gray) and both schedulers on the
same axes.

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
from matplotlib.ticker import NullFormatter

COLORS = {"kube-scheduler": "tab:blue", "draxr": "tab:orange", "ceiling": "tab:gray"}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("result", type=Path)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    result = json.loads(args.result.read_text())
    cfg = result["config"]
    phases = list(dict.fromkeys(ph["phase"] for ph in result["phases"]))
    fig, axes = plt.subplots(len(phases), 2, figsize=(13, 4.2 * len(phases)), squeeze=False)
    for row, phase in zip(axes, phases, strict=True):
        left, right = row
        for ph in (ph for ph in result["phases"] if ph["phase"] == phase):
            sched = ph["scheduler"]
            label = f"ceiling@{ph['concurrency']}" if ph.get("concurrency") else sched
            # The ceiling's weaker concurrencies are drawn fainter: the best one is the reference.
            best = (result.get("ceiling") or {}).get(phase, {}).get("concurrency")
            alpha = 0.45 if sched == "ceiling" and ph.get("concurrency") != best else 1.0
            style = dict(color=COLORS.get(sched, "black"), alpha=alpha)
            cumulative = list(itertools.accumulate(ph["bound_per_second"]))
            left.plot(range(1, len(cumulative) + 1), cumulative, **style, label=f"{label}: {ph['pods_per_s']} pods/s")
            lat = ph["latencies_s"]
            if lat:
                n = len(lat)
                right.plot(
                    lat,
                    [(i + 1) / n for i in range(n)],
                    **style,
                    label=f"{label}: p50 {ph['latency_s']['p50']:.3g}s, p99 {ph['latency_s']['p99']:.3g}s",
                )
        left.set(xlabel="seconds since the first pod was created", ylabel="pods bound", title=f"{phase}: pods bound")
        right.set(
            xlabel="scheduling latency, s (create request → pod bound)",
            ylabel="fraction of pods",
            title=f"{phase}: latency CDF",
            xscale="log",
        )
        right.xaxis.set_minor_formatter(NullFormatter())  # a narrow log range labels its minor ticks over each other
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.suptitle(
        f"API ceiling, kube-scheduler 1.37 and draxr: {cfg['nodes']} nodes × {cfg['devices']} devices, "
        f"{cfg['classes']} classes, client QPS {cfg['qps']:g} / burst {cfg['burst']} "
        f"({result['machine']['cpus']} CPUs, shared with the control plane)"
    )
    fig.tight_layout()
    out = args.out or args.result.with_suffix(".png")
    fig.savefig(out, dpi=80)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
