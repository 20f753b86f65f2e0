"""Helpers the workbench's Pilot and snapshot tests share."""

from __future__ import annotations

from textual.worker import WorkerCancelled


async def settle(pilot, *keys: str) -> None:
    """Press keys, then wait for every worker and message (a superseded worker is fine)."""
    if keys:
        await pilot.press(*keys)
    for _ in range(2):
        try:
            await pilot.app.workers.wait_for_complete()
        except WorkerCancelled:
            pass
        await pilot.pause()
