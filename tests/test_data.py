"""Tests for simulator.data's loaders and on-disk formats (the partitioners, the public split
and feature shift are in tests/test_partition.py)."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from label_skew import label_tv

from simulator.data import (
    DATASETS,
    DataError,
    Dataset,
    load_dataset,
    partition,
)


@pytest.fixture(scope="module")
def mnist5k() -> Dataset:
    return load_dataset("mnist5k", seed=0)


def test_digits_shapes_and_stratified_split() -> None:
    d = load_dataset("digits", seed=0)
    assert (len(d.y_train), len(d.y_test)) == (1438, 359)
    assert d.x_train.shape == (1438, 1, 8, 8) and d.x_test.shape == (359, 1, 8, 8)
    assert d.input_shape == (1, 8, 8) and d.num_classes == 10 and d.groups is None
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0
    total = np.bincount(d.y_train, minlength=10) + np.bincount(d.y_test, minlength=10)
    assert total.sum() == 1797
    assert np.all(np.abs(np.bincount(d.y_test, minlength=10) - 0.2 * total) <= 1)


def test_mnist5k_shapes_and_balance(mnist5k: Dataset) -> None:
    d = mnist5k
    assert d.x_train.shape == (4000, 1, 28, 28) and d.x_test.shape == (1000, 1, 28, 28)
    assert d.input_shape == (1, 28, 28) and d.num_classes == 10
    assert d.x_train.dtype == np.float32 and d.y_test.dtype == np.int64
    assert d.x_train.min() == 0.0 and d.x_train.max() == 1.0
    # the CSV holds 500 per class, label last: a stratified 20 % split is exactly 400/100
    assert np.bincount(d.y_train).tolist() == [400] * 10
    assert np.bincount(d.y_test).tolist() == [100] * 10
    # real digits: mean "ink" per image is about 0.13 of the frame
    assert 0.08 < float(d.x_train.mean()) < 0.2


@pytest.mark.parametrize("name", ["digits", "mnist5k", "synthetic"])
def test_same_seed_identical_other_seed_differs(name: str) -> None:
    a, b, c = (load_dataset(name, seed=s) for s in (3, 3, 4))
    for field in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert a.x_test.shape != c.x_test.shape or not np.array_equal(a.x_test, c.x_test)


def test_mnist1d_generated_locally_and_seeded() -> None:
    np.random.seed(123)
    a = load_dataset("mnist1d", seed=1, num_samples=1000)
    after = np.random.rand()
    np.random.seed(123)
    assert after == np.random.rand()  # the package's global seeding is undone
    assert a.x_train.shape == (800, 40) and a.x_test.shape == (200, 40)
    assert a.input_shape == (40,) and a.num_classes == 10
    assert a.x_train.dtype == np.float32 and set(np.unique(a.y_train)) == set(range(10))
    b = load_dataset("mnist1d", seed=1, num_samples=1000)
    c = load_dataset("mnist1d", seed=2, num_samples=1000)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x_train, c.x_train)


def test_fedprox_synthetic_shapes_and_groups() -> None:
    d = load_dataset("synthetic", seed=0, alpha=0.5, beta=0.5, num_devices=12)
    assert d.input_shape == (60,) and d.x_train.shape[1:] == (60,) and d.num_classes == 10
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.groups is not None and d.groups.dtype == np.int64
    assert np.unique(d.groups).tolist() == list(range(12))
    sizes = np.bincount(d.groups)
    assert sizes.min() >= 40 and sizes.max() <= 800  # 50..1000 per device, 80 % train
    assert len(d.y_test) == pytest.approx(0.25 * len(d.y_train), rel=0.02)
    assert set(np.unique(d.y_train)) <= set(range(10)) and len(np.unique(d.y_train)) >= 5


def test_fedprox_synthetic_heterogeneity() -> None:
    def device_stats(**kw: object) -> tuple[float, float]:
        d = load_dataset("synthetic", seed=0, **kw)
        assert d.groups is not None
        parts = [np.flatnonzero(d.groups == k) for k in range(30)]
        spread = float(np.std([d.x_train[p].mean() for p in parts]))
        return spread, label_tv(d.y_train, parts, 10)

    spread00, tv00 = device_stats(alpha=0.0, beta=0.0)
    spread11, tv11 = device_stats(alpha=1.0, beta=1.0)
    spread_iid, tv_iid = device_stats(iid=True)
    # beta shifts each device's feature mean by B_k ~ N(0, 1): spread sqrt(1 + 1/60) vs 1/sqrt(60)
    assert spread00 < 0.3 and spread11 > 0.7 and spread_iid < 0.1
    # non-IID devices have their own model: label histograms far from the global one
    assert tv00 > 0.5 and tv11 > 0.5 and tv_iid < 0.2


def _write_idx(path: Path, arr: np.ndarray) -> None:
    """Write uint8 idx: magic 0x0800 | ndim (2049 labels, 2051 images), big-endian dims."""
    payload = struct.pack(f">I{arr.ndim}I", 0x0800 | arr.ndim, *arr.shape)
    payload += arr.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(payload) if path.suffix == ".gz" else payload)


def _write_mnist(root: Path, gz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    xtr = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    xte = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    ext = ".gz" if gz else ""
    _write_idx(root / f"train-images-idx3-ubyte{ext}", xtr)
    _write_idx(root / f"train-labels-idx1-ubyte{ext}", np.array([0, 1, 2, 3, 4, 5, 9]))
    _write_idx(root / f"t10k-images-idx3-ubyte{ext}", xte)
    _write_idx(root / f"t10k-labels-idx1-ubyte{ext}", np.array([7, 8, 9]))
    return xtr, xte


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_roundtrip(tmp_path: Path, gz: bool) -> None:
    xtr, xte = _write_mnist(tmp_path, gz)
    if not gz:  # the helper writes the standard magic numbers
        head = (tmp_path / "train-images-idx3-ubyte").read_bytes()[:16]
        assert struct.unpack(">4I", head) == (2051, 7, 28, 28)
    d = load_dataset("mnist_idx", seed=0, path=str(tmp_path))
    assert d.x_train.shape == (7, 1, 28, 28) and d.x_test.shape == (3, 1, 28, 28)
    assert d.input_shape == (1, 28, 28) and d.x_train.dtype == np.float32
    assert d.y_train.tolist() == [0, 1, 2, 3, 4, 5, 9] and d.y_test.tolist() == [7, 8, 9]
    np.testing.assert_allclose(d.x_train[:, 0], xtr / 255.0, rtol=1e-6)
    np.testing.assert_allclose(d.x_test[2, 0, 5], xte[2, 5] / 255.0, rtol=1e-6)


def test_mnist_idx_errors_name_the_file(tmp_path: Path) -> None:
    _write_mnist(tmp_path)
    bad = tmp_path / "train-images-idx3-ubyte"
    good = bad.read_bytes()
    bad.write_bytes(struct.pack(">I", 0x12345678) + good[4:])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*magic"):
        load_dataset("mnist_idx", seed=0, path=str(tmp_path))
    bad.write_bytes(good[:-10])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*truncated"):
        load_dataset("mnist_idx", seed=0, path=str(tmp_path))
    bad.write_bytes(good)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.*not found"):
        load_dataset("mnist_idx", seed=0, path=str(tmp_path))
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([1, 2]))  # 3 images, 2 labels
    with pytest.raises(DataError, match="3 images.*2 labels"):
        load_dataset("mnist_idx", seed=0, path=str(tmp_path))


def _write_cifar(root: Path) -> None:
    root.mkdir()
    for i in range(1, 6):
        data = np.full((2, 3072), 10 * i, dtype=np.uint8)
        data[0, 1024] = 255  # first pixel of the green plane
        batch = {b"batch_label": b"training batch", b"data": data, b"labels": [i, 9 - i]}
        (root / f"data_batch_{i}").write_bytes(pickle.dumps(batch, protocol=2))
    test = {b"data": np.zeros((3, 3072), dtype=np.uint8), b"labels": [0, 1, 2]}
    (root / "test_batch").write_bytes(pickle.dumps(test))


def test_cifar10_batches(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    _write_cifar(root)
    d = load_dataset("cifar10", seed=0, path=str(root))
    assert d.x_train.shape == (10, 3, 32, 32) and d.x_test.shape == (3, 3, 32, 32)
    assert d.input_shape == (3, 32, 32) and d.num_classes == 10
    assert d.y_train.tolist() == [1, 8, 2, 7, 3, 6, 4, 5, 5, 4]
    assert d.x_train[0, 1, 0, 0] == 1.0 and d.x_train[0, 0, 0, 0] == pytest.approx(10 / 255)
    assert d.x_train[9, 2, 31, 31] == pytest.approx(50 / 255)


def test_cifar10_missing_and_malicious_batches(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    _write_cifar(root)
    (root / "data_batch_3").unlink()
    with pytest.raises(DataError, match="data_batch_3"):
        load_dataset("cifar10", seed=0, path=str(root))

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    (root / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(), b"labels": [0]}))
    with pytest.raises(DataError, match="data_batch_3.*refusing"):
        load_dataset("cifar10", seed=0, path=str(root))


def _leaf_doc(users: dict[str, list[int]], fill: float) -> dict[str, object]:
    return {
        "users": list(users),
        "num_samples": [len(y) for y in users.values()],
        "user_data": {u: {"x": [[fill] * 784 for _ in y], "y": y} for u, y in users.items()},
    }


def test_femnist_leaf(tmp_path: Path) -> None:
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    (tmp_path / "train" / "a.json").write_text(json.dumps(_leaf_doc({"f_b": [3, 61]}, 0.5)))
    (tmp_path / "train" / "b.json").write_text(
        json.dumps(_leaf_doc({"f_a": [1, 2, 0], "f_c": [7]}, 1.0))
    )
    (tmp_path / "test" / "a.json").write_text(json.dumps(_leaf_doc({"f_a": [5], "f_b": [6]}, 0.0)))
    d = load_dataset("femnist_leaf", seed=0, path=str(tmp_path))
    assert d.x_train.shape == (6, 1, 28, 28) and d.x_test.shape == (2, 1, 28, 28)
    assert d.num_classes == 62 and d.input_shape == (1, 28, 28)
    # users sorted: f_a -> 0, f_b -> 1, f_c -> 2
    assert d.y_train.tolist() == [1, 2, 0, 3, 61, 7]
    assert d.groups is not None and d.groups.tolist() == [0, 0, 0, 1, 1, 2]
    assert d.x_train[3].max() == 0.5 and d.y_test.tolist() == [5, 6]
    parts = partition(d.y_train, 3, "natural", seed=0, groups=d.groups)
    assert sorted(p.tolist() for p in parts) == [[0, 1, 2], [3, 4], [5]]

    (tmp_path / "test" / "a.json").write_text("{not json")
    with pytest.raises(DataError, match="a.json.*JSON"):
        load_dataset("femnist_leaf", seed=0, path=str(tmp_path))


def test_registry_errors(tmp_path: Path) -> None:
    assert {
        "digits",
        "mnist5k",
        "synthetic",
        "mnist1d",
        "mnist_idx",
        "cifar10",
        "femnist_leaf",
    } <= set(DATASETS)
    with pytest.raises(DataError, match="unknown dataset 'mnist'.*cifar10.*digits"):
        load_dataset("mnist", seed=0)
    with pytest.raises(DataError, match="needs path"):
        load_dataset("cifar10", seed=0)
    with pytest.raises(DataError, match="not a directory"):
        load_dataset("femnist_leaf", seed=0, path=str(tmp_path / "nope"))
    with pytest.raises(DataError, match="unknown parameter.*'gamma'.*alpha"):
        load_dataset("synthetic", seed=0, gamma=1.0)
    with pytest.raises(DataError, match="test_fraction"):
        load_dataset("digits", seed=0, test_fraction=1.5)
    assert issubclass(DataError, ValueError)


def test_digits_are_read_once_and_loads_stay_independent() -> None:
    """The digits are parsed once a process; each load still gets its own arrays."""
    from simulator.data.datasets import digits

    digits._digits.cache_clear()
    a = load_dataset("digits", seed=0)
    a.x_train[...] = -1.0
    b = load_dataset("digits", seed=0)
    assert digits._digits.cache_info().hits == 1
    assert b.x_train.min() == 0.0 and not (a.x_train == b.x_train).all()
    with pytest.raises(ValueError, match="read-only"):
        digits._digits()[0][0, 0] = 1.0
