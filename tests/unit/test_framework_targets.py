"""draxr_dev.framework_targets (issue 35's meter): the static lengths on synthetic sources, the visit
counting on synthetic sequences and call stacks, and one real measurement of a pod's cycle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from draxr_dev import framework_targets as ft
from tests.unit.cluster_builders import cluster, pod


def _function(name: str, lines: int, *, indent: str = "") -> str:
    """A function of exactly ``lines`` lines (its def line included)."""
    body = [f"{indent}    x = {i}" for i in range(lines - 2)]
    return "\n".join([f"{indent}def {name}():", *body, f"{indent}    return x"]) + "\n"


def test_a_function_of_101_lines_is_over_the_limit_and_one_of_100_is_not() -> None:
    source = _function("long", 101) + "\n\n" + _function("limit", 100) + "\n\n" + _function("short", 3)
    found = {f.qualname: f.lines for f in ft.function_lengths(source, module="m")}
    assert found == {"long": 101, "limit": 100, "short": 3}
    counted, exempt = ft.over_limit(ft.function_lengths(source, module="m"), exempt=())
    assert [f.name for f in counted] == ["m.long"]
    assert exempt == []


def test_decorators_count_and_nested_functions_count_alone_and_in_their_parent() -> None:
    inner = _function("inner", 60, indent="    ")
    source = "@decorator\n@other(1)\ndef outer():\n" + inner + "    return inner\n"
    found = {f.qualname: (f.line, f.lines) for f in ft.function_lengths(source, module="m")}
    # outer: two decorator lines, its def line, inner's 60 lines, its return.
    assert found == {"outer": (3, 64), "outer.inner": (4, 60)}


def test_the_exemption_is_by_fully_qualified_name() -> None:
    source = "class Search:\n" + _function("run", 150, indent="    ") + _function("other", 120, indent="    ")
    functions = ft.function_lengths(source, module="pkg.alloc")
    counted, exempt = ft.over_limit(functions, exempt={"pkg.alloc.Search.run"})
    assert [f.name for f in counted] == ["pkg.alloc.Search.other"]
    assert [(f.name, f.lines) for f in exempt] == [("pkg.alloc.Search.run", 150)]
    # the same name in another module is not exempt
    elsewhere = ft.function_lengths(source, module="pkg.other")
    assert len(ft.over_limit(elsewhere, exempt={"pkg.alloc.Search.run"})[0]) == 2


def test_a_class_length_and_the_real_names_exist() -> None:
    source = "import x\n\n\n@dataclass\nclass Big:\n    a: int\n\n    def f(self):\n        return 1\n"
    entries = ft.lengths(source, module="m")
    big = ft.find(entries, "m.Big")
    assert big is not None
    assert big.is_class
    assert (big.line, big.lines) == (5, 6)
    assert ft.find(ft.function_lengths(source, module="m"), "m.Big") is None
    # the names the report looks up are still in draxr/core (a rename shows here, not as a silent "-")
    entries = ft.package_lengths()
    for name in (ft.SCHEDULE, ft.CLUSTER_STATE, *ft.ALLOCATOR_SEARCH):
        assert ft.find(entries, name) is not None, name


def test_visits_collapse_repeats_and_returns_are_visits_minus_one() -> None:
    visits = ft.count_visits(["a", "b", "b", "a", "c", "a"])
    assert visits.sequence == ("a", "b", "a", "c", "a")
    assert dict(visits.per_module) == {"a": 3, "b": 1, "c": 1}
    assert visits.returns("a") == 2
    assert visits.returns("b") == 0
    assert visits.returns("zzz") == 0
    assert visits.worst == ("a", 2)
    assert visits.distinct == 3
    # leaving the package (None) ends a visit too
    assert dict(ft.count_visits(["a", None, "a"]).per_module) == {"a": 2}
    assert ft.count_visits([]).worst is None


def _module(name: str, source: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": name, **names}
    exec(source, namespace)
    return namespace


def test_the_tracer_follows_the_innermost_module_of_the_package() -> None:
    """fake.a calls fake.b (twice, through an outsider the second time), b calls back into a."""
    outside = _module("elsewhere", "def relay(f):\n    return f()\n")
    b: dict[str, Any] = {}
    a = _module(
        "fake.a",
        "def helper():\n    return 1\n"
        "def top():\n    x = helper() + helper()\n    x += b['g']()\n    x += relay(b['g'])\n    return x\n",
        b=b,
        relay=outside["relay"],
    )
    b.update(
        _module(
            "fake.b", "def g():\n    return inner() + a_helper()\ndef inner():\n    return 1\n", a_helper=a["helper"]
        )
    )
    top: Callable[[], int] = a["top"]
    result, seen = ft.trace_modules(top, package="fake")
    assert result == 6
    visits = ft.count_visits(seen)
    # a (top, helper, helper), b (g, inner), a (helper), b (g), a, b (g, inner), a (helper), b, a
    assert visits.sequence == ("fake.a", "fake.b", "fake.a", "fake.b", "fake.a", "fake.b", "fake.a", "fake.b", "fake.a")
    assert visits.worst == ("fake.a", 4)
    assert seen[-1] is None  # control left the package at the end


def test_the_real_cycle_visits_placement() -> None:
    cycle = ft.measure_cycle(lambda: (cluster({"n1": 4, "n2": 4}), pod("p", gpus=1)))
    assert cycle.outcome.startswith("placed on n")
    visits = cycle.visits
    assert "draxr.core.placement" in visits.per_module
    assert visits.sequence[0] == "draxr.core.placement"  # the cycle starts in schedule
    assert visits.per_module["draxr.core.placement"] > 0
    assert visits.distinct > 1
    assert all(m.startswith("draxr.core") for m in visits.per_module)
    assert sum(visits.per_module.values()) == len(visits.sequence)
    # the CLI's own small cluster takes the same way as the tests' builders
    assert ft.measure_cycle().visits == visits


def test_the_report_prints_the_four_targets() -> None:
    text = ft.format_report(ft.measure())
    for needle in (ft.SCHEDULE, "over 100 lines", "returns into one module", ft.CLUSTER_STATE):
        assert needle in text
    assert ft.main([]) == 0
