"""The statistics of ``benchmarks/heterogeneity.py``'s verdicts: means and standard deviations
over seeds, the paired differences, the exact one-sided sign-flip permutation test and the
verdict of one comparison (the rule itself is stated in :mod:`benchmarks.heterogeneity_study.core`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: significance level of the paired test
ALPHA = 0.05
#: most seeds the exact test enumerates (2^16 sign patterns)
MAX_SEEDS = 16
#: the verdicts (``failed``: a run of the comparison failed, no verdict on the claim)
VERDICTS = ("reproduced", "inconclusive", "contradicted", "failed")


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation of a metric over seeds."""

    mean: float
    std: float


def stat(values: list[float]) -> Stat:
    """Mean and sample std (ddof 1; 0 for a single value) of ``values`` (ValueError if empty)."""
    if not values:
        raise ValueError("no values to summarize")
    v = np.asarray(values, dtype=np.float64)
    return Stat(float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0)


def sign_flip_p(diffs: list[float]) -> float:
    """Exact one-sided sign-flip permutation p-value of ``mean(diffs) > 0``.

    Under the null hypothesis (no effect) each paired difference is as likely positive as
    negative, so all ``2^n`` sign patterns ``s`` of the ``n`` differences are equally likely;
    the p-value is the share of patterns whose mean ``mean(s * diffs)`` is at least the
    observed mean (the observed pattern included, so ``p >= 1 / 2^n``). Means within
    ``1e-9 * max|diffs|`` of the observed count as equal (ties, e.g. a zero difference, whose
    sign flip changes nothing).

    Examples: ``[1, 2, 3]`` -> 1/8 (only the observed pattern reaches 2); ``[3, -1, 2, 2, 1]``
    -> 3/32 (the observed, and the two that flip one of the two ones).
    """
    d = np.asarray(diffs, dtype=np.float64)
    n = len(d)
    if n == 0:
        raise ValueError("no paired differences")
    if n > MAX_SEEDS:
        raise ValueError(f"the exact sign-flip test enumerates at most {MAX_SEEDS} seeds, got {n}")
    bits = (np.arange(2**n)[:, None] >> np.arange(n)) & 1
    means = ((1 - 2 * bits) * d).sum(1) / n  # [2^n]: row 0 is the observed pattern
    tol = 1e-9 * float(np.abs(d).max())
    return float(np.count_nonzero(means >= means[0] - tol) / 2**n)


def classify(diff_mean: float, p: float) -> str:
    """``reproduced`` when ``p <= ALPHA`` (with a positive mean difference), ``inconclusive``
    when the mean difference is positive but ``p > ALPHA``, else ``contradicted``."""
    if diff_mean > 0:
        return "reproduced" if p <= ALPHA else "inconclusive"
    return "contradicted"


def verdict(
    method: list[float], baseline: list[float], direction: str, margin: float = 0.0
) -> dict[str, Any]:
    """One comparison of per-seed values paired by position (seed ``i`` of both lists).

    ``margin``: by how much the method must beat the baseline in the predicted direction (a
    claim of "+2 points or more" is ``margin`` 0.02; "at most 6 points lost" is -0.06): the
    paired test and the one-std rule judge ``diff - margin``; ``paired_diffs`` and
    ``paired_diff_mean`` stay the raw differences.

    Returns today's fields (``method_mean``/``_std``, ``baseline_mean``/``_std``, the signed
    ``gain`` of the means, ``reproduced``: the one-standard-deviation rule, ``wins``: seeds on
    which the method is strictly ahead in the predicted direction, by more than ``margin``)
    and the paired test's:
    ``paired_diffs`` (per seed, method minus baseline, negated for a ``lower`` prediction),
    ``paired_diff_mean``, ``paired_diff_std`` (ddof 1), ``p_value`` (:func:`sign_flip_p`) and
    ``verdict`` (:func:`classify`, on the mean of ``diff - margin``), and ``margin``.
    """
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
    if not np.isfinite(margin):
        raise ValueError(f"margin must be finite, got {margin!r}")
    if len(method) != len(baseline):
        raise ValueError(f"paired values: {len(method)} method vs {len(baseline)} baseline")
    m, b = stat(method), stat(baseline)
    sign = 1.0 if direction == "higher" else -1.0
    gain = sign * (m.mean - b.mean)
    diffs = [sign * (x - y) for x, y in zip(method, baseline, strict=True)]
    d = stat(diffs)
    tested = [x - margin for x in diffs]
    p = sign_flip_p(tested)
    return {
        "method_mean": m.mean,
        "method_std": m.std,
        "baseline_mean": b.mean,
        "baseline_std": b.std,
        "gain": gain,
        "reproduced": bool(gain - margin > max(m.std, b.std)),
        "wins": sum(x > 0 for x in tested),
        "paired_diffs": diffs,
        "paired_diff_mean": d.mean,
        "paired_diff_std": d.std,
        "p_value": p,
        "verdict": classify(float(np.mean(tested)), p),
        "margin": margin,
    }


def smallest_p(seeds: int) -> float:
    """The smallest p-value the exact test can give with ``seeds`` pairs: ``1 / 2^seeds``."""
    return 1.0 / 2**seeds
