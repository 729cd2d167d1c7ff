"""One failure policy for every long-running loop, and one conflict-retry helper for every write.

``GuardedLoop`` runs a loop's step again and again. A step that fails is logged with the loop's
name, counted (``draxr_loop_errors_total{loop,kind}``) and retried after a jittered exponential
backoff (the server's Retry-After first); transient errors (HTTP 409/429/5xx, connection resets,
timeouts, DNS/OS errors) never end the loop. Only what cannot heal escalates: an error of another
kind (a 4xx that is no conflict or throttle, a bug) that repeats on ``escalate_after`` consecutive
steps raises ``LoopFailed``, which ends the process (Kubernetes restarts it).
"""

from __future__ import annotations

import asyncio
import enum
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from draxr import logs, metrics
from draxr.kube import api_message

log = logs.get("draxr.loops")
T = TypeVar("T")
C = TypeVar("C")


class Kind(enum.StrEnum):
    CONFLICT = "conflict"  # 409: someone else changed it; read again and retry
    THROTTLED = "throttled"  # 429
    SERVER = "server"  # 5xx: the API server (or etcd) is unhappy for now
    TIMEOUT = "timeout"
    CONNECTION = "connection"  # resets, refused, DNS, TLS handshakes, other OS errors
    FORBIDDEN = "forbidden"  # 401/403: RBAC or a token being rotated; heals when the admin fixes it
    CLIENT = "client"  # another 4xx: our request is wrong
    BAD_INPUT = "bad-input"  # another's object we cannot read (a corrupt Secret): heals when it is fixed
    NOT_INSTALLED = "not-installed"  # a kind the server does not serve (a CRD not installed yet)
    BUG = "bug"  # anything else


TRANSIENT = frozenset(
    {
        Kind.CONFLICT,
        Kind.THROTTLED,
        Kind.SERVER,
        Kind.TIMEOUT,
        Kind.CONNECTION,
        Kind.FORBIDDEN,
        Kind.BAD_INPUT,
        Kind.NOT_INSTALLED,
    }
)


class NotInstalled(RuntimeError):
    """The server does not serve a kind we must write (its CRD is not installed): says which and how
    to install it; heals when the admin installs it, so it is retried, never fatal."""


class Refused(RuntimeError):
    """A write refused (401/403: RBAC, an admission policy, a token): says what is needed; heals when
    the admin fixes it."""


def classify(e: BaseException) -> Kind:
    if isinstance(e, TooManyConflicts):
        return Kind.CONFLICT
    if isinstance(e, NotInstalled):
        return Kind.NOT_INSTALLED
    if isinstance(e, Refused):
        return Kind.FORBIDDEN
    if isinstance(e, ApiException):
        status = int(e.status or 0)
        if status == 409:
            return Kind.CONFLICT
        if status == 429:
            return Kind.THROTTLED
        if status >= 500:
            return Kind.SERVER
        if status in (401, 403):
            return Kind.FORBIDDEN
        if status == 408:
            return Kind.TIMEOUT
        if status == 0:  # the client's own failure before any answer
            return Kind.CONNECTION
        return Kind.CLIENT
    if isinstance(e, TimeoutError | aiohttp.ServerTimeoutError):
        return Kind.TIMEOUT
    if isinstance(e, aiohttp.ClientError | OSError | ConnectionError):
        return Kind.CONNECTION
    if isinstance(e, ValueError):  # includes malformed JSON/PEM and UnicodeError
        return Kind.BAD_INPUT
    return Kind.BUG


def retry_after(e: BaseException) -> float | None:
    """The server's Retry-After (seconds), if it sent one."""
    headers = getattr(e, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


class LoopFailed(RuntimeError):
    """A loop hit an error that does not heal by retrying: the process must exit."""

    def __init__(self, loop: str, cause: BaseException) -> None:
        super().__init__(f"loop {loop!r} failed for good: {type(cause).__name__}: {cause}")
        self.loop = loop


@dataclass
class Backoff:
    """Exponential with full jitter in [base/2, base], as client-go's wait.Backoff with jitter."""

    initial: float = 0.5
    maximum: float = 30.0
    failures: int = 0

    def next(self, hint: float | None = None) -> float:
        self.failures += 1
        base = min(self.maximum, self.initial * 2.0 ** (self.failures - 1))
        delay = base / 2 + random.random() * base / 2
        return max(delay, min(hint, self.maximum * 4)) if hint is not None else delay

    def reset(self) -> None:
        self.failures = 0


@dataclass
class GuardedLoop:
    name: str
    backoff: Backoff = field(default_factory=Backoff)
    escalate_after: int = 5
    last_ok: float = field(default_factory=time.monotonic)
    _untransient: int = 0

    def failed(self, e: BaseException, **context: object) -> float:
        """Count and log one failed step; the delay before the next, or raise LoopFailed."""
        kind = classify(e)
        metrics.LOOP_ERRORS.labels(loop=self.name, kind=kind.value).inc()
        self._untransient = 0 if kind in TRANSIENT else self._untransient + 1
        delay = self.backoff.next(retry_after(e))
        error = f"{e.status}: {api_message(e)}" if isinstance(e, ApiException) else f"{type(e).__name__}: {e}"
        if self._untransient >= self.escalate_after:
            log.error("loop failed for good", loop=self.name, kind=kind.value, error=error, **context)
            raise LoopFailed(self.name, e) from e
        level = log.warning if kind in TRANSIENT else log.error
        level(
            "loop step failed, retrying",
            loop=self.name,
            kind=kind.value,
            error=error,
            retry_in=round(delay, 2),
            **context,
            exc_info=kind is Kind.BUG,
        )
        return delay

    def succeeded(self) -> None:
        self.backoff.reset()
        self._untransient = 0
        self.last_ok = time.monotonic()

    async def run(self, step: Callable[[], Awaitable[None]], pause: Callable[[], Awaitable[None]]) -> None:
        """Forever: ``step()``, then ``pause()`` after a success or the backoff after a failure."""
        while True:
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                await asyncio.sleep(self.failed(e))
                continue
            self.succeeded()
            await pause()


def sleeper(seconds: float | Callable[[], float]) -> Callable[[], Awaitable[None]]:
    """A ``pause`` that sleeps a fixed (or computed) number of seconds."""

    async def pause() -> None:
        await asyncio.sleep(seconds() if callable(seconds) else seconds)

    return pause


class TooManyConflicts(RuntimeError):
    pass


async def retry_conflicts(
    current: C | None,
    attempt: Callable[[C], Awaitable[T]],
    refresh: Callable[[], Awaitable[C | None]],
    *,
    what: str,
    retries: int = 5,
    codes: frozenset[int] = frozenset({409}),
) -> T | None:
    """Optimistic concurrency: ``attempt(current)``; on a conflict (``codes``), ``refresh()`` and
    try again, at most ``retries`` times. None when there is (or is left) nothing to write to."""
    for _ in range(retries):
        if current is None:
            return None
        try:
            return await attempt(current)
        except ApiException as e:
            if e.status not in codes:
                raise
        current = await refresh()
    raise TooManyConflicts(f"{what} kept changing; giving up for now")


async def hand_back() -> None:
    """Let every task that is waiting run before the caller goes on. One ``sleep(0)`` is not
    enough: a task woken by a timer or a socket runs two loop iterations after the wake-up (the
    timer's or the transport's callback first, then the task's step), and the caller, queued
    first, would take a whole turn in between; three iterations put it behind them."""
    for _ in range(3):
        await asyncio.sleep(0)
