"""kube-scheduler 1.37.2's default score plugins other than the inter-pod ones (see interpod and
spread), with its integer arithmetic and normalisation: NodeResourcesFit (LeastAllocated or
MostAllocated over cpu and memory), NodeResourcesBalancedAllocation, TaintToleration
(PreferNoSchedule) and NodeAffinity (preferred terms); ImageLocality is plugins.image_locality.
Each score is 0..100 per node; the default profile's weights are core.profile.DEFAULT_WEIGHTS,
and the plugins' columns (their Score and NormalizeScore) are in core.plugins (plugins.scoring).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from draxr.core.allocator.nodeselector import NodeSelectorError, selector_matches
from draxr.core.gomath import go_div
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.pod_view import Toleration


def normalize(raw: Sequence[int], reverse: bool = False) -> list[int]:
    """`helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)`, the one normalisation of the
    plugins that use it (TaintToleration reversed, NodeAffinity, DynamicResources): scaled so
    that the highest is 100 (reversed: 100 minus that); all 0 stay 0 (reversed: 100)."""
    hi = max(raw, default=0)
    if hi == 0:
        return [MAX_NODE_SCORE] * len(raw) if reverse else list(raw)
    if reverse:
        return [MAX_NODE_SCORE - MAX_NODE_SCORE * s // hi for s in raw]
    return [MAX_NODE_SCORE * s // hi for s in raw]


def default_normalize(raw: Mapping[str, int], reverse: bool = False) -> dict[str, int]:
    """``normalize`` keyed by node name."""
    return dict(zip(raw, normalize(list(raw.values()), reverse), strict=True))


# ---- NodeResourcesFit and BalancedAllocation ---------------------------------------------------


def resource_fit_score(requested: Sequence[int], allocatable: Sequence[int], most: bool = False) -> int:
    """LeastAllocated (or MostAllocated) over the resources, equal weights; a resource the node
    does not have is left out."""
    total = weights = 0
    for req, cap in zip(requested, allocatable, strict=True):
        if cap == 0:
            continue
        if most:
            score = MAX_NODE_SCORE * min(req, cap) // cap
        else:
            score = 0 if req > cap else (cap - req) * MAX_NODE_SCORE // cap
        total += score
        weights += 1
    return total // weights if weights else 0


def _balance(requested: Sequence[int], allocatable: Sequence[int]) -> int:
    fractions = [min(r / a, 1.0) for r, a in zip(requested, allocatable, strict=True) if a != 0]
    std = 0.0
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_allocation_score(allocated: Sequence[int], pod: Sequence[int], allocatable: Sequence[int]) -> int:
    """NodeResourcesBalancedAllocation: how adding the pod changes the node's balance."""
    allocatable = list(allocatable)
    allocated = [a if cap else 0 for a, cap in zip(allocated, allocatable, strict=True)]
    requested = [a + p if cap else 0 for a, p, cap in zip(allocated, pod, allocatable, strict=True)]
    with_pod, without = _balance(requested, allocatable), _balance(allocated, allocatable)
    return MAX_NODE_SCORE // 2 + go_div(MAX_NODE_SCORE // 2 + with_pod - without, 2)


# ---- TaintToleration and NodeAffinity ----------------------------------------------------------


def prefer_no_schedule_tolerations(tolerations: Sequence[Toleration]) -> tuple[Toleration, ...]:
    return tuple(t for t in tolerations if t.effect in ("", "PreferNoSchedule"))


def intolerable_prefer_no_schedule(taints: Sequence[Mapping[str, Any]], tolerations: Sequence[Toleration]) -> int:
    """TaintToleration's raw score (normalised in reverse: fewer is better)."""
    return sum(
        1
        for taint in taints
        if taint.get("effect") == "PreferNoSchedule" and not any(t.tolerates(taint) for t in tolerations)
    )


def preferred_terms(terms: Sequence[Mapping[str, Any]]) -> list[tuple[int, Mapping[str, Any]]]:
    """NodeAffinity's preferred terms as (weight, node selector); weight-0 and empty terms dropped."""
    out: list[tuple[int, Mapping[str, Any]]] = []
    for t in terms:
        pref = t.get("preference") or {}
        if int(t.get("weight") or 0) == 0 or not (pref.get("matchExpressions") or pref.get("matchFields")):
            continue
        out.append((int(t["weight"]), {"nodeSelectorTerms": [pref]}))
    return out


def node_affinity_score(terms: Sequence[tuple[int, Mapping[str, Any]]], node: Mapping[str, Any]) -> int:
    total = 0
    for weight, selector in terms:
        try:
            if selector_matches(selector, node):
                total += weight
        except NodeSelectorError:
            continue
    return total
