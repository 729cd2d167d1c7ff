"""The Helm chart (manifests/helm/draxr): its generated files are fresh, it lints clean, its
default values render exactly the objects of ``kubectl kustomize manifests/`` (the Namespace aside,
which ``helm install`` needs beforehand), its values reach the objects and the operator's settings,
and ``helm install`` into a real control plane creates objects whose RBAC carries the operator,
run with the chart's ServiceAccount token, through a scenario (webhook, claim, binding, release).

Only the last test starts a control plane; the others need helm and kubectl (``kubectl kustomize``).
The Deployment's pod is admitted (restricted Pod Security Standard) but never runs: no kube-scheduler
in that control plane, and no image; the operator runs as a local process with the chart's token.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from draxr.core.scheduler_config import load as load_scheduler_config
from draxr.core.steering import STEERED_ANNOTATION
from draxr.kube import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIMS,
    ApiException,
    Kube,
    Resource,
)
from draxr.settings import Settings
from draxr.webhook_tls import MUTATING_WEBHOOKS, SECRETS
from draxr_dev import helmchart
from draxr_dev.devcluster import fakedriver
from draxr_dev.devcluster.binaries import ensure_binaries, ensure_helm
from draxr_dev.devcluster.controlplane import RUN_FOR_ANNOTATION, ControlPlane, Options, free_port

from . import manifests
from .clusters import extra_control_plane, service_account_dir
from .helpers import NAMESPACE, Draxr, eventually

CHART = helmchart.CHART
Obj = dict[str, Any]
ObjKey = tuple[str, str, str, str]  # apiVersion, kind, namespace, name
# What a permission problem looks like in the operator's log (as test_install.py).
REFUSALS = ("forbidden", "api request refused", "not enough permissions", "(403)", '"status": 403')
LEASES = Resource("coordination.k8s.io", "v1", "leases", True)
DEPLOYMENTS = Resource("apps", "v1", "deployments", True)
# helm's cache, config and data directories for the tests that need no cluster; removed at exit.
HELM_HOME = Path(tempfile.mkdtemp(prefix="draxr-helm-home."))
atexit.register(shutil.rmtree, HELM_HOME, ignore_errors=True)
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False)


def kubectl_bin() -> Path:
    return ensure_binaries() / "kubectl"


def helm(*args: str, kubeconfig: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """helm with its state (cache, config, data) in ``home`` or a throw-away directory, never ~."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HELM_", "KUBECONFIG"))}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    base = home or HELM_HOME
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        env[var] = str(base / sub)
    return subprocess.run(
        [str(ensure_helm()), *args], env=env, capture_output=True, text=True, timeout=300, check=False
    )


def parse(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def render(*values: str, chart: Path | str = CHART, namespace: str = NAMESPACE) -> list[Obj]:
    """``helm template`` with ``--set`` for each of ``values``, CRDs included."""
    sets = [a for v in values for a in ("--set", v)]
    out = helm("template", "draxr", str(chart), "--namespace", namespace, "--include-crds", *sets)
    assert out.returncode == 0, out.stderr
    return parse(out.stdout)


def render_fails(*values: str) -> str:
    sets = [a for v in values for a in ("--set", v)]
    out = helm("template", "draxr", str(CHART), "--namespace", NAMESPACE, *sets)
    assert out.returncode != 0, f"rendered with {values}:\n{out.stdout[:2000]}"
    return out.stderr


def by_key(objs: list[Obj]) -> dict[ObjKey, Obj]:
    out: dict[ObjKey, Obj] = {}
    for o in objs:
        k = (o["apiVersion"], o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        assert k not in out, f"rendered twice: {k}"
        out[k] = o
    return out


def kinds_names(objs: dict[ObjKey, Obj]) -> set[tuple[str, str]]:
    return {(k[1], k[3]) for k in objs}


def only(objs: list[Obj], kind: str, name: str) -> Obj:
    [o] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


def container(objs: list[Obj]) -> Obj:
    [c] = only(objs, "Deployment", "draxr")["spec"]["template"]["spec"]["containers"]
    return c


def env_of(objs: list[Obj]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(objs)["env"] if "value" in e}


def assert_same(helm_objs: dict[ObjKey, Obj], kustomize_objs: dict[ObjKey, Obj]) -> None:
    assert sorted(helm_objs) == sorted(kustomize_objs)
    for k, want in kustomize_objs.items():
        assert helm_objs[k] == want, f"{k} differs:\nhelm: {helm_objs[k]}\nkustomize: {want}"


@pytest.fixture(scope="module")
def kustomized() -> dict[ObjKey, Obj]:
    return by_key(helmchart.rendered_base(kubectl_bin()))


# ---- one source of truth --------------------------------------------------------------------------


def test_generated_files_are_fresh(tmp_path: Path) -> None:
    """The chart's CRDs, RBAC and webhook templates are what hack/gen-helm-chart.sh makes from
    manifests/ and crds/ now; a hand edit of a generated file (or a changed manifest) is found."""
    kubectl = kubectl_bin()
    assert helmchart.stale(kubectl) == [], "\n".join(helmchart.stale(kubectl))
    generated = set(helmchart.generate(kubectl))
    assert {
        "crds/extendedresourcemappings.draxr.io.yaml",
        "templates/clusterrole.yaml",
        "templates/clusterrolebinding.yaml",
        "templates/leader-election-rbac.yaml",
        "templates/webhook.yaml",
        "templates/webhook-rbac.yaml",
        "templates/cert-manager.yaml",
        "templates/servicemonitor.yaml",
        "templates/prometheusrule.yaml",
        "templates/dashboard.yaml",
        "crds/devicepluginrecords.draxr.io.yaml",
        "templates/node-agent-namespace.yaml",
        "templates/node-agent-rbac.yaml",
        "templates/node-agent-policy.yaml",
        "templates/node-agent-daemonset.yaml",
    } <= generated
    assert "templates/deployment.yaml" not in generated

    # The check can fail: a copy of the chart with one rule changed by hand, and one with a
    # generated file that the generator no longer makes.
    copy = tmp_path / "draxr"
    shutil.copytree(CHART, copy)
    role = copy / "templates" / "clusterrole.yaml"
    role.write_text(role.read_text().replace("- pods/binding", "- pods/eviction"))
    extra = copy / "templates" / "old.yaml"
    extra.write_text(helmchart.GENERATED_MARK + " from manifests/old.yaml\n")
    problems = helmchart.stale(kubectl, copy)
    assert len(problems) == 2, problems
    assert "templates/clusterrole.yaml" in problems[0], problems[0]
    assert "+  - pods/binding" in problems[0], problems[0]
    assert problems[1].startswith("templates/old.yaml: generated once"), problems[1]


def test_default_values_render_the_kustomize_objects(kustomized: dict[ObjKey, Obj]) -> None:
    """Same kinds, names, namespaces and content, object for object (RBAC rules, webhook, CRD,
    Deployment); the one difference is the Namespace, which helm install needs to exist first."""
    rendered = by_key(render())
    ns_key = ("v1", "Namespace", "", NAMESPACE)
    assert ns_key in kustomized
    assert_same(rendered, {k: v for k, v in kustomized.items() if k != ns_key})
    # With namespace.create the equality is exact.
    assert_same(by_key(render("namespace.create=true")), kustomized)
    # Nothing is added: no Helm labels or annotations on any object.
    for obj in rendered.values():
        assert not any(k.startswith(("helm.sh/", "meta.helm.sh/")) for k in obj["metadata"].get("labels", {}))
    # The image tag is the chart's appVersion, which is the package's version.
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    pyproject = tomllib.loads((helmchart.REPO_ROOT / "pyproject.toml").read_text())
    assert chart["appVersion"] == pyproject["project"]["version"]
    roles = {k[3]: v["rules"] for k, v in rendered.items() if k[1] in ("ClusterRole", "Role")}
    assert set(roles) == {"draxr", "draxr-leader-election", "draxr-webhook-certs", "draxr-webhook"}


def test_cert_manager_renders_the_component(kustomized: dict[ObjKey, Obj]) -> None:
    """certManager.enabled renders what manifests/ with components/cert-manager renders."""
    want = by_key(helmchart.rendered_cert_manager(kubectl_bin()))
    assert ("cert-manager.io/v1", "Certificate", NAMESPACE, "draxr-webhook") in want
    got = by_key(render("certManager.enabled=true", "namespace.create=true"))
    assert_same(got, want)


MONITORING = (
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
)


def test_monitoring_renders_the_component(kustomized: dict[ObjKey, Obj]) -> None:
    """metrics.serviceMonitor/prometheusRule/dashboard render what manifests/ with
    components/monitoring renders: the alerts' and the dashboard's own template text
    (``{{ $labels.resource }}``, ``{{queue}}``) comes out as it is."""
    want = by_key(helmchart.rendered_monitoring(kubectl_bin()))
    added = {k[1:] for k in set(want) - set(kustomized)}
    assert added == {
        ("ServiceMonitor", NAMESPACE, "draxr"),
        ("PrometheusRule", NAMESPACE, "draxr"),
        ("ConfigMap", NAMESPACE, "draxr-dashboard"),
    }
    got = by_key(render(*MONITORING, "namespace.create=true"))
    assert_same(got, want)
    rule = only(list(got.values()), "PrometheusRule", "draxr")
    texts = json.dumps(rule)
    assert "{{ $labels.resource }}" in texts
    assert "`" not in texts
    dashboard = only(list(got.values()), "ConfigMap", "draxr-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert '"legendFormat": "{{queue}}"' in dashboard["data"]["draxr.json"]
    # Each switch renders its own object only.
    for value, kind in zip(MONITORING, ("ServiceMonitor", "PrometheusRule", "ConfigMap"), strict=True):
        alone = kinds_names(by_key(render(value))) - kinds_names(kustomized)
        assert {k for k, _ in alone} == {kind}, (value, alone)


NODE_AGENT = "draxr-node-agent"


def test_node_agent_renders_the_component(kustomized: dict[ObjKey, Obj]) -> None:
    """nodeAgent.enabled renders what manifests/ with components/node-agent renders (its namespace,
    RBAC, admission policy and DaemonSet); its values reach the DaemonSet; the operator's own role
    reads the records either way."""
    want = by_key(helmchart.rendered_node_agent(kubectl_bin()))
    added = {k[1:] for k in set(want) - set(kustomized)}
    assert added == {
        ("Namespace", "", NODE_AGENT),
        ("ServiceAccount", NODE_AGENT, NODE_AGENT),
        ("ClusterRole", "", NODE_AGENT),
        ("ClusterRoleBinding", "", NODE_AGENT),
        ("ValidatingAdmissionPolicy", "", NODE_AGENT),
        ("ValidatingAdmissionPolicyBinding", "", NODE_AGENT),
        ("DaemonSet", NODE_AGENT, NODE_AGENT),
    }
    assert_same(by_key(render("nodeAgent.enabled=true", "namespace.create=true")), want)
    # Off by default.
    assert not [k for k in by_key(render()) if NODE_AGENT in k[3]]
    objs = render(
        "nodeAgent.enabled=true",
        "nodeAgent.refreshSeconds=60",
        "nodeAgent.pollSeconds=1",
        "nodeAgent.tolerations[0].operator=Exists",
        "nodeAgent.resources.limits.memory=512Mi",
        "image.repository=registry.example/draxr",
        "image.tag=1.2.3",
        namespace="gpu-ops",
    )
    ds = only(objs, "DaemonSet", NODE_AGENT)
    assert ds["metadata"]["namespace"] == NODE_AGENT  # its own (privileged) namespace, not the release's
    pod = ds["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["args"] == ["--refresh-seconds=60", "--poll-seconds=1"]
    assert c["image"] == "registry.example/draxr:1.2.3"
    assert c["resources"]["limits"] == {"cpu": "200m", "memory": "512Mi"}
    assert pod["tolerations"] == [{"operator": "Exists"}]
    roles = {o["metadata"]["name"]: o["rules"] for o in render() if o["kind"] == "ClusterRole"}
    assert {"apiGroups": ["draxr.io"], "resources": ["devicepluginrecords"], "verbs": ["list", "watch"]} in (
        roles["draxr"]
    )


def test_lint_is_clean() -> None:
    for values in (
        (),
        ("webhook.enabled=false",),
        ("certManager.enabled=true", *MONITORING, "namespace.create=true"),
        ("nodeAgent.enabled=true",),
        ("leaderElection.enabled=false", "replicas=1"),
    ):
        sets = [a for v in values for a in ("--set", v)]
        out = helm("lint", "--strict", "--namespace", NAMESPACE, str(CHART), *sets)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in out.stdout, out.stdout
        # Nothing but the one recommendation there is nothing to answer with (no icon to point at).
        findings = [line for line in out.stdout.splitlines() if line.startswith("[")]
        assert findings == ["[INFO] Chart.yaml: icon is recommended"], out.stdout


def test_packaged_chart_renders_the_same(tmp_path: Path) -> None:
    """``helm package`` keeps everything (CRDs, schema, generated templates): the archive renders
    the same objects as the directory."""
    out = helm("package", str(CHART), "--destination", str(tmp_path))
    assert out.returncode == 0, out.stderr
    [archive] = tmp_path.glob("draxr-*.tgz")
    assert archive.name == "draxr-0.1.0-dev.0.tgz"
    assert by_key(render(chart=archive)) == by_key(render())


# ---- values -------------------------------------------------------------------------------------


def test_values_reach_the_objects() -> None:
    objs = render(
        "image.repository=registry.example/draxr",
        "image.tag=1.2.3",
        "image.pullPolicy=Always",
        "replicas=3",
        "schedulerName=gpu-sched",
        "leaderElection.leaseName=gpu-lease",
        "leaderElection.leaseDurationSeconds=30",
        "leaderElection.renewDeadlineSeconds=20",
        "leaderElection.retryPeriodSeconds=4",
        "webhook.failurePolicy=Fail",
        "webhook.timeoutSeconds=5",
        "webhook.namespaceSelector.matchLabels.team=ml",
        "webhook.port=10443",
        "metrics.port=9090",
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
        "metrics.serviceMonitor.interval=15s",
        "metrics.serviceMonitor.scrapeTimeout=10s",
        "metrics.prometheusRule.enabled=true",
        "metrics.prometheusRule.labels.release=prom",
        "metrics.dashboard.enabled=true",
        "metrics.dashboard.labels.grafana_folder=gpu",
        "resources.limits.memory=2Gi",
        "extraArgs={--log-level,debug}",
        "extraEnv[0].name=DRAXR_CLIENT_QPS",
        "extraEnv[0].value=50",
        "extraEnv[1].name=NODE",
        "extraEnv[1].valueFrom.fieldRef.fieldPath=spec.nodeName",
        "nodeSelector.pool=system",
        "tolerations[0].key=dedicated",
        "tolerations[0].operator=Exists",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "priorityClassName=system-cluster-critical",
    )
    dep = only(objs, "Deployment", "draxr")
    pod_spec = dep["spec"]["template"]["spec"]
    c = container(objs)
    assert dep["spec"]["replicas"] == 3
    assert c["image"] == "registry.example/draxr:1.2.3"
    assert c["imagePullPolicy"] == "Always"
    assert c["args"] == ["--log-level", "debug"]
    # The scheduler configuration follows the scheduler name, and draxr accepts it.
    text = only(objs, "ConfigMap", "draxr-scheduler-config")["data"]["scheduler-config.yaml"]
    assert load_scheduler_config(text, "gpu-sched").profile.scheduler_name == "gpu-sched"
    assert {"name": "DRAXR_CONFIG", "value": "/etc/draxr/scheduler-config.yaml"} in c["env"]
    assert c["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}
    env = env_of(objs)
    assert env["DRAXR_SCHEDULER_NAME"] == "gpu-sched"
    assert env["DRAXR_LEADER_ELECTION_LEASE_NAME"] == "gpu-lease"

    # The Lease Role's get and update follow the Lease's name: the values' name, else the scheduler's.
    def lease_names(objs: list[dict[str, Any]]) -> list[list[str]]:
        rules = only(objs, "Role", "draxr-leader-election")["rules"]
        return [r.get("resourceNames", []) for r in rules]

    assert lease_names(objs) == [["gpu-lease"], []]
    assert lease_names(render("schedulerName=gpu-sched")) == [["gpu-sched"], []]
    assert lease_names(render()) == [["draxr"], []]
    assert (env["DRAXR_LEASE_DURATION_SECONDS"], env["DRAXR_RENEW_DEADLINE_SECONDS"]) == ("30", "20")
    assert env["DRAXR_RETRY_PERIOD_SECONDS"] == "4"
    assert (env["DRAXR_WEBHOOK_PORT"], env["DRAXR_METRICS_PORT"], env["DRAXR_CLIENT_QPS"]) == ("10443", "9090", "50")
    # extraEnv comes last (it can refer to the others), a number as a string, valueFrom as it is.
    assert c["env"][-2:] == [
        {"name": "DRAXR_CLIENT_QPS", "value": "50"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9090, "health": 8081, "webhook": 10443}
    assert pod_spec["nodeSelector"] == {"pool": "system"}
    assert pod_spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod_spec["affinity"]["nodeAffinity"]
    assert pod_spec["priorityClassName"] == "system-cluster-critical"
    [hook] = only(objs, "MutatingWebhookConfiguration", "draxr")["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["timeoutSeconds"] == 5
    assert hook["namespaceSelector"] == {"matchLabels": {"draxr.io/enabled": "true", "team": "ml"}}
    assert hook["clientConfig"]["service"] == {
        "name": "draxr-webhook",
        "namespace": NAMESPACE,
        "path": "/mutate-pods",
        "port": 443,
    }
    svc = only(objs, "Service", "draxr-metrics")
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9090, "protocol": "TCP", "targetPort": "metrics"}]
    monitor = only(objs, "ServiceMonitor", "draxr")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/name"] == "draxr"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    assert "namespaceSelector" not in monitor["spec"]  # its own namespace, the release's
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert only(objs, "PrometheusRule", "draxr")["metadata"]["labels"]["release"] == "prom"
    dashboard_labels = only(objs, "ConfigMap", "draxr-dashboard")["metadata"]["labels"]
    assert (dashboard_labels["grafana_dashboard"], dashboard_labels["grafana_folder"]) == ("1", "gpu")
    # Its selector matches the metrics Service.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()


def test_scheduler_config_value_is_the_file() -> None:
    """The value schedulerConfig is the ConfigMap's file as it is (here: bin-packing with a GPU),
    and draxr reads it so."""
    objs = render(
        "schedulerConfig.apiVersion=kubescheduler.config.k8s.io/v1",
        "schedulerConfig.kind=KubeSchedulerConfiguration",
        "schedulerConfig.profiles[0].schedulerName=draxr",
        "schedulerConfig.profiles[0].pluginConfig[0].name=NodeResourcesFit",
        "schedulerConfig.profiles[0].pluginConfig[0].args.scoringStrategy.type=MostAllocated",
        "schedulerConfig.profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].name=example.com/gpu",
        "schedulerConfig.profiles[0].pluginConfig[0].args.scoringStrategy.resources[0].weight=3",
    )
    text = only(objs, "ConfigMap", "draxr-scheduler-config")["data"]["scheduler-config.yaml"]
    profile = load_scheduler_config(text, "draxr").profile
    assert str(profile.fit.type) == "MostAllocated"
    assert [(r.name, r.weight) for r in profile.fit.resources] == [("example.com/gpu", 3)]


def test_switches_remove_what_they_turn_off() -> None:
    full = kinds_names(by_key(render()))
    off = render("webhook.enabled=false", "leaderElection.enabled=false", "replicas=1")
    gone = full - kinds_names(by_key(off))
    assert gone == {
        ("Service", "draxr-webhook"),
        ("MutatingWebhookConfiguration", "draxr"),
        ("Role", "draxr-webhook-certs"),
        ("RoleBinding", "draxr-webhook-certs"),
        ("ClusterRole", "draxr-webhook"),
        ("ClusterRoleBinding", "draxr-webhook"),
        ("Role", "draxr-leader-election"),
        ("RoleBinding", "draxr-leader-election"),
    }
    env = env_of(off)
    assert "DRAXR_WEBHOOK_PORT" not in env  # the operator's default: no webhook server
    assert env["DRAXR_LEADER_ELECT"] == "false"
    assert [p["name"] for p in container(off)["ports"]] == ["metrics", "health"]
    # cert-manager without the webhook: nothing of it.
    assert not [
        o for o in render("webhook.enabled=false", "certManager.enabled=true") if "cert-manager" in o["apiVersion"]
    ]
    # The url clientConfig replaces the Service.
    [hook] = only(render("webhook.url=https://127.0.0.1:9443/mutate-pods"), "MutatingWebhookConfiguration", "draxr")[
        "webhooks"
    ]
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:9443/mutate-pods"}
    # The release's namespace everywhere a namespace is named.
    other = render("certManager.enabled=true", *MONITORING, namespace="gpu-ops")
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "MutatingWebhookConfiguration")
    namespaced = [o for o in other if o["kind"] not in cluster_scoped]
    assert len(namespaced) == 14, [o["kind"] for o in namespaced]
    assert {o["metadata"].get("namespace") for o in namespaced} == {"gpu-ops"}, [
        (o["kind"], o["metadata"].get("namespace")) for o in namespaced
    ]
    assert "draxr-system" not in yaml.safe_dump_all(other)
    assert only(other, "Certificate", "draxr-webhook")["spec"]["dnsNames"][0] == "draxr-webhook.gpu-ops.svc"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (("leaderElection.enabled=false",), "set replicas to 1"),
        (("podSecurityContext.runAsNonRoot=false",), "runAsNonRoot"),
        (("securityContext.allowPrivilegeEscalation=true",), "allowPrivilegeEscalation"),
        (("securityContext.privileged=true",), "privileged"),
        (("webhook.failurePolicy=Sometimes",), "failurePolicy"),
        (("webhook.url=http://127.0.0.1:9443/",), "url"),
        (("replica=2",), "replica"),  # a typo in a key is refused, not ignored
        (("nodeAgent.refreshSeconds=0",), "refreshSeconds"),
        (
            ("schedulerConfig.profiles[0].schedulerName=other",),
            "schedulerConfig has no profile with schedulerName draxr",
        ),
    ],
)
def test_unsafe_or_unknown_values_are_refused(values: tuple[str, ...], message: str) -> None:
    assert message in render_fails(*values)


@pytest.mark.parametrize(
    "values",
    [
        (),
        ("leaderElection.enabled=false", "replicas=1", "webhook.enabled=false"),
        ("certManager.enabled=true", "schedulerName=gpu", "leaderElection.leaseDurationSeconds=20"),
    ],
)
def test_rendered_environment_is_valid_operator_settings(
    values: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every DRAXR_* variable the chart sets is a setting of ``draxr run`` and parses to the value
    asked for (a misspelt variable would be ignored by the operator, silently)."""
    objs = render(*values)
    env = env_of(objs)
    for name in list(os.environ):
        if name.startswith("DRAXR_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        assert name.startswith("DRAXR_"), name
        assert name.removeprefix("DRAXR_").lower() in Settings.model_fields, name
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    s = Settings()
    assert s.scheduler_name == env["DRAXR_SCHEDULER_NAME"]
    assert (s.metrics_port, s.health_port) == (8080, 8081)
    assert s.leader_elect is ("leaderElection.enabled=false" not in values)
    assert s.webhook_port == (0 if "webhook.enabled=false" in values else 9443)
    assert s.webhook_self_signed is ("certManager.enabled=true" not in values)
    assert s.lease_duration_seconds == (20.0 if "leaderElection.leaseDurationSeconds=20" in values else 15.0)
    # The Lease the operator uses is in the release's namespace, where the chart's Role grants it.
    assert s.leader_election_namespace == NAMESPACE


# ---- helm install into a real control plane ------------------------------------------------------


@pytest.fixture(scope="module")
def helm_cluster() -> Iterator[ControlPlane]:
    """A control plane of its own (the session's has manifests/ applied, whose objects helm would
    refuse to adopt): no resourceclaim controller (draxr alone releases claims), no kube-scheduler
    (the Deployment's pod stays Pending)."""
    with extra_control_plane("helm", Options(kwok=True, kcm_controllers="*,-resourceclaim-controller")) as cp:
        yield cp


@pytest.fixture(scope="module")
async def helm_kube(helm_cluster: ControlPlane) -> AsyncIterator[Kube]:
    async with await Kube.from_kubeconfig(helm_cluster.kubeconfig) as k:
        yield k


async def _gone(kube: Kube, res: Resource, name: str, namespace: str | None = None) -> bool:
    try:
        await kube.get(res, name, namespace)
    except ApiException as e:
        return e.status == 404
    return False


async def test_helm_install_creates_the_objects_and_its_rbac_carries_the_operator(
    helm_cluster: ControlPlane, helm_kube: Kube, names: str, tmp_path: Path
) -> None:
    cp, kube, home = helm_cluster, helm_kube, tmp_path / "helm"
    port = free_port()
    # The webhook's clientConfig by url, on the operator's loopback listener (nothing here may
    # connect to a Service IP); everything else is the defaults.
    values = [f"webhook.url={manifests.webhook_url(port)}"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # The values go to install and upgrade only (status, get and uninstall refuse --set).
        sets = [a for v in values for a in ("--set", v)] if args[0] in ("install", "upgrade") else []
        out = helm(*args, "--namespace", NAMESPACE, *sets, kubeconfig=cp.kubeconfig, home=home)
        assert out.returncode == 0, out.stdout + out.stderr
        return out

    # The README's steps: the namespace, labelled for the restricted Pod Security Standard, then install.
    created = await asyncio.to_thread(manifests.kubectl, cp, "create", "namespace", NAMESPACE)
    assert created.returncode == 0, created.stderr
    labelled = await asyncio.to_thread(
        manifests.kubectl, cp, "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
    )
    assert labelled.returncode == 0, labelled.stderr
    await asyncio.to_thread(run, "install", "draxr", str(CHART), "--wait=false")
    status = await asyncio.to_thread(run, "status", "draxr", "-o", "json")
    assert json.loads(status.stdout)["info"]["status"] == "deployed", status.stdout[:500]

    # Every object of the chart exists, with the content the chart renders.
    want = render(*values)
    assert len(want) == 16, [(o["kind"], o["metadata"]["name"]) for o in want]  # manifests/ less its Namespace
    for obj in want:
        group = obj["apiVersion"].rpartition("/")[0]
        where = ["-n", obj["metadata"]["namespace"]] if "namespace" in obj["metadata"] else []
        kind = f"{obj['kind'].lower()}.{group}" if group else obj["kind"].lower()
        got = await asyncio.to_thread(manifests.kubectl, cp, "get", kind, obj["metadata"]["name"], *where, "-o", "yaml")
        assert got.returncode == 0, f"{obj['kind']}/{obj['metadata']['name']}: {got.stderr}"
        live = yaml.safe_load(got.stdout)
        if obj["kind"] in ("ClusterRole", "Role"):
            assert live["rules"] == obj["rules"]
        if obj["kind"] != "CustomResourceDefinition":  # helm applies crds/ as they are, unlabelled by it
            assert live["metadata"]["annotations"]["meta.helm.sh/release-name"] == "draxr"
    rules = (await kube.get(CLUSTER_ROLES, "draxr"))["rules"]
    assert rules == only(want, "ClusterRole", "draxr")["rules"]
    crb = await kube.get(CLUSTER_ROLE_BINDINGS, "draxr")
    assert crb["subjects"] == [{"kind": "ServiceAccount", "name": "draxr", "namespace": NAMESPACE}]

    # The ReplicaSet's pod is admitted by the restricted namespace (no kube-scheduler: it stays Pending).
    async def admitted() -> list[Obj]:
        return await kube.list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=draxr")

    [draxr_pod, *_] = await eventually(admitted, timeout=60)
    assert draxr_pod["spec"]["serviceAccountName"] == "draxr"

    # The operator with the chart's ServiceAccount token: leader election, the webhook's
    # certificate and caBundle, steering, the claim, the binding and the release, never refused.
    fleet = fakedriver.Fleet(
        prefix=names,
        dra_nodes=1,
        devices_per_node=2,
        driver=f"{names}.example.com",
        classes={f"{names}-gpu": f"{names}.example.com/gpu"},
    )
    objs = fleet.manifests()
    ns, scheduler, ext = names, "draxr", f"{names}.example.com/gpu"
    draxr: Draxr | None = None
    try:
        await kube.create(
            NAMESPACES,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"draxr.io/enabled": "true"}}},
        )
        await fakedriver.apply(kube, objs)
        sa_dir = await service_account_dir(kube, cp, NAMESPACE, "draxr", tmp_path / "sa")
        webhook = ["--webhook-port", str(port), "--webhook-namespace", NAMESPACE, "--webhook-extra-hosts", "127.0.0.1"]
        draxr = Draxr(cp, sa_dir, scheduler, tmp_path / "draxr.log", health=True, extra=webhook)
        await fakedriver.wait_nodes_ready(kube, fleet.node_names())

        async def trusted() -> bool:
            config = await kube.get(MUTATING_WEBHOOKS, "draxr")
            return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])

        await draxr.until(trusted)
        assert (await kube.get(SECRETS, "draxr-webhook-tls", NAMESPACE))["data"]["tls.crt"]
        lease = await kube.get(LEASES, scheduler, NAMESPACE)
        assert lease["spec"]["holderIdentity"]

        # An unmodified pod in the opted-in namespace: the chart's webhook steers it to draxr.
        unmodified = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "job", "annotations": {RUN_FOR_ANNOTATION: "2s"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "registry.invalid/app:1", "resources": {"limits": {ext: "2"}}}
                ],
            },
        }

        async def create_steered() -> Obj | None:
            # The API server may not call the webhook until it has the caBundle: retry until steered.
            p = await kube.create(PODS, unmodified, ns)
            if p["spec"].get("schedulerName") == scheduler:
                return p
            await kube.delete_if_exists(PODS, "job", ns)
            await eventually(lambda: _gone(kube, PODS, "job", ns), timeout=30)
            return None

        steered = await draxr.until(create_steered)
        assert STEERED_ANNOTATION in steered["metadata"]["annotations"]

        async def bound() -> Obj | None:
            p = await kube.get(PODS, "job", ns)
            return p if p["spec"].get("nodeName") and p.get("status", {}).get("extendedResourceClaimStatus") else None

        p = await draxr.until(bound)
        claim_name = p["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = await kube.get(RESOURCE_CLAIMS, claim_name, ns)
        assert sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"]) == ["gpu-0", "gpu-1"]

        async def released() -> bool:
            done = (await kube.get(PODS, "job", ns))["status"].get("phase") == "Succeeded"
            return done and await _gone(kube, RESOURCE_CLAIMS, claim_name, ns)

        await draxr.until(released)
        log = draxr.text().lower()
        assert not [r for r in REFUSALS if r in log], draxr.text()[-4000:]
    finally:
        if draxr is not None:
            draxr.stop()
        await fakedriver.delete(kube, objs)
        await kube.delete_if_exists(NAMESPACES, ns)

    # An upgrade with the same values changes nothing but the revision; uninstall removes every
    # object but the CRD (Helm keeps crds/) and the namespace it did not create.
    # The upgrade keeps the caBundle draxr wrote (the chart leaves the field out, as manifests/ does).
    await asyncio.to_thread(run, "upgrade", "draxr", str(CHART), "--wait=false")
    manifest = await asyncio.to_thread(run, "get", "manifest", "draxr")
    assert by_key(parse(manifest.stdout)) == by_key([o for o in want if o["kind"] != "CustomResourceDefinition"])
    assert json.loads((await asyncio.to_thread(run, "status", "draxr", "-o", "json")).stdout)["version"] == 2
    [hook] = (await kube.get(MUTATING_WEBHOOKS, "draxr"))["webhooks"]
    assert hook["clientConfig"]["caBundle"]
    await asyncio.to_thread(run, "uninstall", "draxr", "--wait")
    assert await _gone(kube, CLUSTER_ROLES, "draxr")
    assert await _gone(kube, MUTATING_WEBHOOKS, "draxr")
    assert await _gone(kube, DEPLOYMENTS, "draxr", NAMESPACE)
    assert not await _gone(kube, CRDS, "extendedresourcemappings.draxr.io")
