"""A plugin's verdict on a pod and a node, in kube-scheduler's shape (framework's ``*Status``): a
code, the plugin that gave it and the reasons in its words. Every filter of the core returns one of
these (or None when the node passes), PreFilters too; the summary counts the reasons, preemption
reads the codes (only nodes rejected as ``Unschedulable`` may be helped by evicting pods).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    """fwk.Code as its String() prints it."""

    SUCCESS = "Success"
    ERROR = "Error"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"


@dataclass(frozen=True, slots=True)
class Status:
    """``plugin`` is "" where upstream names none (PreFilter's node-name narrowing)."""

    code: Code
    plugin: str
    reasons: tuple[str, ...]

    @property
    def unresolvable(self) -> bool:
        """UnschedulableAndUnresolvable: no pod leaving the node would help."""
        return self.code is Code.UNRESOLVABLE

    @property
    def error(self) -> bool:
        """A plugin error (code Error), not a rejection: the attempt fails."""
        return self.code is Code.ERROR

    @property
    def first(self) -> str:
        return self.reasons[0] if self.reasons else ""


def unschedulable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, plugin, reasons)


def unresolvable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNRESOLVABLE, plugin, reasons)


def error(plugin: str, *reasons: str) -> Status:
    return Status(Code.ERROR, plugin, reasons)


def filter_error(plugin: str, message: str) -> Status:
    """A Filter's error as the framework reports it (RunFilterPlugins wraps every status that is
    not a rejection): ``running "<plugin>" filter plugin: <message>``, code Error. It fails the
    whole attempt, and that text is the FailedScheduling message."""
    return Status(Code.ERROR, plugin, (f'running "{plugin}" filter plugin: {message}',))


def rejected(plugin: str, reasons: tuple[str, ...], is_unresolvable: bool) -> Status:
    """Unschedulable or, when ``is_unresolvable``, UnschedulableAndUnresolvable."""
    return Status(Code.UNRESOLVABLE if is_unresolvable else Code.UNSCHEDULABLE, plugin, reasons)
