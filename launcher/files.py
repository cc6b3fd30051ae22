"""Files written whole or not at all: readers see the old file or the whole new one.

Standard library only; every stage (config aside, which writes nothing) may import it.
"""

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, List, Optional


def write_json_atomic(path: str, obj) -> None:
    """Writes JSON so that readers see the old file or the whole new one."""
    write_bytes_atomic(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def write_text_atomic(path: str, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Readers see the old file or the whole new one: a temporary file, fsync, rename."""
    with replaced_whole(path) as (tmp,):
        with open(tmp, "wb") as f:
            f.write(data)


@contextlib.contextmanager
def replaced_whole(*paths: str) -> Iterator[List[str]]:
    """Temporary names beside `paths`, for the caller (or a library that wants file names, as
    megatron's dataset builder does) to write; when the block ends normally each file is synced
    to the disk and renamed onto its path, and when it raises they are deleted and the paths are
    left as they were."""
    temporary = [_beside(path) for path in paths]
    try:
        yield temporary
        for tmp in temporary:
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
        for tmp, path in zip(temporary, paths):
            os.replace(tmp, path)
    except BaseException:
        for tmp in temporary:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def _beside(path: str) -> str:
    folder, base = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{base}.", suffix=".tmp")
    os.fchmod(fd, 0o644)  # mkstemp makes 0600; outputs are for everyone who can read the dir
    os.close(fd)
    return tmp


def unwritable(folder: str) -> Optional[str]:
    """Why `folder` cannot be made and written (None when it can), without making it: its
    nearest existing ancestor must be a writable directory."""
    path = Path(folder).absolute()
    nearest = next(p for p in (path, *path.parents) if p.exists())
    if not nearest.is_dir():
        return f"{nearest} is a file"
    if not os.access(nearest, os.W_OK | os.X_OK):
        return f"{nearest} is not writable"
    return None


def remove_if_only_started(folder: str, subdir: Optional[str], log: str, above: str) -> None:
    """A refused run's folder, where it holds only what Hydra wrote as the run started (its
    `subdir` of config files, .hydra, and the job's empty `log`), is removed, and so are the
    folders above it that it leaves empty, up to `above` (where `launch` was started; never
    it); the run's folder itself wherever it is, being empty. A folder that holds anything else,
    an earlier run's outputs, is left as it is."""
    path = Path(folder).absolute()
    started = {subdir, log} - {None}
    try:
        names = set(os.listdir(path))
        configs = set(os.listdir(path / subdir)) if subdir in names else set()
    except OSError:
        return
    if not names <= started or not configs <= {"config.yaml", "hydra.yaml", "overrides.yaml"}:
        return
    if log in names and os.path.getsize(path / log) > 0:
        return
    for name in configs:
        os.remove(path / subdir / name)
    if subdir in names:
        os.rmdir(path / subdir)
    if log in names:
        os.remove(path / log)
    os.rmdir(path)  # empty now: no file is lost
    bound = Path(above).absolute()
    for parent in path.parents:
        if bound not in parent.parents or os.listdir(parent):
            break
        os.rmdir(parent)
