"""Sequence cases for the scheduling differential test: 10 to 50 pods placed one after another on
one cluster, each decision assumed before the next pod is scheduled (draxr: ClusterState.assume_pod
and assume_allocation, as draxr.scheduler does; upstream: the scheduler cache's AssumePod and the
Reserve plugins, tests/scheduler_harness), compared decision by decision.

``generate_sequence_case(seed, index)`` returns one case of family "sequences" (the schema of
draxr_dev.scheduling, plus ``"sequence"``: the pods after ``"pod"``): a cluster built like casegen's
(its families' probabilities), few nodes so that the pods fill them, and two or three pod shapes
from casegen's make_incoming_pod, repeated (replicas: the same spread constraints, affinity terms,
host ports and requests, so that each placement changes what the next pod finds, and the
equivalence cache serves pods of one shape); most shapes are relaxed (no required node or pod
affinity, every taint tolerated) so that the pods fill the nodes before they stop fitting. In a
third of the cases the shapes also ask for extended resources that a DeviceClass serves
(casegen_claims' classes and node-local slices): their special claims' allocations are assumed
too. Each case draws from its own
``random.Random(f"{seed}/sequences/{index}")``.

Out of the sequences: pods with claims or volumes of their own (their objects would have to be
made per pod; the single-pod cases cover them).

``SEQUENCE_TAGS``: what the differential test demands cases of.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from draxr_dev.scheduling import casegen as cg
from draxr_dev.scheduling import casegen_claims as cc

__all__ = ["SEQUENCE_TAGS", "generate_sequence_case", "generate_sequences"]

JSON = dict[str, Any]

SEQUENCE_TAGS = (
    "sequence:one-shape",
    "sequence:shapes",
    "sequence:extended",
    "sequence:hostPorts",
    "sequence:spread",
    "sequence:affinity",
    "sequence:relaxed",
)


def generate_sequence_case(seed: int, index: int) -> JSON:
    r = random.Random(f"{seed}/sequences/{index}")
    family = r.choices(cg.FAMILIES, weights=cg.FAMILY_WEIGHTS)[0]
    g = cg.Gen(r, family)
    nodes = [cg.make_node(g, i) for i in range(r.choice((3, 4, 4, 5, 6, 8, 10)))]
    pods = [cg.make_existing_pod(g, i, nodes) for i in range(r.choice((0, 2, 4, 6, 10)))]
    shapes = [cg.make_incoming_pod(g, nodes, pods) for _ in range(r.choice((1, 1, 2, 3)))]
    for shape in shapes:
        if r.random() < 0.8:
            _relax(shape)
            g.tag("sequence:relaxed")
    g.tag("sequence:one-shape" if len(shapes) == 1 else "sequence:shapes")
    extra: JSON = {}
    if r.random() < 0.33:
        w = cc._World(g, nodes)
        w.make_classes()
        w.make_slices()
        for shape in shapes:
            cc._extended_resources(w, shape, force=True)
        extra = {"deviceClasses": w.classes, "resourceSlices": w.slices}
        g.tag("sequence:extended")
    for shape in shapes:
        spec = shape["spec"]
        if any(c.get("ports") for c in spec.get("containers", [])):
            g.tag("sequence:hostPorts")
        if spec.get("topologySpreadConstraints"):
            g.tag("sequence:spread")
        if spec.get("affinity", {}).get("podAffinity") or spec.get("affinity", {}).get("podAntiAffinity"):
            g.tag("sequence:affinity")
    placed = []
    for k in range(r.randint(10, 50)):
        pod = copy.deepcopy(r.choice(shapes))
        pod["metadata"]["name"] = f"seq-{k}"
        pod["metadata"]["uid"] = f"uid-seq-{k}"
        placed.append(pod)
    case: JSON = {
        "name": f"sequences-{index:05d}",
        "family": "sequences",
        "tags": [],
        "nodes": nodes,
        "pods": pods,
        "namespaces": cg.make_namespaces(),
        **cg.make_controllers(g, shapes[0]),
        **extra,
        "pod": placed[0],
        "sequence": placed[1:],
    }
    g.tag("namespaces:labels")
    case["tags"] = sorted(g.tags)
    return case


def _relax(pod: JSON) -> None:
    """Most shapes fit somewhere at first (the sequence then fills the nodes): no node selector,
    required node affinity or required pod affinity, and every taint tolerated."""
    spec = pod["spec"]
    spec.pop("nodeSelector", None)
    affinity = spec.get("affinity") or {}
    (affinity.get("nodeAffinity") or {}).pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    (affinity.get("podAffinity") or {}).pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    spec["tolerations"] = [*spec.get("tolerations", []), {"operator": "Exists"}]


def generate_sequences(seed: int, count: int) -> list[JSON]:
    return [generate_sequence_case(seed, i) for i in range(count)]
