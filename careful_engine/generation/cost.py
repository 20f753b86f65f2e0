"""``careful cost``: price a logged run, and the same volume on other models (paper §7).

A run's volume comes from its result files: per step, the prompt (``input_token_count``, the
full prompt in this project's runs), the output, and, for Anthropic runs, the cache reads and
writes. Priced on another model, the volume is assumed equal (tokenizers and thinking lengths
differ, so these are estimates). Cache reads and writes are billed as the API bills them: the
logged split when the run recorded one, otherwise a simulation of the prompt-caching markers
that bfcl's Claude handler sets (the last tool and the last two user messages): within a
conversation, each request reads the previous request's prompt from the cache and writes the
rest (the cache's lifetime and minimum cacheable length are ignored).

Only conversations that logged token counts per request are priced (``counted``): a
conversation with none (an inference error, or a run that logged one number per conversation,
whose requests are unknown) adds nothing, and a folder none of whose conversations logged them
is not priced at all (n/a, never $0; :meth:`FolderVolume.not_priced` says why).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from careful_engine.core.decode import token_count
from careful_engine.core.runs import (
    TOKEN_FIELDS,
    Problem,
    find_result_files,
    load_result_file,
)
from careful_engine.generation import results
from careful_engine.generation.errors import GenerationError
from careful_engine.generation.spend import (
    ModelPrice,
    PriceTable,
    Volume,
    conservative_cost,
    ledger_summary,
    list_cost,
)


@dataclass
class FolderVolume:
    """The logged volume of one model folder of a run."""

    folder: Path
    model: str  # folder name
    logged: Volume = field(default_factory=Volume)  # as logged (cache split if recorded)
    simulated: Volume = field(default_factory=Volume)  # cache split simulated from prompts
    cache_logged: bool = False
    conversations: int = 0
    counted: int = 0  # conversations that logged token counts per request (the priced ones)
    per_conversation: int = 0  # conversations that logged counts, but not per request
    manifest: dict | None = None
    ledger: Counter = field(default_factory=Counter)  # requests by outcome (spend.OUTCOMES)
    ledger_usd: tuple[float, float] | None = None

    @property
    def run(self) -> Path:
        """The run folder holding this model folder (``RUN/result/MODEL``, else its parent)."""
        parent = self.folder.parent
        return parent.parent if parent.name == "result" else parent

    @property
    def for_pricing(self) -> Volume:
        return self.logged if self.cache_logged else self.simulated

    def not_priced(self) -> str | None:
        """Why the folder's volume cannot be priced (no conversation logged token counts per
        request), or None."""
        if self.counted:
            return None
        why = "no conversation logged token counts per request"
        if self.per_conversation:
            why += (f" ({self.per_conversation:,} logged one count per conversation, which "
                    "does not say its requests)")
        return why

    def coverage(self) -> str | None:
        """``priced from N of M conversations that logged token counts per request`` where
        some conversations logged none, else None."""
        if not self.counted or self.counted == self.conversations:
            return None
        return (f"priced from {self.counted:,} of {self.conversations:,} conversations that "
                "logged token counts per request")

    def priced_as(self) -> str | None:
        """The model id the run was priced under: the manifest's API model or registry key."""
        m = self.manifest or {}
        return next((v for v in (m.get("api_model"), m.get("model"))
                     if isinstance(v, str) and v), self.model)  # (the manifest is hostile)


def _steps(values: object) -> list[list[float]]:
    if not isinstance(values, list):
        return []
    return [[c for v in t if (c := token_count(v)) is not None] if isinstance(t, list) else []
            for t in values]


def simulate_cache(prompts: list[float], outputs: list[float]) -> Volume:
    """BFCL's caching markers over one conversation's requests (prompts in order)."""
    v = Volume()
    previous = 0.0
    for prompt, out in zip(prompts, outputs, strict=False):
        read = min(previous, prompt)
        v.requests += 1
        v.cache_read += int(read)
        v.cache_write += int(prompt - read)
        v.output += int(out)
        previous = prompt
    return v


def folder_volumes(run_dir: Path, problems: list[Problem] | None = None) -> list[FolderVolume]:
    """Every model folder with multi-turn result files under ``run_dir``; what could not be
    read (a bad line, a token count that is not one, a file too big) is added to
    ``problems``, as ``careful score`` reports it."""
    files, found = find_result_files(run_dir)
    if problems is not None:
        problems.extend(found)
    by_folder: dict[Path, FolderVolume] = {}
    for rf in files:
        folder = rf.path.parent.parent if rf.path.parent.name == "multi_turn" else rf.path.parent
        fv = by_folder.get(folder)
        if fv is None:
            try:  # the reader resume uses: a manifest it cannot trust is said, not skipped
                manifest = results.load_manifest(folder, "priced by the folder's name")
            except GenerationError as e:  # (a link or a FIFO there too)
                manifest = None
                if problems is not None:
                    problems.append(Problem(str(folder / results.MANIFEST), str(e)))
            fv = by_folder[folder] = FolderVolume(folder, rf.model, manifest=manifest)
        loaded = load_result_file(rf)  # bounded, line by line, as the scorer reads it
        if problems is not None:
            # (missing ids are no problem here: a run may hold part of a category)
            problems.extend(p for p in loaded.problems if not p.message.startswith("id missing"))
        for entry in loaded.entries.values():
            fv.conversations += 1
            prompts = [p for t in _steps(entry.get("input_token_count")) for p in t]
            outputs = [o for t in _steps(entry.get("output_token_count")) for o in t]
            if not prompts and not outputs:  # nothing per request: not priced
                if any(token_count(entry.get(k)) is not None for k in TOKEN_FIELDS):
                    fv.per_conversation += 1
                continue
            fv.counted += 1
            fv.logged.add(results.entry_volume(entry))
            if "cache_read_input_token_count" in entry:
                fv.cache_logged = True
            fv.simulated.add(simulate_cache(prompts, outputs))
    for fv in by_folder.values():
        ledger = fv.folder / results.LEDGER
        if os.path.lexists(ledger):
            try:
                summary = ledger_summary(ledger)
            except GenerationError as e:  # a link or a FIFO: this folder's ledger only
                if problems is not None:
                    problems.append(Problem(str(ledger), f"{e}; its spend is not counted"))
                continue
            if summary.skipped and problems is not None:
                lines = ", ".join(map(str, summary.skipped[:5]))
                problems.append(Problem(str(ledger), f"{len(summary.skipped)} line(s) that are "
                                        f"not ledger records (line {lines}"
                                        f"{', ...' if len(summary.skipped) > 5 else ''}); "
                                        "skipped", summary.skipped[0]))
            if problems is not None:
                problems.extend(summary.problems)
            fv.ledger.update(summary.requests)
            fv.ledger_usd = (summary.spent, summary.listed)
    return sorted(by_folder.values(), key=lambda f: str(f.folder))


@dataclass(frozen=True)
class Estimate:
    model: ModelPrice
    list_usd: float
    conservative_usd: float


def estimates(fv: FolderVolume, table: PriceTable, models: list[str] | None = None
              ) -> list[Estimate]:
    """The folder's volume priced on each model (``models``: names; default the whole table)."""
    wanted = [table.get(m) for m in models] if models else list(table.models)
    v = fv.for_pricing
    return [Estimate(p, list_cost(v, p), conservative_cost(v, p)) for p in wanted]
