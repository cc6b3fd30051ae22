"""The c10d rendezvous of `launch`'s nodes, said in one line wherever it cannot complete.

Before any rank (the pre-flight): a one-node run hosts the rendezvous store itself, so a port of
this machine that another program already holds is refused (`check_port_free`); torch would
connect to that program as a client and wait for an answer that never comes. While `launch`
starts its ranks (spawn.py): what the rendezvous waited for when it ran past
runtime.rdzv_timeout_s (`RendezvousFailed`). Standard library only: no torch.
"""

import contextlib
import errno
import os
import socket
import sys
from typing import Optional, Tuple

from launcher.config import ConfigError, World

LOG = "rendezvous.log"
"""In the run folder: what torch's store client logged while `launch` reached the store."""


def split_endpoint(endpoint: str) -> Tuple[str, int]:
    """HOST:PORT as the config rule admits it (launcher.config.sections.check_endpoint)."""
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def on_this_machine(host: str) -> bool:
    """Whether HOST names this machine (loopback, its name, one of its addresses): a socket can
    be bound to it. A name that does not resolve is left to the rendezvous to report."""
    with socket.socket() as probe:
        try:
            probe.bind((host, 0))
        except OSError:  # EADDRNOTAVAIL: another machine's address; gaierror: no such name
            return False
    return True


def check_port_free(endpoint: str) -> None:
    """Refuses, in one line, a port of this machine the rendezvous store cannot listen on. The
    probe binds as torch's store does (every interface, SO_REUSEADDR: a port left in TIME_WAIT by
    an earlier run is free) and closes at once."""
    host, port = split_endpoint(endpoint)
    if not on_this_machine(host):
        return
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as err:
            why = ("is already in use by another process" if err.errno == errno.EADDRINUSE
                   else f"cannot be listened on ({err.strerror})")
            raise ConfigError(
                f"runtime.rdzv_endpoint={endpoint}: port {port} on this machine {why}, and a "
                "one-node run hosts its rendezvous there; set runtime.rdzv_endpoint to a free "
                "port, or drop it (launch then picks a free one)") from None


def accepts(endpoint: str, seconds: float = 2.0) -> bool:
    """Whether something at HOST:PORT accepts a TCP connection: a store client that waited past
    its own limit is then stuck waiting for an answer (for ever), not still connecting."""
    try:
        with socket.create_connection(split_endpoint(endpoint), timeout=seconds):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def native_stderr_to(path: str):
    """This process's stderr appended to `path` meanwhile, at the file-descriptor level: torch's
    store client logs each failed try from C++ with a stack, not through Python. The file is
    removed where nothing was written."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if os.path.exists(path) and os.path.getsize(path) == 0:
            os.remove(path)


class RendezvousFailed(Exception):
    """The rendezvous did not complete within runtime.rdzv_timeout_s, or failed; `str` is the
    one line a user sees (after `error: `), saying what it waited for and the fix."""

    def __init__(self, line: str, timed_out: bool = True, before_ranks: bool = True):
        super().__init__(line)
        self.timed_out = timed_out
        self.before_ranks = before_ranks
        """False where torch's rendezvous failed later (a node's store gone while ranks run)."""


def detail(err: Optional[BaseException]) -> str:
    """The first line of what went wrong underneath: torch wraps the store's own error (`See
    inner exception for details`)."""
    if err is None:
        return "no answer"
    cause = err.__cause__ or err
    return f"{type(cause).__name__}: {cause}".strip().splitlines()[0].rstrip(".")


def log_lines(text: str) -> str:
    """torch's own log lines (`[W... TCPStore.cpp:340] ...`), without the C++ frames after each."""
    return "\n".join(line for line in text.splitlines() if line.startswith("["))


def where(endpoint: str, stated: bool) -> str:
    """The endpoint as the user can find it: the key they set, or the port launch picked."""
    return (f"runtime.rdzv_endpoint={endpoint}" if stated
            else f"{endpoint} (a free port launch picked)")


def unanswered(endpoint: str, stated: bool, seconds: int) -> RendezvousFailed:
    """A program accepted the connection and never answered as torch's c10d store."""
    return RendezvousFailed(
        f"the rendezvous at {where(endpoint, stated)} timed out after runtime.rdzv_timeout_s="
        f"{seconds}: it waited for its store there to answer, and what listens on that port never "
        "did (another program holds it); set runtime.rdzv_endpoint to a port only the "
        "rendezvous uses")


def unreached(endpoint: str, stated: bool, seconds: int, detail: str) -> RendezvousFailed:
    """Nothing accepted the connection (or it failed) before the limit: no node hosts it yet."""
    host = split_endpoint(endpoint)[0]
    return RendezvousFailed(
        f"the rendezvous at {where(endpoint, stated)} could not reach its store within "
        f"runtime.rdzv_timeout_s={seconds} ({detail}); start launch on {host} with the same "
        "runtime.rdzv_endpoint, check that this node reaches it, or raise runtime.rdzv_timeout_s",
        timed_out="timed out" in detail or "timeout" in detail.lower())


def failed(endpoint: str, stated: bool, err: Optional[BaseException],
           before_ranks: bool = False) -> RendezvousFailed:
    """torch's rendezvous raised something else: said as it is, with the commonest cause."""
    said = detail(err)
    return RendezvousFailed(
        f"the rendezvous at {where(endpoint, stated)} failed ({said}); check that every node "
        "runs launch with the same runtime.rdzv_endpoint and reaches its host",
        timed_out="timed out" in said, before_ranks=before_ranks)


def not_joined(endpoint: str, stated: bool, seconds: int, world: World) -> RendezvousFailed:
    """The store answered, but fewer nodes than the world's joined before the limit."""
    return RendezvousFailed(
        f"the rendezvous at {where(endpoint, stated)} timed out after runtime.rdzv_timeout_s="
        f"{seconds}: it waited for {world.nodes} nodes ({world.nodes_key}={world.nodes}) to "
        "join, and not all did; start launch on every node with the same "
        "runtime.rdzv_endpoint, or raise runtime.rdzv_timeout_s")
