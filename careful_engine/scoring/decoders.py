"""Which decoder reads which model folder: ``--decoder KEY`` for every folder whose model bfcl
does not register, or ``--decoder FOLDER=KEY`` for one model or run folder (repeatable).

The one rule every front end follows (the CLI's commands and the workbench), first that
applies: a folder named in ``FOLDER=KEY`` gets that key; else the folder's ``careful_run.json``
names it; else bfcl's registry key for a model it registers; else ``--decoder KEY``; else the
registry key (which fails, with a message, when a step needs decoding)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.runs import (
    DecoderUnavailable,
    ResultFile,
    decoder_key,
    manifest_decoder,
    owning_run,
    result_model_folder,
    unmatched_decoder,
)


@dataclass
class DecoderChoice:
    """``--decoder KEY`` (folders of unregistered models without a manifest's decoder) and
    ``--decoder FOLDER=KEY`` (one model or run folder). Remembers the folders it was asked
    about, for :meth:`unmatched`."""

    default: str | None = None
    by_folder: dict[str, str] = field(default_factory=dict)
    seen: dict[str, None] = field(default_factory=dict, compare=False, repr=False)
    matched: set[str] = field(default_factory=set, compare=False, repr=False)

    def for_model(self, run: Path, model: str, first: ResultFile | None) -> str | None:
        """The key ``--decoder`` gives a model folder of ``run`` (``first``: one of its result
        files, next to its manifest); None leaves it to the manifest, else the registry key."""
        names = folder_names(run, model, first)
        self.seen.update(dict.fromkeys((names[-1], model)))
        for name in names:
            if name in self.by_folder:
                self.matched.add(name)
                return self.by_folder[name]
        if self.default is None or bfcl.registry_key_for_dir(model) in bfcl.registry():
            return None
        try:
            own = manifest_decoder(first) if first is not None else None
        except DecoderUnavailable:  # a manifest that names no usable key: the default does
            own = None
        return None if own else self.default

    def key(self, run: Path, model: str, first: ResultFile | None) -> str:
        """A model folder's decoder key by the rule above; raises :class:`DecoderUnavailable`
        for a manifest that names no usable key (when no ``--decoder`` stands in)."""
        return decoder_key(model, first, self.for_model(run, model, first))

    def used(self, decoded: Iterable[str | None]) -> list[str]:
        """The ``--decoder`` values (``KEY``, ``FOLDER=KEY``) that decoded something:
        ``decoded`` holds the keys the scored model folders were decoded with (None: nothing
        needed decoding); a ``FOLDER=KEY`` that named no folder asked about is not used."""
        keys = set(decoded) - {None}
        out = [f"{folder}={key}" for folder, key in self.by_folder.items()
               if folder in self.matched and key in keys]
        return ([self.default] if self.default in keys else []) + out

    def unmatched(self) -> list[str]:
        """One note per ``FOLDER=KEY`` that named none of the folders asked about so far."""
        return [unmatched_decoder(folder, key, list(self.seen))
                for folder, key in self.by_folder.items() if folder not in self.matched]


def folder_names(run: Path, model: str, first: ResultFile | None) -> tuple[str, ...]:
    """The names ``FOLDER=KEY`` may give a model folder by: its own, the run folder's as given
    (its name or its path), and the name of the run folder its files belong to."""
    owner = owning_run(result_model_folder(first.path) if first is not None else run / model)
    return model, run.name, str(run), owner.name


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
