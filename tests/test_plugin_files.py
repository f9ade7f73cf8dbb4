"""Datasets and partition schemes are plugins: a file that decorates its function with
``@DATASETS.register`` / ``@PARTITIONS.register`` is found by discovery and usable by name, in the
data API and in the configuration (whose names come from the registries, not from a list).

The new files live in a temporary package on ``sys.path``; the test runs in a subprocess so the
registries it extends are not the ones the other tests see.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from simulator.data import DATASETS, PARTITIONS, dataset_path, partition
from simulator.data.virtual import VirtualData

REPO = Path(__file__).resolve().parents[1]

TINY_DATASET = '''
"""A 16-sample, 2-feature, 2-class dataset: sample i is (i, -i) with label i % 2."""
import numpy as np

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset


@DATASETS.register("tiny16")
def load_tiny(*, seed: int, test_fraction: float, scale: float = 1.0) -> Dataset:
    i = np.arange(16, dtype=np.float32)
    x = scale * np.stack([i, -i], axis=1)
    y = np.arange(16, dtype=np.int64) % 2
    return Dataset("tiny16", x[:12], y[:12], x[12:], y[12:], 2, (2,))
'''

FIRST_REST_PARTITION = '''
"""Client 0 holds the first ``first`` rows, the others share the rest in order."""
import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("first_rest")
def first_rest(labels, num_clients, *, seed, groups, first: int = 2):
    rows = np.arange(len(labels))
    return [rows[:first], *np.array_split(rows[first:], num_clients - 1)]
'''

SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from simulator.config.sections import ConfigError, build_config
from simulator.data import DATASETS, PARTITIONS, load_dataset, partition
from simulator.data.scheme_params import scheme_parameters
from simulator.run.federation import build_federation

DATASETS.discover("myplugins")
PARTITIONS.discover("myplugins")
ds = load_dataset("tiny16", seed=0, scale=2.0)
parts = partition(ds.y_train, 4, "first_rest", seed=0, first=6)
flat = {"dataset": "tiny16", "partition": "first_rest", "partition_params": {"first": 6},
        "num_clients": 4, "clients_per_round": 2, "model": "logreg", "backend": "local"}
cfg = build_config(flat=flat)
fed = build_federation(cfg)
try:
    build_config(flat={**flat, "partition": "first_rst"})
    unknown = None
except ConfigError as e:
    unknown = str(e)
print(json.dumps({
    "datasets": "tiny16" in DATASETS, "partitions": "first_rest" in PARTITIONS,
    "x_train": ds.x_train[:, 0].tolist(), "x_test_shape": list(ds.x_test.shape),
    "sizes": [len(p) for p in parts], "client0": parts[0].tolist(),
    "params": scheme_parameters("first_rest"), "kwargs": cfg.data.partition_kwargs(),
    "federation_sizes": fed.client_sizes.tolist(), "unknown": unknown}))
"""


def test_new_dataset_and_partition_files_are_discovered_and_usable(tmp_path: Path) -> None:
    pkg = tmp_path / "myplugins"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tiny16.py").write_text(textwrap.dedent(TINY_DATASET))
    (pkg / "first_rest.py").write_text(textwrap.dedent(FIRST_REST_PARTITION))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["datasets"] and got["partitions"]
    # scale=2.0 reached the loader: the first feature of training sample i is 2 * i
    assert got["x_train"] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0]
    assert got["x_test_shape"] == [4, 2]
    # 12 rows: client 0 the first 6, the other 3 clients 2 each
    assert got["sizes"] == [6, 2, 2, 2] and got["client0"] == [0, 1, 2, 3, 4, 5]
    assert got["params"] == {"first": 2} and got["kwargs"] == {"first": 6}
    # the config names both plugins; the run's clients are the scheme's split (no public set)
    assert got["federation_sizes"] == [6, 2, 2, 2]
    assert got["unknown"].startswith("data.partition: unknown value 'first_rst'; valid: [")
    assert "'first_rest'" in got["unknown"] and "'virtual'" in got["unknown"]


def test_the_builtin_plugins_are_registered() -> None:
    assert DATASETS.names() == [
        "cifar10",
        "digits",
        "femnist_leaf",
        "mnist1d",
        "mnist5k",
        "mnist_idx",
        "synthetic",
    ]
    assert PARTITIONS.names() == [
        "dirichlet",
        "iid",
        "missing",
        "natural",
        "quantity",
        "shards",
        "virtual",
    ]
    # a loader's ``path`` argument says whether it reads files
    assert [dataset_path(n) for n in ("cifar10", "femnist_leaf", "mnist_idx")] == ["required"] * 3
    assert (dataset_path("mnist5k"), dataset_path("digits"), dataset_path("synthetic")) == (
        "optional",
        "none",
        "none",
    )
    with pytest.raises(ValueError, match=r"unknown dataset 'mnist'; valid: \['cifar10'"):
        dataset_path("mnist")


def test_virtual_partition_lists_the_clients_a_run_draws() -> None:
    """``partition(..., "virtual")`` gives client c the rows VirtualData draws for it: with
    size_min = size_max = 5 every client holds exactly 5 rows."""
    labels = np.arange(200, dtype=np.int64) % 4
    parts = partition(labels, 30, "virtual", seed=7, alpha=0.3, size_min=5, size_max=5)
    assert [len(p) for p in parts] == [5] * 30
    ref = (
        VirtualData(
            labels, 30, seed=7, alpha=0.3, size_median=32.0, size_sigma=0.6, size_min=5, size_max=5
        )
        .rows(np.arange(30))
        .index
    )
    assert all(np.array_equal(a, b) for a, b in zip(parts, ref, strict=True))
