"""A rank that dies of a signal leaves its stack in the run's folder.

Each rank has faulthandler write every thread's Python stack to RUN_DIR/crash.rankN.log at a
fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS, SIGILL); a rank that ends normally removes its
empty file. The launch process reads the file of the rank that died back into the run's summary
(`message`: the signal and the crashing thread's top frames; `log_excerpt`: the stack) and its
error line, so a sweep's table shows where it died. Imports no torch.
"""

import faulthandler
import os
import re
from typing import IO, List, Optional

_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+")


def crash_log_path(run_dir: str, rank: int) -> str:
    return os.path.join(run_dir, f"crash.rank{rank}.log")


def keep_stacks(run_dir: str, rank: int) -> IO:
    """Arms faulthandler for this rank (all threads, into its crash log); returns the file."""
    os.makedirs(run_dir, exist_ok=True)
    log = open(crash_log_path(run_dir, rank), "w")
    faulthandler.enable(file=log, all_threads=True)
    return log


def disarm(log: IO) -> None:
    """The rank ended without a fatal signal: faulthandler off, the empty file removed."""
    faulthandler.disable()
    log.close()
    if os.path.getsize(log.name) == 0:
        os.remove(log.name)


def _threads(text: str) -> List[List[str]]:
    """Each thread's block of faulthandler's dump: its header, then its frames, newest first."""
    blocks: List[List[str]] = []
    for line in text.splitlines():
        if _HEADER.match(line):
            blocks.append([line])
        elif blocks and line.startswith("  "):
            blocks[-1].append(line.strip())
    return blocks


def _frame(line: str) -> str:
    """'File "/x/y/distributed_c10d.py", line 2790 in _coalescing_manager' -> short form."""
    found = re.match(r'File "(.+)", line (\d+) in (.+)', line)
    if not found:
        return line
    return f"{found.group(3)} ({os.path.basename(found.group(1))}:{found.group(2)})"


def top_frames(text: str, count: int = 3) -> str:
    """The crashing thread's newest frames; where it ran no Python (a native thread: gloo's,
    say), says so and gives the main thread's (the one whose oldest frame is a `<module>`)."""
    blocks = _threads(text)
    current = next((b for b in blocks if b[0].startswith("Current thread")), None)
    if current and len(current) > 1 and "<no Python frame>" not in current[1]:
        return " <- ".join(_frame(f) for f in current[1:1 + count])
    main = next((b for b in blocks if len(b) > 1 and b[-1].endswith("in <module>")), None)
    if main is None:
        return "a thread running no Python code"
    return ("a thread running no Python code, while the main thread was at "
            + " <- ".join(_frame(f) for f in main[1:1 + count]))


def remove_empty(run_dir: str) -> None:
    """After the ranks: the crash logs of ranks that ended without a fatal signal (one the
    launcher stopped, after another rank failed, never reached its own cleanup)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return
    for name in names:
        path = os.path.join(run_dir, name)
        if re.fullmatch(r"crash\.rank\d+\.log", name) and os.path.getsize(path) == 0:
            os.remove(path)


def crash_report(run_dir: str, rank: int) -> Optional[tuple]:
    """(top frames, the dump's first lines) of the rank's crash log, None when it left none."""
    path = crash_log_path(run_dir, rank)
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return None
    if not text.strip():
        return None
    head = "\n".join(text.strip().splitlines()[:40])
    return top_frames(text), f"{head}\n(the whole stack of every thread: {path})"
