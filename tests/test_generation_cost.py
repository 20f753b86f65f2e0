"""The price table, conservative accounting, estimates on other models, ``careful cost``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.generation.cost import folder_volumes, simulate_cache
from careful_engine.generation.errors import BudgetExhausted
from careful_engine.generation.spend import (
    SpendGuard,
    Volume,
    conservative_cost,
    estimate_prompt_tokens,
    ledger_totals,
    list_cost,
    load_prices,
    usage_volume,
    worst_case,
)

_load()
cli = CliRunner()
TABLE = load_prices()


def test_price_table_is_one_data_file_with_sources():
    doc = TABLE.document
    assert doc["unit"] == "per million tokens" and doc["as_of"]
    assert any("anthropic.com/pricing" in n for n in doc["notes"])
    for m in TABLE.models:
        assert m.cache_read == pytest.approx(m.input / 10, rel=0.25)  # Haiku 3: 0.03
        assert m.cache_write == pytest.approx(m.input * 1.25, rel=0.25)
    assert {m.model for m in TABLE.models if m.fictional} == {
        "claude-haiku-5-5", "claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1"}


@pytest.mark.parametrize(("name", "model"), [
    ("claude-haiku-4-5-20251001-FC", "claude-haiku-4-5"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-opus-4-5", "claude-opus-4-5"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1"),
    ("claude-haiku-5-5", "claude-haiku-5-5"),
])
def test_lookup(name, model):
    assert TABLE.get(name).model == model


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="no price for 'gpt-x'"):
        TABLE.get("gpt-x")


def test_list_and_conservative_costs():
    haiku = TABLE.get("claude-haiku-4-5")
    v = Volume(requests=2, input=1_000_000, cache_read=10_000_000, cache_write=2_000_000,
               output=500_000)
    assert list_cost(v, haiku) == pytest.approx(1.0 + 1.0 + 2.5 + 2.5)
    assert conservative_cost(v, haiku) == pytest.approx(1.0 + 10.0 + 2.5 + 2.5)
    assert worst_case(1000, 100, haiku) == pytest.approx((1000 * 1.25 + 100 * 5) / 1e6)
    u = {"input_tokens": 5, "cache_read_input_tokens": 7, "cache_creation_input_tokens": 11,
         "output_tokens": 3, "cache_creation": {"ephemeral_1h_input_tokens": 1}}
    assert usage_volume(u).to_json() == {"requests": 1, "prompt": 23, "input": 5,
                                         "cache_read": 7, "cache_write": 10,
                                         "cache_write_1h": 1, "output": 3}


def test_the_paper_figures():
    """§7: the Haiku run's volume costs $2.75 at list prices, and about $54 / $87 / $193 on
    Sonnet / Opus / Fable; the conservative accounting about $12."""
    prompt, output = 107_000_000, 1_600_000
    v = Volume(requests=8696, cache_read=int(prompt * 0.93),
               cache_write=prompt - int(prompt * 0.93), output=output)
    got = {m: list_cost(v, TABLE.get(m)) for m in
           ("claude-haiku-5-5", "claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1")}
    assert got["claude-haiku-5-5"] == pytest.approx(2.75, rel=0.02)
    assert got["claude-sonnet-5-5"] == pytest.approx(54, rel=0.02)
    assert got["claude-opus-5-5"] == pytest.approx(87, rel=0.02)
    assert got["claude-fable-5-1"] == pytest.approx(193, rel=0.02)
    assert conservative_cost(v, TABLE.get("claude-haiku-5-5")) == pytest.approx(12.21, rel=0.05)


def test_prompt_estimate_is_an_upper_bound():
    request = {"messages": [{"role": "user", "content": [{"type": "text", "text": "héllo"}]}],
               "tools": [{"name": "ls", "description": "list", "input_schema": {}}]}
    n = estimate_prompt_tokens(request)
    assert n > len(json.dumps(request["messages"])) + 1000


def test_guard_refuses_before_crossing(tmp_path):
    haiku = TABLE.get("claude-haiku-4-5")
    guard = SpendGuard(0.01, haiku, tmp_path / "l.jsonl")
    t1 = guard.reserve(0.006)
    with pytest.raises(BudgetExhausted):  # 0.006 reserved + 0.006 > 0.01
        guard.reserve(0.006)
    with pytest.raises(BudgetExhausted):  # once stopped, stays stopped
        guard.reserve(0.0001)
    guard.settle(t1, {"input_tokens": 1000, "output_tokens": 100})
    assert guard.spent == pytest.approx((1000 + 500) / 1e6)
    # a request in flight when the process died is charged at its worst case on resume
    other = SpendGuard(1.0, haiku, tmp_path / "l.jsonl")
    other.reserve(0.25)
    spent, _ = ledger_totals(tmp_path / "l.jsonl")
    assert spent == pytest.approx(0.0015 + 0.25)


def test_simulated_caching_follows_bfcls_markers():
    v = simulate_cache([100, 150, 300, 320], [5, 5, 5, 5])
    assert (v.cache_read, v.cache_write, v.output, v.requests) == (550, 320, 20, 4)


def _entry(entry_id: str, prompts, outputs, reads=None, writes=None) -> dict:
    e = {"id": entry_id, "result": [[]], "input_token_count": prompts,
         "output_token_count": outputs}
    if reads is not None:
        e["cache_read_input_token_count"] = reads
        e["cache_creation_input_token_count"] = writes
    return e


def _write_run(root: Path, model: str, entries: list[dict], manifest: dict | None = None):
    folder = root / model / "multi_turn"
    folder.mkdir(parents=True)
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text(
        "".join(json.dumps(e) + "\n" for e in entries))
    if manifest:
        (root / model / "careful_run.json").write_text(json.dumps(manifest))


def test_cost_command_prices_logged_and_simulated_runs(tmp_path):
    run = tmp_path / "run"
    _write_run(run, "claude-haiku-4-5-20251001-FC",
               [_entry("multi_turn_base_0", [[1000, 2000]], [[10, 20]], [[0, 900]], [[900, 100]])],
               {"model": "claude-haiku-4-5-20251001-FC", "api_model": "claude-haiku-4-5-20251001"})
    _write_run(run, "Qwen_Qwen3-8B", [_entry("multi_turn_base_0", [[100], [300]], [[7], [9]])])
    res = cli.invoke(app, ["cost", str(run), "--json", "--as", "claude-sonnet-4-5",
                           "--as", "claude-opus-5-5"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    items = {i["model"]: i for i in json.loads(res.output)}
    claude = items["claude-haiku-4-5-20251001-FC"]
    assert claude["cache_split"] == "logged" and claude["priced_as"] == "claude-haiku-4-5"
    assert claude["volume"] == {"requests": 2, "prompt": 3000, "input": 1100, "cache_read": 900,
                                "cache_write": 1000, "cache_write_1h": 0, "output": 30}
    assert claude["list_usd"] == pytest.approx((1100 + 1000 * 1.25 + 90 + 150) / 1e6)
    assert claude["conservative_usd"] == pytest.approx((1100 + 1250 + 900 + 150) / 1e6)
    assert [e["model"] for e in claude["estimates"]] == ["claude-sonnet-4-5", "claude-opus-5-5"]
    qwen = items["Qwen_Qwen3-8B"]
    assert qwen["cache_split"] == "simulated" and qwen["priced_as"] is None
    assert qwen["volume"]["cache_read"] == 100 and qwen["volume"]["cache_write"] == 300
    table = cli.invoke(app, ["cost", str(run)], catch_exceptions=False)
    assert table.exit_code == 0
    assert "Claude Fable 5.1 (paper) *" in table.output and "placeholder" in table.output


def _haiku_run(tmp_path):
    """A one-conversation haiku run and the spend guard whose ledger it keeps."""
    run = tmp_path / "run"
    _write_run(run, "claude-haiku-4-5-20251001-FC", [_entry("multi_turn_base_0", [[10]], [[1]])],
               {"model": "claude-haiku-4-5-20251001-FC"})
    return run, SpendGuard(1.0, TABLE.get("claude-haiku-4-5"),
                           run / "claude-haiku-4-5-20251001-FC" / "careful_spend.jsonl")


def test_cost_reads_the_spend_ledger(tmp_path):
    run, guard = _haiku_run(tmp_path)
    guard.release(guard.reserve(0.1), "http 429")
    guard.settle(guard.reserve(0.1), {"input_tokens": 10, "output_tokens": 1})
    ticket = guard.reserve(0.1)
    guard.settle(ticket, {"input_tokens": -1, "output_tokens": 1})  # unreadable: worst case
    guard.reserve(0.2)  # sent, and never answered (a killed process): worst case
    with pytest.raises(BudgetExhausted):
        guard.reserve(5.0)  # refused: never sent
    (fv,) = folder_volumes(run)
    assert dict(fv.ledger) == {"answered": 1, "worst case": 2, "failed": 1, "refused": 1}
    assert fv.ledger_usd[0] == pytest.approx(15 / 1e6 + 0.1 + 0.2)
    res = cli.invoke(app, ["cost", str(run)], catch_exceptions=False)
    assert "spend ledger: $0.3000 conservative over 4 requests sent (1 answered, 2 worst " \
        "case, 1 failed, 1 refused)" in " ".join(res.output.split())


def test_one_request_is_one_request(tmp_path):
    """cost said '1 requests' (and 'over 1 requests sent'): counts are pluralised."""
    run, guard = _haiku_run(tmp_path)
    guard.settle(guard.reserve(0.1), {"input_tokens": 10, "output_tokens": 1})
    res = cli.invoke(app, ["cost", str(run)], catch_exceptions=False)
    text = " ".join(res.output.split())
    assert "): 1 request, 10 prompt tokens" in text, text
    assert "conservative over 1 request sent (1 answered)" in text, text


def test_cost_of_nothing_is_an_error(tmp_path):
    assert cli.invoke(app, ["cost", str(tmp_path)]).exit_code == 2
    assert cli.invoke(app, ["cost", str(tmp_path / "missing")]).exit_code == 2


def _items(output: str) -> list[dict]:
    """cost's JSON, before the input problems it reports after it."""
    return json.JSONDecoder().raw_decode(output)[0]


def test_a_run_without_counts_per_request_is_not_priced(tmp_path):
    """A folder none of whose conversations logged token counts per request (one number per
    conversation, as glyphh's run logs, or inference errors) is n/a with the reason, never
    $0; one priced from some of its conversations says from how many."""
    run = tmp_path / "run"
    _write_run(run, "Totals", [_entry("multi_turn_base_0", 29524, 995),
                               _entry("multi_turn_base_1", 11851, 1450)])
    error = {"id": "multi_turn_base_1", "result": "Error during inference: 400"}
    _write_run(run, "Some", [_entry("multi_turn_base_0", [[100], [300]], [[7], [9]]), error])
    res = cli.invoke(app, ["cost", str(run), "--json", "--as", "claude-haiku-4-5"])
    items = {i["model"]: i for i in _items(res.output)}
    totals = items["Totals"]
    assert totals["volume"] is None and totals["list_usd"] is None
    assert totals["priced_conversations"] == 0 and totals["conversations"] == 2
    assert totals["estimates"][0]["list_usd"] is None
    assert totals["estimates"][0]["conservative_usd"] is None
    assert "no conversation logged token counts per request (2 logged one count per " \
        "conversation" in totals["not_priced"]
    some = items["Some"]
    assert some["volume"]["requests"] == 2 and some["not_priced"] is None
    assert some["coverage"] == "priced from 1 of 2 conversations that logged token counts " \
        "per request"
    text = " ".join(cli.invoke(app, ["cost", str(run), "--as", "claude-haiku-4-5"]).output.split())
    assert "Totals (2 conversations): n/a, not priced: no conversation logged token counts " \
        "per request" in text
    assert "0 requests" not in text and "0.0000" not in text
    assert "Some (2 conversations; priced from 1 of 2 conversations that logged token " \
        "counts per request): 2 requests" in text


def test_cost_labels_model_folders_of_the_same_name_by_run(tmp_path):
    """Two runs holding the same model folder name are told apart by their run folders, as
    the leaderboard labels entries; a name used once stays the model folder's."""
    for run in ("v1", "v2"):
        _write_run(tmp_path / run / "result", "gpt-oss",
                   [_entry("multi_turn_base_0", [[100]], [[7]])])
    _write_run(tmp_path / "v2" / "result", "other", [_entry("multi_turn_base_0", [[1]], [[1]])])
    res = cli.invoke(app, ["cost", str(tmp_path), "--json"])
    assert sorted(i["label"] for i in json.loads(res.output)) == [
        "other", "v1/gpt-oss", "v2/gpt-oss"]
    text = cli.invoke(app, ["cost", str(tmp_path)]).output
    assert "v1/gpt-oss (1 conversations)" in text and "v2/gpt-oss (1 conversations)" in text


def test_cost_of_a_shared_run_without_counts_is_na(shared_runs):
    """glyphh's run logged one count per conversation: n/a, not 0 requests priced at $0;
    deepseek's errors run says it is priced from 1 of its 200 conversations."""
    res = cli.invoke(app, ["cost", str(shared_runs / "glyphh-ada-1.1"), "--json"])
    (item,) = json.loads(res.output)
    assert item["volume"] is None and item["not_priced"]
    assert {e["list_usd"] for e in item["estimates"]} == {None}
    res = cli.invoke(app, ["cost", str(shared_runs / "deepseek-r1-0528-errors"), "--json"])
    (item,) = _items(res.output)
    assert item["coverage"] == ("priced from 1 of 200 conversations that logged token "
                                "counts per request")


def test_a_damaged_ledger_is_counted_on_the_safe_side(tmp_path):
    """The spend guard's ledger read back: a final line whose amount is not a number is
    charged its request's worst case, not nothing; so is a request sent under an id that is
    not text (no answer can be matched to it); a line that is not JSON changes nothing else."""
    from careful_engine.generation.spend import ledger_totals

    ledger = tmp_path / "ledger.jsonl"
    lines = [
        {"status": "sent", "request": "a", "worst_usd": 0.5},
        {"status": "ok", "request": "a", "worst_usd": 0.5, "conservative_usd": "NaN",
         "list_usd": -1},
        {"status": "sent", "request": "b", "worst_usd": 0.25},
        {"status": "ok", "request": "b", "worst_usd": 0.25, "conservative_usd": 0.1,
         "list_usd": 0.05},
        {"status": "sent", "request": ["x"], "worst_usd": 1.0},
        {"status": "sent", "request": "c", "worst_usd": 0.125},  # never answered: worst case
        {"status": "sent", "request": "d", "worst_usd": 2.0},
        # an integer no float holds (math.isfinite raised OverflowError on it)
        {"status": "ok", "request": "d", "worst_usd": 2.0, "conservative_usd": 10**400,
         "list_usd": -(10**400)},
    ]
    ledger.write_text("\n".join(json.dumps(x) for x in lines) + "\n{cut")
    assert ledger_totals(ledger) == (0.5 + 0.1 + 1.0 + 0.125 + 2.0,
                                     0.5 + 0.05 + 1.0 + 0.125 + 2.0)
    folder = tmp_path / "run" / "m"
    folder.mkdir(parents=True)
    (folder / "careful_spend.jsonl").write_bytes(ledger.read_bytes())
    res = cli.invoke(app, ["cost", str(tmp_path / "run")])
    assert res.exit_code in (0, 2) and "Traceback" not in res.output, res.output


def test_a_budget_no_float_holds_is_refused_in_words() -> None:
    from careful_engine.core.budget import Budget
    from careful_engine.generation.errors import GenerationError

    with pytest.raises(ValueError, match="finite positive"):
        Budget(seconds=10**400)
    with pytest.raises(GenerationError, match="finite positive"):
        SpendGuard(10**400, TABLE.get("claude-haiku-4-5"))


@pytest.mark.parametrize("usage", [
    {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
     "cache_creation": {"ephemeral_1h_input_tokens": -10**11}},  # priced far below zero
    {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 3,
     "cache_creation": {"ephemeral_1h_input_tokens": 4}},  # more 1-hour writes than writes
    {"input_tokens": 10.5, "output_tokens": 5},
    {"input_tokens": True, "output_tokens": 5},
    {"input_tokens": 10, "output_tokens": 10**12},
    {"input_tokens": "10", "output_tokens": 5},
])
def test_hostile_usage_is_charged_the_worst_case(tmp_path, usage):
    """A usage the guard cannot read as token counts (nested ones included) is charged the
    request's worst case: spending never goes down, so the budget still holds."""
    haiku = TABLE.get("claude-haiku-4-5")
    guard = SpendGuard(0.01, haiku, tmp_path / "l.jsonl")
    ticket = guard.reserve(0.004)
    guard.settle(ticket, usage)
    assert guard.spent == pytest.approx(0.004)
    guard.reserve(0.004)
    with pytest.raises(BudgetExhausted):  # 0.004 spent + 0.004 reserved + 0.004 > 0.01
        guard.reserve(0.004)
    assert ledger_totals(tmp_path / "l.jsonl")[0] == pytest.approx(0.008)


def test_cost_reports_what_it_leaves_out(tmp_path):
    """cost reads result files as score does: a line that is not JSON, one nested too deeply
    and a token count that is not one are each a file:line [id] line (exit 1), the rest is
    priced; a file over the size limit is refused, not read into memory."""
    run = tmp_path / "run"
    _write_run(run, "Qwen_Qwen3-8B", [_entry("multi_turn_base_0", [[100]], [[7]]),
                                      _entry("multi_turn_base_1", [[100]], [[float("nan")]])])
    path = run / "Qwen_Qwen3-8B" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    with path.open("a") as f:
        f.write("{nope\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    big = run / "Other" / "multi_turn" / "BFCL_v4_multi_turn_base_result.json"
    big.parent.mkdir(parents=True)
    with big.open("wb") as f:
        f.truncate(300 * 2**20)
    res = cli.invoke(app, ["cost", str(run), "--json"])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    text = " ".join(res.output.split())
    for shown in (":2 [multi_turn_base_1]: output_token_count holds nan", ":3: line is not JSON",
                  ":4: line nests too deeply", "bytes, more than the 268,435,456 bytes read"):
        assert shown in text, shown
    # both entries are read; the step whose count is NaN is left out of the sums (reported)
    assert '"conversations": 2' in text and '"requests": 1' in text


def test_a_hostile_folder_does_not_stop_the_others(tmp_path):
    """One model folder's manifest naming no model (a list) or not JSON, or a ledger or
    manifest that is a link or a FIFO: that folder is priced by its name, its spend left
    out with one line, and every other folder is priced (an AttributeError, a silent skip,
    or exit 2 for the whole command)."""
    import os

    run = tmp_path / "run"
    entry = [_entry("multi_turn_base_0", [[10]], [[1]])]
    _write_run(run, "claude-haiku-4-5-20251001-FC", entry, {"api_model": ["x"], "model": 3})
    _write_run(run, "linked", entry)
    _write_run(run, "fifo", entry)
    _write_run(run, "plain", entry)
    _write_run(run, "badjson", entry)
    (run / "badjson" / "careful_run.json").write_text('{"api_model": "claude-haiku-4-5", oops')
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"status": "ok", "conservative_usd": 99}\n')
    os.symlink(secret, run / "linked" / "careful_spend.jsonl")
    os.symlink(secret, run / "linked" / "careful_run.json")
    os.mkfifo(run / "fifo" / "careful_spend.jsonl")
    problems: list = []
    folders = {fv.model: fv for fv in folder_volumes(run, problems)}
    assert set(folders) == {"claude-haiku-4-5-20251001-FC", "linked", "fifo", "plain",
                            "badjson"}
    assert folders["badjson"].priced_as() == "badjson"
    assert folders["claude-haiku-4-5-20251001-FC"].priced_as() == \
        "claude-haiku-4-5-20251001-FC"
    assert folders["linked"].ledger_usd is None and folders["fifo"].ledger_usd is None
    text = "\n".join(str(p) for p in problems)
    assert "linked/careful_spend.jsonl is a symbolic link; refusing to read it" in text
    assert "linked/careful_run.json is a symbolic link; refusing to read it; priced by the " \
        "folder's name" in text
    assert "fifo/careful_spend.jsonl is not a regular file; its spend is not counted" in text
    # a manifest that is not JSON was skipped without a word (the lenient twin reader)
    assert "badjson/careful_run.json:1: not JSON (Expecting property name enclosed in " \
        "double quotes); priced by the folder's name" in text
    res = cli.invoke(app, ["cost", str(run)])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "4 input problem(s)" in res.output and res.output.count("(1 conversations)") == 5


def test_a_ledger_of_huge_amounts_and_bad_lines_adds_up_to_a_finite_sum(tmp_path):
    """Two finite amounts of 1e308 added up to $inf (and --json printed Infinity, not JSON);
    a 'sent' line whose request id is not text was never charged; a line that is not a record
    was skipped unsaid. Amounts over a million dollars are unreadable (the worst case is
    charged), an id-less request is charged its worst case, bad lines are numbered (a last
    line cut short by a kill is not a problem)."""
    from careful_engine.generation.spend import ledger_summary

    ledger = tmp_path / "careful_spend.jsonl"
    ledger.write_text(
        '{"request": "a", "status": "ok", "conservative_usd": 1e308, "list_usd": 1e308}\n'
        '{"request": "b", "status": "ok", "conservative_usd": 1e308, "list_usd": 1e308}\n'
        '{"request": ["x"], "status": "sent", "worst_usd": 5}\n'
        "not json\n[1, 2]\n"
        '{"request": "c", "status": "ok", "conservative_usd": 0.25, "list_usd": 0.5}\n'
        '{"request": "d", "sta')
    summary = ledger_summary(ledger)
    assert (summary.spent, summary.listed) == (5.25, 5.5)
    assert summary.skipped == [4, 5]
    assert summary.requests["answered"] == 3 and summary.requests["worst case"] == 1


PRICES = Path(__file__).resolve().parents[1] / "careful_engine" / "data" / "prices.json"


def _table(tmp_path: Path, change) -> tuple[Path, str]:
    """The shipped table, changed, written one entry a line; its path and text."""
    doc = json.loads(PRICES.read_text(encoding="utf-8"))
    change(doc["models"])
    models = ",\n".join(json.dumps(m) for m in doc.pop("models"))
    text = json.dumps(doc)[:-1] + ',\n"models": [\n' + models + "\n]}\n"
    path = tmp_path / "prices.json"
    path.write_text(text, encoding="utf-8")
    return path, text


@pytest.mark.parametrize(("change", "bad", "reason"), [
    # a second entry of a model (free here) was ignored: the run was priced by the first
    (lambda ms: ms.insert(3, {**ms[2], "input": 0, "output": 0, "display": "free"}), 3,
     "'claude-haiku-4-5' is already priced by models[2]"),
    (lambda ms: ms.append({**ms[0], "model": "mine", "ids": ["claude-haiku-4-5"]}), 13,
     "'claude-haiku-4-5' is already priced by models[2]"),
    # bool("false") is True: a real model was shown with the paper's placeholder mark
    (lambda ms: ms[1].__setitem__("fictional", "false"), 1,
     "fictional must be true or false, not 'false'"),
])
def test_a_model_twice_or_a_fictional_not_true_or_false_is_refused(tmp_path, change, bad,
                                                                   reason):
    path, text = _table(tmp_path, change)
    line = text.splitlines().index('"models": [') + 2 + bad
    with pytest.raises(ValueError) as e:
        load_prices(path)
    assert str(e.value) == f"{path}:{line} [models[{bad}]]: {reason}"
    run = tmp_path / "run"
    _write_run(run, "claude-haiku-4-5-20251001-FC",
               [_entry("multi_turn_base_0", [[1000]], [[10]])])
    res = cli.invoke(app, ["cost", str(run), "--prices", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert f"{path}:{line} [models[{bad}]]: {reason}" in " ".join(res.output.split())


def test_a_manifest_over_the_small_file_limit_is_not_parsed(tmp_path):
    """A manifest is read with the limit of small documents (8 MiB), not a result file's
    256 MiB: one bigger is refused in words, never parsed whole."""
    from careful_engine.core.safe_read import MAX_SMALL_BYTES

    run = tmp_path / "run"
    _write_run(run, "claude-haiku-4-5-20251001-FC", [_entry("multi_turn_base_0", [[10]], [[1]])])
    count = MAX_SMALL_BYTES // 3 + 10
    (run / "claude-haiku-4-5-20251001-FC" / "careful_run.json").write_text(
        '{"x":[' + ",".join(["{}"] * count) + "]}")
    res = cli.invoke(app, ["cost", str(run)])
    assert "Traceback" not in res.output, res.output
    assert "careful_run.json" in res.output and "too large" in res.output, res.output
