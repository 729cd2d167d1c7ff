"""The commands of the docs, for the tests that run them (so the docs cannot rot).

A fenced block tagged ``bash`` in README.md or under docs/ is a command a user types: some test runs
it, unchanged. Output, sketches and files the user writes go in other fences (``text``, ``yaml``,
``console``). ``RUNNERS`` names, per page, the test module that runs that page's blocks;
tests/unit/test_doc_commands.py checks that every page with a ``bash`` block has one and that the
module reads that page through ``bash_blocks``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# page (relative to the repository) -> test module that runs its ``bash`` blocks
RUNNERS: dict[str, str] = {
    "README.md": "tests/integration/test_docs.py",
    "docs/getting-started.md": "tests/integration/test_docs.py",
    "docs/install.md": "tests/integration/test_docs.py",
    "docs/concepts/steering.md": "tests/integration/test_docs.py",
    "docs/concepts/mapping.md": "tests/integration/test_docs.py",
    "docs/concepts/claim-release.md": "tests/integration/test_docs.py",
    "docs/reference/kubectl-draxr.md": "tests/integration/test_docs.py",
    "docs/reference/crd.md": "tests/integration/test_docs.py",
    "docs/developer/testing.md": "tests/integration/test_docs.py",
    "docs/developer/image.md": "tests/integration/test_docs.py",
    "docs/guides/kueue.md": "tests/integration/test_kueue.py",
    "docs/guides/migration.md": "tests/integration/test_docs.py",
}

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # 1-based line of the opening fence
    info: str  # the info string after the fence, e.g. "bash" or "bash demo"
    text: str  # the block's content, indentation of the fence removed

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str | Path) -> list[Block]:
    """Every fenced block of a Markdown page, in order."""
    path = ROOT / page if not Path(page).is_absolute() else Path(page)
    rel = str(path.relative_to(ROOT))
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m["indent"], m["fence"], m["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        out.append(Block(rel, i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return out


def bash_blocks(page: str | Path) -> list[Block]:
    """The blocks a user runs: fences whose info string starts with ``bash``."""
    return [b for b in blocks(page) if b.info.split(" ", 1)[0] == "bash"]


def pages() -> list[str]:
    """README.md and every page under docs/."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [str(p.relative_to(ROOT)) for p in found if p.exists()]
