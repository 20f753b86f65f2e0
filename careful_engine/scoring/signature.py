"""Which ``conversations.jsonl`` this install wrote: :func:`sign` writes ``<name>.mac`` beside
it, an HMAC-SHA256 keyed with this install's secret (:mod:`careful_engine.core.install_key`)
over the file's exact bytes and, per result file scored, its model folder, category and the
SHA-256 of its bytes; :func:`untrusted` checks it. A score file received with a run folder
(planted, edited, or written by another install) has no valid MAC here: the workbench scores
the run itself rather than show figures this install did not compute. A result file's hash is
of the bytes scored, taken as they were read (:attr:`LoadedFile.sha256`): a file changed
while it was scored is listed as it was read, and does not match it now."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from pathlib import Path

from careful_engine.core import safe_write
from careful_engine.core.install_key import install_key
from careful_engine.core.runs import LoadedFile, ResultFile
from careful_engine.core.safe_read import read_regular

TAG = b"careful score lines v1\n"
MAX_SIG_BYTES = 1 << 20
MAX_SCORES_BYTES = 256 << 20  # as the workbench reads them


def sig_path(scores: Path) -> Path:
    """Where the signature of the score file ``scores`` is: ``<name>.mac`` beside it."""
    return scores.with_name(scores.name + ".mac")


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(read_regular(path)).hexdigest()
    except OSError:
        return None


def _results(files: Iterable[ResultFile | LoadedFile]) -> list[list]:
    """Each result file as the signature lists it: [model folder, category, SHA-256] (of a
    loaded file, the bytes it was loaded from; of a file alone, its bytes now)."""
    return sorted([rf.file.model, rf.file.category, rf.sha256] if isinstance(rf, LoadedFile)
                  else [rf.model, rf.category, _digest(rf.path)] for rf in files)


def _body(data: bytes, files: Iterable[LoadedFile]) -> dict:
    return {"conversations_sha256": hashlib.sha256(data).hexdigest(), "results": _results(files)}


def _mac(key: bytes, body: dict) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, TAG + text, hashlib.sha256).hexdigest()


def sign(scores: Path, files: Iterable[LoadedFile]) -> None:
    """Write the signature of ``scores`` (just written from the loaded ``files``); without
    this install's key, remove any old one (the file is then never reused)."""
    key = install_key()
    data = read_regular(scores, MAX_SCORES_BYTES, follow_links=False)
    if key is None:
        body, mac = {}, ""
    else:
        body = _body(data, files)
        mac = _mac(key, body)
    safe_write.write_text(sig_path(scores), json.dumps({**body, "mac": mac}) + "\n")


def untrusted(scores: Path, data: bytes, files: Iterable[ResultFile]) -> str | None:
    """Why the score file ``scores`` (its bytes ``data``, as read) cannot be trusted to hold
    what this install computed from ``files`` (a model folder's result files, as they are
    now); None when its signature is valid and each of ``files`` is listed with its bytes."""
    key = install_key()
    if key is None:
        return "no install key to check its signature with"
    try:
        doc = json.loads(read_regular(sig_path(scores), MAX_SIG_BYTES))
    except FileNotFoundError:
        return "not signed by this install (no signature)"
    except (OSError, ValueError, RecursionError):
        return "its signature cannot be read"
    if not isinstance(doc, dict) or not isinstance(doc.get("mac"), str):
        return "its signature cannot be read"
    body = {k: v for k, v in doc.items() if k != "mac"}
    if not hmac.compare_digest(doc["mac"].encode(errors="surrogateescape"),
                               _mac(key, body).encode()):
        return "not signed by this install"
    if body.get("conversations_sha256") != hashlib.sha256(data).hexdigest():
        return "changed since this install wrote it"
    listed = body.get("results")
    now = _results(files)
    if not isinstance(listed, list) or any(r not in listed for r in now):
        return "made from other result files than the run's"
    return None
