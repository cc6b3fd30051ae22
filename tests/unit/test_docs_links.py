"""Every relative link in README.md and docs/*.md points at a file that exists, and a link with
`#anchor` at a heading of that file (GitHub's anchors: the heading lower-cased, punctuation but
`-` and `_` dropped, spaces as hyphens). Web links are not fetched."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def unfenced(text: str) -> str:
    """The page without its fenced blocks, where `#` starts a comment and brackets are code."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(page: Path) -> set:
    """The anchors GitHub gives the page's headings (a repeated heading's with -1, -2, ...)."""
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", unfenced(page.read_text()), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(page: Path) -> list:
    prose = re.sub(r"`[^`\n]*`", "", unfenced(page.read_text()))  # inline code holds no links
    return [t for t in LINK.findall(prose)
            if not re.match(r"[a-z]+:", t)]  # http:, https:, mailto:


def test_the_docs_pages_exist_and_the_readme_links_each():
    readme_links = set(links(ROOT / "README.md"))
    for page in PAGES[1:]:
        assert f"docs/{page.name}" in readme_links, f"README.md does not link docs/{page.name}"


def test_every_link_points_at_a_file_and_anchor_that_exist():
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
