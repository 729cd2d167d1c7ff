"""Selectors that only compare the driver (`device.driver == "<name>"`) are answered without CEL
(CompiledSelector.driver_equals, used by the allocator): the shortcut's answer equals the CEL
evaluation's on any device, and it is offered for nothing else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from draxr.core.cel import CelCompileError, compile_selector, device_view

_names = st.text(alphabet=st.sampled_from('ab.-/"\\ \té'), max_size=6)
_space = st.sampled_from(("", " ", "  ", "\t", "\n"))


@settings(max_examples=300, deadline=None)
@given(_names, _names, _space, _space, _space, st.booleans(), st.sampled_from(("", " || false", " && true")))
def test_the_driver_shortcut_agrees_with_cel(
    driver: str, literal: str, s1: str, s2: str, s3: str, flipped: bool, tail: str
) -> None:
    quoted = f'"{literal}"'
    left, right = (quoted, "device.driver") if flipped else ("device.driver", quoted)
    expression = f"{s1}{left}{s2}=={s3}{right}{tail}"
    try:
        compiled = compile_selector(expression)
    except CelCompileError:
        return  # a literal CEL does not accept (an escape, a raw newline): nothing to shortcut
    if tail or "\\" in literal or '"' in literal:
        assert compiled.driver_equals is None
        return
    assert compiled.driver_equals is not None
    view = device_view(driver, {"name": "d", "attributes": {"model": {"string": "x"}}})
    assert compiled.matches(view) is (driver == compiled.driver_equals)
    assert compiled.driver_equals == literal


def test_other_selectors_get_no_shortcut() -> None:
    for expression in (
        'device.driver != "a"',
        'device.driver == "a" || device.driver == "b"',
        'device.attributes["a"].model == "x"',
        '"a" == "a"',
    ):
        assert compile_selector(expression).driver_equals is None
