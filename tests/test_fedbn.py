"""FedBN: which entries stay on the clients (sizes by hand), BatchNorm kept out of the aggregate
exactly over two rounds, the error without BatchNorm, and the registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from simulator.algorithms import ALGORITHMS, make_algorithm
from simulator.algorithms.fedbn import FedBN, batchnorm_layers, batchnorm_names
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.space import ParamSpace

FEDBN = make_algorithm(AlgorithmConfig(algorithm="fedbn"))


def test_registry() -> None:
    assert ALGORITHMS["fedbn"] is FedBN
    assert FEDBN.p == {} and FEDBN.client_state == {} and FEDBN.sends == ()
    with pytest.raises(
        ConfigError, match=r"algorithm 'fedbn': unknown parameter 'mu'; valid: \[\]"
    ):
        make_algorithm(AlgorithmConfig(algorithm="fedbn", algorithm_params={"mu": 0.1}))


def test_local_entries_of_a_small_mlp_by_hand() -> None:
    """digits MLP 64 -> 16 -> 16 -> 10 with BatchNorm after each hidden layer.

    Linear(64, 16): 64*16 + 16 = 1040, BN(16): weight 16 + bias 16 (+ running mean 16, var 16),
    Linear(16, 16): 272, BN(16): 32 (+ 32), head Linear(16, 10): 170.
    Flat model: 1040 + 32 + 272 + 32 + 170 = 1546 parameters + 64 running statistics = 1610;
    kept local: 2 layers x 4 entries x 16 = 128; shared: 1610 - 128 = 1482.
    """
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm="batch").build(seed=0)
    layout = FlatLayout(model)
    names = FEDBN.local_parameters(list(layout.names))
    assert names == [
        "body.2.weight",
        "body.2.bias",
        "body.5.weight",
        "body.5.bias",
        "body.2.running_mean",
        "body.2.running_var",
        "body.5.running_mean",
        "body.5.running_var",
    ]
    assert batchnorm_layers(list(layout.names)) == ["body.2", "body.5"]
    space = ParamSpace.of(layout, FEDBN)
    assert layout.size == 1610
    assert space.local is not None and len(space.local) == 128
    assert space.size == 1482
    # the integer counter is not part of the flat model: nothing to share or keep
    assert "body.2.num_batches_tracked" not in layout.names


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec("mlp", (1, 8, 8), 10, hidden=8, norm="batch"),
        ModelSpec("cnn", (1, 8, 8), 10, hidden=8, norm="batch"),
        ModelSpec("cnn", (1, 28, 28), 10, hidden=8, norm="batch"),
    ],
)
def test_entries_found_by_buffers_equal_those_found_by_type(spec: ModelSpec) -> None:
    model = spec.build(seed=0)
    names = list(FlatLayout(model).names)
    by_type = batchnorm_names(model)
    assert sorted(FEDBN.local_parameters(names)) == sorted(by_type)
    assert len(by_type) == 8  # two BatchNorm layers x (weight, bias, mean, variance)


@pytest.mark.parametrize("model", ["mlp", "logreg", "cnn"])
def test_no_batchnorm_is_a_config_error(model: str) -> None:
    layout = FlatLayout(ModelSpec(model, (1, 8, 8), 10, hidden=8).build(seed=0))
    with pytest.raises(
        ConfigError,
        match=r"fedbn .* the model has none; run it with "
        r"--norm batch$",
    ):
        ParamSpace.of(layout, FEDBN)


def test_cli_without_batchnorm_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from simulator.cli import main

    rc = main(
        [
            "--algorithm",
            "fedbn",
            "--backend",
            "local",
            "--rounds",
            "1",
            "--num-clients",
            "2",
            "--clients-per-round",
            "2",
            "--no-progress",
            "--no-plots",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "--norm batch" in err


def test_batchnorm_stays_out_of_the_aggregate_exactly(tmp_path: Path) -> None:
    """Two rounds, 4 clients: every global BatchNorm entry is bitwise its initial value, the
    shared entries move by exactly the sample-weighted mean of the rows, and each client's own
    BatchNorm is in the store (and differs between clients)."""
    from simulator.round.engine import Simulation

    cfg = build_config(
        flat={
            "backend": "local",
            "num_clients": 4,
            "clients_per_round": 4,
            "rounds": 2,
            "local_epochs": 1,
            "batch_size": 16,
            "hidden": 16,
            "norm": "batch",
            "partition": "iid",
            "algorithm": "fedbn",
            "preaggregate": False,
            "feature_shift": 1.0,
            "progress": False,
            "plots": False,
            "out": str(tmp_path),
        }
    )
    sim = Simulation(cfg)
    try:
        g0 = sim.global_flat.clone()
        assert sim.space.local is not None and sim.space.shared is not None
        local = torch.from_numpy(sim.space.local)
        shared = torch.from_numpy(sim.space.shared)
        assert len(local) == 128 and sim.space.size == 1482
        for rnd in range(2):
            before = sim.global_flat.clone()
            rec = sim.run_round(rnd, 0.0)
            rows = rec.rows
            assert rows is not None and tuple(rows.updates.shape) == (4, 1482)
            w = torch.from_numpy(rows.num_samples / rows.num_samples.sum()).double()
            mean = (w[:, None] * rows.updates.double()).sum(0)
            torch.testing.assert_close(
                sim.global_flat[shared].double(), before[shared].double() + mean, rtol=0, atol=1e-6
            )
            assert torch.equal(sim.global_flat[local], g0[local])
        own, present = sim.store.get("local", np.arange(4))
        assert present.all() and own.shape == (4, 128)
        assert not np.allclose(own[0], own[1])
        assert not np.allclose(own, g0[local].numpy()[None])
    finally:
        sim.close()
