"""Clients with different model architectures (``--model-groups``): group specs and their
one-line errors, the assignment ``id mod G``, chunks that never mix groups, a mixed round in
which each group trains its own model (parameter counts by hand), per-group store tables and
per-client evaluation, and the refusals for algorithms that average one model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ALGORITHMS, Algorithm, ServerRound, register
from simulator.config.fields import ConfigError
from simulator.config.groups import MODEL_NAMES, GroupSpec, parse_group
from simulator.config.sections import build_config
from simulator.training.groups import group_of, split_by_group, table_name
from simulator.training.models import MODELS
from simulator.training.step import Finish
from tests.conftest import small_config


def params_of(hidden: int) -> int:
    """Trainable parameters of the digits MLP (64 inputs, two hidden layers, 10 outputs)."""
    return 64 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10


class Sizes(Algorithm):
    """Each client keeps its whole model and sends one number: how many parameters it has."""

    name = "sizes_test"
    upload = "size"
    heterogeneous = True
    reads_rows = True

    def local_parameters(self, names: list[str]) -> list[str]:
        return list(names)

    def row_entries(self, layout: Any) -> int:
        return 1

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {"size": (f.flat * 0).sum().reshape(1) + f.flat.shape[-1]}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        return r.global_flat


class ModelTable(Sizes):
    """Heterogeneous, but with a model-shaped table (refused with several groups)."""

    name = "model_table_test"
    client_state = {"h": "params"}


@pytest.fixture
def sizes() -> Iterator[None]:
    register(Sizes)
    register(ModelTable)
    yield
    del ALGORITHMS[Sizes.name]
    del ALGORITHMS[ModelTable.name]


def test_group_specs_by_hand() -> None:
    assert parse_group("mlp", 0, 64, "none") == GroupSpec("mlp", 64, "none")
    assert parse_group("mlp1:hidden=100", 3, 64, "none") == GroupSpec("mlp1", 100, "none")
    assert parse_group("mlp:hidden=32", 1, 64, "none") == GroupSpec("mlp", 32, "none")
    assert parse_group("cnn:hidden=8,norm=batch", 2, 64, "none") == GroupSpec("cnn", 8, "batch")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "resnet",
            "group 0 'resnet': unknown model 'resnet'; valid: ['logreg', 'mlp', 'mlp1', 'cnn']",
        ),
        ("mlp:width=3", "group 0 'mlp:width=3': unknown key 'width=3'; valid: KEY=VALUE with KEY"),
        ("mlp:hidden", "unknown key 'hidden'; valid"),
        ("mlp:hidden=0", "hidden must be an integer >= 1, got '0'"),
        ("mlp:norm=layer", "unknown norm 'layer'; valid: ['none', 'batch']"),
    ],
)
def test_bad_group_is_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^model.model_groups: .*" + message.replace("[", r"\[")):
        build_config(flat={"model_groups": [text]})


def test_group_models_are_the_models_a_run_may_name() -> None:
    assert MODEL_NAMES == tuple(MODELS)  # one list: --model and --model-groups agree


def test_assignment_is_id_mod_groups() -> None:
    np.testing.assert_array_equal(group_of([0, 1, 2, 3, 4, 5, 99999], 3), [0, 1, 2, 0, 1, 2, 0])
    assert table_name("local", 0) == "local" and table_name("local", 2) == "local.g2"


def test_chunks_are_cut_where_the_group_changes() -> None:
    """Ids [3, 1, 4, 0 | 2, 5] in two chunks, 2 groups: chunk one holds group 1 (ids 3, 1 at
    positions 0, 1) then group 0 (4, 0 at 2, 3); chunk two group 0 (2) then group 1 (5)."""
    order, cut = split_by_group(np.array([3, 1, 4, 0, 2, 5]), [4, 2], 2)
    assert cut == [2, 2, 1, 1]
    np.testing.assert_array_equal(order, [2, 3, 0, 1, 4, 5])
    order, cut = split_by_group(np.array([3, 1, 4]), None, 1)
    assert cut is None and order.tolist() == [0, 1, 2]


def test_groups_from_the_cli_and_yaml(sizes: None, tmp_path: Path) -> None:
    from simulator.cli import build_parser
    from simulator.config.sections import load_config

    args = build_parser().parse_args(["--model-groups", "mlp:hidden=4", "logreg"])
    assert args.model_groups == ["mlp:hidden=4", "logreg"]
    cfg = build_config(flat={"model_groups": args.model_groups, "algorithm": "sizes_test"})
    assert cfg.model.model_groups == ("mlp:hidden=4", "logreg")
    cfg.save(tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml").model.model_groups == cfg.model.model_groups


def test_fedavg_refuses_several_groups() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^model.model_groups: 2 groups of different models, but algorithm 'fedavg' "
        r"averages one model shared by every client; valid with several groups: \[",
    ):
        build_config(flat={"model_groups": ["mlp:hidden=4", "mlp:hidden=8"]})


def group_config(tmp_path: Path, **kw: Any) -> Any:
    flat = {
        "algorithm": "sizes_test",
        "model_groups": ["mlp:hidden=4", "mlp:hidden=8", "logreg"],
        "num_clients": 9,
        "clients_per_round": 9,
        "client_test_fraction": 0.3,
        "num_actors": 2,
    }
    return small_config(tmp_path, **{**flat, **kw})


def test_a_mixed_round_trains_each_group_with_its_own_model(sizes: None, tmp_path: Path) -> None:
    """9 clients in groups id mod 3: an MLP of width 4 (330 parameters, 64*4 + 4 + 4*4 + 4 + 4*10
    + 10), of width 8 (682) and logistic regression (650). Each client's row is its own model's
    parameter count, each group's store table holds its clients' trained models, the global
    state is the three initial models end to end, and each client is evaluated."""
    from simulator.round.engine import Simulation

    sim = Simulation(group_config(tmp_path / "a"))
    try:
        want = np.array([params_of(4), params_of(8), 64 * 10 + 10])
        assert want.tolist() == [330, 682, 650]
        assert sim.global_flat.shape == (want.sum(),)
        rec = sim.run_round(0, 0.0)
        ids = rec.rows.client_ids
        np.testing.assert_array_equal(rec.rows.updates[:, 0].numpy(), want[ids % 3])
        for g in range(3):
            members = np.arange(g, 9, 3)
            rows, present = sim.store.get(table_name("local", g), members)
            assert present.all() and rows.shape == (3, want[g])
            start = sim.fed.groups[g].initial.numpy()
            assert not np.allclose(rows, start)  # trained from the group's initial model
        assert rec.extra["clients_evaluated"] == 9
        assert 0.0 <= rec.extra["client_accuracy_mean"] <= 1.0
        chunks = rec.extra["chunks"]
        assert sum(c["clients"] for c in chunks) == 9 and len(chunks) >= 3
    finally:
        sim.close()


def test_mixed_groups_vectorized_equals_sequential(sizes: None, tmp_path: Path) -> None:
    from simulator.round.engine import Simulation

    got = []
    for v in (True, False):
        sim = Simulation(group_config(tmp_path / str(v), vectorize=v))
        try:
            for r in range(2):
                sim.run_round(r, 0.0)
            got.append(
                [sim.store.get(table_name("local", g), np.arange(g, 9, 3))[0] for g in range(3)]
            )
        finally:
            sim.close()
    for a, b in zip(*got, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_one_group_spec_is_the_plain_model(tmp_path: Path) -> None:
    """``--model-groups mlp:hidden=8`` is ``--model mlp --hidden 8``, bit for bit."""
    from simulator.round.engine import Simulation

    out = []
    for kw in ({"model_groups": ["mlp:hidden=8"]}, {"hidden": 8}):
        sim = Simulation(small_config(tmp_path / str(len(out)), **kw))
        try:
            sim.run_round(0, 0.0)
            out.append(sim.global_flat.clone())
        finally:
            sim.close()
    assert torch.equal(out[0], out[1])


def test_model_shaped_tables_are_refused_with_groups(sizes: None, tmp_path: Path) -> None:
    from simulator.round.engine import Simulation

    with pytest.raises(
        ValueError,
        match="^algorithm 'model_table_test': client_state table 'h' has shape 'params', "
        "which differs between model groups; use an int shape",
    ):
        Simulation(group_config(tmp_path, algorithm="model_table_test"))


def test_memory_estimate_sizes_the_largest_group() -> None:
    """The budget's per-client figures use the largest group's model: digits MLPs of width 32
    and 128 have 64*32+32+32*32+32+32*10+10 = 3,466 and 64*128+128+128*128+128+128*10+10 =
    26,122 parameters, so the estimate takes 26,122 whichever group comes first."""
    from simulator.config.sections import build_config
    from simulator.run.budget import estimate, model_layout

    flat = {"algorithm": "ktpfl", "public_fraction": 0.1, "backend": "local"}
    small_first = build_config(flat={**flat, "model_groups": ["mlp:hidden=32", "mlp:hidden=128"]})
    big_first = build_config(flat={**flat, "model_groups": ["mlp:hidden=128", "mlp:hidden=32"]})
    only_small = build_config(flat={**flat, "hidden": 32})
    assert model_layout(small_first).size == model_layout(big_first).size == 26_122
    assert model_layout(only_small).size == 3_466
    assert estimate(small_first) == estimate(big_first)
    assert estimate(small_first).round > estimate(only_small).round


def test_clock_charges_each_group_its_model_and_the_public_passes(tmp_path: Path) -> None:
    """KT-pFL with three groups (digits MLPs of width 4 and 8, logistic regression) on devices
    that declare GFLOP/s. torch counts 1,360 / 2,912 / 2,560 training FLOPs a sample for them
    (width 4: forward 2*(64*4 + 4*4 + 4*10) = 624, weight gradients 624, input gradients of the
    two upper layers 2*(4*4 + 4*10) = 112; width 8: 1,312 + 1,312 + 288; logreg: 1,280 +
    1,280). A client trains size * E samples plus one distillation pass over the public set, so
    its compute time is flops[id mod 3] * (size * E + |D_r|) / (GFLOP/s * 1e9)."""
    from simulator.round.engine import Simulation
    from simulator.round.plan import arrivals, public_samples
    from simulator.round.wire import WireBytes

    cfg = small_config(
        tmp_path / "clock",
        algorithm="ktpfl",
        model_groups=["mlp:hidden=4", "mlp:hidden=8", "logreg"],
        num_clients=9,
        clients_per_round=9,
        public_fraction=0.1,
        local_epochs=2,
        gflops_median=1.0,
    )
    sim = Simulation(cfg)
    try:
        flops = np.array([g.spec.train_flops_per_sample() for g in sim.fed.groups])
        assert flops.tolist() == [1360, 2912, 2560]
        public = len(sim.fed.public_x)
        assert sim.algorithm.public_passes() == (1, 0) and public_samples(sim.context()) == public
        sel = np.arange(9)
        sizes = sim.fed.sizes(sel).astype(np.float64)
        zero = np.zeros(9)
        wire = WireBytes(zero, zero, zero, zero, zero.astype(np.int64), zero.astype(bool))
        got = [
            a.compute_s for a in arrivals(sim.context(), 0, sel, np.full(9, 2), sizes, 0.0, wire)
        ]
        gflops = sim.fed.population.gflops[sel]
        want = flops[sel % 3] * (sizes * 2 + public) / (gflops * 1e9)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    finally:
        sim.close()
