"""Agreement between annotators: raw agreement, Cohen's and Fleiss' kappa, Krippendorff's alpha.

The label domain is pinned (``(False, True)`` for the destructive boundary), so a category no
annotator used still counts. An undefined statistic (every label the same, so that chance
agreement is 1) is ``nan``, never an error.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from careful_engine.annotation.signals import FunctionInput
    from careful_engine.annotation.store import Label

DOMAIN: tuple[bool, bool] = (False, True)


def raw_agreement(a: Sequence[Hashable], b: Sequence[Hashable]) -> tuple[int, int]:
    """(items on which ``a`` and ``b`` agree, items)."""
    if len(a) != len(b):
        raise ValueError("raw_agreement: the two label lists differ in length")
    return sum(x == y for x, y in zip(a, b, strict=True)), len(a)


def cohen_kappa(
    a: Sequence[Hashable], b: Sequence[Hashable], domain: Sequence[Hashable] = DOMAIN
) -> float:
    """Cohen's kappa of two raters over the pinned ``domain`` (scikit-learn)."""
    from sklearn.metrics import cohen_kappa_score

    if len(a) != len(b):
        raise ValueError("cohen_kappa: the two label lists differ in length")
    if not a:
        return math.nan
    index = {v: i for i, v in enumerate(domain)}
    try:
        x = [index[v] for v in a]
        y = [index[v] for v in b]
    except KeyError as e:
        raise ValueError(f"cohen_kappa: label {e.args[0]!r} is outside the domain") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cohen_kappa_score(x, y, labels=list(range(len(domain)))))


def fleiss_table(
    ratings: Sequence[Sequence[Hashable]], domain: Sequence[Hashable] = DOMAIN
) -> list[list[int]]:
    """Subjects x categories counts from per-subject lists of ratings."""
    index = {v: i for i, v in enumerate(domain)}
    table = []
    for row in ratings:
        counts = [0] * len(domain)
        for v in row:
            if v not in index:
                raise ValueError(f"fleiss_table: rating {v!r} is outside the domain")
            counts[index[v]] += 1
        table.append(counts)
    return table


def fleiss_kappa(table: Sequence[Sequence[float]]) -> float:
    """Fleiss' kappa (1971) of a subjects x categories table of counts.

    Every subject must have the same number of ratings, at least two.
    """
    if not table:
        return math.nan
    n = sum(table[0])
    if n < 2 or any(abs(sum(row) - n) > 1e-9 for row in table):
        raise ValueError("fleiss_kappa: every subject needs the same number (>= 2) of ratings")
    subjects = len(table)
    categories = len(table[0])
    p = [sum(row[j] for row in table) / (subjects * n) for j in range(categories)]
    agreement = [(sum(c * c for c in row) - n) / (n * (n - 1)) for row in table]
    observed = sum(agreement) / subjects
    expected = sum(pj * pj for pj in p)
    if math.isclose(expected, 1.0):
        return math.nan
    return (observed - expected) / (1 - expected)


def krippendorff_alpha(
    data: Sequence[Sequence[Hashable | None]], domain: Sequence[Hashable] = DOMAIN
) -> float:
    """Krippendorff's alpha, nominal, of annotators x units data (None = missing)."""
    import krippendorff
    import numpy as np

    index = {v: i for i, v in enumerate(domain)}
    matrix = np.array(
        [[np.nan if v is None else index[v] for v in row] for row in data], dtype=float
    )
    if matrix.size == 0 or matrix.shape[0] < 2:
        return math.nan
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = krippendorff.alpha(
                reliability_data=matrix,
                value_domain=list(range(len(domain))),
                level_of_measurement="nominal",
            )
    except ValueError:  # too few pairable values
        return math.nan
    return float(value)


@dataclass(frozen=True)
class PairAgreement:
    a: str
    b: str
    agree: int
    n: int
    kappa: float

    @property
    def raw(self) -> float:
        return self.agree / self.n if self.n else math.nan


@dataclass(frozen=True)
class AgreementReport:
    subset: str
    functions: tuple[str, ...]
    annotators: tuple[str, ...]
    pairs: tuple[PairAgreement, ...]
    fleiss: float  # over the functions every annotator labelled
    alpha: float  # over all functions, missing labels allowed
    complete: int  # functions labelled by every annotator
    unanimous: int  # of those, labelled alike by all
    yes: dict[str, int] = field(default_factory=dict)  # destructive labels per annotator

    def pair(self, a: str, b: str) -> PairAgreement:
        for p in self.pairs:
            if {p.a, p.b} == {a, b}:
                return p
        raise KeyError((a, b))

    def to_json(self) -> dict:
        def num(x: float) -> float | None:
            return None if math.isnan(x) else round(x, 6)

        return {
            "subset": self.subset, "functions": len(self.functions),
            "annotators": list(self.annotators), "complete": self.complete,
            "unanimous": self.unanimous, "yes": self.yes,
            "fleiss_kappa": num(self.fleiss), "krippendorff_alpha": num(self.alpha),
            "pairs": [
                {"a": p.a, "b": p.b, "agree": p.agree, "n": p.n, "cohen_kappa": num(p.kappa)}
                for p in self.pairs
            ],
        }


def agreement_report(
    matrix: Mapping[str, Mapping[str, bool]],
    functions: Sequence[str],
    *,
    subset: str = "",
    domain: Sequence[Hashable] = DOMAIN,
) -> AgreementReport:
    """Every statistic over ``functions`` for annotator -> function -> label."""
    annotators = tuple(matrix)
    pairs = []
    for a, b in combinations(annotators, 2):
        both = [f for f in functions if f in matrix[a] and f in matrix[b]]
        xs = [matrix[a][f] for f in both]
        ys = [matrix[b][f] for f in both]
        agree, n = raw_agreement(xs, ys)
        pairs.append(PairAgreement(a, b, agree, n, cohen_kappa(xs, ys, domain)))
    complete = [f for f in functions if all(f in matrix[a] for a in annotators)]
    rows = [[matrix[a][f] for a in annotators] for f in complete]
    fleiss = (
        fleiss_kappa(fleiss_table(rows, domain)) if len(annotators) >= 2 and rows else math.nan
    )
    alpha = krippendorff_alpha(
        [[matrix[a].get(f) for f in functions] for a in annotators], domain
    )
    return AgreementReport(
        subset=subset,
        functions=tuple(functions),
        annotators=annotators,
        pairs=tuple(pairs),
        fleiss=fleiss,
        alpha=alpha,
        complete=len(complete),
        unanimous=sum(len(set(r)) == 1 for r in rows),
        yes={a: sum(bool(matrix[a].get(f)) for f in functions) for a in annotators},
    )


@dataclass(frozen=True)
class Split:
    """A function the annotators did not label alike."""

    function: str
    cls: str
    kind: str
    proposed: bool | None
    yes: tuple[str, ...]
    no: tuple[str, ...]
    missing: tuple[str, ...]
    reasons: dict[str, str]

    def to_json(self) -> dict:
        return {"function": self.function, "class": self.cls, "kind": self.kind,
                "proposed": self.proposed, "yes": list(self.yes), "no": list(self.no),
                "missing": list(self.missing), "reasons": self.reasons}


def splits(
    labels: Mapping[str, Mapping[str, Label]], functions: Sequence[FunctionInput]
) -> list[Split]:
    """The functions whose labels differ, with who said what and why."""
    out = []
    for fn in functions:
        yes = tuple(a for a in labels if fn.name in labels[a] and labels[a][fn.name].destructive)
        no = tuple(
            a for a in labels if fn.name in labels[a] and not labels[a][fn.name].destructive
        )
        if yes and no:
            out.append(Split(
                fn.name, fn.cls, fn.kind, fn.proposed, yes, no,
                tuple(a for a in labels if fn.name not in labels[a]),
                {a: labels[a][fn.name].reason for a in (*yes, *no)},
            ))
    return out
