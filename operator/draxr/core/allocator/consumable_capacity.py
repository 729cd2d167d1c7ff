"""Consumable capacity (DRAConsumableCapacity): upstream incubating/consumable_capacity.go, v0.37.2.

`fits` is CmpRequestOverCapacity: does a request (plus what is already allocated and what this
search is allocating) fit every capacity of a device, and does the rounded-up amount satisfy the
capacity's requestPolicy? It also applies to devices that are not multi-allocatable.
"""

from __future__ import annotations

from collections.abc import Mapping

from draxr.core.allocator.model import CapacityInfo
from draxr.core.gomath import go_div, go_rem
from draxr.core.limits import INT64_MAX, INT64_MIN
from draxr.core.quantity import Quantity

__all__ = ["CapacityError", "consumed_capacity", "fits"]


class CapacityError(ValueError):
    """A request that cannot be represented, or a negative amount: fatal for the pod upstream."""


def _safe_milli(q: Quantity) -> int | None:
    milli = q.milli_value()
    if Quantity.from_milli(milli, q.fmt).cmp(q) != 0 or not INT64_MIN <= milli <= INT64_MAX:
        return None
    return milli


def _use_milli(c: CapacityInfo, fractional: bool) -> bool:
    if not fractional:
        return False
    for i, q in enumerate((c.range_min, c.range_max, c.range_step)):
        if q is None:
            continue
        milli = _safe_milli(q)
        if milli is None:
            return False
        if i == 2 and milli < 1:
            return False
    return True


def _round_up_range(requested: Quantity, c: CapacityInfo, fractional: bool) -> Quantity:
    assert c.range_min is not None
    if requested.cmp(c.range_min) < 0:
        return c.range_min
    step = c.range_step
    if step is None:
        return requested
    if _use_milli(c, fractional):
        req_milli = _safe_milli(requested)
        if req_milli is None:
            raise CapacityError(f"request {requested} is not a representable milli value")
        step_milli, min_milli = step.milli_value(), c.range_min.milli_value()
        added = req_milli - min_milli
        n = go_div(added, step_milli)
        if go_rem(added, step_milli) != 0:
            n += 1
        if n > go_div(INT64_MAX - min_milli, step_milli):
            raise CapacityError(f"rounding request {requested} up to the next step passes the milli-value range")
        val = min_milli + step_milli * n
        if val % 1000 == 0:
            return Quantity.from_int(val // 1000, step.fmt)
        return Quantity.from_milli(val, step.fmt)
    if requested.cmp(Quantity.from_int(INT64_MAX, requested.fmt)) > 0:
        raise CapacityError(f"request {requested} exceeds MaxInt64")
    req_int, step_int, min_int = requested.int_value(), step.int_value(), c.range_min.int_value()
    if step_int == 0:
        # Go would panic (integer division by zero); API validation forbids a zero step.
        raise CapacityError(f"step {step} of the capacity's validRange is zero")
    added = req_int - min_int
    n = go_div(added, step_int)
    if go_rem(added, step_int) != 0:
        n += 1
    if min_int >= 0 and n > go_div(INT64_MAX - min_int, step_int):
        raise CapacityError(f"rounding request {requested} up to the next step passes MaxInt64")
    return Quantity.from_int(min_int + step_int * n, step.fmt)


def _calculate(requested: Quantity | None, c: CapacityInfo, fractional: bool) -> Quantity:
    if requested is None:
        return c.default if (c.has_policy and c.default is not None) else c.value
    if not c.has_policy:
        return requested
    if c.has_range and c.range_min is not None:
        return _round_up_range(requested, c, fractional)
    if c.valid_values is not None:
        for v in c.valid_values:
            if requested.cmp(v) <= 0:
                return v
        return requested
    return requested


def _violates_policy(consumed: Quantity, c: CapacityInfo, fractional: bool) -> bool:
    if not c.has_policy:
        return False
    # Upstream compares Quantity structs here; API validation keeps `default` valid under the
    # policy, so comparing values gives the same answer.
    if c.default is not None and consumed.cmp(c.default) == 0:
        return False
    if c.has_range:
        if c.range_max is not None and consumed.cmp(c.range_max) > 0:
            return True
        if c.range_step is not None:
            if _use_milli(c, fractional):
                requested = _safe_milli(consumed)
                if requested is None:
                    return True
                step, low = c.range_step.milli_value(), (c.range_min.milli_value() if c.range_min else 0)
            else:
                requested, step = consumed.int_value(), c.range_step.int_value()
                low = c.range_min.int_value() if c.range_min else 0
            if step == 0:
                raise CapacityError(f"step {c.range_step} of the capacity's validRange is zero")
            if go_rem(requested - low, step) != 0:
                return True
        return False
    if c.valid_values:
        return all(consumed.cmp(v) != 0 for v in c.valid_values)
    return False


def _resolve(
    requests: Mapping[str, Quantity] | None, capacity: Mapping[str, CapacityInfo], fractional: bool
) -> dict[str, Quantity]:
    consumed: dict[str, Quantity] = {}
    for name, c in capacity.items():
        try:
            q = _calculate(requests.get(name) if requests is not None else None, c, fractional)
        except CapacityError as exc:
            raise CapacityError(f'capacity "{name}": capacity request cannot be represented: {exc}') from exc
        if q.sign() < 0:
            raise CapacityError(f'capacity "{name}": capacity value is negative')
        consumed[name] = q
    return consumed


def fits(
    current: Mapping[str, Quantity] | None,
    requests: Mapping[str, Quantity] | None,
    capacity: Mapping[str, CapacityInfo],
    allocating: Mapping[str, Quantity] | None,
    fractional: bool,
) -> bool:
    """CmpRequestOverCapacity. `requests` is `capacity.requests` of the request (None if unset)."""
    if requests is not None and any(name not in capacity for name in requests):
        return False  # this device lacks a requested capacity; another one may have it
    consumed = _resolve(requests, capacity, fractional)
    for name, c in capacity.items():
        q = consumed[name]
        if _violates_policy(q, c, fractional):
            return False
        total = q.value
        if current is not None and name in current:
            total += current[name].value
        if allocating is not None and name in allocating:
            total += allocating[name].value
        if total > c.value.value:
            return False
    return True


def consumed_capacity(
    requests: Mapping[str, Quantity] | None, capacity: Mapping[str, CapacityInfo], fractional: bool
) -> dict[str, Quantity]:
    """GetConsumedCapacityFromRequest: what one allocation of a multi-allocatable device consumes."""
    return _resolve(requests, capacity, fractional)
