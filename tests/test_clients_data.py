"""Tests for simulator.data.clients/virtual/generated: client data sources on demand."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from simulator.data import partition
from simulator.data.clients import LOCAL_TEST_TAG, NaturalData, PartitionData, with_local_test
from simulator.data.generated import SYNTH_TAG, SyntheticDevices, synthetic_test_set
from simulator.data.rows import ClientRows, hash_normal, holdout_counts
from simulator.data.virtual import VirtualData

TRAIN_LABELS = np.arange(20_000, dtype=np.int64) % 10  # 2,000 rows per class
TEST_LABELS = np.arange(5_000, dtype=np.int64) % 10  # 500 rows per class


def _virtual(num_clients: int = 1000, **kw: object) -> VirtualData:
    args: dict = dict(
        seed=3,
        alpha=0.5,
        size_median=40,
        size_sigma=1.0,
        size_min=5,
        size_max=400,
        test_labels=TEST_LABELS,
    )
    args.update(kw)
    return VirtualData(TRAIN_LABELS, num_clients, **args)


def _same(a: ClientRows, b: ClientRows) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a.index, b.index, strict=True))


# --------------------------------------------------------------------------- hashing


def test_hash_normal_is_standard_normal_and_deterministic() -> None:
    ids = np.arange(100_000)
    z = hash_normal(7, ids, 1)
    assert z.dtype == np.float64 and z.shape == (100_000,)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    assert abs((z < 1.96).mean() - 0.975) < 0.003  # the normal CDF at 1.96
    assert np.array_equal(hash_normal(7, ids[::-1], 1), z[::-1])  # per id, order-free
    assert np.array_equal(hash_normal(7, np.array([42]), 1), z[42:43])
    assert not np.allclose(hash_normal(7, ids[:10], 2), z[:10])  # tags are independent
    assert not np.allclose(hash_normal(8, ids[:10], 1), z[:10])  # seeds too
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 0.02  # neighbouring ids uncorrelated


def test_holdout_counts_by_hand() -> None:
    # n = 0, 1, 2, 3, 10, 25 at 10 %: 0, 0 (single row), 1, 1, 1, round(2.5) = 2 (half-even)
    assert holdout_counts(np.array([0, 1, 2, 3, 10, 25]), 0.1).tolist() == [0, 0, 1, 1, 1, 2]
    assert holdout_counts(np.array([2, 4, 10]), 0.9).tolist() == [1, 3, 9]  # n - 1 at most


# --------------------------------------------------------------------------- partition


def test_partition_data_csr_by_hand() -> None:
    p = PartitionData.from_lists([np.array([0, 1, 2]), np.array([5]), np.array([7, 8])])
    assert p.num_clients == 3
    assert p.offsets.tolist() == [0, 3, 4, 6] and p.index_flat.tolist() == [0, 1, 2, 5, 7, 8]
    assert p.sizes(np.array([2, 0, 1])).tolist() == [2, 3, 1]
    assert [r.tolist() for r in p.rows([2, 0]).index] == [[7, 8], [0, 1, 2]]
    assert p.rows([0]).x is None and p.nbytes() == 6 * 8 + 4 * 8
    kept, held = p.split(0.5, seed=0, tag=1)
    # k = min(max(1, round(1.5)), 2) = 2, 0 (single row), min(max(1, 1), 1) = 1
    assert held.sizes(np.arange(3)).tolist() == [2, 0, 1]
    assert kept.sizes(np.arange(3)).tolist() == [1, 1, 1]
    with pytest.raises(IndexError):
        p.rows([3])
    with pytest.raises(ValueError):
        PartitionData(np.arange(4), np.array([0, 3]))


def test_partition_split_reproduces_reference_loop() -> None:
    parts = partition(TRAIN_LABELS[:1438], 40, "dirichlet", seed=5, alpha=0.3)
    parts.append(np.array([17], dtype=np.int64))  # a single-row client holds out nothing
    source = PartitionData.from_lists(parts)
    for fraction, seed, tag in ((0.1, 0, 0x51E4), (0.25, 9, LOCAL_TEST_TAG)):
        rng = np.random.default_rng([seed, tag])  # the reference loop (Siren's holdout)
        ref_kept, ref_held = [], []
        for rows in parts:
            n = len(rows)
            k = min(max(1, int(round(fraction * n))), n - 1) if n >= 2 else 0
            perm = rng.permutation(len(rows))
            ref_held.append(np.sort(rows[perm[:k]]))
            ref_kept.append(np.sort(rows[perm[k:]]))
        kept, held = source.split(fraction, seed=seed, tag=tag)
        assert isinstance(kept, PartitionData) and isinstance(held, PartitionData)
        assert all(np.array_equal(a, b) for a, b in zip(kept.to_lists(), ref_kept, strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(held.to_lists(), ref_held, strict=True))
    assert held.sizes(np.array([len(parts) - 1])).tolist() == [0]


def test_partition_local_test_is_held_part_of_training_rows() -> None:
    source = PartitionData.from_lists(partition(TRAIN_LABELS[:500], 10, "iid", seed=0))
    train, test, pool = with_local_test(source, 0.2, seed=4)
    assert pool == "train" and source.local_test_pool == "train"
    ref_kept, ref_held = source.split(0.2, seed=4, tag=LOCAL_TEST_TAG)
    assert _same(test.rows(range(10)), ref_held.rows(range(10)))
    assert _same(source.local_test(0.2, seed=4).rows(range(10)), ref_held.rows(range(10)))
    assert _same(train.rows(range(10)), ref_kept.rows(range(10)))
    for c in range(10):  # disjoint, together the client's rows; 50 rows -> 10 held out
        a, b = train.rows([c]).index[0], test.rows([c]).index[0]
        assert len(b) == 10 and not set(a) & set(b)
        assert np.array_equal(np.sort(np.concatenate([a, b])), source.rows([c]).index[0])


# --------------------------------------------------------------------------- natural


def test_natural_data_matches_natural_partition_and_errors() -> None:
    groups = np.array([3, 3, 1, 7, 1, 9, 9, 9, 3, 7])
    labels = np.zeros(len(groups), dtype=np.int64)
    nat = NaturalData.from_groups(groups, 3, seed=2)
    ref = partition(labels, 3, "natural", seed=2, groups=groups)
    assert [r.tolist() for r in nat.to_lists()] == [r.tolist() for r in ref]
    for c in range(3):  # each client is exactly one writer's rows
        assert nat.rows([c]).index[0].tolist() == np.flatnonzero(groups == nat.writers[c]).tolist()
    assert len(set(nat.writers.tolist())) == 3 and set(nat.writers.tolist()) <= {1, 3, 7, 9}
    assert NaturalData.from_groups(groups, 4, seed=0).sizes(np.arange(4)).sum() == 10
    with pytest.raises(ValueError, match="num_clients=5 exceeds the 4 writers"):
        NaturalData.from_groups(groups, 5, seed=0)


# --------------------------------------------------------------------------- virtual


def test_virtual_sizes_equal_rows_and_are_deterministic() -> None:
    v = _virtual()
    ids = np.array([5, 999, 0, 5, 123])
    r = v.rows(ids)
    assert r.x is None and r.y is None and len(r.index) == 5
    assert [len(i) for i in r.index] == v.sizes(ids).tolist()
    assert np.array_equal(r.index[0], r.index[3])  # the same id twice in one call
    # asked alone, in another order, or from a fresh object: same rows
    assert np.array_equal(v.rows([123]).index[0], r.index[4])
    assert _same(_virtual().rows(ids[::-1]), ClientRows(None, None, r.index[::-1]))
    for rows in r.index:
        assert rows.dtype == np.int64 and np.all(np.diff(rows) >= 0)
        assert rows.min() >= 0 and rows.max() < len(TRAIN_LABELS)
    other = _virtual(seed=4).rows(ids)
    assert not _same(other, r)


def test_virtual_size_distribution() -> None:
    v = _virtual(100_000, size_median=40, size_sigma=1.0, size_min=5, size_max=400)
    n = v.sizes(np.arange(100_000))
    assert n.dtype == np.int64 and n.min() == 5 and n.max() == 400
    assert abs(np.median(n) - 40) <= 1
    # P(n <= 5) = P(z <= ln(5.5/40)) = Phi(-1.98) ~ 2.4 %, clipped at the minimum
    assert abs((n == 5).mean() - 0.024) < 0.003
    # sigma 0 and equal bounds: every client has exactly the median / the bound
    assert set(_virtual(size_sigma=0.0).sizes(np.arange(50)).tolist()) == {40}
    assert set(_virtual(size_min=7, size_max=7).sizes(np.arange(50)).tolist()) == {7}


def _mix(rows: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return np.bincount(labels[rows], minlength=10) / len(rows)


def test_virtual_label_mix_follows_alpha() -> None:
    big = dict(size_median=2000, size_sigma=0.0, size_min=1, size_max=5000)
    skewed = _virtual(50, alpha=0.05, **big).rows(range(20)).index
    shares = np.array([np.sort(_mix(r, TRAIN_LABELS))[::-1] for r in skewed])
    # one class dominates (E[max share] of Dir(0.05) over 10 classes is about 0.75), two
    # classes hold nearly everything and no client has more than 4 classes above 5 %
    assert shares[:, 0].mean() > 0.6 and shares[:, :2].sum(axis=1).mean() > 0.85
    assert (shares > 0.05).sum(axis=1).max() <= 4
    flat = _virtual(50, alpha=100.0, **big).rows(range(20)).index
    for r in flat:  # near uniform: every class about 10 %
        assert np.abs(_mix(r, TRAIN_LABELS) - 0.1).max() < 0.05
    # each class has 2,000 rows: drawn without replacement up to 2,000, with it beyond
    for size, repeats in ((2000, False), (5000, True)):
        one = (
            _virtual(5, alpha=1e-3, size_median=size, size_sigma=0.0, size_min=1, size_max=5000)
            .rows([0])
            .index[0]
        )
        top = np.argmax(np.bincount(TRAIN_LABELS[one]))
        of_top = one[TRAIN_LABELS[one] == top]
        assert len(of_top) > 0.9 * size
        assert (len(np.unique(of_top)) < len(of_top)) == repeats


def test_virtual_pool_restricts_rows() -> None:
    pool = np.arange(0, 20_000, 3)
    v = _virtual(pool=pool)
    for rows in v.rows(range(30)).index:
        assert np.all(np.isin(rows, pool))
    with pytest.raises(ValueError):
        _virtual(pool=np.array([20_000]))


def test_virtual_local_test_has_clients_label_mix() -> None:
    big = dict(alpha=0.5, size_median=3000, size_sigma=0.0, size_min=1, size_max=5000)
    v = _virtual(10, **big)
    train, test, pool = with_local_test(v, 1.0, seed=1)
    assert pool == "test" and train is v
    tr, te = v.rows([0, 1]).index, test.rows([0, 1]).index
    assert test.sizes(np.array([0, 1])).tolist() == [3000, 3000] == [len(t) for t in te]
    for c in range(2):
        assert te[c].min() >= 0 and te[c].max() < len(TEST_LABELS)
        tv = 0.5 * np.abs(_mix(tr[c], TRAIN_LABELS) - _mix(te[c], TEST_LABELS)).sum()
        assert tv < 0.05  # same mix up to sampling noise
    other = 0.5 * np.abs(_mix(tr[0], TRAIN_LABELS) - _mix(tr[1], TRAIN_LABELS)).sum()
    assert other > 0.2  # while two clients' mixes differ
    # size max(1, round(fraction * n)); deterministic and order-free
    small = _virtual(100).local_test(0.1, seed=2)
    n = _virtual(100).sizes(np.arange(100))
    assert small.sizes(np.arange(100)).tolist() == np.maximum(1, np.rint(0.1 * n)).tolist()
    assert _same(small.rows([7, 3]), ClientRows(None, None, small.rows([3, 7]).index[::-1]))
    with pytest.raises(ValueError, match="test_labels"):
        _virtual(test_labels=None).local_test(0.1, seed=0)


def test_virtual_split_on_demand() -> None:
    v = _virtual()
    kept, held = v.split(0.2, seed=0, tag=9)
    ids = np.array([4, 77, 500])
    for c, k, h, full in zip(
        ids, kept.rows(ids).index, held.rows(ids).index, v.rows(ids).index, strict=True
    ):
        n = len(full)
        assert len(h) == min(max(1, round(0.2 * n)), n - 1)
        assert np.array_equal(np.sort(np.concatenate([k, h])), full)
        perm = np.random.default_rng([0, 9, int(c)]).permutation(n)
        assert np.array_equal(h, np.sort(full[perm[: len(h)]]))
    assert kept.sizes(ids).tolist() == [len(k) for k in kept.rows(ids).index]
    assert np.array_equal(held.rows([77]).index[0], held.rows(ids).index[1])


def test_virtual_billion_clients_costs_nothing_per_client() -> None:
    small = _virtual(10)
    tracemalloc.start()
    try:
        v = _virtual(10**9)
        ids = np.arange(1000) * 999_999 + 7  # spread over the whole id range
        n = v.sizes(ids)
        rows = v.rows(ids).index
        test_rows = v.local_test(0.2, seed=0).rows(ids[:50]).index
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert v.nbytes() == small.nbytes()  # nothing held per client
    assert peak < 20 * 2**20  # an array of 10**9 ids would be 8 GB
    assert [len(r) for r in rows] == n.tolist() and len(test_rows) == 50
    assert rows[-1].max() < len(TRAIN_LABELS)


# --------------------------------------------------------------------------- synthetic


def test_synthetic_devices_reproduce_the_recipe() -> None:
    dev = SyntheticDevices(10**6, seed=1, alpha=0.5, beta=0.5)
    r = dev.rows([3, 999_999, 3])
    assert r.x is not None and r.y is not None
    assert r.x.dtype == np.float32 and r.x.shape[1] == 60 and r.y.dtype == np.int64
    assert np.array_equal(r.x[r.index[0]], r.x[r.index[2]])
    alone = dev.rows([3])
    assert np.array_equal(alone.x[alone.index[0]], r.x[r.index[0]])
    # device 3 by hand from default_rng([seed, TAG, 3])
    n = int(dev.total_sizes(np.array([3]))[0])
    rng = np.random.default_rng([1, SYNTH_TAG, 3])
    u, big_b = rng.normal(0, 0.5), rng.normal(0, 0.5)
    w, b, v = rng.normal(u, 1, (10, 60)), rng.normal(u, 1, 10), rng.normal(big_b, 1, 60)
    x = v + rng.standard_normal((n, 60)) * np.arange(1, 61) ** -0.6
    y = np.argmax(x @ w.T + b, axis=1)
    n_test = min(round(0.2 * n), n - 1)
    tr = rng.permutation(n)[n_test:]
    assert np.array_equal(alone.x, x[tr].astype(np.float32))
    assert np.array_equal(alone.y, y[tr])
    assert dev.sizes(np.array([3])).tolist() == [n - n_test]


def test_synthetic_sizes_and_local_test() -> None:
    dev = SyntheticDevices(10**6, seed=0, alpha=1.0, beta=1.0)
    ids = np.arange(20_000)
    total = dev.total_sizes(ids)
    z = hash_normal(0, ids, 0x5E7E)
    assert np.array_equal(
        total, np.minimum(np.floor(np.exp(4 + 2 * z)).astype(np.int64) + 50, 1000)
    )
    assert total.min() == 50 and total.max() == 1000  # floor(exp(.)) = 0 for z < -2
    assert abs(np.median(total) - (np.exp(4) + 50)) < 5  # median of lognormal(4, 2) + 50
    ids = np.array([0, 1, 2, 17])
    n = dev.sizes(ids)
    test = dev.local_test(0.1, seed=0)  # the device's own held-out part (test_fraction 0.2)
    nt = test.sizes(ids)
    assert np.array_equal(nt, np.minimum(np.rint(0.2 * (n + nt)), n + nt - 1))
    tr, te = dev.rows(ids), test.rows(ids)
    assert [len(i) for i in tr.index] == n.tolist() and [len(i) for i in te.index] == nt.tolist()
    x_tr, y_tr, x_te, y_te = dev.device(17)
    assert np.array_equal(te.x[te.index[3]], x_te) and np.array_equal(te.y[te.index[3]], y_te)
    assert dev.nbytes() == SyntheticDevices(5, seed=0, alpha=1.0, beta=1.0).nbytes()
    # split on generated samples: index refers to the returned x/y
    kept, held = dev.split(0.5, seed=0, tag=1)
    hk, hh = kept.rows([1]), held.rows([1])
    assert len(hk.index[0]) + len(hh.index[0]) == n[1]
    assert not set(hk.index[0]) & set(hh.index[0])


def test_synthetic_iid_sizes_by_hand_and_test_set() -> None:
    # min_samples = max_samples = 100: every device has 100 samples, 20 held out
    dev = SyntheticDevices(
        7, seed=2, alpha=0.0, beta=0.0, iid=True, min_samples=100, max_samples=100
    )
    assert dev.sizes(np.arange(7)).tolist() == [80] * 7
    x, y = synthetic_test_set(dev)  # count 100 > 7 devices: all of them
    assert x.shape == (140, 60) and y.shape == (140,) and x.dtype == np.float32
    x3, y3 = synthetic_test_set(dev, count=3)
    assert np.array_equal(x3, x[:60]) and np.array_equal(y3, y[:60])
    assert np.array_equal(x[20:40], dev.device(1)[2])
    # iid: one shared model, zero feature mean -> features centred near 0
    assert abs(float(dev.rows(range(7)).x.mean())) < 0.05


def test_sources_are_exported_by_the_package() -> None:
    """Every client source is one import away, from ``simulator.data`` (its ``__init__``; no
    lazy module ``__getattr__`` re-exports them from ``clients``)."""
    import simulator.data as data
    from simulator.data import clients

    assert data.VirtualData is VirtualData
    assert data.SyntheticDevices is SyntheticDevices
    assert data.synthetic_test_set is synthetic_test_set
    assert (data.PartitionData, data.NaturalData) == (PartitionData, NaturalData)
    assert data.ClientRows is ClientRows
    assert "__getattr__" not in vars(clients)
    with pytest.raises(AttributeError):
        clients.VirtualData  # noqa: B018
