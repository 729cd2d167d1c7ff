"""Where the framework refactor (issue 35) stands against its four targets: a report, not a gate.

1. The function that runs one pod's scheduling (``SCHEDULE``, today ``draxr.core.placement.schedule``)
   at most 60 lines.
2. No function in ``operator/draxr/core/`` over 100 lines, except the allocator's search
   (``ALLOCATOR_SEARCH``: ``_Run._allocate_one`` and ``_Run._allocate_device``, the ``-- search --``
   part of ``core/allocator/allocator.py``, upstream's allocateOne and allocateDevice).
3. One pod's way through a scheduling cycle returns to no module of ``draxr.core`` more than three
   times.
4. ``ClusterState`` (``draxr.core.state``) under 400 lines.

Static measures (1, 2, 4) read the source with ``ast``. A function's length is
``end_lineno - first line + 1`` where the first line is its first decorator's (its ``def`` line
without decorators), so docstrings, comments and blank lines inside count; a nested function
counts on its own and inside its parent. A class's length is measured the same way.

The dynamic measure (3) runs ``draxr.core.placement.schedule`` on one pod under ``sys.setprofile``.
After every call and return the module in control is the module of the innermost frame whose
module is ``draxr.core`` or below it (frames elsewhere, the standard library or draxr's shell, are
transparent: a call from placement into ``re`` and back stays one visit of placement). A *visit*
is a maximal run of events with the same module in control: consecutive calls inside one module
are one visit, which ends when control passes into, or returns to, another module of
``draxr.core``. A module's *returns* are its visits minus one; the figure is the worst module's.
The cycle is measured on a fresh state after a first, unmeasured pod on another fresh state, so
that process-wide caches (compiled CEL, interned labels) are warm whatever ran before and the
figure is the same in the CLI and in a test run.

``python -m draxr_dev.framework_targets`` prints the table and the worst offenders, exit 0.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import draxr
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, schedule
from draxr.core.state import ClusterState, PodInfo
from draxr_dev.devcluster import fakedriver

T = TypeVar("T")
JSON = dict[str, Any]

CORE_PACKAGE = "draxr.core"
SCHEDULE = "draxr.core.placement.schedule"  # target 1: the function that runs one pod's scheduling
SCHEDULE_LIMIT = 60
FUNCTION_LIMIT = 100  # target 2
# The allocator's search, exempt from target 2 (fully qualified: module, then qualified name).
ALLOCATOR_SEARCH = frozenset(
    {
        "draxr.core.allocator.allocator._Run._allocate_one",
        "draxr.core.allocator.allocator._Run._allocate_device",
    }
)
RETURNS_LIMIT = 3  # target 3
CLUSTER_STATE = "draxr.core.state.ClusterState"  # target 4
CLUSTER_STATE_LIMIT = 400  # under: at most 399

PACKAGE_DIR = Path(draxr.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parents[1]


# -- static measures ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Length:
    """A function's or class's length in lines (its first decorator's line to its last line)."""

    module: str
    qualname: str
    path: str
    line: int  # the ``def``/``class`` line
    lines: int
    is_class: bool = False

    @property
    def name(self) -> str:
        return f"{self.module}.{self.qualname}"

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def _span(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    last = node.end_lineno if node.end_lineno is not None else node.lineno
    return last - first + 1


def lengths(source: str, *, module: str, path: str = "<string>") -> list[Length]:
    """Every function (methods, nested functions) and class of ``source``, in source order;
    qualified names are dotted (``Class.method``, ``outer.inner``)."""
    out: list[Length] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualname = f"{prefix}{child.name}"
                is_class = isinstance(child, ast.ClassDef)
                out.append(Length(module, qualname, path, child.lineno, _span(child), is_class))
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return out


def function_lengths(source: str, *, module: str, path: str = "<string>") -> list[Length]:
    """The functions of ``source`` (classes left out)."""
    return [e for e in lengths(source, module=module, path=path) if not e.is_class]


def find(entries: Iterable[Length], name: str) -> Length | None:
    """The entry whose fully qualified name is ``name``."""
    return next((e for e in entries if e.name == name), None)


def over_limit(
    functions: Iterable[Length], limit: int = FUNCTION_LIMIT, exempt: Iterable[str] = ALLOCATOR_SEARCH
) -> tuple[list[Length], list[Length]]:
    """The functions over ``limit`` lines, longest first: (counted, exempt by name)."""
    names = frozenset(exempt)
    over = sorted((f for f in functions if f.lines > limit), key=lambda f: (-f.lines, f.name))
    return [f for f in over if f.name not in names], [f for f in over if f.name in names]


def _module_name(file: Path) -> str:
    parts = list(file.resolve().relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _display_path(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(file)


def package_lengths(directory: Path = PACKAGE_DIR / "core") -> list[Length]:
    """Every function and class under ``directory`` (a directory of the draxr package)."""
    out: list[Length] = []
    for file in sorted(directory.rglob("*.py")):
        out += lengths(file.read_text(), module=_module_name(file), path=_display_path(file))
    return out


# -- the dynamic measure -----------------------------------------------------------------------


@dataclass(frozen=True)
class Visits:
    """The modules that held control, in order, one entry per visit."""

    sequence: tuple[str, ...]
    per_module: Mapping[str, int] = field(default_factory=dict)

    @property
    def distinct(self) -> int:
        return len(self.per_module)

    def returns(self, module: str) -> int:
        return max(self.per_module.get(module, 0) - 1, 0)

    def most(self, n: int = 10) -> list[tuple[str, int]]:
        """The ``n`` modules with most visits, most first (ties by name)."""
        return sorted(self.per_module.items(), key=lambda kv: (-kv[1], kv[0]))[:n]

    @property
    def worst(self) -> tuple[str, int] | None:
        """The module with most returns, and its returns."""
        top = self.most(1)
        return (top[0][0], top[0][1] - 1) if top else None


def count_visits(modules: Iterable[str | None]) -> Visits:
    """Visits from the module in control after each event (None: no module of interest, which ends
    a visit too). Repeats of the same module are one visit."""
    sequence: list[str] = []
    previous: str | None = None
    for module in modules:
        if module is not None and module != previous:
            sequence.append(module)
        previous = module
    return Visits(tuple(sequence), dict(Counter(sequence)))


def _inside(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def trace_modules(fn: Callable[[], T], package: str = CORE_PACKAGE) -> tuple[T, list[str | None]]:
    """Run ``fn`` under ``sys.setprofile``; return its result and the module (under ``package``)
    of the innermost such frame each time it changes (None: no frame of the package left)."""
    seen: list[str | None] = []
    current: list[str | None] = [None]

    def module_of(frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_globals.get("__name__")
            if isinstance(name, str) and _inside(name, package):
                return name
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" and event != "return":
            return  # c_call, c_return, c_exception: builtins are transparent
        name = frame.f_globals.get("__name__")
        if not (isinstance(name, str) and _inside(name, package)):
            return  # a frame elsewhere: the innermost frame of the package is unchanged
        now = name if event == "call" else module_of(frame.f_back)
        if now != current[0]:
            current[0] = now
            seen.append(now)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(previous)
    return result, seen


GPU = "example.com/gpu"


def small_cluster() -> tuple[ClusterState, JSON]:
    """Two nodes with four fake GPUs each (DRA, class gpu.example.com serving example.com/gpu) and
    a pending pod asking for one GPU: the same shapes as tests/unit/cluster_builders.py."""
    state = ClusterState()
    state.upsert_class(fakedriver.device_class(fakedriver.DRIVER, extended_resource_name=GPU))
    for name in ("n1", "n2"):
        state.upsert_node(fakedriver.node(name, cpu="8", memory="32Gi"))
        devices = [fakedriver.device(f"gpu-{i}", uid=f"{name}-gpu-{i}") for i in range(4)]
        state.upsert_slice(fakedriver.resource_slice(name, devices))
    pod: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "schedulerName": "draxr",
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: "1"}}}],
        },
        "status": {"phase": "Pending"},
    }
    return state, pod


Build = Callable[[], tuple[ClusterState, Mapping[str, Any]]]


@dataclass(frozen=True)
class Cycle:
    outcome: str  # "placed on NODE", else the Unschedulable's repr
    visits: Visits


def _schedule_one(build: Build) -> Callable[[], object]:
    state, pod = build()
    state.upsert_pod(pod)
    info = PodInfo.from_api(pod, keep_object=True)
    return lambda: schedule(info, state, features=DEFAULT_FEATURES)


def measure_cycle(build: Build = small_cluster, *, warm: bool = True) -> Cycle:
    """One pod's scheduling cycle on ``build()``'s state (its pod added first). ``warm``: schedule
    a pod on another ``build()`` first, unmeasured."""
    if warm:
        _schedule_one(build)()
    decision, seen = trace_modules(_schedule_one(build))
    outcome = f"placed on {decision.node}" if isinstance(decision, Decision) else repr(decision)
    return Cycle(outcome, count_visits(seen))


# -- the report --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    schedule: Length | None
    long_functions: list[Length]
    exempt: list[Length]
    cluster_state: Length | None
    cycle: Cycle


def measure(build: Build = small_cluster) -> Report:
    entries = package_lengths()
    functions = [e for e in entries if not e.is_class]
    counted, exempt = over_limit(functions)
    return Report(
        schedule=find(functions, SCHEDULE),
        long_functions=counted,
        exempt=exempt,
        cluster_state=find((e for e in entries if e.is_class), CLUSTER_STATE),
        cycle=measure_cycle(build),
    )


def _figure(entry: Length | None) -> str:
    return "-" if entry is None else str(entry.lines)


def format_report(report: Report, top: int = 10) -> str:
    worst = report.cycle.visits.worst
    longest = report.long_functions[0].lines if report.long_functions else 0
    rows = [
        ("target", "limit", "today", ""),
        (f"1. lines of {SCHEDULE}", f"<= {SCHEDULE_LIMIT}", _figure(report.schedule), ""),
        (
            f"2. functions in draxr/core over {FUNCTION_LIMIT} lines",
            "0",
            str(len(report.long_functions)),
            f"longest {longest}" if report.long_functions else "",
        ),
        (
            "3. returns into one module, one pod's cycle",
            f"<= {RETURNS_LIMIT}",
            str(worst[1]) if worst else "-",
            worst[0] if worst else "",
        ),
        (f"4. lines of {CLUSTER_STATE}", f"< {CLUSTER_STATE_LIMIT}", _figure(report.cluster_state), ""),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}".rstrip() for r in rows]
    lines.append("")
    lines.append(f"functions over {FUNCTION_LIMIT} lines (top {top}):")
    lines += [f"  {f.lines:>4}  {f.where:<52} {f.qualname}" for f in report.long_functions[:top]] or ["  none"]
    lines += [f"  {f.lines:>4}  {f.where:<52} {f.qualname} (exempt: the allocator's search)" for f in report.exempt]
    visits = report.cycle.visits
    lines.append("")
    lines.append(
        f"one pod's cycle (small_cluster: {report.cycle.outcome}): {len(visits.sequence)} visits, "
        f"{visits.distinct} modules; most visited (visits, returns):"
    )
    lines += [f"  {n:>4} {n - 1:>4}  {m}" for m, n in visits.most(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--top", type=int, default=10, help="offenders listed (default 10)")
    args = p.parse_args(argv)
    print(format_report(measure(), top=args.top))
    return 0  # a report: the refactor is under way


if __name__ == "__main__":
    sys.exit(main())
