"""draxr_dev.rbac_audit: the grants of roles and bindings, the requests of an audit log, and the
comparison both ways (issue 38); the allowances for what the chaos run cannot exercise are grants
of the manifests. The comparison on a real run's audit log: tests/integration/test_chaos.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from draxr_dev import rbac_audit
from draxr_dev.rbac_audit import Grant, Request

ROOT = Path(__file__).resolve().parents[2]
SA = rbac_audit.serviceaccount("ops", "bot")


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str = "") -> dict[str, Any]:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    return {"kind": kind, "metadata": meta, "rules": rules}


def binding(kind: str, role_kind: str, name: str, namespace: str = "", sa: tuple[str, str] = ("ops", "bot")) -> Any:
    meta = {"name": name} | ({"namespace": namespace} if namespace else {})
    subjects = [{"kind": "ServiceAccount", "namespace": sa[0], "name": sa[1]}, {"kind": "User", "name": "alice"}]
    return {"kind": kind, "metadata": meta, "roleRef": {"kind": role_kind, "name": name}, "subjects": subjects}


OBJS = [
    role("ClusterRole", "bot", [
        {"apiGroups": [""], "resources": ["pods", "pods/binding"], "verbs": ["list", "create"]},
        {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["watch"]},
    ]),
    binding("ClusterRoleBinding", "ClusterRole", "bot"),
    role("Role", "lease", [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["bot"], "verbs": ["get"]},
    ], namespace="ops"),
    binding("RoleBinding", "Role", "lease", namespace="ops"),
    # A ClusterRole bound in one namespace by a RoleBinding grants there only.
    role("ClusterRole", "reader", [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]),
    binding("RoleBinding", "ClusterRole", "reader", namespace="vault"),
    # Another ServiceAccount's grants are its own.
    role("ClusterRole", "other", [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["delete"]}]),
    binding("ClusterRoleBinding", "ClusterRole", "other", sa=("ops", "other")),
]  # fmt: skip


def test_grants_follow_the_bindings_scope_and_names() -> None:
    granted = rbac_audit.grants(OBJS)
    assert set(granted) == {SA, rbac_audit.serviceaccount("ops", "other")}
    assert sorted(map(str, granted[SA])) == [
        "create coordination.k8s.io/leases in ops",
        "create core/pods",
        "create core/pods/binding",
        "get coordination.k8s.io/leases name bot in ops",
        "get core/secrets in vault",
        "list core/pods",
        "list core/pods/binding",
        "watch apps/replicasets",
    ]
    assert [str(g) for g in granted[rbac_audit.serviceaccount("ops", "other")]] == ["delete core/nodes"]


def test_allows_by_namespace_and_name() -> None:
    lease = Grant("get", "coordination.k8s.io", "leases", "ops", "bot")
    assert lease.allows(Request("get", "coordination.k8s.io", "leases", "ops", "bot"))
    assert not lease.allows(Request("get", "coordination.k8s.io", "leases", "ops", "other"))
    assert not lease.allows(Request("get", "coordination.k8s.io", "leases", "elsewhere", "bot"))
    assert not lease.allows(Request("update", "coordination.k8s.io", "leases", "ops", "bot"))
    everywhere = Grant("list", "", "pods")
    assert everywhere.allows(Request("list", "", "pods", "any"))
    assert everywhere.allows(Request("list", "", "pods"))
    assert not everywhere.allows(Request("list", "", "pods/log", "any"))


@pytest.mark.parametrize(
    ("rule", "error"),
    [
        ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]}, "a wildcard in apiGroups"),
        ({"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}, "a wildcard in verbs"),
        ({"nonResourceURLs": ["/metrics"], "verbs": ["get"]}, "nonResourceURLs"),
    ],
)
def test_wildcards_and_non_resource_urls_are_refused(rule: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        rbac_audit.grants([role("ClusterRole", "bot", [rule]), binding("ClusterRoleBinding", "ClusterRole", "bot")])


def test_a_binding_to_a_role_not_given_is_refused() -> None:
    with pytest.raises(ValueError, match="its Role lease is not given"):
        rbac_audit.grants([binding("RoleBinding", "Role", "lease", namespace="elsewhere")])


def event(verb: str, resource: str, *, user: str = SA, group: str = "", sub: str = "", ns: str = "", name: str = "",
          stage: str = "ResponseComplete") -> str:  # fmt: skip
    ref = {"resource": resource, "apiGroup": group, "subresource": sub, "namespace": ns, "name": name}
    ref = {k: v for k, v in ref.items() if v}
    return json.dumps({"kind": "Event", "stage": stage, "verb": verb, "user": {"username": user}, "objectRef": ref})


def test_requests_of_the_users_from_the_audit_lines() -> None:
    lines = [
        event("watch", "replicasets", group="apps", stage="RequestReceived"),
        event("watch", "replicasets", group="apps"),
        # A create's event names the object made; RBAC saw no name. A subresource's create has one.
        event("create", "leases", group="coordination.k8s.io", ns="ops", name="bot"),
        event("create", "pods", sub="binding", ns="default", name="p"),
        event("get", "leases", group="coordination.k8s.io", ns="ops", name="bot"),
        event("get", "secrets", ns="vault", name="s"),  # refused or not: a request made
        event("list", "nodes", user="system:admin"),  # another user
        event("create", "selfsubjectreviews", group="authentication.k8s.io"),  # everyone's (system:basic-user)
        json.dumps({"kind": "Event", "verb": "get", "user": {"username": SA}, "requestURI": "/version"}),
        '{"kind": "Event", "verb": "li',  # a line being written
    ]
    used = rbac_audit.requests(lines, [SA, "nobody"])
    assert used["nobody"] == frozenset()
    assert sorted(map(str, used[SA])) == [
        "create coordination.k8s.io/leases in ops",
        "create core/pods/binding name p in default",
        "get coordination.k8s.io/leases name bot in ops",
        "get core/secrets name s in vault",
        "watch apps/replicasets",
    ]


def test_compare_finds_an_unused_grant_a_missing_one_and_stale_allowances() -> None:
    granted = rbac_audit.grants(OBJS)[SA]
    used = {
        Request("list", "", "pods", "default"),
        Request("create", "", "pods"),
        Request("create", "", "pods/binding", "default", "p"),
        Request("list", "", "pods/binding"),
        Request("watch", "apps", "replicasets", "default"),
        Request("create", "coordination.k8s.io", "leases", "ops"),
        Request("get", "coordination.k8s.io", "leases", "ops", "bot"),
        Request("get", "", "secrets", "vault", "s"),
    }
    assert not rbac_audit.compare(granted, used)
    assert str(rbac_audit.compare(granted, used)) == "none"
    # A grant nobody uses.
    diff = rbac_audit.compare(granted, used - {Request("watch", "apps", "replicasets", "default")})
    assert diff.unused == (Grant("watch", "apps", "replicasets"),)
    assert (diff.ungranted, diff.stale) == ((), ())
    assert str(diff) == "granted, never used: watch apps/replicasets"
    # ... unless it is allowed, with a reason.
    allowed = {"watch apps/replicasets": "only after a fault"}
    assert not rbac_audit.compare(granted, used - {Request("watch", "apps", "replicasets", "default")}, allowed)
    # A request no grant allows: another lease's name, a verb not granted, a namespace not granted.
    other = {
        Request("get", "coordination.k8s.io", "leases", "ops", "other"),
        Request("update", "coordination.k8s.io", "leases", "ops", "bot"),
        Request("get", "", "secrets", "default", "s"),
    }
    diff = rbac_audit.compare(granted, used | other)
    assert set(diff.ungranted) == other
    assert diff.unused == ()
    assert "used, never granted: get core/secrets name s in default" in str(diff)
    # An allowance for a grant that is used, or that nothing grants, is stale.
    diff = rbac_audit.compare(granted, used, {"watch apps/replicasets": "?", "delete core/nodes": "?"})
    assert diff.stale == ("delete core/nodes", "watch apps/replicasets")
    assert bool(diff)


def manifest_objects(*paths: Path) -> list[Any]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def test_the_manifests_grants_parse_and_the_chaos_allowances_are_among_them() -> None:
    """Without kubectl: manifests/ as written (kustomize changes none of their RBAC but labels)."""
    base = manifest_objects(*sorted((ROOT / "manifests").glob("*.yaml")))
    agent = manifest_objects(ROOT / "manifests" / "components" / "node-agent" / "node-agent-rbac.yaml")
    granted = rbac_audit.grants(base + agent)
    assert set(granted) == {rbac_audit.DRAXR, rbac_audit.NODE_AGENT}
    texts = {str(g) for g in granted[rbac_audit.DRAXR]}
    assert set(rbac_audit.CHAOS_UNEXERCISED) <= texts, set(rbac_audit.CHAOS_UNEXERCISED) - texts
    assert all(reason.strip() for reason in rbac_audit.CHAOS_UNEXERCISED.values())
