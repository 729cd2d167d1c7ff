"""DevicePluginRecords as the node agent writes them, for tests and benchmarks that play the agent:
one builder on top of ``draxr.node_agent.record`` (the agent's own), so the fakes cannot drift from
what the agent publishes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from draxr.node_agent import record

# (namespace, pod name) -> {resource name: device IDs}, one container "c" per pod
Held = Mapping[tuple[str, str], Mapping[str, Sequence[str]]]


def fake_record(
    node: str,
    held: Held,
    *,
    observed: dt.datetime | str | None = None,
    refresh_seconds: int = 30,
    **spec: Any,
) -> dict[str, Any]:
    """The record of ``node`` listing ``held`` (pods sorted by namespace and name). ``observed``:
    a time or an RFC 3339 string (default: now); ``spec``: fields to set or replace (e.g. an
    invalid value, for the parser's tests)."""
    pods = [
        {
            "namespace": ns,
            "name": name,
            "containers": [
                {
                    "name": "c",
                    "devices": [{"resourceName": r, "deviceIDs": list(ids)} for r, ids in sorted(res.items())],
                }
            ],
        }
        for (ns, name), res in sorted(held.items())
    ]
    when = observed if isinstance(observed, dt.datetime) else dt.datetime.now(dt.UTC)
    obj = record(node, pods, when, refresh_seconds)
    if isinstance(observed, str):
        obj["spec"]["observedTime"] = observed
    obj["spec"].update(spec)
    return obj


def one_resource(
    namespace: str, resource: str, pods: Iterable[tuple[str, Sequence[str]]]
) -> dict[tuple[str, str], dict[str, list[str]]]:
    """``held`` for pods of one namespace that each hold devices of one resource."""
    return {(namespace, name): {resource: list(ids)} for name, ids in pods}
