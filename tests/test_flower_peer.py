"""Tests for the Flower peer runner used by the throughput benchmark.

The end-to-end cases start a real Flower/Ray simulation in a child process (about 15-20 s
each), so they are marked ``slow`` and skipped when ``flwr`` is not installed.
"""

from __future__ import annotations

import functools
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.peers import flower_peer  # noqa: E402
from benchmarks.peers.flower_apps import OFFLINE_ENV, local_sgd  # noqa: E402
from benchmarks.peers.flower_peer import best_flower, run_flower  # noqa: E402

RESULT_KEYS = {
    "rounds_timed",
    "seconds",
    "client_updates",
    "samples",
    "updates_per_s",
    "samples_per_s",
    "client_cpus",
    "final_weights_ok",
}
SIZES = (12, 15, 20, 26, 33, 41)  # six clients of different sizes
DIM, CLASSES = 5, 3
linear = functools.partial(nn.Linear, DIM, CLASSES)


def _no_launch(*args: object) -> None:
    """Stands in for the simulation's launch: bad arguments must be refused before it (a GPU
    share on a machine without one would otherwise wait for a GPU forever)."""
    raise AssertionError("the Flower simulation was launched")


def _clients(sizes: tuple[int, ...] = SIZES, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (
            rng.standard_normal((n, DIM)).astype(np.float32),
            rng.integers(0, CLASSES, n).astype(np.int64),
        )
        for n in sizes
    ]


def test_local_sgd_counts_samples_and_is_seeded() -> None:
    ((x, y),) = _clients((23,))
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    weights = []
    for _ in range(2):
        torch.manual_seed(1)
        model = linear()
        before = [p.detach().clone() for p in model.parameters()]
        seen = local_sgd(
            model,
            x_t,
            y_t,
            epochs=3,
            batch_size=5,
            lr=0.1,
            generator=torch.Generator().manual_seed(7),
        )
        assert seen == 23 * 3
        assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
        weights.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*weights, strict=True))


def test_local_sgd_zero_lr_keeps_weights() -> None:
    ((x, y),) = _clients((9,))
    model = linear()
    before = [p.detach().clone() for p in model.parameters()]
    local_sgd(
        model,
        torch.from_numpy(x),
        torch.from_numpy(y),
        epochs=1,
        batch_size=4,
        lr=0.0,
        generator=torch.Generator().manual_seed(0),
    )
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rounds": 1, "warmup_rounds": 1},
        {"clients_per_round": 7},
        {"clients_per_round": 0},
        {"epochs": 0},
        {"client_cpus": 0.0},
        {"client_gpus": -0.25},
        {"client_gpus": 1.5},
    ],
)
def test_run_flower_rejects_bad_arguments(kwargs: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flower_peer, "_launch", _no_launch)
    args = {
        "rounds": 2,
        "clients_per_round": 3,
        "epochs": 1,
        "batch_size": 4,
        "lr": 0.1,
        "seed": 0,
        **kwargs,
    }
    with pytest.raises(ValueError):
        run_flower(_clients(), linear, **args)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_a_gpu_share_without_cuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flower_peer, "_launch", _no_launch)
    with pytest.raises(ValueError, match="client_gpus > 0 needs a CUDA device"):
        run_flower(
            _clients(), linear, rounds=2, clients_per_round=3, epochs=1, batch_size=4, lr=0.1,
            seed=0, client_gpus=0.25,
        )  # fmt: skip


def test_best_flower_needs_options() -> None:
    with pytest.raises(ValueError):
        best_flower(
            _clients(),
            linear,
            cpus_options=(),
            rounds=2,
            clients_per_round=3,
            epochs=1,
            batch_size=4,
            lr=0.1,
            seed=0,
        )


def _check_counts(res: dict, *, rounds_timed: int, per_round: int, epochs: int) -> None:
    assert RESULT_KEYS <= set(res)
    assert res["rounds_timed"] == rounds_timed
    assert res["client_updates"] == per_round * rounds_timed
    # one timed round: the samples are exactly those of some set of `per_round` clients
    sums = {epochs * sum(c) for c in itertools.combinations(SIZES, per_round)}
    if rounds_timed == 1:
        assert res["samples"] in sums
    assert res["seconds"] > 0
    assert res["updates_per_s"] == pytest.approx(res["client_updates"] / res["seconds"])
    assert res["samples_per_s"] == pytest.approx(res["samples"] / res["seconds"])
    assert res["final_weights_ok"] is True


@pytest.mark.slow
def test_run_flower_tiny_counts() -> None:
    pytest.importorskip("flwr")
    res = run_flower(
        _clients(), linear, rounds=2, clients_per_round=3, epochs=2, batch_size=4, lr=0.1, seed=0
    )
    _check_counts(res, rounds_timed=1, per_round=3, epochs=2)
    assert res["client_cpus"] == 1.0
    assert len(res["round_s"]) == 1


@pytest.mark.slow
def test_run_flower_beside_an_initialised_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flwr")
    ray = pytest.importorskip("ray")
    for key, value in OFFLINE_ENV.items():
        monkeypatch.setenv(key, value)
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=100 * 1024**2)
    try:
        res = run_flower(
            _clients(),
            linear,
            rounds=3,
            clients_per_round=3,
            epochs=1,
            batch_size=8,
            lr=0.1,
            seed=1,
            client_cpus=2.0,
            warmup_rounds=2,
        )
        _check_counts(res, rounds_timed=1, per_round=3, epochs=1)
        assert res["client_cpus"] == 2.0
        assert ray.is_initialized()
    finally:
        ray.shutdown()
