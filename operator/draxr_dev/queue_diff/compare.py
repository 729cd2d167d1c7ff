"""Compare draxr's queue with kube-scheduler's after every step of every sequence.

Eligible upstream: the activeQ plus the backoffQ's pods Pop may take (SchedulerPopFromBackoffQ:
those a plugin rejected). Eligible in draxr: what ``next_ready`` would return now, one after
another. Per step:

* ``missing``: eligible upstream, not eligible in draxr, and not released by draxr once its backoff
  is over either: a lost wake-up. A failure.
* ``late``: eligible upstream, not yet in draxr, but eligible there once the backoff is over (no
  event needed). Backoff timing, not a lost event: draxr counts every attempt for the backoff
  (``_Entry.attempts``), upstream counts unschedulable attempts and consecutive errors apart
  (``UnschedulableCount``, ``ConsecutiveErrorsCount``), so after an error following rejections
  draxr waits longer; and upstream's backoff ends on its 1 s ordering window. Reported, not a
  failure.
* ``extra``: eligible in draxr, neither eligible nor in flight upstream: a retry upstream would not
  make (CPU, not correctness). Counted and reported.

A missing pod's cause is the step that made upstream release it (the first step since it was last
not eligible upstream); when that step ends the pod's own attempt (``fail``), the events that
arrived while it was in flight are listed: upstream replays them (determineSchedulingHintForInFlightPod).

Two kinds of missing pods are upstream's behaviour that draxr leaves out on purpose; they are
``tolerated`` (counted and reported, not failures):

* ``flush-wildcard`` and ``other-pod-event``: the pod was released as its attempt ended only
  because of events about *other* pods that upstream replays for every pod in flight (the in-flight
  events are one list): upstream flushed other pods from its unschedulable pods
  (flushUnschedulableEntitiesLeftover moves them with the UnschedulableTimeout wildcard event, and
  moveEntitiesToActiveOrBackoffQueue records it for the pods in flight: a wildcard requeues any pod),
  or another pod in flight was updated (its own TargetPod events, e.g. a scale-down, which
  NodeResourcesFit's isSchedulableAfterTargetPodScaleDown answers with Queue for any pod). Decided
  by upstream itself (``settle_in_flight``): the sequence is run up to that attempt's end once
  more without those events; the pod is tolerated only if upstream then keeps it parked.
* ``unresolvable``: draxr parked the pod as unresolvable until its inventory changes (placement's
  broken-class and allocator-fatal outcomes: ``failed(unresolvable=True, stamp=...)``), and upstream
  released it on an event that changes none of draxr's inventory stamp (classes, slices, storage:
  a node, another pod, a claim), which upstream's DynamicResources hints requeue on (a Node add, a
  claim deallocated) but which cannot heal a broken class."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from draxr_dev.queue_diff.runner import PySequence

JSON = dict[str, Any]


@dataclass
class Report:
    sequences: int = 0
    steps: int = 0
    compared_steps: int = 0
    missing: list[JSON] = field(default_factory=list)
    tolerated: list[JSON] = field(default_factory=list)
    upstream: dict[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)  # steps by sequence
    late: int = 0
    extra: int = 0
    extra_by_step: Counter[str] = field(default_factory=Counter)
    diverged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def causes(self) -> Counter[str]:
        return Counter(m["cause"] for m in self.missing)

    def summary(self) -> str:
        lines = [
            f"{self.sequences} sequences, {self.steps} steps ({self.compared_steps} compared): "
            f"{len(self.missing)} missing, {self.late} late (backoff timing), {self.extra} extra, "
            f"{len(self.tolerated)} tolerated ("
            + ", ".join(f"{k} {n}" for k, n in sorted(Counter(t["tolerated"] for t in self.tolerated).items()))
            + ")"
        ]
        if self.extra_by_step:
            lines.append(
                "extra by the step's kind: " + ", ".join(f"{k} {n}" for k, n in self.extra_by_step.most_common())
            )
        for cause, n in self.causes().most_common():
            lines.append(f"missing x{n}: {cause}")
        if self.diverged:
            lines.append(f"diverged (draxr could not pop upstream's pod): {', '.join(self.diverged[:10])}")
        if self.errors:
            lines.append(f"errors: {len(self.errors)}; first: {self.errors[0][:500]}")
        return "\n".join(lines)


def describe(step: Mapping[str, Any], upstream: Mapping[str, Any] | None = None) -> str:
    """A step in a line; ``upstream``: its upstream state (a fail's plugins chosen by pod)."""
    op = str(step["op"])
    if op == "fail" and step.get("byPod"):
        step = {**step, "plugins": (upstream or {}).get("plugins") or ["(by pod)"]}
    if op in ("upsert", "delete"):
        obj = step["object"]
        return f"{op} {step['kind']} {obj['metadata']['name']}"
    if op == "fail":
        plugins = step.get("plugins") or []
        return f"fail pop#{step['pop']} " + ("(error)" if not plugins else f"{'+'.join(plugins)} [{step.get('draxr')}]")
    if op in ("bind", "nominate"):
        return f"{op} pop#{step['pop']}"
    if op == "advance":
        return f"advance {step['seconds']}s"
    return op


def _kind(step: Mapping[str, Any]) -> str:
    return str(step["op"]) + (f" {step['kind']}" if "kind" in step else "")


_PATHS = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec",),
    ("status", "allocation"),
    ("status", "reservedFor"),
    ("status", "allocatable"),
    ("status", "conditions"),
    ("status", "nominatedNodeName"),
    ("status", "phase"),
    ("spec", "taints"),
    ("spec", "unschedulable"),
    ("spec", "nodeName"),
    ("spec", "tolerations"),
    ("spec", "containers"),
    ("spec", "devices"),
    ("spec", "selectors"),
)


def _get(obj: Mapping[str, Any] | None, path: tuple[str, ...]) -> Any:
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def changes(sequence: Mapping[str, Any]) -> list[str]:
    """Per step, what an upsert changed in its object ("created", or the changed fields)."""
    objects: dict[tuple[str, str], Mapping[str, Any]] = {
        (o["kind"], o["object"]["metadata"]["name"]): o["object"] for o in sequence["objects"]
    }
    out: list[str] = []
    for step in sequence["steps"]:
        if step["op"] not in ("upsert", "delete"):
            out.append("")
            continue
        key = (step["kind"], step["object"]["metadata"]["name"])
        old = objects.get(key)
        if step["op"] == "delete":
            objects.pop(key, None)
            out.append("deleted" if old is not None else "absent")
            continue
        new = step["object"]
        objects[key] = new
        if old is None:
            out.append("created")
            continue
        changed = [".".join(p) for p in _PATHS if len(p) > 1 and _get(old, p) != _get(new, p)]
        if not changed and _get(old, ("spec",)) != _get(new, ("spec",)):
            changed = ["spec"]
        out.append(",".join(changed) or "nothing")
    return out


def _detail(seq: Mapping[str, Any], go: Sequence[Mapping[str, Any]], k: int, changed: Sequence[str]) -> str:
    """What step ``k`` changed; for an advance, whether upstream flushed unschedulable pods then
    (flushUnschedulableEntitiesLeftover's UnschedulableTimeout: a wildcard event, which upstream
    also records for every pod in flight)."""
    if seq["steps"][k]["op"] == "advance":
        return " (flushed unschedulable pods)" if _flushes(go, k) else ""
    return f" ({changed[k]})" if changed[k] else ""


def _last_fail(seq: Mapping[str, Any], go: Sequence[Mapping[str, Any]], pod: str, before: int) -> str:
    """How the pod's last attempt before step ``before`` ended ("plugins [draxr flavor]")."""
    for k in range(before - 1, -1, -1):
        step = seq["steps"][k]
        if step["op"] == "fail" and go[int(step["pop"])].get("popped") == pod:
            return "+".join(go[k].get("plugins") or step.get("plugins") or ()) + f" [{step.get('draxr')}]"
    return "never attempted"


def _cause(
    seq: Mapping[str, Any], go: Sequence[Mapping[str, Any]], pod: str, at: int, changed: Sequence[str]
) -> tuple[str, int, list[int]]:
    """The step that made upstream release ``pod`` (eligible at ``at``), a signature of the cause,
    and the steps that matter for a reproducer."""

    def eligible(i: int) -> bool:
        return pod in go[i]["active"] or pod in go[i]["backoff"]

    j = at
    while j > 0 and eligible(j - 1):
        j -= 1
    step = seq["steps"][j]
    in_flight_before = j > 0 and pod in go[j - 1]["inFlight"]
    if step["op"] == "fail" and in_flight_before:
        pop = int(step["pop"])
        during = [k for k in range(pop + 1, j) if seq["steps"][k]["op"] in ("upsert", "delete", "nominate", "advance")]
        kinds = sorted({_kind(seq["steps"][k]) + _detail(seq, go, k, changed) for k in during})
        plugins = "+".join(go[j].get("plugins") or step.get("plugins") or ()) or "error"
        return (
            f"released as its attempt ended ({plugins} [{step.get('draxr')}]) after events while in flight: "
            f"{'; '.join(kinds) or 'none'}",
            j,
            [pop, *during, j],
        )
    if step["op"] == "pop":
        return "eligible after another pod's pop (ordering)", j, [j]
    where = "while parked" if j > 0 and pod in go[j - 1]["unschedulable"] else "in another queue"
    detail = f" ({changed[j]})" if changed[j] else ""
    return f"released by {_kind(step)}{detail} {where} after {_last_fail(seq, go, pod, j)}", j, [j]


# Steps that change draxr's inventory stamp (Scheduler._inventory_stamp: slices, classes, mappings,
# storage) or release a parked pod by themselves (its own update, the clock).
_STAMP_KINDS = ("ResourceSlice", "DeviceClass", "PersistentVolume", "PersistentVolumeClaim", "StorageClass")


def _flushes(go: Sequence[Mapping[str, Any]], k: int) -> bool:
    """Upstream flushed unschedulable pods at step ``k`` (gated ones stay there, but the
    UnschedulableTimeout event is recorded for the pods in flight all the same)."""
    return bool(go[k].get("flushed"))


def quirk_steps(seq: Mapping[str, Any], go: Sequence[Mapping[str, Any]], pod: str, during: Sequence[int]) -> list[int]:
    """The steps among ``during`` (events while ``pod`` was in flight) that upstream replays for
    every pod in flight though they concern other pods: a flush of unschedulable pods (the
    UnschedulableTimeout wildcard) and an update of *another* pod in flight (its own TargetPod
    events, e.g. UpdatePodScaleDown, which NodeResourcesFit's isSchedulableAfterTargetPodScaleDown
    answers with Queue for whichever pod replays it; a nomination is such an update)."""
    out = []
    # A flush while in flight: every advance of that time goes (without the one that flushed, the
    # next would flush the same pods).
    flushed = any(seq["steps"][k]["op"] == "advance" and _flushes(go, k) for k in during)
    for k in during:
        step = seq["steps"][k]
        flush = step["op"] == "advance" and flushed
        other = ""
        if step["op"] == "nominate":
            other = go[int(step["pop"])].get("popped") or ""
        elif step["op"] == "upsert" and step["kind"] == "Pod" and k > 0:
            name = step["object"]["metadata"]["name"]
            other = name if name in go[k - 1]["inFlight"] else ""
        if flush or (other and other != pod):
            out.append(k)
    return out


def _tolerated(
    seq: Mapping[str, Any], go: Sequence[Mapping[str, Any]], pod: str, j: int, relevant: Sequence[int]
) -> str:
    step = seq["steps"][j]
    if step["op"] == "fail" and len(relevant) >= 2:  # released as its attempt ended
        return ""  # (settle_in_flight decides, with upstream)
    if _last_fail(seq, go, pod, j).endswith("[inventory]"):
        if step["op"] in ("upsert", "delete") and step["kind"] in _STAMP_KINDS:
            return ""
        if step["op"] in ("upsert", "delete") and step["kind"] == "Pod" and step["object"]["metadata"]["name"] == pod:
            return ""
        if step["op"] == "advance":
            return ""
        return "unresolvable"
    return ""


SETTLE_TRIES = 8


def _pops(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """The pods these steps of a run popped, in order."""
    return [st["popped"] for st in steps if st.get("popped")]


def settle_in_flight(
    report: Report,
    sequences: Sequence[Mapping[str, Any]],
    run_go: Callable[[Sequence[JSON]], list[JSON]],
) -> None:
    """For the missing pods released as their attempt ended after events while in flight, some of
    which upstream replays for every pod in flight (``quirk_steps``): run the sequence up to that
    attempt's end once more without those; if upstream then keeps the pod, they alone released it
    (tolerated: "flush-wildcard" or "other-pod-event"); if it still releases it, the other events
    did, and draxr lost them."""
    from draxr_dev.queue_diff.shrink import drop_steps  # (shrink imports this module)

    by_name = {s["name"]: s for s in sequences}
    todo: list[tuple[JSON, JSON, str]] = []
    for m in report.missing:
        seq = by_name[m["name"]]
        relevant = m["relevant_steps"]
        j = m["cause_step"]
        if seq["steps"][j]["op"] != "fail" or len(relevant) < 3:
            continue
        quirks = quirk_steps(seq, report.upstream[m["name"]], m["pod"], relevant[1:-1])
        if not quirks:
            continue
        reason = "flush-wildcard" if all(seq["steps"][k]["op"] == "advance" for k in quirks) else "other-pod-event"
        prefix = {**seq, "steps": seq["steps"][: j + 1], "name": f"{seq['name']}~settle{len(todo)}"}
        todo.append((m, drop_steps(prefix, set(quirks)), reason))
    if not todo:
        return
    # Upstream pops pods of equal priority and enqueue time in map order, so a re-run may pop other
    # pods than the run did and judge another attempt: only a re-run that popped the same pods up to
    # the pod's own pop decides (tried up to SETTLE_TRIES times; later pops follow the clock, which
    # the dropped advances change).
    results: list[JSON | None] = [None] * len(todo)
    for _ in range(SETTLE_TRIES):
        pending = [i for i, r in enumerate(results) if r is None]
        if not pending:
            break
        for i, res in zip(pending, run_go([todo[i][1] for i in pending]), strict=True):
            m = todo[i][0]
            upto = m["relevant_steps"][0] + 1  # (the pod's pop: no step before it is dropped)
            if res.get("error") or _pops(res["steps"][:upto]) == _pops(report.upstream[m["name"]][:upto]):
                results[i] = res
    settled = []
    for (m, variant, reason), decided in zip(todo, results, strict=True):
        if decided is None or decided.get("error") or not decided.get("steps") or variant["steps"][-1]["op"] != "fail":
            continue
        last = decided["steps"][-1]
        if m["pod"] not in last["active"] and m["pod"] not in last["backoff"]:
            m["tolerated"] = reason
            settled.append(m)
    for m in settled:
        report.missing.remove(m)
        report.tolerated.append(m)


def compare(
    sequences: Sequence[Mapping[str, Any]], go: Sequence[Mapping[str, Any]], py: Sequence[PySequence]
) -> Report:
    rep = Report()
    for seq, g, p in zip(sequences, go, py, strict=True):
        rep.sequences += 1
        rep.steps += len(seq["steps"])
        if g.get("error") or p.error:
            rep.errors.append(f"{seq['name']}: {g.get('error') or p.error}")
            continue
        if p.diverged is not None:
            rep.diverged.append(f"{seq['name']}@{p.diverged}")
        ups = g["steps"]
        rep.upstream[seq["name"]] = ups
        changed = changes(seq)
        for i, st in enumerate(p.steps):
            if i >= len(ups):
                break
            up = ups[i]
            rep.compared_steps += 1
            want = set(up["active"]) | set(up["backoff"])
            have = set(st.eligible)
            late = set(st.late)
            rep.late += len((want - have) & late)
            for pod in sorted(want - have - late):
                cause, j, relevant = _cause(seq, ups, pod, i, changed)
                entry = {
                    "name": seq["name"],
                    "step": i,
                    "pod": pod,
                    "cause": cause,
                    "cause_step": j,
                    "relevant_steps": relevant,
                    "upstream": up,
                    "draxr": {"eligible": st.eligible, "inFlight": st.in_flight},
                    "flush_steps": [
                        k for k in relevant[1:-1] if seq["steps"][k]["op"] == "advance" and _flushes(ups, k)
                    ],
                }
                reason = _tolerated(seq, ups, pod, j, relevant)
                if reason:
                    entry["tolerated"] = reason
                    rep.tolerated.append(entry)
                else:
                    rep.missing.append(entry)
            extra = have - want - set(up["inFlight"])
            if extra:
                rep.extra += len(extra)
                rep.extra_by_step[_kind(seq["steps"][i])] += len(extra)
    return rep


def first_per_cause(report: Report) -> list[JSON]:
    """The first missing pod of every distinct cause."""
    seen: set[str] = set()
    out: list[JSON] = []
    for m in report.missing:
        if m["cause"] not in seen:
            seen.add(m["cause"])
            out.append(m)
    return out


def format_missing(
    seq: Mapping[str, Any], m: Mapping[str, Any], upstream: Sequence[Mapping[str, Any]] | None = None
) -> str:
    """A missing pod with the steps of its sequence up to it (``upstream``: the sequence's upstream
    states, for the pods popped and the plugins chosen by pod)."""
    lines = [f"{m['name']} step {m['step']}: {m['pod']} eligible upstream, not in draxr ({m['cause']})"]
    for k, step in enumerate(seq["steps"][: m["step"] + 1]):
        mark = "*" if k in m["relevant_steps"] else " "
        up = upstream[k] if upstream is not None and k < len(upstream) else None
        popped = f" -> {up.get('popped') or 'nothing'}" if up is not None and step["op"] == "pop" else ""
        lines.append(f"  {mark}{k:3d} {describe(step, up)}{popped}")
    return "\n".join(lines)


__all__ = ["Report", "compare", "describe", "first_per_cause", "format_missing"]
