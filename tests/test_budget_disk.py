"""The memory check sizes a dataset read with ``--data-path`` from what is on disk, before loading
it (``simulator/data/disk_size.py``): idx headers, CIFAR batch sizes, LEAF ``num_samples``; a
small set is sized small, a full-size one as large as before."""

from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import small_config

from simulator.config.fields import ConfigError
from simulator.data.disk_size import OnDisk, rows_on_disk
from simulator.run.budget import check_budget, dataset_size, estimate, model_layout


def leaf_split(root: Path, writers: int, samples: int) -> Path:
    """``root/train/s0.json`` with ``writers`` users of ``samples`` rows of 784 values."""
    (root / "train").mkdir(parents=True)
    users = [f"f{u:04d}" for u in range(writers)]
    doc = {
        "users": users,
        "num_samples": [samples] * writers,
        "user_data": {u: {"x": [[0.5] * 784] * samples, "y": [1] * samples} for u in users},
    }
    (root / "train" / "s0.json").write_text(json.dumps(doc))
    return root


def leaf_config(tmp_path: Path, root: Path, **over: Any) -> Any:
    flat = {"dataset": "femnist_leaf", "partition": "natural", "model": "logreg"}
    flat.update(num_clients=12, rounds=1, data_path=str(root), **over)
    return small_config(tmp_path / "run", **flat)


def test_a_small_leaf_set_is_sized_from_its_num_samples(tmp_path: Path) -> None:
    """12 writers of 20 samples: 240 rows, not the table's 800,000 (which asked ~47 GB).

    data: two copies of 240 * 784 float32 = 2 * 4 * 240 * 784 = 1,505,280 bytes.
    round: a client holds at most 4x the mean, ceil(240 / 12) * 4 = 80 rows, 5 batches of 16;
    4 clients a round gather 4 * 5 * 16 * (784 + 2) * 4 = 1,006,080 bytes, plus 2 * 4 clients
    * 3 rows of the 784 * 62 + 62 = 48,670-parameter model * 4 bytes = 4,672,320: 5,678,400."""
    cfg = leaf_config(tmp_path, leaf_split(tmp_path / "leaf", 12, 20))
    assert dataset_size(cfg) == ((1, 28, 28), 62, 240)
    est = estimate(cfg)
    assert model_layout(cfg).size == 48_670
    assert est.dataset == 1_505_280 and est.round == 5_678_400
    check_budget(cfg, available=2e9)  # ~0.46 GB: the driver process and 7 MB


def test_a_leaf_shard_without_num_samples_is_bounded_by_its_size(tmp_path: Path) -> None:
    """A sample of 784 one-digit values takes at least 2 * 784 + 1 = 1,569 bytes of JSON: 3
    samples of zeros written compactly are 3 * 1,569 bytes plus ~60 of keys, // 1,569 = 3."""
    (tmp_path / "train").mkdir()
    doc = {"users": ["a"], "user_data": {"a": {"x": [[0] * 784] * 3, "y": [0, 1, 2]}}}
    shard = tmp_path / "train" / "s0.json"
    shard.write_text(json.dumps(doc, separators=(",", ":")))
    size = shard.stat().st_size
    assert 3 * 1569 < size < 4 * 1569
    assert rows_on_disk("femnist_leaf", str(tmp_path)) == OnDisk(3, (1, 28, 28))


def test_full_size_leaf_is_sized_as_before_and_refused(tmp_path: Path) -> None:
    """A shard declaring 2 x 400,000 samples in a file of their size (sparse here: only its
    head is read) counts 800,000 rows, the table's figure: data 2 * 4 * 800,000 * 784 bytes."""
    (tmp_path / "leaf" / "train").mkdir(parents=True)
    shard = tmp_path / "leaf" / "train" / "s0.json"
    with shard.open("wb") as fh:
        fh.write(b'{"users": ["a", "b"], "num_samples": [400000, 400000], "user_data": {')
        fh.truncate(800_000 * 1569 + 100)
    cfg = leaf_config(tmp_path, tmp_path / "leaf")
    assert dataset_size(cfg)[2] == 800_000
    assert estimate(cfg).dataset == 5_017_600_000
    with pytest.raises(ConfigError) as e:
        check_budget(cfg, available=4e9)
    msg = str(e.value)
    assert "\n" not in msg and "this run needs ~" in msg and "data 5.02" in msg


def idx_header(path: Path, dims: tuple[int, ...]) -> None:
    """Only an idx header: magic 0x00 0x00 0x08 <ndim>, then the big-endian dims."""
    head = bytes([0, 0, 8, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)
    path.write_bytes(gzip.compress(head) if path.suffix == ".gz" else head)


def test_mnist_idx_is_sized_from_its_header(tmp_path: Path) -> None:
    """The training images' header holds the count and image size: 16 bytes read."""
    idx_header(tmp_path / "train-images-idx3-ubyte", (60_000, 28, 28))
    assert rows_on_disk("mnist_idx", str(tmp_path)) == OnDisk(60_000, (1, 28, 28))
    (tmp_path / "train-images-idx3-ubyte").unlink()
    idx_header(tmp_path / "train-images-idx3-ubyte.gz", (7, 8, 8))  # through gzip
    cfg = small_config(
        tmp_path / "run", dataset="mnist_idx", data_path=str(tmp_path), model="logreg"
    )
    assert dataset_size(cfg) == ((1, 8, 8), 10, 7)
    assert model_layout(cfg).size == 8 * 8 * 10 + 10  # the model is sized for 8x8 images
    assert estimate(cfg).dataset == 2 * 4 * 7 * 64


def test_cifar_is_sized_from_its_batch_sizes(tmp_path: Path) -> None:
    """A batch of S bytes holds at most S // 3,072 images: five batches of 2 images (6,144
    bytes of pixels and ~150 of pickle each) count 10 rows; a missing batch counts none."""
    for i in range(1, 6):
        batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}
        (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps(batch))
    assert all(6144 < p.stat().st_size < 9216 for p in tmp_path.iterdir())
    cfg = small_config(tmp_path / "run", dataset="cifar10", data_path=str(tmp_path))
    assert dataset_size(cfg) == ((3, 32, 32), 10, 10)
    assert estimate(cfg).dataset == 2 * 4 * 10 * 3072
    (tmp_path / "data_batch_5").unlink()
    assert rows_on_disk("cifar10", str(tmp_path)) == OnDisk(8, (3, 32, 32))


def test_what_is_not_on_disk_counts_nothing(tmp_path: Path) -> None:
    """Missing files count 0 rows (the loader names them when it runs); datasets not read from
    files keep the table's figures."""
    assert rows_on_disk("mnist_idx", str(tmp_path)) == OnDisk(0)
    assert rows_on_disk("femnist_leaf", str(tmp_path)) == OnDisk(0, (1, 28, 28))
    assert rows_on_disk("digits", None) is None
    assert dataset_size(small_config(tmp_path / "run")) == ((1, 8, 8), 10, 1438)
