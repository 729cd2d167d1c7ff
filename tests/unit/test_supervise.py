"""draxr_dev.devcluster.supervise (the demo's draxr, restarted as kubelet restarts a container): a
command that exits is started again, with kubelet's back-off doubling up to its cap; SIGTERM stops
the command and the supervisor, without a restart; a command deaf to SIGTERM is killed after the grace.
Back-offs are tiny here; nothing waits on the clock but for what the files show."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SUPERVISE = [sys.executable, "-m", "draxr_dev.devcluster.supervise", "--name", "cmd"]


def _until(check: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    """Polls check() until it holds (the supervisor must still be running meanwhile)."""
    for _ in range(12000):
        if check():
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("never happened")


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_an_exiting_command_is_restarted_with_a_doubling_back_off(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sup = subprocess.Popen(
        [*SUPERVISE, "--initial-backoff", "0.01", "--max-backoff", "0.04", "--reset-after", "1000",
         "--", "sh", "-c", f"echo run >> {runs}; exit 3"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _until(lambda: len(_lines(runs)) >= 5, sup)
    sup.send_signal(signal.SIGTERM)
    _, log = sup.communicate(timeout=60)
    assert sup.returncode == 0, log
    exits = re.findall(r"exited \((-?\d+)\) after \d+s: restarting in ([\d.]+)s \(restart (\d+);", log)
    assert len(exits) >= 4, log
    assert {rc for rc, _, _ in exits} == {"3"}
    assert [float(b) for _, b, _ in exits[:4]] == [0.01, 0.02, 0.04, 0.04], log  # kubelet's: doubling, capped
    assert [int(n) for _, _, n in exits] == list(range(1, len(exits) + 1))
    assert "as kubelet restarts a container" in log


def test_a_long_run_resets_the_back_off(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    sup = subprocess.Popen(
        [*SUPERVISE, "--initial-backoff", "0.01", "--max-backoff", "10", "--reset-after", "0",
         "--", "sh", "-c", f"echo run >> {runs}; exit 0"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _until(lambda: len(_lines(runs)) >= 4, sup)
    sup.send_signal(signal.SIGTERM)
    _, log = sup.communicate(timeout=60)
    backoffs = re.findall(r"restarting in ([\d.]+)s", log)
    assert len(backoffs) >= 3, log
    assert set(backoffs) == {"0.01"}, log  # every run counted as long enough: never doubled


def test_sigterm_stops_the_command_and_the_supervisor_without_a_restart(tmp_path: Path) -> None:
    started, stopped = tmp_path / "started", tmp_path / "stopped"
    script = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(stopped)!r}).write_text('term'), sys.exit(0)))\n"
        f"pathlib.Path({str(started)!r}).open('a').write('x\\n')\n"
        "while True: time.sleep(1)\n"
    )
    sup = subprocess.Popen([*SUPERVISE, "--", sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    _until(lambda: len(_lines(started)) == 1, sup)
    sup.send_signal(signal.SIGTERM)
    _, log = sup.communicate(timeout=60)
    assert sup.returncode == 0, log
    assert stopped.read_text() == "term"
    assert _lines(started) == ["x"], log  # not started again
    assert "restarting" not in log
    assert "stopped (exit 0)" in log


def test_a_command_deaf_to_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    started = tmp_path / "started"
    script = (
        "import pathlib, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(started)!r}).write_text('x')\n"
        "while True: time.sleep(1)\n"
    )
    sup = subprocess.Popen(
        [*SUPERVISE, "--grace", "0.1", "--", sys.executable, "-c", script], stderr=subprocess.PIPE, text=True
    )
    _until(started.exists, sup)
    sup.send_signal(signal.SIGTERM)
    _, log = sup.communicate(timeout=60)
    assert sup.returncode == 0, log
    assert f"stopped (exit -{int(signal.SIGKILL)})" in log, log
