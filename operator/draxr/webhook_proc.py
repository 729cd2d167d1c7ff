"""The admission webhook in a server process of its own (``--webhook-process true``).

In a thread of the operator (the default) the webhook shares the GIL with the watches and
scheduling cycles of the very pods it admits; here it does not, at the price of a process and of
about 0.4 ms more CPU per review (bench/NOTEBOOK.md: on 2 cores that CPU, not the GIL, is the bound, so
the thread stays the default). The child (``webhook_child``) answers from what this supervisor sends it over a
socket pair: the settings, the serving certificate and every rotation (``CertKeeper.deliver``), and
the mapping whenever it changes (``mapping_changed``, called where the operator's view changes,
and checked again at every message from the child). The child sends back what it counted, which
lands in this process's metrics under the same names; those batches are also its sign of life.

No silent death: a child that exits or stops answering is restarted with a backoff, logged as an
error, and /healthz fails (``problems``) until a new one serves, so that one that cannot come back
ends the operator (liveness exit). The first start failing (the port taken) ends it at once, as
the in-process server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from draxr import logs, metrics
from draxr.core.mapping import ExtendedResourceMapping, mapping_to_data
from draxr.loops import Backoff
from draxr.settings import Settings
from draxr.webhook import PATH
from draxr.webhook_child import LIMIT
from draxr.webhook_tls import CertKeeper

log = logs.get("draxr.webhook")
START_TIMEOUT = 60.0  # interpreter start and imports, on a busy node
SILENCE_LIMIT = 10.0  # the child sends at least every second; this long without a word: hung
SERVED_LONG_ENOUGH = 60.0  # a child that served this long resets the restart backoff
STOP_GRACE = 5.0


async def start_child(theirs: socket.socket, **options: Any) -> asyncio.subprocess.Process:
    """``python -m draxr.webhook_child`` on the socket ``theirs`` (the caller closes its copy)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "draxr.webhook_child",
        str(theirs.fileno()),
        pass_fds=(theirs.fileno(),),
        stdin=asyncio.subprocess.DEVNULL,
        **options,
    )


class WebhookProcess:
    def __init__(
        self,
        certs: CertKeeper,
        settings: Settings,
        mapping: Callable[[], ExtendedResourceMapping | None],
        backoff: Backoff | None = None,
    ) -> None:
        self.certs = certs
        self.backoff = backoff or Backoff(initial=0.5, maximum=30.0)  # between restarts
        self.settings = settings
        self.mapping = mapping
        self.pid: int | None = None  # the current child's
        self.restarts = 0
        self.serving = False
        self._down: str | None = None  # why no child serves, once one has served
        self._down_since = 0.0
        self._writer: asyncio.StreamWriter | None = None
        self._sent: object = None  # the mapping object last sent (identity: the cheap check)
        self._sent_data: Any = ...  # and its data (a rebuilt but equal mapping is not sent again)

    # ---- what the operator asks ----------------------------------------------------------------------
    def problems(self) -> list[str]:
        if self._down is None:
            return []
        down = time.monotonic() - self._down_since
        return [f"webhook server process down for {down:.0f}s: {self._down} (restarts: {self.restarts})"]

    def alive(self) -> bool:
        return self.serving

    def mapping_changed(self) -> None:
        """Send the mapping to the child if it changed since it was last sent."""
        if self._writer is None:
            return
        current = self.mapping()
        if current is self._sent:
            return
        self._sent = current
        data = None if current is None else mapping_to_data(current)
        if data != self._sent_data:
            self._sent_data = data
            self._send({"op": "mapping", "mapping": data})

    # ---- the child -----------------------------------------------------------------------------------
    def _send(self, msg: dict[str, Any]) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(json.dumps(msg).encode() + b"\n")

    def _deliver(self, tls_crt: bytes, tls_key: bytes) -> None:
        """A new certificate: to the child now (the next child gets ``certs.current`` at its start)."""
        self._send({"op": "cert", "tls_crt": tls_crt.decode(), "tls_key": tls_key.decode()})

    def _count(self, msg: dict[str, Any]) -> None:
        if msg.get("op") != "counts":
            return
        for result, n in (msg.get("results") or {}).items():
            metrics.WEBHOOK_ADMISSIONS.labels(result=result).inc(n)
        for seconds in msg.get("seconds") or ():
            metrics.WEBHOOK_SECONDS.observe(seconds)

    async def serve(self) -> None:
        reload = asyncio.create_task(self.certs.reload_loop(), name="webhook-cert-reload")
        supervising: asyncio.Task[None] | None = None
        try:
            await self.certs.loaded.wait()
            self.certs.deliver = self._deliver
            supervising = asyncio.create_task(self._supervise(), name="webhook-process")
            await asyncio.wait([supervising, reload], return_when=asyncio.FIRST_COMPLETED)
            if supervising.done():
                supervising.result()  # raises why
            raise RuntimeError("admission webhook server stopped on its own")
        finally:
            reload.cancel()
            self.certs.deliver = self.certs.load_here
            if supervising is not None:
                supervising.cancel()
                await asyncio.gather(supervising, return_exceptions=True)

    async def _supervise(self) -> None:
        backoff = self.backoff
        first = True
        while True:
            why, served = await self._run_once(first)
            first = False
            self.restarts += 1
            if self._down is None:
                self._down_since = time.monotonic()
            self._down = why
            if served >= SERVED_LONG_ENOUGH:
                backoff.reset()
            delay = backoff.next()
            log.error(
                "webhook server process ended: restarting it", why=why, process=self.pid, restart_in=round(delay, 2)
            )
            await asyncio.sleep(delay)

    async def _run_once(self, first: bool) -> tuple[str, float]:
        """Start a child and serve through it until it ends: why it ended, and how long it served.
        Raises if the first child does not come to serve."""
        ours, theirs = socket.socketpair()
        try:
            proc = await start_child(theirs)
        finally:
            theirs.close()
        self.pid = proc.pid
        reader, writer = await asyncio.open_unix_connection(sock=ours, limit=LIMIT)
        self._writer, self._sent, self._sent_data = writer, None, ...
        served_at: float | None = None
        hung = False
        try:
            s = self.settings
            self._send(
                {
                    "op": "config",
                    "scheduler_name": s.scheduler_name,
                    "bind_address": s.bind_address,
                    "port": s.webhook_port,
                    "log_level": s.log_level,
                    "log_format": s.log_format,
                }
            )
            if self.certs.current is not None:
                self._deliver(*self.certs.current)
            self._sent = object()  # (whatever the mapping is, the new child gets it)
            self.mapping_changed()
            self._send({"op": "start"})
            try:
                async with asyncio.timeout(START_TIMEOUT):
                    line = await reader.readline()
            except TimeoutError:
                line = json.dumps({"op": "failed", "error": f"not serving after {START_TIMEOUT:.0f}s"}).encode()
            msg = json.loads(line) if line else {}
            if msg.get("op") != "serving":
                why = msg.get("error") or f"exited with code {await proc.wait()} before it served"
                if first:
                    raise RuntimeError(f"admission webhook server could not start: {why}")
                return f"could not start: {why}", 0.0
            served_at = time.monotonic()
            self.serving, self._down = True, None
            log.info(
                "admission webhook serving",
                address=s.bind_address,
                port=s.webhook_port,
                path=PATH,
                process=proc.pid,
                restarts=self.restarts,
            )
            while True:
                said = await self._next(reader)
                if said is None:
                    hung = True
                    return f"silent for {SILENCE_LIMIT:.0f}s (killed)", time.monotonic() - served_at
                if not said:
                    return f"exited with code {await proc.wait()}", time.monotonic() - served_at
                self._count(json.loads(said))
                self.mapping_changed()  # (a backstop: changes are sent as they happen)
        finally:
            self._writer, self.serving = None, False
            writer.close()
            await self._stop(proc, kill=hung)

    async def _next(self, reader: asyncio.StreamReader) -> bytes | None:
        """The child's next line (b"" at its end), None if it said nothing for SILENCE_LIMIT. A
        timer that fires late because this loop was busy gets one more short look first."""
        for limit in (SILENCE_LIMIT, 0.5):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    return await reader.readline()
        return None

    async def _stop(self, proc: asyncio.subprocess.Process, kill: bool) -> None:
        """The child leaves when its socket closes; one that does not is killed."""
        if proc.returncode is None and not kill:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(STOP_GRACE):
                    await proc.wait()
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
