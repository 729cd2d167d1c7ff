"""The worked example of docs/developer/adding-a-plugin.md, run: a plugin module
(example_plugin.py), the registry with it added, and a profile that scores with it. The page shows
the module as it is here (the last test compares them)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from draxr.core import plugins
from draxr.core.allocator import DEFAULT_FEATURES
from draxr.core.placement import Decision, Unschedulable, schedule
from draxr.core.profile import DEFAULT_PROFILE, DEFAULT_WEIGHTS
from draxr.core.state import ClusterState
from tests.unit.cluster_builders import node, pod

from . import example_plugin as example
from .node_local_laws import PLAIN, ForgetfulKey, clusters, key_breaks, twins

PAGE = Path(__file__).parents[3] / "docs" / "developer" / "adding-a-plugin.md"


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example in the registry the scheduler runs, for this test only."""
    monkeypatch.setattr(plugins, "REGISTRY", plugins.DEFAULT_REGISTRY.adding(example.PLUGIN))


def _cluster(*nodes: Any) -> ClusterState:
    state = ClusterState()
    state.profile = replace(DEFAULT_PROFILE, weights=(*DEFAULT_WEIGHTS, (example.NAME, 5)))
    for n in nodes:
        state.upsert_node(n)
    return state


def _place(state: ClusterState, name: str, **labels: str) -> Decision | Unschedulable:
    obj = pod(name, requests={"cpu": "1"})
    obj["metadata"]["labels"] = labels
    return schedule(state.upsert_pod(obj), state, features=DEFAULT_FEATURES)


@pytest.mark.usefixtures("registered")
def test_the_registered_example_filters_and_scores_through_the_real_cycle() -> None:
    state = _cluster(
        node("maint", labels={example.MAINTENANCE: "", example.FAST: "true"}),
        node("plain"),
        node("fast", labels={example.FAST: "true"}),
    )
    for i in range(3):  # the same shape again: the cached verdicts give the same answer
        decided = _place(state, f"p{i}")
        assert isinstance(decided, Decision)
        assert decided.node == "fast"
    allowed = _place(state, "allowed", **{example.ALLOWED: "true"})
    assert isinstance(allowed, Decision)
    assert allowed.node in ("maint", "fast")  # both fast; neither filtered for it
    only = _cluster(node("maint", labels={example.MAINTENANCE: ""}))
    refused = _place(only, "p")
    assert isinstance(refused, Unschedulable)
    assert refused.message == "0/1 nodes are available: 1 node(s) were under maintenance."


def test_without_the_registry_entry_the_example_does_not_run() -> None:
    state = _cluster(node("maint", labels={example.MAINTENANCE: ""}))
    assert isinstance(_place(state, "p"), Decision)
    assert example.PLUGIN not in plugins.REGISTRY.local


def test_adding_puts_the_plugin_at_the_end_of_each_extension_point_it_implements() -> None:
    added = plugins.DEFAULT_REGISTRY.adding(example.PLUGIN)
    assert added.filters[-1] is example.PLUGIN
    assert added.scorers[-1] is example.PLUGIN
    assert added.scores[-1] is example.PLUGIN
    assert added.slots[example.NAME] == len(added.scorers) - 1
    # Once among the node-local plugins (its key joins the equivalence key), after the filters.
    assert added.local.index(example.PLUGIN) == len(added.filters) - 1
    assert tuple(p for p in added.local if p is not example.PLUGIN) == plugins.DEFAULT_REGISTRY.local


@given(twins(), clusters())
def test_the_example_keeps_the_node_local_law(pair: Any, state: ClusterState) -> None:
    assert not key_breaks(example.PLUGIN, pair, state)


def test_a_key_that_forgets_the_label_is_caught() -> None:
    state = _cluster(node("maint", labels={example.MAINTENANCE: ""}))
    fields = PLAIN
    twin = {**fields, "labels": {example.ALLOWED: "true"}}
    assert key_breaks(ForgetfulKey(example.PLUGIN), (fields, twin), state)


def test_the_page_shows_the_example_as_it_is() -> None:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    source = Path(example.__file__).read_text()
    assert source in blocks, "docs/developer/adding-a-plugin.md: paste tests/unit/plugins/example_plugin.py again"
