"""bfcl quirks that change verdicts, reproduced (each compared with bfcl's own evaluator)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from careful_engine.core import bfcl
from careful_engine.core.decode import decode_entry
from careful_engine.core.process import BfclProcess
from careful_engine.core.replay import replay

from . import perturb
from .bfcl_oracle import evaluate_entries, official_handler

DECODER = "claude-sonnet-4-5-20250929-FC"
CONV = "multi_turn_long_context_151"
EXTRA = ("purchase_insurance(access_token='abc123xyz', insurance_type='comprehensive', "
         "booking_id='booking_901', insurance_cost=50.0, card_id='1234567812345678')")


def _entry() -> dict:
    conv = bfcl.conversation(CONV)
    turns = [list(t) for t in conv.ground_truth]
    t = next(i for i, calls in enumerate(turns) if any(c.startswith("book_flight") for c in calls))
    turns[t].append(EXTRA)
    return perturb.fc_entry(conv.id, turns)


def test_long_context_travel_data_is_shared_between_sides() -> None:
    """A charge to a long-context extension card is seen by both sides (same dict in bfcl):
    bfcl passes the entry, where isolated instances would report a state mismatch."""
    entry = _entry()
    theirs = evaluate_entries([entry], "multi_turn_long_context", official_handler(DECODER),
                              "quirk")[CONV]
    conv = bfcl.conversation(CONV)
    handler = bfcl.handler(DECODER)
    ours = replay(conv, decode_entry(entry, handler), model_name="quirk")
    assert ours.verdict.valid == theirs["valid"] is True
    extra = [c for c in ours.model.calls() if c.text.startswith("purchase_insurance")]
    assert extra and extra[0].success
    # the reference side's card was charged too, through the shared dict
    ref_cards = ours.reference.turn_end_states[-1]["TravelAPI"]["credit_card_list"]
    model_cards = ours.model.turn_end_states[-1]["TravelAPI"]["credit_card_list"]
    assert ref_cards["1234567812345678"] == model_cards["1234567812345678"]


def test_shared_data_carries_to_later_conversations() -> None:
    """A run's process carries what earlier conversations did to shared objects."""
    entry = _entry()
    process = BfclProcess()
    cards = importlib.import_module(bfcl.CLASS_FILE_PATH_MAPPING["TravelAPI"]).CREDIT_CARD_EXTENSION
    before = json.dumps(cards["1234567812345678"])
    replay(bfcl.conversation(CONV), decode_entry(entry, bfcl.handler(DECODER)),
           process=process)
    after = cards["1234567812345678"]
    assert json.dumps(after) != before
    assert after["balance"] == json.loads(before)["balance"] - 50.0
    BfclProcess()  # a new process starts from pristine data again
    assert json.dumps(cards["1234567812345678"]) == before


def test_registry_matches_bfcl_model_config() -> None:
    """The registry read from model_config.py's source equals bfcl's MODEL_CONFIG_MAPPING."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    ours = bfcl.registry()
    assert set(ours) == set(MODEL_CONFIG_MAPPING)
    for key, cfg in MODEL_CONFIG_MAPPING.items():
        e = ours[key]
        assert (e.model_name, e.is_fc_model, e.underscore_to_dot) == (
            cfg.model_name, cfg.is_fc_model, cfg.underscore_to_dot), key
        assert (e.handler_module, e.handler_class) == (
            cfg.model_handler.__module__, cfg.model_handler.__name__), key


def test_lean_install() -> None:
    from careful_engine.core.doctor import heavy_packages

    assert heavy_packages() == []


def test_import_writes_nothing_to_the_working_directory(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("BFCL_PROJECT_ROOT", "CAREFUL_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    work = tmp_path / "work"
    work.mkdir()
    code = ("import careful_engine.core.bfcl as b; b.handler('Qwen/Qwen3-8B'); "
            "import bfcl_eval.utils")
    subprocess.run([sys.executable, "-c", code], cwd=work, env=env, check=True)
    assert list(work.iterdir()) == []
    assert (tmp_path / "cache" / "careful" / "bfcl_project_root").is_dir()
