"""Agreement statistics against published worked examples and statsmodels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss_kappa

from careful_engine.annotation.agreement import (
    agreement_report,
    cohen_kappa,
    fleiss_kappa,
    fleiss_table,
    krippendorff_alpha,
    raw_agreement,
    splits,
)
from careful_engine.annotation.signals import FunctionInput
from careful_engine.annotation.store import Label

# Wikipedia, "Cohen's kappa", worked example: 50 proposals, A and B both yes on 20, A yes B no
# on 5, A no B yes on 10, both no on 15: p_o = 0.7, p_e = 0.5, kappa = 0.4.
WIKI_COHEN_A = [True] * 20 + [True] * 5 + [False] * 10 + [False] * 15
WIKI_COHEN_B = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15

# Wikipedia, "Fleiss' kappa", worked example: 10 subjects, 14 raters, 5 categories.
WIKI_FLEISS = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]

# Fleiss (1971), Table 1: 30 patients, 6 psychiatrists, 5 diagnoses (1 depression,
# 2 personality disorder, 3 schizophrenia, 4 neurosis, 5 other); kappa = 0.430
# (R irr::kappam.fleiss(diagnoses) 0.4302445).
FLEISS_1971 = [
    [4, 4, 4, 4, 4, 4], [2, 2, 2, 5, 5, 5], [2, 3, 3, 3, 3, 5], [5, 5, 5, 5, 5, 5],
    [2, 2, 2, 4, 4, 4], [1, 1, 3, 3, 3, 3], [3, 3, 3, 3, 5, 5], [1, 1, 3, 3, 3, 4],
    [1, 1, 4, 4, 4, 4], [5, 5, 5, 5, 5, 5], [1, 4, 4, 4, 4, 4], [1, 2, 4, 4, 4, 4],
    [2, 2, 2, 3, 3, 3], [1, 4, 4, 4, 4, 4], [2, 2, 4, 4, 4, 5], [3, 3, 3, 3, 3, 5],
    [1, 1, 1, 4, 5, 5], [1, 1, 1, 1, 1, 2], [2, 2, 4, 4, 4, 4], [1, 3, 3, 5, 5, 5],
    [5, 5, 5, 5, 5, 5], [2, 4, 4, 4, 4, 4], [2, 2, 4, 5, 5, 5], [1, 1, 4, 4, 4, 4],
    [1, 4, 4, 4, 4, 5], [2, 2, 2, 2, 2, 4], [1, 1, 1, 1, 5, 5], [2, 2, 4, 4, 4, 4],
    [1, 3, 3, 3, 3, 3], [5, 5, 5, 5, 5, 5],
]

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", example C: 4 observers,
# 12 units, nominal values 1-5 with missing data; alpha = 0.743.
K_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]
# Same paper, example A: binary data, 2 observers, 10 units; alpha = 0.095.
K_2011_BINARY = [
    [False, True, False, False, False, False, False, False, True, False],
    [True, True, True, False, False, True, False, False, False, False],
]


def test_cohen_kappa_textbook():
    assert raw_agreement(WIKI_COHEN_A, WIKI_COHEN_B) == (35, 50)
    assert cohen_kappa(WIKI_COHEN_A, WIKI_COHEN_B) == pytest.approx(0.4)


def test_cohen_kappa_pinned_domain_and_undefined():
    # both annotators use only "no": undefined, not an error and not 1
    assert math.isnan(cohen_kappa([False] * 5, [False] * 5))
    # one annotator never says yes: kappa computed on the 2x2 table of the pinned domain
    a, b = [False] * 4, [True, False, False, False]
    assert cohen_kappa(a, b) == pytest.approx(0.0)
    assert math.isnan(cohen_kappa([], []))
    with pytest.raises(ValueError):
        cohen_kappa([1], [2], domain=(False, True))


def test_fleiss_kappa_wikipedia_table():
    assert fleiss_kappa(WIKI_FLEISS) == pytest.approx(0.210, abs=5e-4)
    assert fleiss_kappa(WIKI_FLEISS) == pytest.approx(sm_fleiss_kappa(np.array(WIKI_FLEISS)))


def test_fleiss_kappa_fleiss_1971():
    table = fleiss_table(FLEISS_1971, domain=(1, 2, 3, 4, 5))
    assert fleiss_kappa(table) == pytest.approx(0.4302445, abs=1e-6)
    assert fleiss_kappa(table) == pytest.approx(sm_fleiss_kappa(np.array(table)))


def test_fleiss_table_keeps_an_unused_category():
    rows = [[True, True, False], [False, False, False], [True, True, True]]
    table = fleiss_table(rows, domain=(False, True, "unsure"))
    assert table == [[1, 2, 0], [3, 0, 0], [0, 3, 0]]
    assert fleiss_kappa(table) == pytest.approx(sm_fleiss_kappa(np.array(table)))
    assert math.isnan(fleiss_kappa(fleiss_table([[False, False]] * 3)))
    with pytest.raises(ValueError):
        fleiss_kappa([[1, 1], [2, 1]])


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fleiss_kappa_matches_statsmodels(data):
    raters = data.draw(st.integers(2, 7))
    categories = data.draw(st.integers(2, 5))
    subjects = data.draw(st.integers(1, 15))
    rows = [
        data.draw(st.lists(st.integers(0, categories - 1), min_size=raters, max_size=raters))
        for _ in range(subjects)
    ]
    table = fleiss_table(rows, domain=tuple(range(categories)))
    counts = np.array(table, dtype=float)
    p = counts.sum(axis=0) / counts.sum()
    if math.isclose(float((p * p).sum()), 1.0):
        assert math.isnan(fleiss_kappa(table))
    else:
        assert fleiss_kappa(table) == pytest.approx(sm_fleiss_kappa(counts), abs=1e-9)


def test_krippendorff_alpha_published_examples():
    assert krippendorff_alpha(K_2011, domain=(1, 2, 3, 4, 5)) == pytest.approx(0.743, abs=5e-4)
    assert krippendorff_alpha(K_2011_BINARY) == pytest.approx(0.095, abs=5e-4)
    assert math.isnan(krippendorff_alpha([[True, True], [True, True]]))


def test_agreement_report_on_a_toy_matrix():
    matrix = {
        "X": dict(zip("abcdef", [True, True, False, False, False, True], strict=True)),
        "Y": dict(zip("abcdef", [True, False, False, False, False, True], strict=True)),
        "Z": dict(zip("abcde", [True, True, False, True, False], strict=True)),  # f missing
    }
    report = agreement_report(matrix, list("abcdef"), subset="all")
    xy = report.pair("X", "Y")
    assert (xy.agree, xy.n) == (5, 6)
    assert xy.kappa == pytest.approx(cohen_kappa(list(matrix["X"].values()),
                                                 list(matrix["Y"].values())))
    assert report.pair("Y", "Z").n == 5
    assert report.complete == 5 and report.unanimous == 3
    rows = [[matrix[a][f] for a in "XYZ"] for f in "abcde"]
    assert report.fleiss == pytest.approx(fleiss_kappa(fleiss_table(rows)))
    assert report.alpha == pytest.approx(krippendorff_alpha(
        [[matrix[a].get(f) for f in "abcdef"] for a in "XYZ"]))
    assert report.yes == {"X": 3, "Y": 2, "Z": 3}
    assert report.to_json()["pairs"][0]["agree"] == 5


def test_splits_name_who_said_what():
    fns = [FunctionInput(n, "C", "write", None) for n in ("a", "b")]

    def lb(a, f, d, r):
        return Label(a, f, d, r, "t", "t")

    labels = {
        "X": {"a": lb("X", "a", True, "why yes"), "b": lb("X", "b", False, "")},
        "Y": {"a": lb("Y", "a", False, "why no"), "b": lb("Y", "b", False, "")},
    }
    (split,) = splits(labels, fns)
    assert (split.function, split.yes, split.no) == ("a", ("X",), ("Y",))
    assert split.reasons == {"X": "why yes", "Y": "why no"}
