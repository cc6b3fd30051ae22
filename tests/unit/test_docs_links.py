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


# a path of this repository in a page's code span: `launcher/run/trainer.py`, `run/build.py`,
# `bench/overhead.py` (a stage's folder may be left out: `run/x.py` is launcher/run/x.py)
PATH = re.compile(r"`((?:[\w.]+/)+[\w.]+\.(?:py|sh|txt|yaml))\b")
STAGES = ("config", "data", "preflight", "estimate", "run", "sweep")
OURS = ("launcher", "bench", "gpu", "tests", "conf", "recipes", "hardware", "hydra_plugins", "docs",
        *STAGES)  # a path of megatron's, torch's or a sweep's folder is not ours


def missing_paths(text: str) -> list:
    found = []
    for path in PATH.findall(text):
        if path.split("/")[0] not in OURS or "NAME" in path:
            continue
        candidates = [ROOT / path]
        if path.split("/")[0] in STAGES:
            candidates.append(ROOT / "launcher" / path)
        if not any(c.exists() for c in candidates):
            found.append(path)
    return found


def test_every_file_a_page_names_exists():
    """A page that names a file of this repository names one that is there (a moved file's old
    path left in a page is caught here)."""
    stale = [f"{page.relative_to(ROOT)}: {path}" for page in PAGES
             for path in missing_paths(page.read_text())]
    assert not stale, "\n".join(stale)


def test_each_stage_names_its_own_files():
    """A stage's docstring (launcher/STAGE/__init__.py) names every module of its folder, and
    only those."""
    for stage in STAGES:
        folder = ROOT / "launcher" / stage
        named = set(re.findall(r"`(\w+\.py)`", (folder / "__init__.py").read_text()))
        modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
        assert named == modules, f"launcher/{stage}/__init__.py: names {sorted(named - modules)}" \
            f" that are not there, leaves out {sorted(modules - named)}"
