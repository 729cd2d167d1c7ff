"""Shrink a sequence with a missing pod to a minimal one that still shows the same cause (steps
and initial objects dropped while the cause stays), for reports. Candidates are run in batches
(one harness call per round).

    python -m draxr_dev.queue_diff.shrink [--seed 1] [--count 200] [--steps 40] [--binary PATH]

prints every distinct cause of the run with its shrunk reproducer."""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from draxr_dev.queue_diff import casegen, compare, runner
from draxr_dev.scheduling import harness as go_harness

JSON = dict[str, Any]


def category(cause: str) -> str:
    """The part of a cause that a shrunk sequence must keep: what released the pod upstream (for a
    pod released as its attempt ended, that and the plugins; not the list of in-flight events)."""
    return cause.split(" after events while in flight")[0]


def drop_steps(seq: Mapping[str, Any], drop: set[int]) -> JSON:
    """``seq`` without the steps ``drop`` (and the fail/bind/nominate steps of a dropped pop), the
    pop indices renumbered."""
    steps = seq["steps"]
    drop = set(drop)
    for i, step in enumerate(steps):
        if step["op"] in ("fail", "bind", "nominate") and int(step["pop"]) in drop:
            drop.add(i)
    renumber: dict[int, int] = {}
    kept: list[JSON] = []
    for i, step in enumerate(steps):
        if i in drop:
            continue
        renumber[i] = len(kept)
        step = copy.deepcopy(step)
        if "pop" in step:
            step["pop"] = renumber[int(step["pop"])]
        kept.append(step)
    return {**seq, "steps": kept}


def drop_objects(seq: Mapping[str, Any], drop: set[int]) -> JSON:
    return {**seq, "objects": [o for i, o in enumerate(seq["objects"]) if i not in drop]}


def _check(binary: Path, candidates: Sequence[JSON], want: str) -> int | None:
    """The index of the first candidate with a missing pod of category ``want``."""
    if not candidates:
        return None
    named = [{**c, "name": f"{c['name']}~{i}"} for i, c in enumerate(candidates)]
    go = runner.run_go(binary, named)
    py, _ = runner.run_python(named, go)
    rep = compare.compare(named, go, py)
    compare.settle_in_flight(rep, named, lambda seqs: runner.run_go(binary, seqs))
    hits = {m["name"] for m in rep.missing if category(m["cause"]) == want}
    for i, c in enumerate(named):
        if c["name"] in hits:
            return i
    return None


def shrink(binary: Path, seq: Mapping[str, Any], cause: str) -> JSON:
    want = category(cause)
    current: JSON = copy.deepcopy(dict(seq))

    def run_steps(trials: Sequence[set[int]]) -> int | None:
        return _check(binary, [drop_steps(current, t) for t in trials], want)

    def run_objects(trials: Sequence[set[int]]) -> int | None:
        return _check(binary, [drop_objects(current, t) for t in trials], want)

    for _ in range(3):
        before = (len(current["steps"]), len(current["objects"]))
        current = drop_steps(current, _ddmin_batch(len(current["steps"]), run_steps))
        current = drop_objects(current, _ddmin_batch(len(current["objects"]), run_objects))
        if (len(current["steps"]), len(current["objects"])) == before:
            break
    return current


def _ddmin_batch(items: int, run: Callable[[Sequence[set[int]]], int | None]) -> set[int]:
    """Delta debugging over complements: the largest set of indices found whose removal keeps
    the failure; each round's candidates go to ``run`` as one batch."""
    dropped: set[int] = set()
    n = 2
    while True:
        alive = [i for i in range(items) if i not in dropped]
        if not alive:
            return dropped
        n = min(n, len(alive))
        chunks = [alive[k * len(alive) // n : (k + 1) * len(alive) // n] for k in range(n)]
        trials = [dropped | set(c) for c in chunks if c]
        hit = run(trials)
        if hit is not None:
            dropped = trials[hit]
            n = max(n - 1, 2)
            continue
        if n >= len(alive):
            return dropped
        n = min(len(alive), 2 * n)


def describe_sequence(seq: Mapping[str, Any], go: Mapping[str, Any] | None = None) -> str:
    lines = ["objects: " + ", ".join(f"{o['kind']} {o['object']['metadata']['name']}" for o in seq["objects"])]
    changed = compare.changes(seq)
    for k, step in enumerate(seq["steps"]):
        extra = f" ({changed[k]})" if changed[k] else ""
        if go is not None and step["op"] == "pop":
            extra = f" -> {go['steps'][k].get('popped') or 'nothing'}"
        up = go["steps"][k] if go is not None and k < len(go.get("steps") or ()) else None
        lines.append(f"  {k:2d} {compare.describe(step, up)}{extra}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--binary", type=Path, default=None)
    args = ap.parse_args(argv)
    binary = args.binary or go_harness.build()
    seqs = casegen.generate(args.seed, args.count, args.steps)
    go = runner.run_go(binary, seqs)
    py, _ = runner.run_python(seqs, go)
    rep = compare.compare(seqs, go, py)
    compare.settle_in_flight(rep, seqs, lambda s: runner.run_go(binary, s))
    print(rep.summary(), flush=True)
    by_name = {s["name"]: s for s in seqs}
    done: set[str] = set()
    for m in rep.missing:
        key = category(m["cause"])
        if key in done:
            continue
        done.add(key)
        small = shrink(binary, by_name[m["name"]], m["cause"])
        small_go = runner.run_go(binary, [small])[0]
        small_py, _ = runner.run_python([small], [small_go])
        small_rep = compare.compare([small], [small_go], small_py)
        compare.settle_in_flight(small_rep, [small], lambda s: runner.run_go(binary, s))
        print(f"\n=== {key}  (from {m['name']} step {m['step']})")
        print(describe_sequence(small, small_go))
        for mm in small_rep.missing:
            print(f"  missing at step {mm['step']}: {mm['pod']} ({mm['cause']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
