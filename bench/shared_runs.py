"""The decoders the benchmarks read ../shared/runs with, as ``careful --decoder`` would choose
them (careful_engine.scoring.decoders): a model bfcl does not register is read with the FC
decoder, DeepSeek-R1's folder with DeepSeek-R1's; a registered model with its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.scoring.decoders import DecoderChoice
from careful_engine.scoring.score import discover

DECODERS = DecoderChoice(default="gpt-4o-2024-11-20-FC",
                         by_folder={"deepseek-ai_DeepSeek-R1-0528": "deepseek-ai/DeepSeek-R1"})


def handler(run: Path, model: str) -> Any:
    """The bfcl handler that decodes ``model``'s folder in ``run`` (by the rule every command
    follows: DecoderChoice.key)."""
    files = discover(run)[0].get(model) or [None]
    return bfcl.handler(DECODERS.key(run, model, files[0]))
