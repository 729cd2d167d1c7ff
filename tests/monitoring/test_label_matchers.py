"""The labels the alerts and the dashboard select on are the labels the operator exports.

A metric name can be right and its selector still match nothing: ``result="errors"`` where the
operator writes ``result="error"``, ``sum by (reasons)`` on a metric labelled ``reason``. Every label
matcher on a draxr_ metric (``{label op "value"}``) and every ``by (...)`` label of every alert and
dashboard expression is checked against the metric's label names as operator/draxr/metrics.py (and
the cluster collector) defines them, plus the labels Prometheus' scrape adds; and every value a
matcher selects against the values the operator's code actually passes to ``.labels()`` (string
literals, found in operator/draxr's source; a label whose value the code computes takes the values
metrics.py's comment on that metric lists, each of which must be a string in the code).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase

from draxr import metrics
from draxr_dev.devcluster.binaries import REPO_ROOT

from .test_promtool import alerts, dashboard_exprs, rule_groups

SOURCE = REPO_ROOT / "operator" / "draxr"
# Labels the scrape adds (the ServiceMonitor's target labels), on every series.
TARGET_LABELS = {"job", "namespace", "pod", "instance", "service", "endpoint", "container"}
SELECTOR = re.compile(r"\b(draxr_[a-z0-9_]+)\b\s*(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")


@functools.cache
def exported_labels() -> dict[str, set[str]]:
    """Sample name -> its label names (a histogram's _bucket has le too): the metrics metrics.py
    defines and the cluster collector's families."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    found: list[tuple[str, str, set[str]]] = []
    for obj in vars(metrics).values():
        if isinstance(obj, MetricWrapperBase):
            found.append((obj._name, obj._type, set(obj._labelnames)))
    for fam in metrics.CLUSTER.describe():
        found.append((fam.name, fam.type, set(fam._labelnames)))  # type: ignore[attr-defined]
    out: dict[str, set[str]] = {}
    for name, kind, labels in found:
        out[name] = labels
        for s in suffixes.get(kind, ()):
            out[name + s] = labels | ({"le"} if s == "_bucket" else set())
    return out


def _metric_of(attr: str) -> str | None:
    obj = getattr(metrics, attr, None)
    name = getattr(obj, "_name", None)
    if name is None:
        return None
    return f"{name}_total" if getattr(obj, "_type", "") == "counter" else str(name)


@functools.cache
def documented_values() -> dict[str, set[str]]:
    """Sample name -> the values metrics.py's comment lists (``)  # a | b | c`` after the definition)."""
    text = (SOURCE / "metrics.py").read_text()
    out = {}
    for m in re.finditer(
        r'"(draxr_[a-z0-9_]+)"(?:(?!"draxr_).)*?\)\s*#\s*([\w-]+(?:\s*\|\s*[\w-]+)+)\s*$', text, re.S | re.M
    ):
        out[m.group(1)] = {v.strip() for v in m.group(2).split("|")}
    return out


@functools.cache
def code_values() -> tuple[dict[tuple[str, str], set[str]], set[tuple[str, str]], set[str]]:
    """From operator/draxr's source: (metric, label) -> the string literals passed to .labels(); the
    (metric, label) pairs given a computed value somewhere; every string constant in the code."""
    literal: dict[tuple[str, str], set[str]] = defaultdict(set)
    computed: set[tuple[str, str]] = set()
    strings: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "labels"):
                continue
            target = node.func.value
            attr = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
            metric = _metric_of(attr) if attr else None
            if metric is None:
                continue
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    literal[(metric, kw.arg)].add(kw.value.value)
                else:
                    computed.add((metric, kw.arg))
    return literal, computed, strings


@functools.cache
def known_values() -> dict[tuple[str, str], set[str] | None]:
    """(metric, label) -> the values the operator writes; None: open (computed, not listed)."""
    literal, computed, _ = code_values()
    documented = documented_values()
    out: dict[tuple[str, str], set[str] | None] = {}
    for key in set(literal) | computed:
        metric, _label = key
        if key in computed:
            listed = documented.get(metric)
            out[key] = None if listed is None else listed | literal.get(key, set())
        else:
            out[key] = set(literal[key])
    return out


@functools.cache
def expressions() -> list[tuple[str, str]]:
    return [(f"alert {a['alert']}", a["expr"]) for a in alerts(rule_groups())] + dashboard_exprs()


def problems(where: str, expr: str) -> list[str]:
    labels = exported_labels()
    values = known_values()
    out = []
    used: set[str] = set()
    for m in SELECTOR.finditer(expr):
        metric, body = m.group(1), m.group(2) or ""
        if metric not in labels:
            out.append(f"{where}: {metric} is not exported")
            continue
        used |= labels[metric]
        for label, op, value in MATCHER.findall(body):
            if label in TARGET_LABELS:
                continue
            if label not in labels[metric]:
                out.append(f"{where}: {metric} has no label {label!r} (it has {sorted(labels[metric])})")
                continue
            base = re.sub(r"_(total|bucket|sum|count|created)$", "", metric)
            known = values.get((metric, label), values.get((base, label)))
            if known is None or value == "":
                continue
            if op in ("=", "!="):
                wanted = [value]
            else:
                wanted = value.split("|") if re.fullmatch(r"[\w.-]+(\|[\w.-]+)*", value) else []
                if not wanted and not any(re.fullmatch(value, v) for v in known):
                    out.append(f"{where}: {metric}{{{label}{op}{value!r}}} matches none of {sorted(known)}")
            for v in wanted:
                if v not in known:
                    out.append(f"{where}: {metric}{{{label}{op}{value!r}}}: the operator never writes {v!r}")
    for m in BY.finditer(expr):
        for label in (x.strip() for x in m.group(1).split(",")):
            if label and label not in used | TARGET_LABELS:
                out.append(f"{where}: by/without label {label!r} is on none of its metrics ({sorted(used)})")
    return out


@pytest.mark.parametrize(("where", "expr"), expressions(), ids=[w for w, _ in expressions()])
def test_every_selected_label_is_exported(where: str, expr: str) -> None:
    assert problems(where, expr) == []


def test_the_label_values_come_from_the_code() -> None:
    values = known_values()
    # The ones the alerts select on are known (not left open).
    assert values[("draxr_schedule_attempts_total", "result")] == {"scheduled", "unschedulable", "error"}
    assert {"error", "not-synced", "steered"} <= (values[("draxr_webhook_admissions_total", "result")] or set())
    # A value metrics.py's comment lists must be a string the code has (the comment cannot drift).
    _, _, strings = code_values()
    for metric, listed in documented_values().items():
        assert listed <= strings, f"{metric}: documented values the code never writes: {listed - strings}"
    assert len(expressions()) >= 30


@pytest.mark.parametrize(
    ("expr", "wrong"),
    [
        ('sum(rate(draxr_schedule_attempts_total{result="errors"}[5m]))', "never writes 'errors'"),
        ('sum(rate(draxr_webhook_admissions_total{result=~"error|not_synced"}[5m]))', "never writes 'not_synced'"),
        ('max(draxr_oldest_pending_pod_age_seconds{resources!=""})', "has no label 'resources'"),
        ("max by (namespace, reasons) (draxr_orphaned_special_claims) > 0", "by/without label 'reasons'"),
        ('draxr_pending_pods{queue="activeQ"}', None),  # computed, not listed: any value
    ],
)
def test_the_check_catches_a_wrong_label(expr: str, wrong: str | None) -> None:
    found = problems("test", expr)
    if wrong is None:
        assert found == []
    else:
        assert len(found) == 1
        assert wrong in found[0], found


def test_exported_labels_of_the_cluster_collector() -> None:
    labels = exported_labels()
    assert labels["draxr_extended_resource_free_devices"] == {"resource", "served_by"}
    assert labels["draxr_pod_scheduling_duration_seconds_bucket"] == {"le"}
    assert labels["draxr_watch_restarts_total"] == {"watch", "reason"}


def test_source_is_the_operator() -> None:
    assert Path(metrics.__file__).resolve().parent == SOURCE.resolve()
