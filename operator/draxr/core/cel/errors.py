"""The errors of compiling and evaluating DRA CEL selectors."""

from __future__ import annotations

__all__ = ["CelCompileError", "CelRuntimeError"]


class CelCompileError(ValueError):
    """The expression does not compile, or does not evaluate to bool."""


class CelRuntimeError(RuntimeError):
    """Evaluating a selector failed; upstream treats this as fatal for the scheduling attempt."""
