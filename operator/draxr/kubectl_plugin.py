"""``kubectl draxr``: the kubectl plugin (installed as ``kubectl-draxr`` by pip).

    kubectl draxr explain POD [-n NAMESPACE] [-o wide|json|yaml]
    kubectl draxr explain [-n NAMESPACE | -A]         every pod pending for draxr
    kubectl draxr capacity [--resource NAME] [--implicit] [-o wide|json|yaml]

kubectl hands a plugin its flags untouched, so this honours kubectl's own: ``--kubeconfig``
(else $KUBECONFIG, else ~/.kube/config, else in-cluster), ``--context``, ``-n/--namespace`` (else
the context's namespace, else "default"), ``-A/--all-namespaces`` and ``-o/--output``. Flags may
come before or after the subcommand, as with kubectl.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

from draxr.kube import ApiException, Kube

OUTPUTS = ("wide", "json", "yaml")
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _common(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """kubectl's flags; on subcommands their defaults are suppressed so that a flag given before
    the subcommand is not reset by the subcommand's default."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    parser.add_argument("--kubeconfig", default=default(None), help="kubeconfig file (as kubectl)")
    parser.add_argument("--context", default=default(None), help="kubeconfig context (as kubectl)")
    parser.add_argument("-n", "--namespace", default=default(None), help="namespace (as kubectl)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", default=default(False), help="every namespace")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default=default(None), help="output format")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="kubectl draxr", description="draxr: DRA-backed extended resources")
    _common(top, suppress=False)
    sub = top.add_subparsers(dest="cmd", required=True)
    exp = sub.add_parser("explain", help="why a pod is pending, node by node, or what it got")
    _common(exp, suppress=True)
    exp.add_argument("pod", nargs="?", help="pod name (without it: every pod pending for draxr)")
    exp.add_argument("--scheduler-name", default="draxr", help="the scheduler name draxr runs as")
    exp.add_argument(
        "--config", default=None, help="the KubeSchedulerConfiguration draxr runs (its --config; default: none)"
    )
    cap = sub.add_parser("capacity", help="total / allocated / free per extended resource and node")
    _common(cap, suppress=True)
    cap.add_argument("--resource", action="append", help="only this extended resource name (repeatable)")
    cap.add_argument("--implicit", action="store_true", help="also deviceclass.resource.kubernetes.io/<class>")
    mig = sub.add_parser(
        "migration", help="device plugin -> DRA: per node, the pods still holding devices, and is it safe"
    )
    _common(mig, suppress=True)
    mig.add_argument("node", nargs="?", help="node name (without it: every node concerned)")
    return top


def _kubeconfig_path(flag: str | None) -> str | None:
    """The kubeconfig kubectl would read, or None for in-cluster configuration."""
    if flag:
        return flag
    env = os.environ.get("KUBECONFIG")
    if env:
        return next((p for p in env.split(os.pathsep) if p), None)
    default = Path("~/.kube/config").expanduser()
    return str(default) if default.exists() else None


def _serviceaccount_namespace() -> str:
    return _SA_NAMESPACE.read_text().strip() if _SA_NAMESPACE.exists() else "default"


async def connect(kubeconfig: str | None, context: str | None) -> tuple[Kube, str]:
    """A client for the chosen kubeconfig and context, and the namespace that context names."""
    cfg = client.Configuration()
    path = _kubeconfig_path(kubeconfig)
    if path is None:
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        return Kube(client.ApiClient(cfg)), _serviceaccount_namespace()
    await config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    contexts, current = config.list_kube_config_contexts(config_file=path)
    chosen = next((c for c in contexts if c.get("name") == context), None) if context else current
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Kube(client.ApiClient(cfg)), str(namespace)


def _dump(data: Any, output: str | None) -> str:
    if output == "json":
        return json.dumps(data, indent=2, sort_keys=False)
    return yaml.safe_dump(data, sort_keys=False).rstrip()


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


async def _explain(args: argparse.Namespace, kube: Kube, namespace: str) -> str:
    from draxr.explain import pending_reports, render, report
    from draxr.settings import profile_of

    profile = profile_of(args.config, args.scheduler_name)
    if args.pod:
        reports = [await report(kube, namespace, args.pod, profile)]
    else:
        reports = await pending_reports(kube, None if args.all_namespaces else namespace, args.scheduler_name, profile)
    if args.output in ("json", "yaml"):
        return _dump(reports[0] if args.pod else reports, args.output)
    if not reports:
        where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
        return f"no pod is pending for {args.scheduler_name} in {where}"
    return "\n\n".join("\n".join(render(r, wide=args.output == "wide")) for r in reports)


def _row(r: Any) -> dict[str, Any]:
    return {
        "resource": r.resource_name,
        "node": r.node,
        "servedBy": str(r.served_by),
        "total": r.total,
        "allocated": r.allocated,
        "free": r.free,
        "classes": list(r.classes),
    }


async def _capacity(args: argparse.Namespace, kube: Kube) -> str:
    from draxr.core.capacity import cluster_capacity, summarize
    from draxr.snapshot import load_state

    state = await load_state(kube)
    rows = cluster_capacity(state, args.resource or None, include_implicit=args.implicit)
    if args.output in ("json", "yaml"):
        return _dump([_row(r) for r in rows], args.output)
    if not rows:
        return "no extended resources are mapped or advertised"
    wide = args.output == "wide"
    table = [("RESOURCE", "NODE", "SERVED BY", "TOTAL", "ALLOCATED", "FREE", *(("CLASSES",) if wide else ()))]
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.resource_name, []).append(r)
    for name, group in by_name.items():
        for r in group:
            classes = (",".join(r.classes) or "-",) if wide else ()
            table.append((name, r.node, r.served_by, str(r.total), str(r.allocated), str(r.free), *classes))
        s = summarize(group)
        table.append((name, f"(all {s.nodes} nodes)", "", str(s.total), str(s.allocated), str(s.free), *(("",) * wide)))
    return _table(table)


async def _migration(args: argparse.Namespace, kube: Kube) -> str:
    import time

    from draxr.migrator import DEVICE_TAINT_RULES, FENCE_SELECTOR, RECORDS, report
    from draxr.snapshot import load_state

    state = await load_state(kube)
    installed = True
    try:
        for record in await kube.list(RECORDS):
            state.adoption.upsert_record(record)
    except ApiException as e:
        if e.status != 404:  # 404: the CRD is not installed (no node agent)
            raise
        installed = False
    rules: list[dict[str, Any]] | None = None
    try:
        rules = await kube.list(DEVICE_TAINT_RULES, labelSelector=FENCE_SELECTOR)
    except ApiException as e:
        if e.status != 404:  # 404: not served (before 1.37): no fence
            raise
    found = report(state, time.time(), records_installed=installed, rules=rules)
    reports = [r for r in found if args.node in (None, r.node)]
    if args.output in ("json", "yaml"):
        return _dump([r.as_dict() for r in reports], args.output)
    if not reports:
        return f"node {args.node} has no device-plugin pods to adopt" if args.node else "no node is moving"
    lines: list[str] = []
    for r in reports:
        verdict = "safe" if r.safe else "NOT SAFE: DRA hands out none of the adopted classes' devices here"
        lines.append(f"{r.node}: {verdict}; record {r.record}")
        table = [("POD", "RESOURCES", "ADOPTION CLAIM")]
        table += [(h.pod, ",".join(h.resources), h.claim or "-") for h in r.pods]
        if r.pods:
            lines += ["  " + row for row in _table(table).splitlines()]
        for u in r.unmatched:
            lines.append(f"  unmatched: {u.resource} {u.device_id} {u.reason}")
        if r.fence:
            devices = ", ".join(d.rsplit("/", 1)[1] for d in r.fenced)
            lines.append(f"  fenced (DeviceTaintRules, NoSchedule): {devices}: {', '.join(r.fence)}")
        elif not r.safe and not r.fence_served:
            lines.append("  not fenced: DeviceTaintRules are not served (before Kubernetes 1.37): other schedulers")
            lines.append("  may hand out the devices these pods hold")
        for why in r.fence_why:
            lines.append(f"  to fence: {why}")
    return "\n".join(lines)


async def run(argv: Sequence[str] | None = None) -> str:
    args = parser().parse_args(argv)
    kube, context_namespace = await connect(args.kubeconfig, args.context)
    try:
        if args.cmd == "explain":
            return await _explain(args, kube, args.namespace or context_namespace)
        if args.cmd == "migration":
            return await _migration(args, kube)
        return await _capacity(args, kube)
    finally:
        await kube.close()


def main(argv: Sequence[str] | None = None) -> int:
    from draxr.core.scheduler_config import ConfigError
    from draxr.kube import api_message

    try:
        print(asyncio.run(run(argv)))
    except ApiException as e:
        print(f"error: {api_message(e)}", file=sys.stderr)
        return 1
    except ConfigError as e:  # explain --config: a file draxr would refuse
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
