"""Command line for the dev cluster: ``python -m draxr_dev.devcluster up|down|status|fleet``."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import sys
from pathlib import Path

from draxr.kube import Kube

from . import fakedriver
from .binaries import REPO_ROOT, ensure_binaries, ensure_node_binaries
from .controlplane import ControlPlane, Options
from .realnode import NodeOptions, RealNode

DEFAULT_DIR = Path(os.environ.get("DRAXR_DEV_DIR", REPO_ROOT / ".dev"))


def _fleet(args: argparse.Namespace) -> fakedriver.Fleet:
    classes: dict[str, str | None] = {"gpu.example.com": args.extended_resource}
    for extra in args.implicit_class:
        classes[extra] = None
    return fakedriver.Fleet(
        prefix=args.prefix,
        dra_nodes=args.nodes,
        device_plugin_nodes=args.device_plugin_nodes,
        devices_per_node=args.devices,
        device_plugin_resource=args.extended_resource,
        classes=classes,
    )


async def _apply_fleet(kubeconfig: Path, fleet: fakedriver.Fleet, wait: bool) -> None:
    async with await Kube.from_kubeconfig(kubeconfig) as kube:
        objs = fleet.manifests()
        await fakedriver.apply(kube, objs)
        print(f"fake fleet '{fleet.prefix}': {json.dumps(fakedriver.summary(objs))}")
        if wait:
            await fakedriver.wait_nodes_ready(kube, fleet.node_names())
            print(f"{len(fleet.node_names())} fake nodes Ready")


def cmd_up(args: argparse.Namespace) -> int:
    run_dir: Path = args.dir
    if (run_dir / "state.json").exists():
        cp = ControlPlane.load(run_dir)
        if any(cp.alive().values()):
            print(f"a dev cluster is already running in {run_dir}; run 'down' first", file=sys.stderr)
            return 1
        cp.stop()
    binaries = ensure_binaries()
    node_binaries = ensure_node_binaries() if args.real_node else None
    opts = Options(scheduler=args.scheduler, kwok=True, feature_gates=args.feature_gates, real_node=args.real_node)
    cp = ControlPlane(binaries=binaries, run_dir=run_dir, options=opts)
    cp.start()
    print(cp.describe())
    print("start-up timings (s): " + ", ".join(f"{k}={v:.1f}" for k, v in cp.timings.items()))
    if node_binaries is not None:
        node = RealNode(
            control_plane=cp,
            binaries=node_binaries,
            run_dir=_node_dir(run_dir),
            options=NodeOptions(devices=args.real_node_devices, device_plugin=args.device_plugin),
        )
        try:
            node.start()
        except BaseException:
            cp.stop()
            raise
        atexit.unregister(node.stop)  # `down` stops it
        print(node.describe())
        print("real node timings (s): " + ", ".join(f"{k}={v:.1f}" for k, v in node.timings.items()))
    if args.nodes or args.device_plugin_nodes:
        asyncio.run(_apply_fleet(cp.kubeconfig, _fleet(args), wait=True))
    print(f"\nexport KUBECONFIG={cp.kubeconfig}")
    print(f"{binaries / 'kubectl'} get nodes,deviceclasses,resourceslices")
    return 0


def _node_dir(run_dir: Path) -> Path:
    return run_dir / "node"


def _stop_node(cp: ControlPlane, run_dir: Path) -> list[str]:
    """Stop the real node of this dev cluster, if one was started; returns what it stopped."""
    if not (_node_dir(run_dir) / "state.json").exists():
        return []
    node = RealNode.load(cp, _node_dir(run_dir))
    running = [f"real node {name}" for name, alive in node.alive().items() if alive]
    problems = node.stop()
    if problems:
        print("real node teardown left: " + "; ".join(problems), file=sys.stderr)
    return running


def cmd_down(args: argparse.Namespace) -> int:
    if not (args.dir / "state.json").exists():
        print(f"no dev cluster in {args.dir}")
        return 0
    cp = ControlPlane.load(args.dir)
    running = _stop_node(cp, args.dir)
    running += [name for name, alive in cp.alive().items() if alive]
    cp.stop()
    print(f"stopped {', '.join(running) or 'nothing (no component was running)'}; logs kept in {args.dir}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    if not (args.dir / "state.json").exists():
        print(f"no dev cluster in {args.dir}")
        return 1
    cp = ControlPlane.load(args.dir)
    print(cp.describe())
    alive = cp.alive()
    rss = cp.rss_mib()
    if (_node_dir(args.dir) / "state.json").exists():
        node = RealNode.load(cp, _node_dir(args.dir))
        print(node.describe())
        alive.update({f"node/{k}": v for k, v in node.alive().items()})
        rss.update({f"node/{k}": v for k, v in node.rss_mib().items()})
    for name, ok in alive.items():
        print(f"{name:<24} {'running' if ok else 'NOT RUNNING'}")
    for k, v in rss.items():
        print(f"{k:<30} {v:8.1f} MiB")
    return 0 if all(alive.values()) else 1


def cmd_fleet(args: argparse.Namespace) -> int:
    asyncio.run(_apply_fleet(args.dir / "admin.kubeconfig", _fleet(args), wait=not args.no_wait))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    return asyncio.run(demo.run(args.dir / "admin.kubeconfig", args.scheduler_name))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m draxr_dev.devcluster", description=__doc__)
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="run directory (default: %(default)s)")
    sub = p.add_subparsers(dest="cmd", required=True)

    def fleet_args(sp: argparse.ArgumentParser, nodes: int) -> None:
        sp.add_argument("--nodes", type=int, default=nodes, help="DRA nodes (default: %(default)s)")
        sp.add_argument("--devices", type=int, default=8, help="devices per node (default: %(default)s)")
        sp.add_argument(
            "--device-plugin-nodes",
            type=int,
            default=0,
            help="nodes that serve the resource through device-plugin allocatable",
        )
        sp.add_argument("--prefix", default="gpu-node")
        sp.add_argument("--extended-resource", default="example.com/gpu")
        sp.add_argument(
            "--implicit-class",
            action="append",
            default=[],
            help="extra DeviceClass without extendedResourceName (repeatable)",
        )

    up = sub.add_parser("up", help="start the control plane (and kwok) and create fake GPU nodes")
    up.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    up.add_argument("--feature-gates", default="", help="e.g. DRAExtendedResource=true on 1.34/1.35")
    up.add_argument(
        "--real-node",
        action="store_true",
        help="also run a real node 'localhost' (containerd, kubelet, a DRA kubelet plugin; needs root)",
    )
    up.add_argument("--real-node-devices", type=int, default=4, help="its DRA devices (default: %(default)s)")
    up.add_argument("--device-plugin", action="store_true", help="the real node also runs our device plugin")
    fleet_args(up, nodes=3)
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop every component by PID").set_defaults(func=cmd_down)
    sub.add_parser("status", help="show components, liveness and memory").set_defaults(func=cmd_status)
    fl = sub.add_parser("fleet", help="create or update fake GPU nodes on the running dev cluster")
    fleet_args(fl, nodes=3)
    fl.add_argument("--no-wait", action="store_true")
    fl.set_defaults(func=cmd_fleet)
    dm = sub.add_parser("demo", help="submit the demo Job and follow it (needs draxr running)")
    dm.add_argument("--scheduler-name", default="draxr")
    dm.set_defaults(func=cmd_demo)

    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
