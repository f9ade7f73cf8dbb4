"""Tests for simulator.data's partitioners, the public split and feature shift (the loaders are
in tests/test_data.py)."""

from __future__ import annotations

import numpy as np
import pytest
from label_skew import label_tv

from simulator.data import (
    PARTITIONS,
    Dataset,
    feature_shift,
    load_dataset,
    partition,
    split_public,
)


@pytest.fixture(scope="module")
def mnist5k() -> Dataset:
    return load_dataset("mnist5k", seed=0)


@pytest.mark.parametrize(
    "scheme,params",
    [
        ("iid", {}),
        ("dirichlet", {"alpha": 0.3}),
        ("shards", {"classes_per_client": 2}),
        ("missing", {"missing_classes": 3}),
        ("quantity", {"alpha": 0.5}),
        ("quantity", {"method": "powerlaw", "exponent": 1.0}),
    ],
)
def test_partitions_disjoint_cover_nonempty(
    mnist5k: Dataset, scheme: str, params: dict[str, object]
) -> None:
    y = mnist5k.y_train
    parts = partition(y, 20, scheme, seed=0, **params)
    assert len(parts) == 20 and all(p.dtype == np.int64 and len(p) > 0 for p in parts)
    allidx = np.concatenate(parts)
    assert len(allidx) == len(y) and np.array_equal(np.sort(allidx), np.arange(len(y)))
    again = partition(y, 20, scheme, seed=0, **params)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = partition(y, 20, scheme, seed=1, **params)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def test_iid_and_shards_sizes(mnist5k: Dataset) -> None:
    y = mnist5k.y_train
    assert [len(p) for p in partition(y, 30, "iid", seed=0)] == [134] * 10 + [133] * 20
    shards = partition(y, 20, "shards", seed=0, classes_per_client=2)
    # 40 single-class shards of 100 (4 per class); each client gets 2 of them
    assert [len(p) for p in shards] == [200] * 20
    assert all(len(np.unique(y[p])) <= 2 for p in shards)
    assert np.mean([len(np.unique(y[p])) for p in shards]) > 1.5
    one = partition(y, 10, "shards", seed=0, classes_per_client=1)
    assert all(len(np.unique(y[p])) == 1 for p in one)
    with pytest.raises(ValueError, match="classes_per_client"):
        partition(y, 3, "shards", seed=0, classes_per_client=2)
    with pytest.raises(ValueError, match=r"^shards classes_per_client \(11\) exceeds the 10 "):
        partition(y, 20, "shards", seed=0, classes_per_client=11)  # was 6-9 classes a client
    assert all(
        len(np.unique(y[p])) <= 10
        for p in partition(y, 20, "shards", seed=0, classes_per_client=10)
    )


def test_dirichlet_alpha_controls_skew(mnist5k: Dataset) -> None:
    y = mnist5k.y_train
    skewed = partition(y, 10, "dirichlet", seed=0, alpha=0.05)
    flat = partition(y, 10, "dirichlet", seed=0, alpha=100.0)
    classes_skewed = np.mean([len(np.unique(y[p])) for p in skewed])
    classes_flat = np.mean([len(np.unique(y[p])) for p in flat])
    assert classes_flat == 10.0 and classes_skewed < 6.0
    assert label_tv(y, skewed, 10) > 0.5 and label_tv(y, flat, 10) < 0.05
    # balanced sampler: a client stops receiving classes at N/K = 400, so it holds < 400 + 400
    assert max(len(p) for p in skewed) < 800
    unbalanced = partition(y, 10, "dirichlet", seed=0, alpha=0.05, balance=False)
    assert max(len(p) for p in unbalanced) > 1000
    with pytest.raises(ValueError, match="min_size"):
        partition(y, 100, "dirichlet", seed=0, alpha=0.05, min_size=30, max_retries=5)


def test_quantity_skew_sizes_vary_labels_iid(mnist5k: Dataset) -> None:
    y = mnist5k.y_train
    parts = partition(y, 10, "quantity", seed=0, alpha=0.5, min_size=20)
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 20 and sizes.max() / sizes.min() > 5
    big = parts[int(np.argmax(sizes))]
    assert len(np.unique(y[big])) == 10
    power = sorted(len(p) for p in partition(y, 10, "quantity", seed=0, method="powerlaw"))
    # shares proportional to 1/r, r = 1..10, from 4000 - 10 samples plus 1 each
    assert power[-1] == pytest.approx(1 + 3990 / sum(1 / r for r in range(1, 11)), abs=1)
    assert power[0] == pytest.approx(1 + 399 / sum(1 / r for r in range(1, 11)), abs=1)


def test_natural_partition_uses_groups() -> None:
    labels = np.arange(12) % 3
    groups = np.array([5, 5, 5, 1, 1, 2, 2, 2, 2, 9, 9, 9])
    parts = partition(labels, 3, "natural", seed=0, groups=groups)
    assert all(len(np.unique(groups[p])) == 1 for p in parts)
    assert len({int(groups[p[0]]) for p in parts}) == 3
    for p in parts:
        assert np.array_equal(p, np.flatnonzero(groups == groups[p[0]]))
    merged = partition(labels, 3, "natural", seed=0, groups=groups, assign="merge")
    assert np.array_equal(np.sort(np.concatenate(merged)), np.arange(12))
    with pytest.raises(ValueError, match="needs groups"):
        partition(labels, 3, "natural", seed=0)
    with pytest.raises(ValueError, match="4 groups, fewer than 5 clients"):
        partition(labels, 5, "natural", seed=0, groups=groups)


def test_partition_errors_list_valid_options() -> None:
    labels = np.arange(10) % 2
    with pytest.raises(ValueError, match="unknown partition scheme 'zipf'.*dirichlet.*iid"):
        partition(labels, 2, "zipf", seed=0)
    assert set(PARTITIONS) == {
        "iid",
        "dirichlet",
        "shards",
        "missing",
        "quantity",
        "natural",
        "virtual",
    }
    with pytest.raises(ValueError, match="'beta'.*valid.*alpha"):
        partition(labels, 2, "dirichlet", seed=0, beta=1.0)
    with pytest.raises(ValueError, match="11 clients.*10 samples"):
        partition(labels, 11, "iid", seed=0)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        partition(labels, 2, "dirichlet", seed=0, alpha=0.0)


def test_split_public_stratified_disjoint(mnist5k: Dataset) -> None:
    y = mnist5k.y_train
    pub, rest = split_public(y, 0.1, seed=0)
    assert len(pub) == 400 and len(rest) == 3600
    assert np.bincount(y[pub]).tolist() == [40] * 10
    assert len(np.intersect1d(pub, rest)) == 0
    assert np.array_equal(np.sort(np.concatenate([pub, rest])), np.arange(4000))
    pub2, _ = split_public(y, 0.1, seed=0)
    pub3, _ = split_public(y, 0.1, seed=1)
    assert np.array_equal(pub, pub2) and not np.array_equal(pub, pub3)
    empty, everything = split_public(y, 0.0, seed=0)
    assert len(empty) == 0 and empty.dtype == np.int64 and len(everything) == 4000
    with pytest.raises(ValueError, match="fraction"):
        split_public(y, 1.0, seed=0)


def test_feature_shift() -> None:
    x = np.random.default_rng(0).uniform(0, 1, (16, 3, 8, 8)).astype(np.float32)
    a = feature_shift(x, 1, seed=7)
    assert a.shape == x.shape and a.dtype == np.float32
    assert np.array_equal(a, feature_shift(x, 1, seed=7))
    assert np.array_equal(feature_shift(x, 1, seed=7, strength=0.0), x)
    b = feature_shift(x, 2, seed=7)
    assert float(np.abs(a - b).mean()) > 0.05
    assert float(np.abs(a - x).mean()) > 0.05
    weak = float(np.abs(feature_shift(x, 1, seed=7, strength=0.25) - x).mean())
    assert weak < float(np.abs(a - x).mean())
    # on constant tabular input the mean is the client's contrast * 1 + brightness offset
    tab = np.ones((200, 60), dtype=np.float32)
    means = [float(feature_shift(tab, c, seed=7).mean()) for c in range(6)]
    assert feature_shift(tab, 0, seed=7).shape == (200, 60)
    assert max(means) - min(means) > 0.3 and np.std(means) > 0.1
    with pytest.raises(ValueError, match="strength"):
        feature_shift(x, 1, seed=7, strength=-1.0)
