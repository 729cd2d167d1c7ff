"""manifests/components/monitoring checked by Prometheus' own promtool (hack/build-promtool.sh):

* the PrometheusRule's groups pass ``promtool check rules`` (syntax, PromQL, templates, lint);
* every alert has ``promtool test rules`` cases (alerts.test.yaml) in which it fires and in which it
  stays quiet, they pass, and each firing case fails once its alert can no longer fire;
* every PromQL expression of the Grafana dashboard (panels and variable queries), its Grafana
  variables substituted, parses and passes ``promtool check rules`` as a recording rule;
* every draxr_ metric the alerts and the dashboard name is one the operator exports, and the
  operator's exposition passes ``promtool check metrics``.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, generate_latest

from draxr import metrics
from draxr.cluster_metrics import Snapshot, Steps
from draxr_dev.devcluster.binaries import REPO_ROOT, ensure_promtool

COMPONENT = REPO_ROOT / "manifests" / "components" / "monitoring"
RULE = COMPONENT / "prometheusrule.yaml"
DASHBOARD = COMPONENT / "dashboards" / "draxr.json"
UNIT_TESTS = Path(__file__).parent / "alerts.test.yaml"
# Grafana's variables as a query would see them (the check: what is left must be PromQL).
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "30s",
    "$__range": "6h",
    "$job": "draxr-metrics",
}


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_promtool()


def run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rule_groups() -> dict[str, Any]:
    """The PrometheusRule's spec: a Prometheus rule file as it is."""
    rule = yaml.safe_load(RULE.read_text())
    assert rule["kind"] == "PrometheusRule"
    return {"groups": rule["spec"]["groups"]}


def alerts(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in groups["groups"] for r in g["rules"] if "alert" in r]


def write_rules(into: Path, groups: dict[str, Any]) -> Path:
    """The rule file and the unit tests side by side (alerts.test.yaml names draxr.rules.yaml)."""
    into.mkdir(parents=True, exist_ok=True)
    (into / "draxr.rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(UNIT_TESTS, into / UNIT_TESTS.name)
    return into


def test_rules_pass_promtool_check(promtool: Path, tmp_path: Path) -> None:
    d = write_rules(tmp_path, rule_groups())
    out = run(promtool, "check", "rules", "draxr.rules.yaml", cwd=d)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alerts(rule_groups()))} rules found" in out.stdout, out.stdout


def test_rules_check_can_fail(promtool: Path, tmp_path: Path) -> None:
    groups = rule_groups()
    alerts(groups)[0]["expr"] = "sum by (namespace (up)"
    d = write_rules(tmp_path, groups)
    out = run(promtool, "check", "rules", "draxr.rules.yaml", cwd=d)
    assert out.returncode != 0, out.stdout


def test_alert_unit_tests_pass(promtool: Path, tmp_path: Path) -> None:
    d = write_rules(tmp_path, rule_groups())
    out = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=d)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout, out.stdout


def _cases(alertname: str) -> Iterator[list[Any]]:
    for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test") or ():
            if case["alertname"] == alertname:
                yield case.get("exp_alerts") or []


def test_every_alert_has_firing_and_quiet_cases() -> None:
    names = [a["alert"] for a in alerts(rule_groups())]
    assert len(names) == len(set(names)) >= 9
    tested = {c["alertname"] for t in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for c in t["alert_rule_test"]}
    assert tested == set(names), f"tests for unknown alerts: {tested - set(names)}; untested: {set(names) - tested}"
    for name in names:
        expected = list(_cases(name))
        assert any(expected), f"{name}: no case in which it fires"
        assert any(not e for e in expected), f"{name}: no case in which it stays quiet"


@pytest.mark.parametrize("alertname", [a["alert"] for a in alerts(rule_groups())])
def test_each_firing_case_fails_when_its_alert_cannot_fire(promtool: Path, tmp_path: Path, alertname: str) -> None:
    """The unit tests can fail: with the alert's expression made one that never fires (and the
    others as they are), ``promtool test rules`` fails, naming that alert."""
    groups = rule_groups()
    [rule] = [a for a in alerts(groups) if a["alert"] == alertname]
    rule["expr"] = "vector(1) > 2"
    d = write_rules(tmp_path, groups)
    out = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=d)
    assert out.returncode != 0, out.stdout
    assert f"alertname: {alertname}" in out.stdout + out.stderr, out.stdout + out.stderr


# ---- the dashboard ---------------------------------------------------------------------------------


def dashboard_exprs() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable, Grafana's variables substituted."""
    dash = json.loads(DASHBOARD.read_text())
    found: list[tuple[str, str]] = []

    def visit(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            for t in p.get("targets") or ():
                found.append((f"panel {p['id']} ({p['title']}) {t['refId']}", t["expr"]))
            visit(p.get("panels") or [])

    visit(dash["panels"])
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["definition"])
            assert m is not None, v["definition"]
            found.append((f"variable {v['name']}", m.group(1)))
    out = []
    for where, expr in found:
        for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
            expr = expr.replace(name, value)
        assert "$" not in expr, f"{where}: a Grafana variable the check does not know: {expr}"
        out.append((where, expr))
    return out


def dashboard_rules(exprs: list[tuple[str, str]]) -> dict[str, Any]:
    rules = [{"record": f"draxr_dashboard:expr_{i}", "expr": e} for i, (_, e) in enumerate(exprs)]
    return {"groups": [{"name": "draxr-dashboard", "rules": rules}]}


def test_dashboard_covers_what_the_issue_asks() -> None:
    text = " ".join(e for _, e in dashboard_exprs())
    for metric in (
        "draxr_schedule_attempts_total",  # scheduling rate
        "draxr_pod_scheduling_duration_seconds_bucket",  # latency
        "draxr_pending_pods",  # queue depth
        "draxr_resourceclaim_creates_total",  # claims created
        "draxr_resourceclaims_released_total",  # and released
        "draxr_webhook_admissions_total",  # webhook admissions
        "draxr_webhook_duration_seconds_bucket",  # and latency
        "draxr_watch_last_event_age_seconds",  # watch health
        "draxr_extended_resource_devices",  # capacity per extended resource
        "draxr_extended_resource_free_devices",
    ):
        assert re.search(rf"\b{metric}\b", text), metric


def test_dashboard_exprs_pass_promtool_check(promtool: Path, tmp_path: Path) -> None:
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(dashboard_rules(exprs), sort_keys=False))
    out = run(promtool, "check", "rules", "dashboard.rules.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout, out.stdout


def test_dashboard_check_can_fail(promtool: Path, tmp_path: Path) -> None:
    exprs = [*dashboard_exprs(), ("broken", "histogram_quantile(0.99, sum by (le) (rate(x[1m]))")]
    (tmp_path / "dashboard.rules.yaml").write_text(yaml.safe_dump(dashboard_rules(exprs), sort_keys=False))
    out = run(promtool, "check", "rules", "dashboard.rules.yaml", cwd=tmp_path)
    assert out.returncode != 0, out.stdout


# ---- the metrics they name --------------------------------------------------------------------------


def exported_names() -> set[str]:
    """Every sample name the operator's registry can expose (histogram and counter suffixes too)."""
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created")}
    names: set[str] = set()
    families = [*REGISTRY.collect(), *metrics.CLUSTER.describe()]
    for fam in families:
        names.add(fam.name)
        names.update(fam.name + s for s in suffixes.get(fam.type, ()))
    return names


def test_every_metric_named_is_exported() -> None:
    exported = exported_names()
    texts = [RULE.read_text(), DASHBOARD.read_text()]
    named = {m for t in texts for m in re.findall(r"\bdraxr_[a-z0-9_]+\b", t)}
    assert len(named) >= 20, named
    assert named <= exported, f"named but not exported: {sorted(named - exported)}"
    assert "draxr_no_such_metric" not in exported


def test_exposition_passes_promtool_check_metrics(promtool: Path, tmp_path: Path) -> None:
    """The operator's /metrics as it looks with every family present (lint: names, units, help)."""
    metrics.LEADER.labels(name="draxr").set(1)
    metrics.WEBHOOK_CERT_EXPIRY.labels(secret="draxr-webhook-tls").set(1.9e9)
    snap = Snapshot(
        total={("example.com/gpu", "DRA"): 8},
        allocated={("example.com/gpu", "DRA"): 2},
        free={("example.com/gpu", "DRA"): 6},
        oldest_pending={"example.com/gpu": 12.0},
        pending={"example.com/gpu": 1},
        orphans={"pod-gone": 0, "pod-finished": 0},
    )

    def source() -> Steps:
        yield
        return snap

    async def exposition() -> bytes:
        metrics.CLUSTER.attach(source, asyncio.get_running_loop())
        try:
            return generate_latest(REGISTRY)
        finally:
            metrics.CLUSTER.detach(source)

    text = asyncio.run(exposition())
    assert b'draxr_extended_resource_free_devices{resource="example.com/gpu",served_by="DRA"} 6.0' in text
    out = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, timeout=60, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr).decode()
    # The lint can fail: a counter without _total.
    bad = b"# HELP draxr_bad x\n# TYPE draxr_bad counter\ndraxr_bad 1\n"
    out = subprocess.run([str(promtool), "check", "metrics"], input=bad, capture_output=True, timeout=60, check=False)
    assert out.returncode != 0
    assert b"_total" in out.stdout + out.stderr
