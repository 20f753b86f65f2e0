"""Result files in bfcl's layout, written so that a killed run resumes losing nothing.

``runs/NAME/<model dir>/multi_turn/BFCL_v4_<category>_result.json`` holds one JSON line per
finished conversation, as bfcl generate writes it (``id``, ``result``, the token counts, the
inference log, plus this project's extra keys). Every line is written whole, flushed and
fsynced before the next conversation is counted as done. On restart the ids already present
are skipped; a last line cut short by a kill is removed first (its conversation runs again).
When a run completes, the file is sorted by id (atomically), as bfcl does.

``runs/NAME/<model dir>/careful_run.json`` is the run's manifest; ``careful score`` reads its
``decoder``. Nothing here reads or writes through a symbolic link or a special file planted in
the run folder (:mod:`.files`).
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from careful_engine.core import bfcl
from careful_engine.core.decode import token_count
from careful_engine.core.json_values import a_kind, a_type, finite_float, refuse_constant
from careful_engine.core.runs import (
    MAX_DEPTH,
    TOKEN_FIELDS,
    Problem,
    depth_over,
    line_over_cap,
)
from careful_engine.core.safe_read import MAX_RESULT_BYTES, MAX_SMALL_BYTES
from careful_engine.core.safe_text import visible
from careful_engine.generation import files
from careful_engine.generation.errors import GenerationError
from careful_engine.generation.files import run_folder  # noqa: F401 - the CLI's entry point for --run
from careful_engine.generation.spend import Volume

MANIFEST = "careful_run.json"
LEDGER = "careful_spend.jsonl"
LOG = "generate.log"
MANIFEST_SCHEMA = "careful.run/1"


def model_dir(run_dir: Path, registry_key: str) -> Path:
    """bfcl's result folder for a model (``registry_dir_name``: ``/`` becomes ``_``)."""
    return run_dir / registry_key.replace("/", "_")


def result_path(run_dir: Path, registry_key: str, category: str) -> Path:
    return model_dir(run_dir, registry_key) / "multi_turn" / f"BFCL_v4_{category}_result.json"


def _is_error(entry: dict) -> bool:
    return type(entry.get("result")) is not list


def read_entries(path: Path, problems: list[Problem] | None = None) -> list[dict]:
    """The complete entries of a result file (unparseable lines skipped; a link or special
    file reads as empty; lines past what a file's entries may take: one problem in
    ``problems``)."""
    try:
        records = files.read_records(path, problems=problems)
    except files.UnsafePath:
        return []
    return [e for e in records if isinstance(e.get("id"), str)]


def repair(path: Path, drop_errors: bool = False,
           category: str | None = None) -> tuple[set[str], list[str]]:
    """Make a result file safe to append to; returns the ids it holds and what was fixed.

    A last line without its newline (a kill during the write), any line that is not JSON and
    any longer than ``careful score`` reads (never parsed) is dropped, and duplicates keep
    their first line; so is an entry whose id is not one of
    ``category``'s (it can never be run, and bfcl's evaluate would stop on it). With
    ``drop_errors``, entries whose result is an inference error are dropped so that they run
    again.
    """
    valid = {c.id for c in bfcl.conversations(category)} if category else None
    notes: list[str] = []
    raw = files.read_bytes(path)
    if raw is None:
        return set(), notes
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    complete, tail = lines[:-1], lines[-1]
    if tail.strip():
        notes.append(f"{path.name}: dropped a last line cut short ({len(tail)} characters)")
    kept: list[str] = []
    ids: dict[str, int] = {}  # id -> its line
    for lineno, line in enumerate(complete, start=1):
        if not line.strip():
            continue
        # careful score skips it; parsed, it takes gigabytes
        if too_long := line_over_cap(line, "dropped"):
            notes.append(f"{path.name}:{lineno}: {too_long}")
            continue
        try:  # NaN, Infinity, 1e309: no JSON values; the conversation runs again
            entry = json.loads(line, parse_constant=refuse_constant, parse_float=finite_float)
        except (json.JSONDecodeError, RecursionError):
            notes.append(f"{path.name}:{lineno}: dropped a line that is not JSON")
            continue
        except ValueError as e:
            notes.append(visible(f"{path.name}:{lineno}: dropped a line that is not usable "
                                 f"JSON ({str(e).split(';')[0][:120]})"))
            continue
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(entry_id, str):
            notes.append(f"{path.name}:{lineno}: dropped a line without a string id")
            continue
        if valid is not None and entry_id not in valid:
            notes.append(visible(f"{path.name}:{lineno} [{entry_id}]: dropped, the id is not "
                                 f"in {category}"))
            continue
        if entry_id in ids:
            notes.append(visible(f"{path.name}:{lineno} [{entry_id}]: dropped a duplicate of "
                                 f"line {ids[entry_id]}"))
            continue
        if drop_errors and _is_error(entry):
            notes.append(visible(f"{path.name}:{lineno} [{entry_id}]: inference error dropped, "
                                 "to run again"))
            continue
        ids[entry_id] = lineno
        kept.append(line)
    new = "".join(line + "\n" for line in kept)
    if new != text:
        _atomic_write(path, new)
    return set(ids), notes


def _atomic_write(path: Path, text: str) -> None:
    files.atomic_write(path, text)


def _unreadable(entry: dict[str, Any], line: str | None) -> str | None:
    """Why ``careful score`` would not read this entry's line back, or None."""
    if depth_over(entry):
        return f"the conversation's result nests deeper than {MAX_DEPTH} levels"
    if line is None:
        return "the conversation's result cannot be written as JSON"
    too_long = line_over_cap(line, "")
    return f"the conversation's result {too_long}" if too_long else None


def as_inference_error(entry: dict[str, Any], why: str, counts: bool = True) -> dict[str, Any]:
    """The entry written in place of one that could not be read back: bfcl's inference
    error (``result`` is a string; the conversation fails), keeping its token counts when
    ``counts`` and they are small."""
    out: dict[str, Any] = {"id": entry.get("id"), "result": f"Error during inference: {why}"}
    for key in (*TOKEN_FIELDS, "latency") if counts else ():
        if key in entry:
            try:
                if len(json.dumps(entry[key])) <= 64 * 1024:
                    out[key] = entry[key]
            except (ValueError, RecursionError, TypeError):
                pass
    return out


def entry_line(entry: dict[str, Any]) -> tuple[str, str | None]:
    """The line written for a finished conversation and, when it had to be replaced by an
    inference error (longer or deeper than a result line may be), why."""
    try:
        line: str | None = json.dumps(entry, ensure_ascii=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from the model: kept, as an escape
            line = json.dumps(entry)
    except (ValueError, RecursionError):
        line = None
    why = _unreadable(entry, line)
    if why is not None:
        line = json.dumps(as_inference_error(entry, why), ensure_ascii=False)
    return line + "\n", why


_ERROR_ROOM = 64 * 1024  # kept free at a result file's end for inference-error lines


class ResultWriter:
    """Appends finished conversations to their category files; thread-safe. Every line
    written is one ``careful score`` reads back: an entry too long or too deep for a result
    line, or one that would grow its file past :data:`~careful_engine.core.safe_read.
    MAX_RESULT_BYTES`, is written as an inference error that says why."""

    def __init__(self, run_dir: Path, registry_key: str) -> None:
        self.run_dir = run_dir
        self.key = registry_key
        self._lock = threading.Lock()

    def write(self, entry: dict[str, Any]) -> str | None:
        """Append one entry; returns why it was written as an inference error, or None."""
        path = result_path(self.run_dir, self.key, bfcl.category_of(entry["id"]))
        line, why = entry_line(entry)
        with self._lock:
            files.ensure_dir(path.parent, self.run_dir.parent)
            with files.open_append(path) as f:
                size = os.fstat(f.fileno()).st_size
                if size + len(line.encode("utf-8")) > MAX_RESULT_BYTES - _ERROR_ROOM:
                    why = (f"the result file would grow past the {MAX_RESULT_BYTES:,} bytes "
                           "a result file is read with")
                    line = json.dumps(as_inference_error(entry, why, counts=False)) + "\n"
                    if size + len(line) > MAX_RESULT_BYTES:
                        raise GenerationError(f"{path} is full: {why}; nothing more can "
                                              "be written to it")
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        return why

    def sort(self, category: str) -> None:
        """Sort a finished file by id (bfcl's order), atomically."""
        path = result_path(self.run_dir, self.key, category)
        with self._lock:
            unread: list[Problem] = []
            entries = read_entries(path, unread)
            if unread:  # rewritten from what was read, the lines not read would be lost
                return
            ordered = sorted(entries, key=lambda e: bfcl.sort_key(e["id"]))
            if [e["id"] for e in ordered] != [e["id"] for e in entries]:
                _atomic_write(path, "".join(entry_line(e)[0] for e in ordered))


# ---------------------------------------------------------------- totals and manifest


def _flat(values: Any) -> list[float]:
    out: list[float] = []
    if isinstance(values, list):
        for v in values:
            out.extend(_flat(v))
    elif (count := token_count(values)) is not None:  # NaN, negatives, bools: not counts
        out.append(count)
    return out


def entry_volume(entry: dict) -> Volume:
    """An entry's logged tokens. ``input_token_count`` is the full prompt (this project's
    runs); cache reads and writes, when logged, are part of it."""
    prompt = sum(_flat(entry.get("input_token_count")))
    read = sum(_flat(entry.get("cache_read_input_token_count")))
    write = sum(_flat(entry.get("cache_creation_input_token_count")))
    return Volume(
        requests=len(_flat(entry.get("output_token_count"))),
        input=int(max(0, prompt - read - write)), cache_read=int(read), cache_write=int(write),
        output=int(sum(_flat(entry.get("output_token_count")))),
    )


def _user_answers(by_turn: Any) -> list[str]:
    """The scripted user's answers (``yes``, ``no``, ``restate``) an entry records; anything
    else in a result file (a list, a number, an answer that is not text) counts as none."""
    if not isinstance(by_turn, dict):
        return []
    return [a["answer"] for turn in by_turn.values() if isinstance(turn, list)
            for a in turn if isinstance(a, dict) and isinstance(a.get("answer"), str)]


def totals(run_dir: Path, registry_key: str, categories: list[str],
           problems: list[Problem] | None = None) -> dict[str, Any]:
    """Conversations written, token volume and scripted-user answers, from the result files;
    lines a file's entries could not all be read past (the counts then fall short): one
    problem each in ``problems``."""
    volume = Volume()
    answers: Counter = Counter()
    per_category: dict[str, dict[str, int]] = {}
    errors = 0
    for cat in categories:
        entries = read_entries(result_path(run_dir, registry_key, cat), problems)
        per_category[cat] = {"written": len(entries)}
        for e in entries:
            volume.add(entry_volume(e))
            errors += _is_error(e)
            answers.update(_user_answers(e.get("careful_user_answers")))
    return {
        "conversations": per_category,
        "inference_errors": errors,
        "tokens": volume.to_json(),
        "user_answers": {k: answers.get(k, 0) for k in ("yes", "no", "restate")},
    }


def load_manifest(folder: Path, untrusted: str | None = None) -> dict[str, Any] | None:
    """The manifest of a run: None if there is none; :class:`GenerationError` (``file:
    reason; ``, then ``untrusted``: what is done instead) if one is there but cannot be
    trusted to say how the run was made (resuming then could mix settings in one run)."""
    untrusted = untrusted or _UNTRUSTED
    path = folder / MANIFEST
    try:
        raw = files.read_bytes(path, MAX_SMALL_BYTES)  # a manifest is a few kilobytes
    except files.UnsafePath as e:  # a link, a FIFO, too large: said, with what is done
        raise files.UnsafePath(f"{e}; {untrusted}") from None
    if raw is None:
        return None
    where = visible(str(path))
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=refuse_constant)
    except UnicodeDecodeError as e:
        raise GenerationError(f"{where}: not UTF-8 (at byte {e.start}); {untrusted}") from None
    except json.JSONDecodeError as e:
        raise GenerationError(f"{where}:{e.lineno}: not JSON ({e.msg}); {untrusted}") from None
    except (RecursionError, ValueError) as e:
        reason = str(e)[:80] if isinstance(e, ValueError) else "nested too deeply"
        raise GenerationError(f"{where}: not usable JSON ({reason}); {untrusted}") from None
    if not isinstance(data, dict):
        raise GenerationError(f"{where}: {a_kind(data)}, not a manifest; "
                              f"{untrusted}")
    for key, kind in (("sessions", list), ("categories", list), ("started", str)):
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise GenerationError(f"{where}: {key!r} is {a_kind(data[key])}, not "
                                  f"{a_type(kind)}; {untrusted}")
    if any(c not in bfcl.CATEGORIES for c in data.get("categories") or []):
        raise GenerationError(f"{where}: 'categories' holds something other than the four "
                              f"multi-turn categories; {untrusted}")
    return data


_UNTRUSTED = ("the settings of the run there cannot be checked, so it is not resumed: repair "
              "or remove the manifest, or use another --run")


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    """Write the manifest atomically (``folder`` is ``<runs-dir>/<run>/<model dir>``)."""
    files.ensure_dir(folder, folder.parent.parent)
    path = folder / MANIFEST
    _atomic_write(path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return path
