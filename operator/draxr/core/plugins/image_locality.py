"""ImageLocality (score only; pkg/scheduler/framework/plugins/imagelocality): a node that already
holds the pod's images scores higher, each image counted by its size scaled by the share of nodes
that hold it (spread images count more than an image on one node), clamped between 23 MB and
1000 MB per container and mapped onto 0..100. No normalisation; upstream never skips it."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from draxr.core.gomath import go_div
from draxr.core.limits import MAX_NODE_SCORE
from draxr.core.plugins.scoring import Column, ScoreInputs
from draxr.core.state import ClusterState, NodeInfo

NAME = "ImageLocality"
_MB = 1024 * 1024
MIN_THRESHOLD = 23 * _MB  # minThreshold
MAX_CONTAINER_THRESHOLD = 1000 * _MB  # maxContainerThreshold


def normalized_image_name(name: str) -> str:
    """The name with ``:latest`` when it has no tag (normalizedImageName; a digest keeps its name)."""
    if name.rfind(":") <= name.rfind("/"):
        return name + ":latest"
    return name


def score(
    images: Sequence[str],
    node_images: Collection[str],
    sizes: Mapping[str, int],
    nodes_with: Mapping[str, int],
    total_nodes: int,
) -> int:
    """``images``: the pod's init and regular containers' images (and image volumes), in order;
    ``node_images``: the names this node has; ``sizes``: name -> size as the cluster knows it;
    ``nodes_with``: name -> how many nodes have it."""
    total = 0
    for image in images:
        name = normalized_image_name(image)
        if name in node_images:
            total += int(sizes.get(name, 0) * (nodes_with.get(name, 0) / total_nodes))
    max_threshold = MAX_CONTAINER_THRESHOLD * len(images)
    if total < MIN_THRESHOLD:
        total = MIN_THRESHOLD
    elif total > max_threshold:
        total = max_threshold
    return go_div(MAX_NODE_SCORE * (total - MIN_THRESHOLD), max_threshold - MIN_THRESHOLD)


def column(images: Sequence[str], nodes: Sequence[NodeInfo], state: ClusterState) -> list[int] | int:
    """The score of each of ``nodes``, or 0 (one int for all) when no node of the cluster holds
    any of the pod's images: then every node scores 0 and nothing needs computing."""
    if not any(normalized_image_name(i) in state.images.nodes for i in images):
        return 0
    total_nodes = len(state.nodes)
    return [score(images, n.images, state.images.sizes, state.images.nodes, total_nodes) for n in nodes]


class ImageLocality:
    name = NAME

    def column(self, inputs: ScoreInputs) -> Column:
        return column(inputs.cycle.view.images, inputs.nodes, inputs.state)


PLUGIN = ImageLocality()
