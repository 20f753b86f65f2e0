"""Run-time settings that make scoring fast without changing what it computes."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a file is scored.

    A replay allocates many small, acyclic, short-lived objects (call records, states), which
    reference counting frees at once; the collector's periodic full passes would instead walk
    every live trace and the loaded data again and again (a third of scoring time measured on
    the references). The few cycles (file-system trees) are collected when it resumes.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
