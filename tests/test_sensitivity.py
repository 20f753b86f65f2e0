"""careful_engine.analysis.sensitivity and ``careful sensitivity``: one replay, many settings."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.analysis import sensitivity as sens
from careful_engine.core import bfcl
from careful_engine.core.trajectory import Verdict
from careful_engine.effects import boundary as boundaries
from careful_engine.present import sensitivity as show
from careful_engine.scoring import score as scoring
from careful_engine.scoring.detector import DETECTORS
from careful_engine.scoring.score import (
    CategoryScore,
    ConversationResult,
    ModelScore,
    load_effects,
    score_run,
)

_load()
runner = CliRunner()
FC = "gpt-4o-2024-11-20-FC"
XLAM = "xlam-2-8b-fc-r"  # the one real run whose model asks questions
GLYPHH = "glyphh-ada-1.1"


def _boundary_file(tmp: Path, name: str, keep: set[str] | None) -> Path:
    """paper-final restricted to ``keep`` (None: all), saved as a boundary file."""
    final = boundaries.load()
    destructive = {k: v for k, v in final.destructive.items() if keep is None or k in keep}
    b = boundaries.Boundary(name, destructive, decided_by=("test",), method="test")
    return b.save(tmp / f"{name}.json")


# ---------------------------------------------------------------- settings


def test_settings_vary_one_thing_at_a_time(tmp_path: Path) -> None:
    extra = str(_boundary_file(tmp_path, "tiny", {"rm"}))
    settings = sens.settings_for([extra])
    default = settings[0]
    assert default == sens.Setting("paper-final", "strict")
    labels = [s.label(default) for s in settings]
    assert labels[0] == "default"
    assert set(DETECTORS) - {"strict"} <= set(labels)
    assert "tiny" in labels
    for name in sens.available_boundaries():
        assert name in labels or name == "paper-final"
    assert len(labels) == len(set(labels))
    grid = sens.settings_for([extra], ["strict", "loose"], grid=True)
    assert {s.label(default) for s in grid} >= {"default", "loose", "tiny", "tiny/loose"}


def test_a_boundary_someone_left_in_the_folder_is_compared_only_when_given(
        tmp_path: Path, monkeypatch) -> None:
    """Sensitivity compares the shipped boundaries (the paper's), not whatever else lies in
    declarations/boundary/ (a round's adjudicated R1-any, written there by hand or by an
    older `careful adjudicate`); that one is compared when --boundary gives it."""
    from careful_engine.annotation.paper_labels import BOUNDARIES

    folder = tmp_path / "boundary"
    folder.mkdir()
    for name in BOUNDARIES:
        (folder / f"{name}.json").write_bytes(
            (boundaries.boundary_dir() / f"{name}.json").read_bytes())
    extra = _boundary_file(folder, "R1-any", {"rm"})
    monkeypatch.setattr(boundaries, "boundary_dir", lambda: folder)
    default = sens.Setting("paper-final", "strict")
    labels = {s.label(default) for s in sens.settings_for()}
    assert "R1-any" not in labels
    assert set(BOUNDARIES) - {"paper-final"} <= labels
    assert "R1-any" in {s.label(default) for s in sens.settings_for([str(extra)])}
    assert "R1-any" in {s.label(default) for s in sens.settings_for(["R1-any"])}


def test_the_shipped_boundaries_are_the_papers_and_all_there() -> None:
    from careful_engine.annotation.paper_labels import BOUNDARIES

    assert set(boundaries.SHIPPED) == set(BOUNDARIES)
    assert sens.available_boundaries() == sorted(BOUNDARIES)
    for name in boundaries.SHIPPED:
        assert boundaries.load(name).name == name


# ---------------------------------------------------------------- re-evaluation on kept traces


@pytest.fixture(scope="module")
def xlam(shared_runs: Path) -> scoring.RunScore:
    run = shared_runs / XLAM
    if not run.is_dir():
        pytest.skip(f"{XLAM} is missing")
    return score_run(run, effects=load_effects(), keep_traces=True)


def test_default_setting_reproduces_score_run(xlam: scoring.RunScore, tmp_path: Path) -> None:
    ms = xlam.scores[0]
    default = sens.Setting("paper-final", "strict")
    res = sens.rescore_model(ms, [default], {"paper-final": load_effects()})[default]
    for c, cs in ms.categories.items():
        assert res.bfcl[c] == cs.accuracy
        assert res.safe[c] == pytest.approx(cs.safe_accuracy)
        assert res.strict[c] is None and cs.strict_accuracy is None  # no protocol
    totals = sum((cs.rule_totals() for cs in ms.categories.values()), start=type(res.counts)())
    assert +res.counts == +totals


def test_boundary_and_detector_move_only_their_counts(xlam: scoring.RunScore,
                                                      tmp_path: Path) -> None:
    ms = xlam.scores[0]
    empty = str(_boundary_file(tmp_path, "empty", set()))
    settings = [sens.Setting("paper-final", "strict"), sens.Setting(empty, "strict"),
                sens.Setting("paper-final", "loose"), sens.Setting("paper-final", "last")]
    effects = {"paper-final": load_effects(), empty: load_effects(empty)}
    out = sens.rescore_model(ms, settings, effects)
    base, no_destructive, loose, last = (out[s] for s in settings)
    # no destructive function: no collateral call, and safe = BFCL unless a duplicate write
    assert no_destructive.counts["collateral"] == 0
    assert no_destructive.counts["destructive_calls"] == 0
    for c in ms.categories:
        assert base.safe[c] <= no_destructive.safe[c] <= no_destructive.bfcl[c]
    assert no_destructive.counts["asked"] == base.counts["asked"]
    # detectors change the asked counts only
    assert loose.counts["collateral"] == base.counts["collateral"]
    assert loose.safe == base.safe
    assert last.counts["asked"] <= base.counts["asked"] <= loose.counts["asked"]


def test_traces_are_needed() -> None:
    """Re-evaluating needs the kept traces; a missing entry or one that could not be scored
    (no trace) simply fails."""
    results = [ConversationResult("m", "multi_turn_base", "multi_turn_base_0",
                                  Verdict(False, scoring.MISSING)),
               ConversationResult("m", "multi_turn_base", "multi_turn_base_2",
                                  Verdict(False, scoring.UNSCORABLE, "could not be scored"))]
    ms = ModelScore("m", None, {"multi_turn_base": CategoryScore("m", "multi_turn_base",
                                                                 results)})
    default = sens.Setting("paper-final", "strict")
    effects = {"paper-final": load_effects()}
    assert sens.rescore_model(ms, [default], effects)[default].safe["multi_turn_base"] == 0
    results.append(ConversationResult("m", "multi_turn_base", "multi_turn_base_1",
                                      Verdict(True)))
    with pytest.raises(ValueError, match="keep_traces"):
        sens.rescore_model(ms, [default], effects)



@pytest.mark.parametrize("jobs", [1, 2])
def test_no_trace_is_kept_or_sent_back(jobs: int, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each conversation is evaluated under every setting where it is replayed (in the
    workers, with jobs): what comes back from scoring holds its figures, never its trace (a
    trace with its states is ~100 KB; sent back from the workers, they made --jobs 2 slower
    than --jobs 1), and the result is the same for any number of jobs."""
    from careful_engine.core import parallel
    from careful_engine.demo import reference as demo
    from tests.workbench_support import write_run

    ids = ["multi_turn_base_0", "multi_turn_base_1"]
    runs = [write_run(tmp_path / name, "reference",
                      [demo.reference_entry(bfcl.conversation(i)) for i in ids])
            for name in ("one", "two", "three")]
    back: list = []
    real = parallel.run_ordered

    def spy(*a, **kw):
        out = real(*a, **kw)  # (as the parts come back: the analysis frees them later)
        back.extend((r.verdict.error_type, r.trace, r.digest) for part in out
                    for r in part.results)
        return out

    monkeypatch.setattr(parallel, "run_ordered", spy)
    settings = sens.settings_for(variants=False)[:2]
    effects, sizes = sens.effects_for(settings, load_effects)
    scored, result = sens.sensitivity(runs, settings, effects, sizes, jobs=jobs)
    assert result is not None and result.labels == ["one", "two", "three"]
    replayed = [digest for error, _, digest in back if error != scoring.MISSING]
    assert len(back) == 3 * 200 and len(replayed) == 3 * len(ids)
    assert all(trace is None for _, trace, _ in back)
    assert all(isinstance(digest, sens.Figures) for digest in replayed)
    assert all(r.trace is None and r.digest is None for e in scored.entries
               for cs in e.score.categories.values() for r in cs.results)
    # the same figures as evaluating the traces here
    kept = score_run(runs[0], effects=effects[settings[0].boundary], keep_traces=True)
    expected = sens.rescore_model(kept.scores[0], settings, effects)
    assert [result.rows[s][0] for s in settings] == [expected[s] for s in settings]


# ---------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def cli(shared_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    runs = [shared_runs / XLAM, shared_runs / GLYPHH]
    if not all(r.is_dir() for r in runs):
        pytest.skip("a shared run is missing")
    tmp = tmp_path_factory.mktemp("sens")
    tiny = _boundary_file(tmp, "tiny", {"rm", "send_message"})
    replays = {"n": 0}
    real_replay = scoring.replay

    def counting(*a, **k):
        replays["n"] += 1
        return real_replay(*a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(scoring, "replay", counting)
    try:
        res = runner.invoke(app, ["sensitivity", *map(str, runs), "--decoder",
                                  f"{GLYPHH}={FC}", "--boundary", str(tiny), "--out",
                                  str(tmp / "out"), "--jobs", "1"],  # replays counted here
                         catch_exceptions=False)
    finally:
        mp.undo()
    return {"res": res, "out": tmp / "out", "replays": replays["n"]}


def test_each_run_is_replayed_once(cli: dict) -> None:
    assert cli["res"].exit_code in (0, 1), cli["res"].output
    # xLAM: 3 categories, glyphh: 4; 200 conversations each, whatever the settings
    n_settings = len(json.loads((cli["out"] / "sensitivity_rho.json").read_text())["rows"])
    assert n_settings >= 5
    assert 0 < cli["replays"] <= 7 * 200


def test_rho_and_counts_files(cli: dict) -> None:
    rho = json.loads((cli["out"] / "sensitivity_rho.json").read_text())["rows"]
    by = {r["setting"]: r for r in rho}
    assert {"default", "qmark", "last", "loose", "tiny"} <= set(by)
    assert by["tiny"]["destructive fns"] == 2
    assert by["default"]["rho safe vs default"] == pytest.approx(1.0)
    counts = json.loads((cli["out"] / "sensitivity_counts.json").read_text())["rows"]
    default = {r["entry"]: r for r in counts if r["setting"] == "default"}
    assert set(default) == {XLAM, GLYPHH}
    for r in counts:
        d = default[r["entry"]]
        assert r["Δ collateral"] == r["collateral"] - d["collateral"]
        assert r["Δ asked"] == r["asked"] - d["asked"]
        if r["setting"] == "tiny":
            assert r["collateral"] <= d["collateral"]
            assert r["mean safe %"] >= d["mean safe %"]
        if r["setting"] in ("qmark", "last", "loose"):
            assert r["collateral"] == d["collateral"]
    xlam_last = next(r for r in counts if r["entry"] == XLAM and r["setting"] == "last")
    assert xlam_last["asked"] <= default[XLAM]["asked"]


def test_output_names_the_settings(cli: dict) -> None:
    out = cli["res"].output
    assert "Spearman" in out and "tiny" in out and "loose" in out


def test_terminal_width_of_sensitivity_tables() -> None:
    s0 = sens.Setting("paper-final", "strict")
    settings = [s0, sens.Setting("paper-final", "loose"),
                sens.Setting("a-long-annotator-boundary-name", "strict")]
    rows = {s: [sens.Rescored(s, "m", {"multi_turn_base": 0.5}, {"multi_turn_base": 0.4},
                              {"multi_turn_base": 0.1}, Counter(collateral=1234))
                for _ in range(2)] for s in settings}
    result = sens.Sensitivity(settings, ["a-rather-long-run-folder-name-v0.11.0", "b"], rows)
    console = Console(width=200, record=True)
    console.print(show.rho_terminal(result))
    console.print(show.moves_terminal(result))
    assert max(len(x.rstrip()) for x in console.export_text().splitlines()) <= 80


def test_every_sensitivity_table_is_whole_at_80_columns() -> None:
    """Four categories at 100.0, four-digit counts and changes, every setting and script: an
    80-column terminal shows every column and the whole caption of each table (the entry's
    table lost its ask column and its caption's ends: "nothing to repla", "coll/col")."""
    from careful_engine.analysis.reexamine import Reexamination, ScriptSummary
    from careful_engine.protocol.user import SCRIPTS
    from careful_engine.scoring.rules import NOT_REPLAYED, REPLAYED

    from .terminal_fit import cut_at_80

    settings = sens.settings_for()
    full, none = dict.fromkeys(bfcl.CATEGORIES, 1.0), dict.fromkeys(bfcl.CATEGORIES, 0.0)
    many = Counter({k: 9999 for _, k in show.COUNTS} | {REPLAYED: 799, NOT_REPLAYED: 1})
    rows = {s: [sens.Rescored(s, "m", full, full if i else none, dict.fromkeys(full),
                              many if i else Counter({REPLAYED: 800}))] * 2
            for i, s in enumerate(settings)}
    labels = ["a-rather-long-run-folder-name-v0.11.0", "xlam-2-8b-fc-r"]
    script = [ScriptSummary(name, 9999, 9999, 9999, ["x"] * 800,
                            Counter(bfcl=800, safe=800, strict=800)) for name in SCRIPTS]
    result = sens.Sensitivity(settings, labels, rows, dict.fromkeys(
        [s.boundary for s in settings], 24), [Reexamination("m", "paper-final", [], script)] * 2)
    tables = [show.entry_terminal(result, 0), show.rho_terminal(result),
              show.moves_terminal(result), show.reexamination_terminal(result)]
    assert all(tables)
    assert {str(c.header) for c in tables[0].columns} >= {"lc", "ask"}
    problems = [f"{t.title}: {p}" for t in tables for p in cut_at_80(t)]
    assert not problems, "\n".join(problems)


def test_entry_table_fits_and_variants_move_only_safe(xlam: scoring.RunScore) -> None:
    """One table per entry: every setting, including the safe-rule variants, which read the
    same counts and can only raise the safe score."""
    ms = xlam.scores[0]
    settings = sens.settings_for()
    effects = {s.boundary: load_effects(s.boundary) for s in settings}
    out = sens.rescore_model(ms, settings, effects)
    default = settings[0]
    labels = {s.label(default): s for s in settings}
    assert {"coll effective", "dups visible", "coll effective/dups visible"} <= set(labels)
    eff = out[labels["coll effective"]]
    assert +eff.counts == +out[default].counts
    assert eff.mean("safe") >= out[default].mean("safe")
    assert eff.counts["collateral_effective"] < eff.counts["collateral"]
    result = sens.Sensitivity(settings, ["a-rather-long-run-folder-name-v0.11.0"],
                              {s: [out[s]] for s in settings})
    rep = show.entry_report(result, 0)
    assert [r[0] for r in rep.rows] == [s.label(default) for s in settings]
    console = Console(width=200, record=True)
    console.print(show.entry_terminal(result, 0))
    assert max(len(x.rstrip()) for x in console.export_text().splitlines()) <= 80


def test_changes_are_the_differences_of_the_shown_figures() -> None:
    """26.24 % and 27.875 % are shown as 26.2 and 27.9: the change beside them is +1.7 (the
    unrounded difference, 1.635, showed as +1.6); 26.25 % shows as 26.3 (half up)."""
    from careful_engine.core.figures import shown
    from careful_engine.present.report import pct, pct_change

    assert [shown(pct(x)) for x in (0.2624, 0.27875, 0.2625)] == [26.2, 27.9, 26.3]
    assert pct_change(0.27875, 0.2624) == 1.7
    assert pct_change(0.2624, 0.27875) == -1.7 and pct_change(None, 0.5) is None


def test_help_says_no_trace_is_kept() -> None:
    """Since each conversation is evaluated under every setting where it is replayed, no
    trace is kept: the help said the rules were "re-evaluated on the kept traces"."""
    res = runner.invoke(app, ["sensitivity", "--help"], terminal_width=200)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert "kept traces" not in text
    assert "evaluated under every setting where it is replayed" in text and "no trace" in text


def test_inference_errors_add_no_counts(tmp_path: Path) -> None:
    """A conversation with nothing replayed (an inference error) adds no rule count under any
    setting, and every table says how many conversations its counts are over: they were
    zeros, so an entry of inference errors read as a flawless one (collateral 0)."""
    from careful_engine.scoring.rules import coverage, measurable

    from .perturb import inference_errors, write_run

    some = inference_errors(write_run(tmp_path / "some", dict.fromkeys(range(10),
                                                                       "extra_write")), 10)
    every = inference_errors(write_run(tmp_path / "every", {}), 0)
    default = sens.Setting("paper-final", "strict")
    settings = [default, sens.Setting("paper-final", "loose")]
    effects = {"paper-final": load_effects()}
    scored, result = sens.sensitivity([some, every], settings, effects, {"paper-final": 24})
    assert result is not None and result.labels == ["some", "every"]
    n = len(bfcl.conversations("multi_turn_base"))
    for s in settings:
        a, b = result.rows[s]
        assert coverage(a.counts) == (10, n) and a.counts["collateral"] > 0
        assert coverage(b.counts) == (0, n) and not measurable(b.counts)
    # the same from kept traces (no Digest), as score_run's rule totals
    kept = score_run(some, effects=load_effects(), keep_traces=True)
    again = sens.rescore_model(kept.scores[0], [default], effects)[default]
    assert +again.counts == +result.rows[default][0].counts
    assert +again.counts == +kept.scores[0].categories["multi_turn_base"].rule_totals()
    rep = show.counts_report(result)
    rows = {r[0]: dict(zip(rep.columns, r, strict=True)) for r in rep.rows
            if r[1] == "default"}
    assert (rows["some"]["conversations"], rows["some"]["replayed"]) == (n, 10)
    assert rows["every"]["replayed"] == 0 and rows["every"]["collateral"] is None
    caption = show.entry_report(result, 1).caption
    assert f"0 of {n} conversations replayed" in caption
    assert "budget-stopped" in " ".join(caption.split()), caption
    console = Console(width=80, record=True)
    console.print(show.moves_terminal(result))
    assert f"every (0/{n} replayed)" in console.export_text()


def test_counts_moved_are_those_the_setting_counts() -> None:
    """The moves table's dupW column showed every duplicate write under ``dups visible`` too
    (and coll every attempted collateral call under ``coll effective``), where the setting's
    safe verdict counts only the visible (effective) ones. Its columns now show, per setting,
    the count its safe verdict reads, with the change against the default's; the counts
    table's files give the same figures (collateral / duplicates counted)."""
    from careful_engine.scoring.rules import REPLAYED

    default = sens.Setting("paper-final", "strict")
    settings = [default, sens.Setting("paper-final", "strict", "effective", "all"),
                sens.Setting("paper-final", "strict", "attempted", "visible")]
    counts = Counter({"collateral": 5, "collateral_effective": 2, "duplicate_writes": 7,
                      "duplicate_writes_visible": 3, "asked": 1, REPLAYED: 10})
    base = {"multi_turn_base": 0.5}
    rows = {s: [sens.Rescored(s, "m", base, base, {"multi_turn_base": None}, Counter(counts))]
            for s in settings}
    result = sens.Sensitivity(settings, ["m"], rows, {"paper-final": 24})
    table = show.moves_terminal(result)
    cells = {str(c.header): [str(x) for x in c._cells] for c in table.columns}
    shown = {label.strip(): (coll, dup) for label, coll, dup in
             zip(cells["entry / setting"], cells["coll*"], cells["dup*"], strict=True)}
    flat = {k: tuple(" ".join(x.split()) for x in v) for k, v in shown.items()
            if k != "m (10/10 replayed)"}  # (the entry's own row)
    assert flat["default"] == ("5", "7")
    assert flat["coll effective"] == ("2 (-3)", "7")
    assert flat["dups visible"] == ("5", "3 (-4)")
    rep = show.counts_report(result)
    written = {r["setting"]: r for r in rep.json()["rows"]}
    for label, (coll, dup) in flat.items():
        r = written[label]
        for head, cell in (("collateral counted", coll), ("duplicates counted", dup)):
            change = r[f"Δ {head}"]
            assert cell == f"{r[head]}" + (f" ({change:+d})" if change else ""), (label, head)
    # the plain counts stay what their columns say, under every setting
    assert all((r["dup. writes"], r["dup. visible"]) == (7, 3) for r in written.values())
    assert "duplicates counted" in rep.csv().splitlines()[0]


def test_entry_tables_never_overwrite_the_summary_tables(tmp_path: Path) -> None:
    """Runs named ``rho`` and ``counts`` wrote their tables as sensitivity_rho and
    sensitivity_counts, over the summary tables (the terminal listed sensitivity_rho twice);
    entries whose labels slug alike, or alike but for a number, overwrote one another."""
    from careful_engine.demo import reference as demo
    from tests.workbench_support import write_run

    names = show.entry_names(["a b", "a_b", "a_b_2", "A_b", "rho", "counts", "script"])
    assert len({n.lower() for n in names}) == len(names)
    assert not {"sensitivity_rho", "sensitivity_counts", "sensitivity_script"} & set(names)

    entry = [demo.reference_entry(bfcl.conversation("multi_turn_base_0"))]
    runs = [write_run(tmp_path / "coll" / name, "m", entry) for name in ("rho", "counts")]
    out = tmp_path / "out"
    res = runner.invoke(app, ["sensitivity", *map(str, runs), "--detector", "strict",
                              "-o", str(out), "-j1"], catch_exceptions=False)
    assert res.exit_code in (0, 1), res.output
    rho = json.loads((out / "sensitivity_rho.json").read_text())["rows"]
    assert rho and all("rho mean" in r for r in rho)
    counts = json.loads((out / "sensitivity_counts.json").read_text())["rows"]
    assert {r["entry"] for r in counts} == {"rho", "counts"}
    assert (out / "sensitivity_rho.csv").read_text().startswith("setting,boundary,")
    written = " ".join(res.output.split()).split("written to")[1]
    assert written.count("sensitivity_rho") == 1 and "sensitivity_entry1_rho" in written


def test_equal_means_are_equal_under_every_setting() -> None:
    """99, 94, 100 and 100, 93, 100 passes of 200 average 36.625 % both (their float sums
    differ in the last bit): equal means, so the rankings and rho treat them as a tie."""
    s = sens.Setting("paper-final", "strict")

    def row(ks: tuple[int, ...], safe: tuple[int, ...] | None = None) -> sens.Rescored:
        def shares(counts: tuple[int, ...]) -> dict[str, float]:
            return {c: k / 200 for c, k in zip(bfcl.CATEGORIES[:len(counts)], counts,
                                                 strict=True)}
        return sens.Rescored(s, "m", shares(ks), shares(safe or ks), dict.fromkeys(shares(ks)))

    a, b = row((99, 94, 100), (98, 94, 100)), row((100, 93, 100))
    assert a.mean("bfcl") == b.mean("bfcl")
    # BFCL ties a and b; safe puts b first. With the tie lost to float noise (b's sum is the
    # larger) the BFCL ranking was b, a, c, as the safe one: rho 1. Tied, it is less than 1.
    result = sens.Sensitivity([s], ["a", "b", "c"], {s: [a, b, row((10, 10, 10))]})
    assert result.rho(s) < 1
