"""Paired and rank statistics for comparing runs (paper §7).

* :func:`mcnemar_p`: exact two-sided McNemar test on the discordant pairs of two runs;
* :func:`paired`: the Table 5 "+ / − / p" columns from two verdict maps;
* :func:`spearman`: Spearman's rank correlation (ties get average ranks);
* :func:`ranks`: leaderboard ranks, best first, ties sharing the better rank.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def scipy_stats() -> ModuleType:
    """``scipy.stats``, imported (about 0.6 s) with a single-threaded BLAS when it is the
    first to load numpy: these statistics are over a few hundred numbers, and OpenBLAS
    otherwise starts a thread per core as it loads, which spends about 0.3 s of CPU (taken
    from the scoring workers when the import overlaps them). The environment is as it was
    afterwards; a BLAS thread count the user set is kept."""
    if "scipy.stats" in sys.modules or "numpy" in sys.modules:
        import scipy.stats

        return scipy.stats
    unset = [name for name in BLAS_THREADS if name not in os.environ]
    for name in unset:
        os.environ[name] = "1"
    try:
        import scipy.stats
    finally:
        for name in unset:
            os.environ.pop(name, None)
    return scipy.stats


def prefetch() -> None:
    """Import scipy.stats now: the leaderboard and compare do it while their workers score,
    instead of after."""
    scipy_stats()


def mcnemar_p(gained: int, lost: int) -> float:
    """Exact two-sided McNemar p on the discordant pairs (b gained, c lost).

    p = binomtest(min(b, c), b + c, 0.5, two-sided); 1.0 when there is no discordant pair.
    """
    if gained < 0 or lost < 0:
        raise ValueError("discordant counts must be >= 0")
    n = gained + lost
    if n == 0:
        return 1.0
    # scipy is imported only when a test is computed
    return float(scipy_stats().binomtest(min(gained, lost), n, 0.5, alternative="two-sided").pvalue)


@dataclass
class Paired:
    """Two runs' verdicts on the same conversations: Table 5's "+ / − / p"."""

    n: int
    passes_a: int
    passes_b: int
    gained: list[str] = field(default_factory=list)  # fail in A, pass in B
    lost: list[str] = field(default_factory=list)  # pass in A, fail in B

    @property
    def p(self) -> float:
        return mcnemar_p(len(self.gained), len(self.lost))

    def to_json(self) -> dict:
        return {"n": self.n, "passes_a": self.passes_a, "passes_b": self.passes_b,
                "gained": len(self.gained), "lost": len(self.lost), "p": self.p,
                "gained_ids": list(self.gained), "lost_ids": list(self.lost)}


def paired(a: Mapping[str, bool], b: Mapping[str, bool]) -> Paired:
    """Pair two verdict maps (id -> passed) on the ids they share, in A's order."""
    ids = [i for i in a if i in b]
    out = Paired(len(ids), sum(a[i] for i in ids), sum(b[i] for i in ids))
    for i in ids:
        if b[i] and not a[i]:
            out.gained.append(i)
        elif a[i] and not b[i]:
            out.lost.append(i)
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None with < 2 items or a constant input."""
    if len(x) != len(y):
        raise ValueError("x and y differ in length")
    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rho = float(scipy_stats().spearmanr(x, y).statistic)
    return None if math.isnan(rho) else rho


def ranks(values: Sequence[float]) -> list[int]:
    """Leaderboard ranks, 1 = highest; equal values share the better rank (1, 2, 2, 4)."""
    if not values:
        return []
    return [int(r) for r in scipy_stats().rankdata([-v for v in values], method="min")]
