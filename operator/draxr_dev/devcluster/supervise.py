"""Runs a command and starts it again whenever it exits, as kubelet restarts a container of a pod with
``restartPolicy: Always``: the demo's draxr (hack/demo.sh), which exits when it loses its leadership
(an API-server outage longer than its lease), as kube-scheduler does, and counts on being restarted.

    python -m draxr_dev.devcluster.supervise [--name draxr] -- COMMAND [ARG...]

The back-off is kubelet's CrashLoopBackOff: 10 s before the first restart, doubled after each one up
to 5 minutes, back to 10 s once the command ran 10 minutes. Every exit and restart is one line on
stderr (the command's stdout and stderr are the supervisor's). SIGTERM or SIGINT: the command gets
SIGTERM, SIGKILL after ``--grace`` seconds, and the supervisor exits 0 without restarting it.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

INITIAL_BACKOFF = 10.0  # kubelet: initial container restart back-off
MAX_BACKOFF = 300.0  # kubelet: MaxContainerBackOff
RESET_AFTER = 600.0  # kubelet: a container that ran 10 minutes starts again from the initial back-off


def _log(name: str, msg: str) -> None:
    print(f"[supervise] {time.strftime('%H:%M:%S')} {name}: {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--name", default="command", help="what the log lines call the command")
    p.add_argument("--initial-backoff", type=float, default=INITIAL_BACKOFF, help="seconds before the first restart")
    p.add_argument("--max-backoff", type=float, default=MAX_BACKOFF, help="the back-off doubles up to this")
    p.add_argument("--reset-after", type=float, default=RESET_AFTER, help="a run this long resets the back-off")
    p.add_argument("--grace", type=float, default=8.0, help="seconds between SIGTERM and SIGKILL when stopping")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command")

    child: subprocess.Popen[bytes] | None = None
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    backoff = args.initial_backoff
    restarts = 0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(command)
        _log(args.name, f"started (pid {child.pid})" + (f", restart {restarts}" if restarts else ""))
        if stopping:  # a signal between the check and the start
            child.send_signal(signal.SIGTERM)
        rc = _wait(child, lambda: stopping, args.grace)
        ran = time.monotonic() - started
        if stopping:
            _log(args.name, f"stopped (exit {rc})")
            return 0
        if ran >= args.reset_after:
            backoff = args.initial_backoff
        restarts += 1
        _log(
            args.name,
            f"exited ({rc}) after {ran:.0f}s: restarting in {backoff:g}s (restart {restarts}; "
            "as kubelet restarts a container: back-off doubling up to "
            f"{args.max_backoff:g}s, reset after {args.reset_after:g}s of running)",
        )
        deadline = time.monotonic() + backoff
        while not stopping and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.2))
        backoff = min(backoff * 2, args.max_backoff)
    _log(args.name, "stopped")
    return 0


def _wait(child: subprocess.Popen[bytes], stopping: Callable[[], bool], grace: float) -> int:
    """The child's exit code; once stopping (the handler sent SIGTERM), SIGKILL after ``grace`` s."""
    kill_at: float | None = None
    while True:
        try:
            return child.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if not stopping():
                continue
            if kill_at is None:
                kill_at = time.monotonic() + grace
            elif time.monotonic() >= kill_at:
                child.kill()


if __name__ == "__main__":
    sys.exit(main())
