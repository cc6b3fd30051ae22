"""Runs `launch-prepare`'s main in this process once per case under an audit hook, and prints, as
JSON, per case: the exit code, stderr, whether megatron was imported by then, and every path the
run opened for writing (an `open` whose mode or flags write), renamed or replaced (both ends),
removed or truncated, each with the file it named at that moment ((st_dev, st_ino), or null where
none was) and its resolved path. Audit hooks cannot be removed, so tests/integration/test_data.py
runs this in a process of its own: `python prepare_audit.py CASES.json`, where CASES.json holds
[{"cwd": folder, "argv": [...]}, ...]."""

import contextlib
import io
import json
import os
import sys

from launcher.data.prepare import main

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
CHANGES = {"os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.truncate": (0,)}
"""The events besides `open` that change what a path holds, and which of their arguments are
paths: os.rename and os.replace both raise `os.rename` (a rename takes the file away from its
source name and writes over its destination), os.remove and os.unlink `os.remove`."""
writes = []


def identity(path: str):
    """(st_dev, st_ino) of the file at `path` now, or None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_dev, st.st_ino]


def record(event: str, path) -> None:
    """One path written: as given, resolved, and the file it is before the write."""
    if isinstance(path, int):  # a file descriptor: opened (and so recorded) before
        return
    path = os.fsdecode(path)
    writes.append({"event": event, "path": path, "realpath": os.path.realpath(path),
                   "identity": identity(path)})


def opens_for_writing(mode, flags) -> bool:
    """An `open` event's mode (builtin open) or flags (os.open) asks to write."""
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & WRITE_FLAGS)


def hook(event: str, args: tuple) -> None:
    """Records every write; never raises into the operation it watches."""
    try:
        if event == "open" and opens_for_writing(args[1], args[2]):
            record(event, args[0])
        elif event in CHANGES:
            for index in CHANGES[event]:
                record(event, args[index])
    except Exception as err:  # a broken hook must fail the test, not the run it watches
        writes.append({"event": "hook-error", "path": repr(err), "realpath": "",
                       "identity": None})


def run(case: dict) -> dict:
    """One `launch-prepare` command line, in its folder; what it wrote and how it ended."""
    writes.clear()
    os.chdir(case["cwd"])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(case["argv"])
            code = 0
        except SystemExit as exit_:
            code = exit_.code
    return {"code": code, "stderr": err.getvalue(), "megatron": "megatron" in sys.modules,
            "writes": list(writes)}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    sys.addaudithook(hook)
    results = [run(case) for case in cases]
    sys.stdout.write(json.dumps(results))
