"""``careful declare``, ``review-sheet``, ``audit references`` and ``export mcp`` end to end.

``careful declare`` runs a handful of times per session (references + probes take a few
seconds; the real runs in ../shared/runs a few more). The shipped declarations/effects.json
is compared byte for byte with a fresh run on the same sources when ../shared/runs exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.annotation.llm import sheet_sections
from careful_engine.annotation.signals import load_inputs
from careful_engine.core import bfcl
from careful_engine.demo import reference as demo
from careful_engine.effects import boundary
from careful_engine.effects import declarations as decl_mod

from .conftest import REPO

_load()
runner = CliRunner()

SHIPPED = REPO / "declarations" / "effects.json"
# the decoders the shared runs need (their model folders are not in bfcl's registry)
SHARED_DECODERS = (
    "openai_gpt-oss-120b=gpt-4o-2024-11-20-FC",
    "glyphh-ada-1.1=gpt-4o-2024-11-20-FC",
    "deepseek-ai_DeepSeek-R1-0528=deepseek-ai/DeepSeek-R1",
)
# The paper's Table 2 (class: functions, read/pure, write, destructive, non-idempotent, hidden)
TABLE2 = {
    "GorillaFileSystem": (18, 10, 3, 4, 2, 1),
    "MathAPI": (17, 17, 0, 0, 0, 0),
    "MessageAPI": (10, 6, 2, 2, 2, 0),
    "TwitterAPI": (14, 7, 2, 5, 3, 0),
    "TicketAPI": (9, 3, 5, 1, 1, 0),
    "TradingBot": (20, 12, 3, 5, 3, 0),
    "TravelAPI": (18, 11, 3, 4, 4, 0),
    "VehicleControlAPI": (22, 12, 7, 3, 1, 0),
    "Total": (128, 78, 25, 24, 16, 1),
}


def _run(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def _declare(out: Path, *args: str) -> dict:
    res = _run("declare", "--out", str(out), "--json", "--quiet", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.fixture(scope="session")
def no_runs(tmp_path_factory) -> tuple[Path, dict]:
    """References and probes only."""
    out = tmp_path_factory.mktemp("declare") / "effects.json"
    return out, _declare(out, "--no-runs")


@pytest.fixture(scope="session")
def with_shared_runs(tmp_path_factory, shared_runs: Path) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("declare_shared") / "effects.json"
    decoders = [x for d in SHARED_DECODERS for x in ("--decoder", d)]
    return out, _declare(out, "--runs", str(shared_runs), *decoders)


# ---------------------------------------------------------------- determinism


def test_declare_is_byte_identical_across_processes(no_runs, tmp_path: Path) -> None:
    first, _ = no_runs
    second = tmp_path / "again.json"
    env = {**os.environ, "PYTHONHASHSEED": "4242"}  # another process, another hash seed
    proc = subprocess.run(
        [sys.executable, "-c", "from careful_cli import main; main()", "declare",
         "--no-runs", "--out", str(second), "--quiet"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert second.read_bytes() == first.read_bytes()


def test_the_reference_run_adds_nothing(no_runs, tmp_path: Path) -> None:
    """A logged run that is the reference trajectories (careful demo) changes no byte."""
    first, _ = no_runs
    demo.write_reference_run(tmp_path / "runs" / "reference", categories=("multi_turn_base",))
    out = tmp_path / "effects.json"
    summary = _declare(out, "--runs", str(tmp_path / "runs"))
    assert out.read_bytes() == first.read_bytes()
    assert summary["sources"]["run_files"] == 0


def test_shipped_declarations_are_reproduced(with_shared_runs) -> None:
    out, summary = with_shared_runs
    assert out.read_bytes() == SHIPPED.read_bytes(), (
        "declarations/effects.json is not what `careful declare` generates from the "
        "references, probes and ../shared/runs (see declarations/README.md)")
    runs = summary["sources"]["runs"]
    assert summary["sources"]["run_files"] >= 12
    assert runs["calls"] > 10_000 and runs["nonexistent_function_calls"] > 0


def test_sources_are_recorded(no_runs) -> None:
    path, _ = no_runs
    doc = json.loads(path.read_text())
    assert doc["schema"] == decl_mod.SCHEMA and doc["bfcl_eval"] == bfcl.BFCL_VERSION
    assert doc["content_sha256"] == decl_mod.content_hash(doc["functions"])
    refs = doc["sources"]["references"]
    assert refs["conversations"] == 800 and refs["calls"] == 4625
    probes = doc["sources"]["probes"]
    assert probes["states_per_class"] == 40 and probes["target_successes"] == 20
    assert set(probes["sampled_states"]) == set(bfcl.CLASSES)
    assert probes["successful"] > 1500
    assert doc["sources"]["runs"]["files"] == []
    assert not {"created", "timestamp", "generated_at", "date"} & set(doc)


# ---------------------------------------------------------------- inference


def test_table2_layout(no_runs) -> None:
    _, summary = no_runs
    got = {cls: tuple(row[c] for c in decl_mod.TABLE2_COLUMNS)
           for cls, row in summary["table2"].items()}
    assert got == TABLE2
    total = summary["summary"]["total"]
    assert (total["reads"], total["writes"], total["non_idempotent_writes"],
            total["hidden_only"]) == (79, 49, 16, 1)


def test_table2_with_logged_runs(with_shared_runs) -> None:
    _, summary = with_shared_runs
    got = {cls: tuple(row[c] for c in decl_mod.TABLE2_COLUMNS)
           for cls, row in summary["table2"].items()}
    assert got == TABLE2


def test_the_paper_s_named_outcomes(no_runs) -> None:
    f = json.loads(no_runs[0].read_text())["functions"]
    for name in ("rm", "rmdir", "retweet", "cancel_order"):
        assert f[name]["kind"] == "write" and f[name]["idempotent"] is True, name
    assert f["cp"]["idempotent"] is False
    cd = f["cd"]
    assert cd["kind"] == "write" and cd["hidden_only"] and cd["idempotent"] is False
    assert cd["footprint"] == ["GorillaFileSystem._current_dir"]
    per_call = {x["call"]: x for x in cd["idempotence_evidence"]}
    assert per_call["cd(folder='..')"]["repeat_changed"] > 0
    named = [x for c, x in per_call.items() if c != "cd(folder='..')"]
    assert named and all(x["repeat_changed"] == 0 for x in named)
    weather = f["get_outside_temperature_from_weather_com"]
    assert weather["kind"] == "read" and weather["evidence"]["calls"] > 0
    assert weather["evidence"]["successful"] == 0 and "failing evidence" in weather["note"]
    assert f["contact_customer_support"]["kind"] == "read"
    assert [n for n, e in f.items() if e["hidden_only"]] == ["cd"]


def test_signals_and_footprints(no_runs) -> None:
    f = json.loads(no_runs[0].read_text())["functions"]
    proposed = {
        "entries-removed": {"rm", "rmdir", "mv", "delete_message", "remove_stock_from_watchlist",
                            "cancel_booking", "unfollow_user"},
        "balance-changed": {"fund_account", "withdraw_funds", "book_flight",
                            "purchase_insurance", "cancel_booking"},
        "third-party": {"send_message", "post_tweet", "comment", "mention", "retweet"},
    }
    for signal, names in proposed.items():
        assert {n for n, e in f.items() if e["signal_counts"][signal]} == names, signal
    assert "TravelAPI.credit_card_list[*].balance" in f["book_flight"]["footprint"]
    assert "TravelAPI.booking_record[*]" in f["book_flight"]["footprint"]
    assert f["rm"]["footprint"] == ["GorillaFileSystem.root/**"]
    assert f["send_message"]["example"]["changes"]
    for name, e in f.items():
        assert (e["kind"] == "write") == bool(e["footprint"]), name
        assert e["proposed"] == bool(e["signals"]), name


def test_annotation_rounds_read_the_declarations(no_runs) -> None:
    inputs = load_inputs(no_runs[0])
    assert len(inputs.functions) == 128
    assert len(inputs.select("writes").functions) == 49
    assert sum(bool(fi.proposed) for fi in inputs.functions.values()) == 16


# ---------------------------------------------------------------- boundary


def test_paper_final_boundary_matches_table2() -> None:
    b = boundary.load("paper-final")
    classes = bfcl.function_class()
    counts = {cls: sum(classes[n] == cls for n in b.destructive) for cls in bfcl.CLASSES}
    assert counts == {cls: row[3] for cls, row in TABLE2.items() if cls != "Total"}
    assert len(b.destructive) == 24
    assert all(reason.strip() for reason in b.destructive.values())


# ---------------------------------------------------------------- audit


def _audit(*args: str) -> dict:
    res = _run("audit", "references", "--json", *args)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("source", ["shipped", "fresh"])
def test_audit_references_reproduces_section_3(source: str, no_runs) -> None:
    args = () if source == "shipped" else ("--declarations", str(no_runs[0]))
    result = _audit(*args, "--boundary", "paper-final")
    base = result["categories"]["multi_turn_base"]
    assert base["reference_calls"] == 1142
    assert (base["destructive_calls"], base["other_write_calls"], base["read_calls"]) == \
        (342, 268, 532)
    assert base["turns"] == 734
    assert base["turns_with_destructive_call"] == 322
    assert base["turns_with_write"] == 432
    assert base["turns_without_call"] == 3
    assert base["functions_used"] == 81
    assert base["read_calls_to_hidden_only_writes"] == {"cd": 51}
    for cat in ("multi_turn_miss_func", "multi_turn_miss_param"):
        assert result["categories"][cat]["turns"] == 934
        assert result["categories"][cat]["turns_without_call"] == 203
    assert result["total"]["functions_used"] == 81 and result["functions_total"] == 128
    assert result["hidden_only_counted_as_reads"] == ["cd"]


def test_audit_follows_the_boundary(tmp_path: Path) -> None:
    b = boundary.load("paper-final")
    smaller = boundary.Boundary("test-small", {"rm": "deletes a file"})
    path = smaller.save(tmp_path / "small.json")
    base = _audit("--boundary", str(path), "-c", "base")["categories"]
    assert list(base) == ["multi_turn_base"]
    assert base["multi_turn_base"]["destructive_calls"] < 342
    assert b.name == "paper-final"
    res = _run("audit", "references", "--boundary", "no-such-boundary")
    assert res.exit_code == 2 and "no boundary" in res.output


# ---------------------------------------------------------------- review sheet, MCP


def test_review_sheet(no_runs, tmp_path: Path) -> None:
    res = _run("review-sheet", "--declarations", str(no_runs[0]), "--out",
               str(tmp_path / "sheet"))
    assert res.exit_code == 0, res.output
    md = (tmp_path / "sheet.md").read_text()
    names = list(bfcl.function_class())
    sections = sheet_sections(md, names)
    assert set(sections) == set(names)
    rm = sections["rm"]
    assert "gorilla_file_system.py:" in rm and "Idempotence: idempotent" in rm
    assert "entries-removed" in rm and "GorillaFileSystem.root/**" in rm
    assert "cd(folder='..')" in sections["cd"]
    assert "paper-final" not in md  # blind: no boundary label
    rows = (tmp_path / "sheet.csv").read_text().splitlines()
    assert len(rows) == 129 and rows[0].startswith("class,function,kind")


def test_shipped_review_sheet_and_mcp_match_the_shipped_declarations(tmp_path: Path) -> None:
    _run("review-sheet", "--out", str(tmp_path / "sheet"))
    for ext in ("md", "csv"):
        shipped = REPO / "declarations" / f"review_sheet.{ext}"
        assert (tmp_path / f"sheet.{ext}").read_bytes() == shipped.read_bytes(), ext
    _run("export", "mcp", "--out", str(tmp_path / "mcp.json"))
    assert (tmp_path / "mcp.json").read_bytes() == \
        (REPO / "declarations" / "mcp_tools.json").read_bytes()


def test_export_mcp(no_runs, tmp_path: Path) -> None:
    out = tmp_path / "tools.json"
    res = _run("export", "mcp", "--declarations", str(no_runs[0]), "--out", str(out))
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    tools = {t["name"]: t for t in doc["tools"]}
    assert len(tools) == 128 and doc["boundary"]["name"] == "paper-final"
    for t in tools.values():
        assert t["inputSchema"]["type"] == "object" and "properties" in t["inputSchema"]
        assert set(t["annotations"]) == {"readOnlyHint", "destructiveHint", "idempotentHint",
                                         "openWorldHint"}
        assert t["description"] == bfcl.all_func_docs()[t["name"]]["description"]
    a = {n: t["annotations"] for n, t in tools.items()}
    assert a["ls"] == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True,
                       "openWorldHint": False}
    assert a["rm"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True,
                       "openWorldHint": False}
    assert a["cd"] == {"readOnlyHint": False, "destructiveHint": False,
                       "idempotentHint": False, "openWorldHint": False}
    assert a["send_message"]["openWorldHint"] and not a["send_message"]["idempotentHint"]
    assert a["contact_customer_support"]["readOnlyHint"] is False
    assert a["contact_customer_support"]["destructiveHint"] is True
    assert sum(x["readOnlyHint"] for x in a.values()) == 78
    assert sum(x["destructiveHint"] for x in a.values()) == 24
    door = tools["lockDoors"]["inputSchema"]["properties"]["door"]
    assert door["type"] == "array" and door["items"]["enum"][0] == "driver"
    assert tools["place_order"]["inputSchema"]["properties"]["price"]["type"] == "number"
    assert tools["edit_ticket"]["inputSchema"]["properties"]["updates"]["type"] == "object"


# ---------------------------------------------------------------- errors


def test_declare_errors(tmp_path: Path) -> None:
    res = _run("declare", "--out", str(tmp_path / "x.json"), "--decoder", "nonsense")
    assert res.exit_code == 2 and "MODEL_DIR=REGISTRY_KEY" in res.output
    res = _run("declare", "--out", str(tmp_path / "x.json"), "--runs", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "no such run folder" in res.output
    res = _run("declare", "--out", str(tmp_path / "x.json"), "--boundary", "nope")
    assert res.exit_code == 2
    assert not (tmp_path / "x.json").exists()
    res = _run("review-sheet", "--declarations", str(tmp_path / "missing.json"))
    assert res.exit_code == 2 and "careful declare" in res.output


def test_declare_leaves_the_shipped_file_alone_unless_named(no_runs, tmp_path: Path,
                                                             monkeypatch) -> None:
    """Without --out, `careful declare` writes effects.json in the working folder, says how to
    score with it, and never replaces the shipped declarations (whose hash every score line
    records); run from the shipped file's own folder it refuses rather than replace it."""
    shipped = tmp_path / "shipped" / "effects.json"
    shipped.parent.mkdir()
    shipped.write_text("the shipped declarations\n")
    monkeypatch.setattr(decl_mod, "default_path", lambda: shipped)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    res = _run("declare", "--no-runs", "--quiet")
    assert res.exit_code == 0, res.output
    assert shipped.read_text() == "the shipped declarations\n"
    assert (work / "effects.json").read_bytes() == no_runs[0].read_bytes()
    said = " ".join(res.output.split())
    assert "wrote effects.json" in said and "--declarations effects.json" in said
    monkeypatch.chdir(shipped.parent)
    res = _run("declare", "--no-runs", "--quiet")
    assert res.exit_code == 2 and "--out" in res.output
    assert shipped.read_text() == "the shipped declarations\n"


def test_run_without_a_decoder_is_skipped_with_a_warning(no_runs, tmp_path: Path) -> None:
    conv = bfcl.conversations("multi_turn_base")[0]
    folder = tmp_path / "runs" / "some_unknown-model" / "multi_turn"
    folder.mkdir(parents=True)
    entry = {"id": conv.id, "result": [[[{"ls": "{}"}], ["Done."]]] * len(conv.ground_truth)}
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text(json.dumps(entry) + "\n")
    out = tmp_path / "effects.json"
    res = _run("declare", "--out", str(out), "--runs", str(tmp_path / "runs"), "--json")
    assert res.exit_code == 1
    assert "no usable decoder" in res.output and "--decoder some_unknown-model=" in res.output
    assert out.read_bytes() == no_runs[0].read_bytes()


def test_declare_skips_a_synthetic_run(tmp_path) -> None:
    """careful demo's flawed run is no model's behaviour: its calls are not observations."""
    from careful_engine.effects.observe import find_runs

    line = json.dumps({"id": "multi_turn_base_0", "result": [[[{"pwd": "{}"}]]]}) + "\n"
    for model, manifest in (("flawed", {"synthetic": True}), ("real", {"synthetic": False})):
        folder = tmp_path / "runs" / model / "multi_turn"
        folder.mkdir(parents=True)
        (folder / "BFCL_v4_multi_turn_base_result.json").write_text(line)
        (folder.parent / "careful_run.json").write_text(json.dumps(
            {**manifest, "decoder": "gpt-4o-2024-11-20-FC"}))
    found, warnings = find_runs([tmp_path / "runs"], {})
    assert [r.file.model for r in found] == ["real"]
    assert [w for w in warnings if "SYNTHETIC" in w] == [
        f"{tmp_path / 'runs' / 'flawed'}: skipped, a SYNTHETIC run (its manifest says so): no "
        "model made its calls"]


def test_export_mcp_stamps_the_hash_of_what_it_read(tmp_path: Path) -> None:
    """A declarations file edited by hand keeps the content_sha256 of the file it was: the
    export stamped that claim, naming declarations it did not read. It computes the hash."""
    doc = json.loads((REPO / "declarations" / "effects.json").read_text())
    claimed = doc["content_sha256"]
    doc["functions"]["mv"]["kind"] = "read"
    edited = tmp_path / "effects.json"
    edited.write_text(json.dumps(doc))
    out = tmp_path / "tools.json"
    res = _run("export", "mcp", "--declarations", str(edited), "--out", str(out))
    assert res.exit_code == 0, res.output
    stamped = json.loads(out.read_text())["declarations_content_sha256"]
    assert stamped != claimed and stamped == decl_mod.content_hash(doc["functions"])
    shipped = json.loads((REPO / "declarations" / "mcp_tools.json").read_text())
    assert shipped["declarations_content_sha256"] == claimed  # the shipped pair agrees


def test_one_summary_sentence_for_both_front_ends(tmp_path: Path) -> None:
    """`careful declare` and the workbench's Home say the declarations in the same sentence,
    counted from the functions (a summary edited by hand, or missing, changes nothing)."""
    import inspect

    from workbench.screens import home

    decl = decl_mod.load(REPO / "declarations" / "effects.json")
    total = decl.document["summary"]["total"]
    text = decl_mod.summary_text(decl.document)
    assert text == (f"{total['functions']} functions: {total['reads']} reads, "
                    f"{total['writes']} writes ({total['non_idempotent_writes']} not idempotent, "
                    f"{total['hidden_only']} hidden-only); {total['proposed']} proposed by the "
                    "signals")
    assert decl_mod.summary_text({**decl.document, "summary": {"total": {}}}) == text
    assert "summary_text(" in inspect.getsource(home.declarations_text)
    from careful_cli import declare

    assert "summary_text(" in inspect.getsource(declare)
    assert '["summary"]["total"]' not in inspect.getsource(home)
    out = tmp_path / "effects.json"
    res = _run("declare", "--no-runs", "--out", str(out), "--quiet")
    assert res.exit_code == 0, res.output
    mine = decl_mod.summary_text(json.loads(out.read_text(encoding="utf-8")))
    assert f"{mine}. observations:" in " ".join(res.output.split())  # (wrapped lines joined)
