"""The ``draxr`` command."""

from __future__ import annotations

import argparse
import platform
import sys

from . import __version__


def _version(_: argparse.Namespace) -> int:
    print(f"draxr {__version__} (python {platform.python_version()})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="draxr", description="DRA-backed extended resources for any cluster")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("version", help="print the version").set_defaults(func=_version)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
