"""The chaos run's checks that live in its fault injector (bench/chaos.py, Chaos), not in the
observer: the probe after each fault and the SIGSTOPped leader. Each fires when it is broken and
stays quiet when it is not, on a fake API and fake replicas and a fake clock (no real waiting)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import pytest

from ..bench_loader import load

chaos = load("chaos")


class Clock:
    """chaos' ``time`` module: monotonic and wall time move only when the code sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def strftime(self, fmt: str) -> str:
        return f"t+{self.now - 1000.0:.1f}"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        c.now += seconds
        await real_sleep(0)

    monkeypatch.setattr(chaos, "time", c)
    monkeypatch.setattr(chaos.asyncio, "sleep", sleep)
    return c


class Api:
    """The probe pod bound once ``bind_after`` seconds have passed since it was created (never:
    None); the Lease held by ``holder()``."""

    def __init__(self, clock: Clock, bind_after: float | None = None, holder: Any = lambda: "a-1") -> None:
        self.clock, self.bind_after, self.holder = clock, bind_after, holder
        self.created_at: float | None = None
        self.deleted: list[str] = []

    async def must(self, method: str, path: str, body: Any = None, ok: tuple[int, ...] = ()) -> Any:
        if method == "POST":
            self.created_at = self.clock.now
        elif method == "DELETE":
            self.deleted.append(path.rsplit("/", 1)[1])
        return {}

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if path.endswith("/leases/draxr"):
            return 200, {"spec": {"holderIdentity": self.holder()}}
        assert self.created_at is not None
        bound = self.bind_after is not None and self.clock.now - self.created_at >= self.bind_after
        return 200, {"spec": {"nodeName": "probe-0" if bound else None}}


class Proc:
    def __init__(self, exits: bool) -> None:
        self.exits = exits

    def poll(self) -> int | None:
        return 0 if self.exits else None


class Replica:
    def __init__(self, name: str, exits_after_sigcont: bool = True) -> None:
        self.name, self.starts = name, 1
        self.alive, self.stopped, self.kill_requested = True, False, False
        self.proc = Proc(exits_after_sigcont)
        self.signals: list[int] = []
        self.log_path = Path(f"{name}.log")

    def identity(self) -> str:
        return f"{self.name}-{self.starts}"

    def synced(self) -> bool:
        return True

    def signal(self, sig: int) -> None:
        self.signals.append(sig)


class Replicas:
    def __init__(self, *replicas: Replica) -> None:
        self.replicas = list(replicas)


def injector(api: Api, *replicas: Replica) -> Any:
    cfg = chaos.Config(grace=30.0)
    observer = chaos.Observer(api=None, cfg=cfg)
    return chaos.Chaos(cfg, None, api, None, None, Replicas(*replicas), observer), observer


def test_a_probe_bound_within_the_grace_is_no_violation(clock: Clock) -> None:
    api = Api(clock, bind_after=12.0)
    c, obs = injector(api)
    rec = chaos.FaultRecord("stall", started=clock.now - 5, ended=clock.now)
    asyncio.run(c.probe(rec))
    assert obs.violations["probe"] == 0, obs.details
    assert rec.recovery_s is not None
    assert 12.0 <= rec.recovery_s <= 13.0
    assert api.deleted == ["probe-001"]


@pytest.mark.parametrize("bind_after", [31.0, None], ids=["late", "never"])
def test_a_probe_bound_late_or_never_is_a_violation(clock: Clock, bind_after: float | None) -> None:
    api = Api(clock, bind_after=bind_after)
    c, obs = injector(api)
    rec = chaos.FaultRecord("gone", started=clock.now - 5, ended=clock.now)
    asyncio.run(c.probe(rec))
    assert obs.violations["probe"] == 1
    assert obs.details[0]["key"] == "probe-001"
    assert obs.details[0]["fault"] == "gone"
    assert api.deleted == ["probe-001"]  # the probe is cleaned up either way


def sigstop(clock: Clock, taken_over_after: float | None, leader_exits: bool) -> tuple[Any, Any, Replica]:
    """A leader-sigstop fault: the Lease passes to b ``taken_over_after`` seconds after the stop
    (never: None), and the stopped leader exits after SIGCONT or not."""
    a, b = Replica("a", exits_after_sigcont=leader_exits), Replica("b")
    stopped_at: list[float] = []

    def holder() -> str:
        if a.signals and not stopped_at:
            stopped_at.append(clock.now)
        if stopped_at and taken_over_after is not None and clock.now - stopped_at[0] >= taken_over_after:
            return b.identity()
        return a.identity()

    c, obs = injector(Api(clock, holder=holder), a, b)
    rec = chaos.FaultRecord("leader-sigstop", started=clock.now)

    async def run() -> None:
        await c.inject(rec)
        await c.drain()

    asyncio.run(run())
    return rec, obs, a


def test_a_stopped_leader_taken_over_that_exits_is_no_violation(clock: Clock) -> None:
    rec, obs, a = sigstop(clock, taken_over_after=7.0, leader_exits=True)
    assert a.signals == [signal.SIGSTOP, signal.SIGCONT]
    assert rec.params["taken_over_by"] == "b-1"
    assert "exited_after_s" in rec.params
    assert obs.violations["stopped_leader"] == 0, obs.details


def test_a_stopped_leader_whose_lease_nobody_takes_is_a_violation(clock: Clock) -> None:
    rec, obs, a = sigstop(clock, taken_over_after=None, leader_exits=True)
    assert a.signals == [signal.SIGSTOP, signal.SIGCONT]  # continued after the limit all the same
    assert rec.params["taken_over_by"] == ""
    assert rec.params["seconds"] >= chaos.LEASE_SECONDS + chaos.TAKEOVER_SECONDS
    assert obs.violations["stopped_leader"] == 1
    assert "no other replica took the lease" in obs.details[0]["why"]


def test_a_stopped_leader_that_goes_on_after_sigcont_is_a_violation(clock: Clock) -> None:
    rec, obs, _ = sigstop(clock, taken_over_after=7.0, leader_exits=False)
    assert rec.params["taken_over_by"] == "b-1"
    assert "exited_after_s" not in rec.params
    assert obs.violations["stopped_leader"] == 1
    assert obs.details[0]["key"] == "a.1"
    assert obs.details[0]["log"] == "a.log"
