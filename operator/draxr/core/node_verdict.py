"""What phase 1 of a scheduling cycle finds on one node from the pod's spec and the node's own
inputs alone (its object, the usage of its pods, its own slices, the allocations in its pools):
the part of the node's filtering and scoring that pods of the same shape share (core.equivalence).
"""

from __future__ import annotations

from dataclasses import dataclass

from draxr.core.requests import NodeRequests
from draxr.core.status import Status


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """``status``: the node-local filter that rejects the node (its reasons are what the summary
    counts), None when it passes them; ``problem``: a mapping CR's selector that does not compile, which ends the
    pod's attempt. The rest only for a node that passes: the device-plugin/DRA split,
    NodeResourcesFit's raw score (with draxr's device scoring) and the other node-local scorers'
    raw scores (``scores``, in the order of the registry's ``scorers``; 0 for a pod a scorer
    skips)."""

    status: Status | None = None
    problem: str | None = None
    ext: NodeRequests | None = None
    fit: int = 0
    scores: tuple[int, ...] = ()
    # NodeResourcesFit counted fewer free devices of a scored DRA-served resource than the pod
    # asks for: the allocator will turn the node down (placement tries it last).
    short: bool = False
