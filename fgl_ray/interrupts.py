"""Ctrl-C and SIGTERM: a run stops after the round under way, with a checkpoint (light module:
the command line installs these before torch or Ray are imported)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Iterator


def interrupt_on_sigterm(signum, frame) -> None:
    """SIGTERM ends a run as Ctrl-C does: the finished rounds are summarised, the run marked incomplete."""
    raise KeyboardInterrupt


@dataclass
class StopRequest:
    """Set by the first SIGINT/SIGTERM once a round has finished (``armed``): the run stops, with a
    checkpoint, after the round under way."""

    armed: bool = False
    requested: bool = False

    def handle(self, signum, frame) -> None:
        if not self.armed or self.requested:   # nothing to save yet, or asked twice: stop now
            raise KeyboardInterrupt
        self.requested = True
        print("stopping after the round under way, with a checkpoint (Ctrl-C again stops at once)", file=sys.stderr,
              flush=True)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[StopRequest]:
    """Inside the block, SIGINT and SIGTERM request a stop instead of raising (main thread only;
    elsewhere the request is never set)."""
    stop = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = {signum: signal.signal(signum, stop.handle) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
