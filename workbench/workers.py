"""The start method of background scoring's worker processes: a forkserver (safe from a
process with threads, unlike ``fork``; quicker than ``spawn``) whose workers write nothing to
the terminal the app draws on (bfcl prints now and then; the engine reports what matters).

No Textual here: the workers import this module to start.
"""

from __future__ import annotations

import os
import sys
from multiprocessing.context import ForkServerContext, ForkServerProcess

# what the forkserver imports once, before it forks workers (as the engine asks for itself)
PRELOAD = ["careful_engine.scoring.batch"]


class QuietProcess(ForkServerProcess):
    """A forkserver's worker whose standard output and error go to the null device."""

    def run(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
        super().run()


class QuietForkServer(ForkServerContext):
    """The ``forkserver`` start method with :class:`QuietProcess` workers."""

    Process = QuietProcess


def context() -> QuietForkServer:
    """The context to pass as the engine's ``mp_context``."""
    ctx = QuietForkServer()
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
