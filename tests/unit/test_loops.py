"""The one failure policy (GuardedLoop), error classification and the conflict-retry helper."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from draxr import metrics
from draxr.kube import server_wait
from draxr.loops import (
    Backoff,
    GuardedLoop,
    Kind,
    LoopFailed,
    TooManyConflicts,
    classify,
    hand_back,
    retry_after,
    retry_conflicts,
)

STOP = "the test stops the loop"  # the only way out of these loops: proves the loop let it through


def api_error(status: int, headers: dict[str, str] | None = None) -> ApiException:
    e = ApiException(status=status, reason="test")
    e.headers = headers or {}
    return e


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (api_error(409), Kind.CONFLICT),
        (api_error(429), Kind.THROTTLED),
        (api_error(500), Kind.SERVER),
        (api_error(503), Kind.SERVER),
        (api_error(504), Kind.SERVER),
        (api_error(403), Kind.FORBIDDEN),
        (api_error(401), Kind.FORBIDDEN),
        (api_error(408), Kind.TIMEOUT),
        (api_error(422), Kind.CLIENT),
        (api_error(404), Kind.CLIENT),
        (TimeoutError(), Kind.TIMEOUT),
        (aiohttp.ServerTimeoutError(), Kind.TIMEOUT),
        (aiohttp.ClientConnectionError("reset"), Kind.CONNECTION),
        (aiohttp.ServerDisconnectedError(), Kind.CONNECTION),
        (ConnectionResetError(), Kind.CONNECTION),
        (OSError("Name or service not known"), Kind.CONNECTION),
        (ValueError("bad PEM"), Kind.BAD_INPUT),
        (TooManyConflicts("x"), Kind.CONFLICT),
        (KeyError("x"), Kind.BUG),
        (TypeError("x"), Kind.BUG),
    ],
)
def test_classify(error: BaseException, kind: Kind) -> None:
    assert classify(error) is kind


def test_retry_after_is_read_from_the_headers() -> None:
    assert retry_after(api_error(429, {"Retry-After": "3"})) == 3.0
    assert retry_after(api_error(429)) is None
    assert retry_after(api_error(503, {"Retry-After": "soon"})) is None
    assert retry_after(RuntimeError()) is None


def test_server_wait_follows_client_go() -> None:
    """429 always waits (1 s without a header); a 5xx only when the server sent Retry-After; capped."""
    assert server_wait(api_error(429)) == 1.0
    assert server_wait(api_error(429, {"Retry-After": "2"})) == 2.0
    assert server_wait(api_error(503, {"Retry-After": "4"})) == 4.0
    assert server_wait(api_error(503, {"Retry-After": "3600"})) == 10.0
    assert server_wait(api_error(500)) is None
    assert server_wait(api_error(409, {"Retry-After": "1"})) is None


def test_backoff_grows_with_jitter_and_honours_the_hint() -> None:
    b = Backoff(initial=1.0, maximum=8.0)
    delays = [b.next() for _ in range(6)]
    bases = [1, 2, 4, 8, 8, 8]
    for d, base in zip(delays, bases, strict=True):
        assert base / 2 <= d <= base
    assert b.next(hint=20.0) == 20.0  # the server's Retry-After wins over a shorter backoff
    b.reset()
    assert b.next() <= 1.0


def _count(loop: str, kind: str) -> float:
    return metrics.LOOP_ERRORS.labels(loop=loop, kind=kind)._value.get()


async def test_guarded_loop_survives_transient_errors_and_counts_them() -> None:
    errors: list[BaseException] = [aiohttp.ClientConnectionError("reset"), api_error(503), api_error(409)]
    ran: list[int] = []

    async def step() -> None:
        if errors:
            raise errors.pop(0)
        ran.append(1)
        if len(ran) == 3:
            raise asyncio.CancelledError(STOP)

    async def pause() -> None:
        pass

    before = {k: _count("t-transient", k) for k in ("connection", "server", "conflict")}
    loop = GuardedLoop("t-transient", backoff=Backoff(0.001, 0.002))
    with pytest.raises(asyncio.CancelledError, match=STOP):
        await loop.run(step, pause)
    assert len(ran) == 3
    for k in ("connection", "server", "conflict"):
        assert _count("t-transient", k) == before[k] + 1
    assert loop.backoff.failures == 0  # reset by the successes


async def test_guarded_loop_escalates_an_error_that_repeats() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("a bug")

    async def pause() -> None:
        pass

    loop = GuardedLoop("t-bug", backoff=Backoff(0.001, 0.002), escalate_after=3)
    with pytest.raises(LoopFailed, match=r"loop 't-bug' failed for good: KeyError"):
        await loop.run(step, pause)
    assert calls == 3


async def test_guarded_loop_does_not_escalate_transient_errors_however_many() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        if calls == 20:
            raise asyncio.CancelledError(STOP)
        raise api_error(403)

    async def pause() -> None:
        pass

    loop = GuardedLoop("t-forbidden", backoff=Backoff(0.0001, 0.0002), escalate_after=2)
    with pytest.raises(asyncio.CancelledError, match=STOP):
        await loop.run(step, pause)
    assert calls == 20


async def test_a_success_between_bugs_resets_the_escalation() -> None:
    script = ["bug", "bug", "ok", "bug", "bug", "ok", "stop"]

    async def step() -> None:
        what = script.pop(0)
        if what == "bug":
            raise KeyError("x")
        if what == "stop":
            raise asyncio.CancelledError(STOP)

    async def pause() -> None:
        pass

    loop = GuardedLoop("t-reset", backoff=Backoff(0.0001, 0.0002), escalate_after=3)
    with pytest.raises(asyncio.CancelledError, match=STOP):
        await loop.run(step, pause)
    assert script == []


async def test_retry_conflicts_refreshes_until_it_writes() -> None:
    versions = iter(["v2", "v3"])
    seen: list[str] = []

    async def attempt(current: str) -> str:
        seen.append(current)
        if current != "v3":
            raise api_error(409)
        return f"wrote {current}"

    async def refresh() -> str:
        return next(versions)

    assert await retry_conflicts("v1", attempt, refresh, what="x") == "wrote v3"
    assert seen == ["v1", "v2", "v3"]


async def test_retry_conflicts_gives_up_passes_other_errors_and_stops_when_gone() -> None:
    async def always_conflict(current: str) -> str:
        raise api_error(409)

    async def same() -> str:
        return "v"

    with pytest.raises(TooManyConflicts, match="claim a/b kept changing"):
        await retry_conflicts("v", always_conflict, same, what="claim a/b", retries=3)

    async def forbidden(current: str) -> str:
        raise api_error(403)

    with pytest.raises(ApiException) as info:
        await retry_conflicts("v", forbidden, same, what="x")
    assert info.value.status == 403

    async def gone() -> str | None:
        return None

    assert await retry_conflicts("v", always_conflict, gone, what="x") is None

    async def unprocessable(current: str) -> str:
        raise api_error(422)

    with pytest.raises(TooManyConflicts, match="x kept changing"):
        await retry_conflicts("v", unprocessable, same, what="x", codes=frozenset({409, 422}))


async def test_hand_back_lets_a_task_woken_meanwhile_run_before_the_caller_goes_on() -> None:
    """The scheduling loop's turn: a task whose timer came due while the loop was busy (a watch,
    the lease renewal, a probe) runs before the next turn, not after it."""
    order: list[str] = []

    async def woken() -> None:
        await asyncio.sleep(0.001)
        order.append("woken")

    task = asyncio.create_task(woken())
    await asyncio.sleep(0)  # its timer armed
    time.sleep(0.005)  # noqa: ASYNC251 (a busy turn: the timer comes due meanwhile)
    await hand_back()
    order.append("caller")
    await task
    assert order == ["woken", "caller"]
