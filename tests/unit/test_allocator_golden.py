"""Upstream's own answers for the golden cases: the differential test against Go, frozen.

`casegen.golden_cases()` builds them (the generator of tests/differential/test_differential.py, on
its own seed and scale); the expected outcome and a digest of the results (and, for node failures
and fatal errors, of the error's class and subject) come from k8s.io/dynamic-resource-allocation
v0.37.2 (`structured.NewAllocator` with the case's features, which all select the "incubating"
variant), run by the Go harness (tests/allocator_harness), which decodes the case JSON into
upstream types, builds the AllocatedState like kube-scheduler 1.37.2 does and calls `Allocate`.
tests/differential/golden.py documents the digest and makes them:
`.venv/bin/python -m tests.differential.golden --write`. If casegen changes, regenerate them with
it, from the harness, never from this port's output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from draxr_dev.allocator.casegen import golden_cases
from draxr_dev.allocator.cases import comparable, run_case
from tests.differential.golden import digest

CHUNKS = 8
_CASES: list[dict[str, Any]] = []


def _cases() -> list[dict[str, Any]]:
    if not _CASES:
        _CASES.extend(golden_cases())
    return _CASES


_UPSTREAM_TEXT = """
A9c04dfd57b A13fc33637f A59707f8c3b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aae0c208ca1 A7830f0c59e A59707f8c3b
Acfbbb1fef7 N5a7e9cf002 Aae0c208ca1 N5a7e9cf002 A90d1ce5812 A7830f0c59e N5a7e9cf002 A59707f8c3b A9c04dfd57b
N5a7e9cf002 N5a7e9cf002 A919429c8fe Aae0c208ca1 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A59986ed5a7 N5a7e9cf002
N5a7e9cf002 Ac0985da437 Aa287d3c7ac N5a7e9cf002 A8692656ebf A2b3215bbc6 N5a7e9cf002 A22d27d2d75 Ae19f1b38e7
N5a7e9cf002 N5a7e9cf002 Afe07112f34 Abf026fbe96 A19326bc94c N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A1fd5214e04
N5a7e9cf002 Af5c64e0ecb Ae4e56aa5a7 Ab967568def Ab204c4a232 Ad0979bc9a5 Xac12f62ca9 A31cc025c9e Xac12f62ca9
Xac12f62ca9 A1e8ebd2d19 Aa643b08065 N5a7e9cf002 N5a7e9cf002 Xac12f62ca9 Xac12f62ca9 Xac12f62ca9 Xac12f62ca9
N5a7e9cf002 A31cc025c9e A59707f8c3b Xac12f62ca9 Add8396f1d6 N5a7e9cf002 A24c4278893 A37bdff6ad9 X1966d59c3b
Ffd31cc17b9 Ffd31cc17b9 Ffd31cc17b9 Afd96db1787 A24c4278893 Ffd31cc17b9 Ffd31cc17b9 X1966d59c3b Afd96db1787
A24c4278893 Ffd31cc17b9 Ffd31cc17b9 Ffd31cc17b9 Afd96db1787 X1966d59c3b A48eec06db6 A24c4278893 Ffd31cc17b9
A5a5e7290d6 Aa88aa9ac0c A49469c1409 A7fc5b076f2 A0f55ece3a5 N5a7e9cf002 A16a3efdfcc N5a7e9cf002 Xc4a270aad2
N5a7e9cf002 A0f55ece3a5 Xc4a270aad2 A0181ebc491 N5a7e9cf002 A05107c6969 Abfc5157bf8 A31a452e226 Aa052766b67
A80a3c83e35 A8698e43ca9 A6887b9cbcd N5a7e9cf002 A0a6d24f70e A49469c1409 Aa944ee74eb N5a7e9cf002 Xc4a270aad2
A3ac0293759 Xc4a270aad2 A3340ccdd10 A614ce820b1 N5a7e9cf002 Xbcea93106c A713f9fb47c N5a7e9cf002 N5a7e9cf002
A32d86d5bda A3ed7b542a8 A713f9fb47c N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 A5e6c67f4bd N5a7e9cf002 N5a7e9cf002 Aa5c73b1a69 N5a7e9cf002 A11827440da A9a04da1c64 Aeff122f6cf
Ac7b01f73ab N5a7e9cf002 A15698b8784 Xcca5ef1787 N5a7e9cf002 Xcca5ef1787 Xcca5ef1787 Xcca5ef1787 Aa30bbd6878
A2c6e3cf269 A15698b8784 Xc869918c1d Aba259def38 N5a7e9cf002 N5a7e9cf002 Af5653a764a N5a7e9cf002 A11827440da
N5a7e9cf002 A1be7826fd7 N5a7e9cf002 N5a7e9cf002 A15698b8784 N5a7e9cf002 N5a7e9cf002 Xbfbe33b882 N5a7e9cf002
N5a7e9cf002 A7830f0c59e X70a4540aed N5a7e9cf002 Xc1c6cd412b A7830f0c59e X9df4bf81d6 A59707f8c3b Xbfbe33b882
Xbfbe33b882 N5a7e9cf002 A0f2ad9d90a X2f00ea68fe Aa643b08065 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A90d1ce5812
A90d1ce5812 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xbe26a1a931 N5a7e9cf002 A59707f8c3b Aa643b08065 X9df4bf81d6
Xe4f201e394 X2f00ea68fe N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A3bdc245e4a A695742e7db N5a7e9cf002 N5a7e9cf002 A8f66f0c668
A9c98f94c1b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aac31203be7 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A00f8ac623b N5a7e9cf002
A72793e651d A00f8ac623b A43335b71b7 N5a7e9cf002 A92876a7952 N5a7e9cf002 A3e83093629 N5a7e9cf002 Xea1bec3d38
N5a7e9cf002 N5a7e9cf002 Aea89055c48 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Aea89055c48 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A964f038b68 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Ac54a3f8877 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 Ac80578f4d9 A0715ea85ef A610264772e N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A7425733170
A691f59cc2d A9ebb790144 N5a7e9cf002 N5a7e9cf002 Adb95ee8db5 N5a7e9cf002 N5a7e9cf002 A7830f0c59e X2bc649b059
N5a7e9cf002 N5a7e9cf002 Af4249907ef A59707f8c3b Aba13e780f0 N5a7e9cf002 N5a7e9cf002 X2bc649b059 N5a7e9cf002
N5a7e9cf002 A63b026961c N5a7e9cf002 A9791b6c919 N5a7e9cf002 X2bc649b059 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 A161626e6a2 N5a7e9cf002 N5a7e9cf002 A7eec7804d2 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A7bfc776da8 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xff4846babb N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xff4846babb N5a7e9cf002 A87c0f9f10e N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A2c11b807f2 A0429f809ad Afa82102340
Ae21f9d9bef A301f77ced1 A301f77ced1 A92b96a3140 A5f34343a60 N5a7e9cf002 N5a7e9cf002 A81bf3dfa8d Aa56bf99c6c
A26caa9fe80 A99a7fd5528 A80de28b31f A9b4085b021 A2633774066 Ac0be0ff70f Ae10298b809 A81c32e16aa Ab155ebcf26
Ae6c8c94e79 A6c30785f35 Ae547b3a896 X1b9dc1a4ee Xc7ef005ca1 X65d187daf2 A8fd09a2cd8 Xd331e47f75 Xd331e47f75
Xa0691f2355 X077dac36e0 A71b96f934f Ad35a18ed95 X1b9dc1a4ee Xc7ef005ca1 X65d187daf2 A8fd09a2cd8 Xd331e47f75
Xd331e47f75 Xa0691f2355 X077dac36e0 A71b96f934f Ad35a18ed95 X1b9dc1a4ee Xc7ef005ca1 X65d187daf2 A8fd09a2cd8
Xd331e47f75 Xd331e47f75 Xa0691f2355 X077dac36e0 A71b96f934f Ad35a18ed95 N5a7e9cf002 N5a7e9cf002 Acf09621b9a
N5a7e9cf002 A5d6c1d62fe Aa93a36c28f N5a7e9cf002 Ab89e2c536f N5a7e9cf002 N5a7e9cf002 A97bda67999 N5a7e9cf002
Aa93a36c28f N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A7ecf56aa3e N5a7e9cf002 N5a7e9cf002 A7ecf56aa3e N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 A9c0fd5839c N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 Xac12f62ca9 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xac12f62ca9 A6702b47556
A0f6611f3e5 A6702b47556 A5cdeafa3c1 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A212db17eb8 N5a7e9cf002 A0f42d5cb32 N5a7e9cf002 A0f42d5cb32
Aa006c1dc0d N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Af2cd81eb24 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
A1c389ef0c1 A14e263489e A3af0169ab8 Adee971dfc0 A83ae3b34d7 A1c389ef0c1 Af380c60d08 A1c389ef0c1 A341f4eb1ec
Adee971dfc0 A69e983d0d8 A81faa5ac69 A4c4f2f26fd Ad7a917df60 Ac0af60d227 Ae4ee42909b N5a7e9cf002 Aa034f69d06
Ac66511b698 Ac34c9b31b4 A60d7c07ba4 A2fc72f23e4 A42ff991338 A80e54a2486 Ac66511b698 A80e54a2486 A67f00a3521
A46236ac47b A01132f1823 A80e54a2486 Aae601d0ce4 N5a7e9cf002 A09e0755d52 A86d5f34afb A2a8a9a73f3 A9168a4d13a
Ac9599ccdc5 Aceeef197c2 A4484d173ed N5a7e9cf002 N5a7e9cf002 Xec49b05282 A9c2ec56085 N5a7e9cf002 Ac34c9b31b4
N5a7e9cf002 X82d0c5aab1 N5a7e9cf002 N5a7e9cf002 A9c2ec56085 Ac34c9b31b4 N5a7e9cf002 Ac34c9b31b4 N5a7e9cf002
Xcdb2b87ff7 Ac34c9b31b4 A57d92a787d X7cdcdadca9 N5a7e9cf002 N5a7e9cf002 A3bdc245e4a A9c2ec56085 N5a7e9cf002
A9c2ec56085 N5a7e9cf002 Ac34c9b31b4 N5a7e9cf002 N5a7e9cf002 A3ee3bca884 A145c93f209 Xac12f62ca9 A05a508d009
N5a7e9cf002 Xac12f62ca9 X1966d59c3b Ffd31cc17b9 N5a7e9cf002 N5a7e9cf002 Ad041fb1801 Ad2b0862e28 N5a7e9cf002
N5a7e9cf002 A2329676276 A574990bc01 A773f3db35d N5a7e9cf002 Xac12f62ca9 N5a7e9cf002 A67585183d0 A8df498b29a
N5a7e9cf002 A0835e10ead N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Abc266cb6cc N5a7e9cf002 Af31520a2b9
Ae4ee42909b N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 A47330efef8 A0cef99011f Ac549e3e138 Ae10bc4c600 N5a7e9cf002 Ae5752542b1 N5a7e9cf002 N5a7e9cf002
X8106a90631 A718903a80d A0d387fcd7d A0d387fcd7d A802263116d A1a9e28dd7d A7568b44886 A0d387fcd7d X532a074792
A0e883ec05c X4161220d90 A27cfa12a50 A80dfff49be A718903a80d A8320c1c33c A0d387fcd7d A9c52787708 A0d387fcd7d
A0d387fcd7d Ac426a2c568 A0e7dcf08e4 A892359c045 Ac42e1b6393 Ad5e029ad09 A408d7d6c65 A802263116d Aca4241c33f
Ad5e029ad09 X289679e376 Aca4241c33f Ac42e1b6393 Ac42e1b6393 A4b49fe8145 X6058382581 Ac42e1b6393 Ac42e1b6393
Ada32bd3292 A572acb9943 Aebbc3d08e8 Ad94744d20e A0e7dcf08e4 Ada32bd3292 Aebbc3d08e8 A0e7dcf08e4 A395e52dd9c
Ac426a2c568 A27cfa12a50 X8106a90631 Ac426a2c568 A9429b673f2 A9429b673f2 A53131636e4 X6058382581 A7107ad3776
X6058382581 A9ee4685a8f A9183130bf5 X95e9445122 X4161220d90 A27cfa12a50 Ac26c1d31ba Ada32bd3292 X6058382581
X6058382581 Aca4241c33f Ad078ddcb74 A27cfa12a50 Ac26c1d31ba Af215c4eef8 Ada32bd3292 A43a15ff6b1 A05c5e59a88
A3669e3628b X532a074792 X2baf264a22 X532a074792 X15bb0a6095 X2baf264a22 A7568b44886 A7568b44886 X532a074792
Afa100da947 Aca4241c33f Ada32bd3292 X15bb0a6095 X15bb0a6095 X6058382581 X6058382581 Aca4241c33f A05c5e59a88
A80dfff49be X7f5f2ea7da A718903a80d A24ad7c860c A0d387fcd7d A802263116d Adaaeb3343e A7568b44886 A0d387fcd7d
Xaadd00d26b A0e883ec05c Xccdfdb7176 A0949d354c9 A80dfff49be A718903a80d Afe371ac957 A0d387fcd7d A9c52787708
A24ad7c860c Ac8fb8a63ae Xc4a270aad2 N5a7e9cf002 X746ab3959d A9fae52395f A1520ac7081 N5a7e9cf002 Xc4a270aad2
Ae27647f72a X746ab3959d A196de9b6dc A1f3af86999 A0e7f5e5d94 Xc4a270aad2 A157f24332a X746ab3959d Ad4c0ad8863
N5a7e9cf002 A05f957b076 N5a7e9cf002 A57c866a07f X746ab3959d A1520ac7081 A6da9314a49 X1effcd90a2 Xccae8fc3b2
N5a7e9cf002 A85716351cc A8fc52d287e Xec7a6eb8cd A85716351cc Af19a924602 A8fc52d287e Xf82b94df92 X1effcd90a2
N5a7e9cf002 N5a7e9cf002 A85716351cc A8fc52d287e Xec7a6eb8cd N5a7e9cf002 N5a7e9cf002 A8fc52d287e Xf82b94df92
X1effcd90a2 Xccae8fc3b2 N5a7e9cf002 A85716351cc Aecd91b2016 A2978a838b3 Af5c6b9eb75 A2519310adc N5a7e9cf002
N5a7e9cf002 X904cbd9579 X1ba067d9b4 X1ba067d9b4 N5a7e9cf002 A9b18477b44 N5a7e9cf002 N5a7e9cf002 Ada41bc53b2
A0fbb8fc074 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xe50466664f
A8fdad4a572 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X1ba067d9b4 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 X904cbd9579 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A86d0be0d66 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 A3f105ad691 Ac60677a14c N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
Xa7c4a23a08 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A7196d4b5e0 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002
N5a7e9cf002 A308407d87e N5a7e9cf002 Xf6bd1005de Xe014643738 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X9a09880a07
X2a27cd0b1e N5a7e9cf002 A538de5ebdf Ffd31cc17b9 X9ba0c87014 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 Xade768b70e
N5a7e9cf002 A1c21cdfdd5 Ffd31cc17b9 X771e58ae23 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X1ce48b60cc N5a7e9cf002
N5a7e9cf002 N5a7e9cf002 Ac512750178 A7aaf0b345f A5087b1ce1b N5a7e9cf002 Xa6e394fc19 N5a7e9cf002 X29c5f725ef
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 X0136c65997 X1886751e98 N5a7e9cf002 N5a7e9cf002 Ac2ddd28cb5 Ab5ab9568ce
Ac0e051e888 N5a7e9cf002 X815702c6cf A33a38650fb Aa63fa0c62f A61e0a007a3 Ac1dacdb412 Xaeda43ba6c Ffd31cc17b9
A968d4c645e N5a7e9cf002 Aa274a593a7 N5a7e9cf002 N5a7e9cf002 Aee8d133a3b Xa6e394fc19 X3a95bc6311 N5a7e9cf002
N5a7e9cf002 X10ef660dd1 A278b8b1eaf N5a7e9cf002 X10ef660dd1 N5a7e9cf002 N5a7e9cf002 X241b661798 X1886751e98
Af5a6743081 N5a7e9cf002 N5a7e9cf002 Ad010616781 X86b4fb35f6 N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 Xdc2ed439b7
N5a7e9cf002 N5a7e9cf002 Acdbe4d8437 N5a7e9cf002 Xfa2ec193eb N5a7e9cf002 N5a7e9cf002 Xaeda43ba6c X20fb2c41dc
N5a7e9cf002 N5a7e9cf002 N5a7e9cf002 A6e1831fd08 Ac24cf02a66 A6dadbdf142 X1886751e98 N5a7e9cf002 N5a7e9cf002
A2d0948c30a N5a7e9cf002 N5a7e9cf002 A7b5745daaf Xdbb582a988 N5a7e9cf002 X0136c65997 N5a7e9cf002 N5a7e9cf002
A2a09c722d3 N5a7e9cf002 Ffd31cc17b9 N5a7e9cf002 Aeea3c0d4bb N5a7e9cf002 Xd248e34017 A934791929a Adbe8a1f7b5
A5aad62a738 N5a7e9cf002 Xa6e394fc19 A88f35f3c41
"""
UPSTREAM = _UPSTREAM_TEXT.split()


def test_corpus_size() -> None:
    assert len(UPSTREAM) == len(_cases()) >= 800


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_same_answers_as_upstream(chunk: int) -> None:
    wrong = []
    cases = _cases()
    for i in range(chunk, len(cases), CHUNKS):
        output = run_case(cases[i])
        if digest(output) != UPSTREAM[i]:
            shown = {**comparable(output), "error": output.get("error", "")}
            wrong.append((cases[i]["name"], UPSTREAM[i][0], output["outcome"], json.dumps(shown)[:300]))
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
