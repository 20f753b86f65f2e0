"""Every terminal table `careful score` and `careful leaderboard` print for a run under the
confirmation protocol, shown whole on an 80-column screen: no column cropped, no legend line
cut (rich crops a table wider than the screen on the right, its caption with it)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from careful_engine.analysis import leaderboard as lb
from careful_engine.core import bfcl
from careful_engine.core.runs import ResultFile, load_result_file
from careful_engine.demo.reference import DECODER, fc_step, reference_entry
from careful_engine.present.leaderboard import leaderboard_terminal
from careful_engine.present.tables import (
    ACCURACY_DENOMINATOR,
    RULE_COLUMNS,
    STRICT_NOTE,
    accuracy_table,
    accuracy_terminal,
    confirm_terminal,
    rules_terminal,
)
from careful_engine.scoring.rules import RULE_REGISTRY
from careful_engine.scoring.score import ModelScore, load_effects, score_file

from .terminal_fit import cut_at_80

BASE = "multi_turn_base"
LONG = "gpt-oss-120b-vllm-v0.11.0"  # a folder name as long as the shared runs'


def _entries() -> list[dict]:
    """Three conversations under the confirmation protocol: a yes before the reference's
    destructive calls, an unconfirmed collateral mv, and the reference itself."""
    yes = reference_entry(bfcl.conversation(f"{BASE}_5"))
    yes["result"][0] = [["Shall I move analysis_report.csv into archive?"], *yes["result"][0]]
    yes["careful_user_answers"] = {"0": [{"step": 0, "answer": "yes"}]}
    extra = reference_entry(bfcl.conversation(f"{BASE}_0"))
    extra["result"][0] = [*extra["result"][0],
                          fc_step(["mv(source='final_report.pdf', destination='x')"])]
    extra["careful_user_answers"] = {}
    plain = reference_entry(bfcl.conversation(f"{BASE}_2"))
    plain["careful_user_answers"] = {}
    return [yes, extra, plain]


@pytest.fixture(scope="module")
def confirm_run(tmp_path_factory: pytest.TempPathFactory) -> ModelScore:
    path = tmp_path_factory.mktemp("confirm") / f"BFCL_v4_{BASE}_result.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in _entries()))
    cs = score_file(load_result_file(ResultFile(path, LONG, BASE, 4)),
                    bfcl.handler(DECODER), effects=load_effects())
    assert cs.confirm and any(r.rules and r.rules.counts.get("unconfirmed") for r in cs.results)
    return ModelScore(LONG, DECODER, {BASE: cs})


def _cells(table: Table) -> list[list[str]]:
    """The table's rows, cell by cell."""
    cols = [list(c.cells) for c in table.columns]
    return [[str(col[i]) for col in cols] for i in range(table.row_count)]


def _shown_whole(tables: list[Table]) -> None:
    for t in tables:
        assert not cut_at_80(t), (t.title, cut_at_80(t))
        narrow, wide = (Console(width=w, record=True, file=io.StringIO()) for w in (80, 200))
        for c in (narrow, wide):
            c.print(t)
        # the 80-column screen shows what a wide one does: every header, cell and legend word
        assert narrow.export_text() == wide.export_text(), t.title


def _rule_columns(tables: list[Table], title: str) -> tuple[list[str], list[list[str]]]:
    """The headers and per-row cells of a rule table ``title``, its parts joined."""
    parts = [t for t in tables if str(t.title).startswith(title)]
    headers = [str(c.header) for t in parts for c in t.columns[1:]]
    rows = [sum((r[1:] for r in rs), []) for rs in zip(*map(_cells, parts), strict=True)]
    return headers, rows


def test_the_leaderboard_shows_every_rule_of_a_confirm_run_at_80_columns(
        confirm_run: ModelScore) -> None:
    entry = lb.Entry(LONG, Path("/runs") / LONG, confirm_run)
    tables = leaderboard_terminal([entry])
    _shown_whole(tables)
    headers, rows = _rule_columns(tables, "Rule totals")
    keys = [k for _, k in RULE_COLUMNS if k not in ("beyond_destructive",
                                                     "duplicate_writes_visible")]
    assert headers == ["conv", *(RULE_REGISTRY[k].tag for k in keys)]
    assert "unconf" in headers
    t = entry.rule_totals()
    assert rows[0][headers.index("unconf")] == str(t["unconfirmed"]) != "0"


def test_every_table_of_careful_score_fits_80_columns(confirm_run: ModelScore) -> None:
    tables = [accuracy_terminal([confirm_run], True), *rules_terminal([confirm_run]),
              confirm_terminal([confirm_run])]
    _shown_whole(tables)
    headers, _ = _rule_columns(tables, "Rule violations")
    assert "unconf" in headers


def test_the_accuracy_legend_says_what_safe_is_and_the_denominator_as_the_files_do(
        confirm_run: ModelScore) -> None:
    """The terminal's accuracy legend defines safe and the denominator in the words of
    accuracy.md's caption (one wording: the two cannot drift), and fits 80 columns."""
    table = accuracy_terminal([confirm_run], True)
    _shown_whole([table])
    legend = " ".join(str(table.caption).split())
    caption = accuracy_table([confirm_run], True).caption
    safe = next(p for p in legend.split("; ") if p.startswith("safe: "))
    assert safe.startswith("safe: BFCL passes with no collateral destructive call"), legend
    assert safe in caption and ACCURACY_DENOMINATOR in legend and ACCURACY_DENOMINATOR in caption
    assert "full dataset" in ACCURACY_DENOMINATOR and "inference errors fail" in ACCURACY_DENOMINATOR
    assert STRICT_NOTE in caption
    assert "safe:" not in " ".join(str(accuracy_terminal([confirm_run], False).caption).split())


XLAM = "Salesforce_Llama-xLAM-2-8b-fc-r"  # the shared run's model folder


def test_run_and_category_labels_fold_at_separators_not_mid_word(
        confirm_run: ModelScore) -> None:
    """`careful score` on the xLAM run cut its label as ``Salesforce`` / ``_Llama-`` (a
    10-column first column) and its category as ``miss_`` / ``func``: a name now folds at a
    separator, never mid-word, and a category that fits stays whole."""
    cs = confirm_run.categories[BASE]
    ms = ModelScore(XLAM, DECODER, {BASE: cs, "multi_turn_miss_func": cs})
    tables = rules_terminal([ms])
    _shown_whole(tables)  # every name piece on the screen, whole
    for t in tables:
        text = _screen(t)
        assert "Salesforce_" in text and "miss_func" in text, text


def _screen(table: Table) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def _provenance_rows() -> list[dict]:
    """`careful provenance`'s per-category summaries, with the xLAM run's causes."""
    causes = {"simulator_changed": 45, "data_drift": 14, "function_removed": 11}
    return [{
        "category": c, "with_log": 200, "conversations": 200,
        "dataset_drift": {"by_kind": {"question_changed": 70, "initial_state_changed": 72,
                                      "turn_count_changed": 11},
                          "by_status": {"identical": 110, "no_log": 0}, "drifted": 90},
        "decoder_drift": {"steps_compared": 2008, "steps_differing": 3,
                          "conversations_differing": 2,
                          "by_kind": {"arguments_changed": 2, "calls_removed": 1}},
        "replay_fidelity": {"calls_logged": 1319, "share": 0.937,
                            "conversations_diverging": 70,
                            "conversations_diverging_verdict_relevant": 70,
                            "first_divergence_causes": causes},
        "verdicts": {"official": {"accuracy": 0.765}, "accuracy_now": 0.57,
                     "passed_then_fail_now": {"count": 42, "primary_reason":
                                              {"dataset_drift": 36, "replay_differs": 2}},
                     "failed_then_pass_now": {"count": 3, "primary_reason":
                                              {"replay_differs": 2, "dataset_drift": 1}}},
    } for c in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")]


def test_every_table_of_careful_provenance_fits_80_columns() -> None:
    """`careful provenance` folded its headers and names mid-word at 80 columns
    (``categor`` / ``y``, ``miss_fu`` / ``nc``, ``simulator_c`` / ``hanged``)."""
    from careful_cli import provenance as prov

    rows = _provenance_rows()
    tables = [prov._drift_table(rows), prov._decoder_table(rows), prov._fidelity_table(rows),
              prov._verdict_table(rows)]
    for t in tables:
        assert t is not None
        assert not cut_at_80(t, natural=False), (t.title, cut_at_80(t, natural=False))
    text = "".join(map(_screen, tables))
    for name in ("category", "identical", "miss_func", "simulator_changed", "function_removed",
                 "arguments_changed"):
        assert name in text, name
