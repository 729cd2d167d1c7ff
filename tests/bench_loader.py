"""Load a bench/ script as a module (bench/ is no package): the chaos run's CI test and its observer's
unit test use bench/chaos.py itself, not a copy."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load(name: str) -> ModuleType:
    module_name = f"draxr_bench_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # (dataclasses look their module up while the class is made)
    spec.loader.exec_module(module)
    return module
