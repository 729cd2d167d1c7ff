"""Run the queue differential's sequences on both sides.

``run_go(binary, sequences)``: kube-scheduler 1.37.2's own PriorityQueue, through the scheduler
harness's ``-queue`` mode (tests/scheduler_harness/queue.go), one state per step.

``run_python(sequences, go)``: draxr's real code. An ``Operator`` (draxr.app) built on a
kubernetes_asyncio ApiClient that is never called (nothing here touches a network), its watch
targets (``draxr.handlers.targets``) fed each step's objects exactly as its informers would (the
pod, claim and cluster handlers), and its ``Scheduler``'s ``SchedulingQueue`` on a fake clock.
A scheduling attempt is simulated as ``Scheduler.run``/``Scheduler.cycle`` do it: ``pop`` takes
the pod upstream popped (``queue.next_ready`` with the state's generation and inventory stamp,
capturing the generation the cycle starts at), ``fail`` is ``queue.failed(uid, generation at the
pop, unschedulable=True, ...)`` (``Scheduler._unschedulable``; "inventory": unresolvable with the
inventory stamp of the pop, as placement's broken-class and allocator-fatal outcomes are reported
in the same cycle; an error: ``unschedulable=False``), ``bind`` is ``state.assume_pod`` then
``queue.done`` (the binder finished) and then the bound pod's watch event, ``nominate`` is the
pod's update with ``status.nominatedNodeName``. After every step the pods draxr would pop now are
listed (a deep copy of the queue drained with ``next_ready``), and, for the pods upstream has
eligible and draxr has not, whether draxr releases them once their backoff is over (``late``: the
copy's clock moved past the longest backoff, the unschedulable flush disabled).

Popping the pod upstream popped: draxr's order differs (it sorts by creation time, upstream by the
time the pod entered the queue), so ``next_ready`` is called until that pod comes; the pods taken
before it are given back (``done`` then ``add``: their backoff count restarts, which only makes
draxr retry them sooner). A pod upstream popped that draxr cannot pop ends the sequence's
comparison there (``diverged``)."""

from __future__ import annotations

import asyncio
import copy
import math
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draxr.core.requeue import interest
from draxr_dev.queue_diff.casegen import SCHEDULER
from draxr_dev.scheduling import harness as go_harness

JSON = dict[str, Any]

# The kinds of the steps and the watch target (draxr.handlers.targets) each goes to.
TARGETS = {
    "Node": "nodes",
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "PersistentVolume": "persistentvolumes",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "StorageClass": "storageclasses",
}


def run_go(binary: Path, sequences: Sequence[Mapping[str, Any]], args: Sequence[str] = ()) -> list[JSON]:
    return go_harness.run(binary, sequences, args=["-queue", *args], chunk=200, timeout=1800)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class PyStep:
    eligible: list[str]  # the pods draxr would pop now (pod names)
    in_flight: list[str]
    late: list[str] = field(default_factory=list)  # not eligible now, eligible once backoffs end
    note: str = ""


@dataclass
class PySequence:
    name: str
    steps: list[PyStep] = field(default_factory=list)
    diverged: int | None = None  # the step at which draxr could not pop upstream's pod
    error: str = ""


def _uid(name: str) -> str:
    return f"uid-{name}"


class DraxrSide:
    """One sequence's draxr: an Operator on a fake clock, and the objects its informers hold."""

    def __init__(self, operator_factory: Callable[[], Any]) -> None:
        self.op = operator_factory()
        self.sched = self.op.scheduler
        self.queue = self.sched.queue
        self.clock = FakeClock()
        self.queue.clock = self.clock
        self.objects: dict[tuple[str, str], JSON] = {}
        self.targets = {t.name: t for t in _targets(self.op)}
        # pop step -> (uid, the generation and inventory stamp at the pop: what Scheduler.cycle reads
        # before placement; its outcome is reported with them, synchronously for the outcomes that
        # carry a stamp)
        self.popped: dict[int, tuple[str, int, object] | None] = {}
        self.ended: set[int] = set()

    # ---- the watch events --------------------------------------------------------------------
    def upsert(self, kind: str, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        old = self.objects.get((kind, name))
        obj = copy.deepcopy(obj)
        if kind == "Pod" and old is not None:  # the rule of the generator (see casegen)
            if not obj["spec"].get("nodeName") and old["spec"].get("nodeName"):
                obj["spec"]["nodeName"] = old["spec"]["nodeName"]
            if not (obj.get("status") or {}).get("nominatedNodeName") and (old.get("status") or {}).get(
                "nominatedNodeName"
            ):
                obj.setdefault("status", {})["nominatedNodeName"] = old["status"]["nominatedNodeName"]
        self.objects[(kind, name)] = obj
        if kind == "Pod":
            self.op.pod_upserted(copy.deepcopy(obj))
        elif kind == "ResourceClaim":
            self.op.claim_upserted(copy.deepcopy(obj))
        else:
            self.targets[TARGETS[kind]].upsert(copy.deepcopy(obj))

    def delete(self, kind: str, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        current = self.objects.pop((kind, name), None)
        if current is None:
            return
        if kind == "Pod":
            self.op.pod_deleted(copy.deepcopy(current))
        elif kind == "ResourceClaim":
            self.op.claim_deleted(copy.deepcopy(current))
        else:
            self.targets[TARGETS[kind]].delete(copy.deepcopy(current))

    # ---- the scheduling loop -----------------------------------------------------------------
    def _stamp(self) -> object:
        return self.sched._inventory_stamp()

    def pop(self, index: int, name: str | None) -> bool:
        """Take ``name`` (upstream's pop) as Scheduler.run does; False if draxr cannot pop it."""
        if not name:
            self.popped[index] = None
            return True
        want = _uid(name)
        taken: list[str] = []
        got: str | None = None
        while True:
            got, _ = self.queue.next_ready(self.sched.state.generation, self._stamp())
            if got is None or got == want:
                break
            taken.append(got)
        for other in taken:  # given back: eligible again
            pod = self.sched.state.pods.get(other)
            self.queue.done(other)
            if pod is not None:
                self.queue.add(other, pod.priority, pod.created)
        if got != want:
            return False
        # Scheduler.run: a pod that is gone, not ours or already assumed is forgotten at once
        pod = self.sched.state.pods.get(want)
        if pod is None or not self.sched.wants(pod) or want in self.sched.state.assumed_nodes:
            self.queue.done(want)
            self.popped[index] = None
            return True
        self.popped[index] = (want, self.sched.state.generation, self._stamp())
        return True

    def end(self, step: Mapping[str, Any], plugins: Sequence[str] = ()) -> None:
        """``plugins``: a fail's rejecting plugins as upstream reported them (its pick for
        ``byPod``); draxr's cycle names the same ones (Unschedulable.rejecting_plugins)."""
        index = int(step["pop"])
        taken = self.popped.get(index)
        if taken is None or index in self.ended:
            return
        uid, generation, stamp = taken
        op = step["op"]
        if op == "fail":
            self.ended.add(index)
            flavor = step.get("draxr", "unschedulable")
            if flavor == "error":
                self.queue.failed(uid, generation, unschedulable=False)
            elif flavor == "inventory":
                self.queue.failed(uid, generation, unschedulable=True, unresolvable=True, stamp=stamp)
            else:
                self.queue.failed(uid, generation, unschedulable=True, interest=interest(plugins))
            return
        name = uid.removeprefix("uid-")
        current = self.objects.get(("Pod", name))
        if op == "bind":
            self.ended.add(index)
            if current is None:  # deleted while in flight: the binding fails, pod gone
                self.queue.done(uid)
                return
            self.sched.state.assume_pod(uid, step["node"])
            self.queue.done(uid)
            bound = copy.deepcopy(current)
            bound["spec"]["nodeName"] = step["node"]
            bound["metadata"]["resourceVersion"] = step["rv"]
            self.upsert("Pod", bound)
        elif op == "nominate" and current is not None:
            nominated = copy.deepcopy(current)
            nominated.setdefault("status", {})["nominatedNodeName"] = step["nominated"]
            nominated["metadata"]["resourceVersion"] = step["rv"]
            self.upsert("Pod", nominated)

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds

    # ---- what draxr would pop ------------------------------------------------------------------
    def _copy(self) -> Any:
        memo: dict[int, Any] = {}
        for value in vars(self.queue).values():
            if isinstance(value, asyncio.Event):
                memo[id(value)] = asyncio.Event()
        dup = copy.deepcopy(self.queue, memo)
        dup.clock = FakeClock()
        dup.clock.now = self.clock.now
        return dup

    def _drain(self, queue: Any) -> list[str]:
        out: list[str] = []
        while True:
            uid, _ = queue.next_ready(self.sched.state.generation, self._stamp())
            if uid is None:
                return out
            out.append(uid.removeprefix("uid-"))

    def eligible(self) -> list[str]:
        return sorted(self._drain(self._copy()))

    def late(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` draxr pops once every backoff is over (no flush, no event)."""
        if not names:
            return []
        dup = self._copy()
        if not hasattr(dup, "_flush"):
            raise RuntimeError("SchedulingQueue has no _flush heap any more: update DraxrSide.late")
        dup._flush = []
        dup.flush_after = math.inf
        dup.clock.now += self.queue.backoff_max + 1
        released = set(self._drain(dup))
        return sorted(n for n in names if n in released)

    def in_flight(self) -> list[str]:
        return sorted(uid.removeprefix("uid-") for uid in self.queue.in_flight())


def _targets(op: Any) -> list[Any]:
    from draxr.handlers import targets

    return targets(op)


def default_operator_factory() -> Callable[[], Any]:
    """Operators on an ApiClient that is never called; the scheduler name is the harness's profile."""
    from kubernetes_asyncio import client

    from draxr.app import Operator
    from draxr.kube import Kube
    from draxr.settings import Settings

    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # never used: nothing sends a request
    settings = Settings(scheduler_name=SCHEDULER)
    shared = ssl.create_default_context()

    def make() -> Any:
        with _one_ssl_context(shared):
            return Operator(settings, Kube(client.ApiClient(cfg)), cfg)

    return make


@contextmanager
def _one_ssl_context(shared: ssl.SSLContext) -> Iterator[None]:
    """Every ApiClient built in this thread meanwhile gets ``shared`` as its TLS context: each
    ApiClient (an Operator builds three) otherwise loads the system's CA certificates anew, which
    was 70% of this side's time, for clients that never connect. Other threads (an embedded
    operator of the integration tests) and clients with a CA file of their own are not affected."""
    from kubernetes_asyncio.client import rest

    real, owner = rest.ssl, threading.get_ident()  # type: ignore[attr-defined]

    class OneContext:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        @staticmethod
        def create_default_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
            if threading.get_ident() != owner or args or any(v is not None for v in kwargs.values()):
                own: ssl.SSLContext = real.create_default_context(*args, **kwargs)
                return own
            return shared

    rest.ssl = OneContext()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        rest.ssl = real  # type: ignore[attr-defined]


def _run_one(side: DraxrSide, seq: Mapping[str, Any], go: Mapping[str, Any]) -> PySequence:
    out = PySequence(seq["name"])
    for o in seq["objects"]:
        side.upsert(o["kind"], o["object"])
    upstream = go.get("steps") or []
    for i, step in enumerate(seq["steps"]):
        op = step["op"]
        if op == "upsert":
            side.upsert(step["kind"], step["object"])
        elif op == "delete":
            side.delete(step["kind"], step["object"])
        elif op == "pop":
            popped = upstream[i].get("popped") if i < len(upstream) else None
            if not side.pop(i, popped):
                out.diverged = i
                out.steps.append(PyStep(side.eligible(), side.in_flight(), note=f"cannot pop {popped}"))
                return out
        elif op in ("fail", "bind", "nominate"):
            reported = upstream[i].get("plugins") if i < len(upstream) else None
            side.end(step, reported or step.get("plugins") or ())
        elif op == "advance":
            side.advance(float(step["seconds"]))
        else:
            raise ValueError(f"unknown op {op!r}")
        eligible = side.eligible()
        st = PyStep(eligible, side.in_flight())
        if i < len(upstream):
            want = set(upstream[i]["active"]) | set(upstream[i]["backoff"])
            st.late = side.late(sorted(want - set(eligible)))
        out.steps.append(st)
    return out


async def _run_all(
    sequences: Sequence[Mapping[str, Any]], go: Sequence[Mapping[str, Any]], factory: Callable[[], Any]
) -> list[PySequence]:
    results: list[PySequence] = []
    for seq, g in zip(sequences, go, strict=True):
        if g.get("error"):
            results.append(PySequence(seq["name"], error="upstream: " + g["error"][:2000]))
            continue
        side = DraxrSide(factory)
        try:
            results.append(_run_one(side, seq, g))
        finally:
            await _close(side.op)
    return results


async def _close(op: Any) -> None:
    """The Operator's API clients (never used: closing them only drops their sessions)."""
    for kube in {id(k): k for k in (op.kube, op.watch_kube, op.lease_kube)}.values():
        await kube.close()


def run_python(
    sequences: Sequence[Mapping[str, Any]],
    go: Sequence[Mapping[str, Any]],
    operator_factory: Callable[[], Callable[[], Any]] = default_operator_factory,
) -> tuple[list[PySequence], float]:
    """draxr's side of every sequence (given upstream's pops), and the seconds it took. Runs its own
    event loop (the Operator wants one); call it from a thread when a loop is already running."""

    async def main() -> list[PySequence]:
        return await _run_all(sequences, go, operator_factory())

    start = time.monotonic()
    results = asyncio.run(main())
    return results, time.monotonic() - start


__all__ = ["DraxrSide", "PySequence", "PyStep", "default_operator_factory", "run_go", "run_python"]
