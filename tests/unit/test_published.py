"""docs/prediction.md's table of Megatron-Bridge's published Megatron-FSDP rows is what
bench/published.py prints now: a change to the time model or a hardware file that moves a
prediction must move the page too."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START = "<!-- the table bench/published.py prints; tests/unit/test_published.py keeps it current -->"
END = "<!-- end of bench/published.py's table -->"


def published():
    spec = importlib.util.spec_from_file_location("published", ROOT / "bench" / "published.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pages_table_is_the_benchmarks():
    page = (ROOT / "docs" / "prediction.md").read_text()
    shown = page.split(START)[1].split(END)[0].strip("\n")
    assert shown == "\n".join(published().table()), (
        "docs/prediction.md's published rows are stale; paste `.venv/bin/python "
        "bench/published.py` between its markers")


def test_every_row_is_a_command_a_user_can_dry_run():
    """Each row's overrides compose and pass the pre-flight a dry run runs (no key set is inert;
    the recipe's recomputation keys that no recomputation makes moot are a note), in the row's
    world: as many GPUs as it names."""
    from launcher.cli import compose
    from launcher.config.effect import given_keys
    from launcher.preflight.check import preflight

    for row in published().ROWS:
        overrides = [*row.overrides, "runtime.dry_run=true"]
        cleared = preflight(compose(overrides), None, here=False, given=given_keys(overrides))
        gpus = int(re.search(r"(\d+) x ", row.what).group(1))  # "64 x GB200"
        assert cleared.world.size == gpus, (row.what, cleared.world.describe())
