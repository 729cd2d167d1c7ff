"""Every paragraph and list item of README.md and docs/ ends a sentence (the README once broke off
mid-sentence: "... 1 s for its own pods' claims, 30 s for" followed by a heading)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIST_ITEM = re.compile(r"\s*([-*+]|\d+\.)\s")
# A sentence's end, possibly inside emphasis, code or quotes; a list item may end a clause.
ENDS = re.compile(r"[.:!?)]['\"*_`]*$")
ENDS_ITEM = re.compile(r"[.:!?);,]['\"*_`]*$")


def blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number of the last line, lines) of each paragraph or list item outside code fences."""
    fence = False
    block: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith(("```", "~~~")):
            if block and not fence:
                yield number - 1, block
            block = []
            fence = not fence
            continue
        if fence:
            continue
        if not line.strip() or (block and LIST_ITEM.match(line)):
            if block:
                yield number - 1, block
            block = [line] if line.strip() else []
            continue
        block.append(line)
    if block:
        yield len(text.splitlines()), block


def unfinished(text: str) -> list[tuple[int, str]]:
    out = []
    for number, block in blocks(text):
        first, last = block[0].lstrip(), block[-1].rstrip()
        if first.startswith(("#", "|", "<", ">")) or last.startswith("|"):
            continue  # headings, tables, HTML, quotes
        pattern = ENDS_ITEM if LIST_ITEM.match(block[0]) else ENDS
        if not pattern.search(last):
            out.append((number, last.strip()[-60:]))
    return out


def test_every_paragraph_ends_a_sentence() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {str(p.relative_to(ROOT)): bad for p in pages if (bad := unfinished(p.read_text()))}
    assert found == {}


def test_the_check_sees_a_sentence_broken_off() -> None:
    text = "Intro.\n\n- a list item that ends\n  (1 s for some, 30 s for\n\n## Heading\n\nDone.\n"
    assert unfinished(text) == [(4, "(1 s for some, 30 s for")]
    assert unfinished("```\nno sentence in code\n```\n\n| a | table |\n") == []
