"""careful_engine.scoring.stats and ``careful compare`` (the paper's Table 5 paired columns)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest, spearmanr
from typer.testing import CliRunner

from careful_cli import _load, app
from careful_engine.scoring.stats import mcnemar_p, paired, ranks, spearman

_load()
runner = CliRunner()
GPT_OSS = ("gpt-oss-120b-vllm-v0.10.2", "gpt-oss-120b-vllm-v0.11.0")
FC = "gpt-4o-2024-11-20-FC"


# ---------------------------------------------------------------- McNemar


def test_no_discordant_pair_gives_1() -> None:
    assert mcnemar_p(0, 0) == 1.0


@pytest.mark.parametrize(
    ("gained", "lost", "paper_p"),
    [(84, 49, 0.003), (38, 23, 0.072), (8, 14, 0.29), (11, 4, 0.12), (14, 5, 0.064),
     (17, 22, 0.52), (71, 74, 0.87), (9, 9, 1.00)],
)
def test_paper_table5_p_values(gained: int, lost: int, paper_p: float) -> None:
    """The p values printed in the paper's Table 5 for its gained/lost counts."""
    assert mcnemar_p(gained, lost) == pytest.approx(paper_p, abs=0.006)


@given(st.integers(0, 300), st.integers(0, 300))
def test_mcnemar_is_the_exact_binomial_test(b: int, c: int) -> None:
    p = mcnemar_p(b, c)
    assert 0.0 <= p <= 1.0
    assert p == mcnemar_p(c, b)
    if b + c:
        assert p == pytest.approx(binomtest(min(b, c), b + c, 0.5).pvalue)


def test_negative_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        mcnemar_p(-1, 3)


def test_paired_counts_gained_and_lost_on_shared_ids() -> None:
    a = {"x": True, "y": False, "z": False, "w": True, "only_a": True}
    b = {"x": True, "y": True, "z": False, "w": False, "only_b": False}
    p = paired(a, b)
    assert (p.n, p.passes_a, p.passes_b) == (4, 2, 2)
    assert p.gained == ["y"] and p.lost == ["w"]
    assert p.p == 1.0
    assert p.to_json()["gained_ids"] == ["y"]


# ---------------------------------------------------------------- Spearman and ranks


def test_spearman_edge_cases() -> None:
    assert spearman([], []) is None
    assert spearman([1.0], [2.0]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # constant ranking
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        spearman([1, 2], [1])


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=2, max_size=12))
def test_spearman_matches_scipy_with_ties(pairs: list[tuple[int, int]]) -> None:
    x, y = [a for a, _ in pairs], [b for _, b in pairs]
    rho = spearman(x, y)
    if len(set(x)) < 2 or len(set(y)) < 2:
        assert rho is None
    else:
        assert rho == pytest.approx(spearmanr(x, y).statistic)


_PROBE = """
import os, sys
from careful_engine.scoring import stats
stats.prefetch()
print(os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_NUM_THREADS"),
      "numpy" in sys.modules)
"""


@pytest.mark.parametrize(("preset", "after"), [(None, "None None True"),
                                               ("3", "3 None True")])
def test_scipy_import_leaves_the_environment_as_it_was(preset: str | None, after: str) -> None:
    """The single-threaded BLAS is for scipy's own import: the variables set for it are
    removed afterwards, and a thread count the user set is neither overwritten nor removed."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    if preset is not None:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout.strip()
    assert out == after


def test_ranks_best_first_ties_share_the_better_rank() -> None:
    assert ranks([0.3, 0.1, 0.3, 0.2]) == [1, 4, 1, 3]
    assert ranks([]) == []


# ---------------------------------------------------------------- careful compare on real runs


@pytest.fixture(scope="module")
def compared(shared_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """``careful compare`` on the two gpt-oss-120b runs, and ``careful score`` on each."""
    for name in GPT_OSS:
        if not (shared_runs / name).is_dir():
            pytest.skip(f"{name} is not in {shared_runs}")
    tmp = tmp_path_factory.mktemp("compare")
    a, b = (shared_runs / n for n in GPT_OSS)
    res = runner.invoke(app, ["compare", str(a), str(b), "--decoder", FC, "--out",
                              str(tmp / "cmp"), "--score", "bfcl", "--score", "safe",
                              "--score", "strict"], catch_exceptions=False)
    lines = {}
    for name, run in zip("ab", (a, b), strict=True):
        out = tmp / f"score_{name}"
        r = runner.invoke(app, ["score", str(run), "--decoder", FC, "--out", str(out), "-q"],
                          catch_exceptions=False)
        assert r.exit_code in (0, 1), r.output
        lines[name] = [json.loads(x) for x in (out / "conversations.jsonl").read_text()
                       .splitlines()]
    return {"result": res, "out": tmp / "cmp", "lines": lines}


def _independent(lines: dict, field: str) -> dict[str, tuple[int, int, int]]:
    """Per category and overall: (n, gained, lost), from conversations.jsonl alone."""
    a = {x["id"]: x for x in lines["a"]}
    b = {x["id"]: x for x in lines["b"]}
    out: dict[str, list[int]] = {}
    for i, xa in a.items():
        if i not in b:
            continue
        va, vb = bool(xa.get(field)), bool(b[i].get(field))
        for key in (xa["category"].removeprefix("multi_turn_"), "overall"):
            row = out.setdefault(key, [0, 0, 0])
            row[0] += 1
            row[1] += (not va) and vb
            row[2] += va and not vb
    return {k: tuple(v) for k, v in out.items()}


def test_strict_is_not_compared_without_the_protocol(compared: dict) -> None:
    assert "strict success is not applicable" in compared["result"].output
    assert not (compared["out"] / "compare_strict.json").exists()
    assert all(x["strict_valid"] is None for x in compared["lines"]["a"] if "rules" in x)


@pytest.mark.parametrize(("score", "field"), [("bfcl", "official_valid"),
                                               ("safe", "safe_valid")])
def test_compare_p_matches_binomtest_on_score_output(compared: dict, score: str,
                                                     field: str) -> None:
    assert compared["result"].exit_code in (0, 1), compared["result"].output
    rows = json.loads((compared["out"] / f"compare_{score}.json").read_text())["rows"]
    expected = _independent(compared["lines"], field)
    assert {r["category"] for r in rows} == set(expected)
    for r in rows:
        n, gained, lost = expected[r["category"]]
        assert (r["n paired"], r["gained"], r["lost"]) == (n, gained, lost)
        p = binomtest(min(gained, lost), gained + lost, 0.5).pvalue if gained + lost else 1.0
        assert r["p"] == pytest.approx(p)


def test_compare_lists_every_changed_conversation(compared: dict) -> None:
    pairs = json.loads((compared["out"] / "compare_pairs.json").read_text())["rows"]
    rows = json.loads((compared["out"] / "compare_bfcl.json").read_text())["rows"]
    overall = next(r for r in rows if r["category"] == "overall")
    bfcl = [p for p in pairs if p["score"] == "bfcl"]
    assert sum(p["change"] == "gained" for p in bfcl) == overall["gained"]
    assert sum(p["change"] == "lost" for p in bfcl) == overall["lost"]
    assert all(p["id"].startswith("multi_turn_") for p in bfcl)
    assert "McNemar" in compared["result"].output


def test_compare_needs_one_model_folder(shared_runs: Path, tmp_path: Path) -> None:
    run = tmp_path / "two"
    for model in ("m_one", "m_two"):
        src = shared_runs / GPT_OSS[0] / "result" / "openai_gpt-oss-120b" / "multi_turn"
        if not src.is_dir():
            pytest.skip("gpt-oss run missing")
        dst = run / model / "multi_turn"
        dst.mkdir(parents=True)
        first = (src / "BFCL_v4_multi_turn_base_result.json").read_text().splitlines()[:3]
        (dst / "BFCL_v4_multi_turn_base_result.json").write_text("\n".join(first) + "\n")
    res = runner.invoke(app, ["compare", str(run), str(run), "--decoder", FC,
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "--model-a" in res.output
    res = runner.invoke(app, ["compare", str(run), str(run), "--decoder", FC, "--model-a",
                              "m_one", "--model-b", "m_two", "--out", str(tmp_path / "o")])
    assert res.exit_code in (0, 1), res.output
    rows = json.loads((tmp_path / "o" / "compare_bfcl.json").read_text())["rows"]
    assert rows[0]["n paired"] == 200 and rows[0]["gained"] == rows[0]["lost"] == 0


def test_compare_refuses_a_bad_score_kind(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compare", str(tmp_path), str(tmp_path), "--score", "nope"])
    assert res.exit_code == 2
