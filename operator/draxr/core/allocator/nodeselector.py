"""v1 NodeSelector matching, as component-helpers' nodeaffinity.NewNodeSelector + Match.

Parsing is strict like upstream's: an invalid selector is an error (for the allocator a fatal
one), not "no match". Terms are ORed, requirements within a term ANDed, empty terms ignored,
and a selector without any non-empty term matches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from draxr.core.limits import parse_int64

__all__ = ["NodeSelectorError", "node_matches", "selector_matches"]

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class NodeSelectorError(ValueError):
    """The selector is invalid (upstream: NewNodeSelector returns an error)."""


def _label_key_valid(key: str) -> bool:
    parts = key.split("/")
    if len(parts) == 2:
        prefix, name = parts
        if not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
            return False
    elif len(parts) == 1:
        name = parts[0]
    else:
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _label_value_valid(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


_Compiled = tuple[tuple[tuple[str, str, tuple[str, ...], int | None], ...], tuple[tuple[str, str, str], ...]]


def _compile_term(term: Mapping[str, Any]) -> _Compiled:
    errors: list[str] = []
    exprs: list[tuple[str, str, tuple[str, ...], int | None]] = []
    for req in term.get("matchExpressions") or ():
        key, op, values = req.get("key", ""), req.get("operator", ""), tuple(req.get("values") or ())
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            errors.append(f"matchExpressions: unsupported operator {op!r}")
            continue
        if not _label_key_valid(key):
            errors.append(f"matchExpressions: invalid label key {key!r}")
        number: int | None = None
        if op in ("In", "NotIn") and not values:
            errors.append(f"matchExpressions {key!r}: for 'in', 'notin' operators, values set can't be empty")
        elif op in ("Exists", "DoesNotExist") and values:
            errors.append(f"matchExpressions {key!r}: values set must be empty for exists and does not exist")
        elif op in ("Gt", "Lt"):
            if len(values) != 1:
                errors.append(f"matchExpressions {key!r}: for 'Gt', 'Lt' operators, exactly one value is required")
            for v in values:
                number = parse_int64(v)
                if number is None:
                    errors.append(f"matchExpressions {key!r}: for 'Gt', 'Lt' operators, the value must be an integer")
        for v in values:
            if not _label_value_valid(v):
                errors.append(f"matchExpressions {key!r}: invalid label value {v!r}")
        exprs.append((key, op, values, number))
    flds: list[tuple[str, str, str]] = []
    for req in term.get("matchFields") or ():
        key, op, fvalues = req.get("key", ""), req.get("operator", ""), list(req.get("values") or ())
        if op not in ("In", "NotIn"):
            errors.append(f"matchFields: unsupported operator {op!r}")
        elif len(fvalues) != 1:
            errors.append(f"matchFields {key!r}: must have one element")
        else:
            flds.append((key, op, fvalues[0]))
    if errors:
        raise NodeSelectorError("; ".join(errors))
    return tuple(exprs), tuple(flds)


def _term_matches(term: _Compiled, labels: Mapping[str, str], node_name: str) -> bool:
    exprs, flds = term
    for key, op, values, number in exprs:
        present = key in labels
        if op == "In":
            if not present or labels[key] not in values:
                return False
        elif op == "NotIn":
            if present and labels[key] in values:
                return False
        elif op == "Exists":
            if not present:
                return False
        elif op == "DoesNotExist":
            if present:
                return False
        else:  # Gt / Lt
            if not present or number is None:
                return False
            have = parse_int64(labels[key])
            if have is None or not (have > number if op == "Gt" else have < number):
                return False
    # Field requirements are skipped for a node without fields (no name), as upstream does.
    if flds and node_name:
        for fkey, fop, fvalue in flds:
            field_value = node_name if fkey == "metadata.name" else ""
            if (field_value == fvalue) != (fop == "In"):
                return False
    return True


def selector_matches(selector: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Whether a v1 NodeSelector matches the node; NodeSelectorError if it is invalid."""
    terms: Sequence[Mapping[str, Any]] = selector.get("nodeSelectorTerms") or ()
    compiled = [
        _compile_term(t) for t in terms if (t.get("matchExpressions") or t.get("matchFields"))
    ]  # all terms are parsed first: any invalid one is an error even if an earlier one matches
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    name: str = meta.get("name") or ""
    return any(_term_matches(t, labels, name) for t in compiled)


def node_matches(
    node: Mapping[str, Any], node_name: str, all_nodes: bool, node_selector: Mapping[str, Any] | None
) -> bool:
    """Upstream incubating.NodeMatches: nodeName first, then allNodes, then nodeSelector, else False."""
    if node_name:
        return bool((node.get("metadata") or {}).get("name") == node_name)
    if all_nodes:
        return True
    if node_selector is not None:
        return selector_matches(node_selector, node)
    return False
