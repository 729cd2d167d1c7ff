"""Every command of the docs has a test that runs it (issue 29): each page of README.md and docs/
with a ``bash`` block names a runner in ``tests/doc_commands.RUNNERS``, and that runner's source
names the page and reads it through ``bash_blocks`` (so a page cannot lose its runner silently)."""

from __future__ import annotations

import pytest

from tests.doc_commands import ROOT, RUNNERS, bash_blocks, blocks, pages

# Pages whose runner another change wires (a strict xfail: it fails once the runner is there, so the
# entry goes and the page is checked like the others).
PENDING: dict[str, str] = {}


def test_pages_are_found() -> None:
    found = pages()
    assert "README.md" in found, found
    assert "docs/getting-started.md" in found, found


@pytest.mark.parametrize("page", pages())
def test_every_page_with_commands_has_a_runner(page: str, request: pytest.FixtureRequest) -> None:
    if not bash_blocks(page):
        return
    if page in PENDING:
        request.applymarker(pytest.mark.xfail(reason=PENDING[page], strict=True))
    assert page in RUNNERS, f"{page} has bash blocks but no runner in tests/doc_commands.RUNNERS"


@pytest.mark.parametrize("page", sorted(RUNNERS))
def test_the_runner_reads_the_page(page: str) -> None:
    assert (ROOT / page).is_file(), f"RUNNERS names {page}, which does not exist"
    runner = ROOT / RUNNERS[page]
    assert runner.is_file(), f"{page}: runner {RUNNERS[page]} does not exist"
    source = runner.read_text()
    assert page in source, f"{RUNNERS[page]} does not name {page}"
    assert "bash_blocks" in source, f"{RUNNERS[page]} does not read the page through bash_blocks"


@pytest.mark.parametrize("page", pages())
def test_fences_are_closed(page: str) -> None:
    """An unclosed fence would swallow the rest of the page (and its commands)."""
    text = (ROOT / page).read_text()
    opened = [b for b in blocks(page)]
    assert text.count("```") >= 2 * len(opened) or not opened, page
