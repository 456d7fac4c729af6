"""Every relative link of README.md and docs/**/*.md resolves: the file (or folder) exists, and a
``#fragment`` names a heading of the page it points at (GitHub's anchors). The README stays a
landing page: at most 250 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250

_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """The page's lines outside fenced code blocks, with their line numbers; inline code removed."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, re.sub(r"`[^`]*`", "", line)))
    return lines


def anchors(page: Path) -> set[str]:
    """GitHub's anchor of each heading: lower case, punctuation dropped, spaces to hyphens, and
    -1, -2 ... for repeats."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if not match:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2)).lower()
        slug = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` that does not resolve, as ``page:line: target (why)``."""
    problems = []
    for number, line in _prose(page.read_text()):
        for target in _LINK.findall(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path_part, _, fragment = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            where = f"{page.relative_to(ROOT)}:{number}: {target}"
            if not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                problems.append(f"{where} (no heading with that anchor)")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_checker_flags_a_broken_link_and_a_broken_anchor(tmp_path: Path, monkeypatch) -> None:
    """The checker itself: a missing file and a missing heading are reported, a good link is not."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Some `code` here\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#some-code-here) [gone](missing.md) [bad](a.md#nope)\n"
                    "```\n[in code](missing.md)\n```\n[web](https://example.com) [self](#local)\n\n## Local\n")
    assert broken_links(page) == ["b.md:1: missing.md (no such file)",
                                  "b.md:1: a.md#nope (no heading with that anchor)"]


def test_the_readme_is_a_landing_page() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail under docs/ (at most {README_MAX_LINES})"
