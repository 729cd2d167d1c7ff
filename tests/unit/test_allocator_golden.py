"""Upstream's own answers for 800 generated cases: the differential test against Go, frozen.

`casegen.generate_case(seed)` builds case `seed`; the expected outcome and a hash of the results
come from k8s.io/dynamic-resource-allocation v0.37.2 (`structured.NewAllocator` with the case's
features, which all select the "incubating" variant), run by a small Go harness that decodes the
case JSON into upstream types, builds the AllocatedState like kube-scheduler 1.37.2 does, calls
`Allocate` and prints the results with shareIDs replaced by "SHARE" (cases.py documents the format).

Entry `seed` is one letter (A allocated, N no fit, F node failure, X fatal) plus the first 10 hex
digits of sha256 over `json.dumps(cases.comparable(output), sort_keys=True, separators=(",", ":"))`.
If casegen changes, these must be regenerated with the harness, never from this port's output.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from draxr.core.allocator.casegen import generate_case
from draxr.core.allocator.cases import comparable, run_case

_UPSTREAM_TEXT = """
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 A6779175084 N5a7e9cf002 A3995e8faf4 Ad373040fb0 Xb7da299260
N5a7e9cf002 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 A11cfe275a8 N5a7e9cf002 N5a7e9cf002 Xb7da299260 A18d36b3830
Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Ab79e982b7e A8e0636cc24 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aa281aeab75 N5a7e9cf002 A1299fc86f4
Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A394269537e N5a7e9cf002 Adeb40f8e09 N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 Ae1e5a9a56a N5a7e9cf002
N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002
Xb7da299260 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 Fb88e57c09a
N5a7e9cf002 N5a7e9cf002 A9e1339711e Fb88e57c09a A618e691df1 Ae66e314fd6 A9df2014e17 N5a7e9cf002 N5a7e9cf002
Fb88e57c09a N5a7e9cf002 N5a7e9cf002 A0bdc8c9585 A1859ab9f37 N5a7e9cf002 A5cb405a574 N5a7e9cf002 Xb7da299260
A238ea5b657 A9aed08b1c6 Xb7da299260 N5a7e9cf002 Xb7da299260 Xb7da299260 N5a7e9cf002 Fb88e57c09a N5a7e9cf002
N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002
Xb7da299260 Aeefb15198a N5a7e9cf002 Xb7da299260 A3abcd09d0a Xb7da299260 Fb88e57c09a N5a7e9cf002 A635a6d6876
Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Fb88e57c09a A6e38ad69a2 N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 A0a16c5d0f0 N5a7e9cf002
Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 Ab4fd0d5c24 N5a7e9cf002 Aaf04e960ce
Xb7da299260 N5a7e9cf002 Xb7da299260 Xb7da299260 A445ac5b887 A1fc491791f N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Fb88e57c09a Aab1466ca3c N5a7e9cf002 Adabdad392f Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260
N5a7e9cf002 A8daf0a4280 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 Ac2b600724f N5a7e9cf002
N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 A5a696b10d7 A2a785419d4 N5a7e9cf002 A44ef96028c Xb7da299260
N5a7e9cf002 Fb88e57c09a Ac4948c149b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ad565205674 N5a7e9cf002 A652d3cb807
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A988a6832ee A093f8fdafa Abd6d4ae44e N5a7e9cf002
N5a7e9cf002 Xb7da299260 A55cc26fae8 Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xb7da299260 A3d549b7953 N5a7e9cf002 Aa06d7e6ece Xb7da299260 Af060dfde8d Xb7da299260 N5a7e9cf002 Xb7da299260
Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 Xb7da299260 A9d9c031f52
A515a00aaca N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 A707ca9f0a5 A2323c08c0f N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 A3e36c6aa3c A7079c6cba0 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A2850f8f0f8 N5a7e9cf002
A3d9b7a0df6 A82e73df136 N5a7e9cf002 N5a7e9cf002 A2bcb0e5bff N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A2a8584f780
N5a7e9cf002 Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 Xb7da299260 A4cd0137ce3 N5a7e9cf002
N5a7e9cf002 Xb7da299260 Acf01ab2361 A65e659e7bb Ae7f068e547 N5a7e9cf002 Fb88e57c09a N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A596b22b633 Xb7da299260 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Af8aedd96f3 Fb88e57c09a Xb7da299260
N5a7e9cf002 Fb88e57c09a A5e80d46e54 N5a7e9cf002 Aa90ae2f162 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002
N5a7e9cf002 A7ba4dd86a4 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 Add97e1c397 N5a7e9cf002 Xb7da299260 Aaa2186b4b2
Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A6da834ba4d
Xb7da299260 Af2150df492 N5a7e9cf002 A114496621b N5a7e9cf002 A5d6dfe578b A91877d8ed9 Xb7da299260 N5a7e9cf002
N5a7e9cf002 Xb7da299260 Fb88e57c09a Xb7da299260 A58a9c10182 Xb7da299260 N5a7e9cf002 Xb7da299260 A3692fcf2bb
N5a7e9cf002 Xb7da299260 A0023e01250 Af2c69bf7e2 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 A13ef2bd704
Xb7da299260 N5a7e9cf002 Fb88e57c09a Xb7da299260 N5a7e9cf002 Xb7da299260 Fb88e57c09a A9a38053178 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 Xb7da299260 A8d2b1b3ab2 Ad8cb359db2 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002
Ac3f676de2c N5a7e9cf002 A6ca7d95148 N5a7e9cf002 Fb88e57c09a A11f9ab4ac2 N5a7e9cf002 N5a7e9cf002 A81ed8b04e8
Xb7da299260 Xb7da299260 N5a7e9cf002 A343f452517 Aa0df6d2ffd N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ab1ae7ffffb
Xb7da299260 Xb7da299260 A9205cb1f85 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Ae33f12eb57 N5a7e9cf002 N5a7e9cf002 Fb88e57c09a Xb7da299260 N5a7e9cf002 Xb7da299260 A75781420fe N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 A350ea12f16 A4e753714a3 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002
N5a7e9cf002 Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 A73adf1fecb N5a7e9cf002 N5a7e9cf002 Xb7da299260
N5a7e9cf002 N5a7e9cf002 A50902b7e98 A94e42b13ae N5a7e9cf002 N5a7e9cf002 Xb7da299260 A69c1365edf N5a7e9cf002
Aec9017b671 N5a7e9cf002 N5a7e9cf002 A8375fcd5ba N5a7e9cf002 Xb7da299260 Aa63fa0c62f N5a7e9cf002 N5a7e9cf002
Af54091a572 N5a7e9cf002 A197ce2ebef Fb88e57c09a N5a7e9cf002 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002
Xb7da299260 Xb7da299260 Xb7da299260 A8e5f2a5615 N5a7e9cf002 N5a7e9cf002 Fb88e57c09a Xb7da299260 N5a7e9cf002
N5a7e9cf002 Xb7da299260 Ad5797a1c9f N5a7e9cf002 N5a7e9cf002 A6c1546dbbf Xb7da299260 N5a7e9cf002 Xb7da299260
N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 Xb7da299260 Ae0f4169623 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Xb7da299260 Xb7da299260 N5a7e9cf002 Fb88e57c09a Xb7da299260 Ab7182f8f1d N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Fb88e57c09a Aea1159c826 N5a7e9cf002 N5a7e9cf002 Ae053e40b9e Xb7da299260 Xb7da299260 Ae527c68349
Xb7da299260 Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260
A6d687d6b07 N5a7e9cf002 Xb7da299260 Xb7da299260 A9e9125f61a Xb7da299260 A678747bf7a N5a7e9cf002 N5a7e9cf002
Af6eeee6d6a Fb88e57c09a N5a7e9cf002 N5a7e9cf002 Fb88e57c09a Xb7da299260 N5a7e9cf002 Xb7da299260 Fb88e57c09a
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aa4c71d78f1 A03de6b3d6b N5a7e9cf002 A0fe9f40b8d A3aad894473 N5a7e9cf002
N5a7e9cf002 Fb88e57c09a N5a7e9cf002 Acf8c157181 N5a7e9cf002 N5a7e9cf002 Xb7da299260 A11e7492175 Aefc1405cb1
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Abf74822964 N5a7e9cf002 A16e9258ae6 A2f7f07f561 N5a7e9cf002 N5a7e9cf002
Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A606501894f A1fb314cb89 Aac19db643e
Xb7da299260 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 Fb88e57c09a
N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 A78ef57238c N5a7e9cf002 N5a7e9cf002 Fb88e57c09a N5a7e9cf002
N5a7e9cf002 Af9489ef1c2 Xb7da299260 N5a7e9cf002 Xb7da299260 A8442b67018 Xb7da299260 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Ae09424eaaf Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A8191cdab00 Xb7da299260 Xb7da299260 N5a7e9cf002 N5a7e9cf002 A65043ef64b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xb7da299260 A45e7dd451d N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Fb88e57c09a
N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002
Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xb7da299260 A7fe628e3f6 N5a7e9cf002 N5a7e9cf002 Ae5aa171f27 Fb88e57c09a N5a7e9cf002 Ad54dc9aea3 A8f34d3801a
N5a7e9cf002 Xb7da299260 N5a7e9cf002 Abe4d5e1ee9 Xb7da299260 Xb7da299260 Aac60bd1cc9 N5a7e9cf002 N5a7e9cf002
Xb7da299260 Ae31e7b6f90 N5a7e9cf002 Xb7da299260 A08d2aefea3 Xb7da299260 A93334d2fcc N5a7e9cf002 N5a7e9cf002
Xb7da299260 Fb88e57c09a N5a7e9cf002 A53b7b221a9 Xb7da299260 A63997c936d Xb7da299260 Xb7da299260 N5a7e9cf002
Xb7da299260 N5a7e9cf002 Ace74de33bb Fb88e57c09a A5ac36f0e93 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ac1b6211786
A7ee3947cd7 Xb7da299260 N5a7e9cf002 Xb7da299260 A1b737fad2d A452a6db537 Xb7da299260 N5a7e9cf002 A7b4c5ba081
N5a7e9cf002 N5a7e9cf002 Ada9c8890c7 N5a7e9cf002 Ab464934784 Xb7da299260 N5a7e9cf002 N5a7e9cf002 A1961fc508b
Xb7da299260 Xb7da299260 A72658d869e Xb7da299260 A72a52c164e N5a7e9cf002 A8815e5152f Fb88e57c09a Fb88e57c09a
N5a7e9cf002 A883e03fc2a N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aee982e5ee8 N5a7e9cf002 Xb7da299260
N5a7e9cf002 N5a7e9cf002 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 Xb7da299260 Xb7da299260 N5a7e9cf002 A2c7d62235d
N5a7e9cf002 N5a7e9cf002 Xb7da299260 A47016d641b A96eb9bff32 N5a7e9cf002 N5a7e9cf002 Xb7da299260 Xb7da299260
N5a7e9cf002 N5a7e9cf002 Xb7da299260 Xb7da299260 N5a7e9cf002 A05d3312160 N5a7e9cf002 Xb7da299260 Ad20e5114d6
Ab34d0bb116 N5a7e9cf002 N5a7e9cf002 Ab14cc57f04 N5a7e9cf002 Xb7da299260 Aaa037eb674 Xb7da299260 Fb88e57c09a
Af301f11bf3 N5a7e9cf002 Xb7da299260 Fb88e57c09a N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 A626267d06d
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xb7da299260 N5a7e9cf002 Xb7da299260 N5a7e9cf002
"""
UPSTREAM = _UPSTREAM_TEXT.split()

_CODE = {"allocated": "A", "noFit": "N", "nodeFailure": "F", "fatal": "X"}


def _digest(output: dict[str, object]) -> str:
    text = json.dumps(comparable(output), sort_keys=True, separators=(",", ":"))
    return _CODE[str(output["outcome"])] + hashlib.sha256(text.encode()).hexdigest()[:10]


def test_corpus_size() -> None:
    assert len(UPSTREAM) == 800


@pytest.mark.parametrize("chunk", range(8))
def test_same_answers_as_upstream(chunk: int) -> None:
    wrong = []
    for seed in range(chunk * 100, (chunk + 1) * 100):
        output = run_case(generate_case(seed))
        if _digest(output) != UPSTREAM[seed]:
            wrong.append((seed, UPSTREAM[seed][0], output["outcome"], json.dumps(comparable(output))[:300]))
    assert not wrong, wrong


def test_outcome_mix_covers_every_kind() -> None:
    kinds = {entry[0] for entry in UPSTREAM}
    assert kinds == {"A", "N", "F", "X"}


def _prioritized_list_case(**extra: object) -> dict[str, object]:
    from draxr.core.allocator.builders import claim, device, device_class, node, slice_, subrequest

    case: dict[str, object] = {
        "name": "features",
        "node": node("node-1"),
        "slices": [slice_("s", [device("dev-0")])],
        "classes": [device_class("class-a", 'device.driver == "driver-a"')],
        "claims": [claim("c", {"name": "r", "firstAvailable": [subrequest("a")]})],
    }
    case.update(extra)
    return case


@pytest.mark.parametrize(
    ("extra", "outcome"),
    [
        ({}, "allocated"),  # no "features": kube-scheduler 1.37.2's defaults, as the Go harness uses
        ({"features": None}, "allocated"),
        ({"features": {}}, "fatal"),  # a Go struct literal: every feature left out is off
        ({"features": {"PrioritizedList": True}}, "allocated"),
    ],
)
def test_case_features_default_like_the_harness(extra: dict[str, object], outcome: str) -> None:
    # Checked against the Go harness: DRAPrioritizedList is on by default, so firstAvailable works.
    out = run_case(_prioritized_list_case(**extra))
    assert out["outcome"] == outcome, out
