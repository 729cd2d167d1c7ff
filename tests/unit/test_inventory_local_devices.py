"""Inventory.node_local_devices (device scoring's per-node totals) agrees with a recount of the
node's own slices after any sequence of slice changes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.allocator import Inventory
from draxr_dev.allocator.builders import device, slice_

NODES = ("node-1", "node-2")

ops = st.lists(
    st.tuples(
        st.sampled_from(("upsert", "remove")),
        st.integers(0, 5),  # slice name
        st.sampled_from((*NODES, None)),  # nodeName (None: a slice of no node)
        st.sampled_from(("pool-a", "pool-b")),
        st.sampled_from(("driver-x", "driver-y")),
        st.integers(0, 4),  # devices
    ),
    max_size=40,
)


def recount(inv: Inventory, node: str) -> tuple[int, tuple[tuple[str, str], ...]]:
    slices = inv.node_local_slices(node)
    return sum(len(s.devices) for s in slices), tuple(dict.fromkeys((s.driver, s.pool) for s in slices))


@settings(max_examples=200, deadline=None)
@given(ops)
def test_node_local_devices_matches_a_recount(steps: list[tuple[str, int, str | None, str, str, int]]) -> None:
    inv = Inventory()
    for op, i, node, pool, driver, n in steps:
        name = f"s{i}"
        if op == "remove":
            inv.remove_slice(name)
        else:
            devices = [device(f"d{k}") for k in range(n)]
            scope = {} if node is not None else {"allNodes": True}
            inv.upsert_slice(slice_(name, devices, driver=driver, pool=pool, node_name=node, **scope))
        for each in NODES:
            assert inv.node_local_devices(each) == recount(inv, each)
