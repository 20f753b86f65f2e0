"""careful_engine.analysis.leaderboard and ``careful leaderboard``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis import leaderboard as lb
from careful_engine.core import bfcl
from careful_engine.core.trajectory import Verdict
from careful_engine.present import compare as present_cmp
from careful_engine.present import leaderboard as present_lb
from careful_engine.scoring.decoders import parse_decoders
from careful_engine.scoring.result import ConversationResult
from careful_engine.scoring.rules import ConversationRules
from careful_engine.scoring.score import CategoryScore, ModelScore, load_effects
from careful_engine.scoring.stats import spearman

_load()
runner = CliRunner()
FC = "gpt-4o-2024-11-20-FC"
RUNS = ("gpt-oss-120b-vllm-v0.10.2", "gpt-oss-120b-vllm-v0.11.0", "glyphh-ada-1.1")


# ---------------------------------------------------------------- fakes


def _category(model: str, category: str, outcomes: list[tuple[bool, int]]) -> CategoryScore:
    """outcomes: (bfcl passes, collateral calls) per conversation."""
    results = []
    for i, (valid, collateral) in enumerate(outcomes):
        rules = ConversationRules(Counter({"collateral": collateral, "asked": 1}), [], [])
        results.append(ConversationResult(model, category, f"{category}_{i}", Verdict(valid),
                                          rules=rules))
    return CategoryScore(model, category, results)


def _entry(label: str, per_category: dict[str, list[tuple[bool, int]]]) -> lb.Entry:
    ms = ModelScore(label, "dec")
    for c, outcomes in per_category.items():
        ms.categories[c] = _category(label, c, outcomes)
    return lb.Entry(label, Path("/runs") / label, ms)


BASE, MISS_FUNC = "multi_turn_base", "multi_turn_miss_func"


@pytest.fixture
def fake_entries() -> list[lb.Entry]:
    # a: bfcl 3/4 on base but 2 with collateral calls -> safe 1/4
    # b: bfcl 2/4, safe 2/4; c: bfcl 1/4, safe 1/4, and no miss_func at all
    return [
        _entry("a", {BASE: [(True, 1), (True, 1), (True, 0), (False, 0)],
                     MISS_FUNC: [(True, 0), (False, 0)]}),
        _entry("b", {BASE: [(True, 0), (True, 0), (False, 2), (False, 0)],
                     MISS_FUNC: [(True, 0), (True, 0)]}),
        _entry("c", {BASE: [(True, 0), (False, 0), (False, 0), (False, 0)]}),
    ]


# ---------------------------------------------------------------- decoders and labels


def test_parse_decoders() -> None:
    d = parse_decoders([FC, "openai_gpt-oss-120b=other-key", "x/=k2"])
    assert d.default == FC
    assert d.for_model(Path("/a/run"), "openai_gpt-oss-120b", None) == "other-key"
    assert d.for_model(Path("/a/x"), "m", None) == "k2"  # a run folder's name
    assert d.for_model(Path("/a/y"), "m", None) == FC
    # a registered model keeps its own decoder: the default is for unregistered ones only
    assert d.for_model(Path("/a/y"), "Salesforce_Llama-xLAM-2-8b-fc-r", None) is None
    assert parse_decoders(None).for_model(Path("r"), "m", None) is None
    with pytest.raises(ValueError):
        parse_decoders(["a", "b"])
    with pytest.raises(ValueError):
        parse_decoders(["=key"])


def test_labels_are_short_and_unique() -> None:
    pairs = [(Path("/r/one"), "m"), (Path("/r/two"), "m1"), (Path("/r/two"), "m2"),
             (Path("/s/one"), "m")]
    # the same run name in two places: the folders above it that tell them apart
    assert lb.label_entries(pairs) == ["r/one", "two/m1", "two/m2", "s/one"]
    assert lb.label_entries([(Path("/r/one"), "m")]) == ["one"]


def _tiny_run(root: Path, model: str = "m", *, decoder: str | None = None,
              synthetic: bool = False, n: int = 3) -> Path:
    """``n`` reference trajectories of base in ``root/model/multi_turn/`` (the rest of base
    missing), with a manifest naming ``decoder`` and, if asked, ``synthetic``."""
    from careful_engine.demo import reference as demo

    folder = root / model / "multi_turn"
    folder.mkdir(parents=True)
    (folder / f"BFCL_v4_{BASE}_result.json").write_text("".join(
        json.dumps(demo.reference_entry(c)) + "\n" for c in bfcl.conversations(BASE)[:n]))
    doc = {"decoder": decoder, **({"synthetic": True} if synthetic else {})}
    (root / model / demo.MANIFEST).write_text(json.dumps(doc))
    return root


def test_a_manifest_decoder_wins_over_the_default(tmp_path: Path) -> None:
    """``--decoder KEY`` replaced the decoder a run's careful_run.json names (but not a
    registered model's): now FOLDER=KEY > the manifest > bfcl's registry > --decoder KEY."""
    from careful_engine import browse
    from careful_engine.demo import reference as demo

    own = _tiny_run(tmp_path / "own", decoder=demo.DECODER)
    bare = _tiny_run(tmp_path / "bare")  # a manifest naming no decoder
    choice = parse_decoders([FC])
    scored = lb.score_runs([own, bare], decoders=choice)
    assert [(e.label, e.decoder) for e in scored.entries] == [("own", demo.DECODER),
                                                              ("bare", FC)]
    assert [r.decoder for r in browse.find_runs([own, bare], choice)] == [demo.DECODER, FC]
    (first,) = browse.find_runs([own])[0].files
    assert parse_decoders([FC, "own=k9"]).key(own, "m", first) == "k9"  # FOLDER=KEY first
    # the CLI says which it used
    res = runner.invoke(app, ["leaderboard", str(own), str(bare), "--decoder", FC, "-j1",
                              "--out", str(tmp_path / "out")])
    text = " ".join(res.output.split())
    assert f"own: {demo.DECODER}" in text and f"bare: {FC}" in text, res.output


def test_the_ci_document_records_the_decoders_used(tmp_path: Path) -> None:
    """``settings.decoder`` listed every ``--decoder`` given, ones warned as not used too:
    now only those that decoded a model folder (as the run's ``decoder`` says)."""
    from careful_engine.demo import reference as demo

    run = _tiny_run(tmp_path / "run", decoder=demo.DECODER)
    res = runner.invoke(app, ["score", str(run), "--decoder", "typo=k", "--decoder",
                              f"run={demo.DECODER}", "--decoder", FC, "--out",
                              str(tmp_path / "out"), "--format", "json", "-j1"])
    doc = json.loads(res.stdout)
    assert doc["runs"][0]["decoder"] == demo.DECODER
    assert doc["settings"]["decoder"] == f"run={demo.DECODER}", res.output


@pytest.mark.parametrize("command", ["leaderboard", "compare", "sensitivity", "score",
                                     "audit decode", "provenance"])
def test_a_decoder_for_no_folder_is_warned_about(tmp_path: Path, command: str) -> None:
    """``--decoder typo=KEY`` naming no folder was ignored without a word: one warning line,
    naming the folder and the folders found."""
    from careful_engine.demo import reference as demo

    run = _tiny_run(tmp_path / "run", decoder=demo.DECODER)
    runs = [str(run)] * (2 if command == "compare" else 1)
    out = [] if command == "provenance" else ["--out", str(tmp_path / "out")]
    res = runner.invoke(app, [*command.split(), *runs, "--decoder", "typo=k", "--decoder",
                              f"run={demo.DECODER}", *out])
    lines = [x for x in res.output.splitlines() if "typo" in x]
    assert lines == ["warning: --decoder typo=k: no run or model folder named typo (found: "
                     "run, m); not used"], res.output
    assert "--decoder run=" not in res.output  # a folder found: no warning


def test_a_decoder_for_no_folder_is_noted_by_the_workbench_and_declare(tmp_path: Path) -> None:
    from careful_engine import browse
    from careful_engine.demo import reference as demo
    from careful_engine.effects.observe import find_runs

    run = _tiny_run(tmp_path / "run", decoder=demo.DECODER)
    notes: list[str] = []
    browse.find_runs([run], parse_decoders(["typo=k"]), notes)
    assert notes == ["--decoder typo=k: no run or model folder named typo (found: run, m); "
                     "not used"]
    _, warnings = find_runs([run], {"typo": "k", "m": demo.DECODER})
    assert [w for w in warnings if "typo" in w] == [
        "--decoder typo=k: no run or model folder named typo (found: m); not used"]


def test_a_synthetic_run_is_marked_where_it_is_ranked_and_compared(tmp_path: Path) -> None:
    """careful demo's flawed run (manifest ``"synthetic": true``) was a plain entry in
    leaderboard, compare and sensitivity: its label is marked, as the workbench marks it."""
    from careful_engine.analysis import compare as cmp
    from careful_engine.demo import reference as demo

    real = _tiny_run(tmp_path / "real", decoder=demo.DECODER)
    fake = _tiny_run(tmp_path / "fake", decoder=demo.DECODER, synthetic=True)
    scored = lb.score_runs([real, fake])
    assert [e.label for e in scored.entries] == ["real", "fake (SYNTHETIC)"]
    assert lb.synthetic_label("fake", True) == "fake" + lb.SYNTHETIC_MARK
    pairing = cmp.pair(cmp.score_pair(real, fake), ["bfcl"])
    assert (pairing.label_a, pairing.label_b) == ("real", "fake (SYNTHETIC)")
    for command in ("leaderboard", "compare"):
        out = tmp_path / command
        res = runner.invoke(app, [command, str(real), str(fake), "-j1", "--out", str(out)])
        assert res.exit_code in (0, 1), res.output
        assert "fake (SYNTHETIC)" in " ".join(res.output.split())
        written = out / ("leaderboard.csv" if command == "leaderboard" else "compare_bfcl.md")
        assert "fake (SYNTHETIC)" in written.read_text(), command


@pytest.mark.parametrize("command", ["leaderboard", "compare", "sensitivity"])
def test_decode_warnings_name_the_entry(tmp_path: Path, command: str) -> None:
    """Two runs of one model folder name: their decoder warnings were labelled by the model
    folder (the same name twice); now by the entry's label, as `careful audit decode` and
    the tables name them."""
    for run in ("v1", "v2"):
        folder = tmp_path / run / "result" / "m" / "multi_turn"
        folder.mkdir(parents=True)
        (folder / f"BFCL_v4_{BASE}_result.json").write_text("".join(
            json.dumps({"id": c.id, "result": "Error during inference: x"}) + "\n"
            for c in bfcl.conversations(BASE)[:3]))
    res = runner.invoke(app, [command, str(tmp_path / "v1"), str(tmp_path / "v2"), "-j1",
                              "--out", str(tmp_path / "out")], env={"COLUMNS": "300"})
    warned = [x for x in res.output.splitlines()
              if x.startswith("warning:") and "inference errors" in x]
    assert [x.split(": ")[1] for x in warned] == ["v1", "v2"], res.output


def test_labels_name_the_run_the_files_belong_to(tmp_path: Path) -> None:
    """A run's entry was named after the path as typed: its model folder, ``multi_turn``,
    ``result`` or a full path that does not exist. Now always after the run folder, however it
    is given, told apart minimally."""
    from careful_engine import browse

    for run in ("a/x", "b/deep/x", "z"):
        _tiny_run(tmp_path / run / "result", decoder=FC)
    x, deep, z = tmp_path / "a/x", tmp_path / "b/deep/x", tmp_path / "z"
    given = [x / "result/m/multi_turn", deep / "result", z / "result/m"]
    assert [r.label for r in browse.find_runs(given)] == ["a/x", "deep/x", "z"]
    scored = lb.score_runs(given)
    assert [e.label for e in scored.entries] == ["a/x", "deep/x", "z"]
    assert lb.label_entries([(x, "m")], [x / "result/m"]) == ["x"]
    assert lb.label_entries([(x / "result", "result")], [x / "result"]) == ["x"]
    # a run folder named as its model folder is not taken for it (bfcl's own layout)
    assert lb.label_entries([(tmp_path / "m", "m")], [tmp_path / "m/result/m"]) == ["m"]
    # the same model folder reached twice: the folders as given (they exist)
    assert lb.label_entries([(x, "m"), (x / "result", "m")], [x / "result/m"] * 2) == [
        str(x), str(x / "result")]
    # compare: a run against itself, or given as its multi_turn folder
    for i, (a, b, want) in enumerate(((f"{x}/", str(x), "A = x, B = x"),
                                      (str(x / "result/m/multi_turn"), str(deep),
                                       "A = a/x, B = deep/x"))):
        out = tmp_path / f"cmp{i}"
        res = runner.invoke(app, ["compare", a, b, "-j1", "--out", str(out)])
        assert res.exit_code in (0, 1), res.output
        assert want in " ".join(res.output.split()), res.output
        assert want in (out / "compare_bfcl.md").read_text()


def test_non_fatal_notes_are_warnings(tmp_path: Path) -> None:
    """A folder given twice was printed as ``error: ...; scored once``: it stops nothing."""
    from careful_engine.demo import reference as demo

    run = _tiny_run(tmp_path / "run", decoder=demo.DECODER)
    res = runner.invoke(app, ["leaderboard", str(run), f"{run}/", "-j1", "--out",
                              str(tmp_path / "out")])
    assert f"warning: {run}: given more than once (as {run} first); scored once" in res.output
    assert "error:" not in res.output


# ---------------------------------------------------------------- ranking


def test_mean_counts_an_absent_category_as_zero(fake_entries: list[lb.Entry]) -> None:
    a, b, c = fake_entries
    assert a.accuracy() == pytest.approx((0.75 + 0.5) / 4)
    assert a.accuracy(None, "safe") == pytest.approx((0.25 + 0.5) / 4)
    assert c.accuracy(MISS_FUNC) is None
    assert c.accuracy() == pytest.approx(0.25 / 4)


def test_ranking_and_rho(fake_entries: list[lb.Entry]) -> None:
    base = lb.ranking(fake_entries, BASE)
    assert base.bfcl_ranks == [1, 2, 3]
    assert base.safe_ranks == [2, 1, 2]
    assert base.rho == pytest.approx(spearman([3, 2, 1], [1, 2, 1]))
    miss = lb.ranking(fake_entries, MISS_FUNC)
    assert miss.labels == ["a", "b"]  # c lacks the category: not ranked there
    mean = lb.ranking(fake_entries)
    assert mean.n == 3


def test_equal_means_share_a_rank() -> None:
    """99, 94, 100 and 100, 93, 100 passes of 200 both average 36.625 % (their float sums
    differ in the last bit): one rank, no rank change, and the same rho as exact values."""
    def passes(*ks: int) -> dict[str, list[tuple[bool, int]]]:
        return {c: [(i < k, 0) for i in range(200)] for c, k in zip(bfcl.CATEGORIES[:len(ks)], ks, strict=True)}

    entries = [_entry("A", passes(99, 94, 100)), _entry("B", passes(100, 93, 100)),
               _entry("C", passes(10, 10, 10))]
    a, b, _ = entries
    assert a.accuracy() == b.accuracy() and a.accuracy(None, "safe") == b.accuracy(None, "safe")
    mean = lb.ranking(entries)
    assert mean.bfcl_ranks == mean.safe_ranks == [1, 1, 3]
    assert mean.rho == pytest.approx(spearman([2, 2, 1], [2, 2, 1]))
    rows = present_lb.leaderboard_reports(entries)[0].json()["rows"]
    assert [(r["entry"], r["BFCL rank"], r["rank change"]) for r in rows] == [
        ("A", 1, 0), ("B", 1, 0), ("C", 3, 0)]
    ranked = {(r["entry"], r["category"]): r for r in present_lb.leaderboard_reports(
        entries)[1].json()["rows"]}
    assert ranked[("A", "base")]["BFCL rank"] == 2 and ranked[("B", "base")]["BFCL rank"] == 1


def test_reports(fake_entries: list[lb.Entry], tmp_path: Path) -> None:
    reports = {r.name: r for r in present_lb.leaderboard_reports(fake_entries)}
    assert set(reports) == {"leaderboard", "leaderboard_categories", "leaderboard_rho",
                            "leaderboard_rules"}
    main = reports["leaderboard"].json()["rows"]
    assert [r["entry"] for r in main] == ["b", "a", "c"]  # by BFCL mean
    assert main[0]["BFCL rank"] == 1 and main[0]["safe rank"] == 1
    rho = {r["scope"]: r for r in reports["leaderboard_rho"].json()["rows"]}
    assert rho["miss_func"]["entries"] == 2
    assert rho["base"]["rho"] == pytest.approx(lb.ranking(fake_entries, BASE).rho)
    rules = {r["entry"]: r for r in reports["leaderboard_rules"].json()["rows"]}
    assert rules["a"]["collateral"] == 2 and rules["b"]["collateral"] == 2
    assert rules["c"]["asked"] == 4
    paths = reports["leaderboard"].write(tmp_path)
    assert {p.suffix for p in paths} == {".md", ".csv", ".json"}
    md = reports["leaderboard_rho"].markdown()
    assert "| base | 3 |" in md


def test_terminal_layout_fits_80_columns(fake_entries: list[lb.Entry]) -> None:
    long = _entry("a-rather-long-run-folder-name-v0.11.0", {
        c: [(True, 0), (False, 3)] for c in bfcl.CATEGORIES})
    console = Console(width=200, record=True)
    for table in present_lb.leaderboard_terminal([*fake_entries, long]):
        console.print(table)
    widths = [len(line.rstrip()) for line in console.export_text().splitlines()]
    assert max(widths) <= 80


def test_compare_of_fake_scores(fake_entries: list[lb.Entry]) -> None:
    a, b, c = fake_entries
    cmp = lb.compare(a.score, b.score, "bfcl")
    assert list(cmp.categories) == [BASE, MISS_FUNC]
    base = cmp.categories[BASE]
    assert (len(base.gained), len(base.lost)) == (0, 1)
    overall = cmp.overall
    assert (overall.n, len(overall.gained), len(overall.lost)) == (6, 1, 1)
    safe = lb.compare(a.score, b.score, "safe").categories[BASE]
    assert (len(safe.gained), len(safe.lost)) == (2, 1)
    only = lb.compare(a.score, c.score)
    assert only.only_a == [MISS_FUNC]
    rep = present_cmp.compare_report(cmp, "A", "B")
    assert rep.rows[-1][0] == "overall"
    assert "1.000" in rep.markdown()  # p shown with three decimals


def test_compare_decisions_are_data(fake_entries: list[lb.Entry]) -> None:
    """careful_engine.analysis.compare: the --score kinds, the labels, strict success dropped
    without the protocol, and nothing in common, without the CLI."""
    from careful_engine.analysis import compare as cmp

    assert cmp.parse_scores(None) == ["bfcl", "safe"]
    assert cmp.parse_scores(["safe", "both", "strict"]) == ["safe", "bfcl", "strict"]
    with pytest.raises(ValueError):
        cmp.parse_scores(["loose"])
    a, b, c = fake_entries
    scored = lb.Scored([a, b], [], [], [])
    pairing = cmp.pair(scored, ["bfcl", "strict"])
    assert pairing.kinds == ["bfcl"] and pairing.not_strict == ["a", "b"]
    assert (pairing.label_a, pairing.label_b) == ("a", "b")
    with pytest.raises(cmp.NotComparable) as e:
        cmp.pair(scored, ["strict"])
    assert e.value.not_strict == ["a", "b"]
    twin = lb.Entry("a", Path("/other/a"), b.score)
    assert cmp.side_labels(a, twin) == ("runs/a", "other/a")
    no_base = _entry("d", {"multi_turn_long_context": [(True, 0)]})
    with pytest.raises(cmp.NotComparable, match="no category in common"):
        cmp.pair(lb.Scored([c, no_base], [], [], []), ["bfcl"])
    gate = cmp.gate(cmp.pair(scored, ["bfcl"]), fail_on_regression=True, alpha=0.05,
                    limits=[])
    assert gate.evaluated and gate.passed  # one lost, one gained: no regression
    gate = cmp.gate(pairing, fail_on_regression=True, alpha=0.05, limits=[])
    assert [c.name for c in gate.failed] == ["regression strict overall"]  # asked, not applied
    assert "not applicable" in gate.failed[0].message and gate.options["scores"][-1] == "strict"


# ---------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def real(shared_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = [shared_runs / r for r in RUNS]
    if not all(r.is_dir() for r in runs):
        pytest.skip("a shared run is missing")
    out = tmp_path_factory.mktemp("lb")
    res = runner.invoke(app, ["leaderboard", *map(str, runs), "--decoder", FC, "--out",
                              str(out)], catch_exceptions=False)
    scored = lb.score_runs(runs, decoders=parse_decoders([FC]), effects=load_effects())
    return {"res": res, "out": out, "scored": scored}


def test_leaderboard_cli_on_real_runs(real: dict) -> None:
    res = real["res"]
    assert res.exit_code == 1, res.output  # the gpt-oss runs log some inference errors
    rows = json.loads((real["out"] / "leaderboard.json").read_text())["rows"]
    by_label = {e.label: e for e in real["scored"].entries}
    assert {r["entry"] for r in rows} == set(by_label) == set(RUNS)
    for r in rows:
        e = by_label[r["entry"]]
        assert r["mean BFCL %"] == pytest.approx(100 * e.accuracy(), abs=0.051)
        assert r["mean safe %"] == pytest.approx(100 * e.accuracy(None, "safe"), abs=0.051)
    assert [r["BFCL rank"] for r in rows] == [1, 2, 3]
    rho = {r["scope"]: r["rho"] for r in
           json.loads((real["out"] / "leaderboard_rho.json").read_text())["rows"]}
    expected = lb.ranking(real["scored"].entries).rho
    assert rho["mean"] == pytest.approx(expected)
    assert rho["long_context"] is None  # only glyphh has it
    assert "Spearman" in res.output
    for name in ("leaderboard_categories", "leaderboard_rules"):
        assert (real["out"] / f"{name}.csv").exists()


def test_unregistered_model_without_decoder_is_reported(shared_runs: Path,
                                                        tmp_path: Path) -> None:
    run = shared_runs / RUNS[2]
    if not run.is_dir():
        pytest.skip("glyphh run missing")
    res = runner.invoke(app, ["leaderboard", str(run), "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "--decoder" in res.output


def test_missing_run_folder(tmp_path: Path) -> None:
    res = runner.invoke(app, ["leaderboard", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "does not exist" in res.output



def test_beyond_calls_by_kind_add_up_to_the_surplus_calls(shared_runs, tmp_path) -> None:
    """Every call beyond the reference is in one of the rule tables' kind columns (unknown
    included), so per conversation the columns add up to the surplus calls (the calls behind
    the surplus shares); on a real run, where some calls name no declared function."""
    from careful_engine.present.tables import RULE_COLUMNS

    kinds = [k for _, k in RULE_COLUMNS if k.startswith("beyond_")]
    assert sorted(kinds) == ["beyond_destructive", "beyond_read", "beyond_unknown",
                             "beyond_write"]
    res = runner.invoke(app, ["score", str(shared_runs / "xlam-2-8b-fc-r"), "--out",
                              str(tmp_path / "out"), "-q"])
    assert res.exit_code in (0, 1), res.output
    rows = [json.loads(x) for x in (tmp_path / "out" / "conversations.jsonl").read_text()
            .splitlines()]
    assert sum(r["rules"]["beyond_unknown"] for r in rows if r.get("rules") is not None) > 0
    for r in rows:
        if r.get("rules") is not None:
            assert sum(r["rules"][k] for k in kinds) == r["surplus_calls"], r["id"]
            # the steps behind steps/conv are every logged step, those of turns the pinned
            # dataset does not have included (33 of xlam's conversations log one more turn)
            assert r["model_steps"] == sum(r["steps"].values()), r["id"]


def test_a_folder_given_twice_is_one_entry(tmp_path):
    """``leaderboard d/R d/R/`` (or a link to it) made two identical entries, both ranked 1,
    and 'sensitivity' three tables for one run: a repeat is noted and scored once."""
    import os

    from careful_engine.analysis.leaderboard import score_runs

    run = tmp_path / "R"
    run.mkdir()
    os.symlink(run, tmp_path / "link")
    scored = score_runs([run, Path(str(run) + "/"), tmp_path / "link"])
    assert sum("given more than once" in u for u in scored.notes) == 2
    assert scored.unusable == [f"{run}: no multi-turn result files "
                               "(BFCL_v3/v4_multi_turn_*_result.json)"]


def test_entry_tables_get_distinct_file_names():
    """Entries 'T/m a' and 'T/m_a' wrote one sensitivity_T_m_a file, the second over the
    first."""
    from careful_engine.present.sensitivity import entry_names

    names = entry_names(["T/m a", "T/m_a", "T/other"])
    assert len(set(names)) == 3 and names[2] == "sensitivity_entry3_T_other"


def test_a_parent_of_runs_of_one_model_name_is_ranked_as_its_runs(tmp_path: Path) -> None:
    """``leaderboard PARENT`` over runs whose model folders share a name ranks every run (one
    of them was lost: a model's files are taken once per category), with one warning."""
    from careful_engine.demo import reference as demo
    from tests.workbench_support import careless_entry, write_run

    ids = ["multi_turn_base_0", "multi_turn_base_1"]
    write_run(tmp_path / "runs" / "one", "m",
              [demo.reference_entry(bfcl.conversation(i)) for i in ids])
    write_run(tmp_path / "runs" / "two", "m", [careless_entry(i) for i in ids])
    res = runner.invoke(app, ["leaderboard", str(tmp_path / "runs"), "-j1", "-o",
                              str(tmp_path / "out")])
    assert res.exit_code in (0, 1), res.output
    rows = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["rows"]
    assert sorted(r["entry"] for r in rows) == ["one", "two"]
    warning = " ".join(res.stderr.split())
    assert "holds 2 runs, some with a model folder of the same name (m)" in warning
    assert [r.name for r in lb.split_runs(tmp_path / "runs" / "one", [])] == ["one"]


def test_a_folder_holding_the_same_model_folders_as_an_earlier_one_is_a_repeat(
        tmp_path: Path) -> None:
    """``leaderboard R R/M`` (or ``R R/result``): the same model folders twice were ranked as
    two entries of one run; now a repeat, noted, scored once."""
    from careful_engine.demo import reference as demo
    from tests.workbench_support import write_run

    run = write_run(tmp_path / "r", "m", [demo.reference_entry(bfcl.conversation(i))
                                          for i in ("multi_turn_base_0", "multi_turn_base_1")])
    res = runner.invoke(app, ["leaderboard", str(run), str(run / "m"), "-j1", "-o",
                              str(tmp_path / "out")])
    assert res.exit_code in (0, 1), res.output
    rows = json.loads((tmp_path / "out" / "leaderboard.json").read_text())["rows"]
    assert [r["entry"] for r in rows] == ["r"]
    said = " ".join(res.output.split())
    assert f"{run / 'm'}: given more than once (as {run} first, the same model folders)" in said
    assert "(1 entry)" in said
