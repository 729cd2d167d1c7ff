"""The ``draxr`` command."""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
from collections.abc import Callable

from . import __version__


def _version(_: argparse.Namespace) -> int:
    print(f"draxr {__version__} (python {platform.python_version()})")
    return 0


def _run(args: argparse.Namespace) -> int:
    from draxr.app import main as run_operator
    from draxr.settings import Settings

    overrides = {k: v for k, v in vars(args).items() if k in Settings.model_fields and v is not None}
    asyncio.run(run_operator(Settings(**overrides)))
    return 0


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
            type=type(field.default) if isinstance(field.default, int | float) else str,
            help=field.description,
        )
    run.set_defaults(func=_run)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
