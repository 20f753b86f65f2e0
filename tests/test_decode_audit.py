"""careful_engine.analysis.decode_audit and ``careful audit decode``: silence from a decoder mismatch."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis import decode_audit as da
from careful_engine.core import bfcl
from careful_engine.core.trajectory import Outcome, Verdict
from careful_engine.demo import reference as demo
from careful_engine.present import decode_audit as present_da
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.score import CategoryScore, score_run

_load()
runner = CliRunner()
FC = "gpt-4o-2024-11-20-FC"
XLAM_KEY = "Salesforce/Llama-xLAM-2-8b-fc-r"  # a raw-text decoder: wrong for FC output
BASE = "multi_turn_base"


# ---------------------------------------------------------------- messages


def test_normalise_groups_messages_that_differ_in_positions() -> None:
    a = da.normalise("JSONDecodeError: Expecting value: line 1 column 1 (char 0)")
    b = da.normalise("JSONDecodeError: Expecting value: line 3 column 17 (char 245)")
    assert a == b == "JSONDecodeError: Expecting value: line N column N (char N)"
    long_quote = da.normalise("SyntaxError: invalid syntax 'I will now delete the file' x")
    assert "'…'" in long_quote and "delete" not in long_quote
    assert da.normalise("TypeError: got 'list'") == "TypeError: got 'list'"  # short names stay
    assert da.normalise("a\nsecond line") == "a"
    assert len(da.normalise("x" * 500)) <= 160
    assert da.normalise("") == ""


# ---------------------------------------------------------------- flags on counts


def _stats(calls: int, no_call: int, failed: int, **kw) -> da.DecodeStats:
    st = da.DecodeStats("m", BASE, "dec", **kw)
    st.steps = Counter({Outcome.CALLS: calls, Outcome.NO_CALL: no_call,
                        Outcome.DECODE_ERROR: failed})
    st.conversations = st.conversations or 10
    return st


@pytest.mark.parametrize(
    ("calls", "no_call", "failed", "kind"),
    [(0, 0, 100, "decoder_mismatch"), (3, 10, 87, "decoder_mismatch"),
     (60, 5, 35, None), (0, 100, 0, "no_calls"), (4, 40, 56, "decoder_mismatch"),
     (0, 0, 5, None)],  # too few steps to judge
)
def test_flags(calls: int, no_call: int, failed: int, kind: str | None) -> None:
    flags = _stats(calls, no_call, failed).flags()
    assert [f.kind for f in flags] == ([kind] if kind else [])
    if kind == "decoder_mismatch":
        assert f"{100 * failed / (calls + no_call + failed):.0f}% of" in flags[0].message
        assert "decoder mismatch?" in str(flags[0])


def test_inference_errors_are_not_a_decoder_problem() -> None:
    """199 of 200 inference errors said 'nothing to decode' of the entry that was decoded:
    the rest is named; all of them, nothing."""
    st = _stats(0, 0, 1, conversations=200, inference_errors=199)
    assert [f.kind for f in st.flags()] == ["inference_errors"]
    assert st.flags()[0].message == ("199 of 200 entries are inference errors (no steps "
                                     "logged): only 1 entry is left to decode")
    assert _stats(0, 0, 1, conversations=10, inference_errors=8).flags()[0].message.endswith(
        ": only 2 entries are left to decode")
    every = _stats(0, 0, 0, conversations=10, inference_errors=10).flags()
    assert every[0].message.endswith("(no steps logged): nothing to decode")


def test_flags_from_a_category_score_without_traces() -> None:
    results = [ConversationResult("m", BASE, f"{BASE}_{i}", Verdict(False),
                                  decode=Counter({Outcome.DECODE_ERROR: 9, Outcome.CALLS: 0}))
               for i in range(5)]
    cs = CategoryScore("m", BASE, results)
    flags = da.flags(cs)
    assert [f.kind for f in flags] == ["decoder_mismatch"]
    assert da.from_category(cs).total_steps == 45


# ---------------------------------------------------------------- on a run folder


def _fake_run(root: Path, decoder: str, n: int = 8) -> Path:
    """The reference trajectories of ``n`` base conversations, in FC format, in a V4 folder
    whose manifest names ``decoder``."""
    folder = root / "fake_model" / "multi_turn"
    folder.mkdir(parents=True)
    convs = bfcl.conversations(BASE)[:n]
    (folder / f"BFCL_v4_{BASE}_result.json").write_text(
        "".join(json.dumps(demo.reference_entry(c)) + "\n" for c in convs))
    (root / "fake_model" / demo.MANIFEST).write_text(json.dumps({"decoder": decoder}))
    return root


def test_audit_run_flags_a_wrong_decoder(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "wrong", XLAM_KEY)
    audit = da.audit_run(run)
    whole = [st for st in audit.stats if st.category is None][0]
    assert whole.conversations == 200 and whole.missing == 192
    # every step of calls fails; the closing "Done." of each turn is a text answer: no call
    assert whole.steps[Outcome.CALLS] == 0 and whole.steps[Outcome.DECODE_ERROR] > 0
    assert whole.steps[Outcome.DECODE_ERROR] + whole.steps[Outcome.NO_CALL] == whole.total_steps
    assert whole.messages  # the failure messages are kept, normalised
    assert [f.kind for f in audit.flags()] == ["decoder_mismatch"]


def test_audit_run_with_the_right_decoder_is_clean(tmp_path: Path) -> None:
    run = _fake_run(tmp_path / "right", demo.DECODER)
    audit = da.audit_run(run)
    whole = [st for st in audit.stats if st.category is None][0]
    assert audit.flags() == []
    # every turn: one step of calls (when the reference calls) and a closing "Done." step,
    # a text answer: bfcl's Claude FC handler raises on it and its loop ends the turn there,
    # as on an empty decode: "no call", not a failure (it read 53% failed)
    assert whole.share(Outcome.CALLS) >= 0.4
    assert whole.steps[Outcome.DECODE_ERROR] == 0 and not whole.messages
    assert whole.steps[Outcome.CALLS] + whole.steps[Outcome.NO_CALL] == whole.total_steps


def test_flags_for_score_output(tmp_path: Path) -> None:
    """The function `careful score` can call on its RunScore."""
    run = score_run(_fake_run(tmp_path / "s", XLAM_KEY))
    flags = da.flags(run)
    assert [f.kind for f in flags] == ["decoder_mismatch"]
    assert flags[0].category is None  # flagged once for the model, not once per category
    assert da.flags(run.scores[0]) == flags
    right = score_run(_fake_run(tmp_path / "t", demo.DECODER))
    assert da.flags(right) == []


def test_cli_on_fake_runs(tmp_path: Path) -> None:
    wrong = _fake_run(tmp_path / "wrong", XLAM_KEY)
    right = _fake_run(tmp_path / "right", demo.DECODER)
    out = tmp_path / "out"
    res = runner.invoke(app, ["audit", "decode", str(wrong), str(right), "--out", str(out)],
                        catch_exceptions=False)
    assert res.exit_code == 1
    assert "decoder mismatch?" in res.output
    rows = json.loads((out / "decode_audit.json").read_text())["rows"]
    flagged = {r["entry"] for r in rows if r["flag"]}
    assert flagged == {"wrong"}
    assert (out / "decode_messages.csv").exists()
    res = runner.invoke(app, ["audit", "decode", str(right), "--out", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["audit", "decode", str(tmp_path / "nope")])
    assert res.exit_code == 2


def test_nothing_to_decode_names_the_folder(tmp_path: Path) -> None:
    """``careful audit decode EMPTY`` said "no multi-turn result files could be decoded" without
    the folder, unlike the other commands."""
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["audit", "decode", str(tmp_path / "empty"), "--out",
                              str(tmp_path / "out")])
    assert res.exit_code == 2
    assert (f"error: no usable multi-turn result files (BFCL_v3/v4_multi_turn_*_result.json) "
            f"under {tmp_path / 'empty'}") in " ".join(res.output.split())


def test_terminal_tables_fit_80_columns(tmp_path: Path) -> None:
    audit = da.audit_run(_fake_run(tmp_path / "a-rather-long-run-folder-name-v0.11", XLAM_KEY))
    table = [("a-rather-long-run-folder-name-v0.11", audit.stats)]
    console = Console(width=200, record=True)
    console.print(present_da.shares_terminal(table))
    assert max(len(x.rstrip()) for x in console.export_text().splitlines()) <= 80


# ---------------------------------------------------------------- the real runs


@pytest.fixture(scope="module")
def real(shared_runs: Path) -> dict[str, da.RunAudit]:
    names = {"gpt-oss-120b-vllm-v0.11.0": FC, "xlam-2-8b-fc-r": None,
             "deepseek-r1-0528-errors": "deepseek-ai/DeepSeek-R1"}
    if not all((shared_runs / n).is_dir() for n in names):
        pytest.skip("a shared run is missing")
    return {n: da.audit_run(shared_runs / n, decoder=d) for n, d in names.items()}


def test_real_runs(real: dict[str, da.RunAudit]) -> None:
    gpt = [st for st in real["gpt-oss-120b-vllm-v0.11.0"].stats if st.category is None][0]
    assert gpt.share(Outcome.CALLS) > 0.5 and gpt.steps[Outcome.DECODE_ERROR] == 0
    # its steps without a call are logged as [] with no text: asked cannot be read
    (flag,) = real["gpt-oss-120b-vllm-v0.11.0"].flags()
    assert flag.kind == "no_text" and flag.category is None
    assert flag.message.startswith("asked n/a: ") and "no text" in flag.message
    xlam = [st for st in real["xlam-2-8b-fc-r"].stats if st.category is None][0]
    assert xlam.share(Outcome.CALLS) > 0.5
    # its text answers raise JSONDecodeError in xLAM's handler, and end the turn: no call
    assert (xlam.share(Outcome.NO_CALL) or 0) > 0.3
    assert (xlam.share(Outcome.DECODE_ERROR) or 0) < 0.01
    assert real["xlam-2-8b-fc-r"].flags() == []
    assert [f.kind for f in real["deepseek-r1-0528-errors"].flags()] == ["inference_errors"]


def test_wrong_decoder_on_a_real_run(shared_runs: Path) -> None:
    run = shared_runs / "gpt-oss-120b-vllm-v0.10.2"
    if not run.is_dir():
        pytest.skip("gpt-oss run missing")
    audit = da.audit_run(run, decoder=XLAM_KEY)
    assert [f.kind for f in audit.flags()] == ["decoder_mismatch"]


@pytest.mark.parametrize("key", ["\u00b2", "\u0663", "1" * 5000, "-1", "", " 1"],
                         ids=["superscript", "arabic-indic", "5000-digits", "negative", "empty",
                              "space"])
def test_an_answers_key_that_is_no_turn_number_is_left_out(key: str, tmp_path: Path) -> None:
    """``"²"`` is a digit to ``str.isdigit`` that ``int`` refuses, and ``int`` refuses 5000
    digits too: such a key of careful_user_answers is named and left out, the entry decoded
    (audit decode crashed with an internal error; score dropped the conversation)."""
    from careful_engine.core.decode import ANSWERS, answers_problem, decode_entry

    entry = {"id": "multi_turn_base_0", "result": [[]], ANSWERS: {key: [], "0": []}}
    assert decode_entry(entry, None).user_answers == {0: []}
    assert "is not a turn number; it is left out" in answers_problem(entry)
    run = tmp_path / "run" / "m" / "multi_turn"
    run.mkdir(parents=True)
    (run / "BFCL_v4_multi_turn_base_result.json").write_text(json.dumps(entry) + "\n")
    _load()
    res = CliRunner().invoke(app, ["audit", "decode", str(tmp_path / "run"), "--decoder",
                                   "gpt-4o-2024-11-20-FC", "-o", str(tmp_path / "out")])
    assert res.exit_code in (0, 1), res.output
    assert "not a turn number" in res.output and "internal error" not in res.output


# ---------------------------------------------------------------- text answers


def test_a_text_answer_is_no_call_and_a_broken_call_a_failure() -> None:
    """bfcl's handlers raise on a plain text answer (Claude FC: a ``list[str]`` its FC decoder
    reads as call objects; xLAM: prose that is no JSON) and its loop ends the turn there, as
    on an empty decode: such a step is "no call"; one that opens like a call and does not
    decode is a failure (with its message)."""
    from careful_engine.core.decode import decode_step

    claude, xlam = bfcl.handler(demo.DECODER), bfcl.handler(XLAM_KEY)
    cases = [(claude, ["Done."], Outcome.NO_CALL),
             (claude, [{"cd": "{\"folder\": \"x\"}"}], Outcome.CALLS),
             (claude, [{"cd": "{\"folder\": "}], Outcome.DECODE_ERROR),
             (xlam, "The file has been moved to temp.", Outcome.NO_CALL),
             (xlam, "60 gallons is approximately 227.12 liters.", Outcome.NO_CALL),
             (xlam, "Amazon (AMZN) has been added to your watchlist.", Outcome.NO_CALL),
             (xlam, '[{"name": "cd", "arguments": {"folder": "x"}}]', Outcome.CALLS),
             (xlam, '[{"name": "cd", "arguments": {"folder": ', Outcome.DECODE_ERROR),
             (xlam, '```json\n[{"name": "cd", "arguments": ', Outcome.DECODE_ERROR)]
    for handler, item, outcome in cases:
        step = decode_step(handler, item)
        assert step.outcome is outcome, (item, step)
        assert (step.error is not None) is (outcome is Outcome.DECODE_ERROR), (item, step)
