"""Datasets users bring (MNIST idx, CIFAR-10 python batches, LEAF FEMNIST json) with bad values:
each is refused with one line naming the file (and the user, for LEAF) and what is wrong; no
value is converted silently and no traceback escapes the command line (exit code 2)."""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator.data import DataError, load_dataset

# ---- tiny files -----------------------------------------------------------------------------


def cifar(root: Path, **batches: dict[str, Any]) -> Path:
    """data_batch_1..5 and test_batch of 2 images each (labels 1 and 2); ``batches`` replaces
    fields of the named batch (``test_batch={"labels": [None, None]}``)."""
    root.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch: dict[Any, Any] = {b"data": np.full((2, 3072), 7, np.uint8), b"labels": [1, 2]}
        batch.update({k.encode(): v for k, v in batches.get(name, {}).items()})
        (root / name).write_bytes(pickle.dumps(batch))
    return root


def leaf_doc(users: dict[str, Any], width: int = 784, **over: Any) -> dict[str, Any]:
    """A LEAF shard: each user's labels ``y``, and ``x`` rows of ``width`` values 0.5."""
    doc = {
        "users": list(users),
        "num_samples": [len(y) for y in users.values()],
        "user_data": {u: {"x": [[0.5] * width for _ in y], "y": y} for u, y in users.items()},
    }
    doc.update(over)
    return doc


def leaf(root: Path, train: list[dict[str, Any]], test: list[dict[str, Any]] | None = None) -> Path:
    for split, docs in (("train", train), ("test", test or [leaf_doc({"t": [0, 1]})])):
        (root / split).mkdir(parents=True)
        for i, doc in enumerate(docs):
            (root / split / f"s{i}.json").write_text(json.dumps(doc))
    return root


def idx(path: Path, arr: np.ndarray, code: int = 0x08) -> None:
    """An idx file: magic 0x00 0x00 <type> <ndim>, big-endian dims, big-endian data."""
    dtype = {0x08: ">u1", 0x0D: ">f4"}[code]
    head = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    path.write_bytes(head + arr.astype(dtype).tobytes())


def mnist(root: Path, train_labels: np.ndarray | None = None, code: int = 0x08) -> Path:
    root.mkdir()
    y = np.array([0, 1, 2, 3]) if train_labels is None else train_labels
    idx(root / "train-images-idx3-ubyte", np.zeros((len(y), 28, 28)))
    idx(root / "train-labels-idx1-ubyte", y, code)
    idx(root / "t10k-images-idx3-ubyte", np.zeros((2, 28, 28)))
    idx(root / "t10k-labels-idx1-ubyte", np.array([5, 6]))
    return root


# ---- the cases: (dataset, files, the file at fault, what the message says after its name) ----

Make = Callable[[Path], Path]
LABEL_NONE = "label None (item 0) is not a whole number"
CASES: dict[str, tuple[str, Make, str, str]] = {
    "cifar-null-labels": (
        "cifar10",
        lambda p: cifar(p, data_batch_2={"labels": [None, None]}),
        "data_batch_2",
        LABEL_NONE,
    ),
    "cifar-text-labels": (
        "cifar10",
        lambda p: cifar(p, data_batch_2={"labels": ["cat", "cat"]}),
        "data_batch_2",
        "label 'cat' (item 0) is not a whole number",
    ),
    "cifar-fraction-labels": (
        "cifar10",
        lambda p: cifar(p, test_batch={"labels": [1.0, 1.5]}),
        "test_batch",
        "label 1.5 (item 1) is not a whole number",
    ),
    "cifar-bool-labels": (
        "cifar10",
        lambda p: cifar(p, test_batch={"labels": [True, False]}),
        "test_batch",
        "label True (item 0) is not a whole number",
    ),
    "cifar-2d-labels": (
        "cifar10",
        lambda p: cifar(p, data_batch_1={"labels": np.zeros((2, 1), np.int64)}),
        "data_batch_1",
        "labels have shape (2, 1), expected a flat list",
    ),
    "cifar-label-10": (
        "cifar10",
        lambda p: cifar(p, data_batch_5={"labels": [9, 10]}),
        "data_batch_5",
        "labels outside 0..9 (item 1 is 10)",
    ),
    "cifar-float-data": (
        "cifar10",
        lambda p: cifar(p, data_batch_1={"data": np.full((2, 3072), 3.0)}),
        "data_batch_1",
        "data holds float64 values, expected uint8 pixels 0..255",
    ),
    "cifar-data-300": (  # astype(uint8) made 300 into 44
        "cifar10",
        lambda p: cifar(p, data_batch_1={"data": np.full((2, 3072), 300, np.int64)}),
        "data_batch_1",
        "data values run 300..300, expected pixels 0..255",
    ),
    "cifar-ragged-data": (
        "cifar10",
        lambda p: cifar(p, test_batch={"data": [[1, 2], [3]]}),
        "test_batch",
        "data rows are ragged, expected [N, 3072] uint8",
    ),
    "cifar-empty-test": (  # the run scored accuracy 0.0 on no images
        "cifar10",
        lambda p: cifar(p, test_batch={"data": np.zeros((0, 3072), np.uint8), "labels": []}),
        "test_batch",
        "batch holds no images (data has shape (0, 3072))",
    ),
    "cifar-count-mismatch": (
        "cifar10",
        lambda p: cifar(p, test_batch={"labels": [1, 2, 3]}),
        "test_batch",
        "data has 2 images but 3 labels",
    ),
    "leaf-null-y": (
        "femnist_leaf",
        lambda p: leaf(p, [leaf_doc({"a": [1, None]})]),
        "train/s0.json",
        "user 'a': label None (item 1) is not a whole number",
    ),
    "leaf-fraction-y": (  # was truncated to 1
        "femnist_leaf",
        lambda p: leaf(p, [leaf_doc({"a": [1.7, 2]})]),
        "train/s0.json",
        "user 'a': label 1.7 (item 0) is not a whole number",
    ),
    "leaf-shard-widths": (  # numpy: 'all the input array dimensions ... must match'
        "femnist_leaf",
        lambda p: leaf(p, [leaf_doc({"a": [1]}), leaf_doc({"b": [2]}, width=100)]),
        "train/s1.json",
        "user 'b': samples have 100 values, expected 784",
    ),
    "leaf-null-x-row": (
        "femnist_leaf",
        lambda p: leaf(p, [{**leaf_doc({"a": [1]}), "user_data": {"a": {"x": [None], "y": [1]}}}]),
        "train/s0.json",
        "user 'a': x holds None, not a number",
    ),
    "leaf-text-x": (
        "femnist_leaf",
        lambda p: leaf(p, [{"users": ["a"], "user_data": {"a": {"x": "abc", "y": [1]}}}]),
        "train/s0.json",
        "user 'a': x holds 'abc', not a number",
    ),
    "leaf-num-samples-length": (
        "femnist_leaf",
        lambda p: leaf(p, [leaf_doc({"a": [1, 2]}, num_samples=[2, 0])]),
        "train/s0.json",
        "num_samples has 2 entries for 1 users",
    ),
    "leaf-num-samples-short": (  # the memory check reads num_samples: it must be true
        "femnist_leaf",
        lambda p: leaf(p, [leaf_doc({"a": [1, 2], "b": [3]}, num_samples=[1, 1])]),
        "train/s0.json",
        "num_samples gives 1 for user 'a', who has 2 samples",
    ),
    "leaf-user-data-list": (
        "femnist_leaf",
        lambda p: leaf(p, [{"users": ["a"], "user_data": [1, 2]}]),
        "train/s0.json",
        "not a LEAF file, field 'user_data' is a list",
    ),
    "leaf-empty-test": (  # numpy: 'need at least one array to concatenate'
        "femnist_leaf",
        lambda p: leaf(
            p, [leaf_doc({"a": [1]})], [{"users": [], "num_samples": [], "user_data": {}}]
        ),
        "test",
        "no samples: its LEAF files (s0.json) list no user with data",
    ),
    "mnist-float-labels": (  # float32 0.5 was truncated to 0
        "mnist_idx",
        lambda p: mnist(p, np.array([0.5, 1.5, 2.5, 3.5]), code=0x0D),
        "train-labels-idx1-ubyte",
        "label 0.5 (item 0) is not a whole number",
    ),
    "mnist-no-images": (
        "mnist_idx",
        lambda p: mnist(p, np.zeros(0)),
        "train-images-idx3-ubyte",
        "holds no images (header dims (0, 28, 28))",
    ),
    "mnist-label-12": (
        "mnist_idx",
        lambda p: mnist(p, np.array([0, 1, 12, 3])),
        "train-labels-idx1-ubyte",
        "labels outside 0..9 (item 2 is 12)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_value_is_one_line_naming_the_file(tmp_path: Path, case: str) -> None:
    dataset, make, at_fault, what = CASES[case]
    root = make(tmp_path / "d")
    with pytest.raises(DataError) as e:
        load_dataset(dataset, seed=0, path=str(root))
    assert str(e.value) == f"{root / at_fault}: {what}"


@pytest.mark.parametrize("case", ["cifar-null-labels", "leaf-null-y", "leaf-shard-widths"])
def test_the_command_line_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    from simulator.cli import main

    dataset, make, at_fault, what = CASES[case]
    root = make(tmp_path / "d")
    argv = ["--dataset", dataset, "--data-path", str(root), "--model", "logreg"]
    argv += [
        "--num-clients",
        "2",
        "--clients-per-round",
        "2",
        "--rounds",
        "1",
        "--backend",
        "local",
    ]
    argv += ["--out", str(tmp_path / "out"), "--no-plots", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"error: {root / at_fault}: {what}\n"


def test_whole_numbers_stored_as_floats_are_taken(tmp_path: Path) -> None:
    """3.0 is 3: nothing changes, so nothing is refused (LEAF json and float idx labels)."""
    d = load_dataset(
        "femnist_leaf", seed=0, path=str(leaf(tmp_path / "l", [leaf_doc({"a": [2.0]})]))
    )
    assert d.y_train.tolist() == [2] and d.y_train.dtype == np.int64
    root = mnist(tmp_path / "m", np.array([0.0, 1.0, 9.0, 3.0]), code=0x0D)
    assert load_dataset("mnist_idx", seed=0, path=str(root)).y_train.tolist() == [0, 1, 9, 3]


def test_cifar_labels_stored_as_numpy_scalars_load(tmp_path: Path) -> None:
    """A list of np.int64 labels pickles through numpy's ``scalar`` (a dtype and 8 raw bytes),
    which the unpickler allows; other globals are still refused."""
    labels = [np.int64(3), np.int64(4)]
    root = cifar(tmp_path / "c", data_batch_1={"labels": labels})
    assert b"scalar" in (root / "data_batch_1").read_bytes()
    d = load_dataset("cifar10", seed=0, path=str(root))
    assert d.y_train[:2].tolist() == [3, 4] and d.y_train.dtype == np.int64

    class Evil:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (print, ("pwned",))

    (root / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil(), b"labels": labels}))
    with pytest.raises(DataError, match=r"data_batch_1: .*refusing to load global builtins.print"):
        load_dataset("cifar10", seed=0, path=str(root))
