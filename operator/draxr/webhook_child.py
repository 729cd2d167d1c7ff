"""The admission webhook's server process (``python -m draxr.webhook_child FD``), started and
supervised by the operator (``webhook_proc``): its own interpreter, so that answering admission
reviews never waits for the GIL that the operator's watches and scheduling cycles hold.

It knows only what its socket ``FD`` (newline-delimited JSON, see ``webhook_proc``) tells it: the
settings, the serving certificate (and every rotation), and the extended resource mapping (None:
the operator has not synced: pods are admitted unchanged, "not-synced"). It sends back "serving"
(or "failed") once, then the admissions it counted, at least every HEARTBEAT seconds. It ends when
the socket closes (the operator stopped or died) or on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import time
from collections import Counter
from typing import Any

from aiohttp import web

from draxr import logs
from draxr.core.mapping import ExtendedResourceMapping, mapping_from_data
from draxr.tls_context import load_chain, server_context
from draxr.webhook import application

log = logs.get("draxr.webhook")
LIMIT = 64 * 1024 * 1024  # one message (a mapping of many classes) may be long
FLUSH = 0.1  # seconds between batches of counts while reviews come in
HEARTBEAT = 1.0  # a batch at least this often, empty or not: the operator's sign of life


class Batch:
    """The counts since the last message (a ``webhook.Tally``)."""

    def __init__(self) -> None:
        self.results: Counter[str] = Counter()
        self.seconds: list[float] = []

    def admitted(self, result: str) -> None:
        self.results[result] += 1

    def answered(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def take(self) -> dict[str, Any]:
        out = {"op": "counts", "results": dict(self.results), "seconds": self.seconds}
        self.results, self.seconds = Counter(), []
        return out


class Child:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.context = server_context()
        self.mapping: ExtendedResourceMapping | None = None
        self.batch = Batch()
        self.config: dict[str, Any] = {}

    def send(self, msg: dict[str, Any]) -> None:
        self.writer.write(json.dumps(msg).encode() + b"\n")

    def apply(self, msg: dict[str, Any]) -> None:
        """One message from the operator (all but ``start``)."""
        op = msg.get("op")
        if op == "config":
            self.config = msg
            logs.configure(msg["log_level"], msg["log_format"])
        elif op == "cert":
            load_chain(self.context, msg["tls_crt"].encode(), msg["tls_key"].encode())
        elif op == "mapping":
            self.mapping = None if msg["mapping"] is None else mapping_from_data(msg["mapping"])
        else:
            raise ValueError(f"unknown message {op!r}")

    async def _line(self) -> bytes:
        """The operator's next message, b"" once the socket is closed. A close with our counts still
        unread on its side arrives as a reset: that is the operator's end too, not a crash."""
        try:
            return await self.reader.readline()
        except ConnectionError:
            return b""

    async def run(self) -> None:
        while True:  # configuration, certificate and mapping first: the first review finds them all
            line = await self._line()
            if not line:
                return
            msg = json.loads(line)
            if msg.get("op") == "start":
                break
            self.apply(msg)
        c = self.config
        runner = web.AppRunner(application(lambda: self.mapping, c["scheduler_name"], self.batch), access_log=None)
        await runner.setup()
        try:
            try:
                await web.TCPSite(runner, c["bind_address"], c["port"], ssl_context=self.context).start()
            except OSError as e:  # the port is taken, the address is not ours: the operator decides
                self.send({"op": "failed", "error": f"{type(e).__name__}: {e}"})
                await self.writer.drain()
                return
            self.send({"op": "serving"})
            flusher = asyncio.create_task(self._flush())
            try:
                while line := await self._line():
                    self.apply(json.loads(line))
            finally:
                flusher.cancel()
        finally:
            await runner.cleanup()

    async def _flush(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH)
            if self.batch.results or self.batch.seconds or time.monotonic() - last >= HEARTBEAT:
                self.send(self.batch.take())
                try:
                    await self.writer.drain()
                except ConnectionError:  # the operator is gone: run() sees it on its next read
                    return
                last = time.monotonic()


async def _main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    reader, writer = await asyncio.open_unix_connection(sock=sock, limit=LIMIT)
    child = Child(reader, writer)
    run = asyncio.create_task(child.run())
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, run.cancel)
    try:
        await run
    except asyncio.CancelledError:
        pass
    finally:
        writer.close()


def main(argv: list[str]) -> int:
    # A terminal's ^C reaches the whole process group: the operator stops this process (by closing
    # the socket) once it has stopped using it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(_main(int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
