"""The shipped real-text corpus: docstrings of Python's standard library, made on every machine.

No download, no data file in the repository: `write_stdlib_corpus` reads the standard library's
sources (parsed with `ast`, never imported), in sorted file order, and writes the module, class and
function docstrings of at least `MIN_CHARS` characters as JSONL, one {"text": ...} per line,
each docstring once, until `MAX_BYTES` of text. The same Python gives the same file.
"""

import ast
import json
import os
import sysconfig
from typing import Iterator, Tuple

from launcher.files import write_text_atomic

MIN_CHARS = 200
"""Shorter docstrings ("Return self.") teach little; they are left out."""
MAX_BYTES = 3_000_000
"""About 3 MB of UTF-8 text: enough to train a small model on, a few seconds to build."""
SKIPPED_DIRS = {"idlelib", "lib2to3", "site-packages", "dist-packages", "__pycache__"}
"""Directories left out besides test directories: the IDE, a removed tool, installed packages."""


def is_skipped_dir(name: str) -> bool:
    """Test suites (test, tests, idle_test, ...) and the directories in SKIPPED_DIRS."""
    return name in SKIPPED_DIRS or name.startswith("test") or name.endswith("_test")


def stdlib_sources(root: str) -> Iterator[str]:
    """The .py files under `root`, in sorted order, test directories and SKIPPED_DIRS left out."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not is_skipped_dir(d))
        for name in sorted(files):
            if name.endswith(".py") and not name.startswith("test_"):
                yield os.path.join(folder, name)


def docstrings(path: str) -> Iterator[str]:
    """The module, class and function docstrings of one source file; none if it does not parse."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):  # ValueError: null bytes, bad encoding cookie
        return
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if isinstance(node, kinds):
            text = ast.get_docstring(node, clean=True)
            if text:
                yield text


def stdlib_documents(root: str) -> Iterator[str]:
    """Each docstring of at least MIN_CHARS characters once, in file order, up to MAX_BYTES."""
    seen = set()
    total = 0
    for path in stdlib_sources(root):
        for text in docstrings(path):
            if len(text) < MIN_CHARS or text in seen:
                continue
            seen.add(text)
            yield text
            total += len(text.encode("utf-8"))
            if total >= MAX_BYTES:
                return


def stdlib_corpus() -> Tuple[str, int]:
    """The standard-library docstring corpus as JSONL text, and its number of documents: built
    in memory, so a caller can compare it with a file before writing over it."""
    root = sysconfig.get_paths()["stdlib"]
    lines = [json.dumps({"text": text}, ensure_ascii=False) for text in stdlib_documents(root)]
    return "".join(line + "\n" for line in lines), len(lines)


def write_stdlib_corpus(path: str) -> int:
    """Writes the standard-library docstring corpus to `path` (JSONL, written atomically);
    returns the number of documents."""
    text, count = stdlib_corpus()
    write_text_atomic(path, text)
    return count
