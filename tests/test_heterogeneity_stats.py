"""benchmarks/heterogeneity.py's verdict rule on hand-made numbers: the one-std rule, the paired
sign-flip test (with and without a margin), pairing seeds, rounds-to-baseline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heterogeneity_study import core, stats  # noqa: E402
from benchmarks.heterogeneity_study.cases import Case, Comparison  # noqa: E402

# ------------------------------------------------------------------------------ verdict rule


def test_one_std_rule_and_wins_are_kept() -> None:
    """method 0.80, 0.82, 0.84: mean 0.82, sample std 0.02; baseline 0.70, 0.75, 0.80: mean
    0.75, std 0.05. Gain 0.07 > max(0.02, 0.05) -> the 1-std rule holds; wins 3/3; the paired
    diffs 0.10, 0.07, 0.04 (mean 0.07, std 0.03) give p = 1/8: inconclusive with 3 seeds."""
    v = stats.verdict([0.80, 0.82, 0.84], [0.70, 0.75, 0.80], "higher")
    assert v["method_mean"] == pytest.approx(0.82) and v["method_std"] == pytest.approx(0.02)
    assert v["baseline_mean"] == pytest.approx(0.75)
    assert v["baseline_std"] == pytest.approx(0.05)
    assert v["gain"] == pytest.approx(0.07) and v["reproduced"] is True
    assert v["wins"] == 3  # 0.80>0.70, 0.82>0.75, 0.84>0.80
    assert v["paired_diffs"] == pytest.approx([0.10, 0.07, 0.04])
    assert v["paired_diff_mean"] == pytest.approx(0.07)
    assert v["paired_diff_std"] == pytest.approx(0.03)
    assert v["p_value"] == 0.125 and v["verdict"] == "inconclusive"
    # baseline 0.70, 0.78, 0.86: std 0.08 > gain 0.04; the third seed lost
    v = stats.verdict([0.80, 0.82, 0.84], [0.70, 0.78, 0.86], "higher")
    assert v["gain"] == pytest.approx(0.04) and v["reproduced"] is False and v["wins"] == 2
    with pytest.raises(ValueError, match="direction must be"):
        stats.verdict([1.0], [0.0], "up")
    with pytest.raises(ValueError, match="paired values: 2 method vs 1 baseline"):
        stats.verdict([0.8, 0.9], [0.7], "higher")


def test_sign_flip_p_by_hand() -> None:
    """Exact enumeration of the 2^n sign patterns, the observed one included.

    [1, 2, 3]: pattern sums 6, 4, 2, 0, 0, -2, -4, -6; only the observed reaches 6 -> 1/8.
    [3, -1, 2, 2, 1]: |d| sums to 9, the observed sum is 7 = 9 - 2 * 1; a pattern reaches it
    when the |d| it flips sum to <= 1: none, the first 1, the second 1 -> 3/32.
    [1, 1, -1]: sums 3 (x1), 1 (x3), -1 (x3), -3 (x1); >= 1: 4 -> 1/2 (ties count).
    [1, 1, 0]: flipping the 0 changes nothing: 2 patterns reach 2 -> 2/8.
    [0, 0, 0]: every pattern ties -> 1. [-1, -2, -3]: every pattern reaches -6 -> 1.
    """
    assert stats.sign_flip_p([1, 2, 3]) == 1 / 8
    assert stats.sign_flip_p([3, -1, 2, 2, 1]) == 3 / 32
    assert stats.sign_flip_p([1, 1, -1]) == 0.5
    assert stats.sign_flip_p([1, 1, 0]) == 0.25
    assert stats.sign_flip_p([0, 0, 0]) == 1.0
    assert stats.sign_flip_p([-1, -2, -3]) == 1.0
    # floating-point ties: 0.1 + 0.2 - 0.3 is 5.6e-17, not 0, yet the patterns tying with the
    # observed one still count
    # ([1, 2, -3]: sum 0 = 6 - 2 * 3; flipped |d| <= 3: {}, {1}, {2}, {3}, {1, 2} -> 5/8)
    assert stats.sign_flip_p([0.1, 0.2, -0.3]) == stats.sign_flip_p([1, 2, -3]) == 5 / 8
    assert stats.sign_flip_p([1, 2, 3, 4, 5]) == 1 / 32
    assert stats.smallest_p(3) == 1 / 8 and stats.smallest_p(5) == 1 / 32
    with pytest.raises(ValueError, match="at most 16 seeds"):
        stats.sign_flip_p([1.0] * 17)


def test_paired_verdicts_by_hand() -> None:
    """Method 4, 0, 3, 3, 2 vs baseline 1 on 5 seeds: diffs 3, -1, 2, 2, 1, mean 1.4, std
    sqrt(9.2 / 4) = 1.5166, p = 3/32 > 0.05 -> inconclusive. Diffs 1..5: p = 1/32 ->
    reproduced. Predicted lower, the same numbers swapped give the same diffs. A method that
    loses on average is contradicted, and so is a tie."""
    v = stats.verdict([4, 0, 3, 3, 2], [1, 1, 1, 1, 1], "higher")
    assert v["paired_diffs"] == [3, -1, 2, 2, 1]
    assert v["paired_diff_mean"] == pytest.approx(1.4)
    assert v["paired_diff_std"] == pytest.approx((9.2 / 4) ** 0.5)
    assert v["p_value"] == 3 / 32 and v["verdict"] == "inconclusive" and v["wins"] == 4
    w = stats.verdict([1, 1, 1, 1, 1], [4, 0, 3, 3, 2], "lower")
    assert w["paired_diffs"] == [3, -1, 2, 2, 1] and w["p_value"] == 3 / 32
    v = stats.verdict([2, 3, 4, 5, 6], [1, 1, 1, 1, 1], "higher")
    assert v["p_value"] == 1 / 32 and v["verdict"] == "reproduced"
    # rounds to target: fewer is the claim; 10, 12, 14, 11, 9 vs 20, 21, 22, 20, 19
    v = stats.verdict([10, 12, 14, 11, 9], [20, 21, 22, 20, 19], "lower")
    assert v["paired_diffs"] == [10, 9, 8, 9, 10] and v["verdict"] == "reproduced"
    # the method behind on average: diffs -0.1, 0.05, -0.02 (mean -0.0233) -> contradicted
    v = stats.verdict([0.6, 0.75, 0.68], [0.7, 0.7, 0.7], "higher")
    assert v["paired_diff_mean"] == pytest.approx(-0.07 / 3)
    assert v["p_value"] == 0.75 and v["verdict"] == "contradicted"
    assert stats.verdict([0.5], [0.5], "higher")["verdict"] == "contradicted"  # a tie
    assert stats.classify(0.01, 0.05) == "reproduced"
    assert stats.classify(0.01, 0.0625) == "inconclusive"


def test_paired_verdicts_with_a_margin_by_hand() -> None:
    """A claim with a size ("+2 or more") tests diff - margin. Diffs 3, 4, 5, 6, 7 (method
    4..8 vs 1): margin 2 -> 1..5, p = 1/32, reproduced; margin 4 -> -1, 0, 1, 2, 3: mean 1,
    and a flip keeps the sum >= 5 when the flipped values sum to <= 0: {}, {-1}, {0}, {-1, 0},
    {-1, 1}, {-1, 0, 1}, p = 6/32, inconclusive; margin 6 -> -3..1, mean -1, contradicted. The
    raw diffs are reported unchanged. "At most 2 lost" (margin -2): diffs -1, -1, -1 -> 1, 1,
    1, p = 1/8. The one-std rule judges gain - margin: gain 5, stds 1.58 / 0 -> yes at
    margin 2, no at 4."""
    m, b = [4, 5, 6, 7, 8], [1, 1, 1, 1, 1]
    v = stats.verdict(m, b, "higher", margin=2)
    assert v["paired_diffs"] == [3, 4, 5, 6, 7] and v["paired_diff_mean"] == 5
    assert v["p_value"] == 1 / 32 and v["verdict"] == "reproduced" and v["margin"] == 2
    assert v["reproduced"]
    v = stats.verdict(m, b, "higher", margin=4)
    assert v["p_value"] == 6 / 32 and v["verdict"] == "inconclusive"
    assert v["wins"] == 3  # seeds ahead by more than the margin: diffs 5, 6, 7
    assert not v["reproduced"]
    v = stats.verdict(m, b, "higher", margin=6)
    assert v["verdict"] == "contradicted" and v["paired_diff_mean"] == 5
    v = stats.verdict([1, 2, 3], [2, 3, 4], "higher", margin=-2)
    assert v["paired_diffs"] == [-1, -1, -1] and v["p_value"] == 1 / 8
    assert v["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="margin must be finite"):
        stats.verdict(m, b, "higher", margin=float("nan"))


def test_compare_pairs_seeds_and_marks_failed_runs() -> None:
    """Two seeds: a comparison whose runs all finished gets the paired fields; one whose
    baseline run of seed 1 failed pairs seed 0 only and is 'failed' with the run's error."""
    comparisons = (Comparison("b", "a"), Comparison("a", "c"))
    case = Case("x", "claim", {}, {"a": {}, "b": {}, "c": {}}, comparisons)

    def run(acc: float | None, error: str | None = None) -> dict[str, object]:
        return {"error": error, "final_accuracy": acc}

    index = {("x", arm, s): f"{arm}{s}" for arm in "abc" for s in (0, 1)}
    records = {
        "a0": run(0.5),
        "a1": run(0.6),
        "b0": run(0.7),
        "b1": run(0.9),
        "c0": run(0.5),
        "c1": run(None, "RuntimeError: boom"),
    }
    b, a = core.compare([case], index, records, 2, quick=True)
    assert b["method_values"] == [0.7, 0.9] and b["baseline_values"] == [0.5, 0.6]
    assert b["paired_diffs"] == pytest.approx([0.2, 0.3]) and b["p_value"] == 0.25
    assert b["verdict"] == "inconclusive" and b["error"] is None
    assert a["method_values"] == [0.5] and a["baseline_values"] == [0.5]
    assert a["verdict"] == "failed" and a["error"] == "RuntimeError: boom"
    assert a["reproduced"] is False


def test_rounds_to_baseline_pairs_seeds() -> None:
    """Baseline final accuracy 0.6 (reached first at round 3 of 4); the method reaches 0.6 at
    round 2; a second method never does -> rounds + 1 = 5."""
    base = {
        "final_accuracy": 0.6,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.2, 0.5, 0.6, 0.6]},
    }
    fast = {
        "final_accuracy": 0.7,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.3, 0.65, 0.7, 0.7]},
    }
    slow = {
        "final_accuracy": 0.5,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.1, 0.2, 0.4, 0.5]},
    }
    c = Comparison("m", "b", "rounds_to_baseline", "lower")
    assert core.metric_values(c, [fast, slow], [base, base]) == ([2.0, 5.0], [3.0, 3.0])
