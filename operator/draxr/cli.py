"""The ``draxr`` command."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
from collections.abc import Callable
from typing import Any

from . import __version__


def _version(_: argparse.Namespace) -> int:
    print(f"draxr {__version__} (python {platform.python_version()})")
    return 0


def _run(args: argparse.Namespace) -> int:
    from draxr.app import main as run_operator
    from draxr.core.scheduler_config import ConfigError
    from draxr.kube import set_default_compression, set_default_rate_limit
    from draxr.settings import MIGRATION, REMOVED, Settings

    removed = [flag for name, flag in REMOVED.items() if getattr(args, name, None) is not None]
    removed += [flag for name, flag in REMOVED.items() if f"DRAXR_{name.upper()}" in os.environ]
    if removed:
        print(f"draxr: {', '.join(dict.fromkeys(removed))} {MIGRATION}", file=sys.stderr)
        return 2
    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    try:
        settings = Settings(**overrides).with_config()
    except ConfigError as e:
        print(f"draxr: {e}", file=sys.stderr)
        return 1
    set_default_rate_limit(settings.client_qps, settings.client_burst)
    set_default_compression(settings.api_compression)
    asyncio.run(run_operator(settings))
    return 0


async def _connect(kubeconfig: str | None) -> Any:
    from draxr.app import connect
    from draxr.settings import Settings

    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    kube, _ = await connect(Settings(kubeconfig=path) if path else Settings())
    return kube


async def _capacity_rows(args: argparse.Namespace) -> list[Any]:
    from draxr.core.capacity import cluster_capacity
    from draxr.snapshot import load_state

    kube = await _connect(args.kubeconfig)
    try:
        state = await load_state(kube)
    finally:
        await kube.close()
    return cluster_capacity(state, args.resource or None, include_implicit=args.implicit)


def _explain(args: argparse.Namespace) -> int:
    """Why a pod is pending (per node), or what it got (node, claim, devices, mappings)."""
    from draxr.core.scheduler_config import ConfigError
    from draxr.explain import explain
    from draxr.settings import profile_of

    namespace, _, name = args.pod.rpartition("/")
    try:
        profile = profile_of(args.config, args.scheduler_name)
    except ConfigError as e:
        print(f"draxr: {e}", file=sys.stderr)
        return 1

    async def go() -> str:
        kube = await _connect(args.kubeconfig)
        try:
            return await explain(kube, namespace or "default", name, profile)
        finally:
            await kube.close()

    print(asyncio.run(go()))
    return 0


def _capacity(args: argparse.Namespace) -> int:
    """Per extended resource and node: total / allocated / free, served by DRA or a device plugin."""
    from draxr.core.capacity import summarize

    rows = asyncio.run(_capacity_rows(args))
    table = [("RESOURCE", "NODE", "SERVED BY", "TOTAL", "ALLOCATED", "FREE", "CLASSES")]
    by_name: dict[str, list[Any]] = {}
    for r in rows:
        by_name.setdefault(r.resource_name, []).append(r)
    for name, group in by_name.items():
        for r in group:
            table.append(
                (name, r.node, r.served_by, str(r.total), str(r.allocated), str(r.free), ",".join(r.classes) or "-")
            )
        s = summarize(group)
        table.append((name, f"(all {s.nodes} nodes)", "", str(s.total), str(s.allocated), str(s.free), ""))
    if len(table) == 1:
        print("no extended resources are mapped or advertised")
        return 0
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _node_agent(args: argparse.Namespace) -> int:
    """Publishes the device-plugin devices running pods hold on this node (DevicePluginRecord)."""
    from draxr import logs
    from draxr.node_agent import Options, main

    logs.configure(args.log_level, args.log_format)
    opts = Options(
        node_name=args.node_name or "",
        socket=args.socket,
        refresh_seconds=args.refresh_seconds,
        poll_seconds=args.poll_seconds,
        resources=frozenset(args.resource or ()),
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG") or None,
        serviceaccount_dir=args.serviceaccount_dir,
        health_port=args.health_port,
        bind_address=args.bind_address,
    )
    return asyncio.run(main(opts))


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _flag_type(default: object) -> Callable[[str], object]:
    if isinstance(default, bool):
        return _bool
    if isinstance(default, int | float):
        return type(default)
    return str


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="draxr", description="DRA-backed extended resources for any cluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("version", help="print the version").set_defaults(func=_version)
    run = sub.add_parser("run", help="run the operator (settings also from DRAXR_* environment variables)")
    from draxr.settings import Settings

    for name, field in Settings.model_fields.items():
        run.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=None,
            type=_flag_type(field.default),
            help=field.description,
        )
    from draxr.settings import REMOVED

    for name in REMOVED:  # refused with the migration (draxr._run), not argparse's bare error
        run.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None, help=argparse.SUPPRESS)
    run.set_defaults(func=_run)
    cap = sub.add_parser(
        "capacity", help="total / allocated / free per extended resource and node, DRA or device plugin"
    )
    cap.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG, else in-cluster)")
    cap.add_argument("--resource", action="append", help="only this extended resource name (repeatable)")
    cap.add_argument(
        "--implicit", action="store_true", help="also the implicit deviceclass.resource.kubernetes.io/<class> names"
    )
    cap.set_defaults(func=_capacity)
    exp = sub.add_parser("explain", help="why a pod is pending, node by node, or what it got")
    exp.add_argument("pod", help="NAMESPACE/NAME (namespace defaults to 'default')")
    exp.add_argument("--config", default=None, help="the KubeSchedulerConfiguration draxr runs (default: none)")
    exp.add_argument("--scheduler-name", default="draxr", help="with --config: the profile draxr runs")
    exp.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG, else in-cluster)")
    exp.set_defaults(func=_explain)
    from draxr.node_agent import DEFAULT_SOCKET

    agent = sub.add_parser(
        "node-agent",
        help="publish the device-plugin devices running pods hold on this node (a DevicePluginRecord)",
    )
    agent.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="this node (default: $NODE_NAME)")
    agent.add_argument("--socket", default=DEFAULT_SOCKET, help="kubelet's pod-resources socket")
    agent.add_argument(
        "--refresh-seconds", type=int, default=30, help="rewrite the record at least this often (stale after 3x)"
    )
    agent.add_argument("--poll-seconds", type=float, default=2.0, help="read kubelet this often")
    agent.add_argument(
        "--resource",
        action="append",
        help="only this device-plugin resource name (repeatable; default: every name with a domain prefix)",
    )
    agent.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: $KUBECONFIG, else in-cluster)")
    agent.add_argument(
        "--serviceaccount-dir",
        default="/var/run/secrets/kubernetes.io/serviceaccount",
        help="in-cluster token and ca.crt",
    )
    agent.add_argument("--health-port", type=int, default=8081, help="/healthz (0: off)")
    agent.add_argument("--bind-address", default="0.0.0.0", help="address of the health server")
    agent.add_argument("--log-level", default=os.environ.get("DRAXR_LOG_LEVEL", "info"))
    agent.add_argument("--log-format", default=os.environ.get("DRAXR_LOG_FORMAT", "json"), choices=["json", "console"])
    agent.set_defaults(func=_node_agent)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
