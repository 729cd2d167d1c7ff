"""RBAC against use (issue 38): what the manifests grant a ServiceAccount, what it really asked for
(kube-apiserver's audit log), and the difference both ways.

* ``grants(objs)``: the (namespace, apiGroup, resource[/subresource], verb, resourceName) the
  ClusterRoles and Roles give each ServiceAccount through the bindings among ``objs`` (a
  ClusterRole bound by a ClusterRoleBinding: every namespace; by a RoleBinding, or a Role: the
  binding's namespace). Wildcards and nonResourceURLs are refused: the manifests have none.
* ``requests(lines, users)``: the resource requests of those users in audit events (JSON lines,
  level Metadata or more), refused ones too. Non-resource requests (``/version``, discovery) and
  the reviews of oneself (SelfSubjectReview, -AccessReview, -RulesReview) are left out: every
  authenticated user may make them (system:discovery, system:basic-user).
* ``compare(granted, used, unexercised)``: the grants no request used (less ``unexercised``: the
  grants a run cannot exercise, each with its reason), the requests no grant allows, and the
  entries of ``unexercised`` that are stale (used after all, or granted no more).

A grant is written ``verb group/resource[/subresource] [name N] [in NAMESPACE]`` (the core group as
``core``), e.g. ``get coordination.k8s.io/leases name draxr in draxr-system``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]
CORE = "core"
DRAXR = "system:serviceaccount:draxr-system:draxr"  # manifests/serviceaccount.yaml
NODE_AGENT = "system:serviceaccount:draxr-node-agent:draxr-node-agent"  # components/node-agent

# The grants of manifests/ that the chaos run (bench/chaos.py, a fresh cluster, extended-resource
# pods only, faults) never uses, and why; each is used elsewhere with the same token (the module
# named). An entry the run uses after all is stale (rbac_audit.compare): take it off.
CHAOS_UNEXERCISED = {
    # Checked by kube-apiserver (1.36+) inside a write of resourceclaims/status that changes
    # status.allocation or reservedFor, never a request of its own: the audit log shows the status write.
    "update resource.k8s.io/resourceclaims/binding": "a synthetic subresource, checked inside the status write",
    "patch resource.k8s.io/resourceclaims/binding": "a synthetic subresource, checked inside the status write",
    # A pod's own claims (spec.resourceClaims): the chaos pods ask for extended resources only.
    "update resource.k8s.io/resourceclaims": "the finalizer on a pod's own claim (test_pod_claims.py)",
    "patch resource.k8s.io/resourceclaims/status": "unreserving a pod's own claim on rollback (test_pod_claims.py)",
    # Volumes: the chaos pods have none.
    "update core/persistentvolumes": "a static volume binding (test_volumes.py)",
    "patch core/persistentvolumeclaims": "a claim to provision gets its selected node (test_volumes.py)",
    # No ExtendedResourceMapping: the chaos classes map their devices with extendedResourceName.
    "patch draxr.io/extendedresourcemappings/status": "a mapping's status (test_mapping_crd.py)",
    # No device-plugin node to migrate: no DevicePluginRecord, so no fence.
    "create resource.k8s.io/devicetaintrules": "the migration's fence (test_migration.py)",
    "delete resource.k8s.io/devicetaintrules": "the migration's fence lifted (test_migration.py)",
    # The certificate lives a year; the run lasts minutes.
    "update core/secrets name draxr-webhook-tls in draxr-system": "the certificate's rotation (test_webhook.py)",
}
# Grants the chaos run uses only when its faults hit the moment (an error path): neither unused when
# a seed misses them, nor stale when it does not.
CHAOS_SOMETIMES = {
    "get resource.k8s.io/resourceclaims": "a claim read again after a write conflict (binder.py, releaser.py)",
    "get core/pods": "a pod read before its claim's rollback, or after a binding's answer was lost",
    # A finished pod's claim: kube-controller-manager's resource claim controller releases it too
    # (finalizer and delete), and when it is first draxr's releaser has nothing to patch or delete
    # (seed 135904 with the preemption wave: every release went that way, twice).
    "delete resource.k8s.io/resourceclaims": "a released claim that KCM had not deleted first (releaser.py)",
    "patch resource.k8s.io/resourceclaims": "a released claim's finalizer, KCM not first (releaser.py)",
}


# What every authenticated user may ask about itself (the default ClusterRole system:basic-user):
# left out of the requests, as the non-resource ones.
SELF_REVIEWS = {
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
}


def serviceaccount(namespace: str, name: str) -> str:
    """The user name of a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"


@dataclass(frozen=True, order=True)
class Request:
    """One request as RBAC sees it: ``namespace`` "" for a cluster-scoped object, ``name`` "" when
    the request names none (list, watch, create)."""

    verb: str
    group: str
    resource: str  # "pods", "pods/binding"
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        return _text(self.verb, self.group, self.resource, self.name, self.namespace)


@dataclass(frozen=True, order=True)
class Grant:
    """One verb on one resource, from one rule: ``namespace`` "" for every namespace (and the
    cluster-scoped objects), ``name`` "" without resourceNames."""

    verb: str
    group: str
    resource: str
    namespace: str = ""
    name: str = ""

    def allows(self, r: Request) -> bool:
        return (
            (self.verb, self.group, self.resource) == (r.verb, r.group, r.resource)
            and self.namespace in ("", r.namespace)
            and self.name in ("", r.name)
        )

    def __str__(self) -> str:
        return _text(self.verb, self.group, self.resource, self.name, self.namespace)


def audit_policy(users: Iterable[str]) -> dict[str, Any]:
    """kube-apiserver's audit policy that logs every request of ``users`` (level Metadata: who, the
    verb, the object; no bodies) and nothing else."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["ResponseStarted"],
        "rules": [{"level": "Metadata", "users": sorted(users)}, {"level": "None"}],
    }


def _text(verb: str, group: str, resource: str, name: str, namespace: str) -> str:
    out = f"{verb} {group or CORE}/{resource}"
    if name:
        out += f" name {name}"
    if namespace:
        out += f" in {namespace}"
    return out


def _rules(role: Obj, namespace: str) -> set[Grant]:
    out: set[Grant] = set()
    for rule in role.get("rules") or ():
        where = f"{role['kind']} {role['metadata']['name']}"
        if rule.get("nonResourceURLs"):
            raise ValueError(f"{where}: nonResourceURLs are not compared")
        names = rule.get("resourceNames") or [""]
        for part in ("apiGroups", "resources", "verbs", "resourceNames"):
            if "*" in (rule.get(part) or ()):
                raise ValueError(f"{where}: a wildcard in {part}")
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for verb in rule.get("verbs") or ():
                    for name in names:
                        out.add(Grant(verb, group, resource, namespace, name))
    return out


def grants(objs: Iterable[Obj]) -> dict[str, frozenset[Grant]]:
    """Per ServiceAccount user name, what the roles among ``objs`` grant it through the bindings
    among ``objs`` (subjects of other kinds are left out). A binding to a role not among ``objs``
    is an error: its grants would be unknown."""
    objs = [o for o in objs if o]
    roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs
             if o["kind"] in ("ClusterRole", "Role")}  # fmt: skip
    out: dict[str, set[Grant]] = {}
    for b in objs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        bound_ns = b["metadata"].get("namespace", "") if b["kind"] == "RoleBinding" else ""
        ref = b["roleRef"]
        role = roles.get((ref["kind"], bound_ns if ref["kind"] == "Role" else "", ref["name"]))
        if role is None:
            raise ValueError(f"{b['kind']} {b['metadata']['name']}: its {ref['kind']} {ref['name']} is not given")
        granted = _rules(role, bound_ns)
        for s in b.get("subjects") or ():
            if s["kind"] == "ServiceAccount":
                out.setdefault(serviceaccount(s.get("namespace") or bound_ns, s["name"]), set()).update(granted)
    return {user: frozenset(g) for user, g in out.items()}


def requests(lines: Iterable[str], users: Iterable[str]) -> dict[str, frozenset[Request]]:
    """Per user among ``users``, the resource requests of the audit events in ``lines`` (a line that
    is not JSON, such as one being written, is skipped)."""
    wanted = set(users)
    out: dict[str, set[Request]] = {u: set() for u in wanted}
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        user = (ev.get("user") or {}).get("username")
        ref = ev.get("objectRef")
        if user not in wanted or not ref or not ref.get("resource"):
            continue
        if (ref.get("apiGroup"), ref["resource"]) in SELF_REVIEWS:
            continue
        sub = ref.get("subresource") or ""
        # A create's event names the object it made, but RBAC saw no name (a POST to the collection:
        # resourceNames cannot limit it); a create of a subresource (pods/binding) names its object.
        name = "" if ev["verb"] in ("create", "deletecollection") and not sub else ref.get("name") or ""
        resource = ref["resource"] + (f"/{sub}" if sub else "")
        out[user].add(Request(ev["verb"], ref.get("apiGroup") or "", resource, ref.get("namespace") or "", name))
    return {u: frozenset(r) for u, r in out.items()}


@dataclass(frozen=True)
class Difference:
    unused: tuple[Grant, ...]  # granted, used by no request, not in ``unexercised``
    ungranted: tuple[Request, ...]  # used, allowed by no grant
    stale: tuple[str, ...]  # entries of ``unexercised`` used after all, or not granted

    def __bool__(self) -> bool:
        return bool(self.unused or self.ungranted or self.stale)

    def __str__(self) -> str:
        parts = [f"granted, never used: {', '.join(map(str, self.unused))}" if self.unused else "",
                 f"used, never granted: {', '.join(map(str, self.ungranted))}" if self.ungranted else "",
                 f"stale allowances: {', '.join(self.stale)}" if self.stale else ""]  # fmt: skip
        return "; ".join(p for p in parts if p) or "none"


def compare(
    granted: Iterable[Grant],
    used: Iterable[Request],
    unexercised: Mapping[str, str] | None = None,
    sometimes: Mapping[str, str] | None = None,
) -> Difference:
    """Nothing granted that is not used, nothing used that is not granted. ``unexercised`` maps a
    grant (as written by ``str(Grant)``) to the reason the run never uses it: such an entry is stale
    once a request uses that grant, or nothing grants it. ``sometimes`` maps a grant to the reason
    the run uses it only now and then (an error path its faults may or may not reach): stale only
    when nothing grants it."""
    granted, used = set(granted), set(used)
    unexercised, sometimes = unexercised or {}, sometimes or {}
    unused = sorted(g for g in granted if not any(g.allows(r) for r in used))
    by_text = {str(g): g for g in granted}
    stale = sorted(
        [t for t in unexercised if t not in by_text or by_text[t] not in unused]
        + [t for t in sometimes if t not in by_text]
    )
    return Difference(
        unused=tuple(g for g in unused if str(g) not in unexercised and str(g) not in sometimes),
        ungranted=tuple(sorted(r for r in used if not any(g.allows(r) for g in granted))),
        stale=tuple(stale),
    )
