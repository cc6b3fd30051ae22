"""How a failed run is classified and excerpted, for summary.json and the sweep results.

Pure text in, a status out: the spawner calls it with the failing rank's exit code and error text.
"""

FAILURES = ("invalid", "oom", "cuda_graph_capture_error", "nan", "rank_died", "timeout",
            "cancelled", "error")
"""Every failure status a run or a sweep cell can have (besides ok and, in a sweep, pending)."""

# Checked in this order; the first match wins (an OOM during capture is an OOM).
_PATTERNS = (
    ("oom", ("out of memory", "outofmemoryerror")),
    ("cuda_graph_capture_error", ("stream capture", "streamcapture", "graph capture",
                                  "capture_begin", "capture_end", "is capturing")),
    ("nan", ("non-finite", "nonfinite")),
    ("timeout", ("timed out", "timed-out", "timeout")),
)


def classify_failure(exitcode: int, text: str) -> str:
    """A rank killed by a signal died; otherwise the error decides, else 'error': a traceback's
    final exception line, not its frames or the rest of its message (a TypeError from a torch
    binding lists every signature, `timeout: timedelta` among them; that is no timeout)."""
    if exitcode < 0:
        return "rank_died"
    low = final_exception(text).lower()
    for status, needles in _PATTERNS:
        if any(n in low for n in needles):
            return status
    return "error"


def final_exception(text: str) -> str:
    """The first line of a traceback's last exception (`Type: message`); the text itself when it
    holds no traceback."""
    if "Traceback (most recent call last):" not in text:
        return text
    last = text.rsplit("Traceback (most recent call last):", 1)[1].splitlines()
    for line in last:
        if line and not line[0].isspace():  # frames and their code are indented
            return line
    return text


def excerpt(text: str, max_lines: int = 8, max_chars: int = 800) -> str:
    """The last lines of a log or traceback, where the error is."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines[-max_lines:])
    return tail[-max_chars:]
