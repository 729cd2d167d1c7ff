"""The law every score plugin keeps against the reference: its column (core.plugins.scoring) equals
what ``core.cycle.score_nodes`` computes for it (the scoring written without the equivalence cache
and the plugins' shortcuts), and it skips the pod exactly when the reference leaves the plugin out.
Small clusters of placed pods in two zones, and a pod with drawn spreading and affinity terms."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from draxr.core.cycle import prepare, score_nodes
from draxr.core.plugins import DEFAULT_REGISTRY
from draxr.core.plugins.scoring import Column, ScoreInputs, ScorePlugin
from draxr.core.profile import DEFAULT_PROFILE
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import node, pod

NODES = {"n1": "a", "n2": "a", "n3": "b", "n4": "b"}  # node -> zone
APPS = ("x", "y")
KEYS = ("zone", "kubernetes.io/hostname")


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


SPREADS = st.lists(
    st.builds(
        lambda app, key, skew: {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": {"app": app}}},
        st.sampled_from(APPS), st.sampled_from(KEYS), st.integers(1, 2),
    ),
    max_size=2, unique_by=lambda c: (c["topologyKey"], str(c["labelSelector"])),
)  # fmt: skip
PREFERRED = st.lists(
    st.builds(lambda app, key, w: {"weight": w, "podAffinityTerm": _term(app, key)},
              st.sampled_from(APPS), st.sampled_from(KEYS), st.integers(1, 100)),
    max_size=2,
)  # fmt: skip


@st.composite
def scenes(draw: st.DrawFn) -> tuple[ClusterState, dict[str, Any]]:
    """Four nodes in two zones, up to eight placed pods (some with preferred terms of their own),
    and the pod to score."""
    state = ClusterState()
    for name, zone in NODES.items():
        state.upsert_node(node(name, labels={"zone": zone}))
    for i in range(draw(st.integers(0, 8))):
        placed = pod(f"placed-{i}", node_name=draw(st.sampled_from(sorted(NODES))), phase="Running")
        placed["metadata"]["labels"] = {"app": draw(st.sampled_from(APPS))}
        if draw(st.booleans()):
            placed["spec"]["affinity"] = {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                                                          draw(PREFERRED)}}  # fmt: skip
        state.upsert_pod(placed)
    wanted = pod("p", requests={"cpu": "1"})
    wanted["metadata"]["labels"] = {"app": draw(st.sampled_from(APPS))}
    spreads, affinity, anti = draw(SPREADS), draw(PREFERRED), draw(PREFERRED)
    if spreads:
        wanted["spec"]["topologySpreadConstraints"] = spreads
    terms: dict[str, Any] = {}
    if affinity:
        terms["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": affinity}
    if anti:
        terms["podAntiAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": anti}
    if terms:
        wanted["spec"]["affinity"] = terms
    return state, wanted


def column_and_reference(
    plugin: ScorePlugin, state: ClusterState, wanted: dict[str, Any]
) -> tuple[Column | None, dict[str, int] | None]:
    """The plugin's column over every node (in name order) and the reference's scores for it."""
    info = state.upsert_pod(wanted)
    cycle = prepare(info, state)
    names = sorted(state.nodes)
    nodes = [state.nodes[n] for n in names]
    inputs = ScoreInputs(cycle, state, DEFAULT_PROFILE, nodes, names, [], None, None, DEFAULT_REGISTRY.slots)
    return plugin.column(inputs), score_nodes(cycle, state, nodes).get(plugin.name)


def agrees(plugin: ScorePlugin, state: ClusterState, wanted: dict[str, Any]) -> bool:
    column, reference = column_and_reference(plugin, state, wanted)
    if column is None or reference is None:
        return column is None and reference is None
    names = sorted(state.nodes)
    per_node = [column] * len(names) if isinstance(column, int) else list(column)
    return per_node == [reference[n] for n in names]
