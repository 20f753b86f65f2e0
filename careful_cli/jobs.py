"""``--jobs``: how many worker processes score independent files (see careful_engine.core.parallel)."""

from __future__ import annotations

import typer

from careful_engine.core import parallel

JOBS_OPTION = typer.Option(
    0, "--jobs", "-j", help="Worker processes that score independent result files at once "
    "(default 0: one per core). Results and their order are the same for any number.")


def resolve(jobs: int) -> int:
    """The number of workers for ``--jobs`` (0: every core); a negative value is refused."""
    try:
        return parallel.check_jobs(jobs)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--jobs") from None
