"""Upstream's own answers for 800 generated cases: the differential test against Go, frozen.

`casegen.generate_case(seed)` builds case `seed`; the expected outcome and a digest of the results
(and, for node failures and fatal errors, of the error's class and subject) come from
k8s.io/dynamic-resource-allocation v0.37.2 (`structured.NewAllocator` with the case's features,
which all select the "incubating" variant), run by the Go harness (tests/allocator_harness), which
decodes the case JSON into upstream types, builds the AllocatedState like kube-scheduler 1.37.2
does and calls `Allocate`. tests/differential/golden.py documents the digest and makes them:
`.venv/bin/python -m tests.differential.golden --write`. If casegen changes, regenerate them with
it, from the harness, never from this port's output.
"""

from __future__ import annotations

import json

import pytest

from draxr_dev.allocator.casegen import generate_case
from draxr_dev.allocator.cases import comparable, run_case
from tests.differential.golden import CASES, digest

_UPSTREAM_TEXT = """
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X9ba0c87014 A6779175084 N5a7e9cf002 A3995e8faf4 Ad373040fb0 Xfa2ec193eb
N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 A11cfe275a8 N5a7e9cf002 N5a7e9cf002 X10ef660dd1 A18d36b3830
Xa93342a267 X93044d5596 X2a27cd0b1e N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Ab79e982b7e A8e0636cc24 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aa281aeab75 N5a7e9cf002 A1299fc86f4
Xfa2ec193eb N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A394269537e N5a7e9cf002 Adeb40f8e09 N5a7e9cf002 X8e0d9f7ec6 N5a7e9cf002 Xa93342a267 Ae1e5a9a56a N5a7e9cf002
N5a7e9cf002 Xe014643738 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X721c39c833 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 Xebc94c9e48 N5a7e9cf002
Xd248e34017 N5a7e9cf002 X815702c6cf N5a7e9cf002 N5a7e9cf002 X6ac6fd63a5 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9
N5a7e9cf002 N5a7e9cf002 A9e1339711e Ffd31cc17b9 A618e691df1 Ae66e314fd6 A9df2014e17 N5a7e9cf002 N5a7e9cf002
Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 A0bdc8c9585 A1859ab9f37 N5a7e9cf002 A5cb405a574 N5a7e9cf002 X1b0f8ed70a
A238ea5b657 A9aed08b1c6 X86b4fb35f6 N5a7e9cf002 X3a3701179d X97fd770bcf N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002
N5a7e9cf002 Xe014643738 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X0136c65997 N5a7e9cf002 N5a7e9cf002
Xfa2ec193eb Aeefb15198a N5a7e9cf002 X9ed9883964 A3abcd09d0a X269a815679 Ffd31cc17b9 N5a7e9cf002 A635a6d6876
Xe3fd461bab X50cbd5274e N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Ffd31cc17b9 A6e38ad69a2 N5a7e9cf002 Xf964d93181 N5a7e9cf002 Xaeda43ba6c A0a16c5d0f0 N5a7e9cf002
Xaeda43ba6c X2a27cd0b1e N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X2a27cd0b1e Ab4fd0d5c24 N5a7e9cf002 Aaf04e960ce
Xa93342a267 N5a7e9cf002 X9ea7f44cd7 X9ea7f44cd7 A445ac5b887 A1fc491791f N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Ffd31cc17b9 Aab1466ca3c N5a7e9cf002 Adabdad392f X9f94654736 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X10ef660dd1
N5a7e9cf002 A8daf0a4280 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X03757a6d56 Ac2b600724f N5a7e9cf002
N5a7e9cf002 X2a27cd0b1e N5a7e9cf002 N5a7e9cf002 A5a696b10d7 A2a785419d4 N5a7e9cf002 A44ef96028c Xa93342a267
N5a7e9cf002 Ffd31cc17b9 Ac4948c149b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ad565205674 N5a7e9cf002 A652d3cb807
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A988a6832ee A093f8fdafa Abd6d4ae44e N5a7e9cf002
N5a7e9cf002 X9a47d6cd51 A55cc26fae8 Xb19fdbfaf5 X9a47d6cd51 X9ba0c87014 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
X86b4fb35f6 A3d549b7953 N5a7e9cf002 Aa06d7e6ece X86b4fb35f6 Af060dfde8d Xf6bd1005de N5a7e9cf002 X86b4fb35f6
Xe21d7a5ed3 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X0136c65997 N5a7e9cf002 X86b4fb35f6 X4fae00bed7 A9d9c031f52
A515a00aaca N5a7e9cf002 X2a27cd0b1e N5a7e9cf002 N5a7e9cf002 A707ca9f0a5 A2323c08c0f N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 A3e36c6aa3c A7079c6cba0 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A2850f8f0f8 N5a7e9cf002
A3d9b7a0df6 A82e73df136 N5a7e9cf002 N5a7e9cf002 A2bcb0e5bff N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A2a8584f780
N5a7e9cf002 Xa26a0de764 X10ef660dd1 Xf326ec6e04 N5a7e9cf002 N5a7e9cf002 X9ed9883964 A4cd0137ce3 N5a7e9cf002
N5a7e9cf002 X5e4c5ac7ea Acf01ab2361 A65e659e7bb Ae7f068e547 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A596b22b633 Xf6bd1005de N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Af8aedd96f3 Ffd31cc17b9 X97fd770bcf
N5a7e9cf002 Ffd31cc17b9 A5e80d46e54 N5a7e9cf002 Aa90ae2f162 N5a7e9cf002 N5a7e9cf002 Xf8f9a1398f N5a7e9cf002
N5a7e9cf002 A7ba4dd86a4 Xc9df465c59 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X19e2dea01c N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xfa2ec193eb N5a7e9cf002 Add97e1c397 N5a7e9cf002 Xfa2ec193eb Aaa2186b4b2
X86b4fb35f6 Xe301d47836 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A6da834ba4d
X8057a9ab4f Af2150df492 N5a7e9cf002 A114496621b N5a7e9cf002 A5d6dfe578b A91877d8ed9 Xaeda43ba6c N5a7e9cf002
N5a7e9cf002 X9a47d6cd51 Ffd31cc17b9 Xade768b70e A58a9c10182 X4c3af74ab8 N5a7e9cf002 Xd248e34017 A3692fcf2bb
N5a7e9cf002 Xa6e394fc19 A0023e01250 Af2c69bf7e2 N5a7e9cf002 N5a7e9cf002 Xa93342a267 N5a7e9cf002 A13ef2bd704
X2a27cd0b1e N5a7e9cf002 Ffd31cc17b9 X6bded67c0c N5a7e9cf002 X0136c65997 Ffd31cc17b9 A9a38053178 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 X022bd44532 A8d2b1b3ab2 Ad8cb359db2 N5a7e9cf002 X4c3af74ab8 N5a7e9cf002 N5a7e9cf002
Ac3f676de2c N5a7e9cf002 A6ca7d95148 N5a7e9cf002 Ffd31cc17b9 A11f9ab4ac2 N5a7e9cf002 N5a7e9cf002 A81ed8b04e8
X815702c6cf X86b4fb35f6 N5a7e9cf002 A343f452517 Aa0df6d2ffd N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ab1ae7ffffb
Xe172fc195b X2a27cd0b1e A9205cb1f85 Xe8e7eba3fd N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Ae33f12eb57 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 X0136c65997 N5a7e9cf002 Xdc2ed439b7 A75781420fe N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 A350ea12f16 A4e753714a3 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X29c5f725ef N5a7e9cf002
N5a7e9cf002 Xdff59f839e Xe172fc195b X97fd770bcf N5a7e9cf002 A73adf1fecb N5a7e9cf002 N5a7e9cf002 Xd500758242
N5a7e9cf002 N5a7e9cf002 A50902b7e98 A94e42b13ae N5a7e9cf002 N5a7e9cf002 X86b4fb35f6 A69c1365edf N5a7e9cf002
Aec9017b671 N5a7e9cf002 N5a7e9cf002 A8375fcd5ba N5a7e9cf002 X2a27cd0b1e Aa63fa0c62f N5a7e9cf002 N5a7e9cf002
Af54091a572 N5a7e9cf002 A197ce2ebef Ffd31cc17b9 N5a7e9cf002 X86b4fb35f6 X49c3c7a64c N5a7e9cf002 N5a7e9cf002
X3fabc3c772 X8057a9ab4f Xe301d47836 A8e5f2a5615 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 X269a815679 N5a7e9cf002
N5a7e9cf002 X9ea7f44cd7 Ad5797a1c9f N5a7e9cf002 N5a7e9cf002 A6c1546dbbf X12f6d8ee88 N5a7e9cf002 X39f4b50580
N5a7e9cf002 Xa6e394fc19 N5a7e9cf002 X86b4fb35f6 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xa93342a267 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X10ef660dd1 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 X29c5f725ef Ae0f4169623 N5a7e9cf002 X9a47d6cd51 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 X8fa59fd3b1 X3b7ce6f02d N5a7e9cf002 Ffd31cc17b9 Xcb2e776391 Ab7182f8f1d N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Ffd31cc17b9 Aea1159c826 N5a7e9cf002 N5a7e9cf002 Ae053e40b9e X86b4fb35f6 Xe21d7a5ed3 Ae527c68349
Xee6f46e8a8 X3c041701c6 Xaeda43ba6c Xf6bd1005de N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X0136c65997
A6d687d6b07 N5a7e9cf002 Xa93342a267 X86b4fb35f6 A9e9125f61a X3fabc3c772 A678747bf7a N5a7e9cf002 N5a7e9cf002
Af6eeee6d6a Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 X2a27cd0b1e N5a7e9cf002 Xe014643738 Ffd31cc17b9
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aa4c71d78f1 A03de6b3d6b N5a7e9cf002 A0fe9f40b8d A3aad894473 N5a7e9cf002
N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 Acf8c157181 N5a7e9cf002 N5a7e9cf002 Xbedd436990 A11e7492175 Aefc1405cb1
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Abf74822964 N5a7e9cf002 A16e9258ae6 A2f7f07f561 N5a7e9cf002 N5a7e9cf002
Xdc2ed439b7 X8fa59fd3b1 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A606501894f A1fb314cb89 Aac19db643e
X7f1cd3bf01 X7ddc8967f3 Xa74596026d N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X9a47d6cd51 Ffd31cc17b9
N5a7e9cf002 Xfa8b5339d5 N5a7e9cf002 N5a7e9cf002 A78ef57238c N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002
N5a7e9cf002 Af9489ef1c2 X9ea7f44cd7 N5a7e9cf002 Xdbb582a988 A8442b67018 X5f6e522a46 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 Ae09424eaaf X7f1cd3bf01 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A8191cdab00 X12f6d8ee88 X815702c6cf N5a7e9cf002 N5a7e9cf002 A65043ef64b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
X2a27cd0b1e A45e7dd451d N5a7e9cf002 N5a7e9cf002 Xa6e394fc19 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9
N5a7e9cf002 Xf7378a0d93 N5a7e9cf002 X815702c6cf Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 X0d197d9d36 N5a7e9cf002
X815702c6cf N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X815702c6cf N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
X19cd735cdb A7fe628e3f6 N5a7e9cf002 N5a7e9cf002 Ae5aa171f27 Ffd31cc17b9 N5a7e9cf002 Ad54dc9aea3 A8f34d3801a
N5a7e9cf002 Xb80efac04f N5a7e9cf002 Abe4d5e1ee9 Xa6e394fc19 X307f5c9e7e Aac60bd1cc9 N5a7e9cf002 N5a7e9cf002
X7f1cd3bf01 Ae31e7b6f90 N5a7e9cf002 Xe21d7a5ed3 A08d2aefea3 X08f279b741 A93334d2fcc N5a7e9cf002 N5a7e9cf002
Xf7378a0d93 Ffd31cc17b9 N5a7e9cf002 A53b7b221a9 Xd248e34017 A63997c936d X02de913642 Xdbb582a988 N5a7e9cf002
X21b081c8a5 N5a7e9cf002 Ace74de33bb Ffd31cc17b9 A5ac36f0e93 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ac1b6211786
A7ee3947cd7 X49c3c7a64c N5a7e9cf002 X815702c6cf A1b737fad2d A452a6db537 Xa40c44dec3 N5a7e9cf002 A7b4c5ba081
N5a7e9cf002 N5a7e9cf002 Ada9c8890c7 N5a7e9cf002 Ab464934784 X50cbd5274e N5a7e9cf002 N5a7e9cf002 A1961fc508b
X8fa59fd3b1 X2a27cd0b1e A72658d869e X97fd770bcf A72a52c164e N5a7e9cf002 A8815e5152f Ffd31cc17b9 Ffd31cc17b9
N5a7e9cf002 A883e03fc2a N5a7e9cf002 N5a7e9cf002 X9ea7f44cd7 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aee982e5ee8 N5a7e9cf002 Xd500758242
N5a7e9cf002 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 X2a27cd0b1e Xa93342a267 N5a7e9cf002 A2c7d62235d
N5a7e9cf002 N5a7e9cf002 Xa6e394fc19 A47016d641b A96eb9bff32 N5a7e9cf002 N5a7e9cf002 Xe014643738 X3fabc3c772
N5a7e9cf002 N5a7e9cf002 Xabeb8bf764 X2a27cd0b1e N5a7e9cf002 A05d3312160 N5a7e9cf002 X9ba0c87014 Ad20e5114d6
Ab34d0bb116 N5a7e9cf002 N5a7e9cf002 Ab14cc57f04 N5a7e9cf002 X29c5f725ef Aaa037eb674 X2a27cd0b1e Ffd31cc17b9
Af301f11bf3 N5a7e9cf002 X9ed9883964 Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 Xe21d7a5ed3 N5a7e9cf002 A626267d06d
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X10ef660dd1 N5a7e9cf002 Xa3ee3b2b53 N5a7e9cf002
"""
UPSTREAM = _UPSTREAM_TEXT.split()


def test_corpus_size() -> None:
    assert len(UPSTREAM) == CASES == 800


@pytest.mark.parametrize("chunk", range(8))
def test_same_answers_as_upstream(chunk: int) -> None:
    wrong = []
    for seed in range(chunk * 100, (chunk + 1) * 100):
        output = run_case(generate_case(seed))
        if digest(output) != UPSTREAM[seed]:
            shown = {**comparable(output), "error": output.get("error", "")}
            wrong.append((seed, UPSTREAM[seed][0], output["outcome"], json.dumps(shown)[:300]))
    assert not wrong, wrong


def test_outcome_mix_covers_every_kind() -> None:
    kinds = {entry[0] for entry in UPSTREAM}
    assert kinds == {"A", "N", "F", "X"}


def _prioritized_list_case(**extra: object) -> dict[str, object]:
    from draxr_dev.allocator.builders import claim, device, device_class, node, slice_, subrequest

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
