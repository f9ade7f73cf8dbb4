"""defenses/bucketing.py: a rule on sample-weighted bucket means (Karimireddy et al. 2022)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses import DEFENSES, DefenseContext, PreconditionError, UpdateBatch, make_defense
from defenses.bucketing import buckets


def batch(rows: list[float], samples: list[int]) -> UpdateBatch:
    k = len(rows)
    return UpdateBatch(
        torch.tensor([[r] for r in rows], dtype=torch.float32),
        np.arange(10, 10 + k, dtype=np.int64),
        np.array(samples, np.int64),
        np.zeros(k, np.int64),
    )


def ctx(seed: int = 0) -> DefenseContext:
    return DefenseContext(0, torch.zeros(1), rng=np.random.default_rng(seed))


def test_one_bucket_is_the_sample_weighted_mean() -> None:
    # (1*0 + 3*2 + 1*10 + 1*12) / 6 = 28/6; each client's weight is its share of the samples
    res = make_defense("median", bucket=4)(batch([0, 2, 10, 12], [1, 3, 1, 1]), ctx())
    assert res.delta.item() == pytest.approx(28 / 6, rel=1e-6)
    assert [v.weight for v in res.verdicts] == pytest.approx([1 / 6, 3 / 6, 1 / 6, 1 / 6])
    assert all(v.kept for v in res.verdicts)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_median_of_two_pair_means_is_the_mean_whatever_the_pairs(seed: int) -> None:
    # equal samples: the median of two bucket means is their average = the mean of all, 6
    res = make_defense("median", bucket=2)(batch([0, 2, 10, 12], [5, 5, 5, 5]), ctx(seed))
    assert res.delta.item() == 6.0
    plain = make_defense("median")(batch([0, 2, 10, 12], [5, 5, 5, 5]), ctx(seed))
    assert plain.delta.item() == 6.0 and plain.verdicts[0].reason == "coordinate-wise"


def test_buckets_partition_every_row_once() -> None:
    parts = buckets(7, 3, np.random.default_rng(5))
    assert [len(p) for p in parts] == [3, 3, 1]
    assert sorted(np.concatenate(parts).tolist()) == list(range(7))


def test_krum_rejects_the_bucket_holding_the_outlier() -> None:
    # 8 rows, buckets of 2 -> 4 bucket means; Krum f=0 keeps one bucket, never the outlier's
    rows = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1e6]
    res = make_defense("krum", f=0, bucket=2)(batch(rows, [1] * 8), ctx(3))
    assert not res.verdicts[7].kept
    assert 0.5 < res.delta.item() < 1.5
    kept = [v for v in res.verdicts if v.kept]
    assert len(kept) == 2 and sum(v.weight for v in kept) == pytest.approx(1.0)


def test_precondition_counts_buckets() -> None:
    d = make_defense("krum", f=1, bucket=2)
    assert d.rule_precondition(8) == "n > 2f + 2 (n=4, f=1) in buckets of 2"
    assert d.rule_precondition(10) is None
    with pytest.raises(PreconditionError, match=r"n > 2f \+ 2 \(n=4, f=1\) in buckets of 2"):
        d(batch([0.0] * 8, [1] * 8), ctx())
    # found at stop 57: bucket=11 of 10 rows made one bucket, the median a plain mean; ceil(n/s)
    # buckets: 10/11 -> 1, 10/5 -> 2 (refused), 10/4 -> 3 (runs)
    med = make_defense("median", bucket=11)
    assert med.rule_precondition(10) == (
        "at least 3 buckets (n=10 in buckets of 11 make 1; any rule of 1 bucket means is their "
        "mean)"
    )
    assert make_defense("median", bucket=5).rule_precondition(10).startswith("at least 3 buckets")
    assert make_defense("median", bucket=4).rule_precondition(10) is None


@pytest.mark.parametrize(
    ("name", "params", "pattern"),
    [
        ("median", {"bucket": 0}, r"'median': bucket 0 invalid; valid: integer >= 1"),
        ("median", {"bucket": 1.5}, r"'median': bucket 1.5 invalid"),
        ("fltrust", {"bucket": 2}, r"'fltrust': unknown parameter 'bucket'"),
        (
            "median",
            {"buckets": 2},
            r"'median': unknown parameter 'buckets'; "
            r"valid: \['bucket', 'nnm', 'nnm_rank', 'weighting'\]",
        ),
    ],
)
def test_bad_bucket_parameters(name: str, params: dict[str, object], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_defense(name, **params)


def test_bucketable_rules_are_the_row_only_ones() -> None:
    # rules that read a public set, signals or stale bases do not take bucket=S
    assert [n for n, cls in DEFENSES.items() if cls.bucketable] == [
        "bulyan",
        "centeredclip",
        "geomed",
        "krum",
        "median",
        "multikrum",
        "trimmedmean",
    ]
    assert make_defense("krum", f=0, bucket=3).bucket == 3
    assert make_defense("krum", f=0).bucket == 1
