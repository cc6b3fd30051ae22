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
    """A rank killed by a signal died; otherwise the error text decides, else 'error'."""
    if exitcode < 0:
        return "rank_died"
    low = text.lower()
    for status, needles in _PATTERNS:
        if any(n in low for n in needles):
            return status
    return "error"


def excerpt(text: str, max_lines: int = 8, max_chars: int = 800) -> str:
    """The last lines of a log or traceback, where the error is."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    tail = "\n".join(lines[-max_lines:])
    return tail[-max_chars:]
