"""The differential tests' known deviations, pinned by case and signature (known_deviations.json).

A known deviation is a mismatch whose cause is understood and not fixed in draxr yet. At the
reference seed and size (``REFERENCE``: the generators' default seed and CI's case counts) every
mismatching case is listed with its signature, the lines ``diff`` reports for it, and the run must
show exactly those: a new mismatching case fails, and so does a listed case that now matches or
mismatches differently (look again, then update the file: ``pin`` prints the entry).

At another seed (``DRAXR_TEST_SEED``, tests/seeds.py) no case is listed: a mismatch is tolerated only if its
signature is the known deviation's (``classify``), and it is reported by name, with the seed to
replay it; any other mismatch fails as before. Each differential also runs the listed cases of the
reference seed on every run (``check_pinned``), so the pins are checked whatever the seed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("known_deviations.json")
JSON = dict[str, Any]


def load() -> JSON:
    data: JSON = json.loads(FILE.read_text())
    return data


def reference_seed() -> int:
    return int(load()["reference"]["seed"])


def pinned(kind: str) -> dict[str, dict[str, list[str]]]:
    """deviation name -> case name -> its signature (the differences, in order)."""
    out: dict[str, dict[str, list[str]]] = load()[kind]
    return out


def signature(m: Mapping[str, Any]) -> list[str]:
    return [str(d) for d in m["differences"]]


def check(
    kind: str,
    mismatches: Sequence[Mapping[str, Any]],
    *,
    at_reference: bool,
    classify: Callable[[Mapping[str, Any]], str | None],
    only: str | None = None,
) -> tuple[list[Mapping[str, Any]], list[str], list[str]]:
    """Splits a run's mismatches: (unexpected mismatches, failures of the pins, report lines).

    At the reference: a case not listed is unexpected; a listed case with another signature, or
    missing (it matches now), is a failure of the pins. Elsewhere: a mismatch ``classify`` does not
    name as a known deviation is unexpected; the others are reported. ``only``: only that
    deviation's pins count (the mismatches are of one group)."""
    known = {d: cases for d, cases in pinned(kind).items() if only is None or d == only}
    listed = {case: (deviation, sig) for deviation, cases in known.items() for case, sig in cases.items()}
    unexpected: list[Mapping[str, Any]] = []
    failures: list[str] = []
    tolerated: dict[str, list[str]] = {}
    if at_reference:
        seen = set()
        for m in mismatches:
            entry = listed.get(m["name"])
            if entry is None:
                unexpected.append(m)
                continue
            seen.add(m["name"])
            deviation, sig = entry
            if signature(m) != sig:
                failures.append(_differently(m["name"], deviation, sig, signature(m)))
            tolerated.setdefault(deviation, []).append(m["name"])
        for case in sorted(set(listed) - seen):
            failures.append(f"{case} ({listed[case][0]}) matches upstream now: drop it from {FILE.name}")
    else:
        for m in mismatches:
            deviation = classify(m)
            if deviation is None or deviation not in known:
                unexpected.append(m)
            else:
                tolerated.setdefault(deviation, []).append(m["name"])
    where = "pinned at the reference seed" if at_reference else "classified by signature"
    report = [
        f"known deviation {d}: {len(names)} cases ({where}): {', '.join(names)}"
        for d, names in sorted(tolerated.items())
    ]
    return unexpected, failures, report


def check_pinned(
    kind: str,
    mismatches: Sequence[Mapping[str, Any]],
    ran: Sequence[str],
) -> list[str]:
    """The listed cases of the reference seed, run alone (``ran``: their names): failures of the pins."""
    known = pinned(kind)
    listed = {case: (deviation, sig) for deviation, cases in known.items() for case, sig in cases.items()}
    failures = [
        f"{case} is listed but was not generated at the reference seed" for case in sorted(set(listed) - set(ran))
    ]
    got = {m["name"]: signature(m) for m in mismatches}
    for case, (deviation, sig) in sorted(listed.items()):
        if case not in ran:
            continue
        if case not in got:
            failures.append(f"{case} ({deviation}) matches upstream now: drop it from {FILE.name}")
        elif got[case] != sig:
            failures.append(
                f"{case} ({deviation}) mismatches differently now:\n    pinned: {sig}\n    now:    {got[case]}"
            )
    return failures


def _differently(case: str, deviation: str, pinned: list[str], now: list[str]) -> str:
    return f"{case} ({deviation}) mismatches differently now:\n    pinned: {pinned}\n    now:    {now}"


def failed(failures: Sequence[str]) -> str:
    """The assertion message for failures of the pins."""
    return f"the known deviations' pins ({FILE.relative_to(FILE.parents[2])}):\n" + "\n".join(failures)


def pin(deviation: str, mismatches: Sequence[Mapping[str, Any]]) -> str:
    """The file's entry for these mismatches (to paste after a deliberate change)."""
    return json.dumps({deviation: {m["name"]: signature(m) for m in mismatches}}, indent=2)


def generate_listed(
    seed: int, names: Collection[str], generators: Sequence[tuple[Callable[[int, int], JSON], int]]
) -> list[JSON]:
    """The cases named ``names`` of a generated list, without generating the rest: the list is
    ``generator(seed, i) for i in range(count)`` for each ``(generator, count)`` in turn, and a
    case's name ends with its ``i`` (``family-00458``). In the list's order; a name no generator
    gives is an error."""
    out: list[tuple[int, int, JSON]] = []
    for name in names:
        index = int(name.rsplit("-", 1)[1])
        found = [
            (k, index, case)
            for k, (generate, count) in enumerate(generators)
            if index < count and (case := generate(seed, index))["name"] == name
        ]
        if len(found) != 1:
            raise AssertionError(f"pinned case {name}: {len(found)} generated cases of that name at seed {seed}")
        out += found
    return [case for _, _, case in sorted(out, key=lambda x: x[:2])]
