"""Files written whole or not at all: readers see the old file or the whole new one.

Standard library only; every stage (config aside, which writes nothing) may import it.
"""

import json
import os
import tempfile
from pathlib import Path
from typing import Optional


def write_json_atomic(path: str, obj) -> None:
    """Writes JSON so that readers see the old file or the whole new one."""
    write_bytes_atomic(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def write_text_atomic(path: str, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Readers see the old file or the whole new one: a temporary file, fsync, rename."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes 0600; results are for everyone who can read the dir
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
