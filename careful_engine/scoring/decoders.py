"""Which decoder reads which model folder: ``--decoder KEY`` for every folder whose model bfcl
does not register, or ``--decoder FOLDER=KEY`` for one model or run folder (repeatable).

The one rule every front end follows (the CLI's commands and the workbench): a folder named in
``FOLDER=KEY`` gets that key; else a folder whose model bfcl does not register gets
``--decoder KEY``; else the folder's ``careful_run.json`` names it; else its registry key."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.core import bfcl


@dataclass
class DecoderChoice:
    """``--decoder KEY`` (folders of unregistered models) and ``--decoder FOLDER=KEY`` (one model
    or run folder)."""

    default: str | None = None
    by_folder: dict[str, str] = field(default_factory=dict)

    def for_model(self, run: Path, model: str) -> str | None:
        """The key chosen for a model folder; None leaves it to the folder's manifest, else
        its registry key (a registered model keeps its own decoder)."""
        for name in (model, run.name, str(run)):
            if name in self.by_folder:
                return self.by_folder[name]
        if self.default and bfcl.registry_key_for_dir(model) not in bfcl.registry():
            return self.default
        return None


def parse_decoders(values: Iterable[str] | None) -> DecoderChoice:
    """Parse repeated ``--decoder`` values; raises ValueError on a malformed or second default."""
    out = DecoderChoice()
    for value in values or []:
        if "=" in value:
            folder, _, key = value.partition("=")
            folder, key = folder.strip().rstrip("/"), key.strip()
            if not folder or not key:
                raise ValueError(f"{value!r}: expected FOLDER=KEY")
            out.by_folder[folder] = key
        elif out.default is not None and out.default != value:
            raise ValueError(f"two decoders for every folder: {out.default!r} and {value!r}; "
                             "use FOLDER=KEY to map one folder")
        else:
            out.default = value.strip()
    return out
