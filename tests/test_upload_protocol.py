"""The protocol for clients that send something other than a model update, and for frozen
entries: ``Algorithm.upload`` / ``row_entries`` (the row is one of the client's outputs),
``reads_rows`` (the server update sees the rows), ``train_mask`` (a sent tensor that freezes
entries), and the one-line refusals of rules, attacks and policies built for updates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ALGORITHMS, Algorithm, ServerRound, register
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Finish


class Census(Algorithm):
    """Each client sends its class counts (10 entries) instead of an update; the server adds
    the kept rows into ``total`` and keeps the global model."""

    name = "census_test"
    upload = "counts"
    reads_rows = True
    seen: list[ServerRound] = []

    def row_entries(self, layout: Any) -> int:
        return 10

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        onehot = torch.nn.functional.one_hot(f.y, 10).to(f.mask.dtype)
        return {"counts": (onehot * f.mask.unsqueeze(-1)).sum((0, 1))}

    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        return {"total": torch.zeros(10)}

    def server_update(self, r: ServerRound) -> torch.Tensor:
        Census.seen.append(r)
        assert r.rows is not None
        r.server["total"] += r.rows[torch.from_numpy(r.kept)].sum(0)
        return r.global_flat


class Frozen(Algorithm):
    """FedAvg whose clients train only the entries where the sent ``mask`` is 1."""

    name = "frozen_test"
    sends = ("mask",)
    train_mask = "mask"


@pytest.fixture
def census() -> Iterator[None]:
    Census.seen = []
    register(Census)
    yield
    del ALGORITHMS[Census.name]


def config(tmp_path: Path, **kw: Any) -> Any:
    flat = {
        "backend": "local",
        "num_clients": 4,
        "clients_per_round": 4,
        "rounds": 2,
        "dataset": "digits",
        "partition": "iid",
        "algorithm": "census_test",
        "progress": False,
        "plots": False,
        "out": str(tmp_path),
    }
    return build_config(flat={**flat, **kw})


def test_rows_are_the_sent_output_and_the_server_reads_them(census: None, tmp_path: Path) -> None:
    """Each client's row is the count of each of its training labels (the partition's labels,
    counted here by hand); the defended aggregate is their sample-weighted mean; the server
    total after 2 rounds is twice the dataset's label counts over the 4 clients."""
    from simulator.round.engine import Simulation

    sim = Simulation(config(tmp_path))
    try:
        y = sim.fed.dataset.y_train
        rows = sim.train_clients.rows(np.arange(4))
        by_hand = np.stack([np.bincount(y[ix], minlength=10) for ix in rows.index])
        for rnd in range(2):
            rec = sim.run_round(rnd, 0.0)
            order = rec.rows.client_ids
            np.testing.assert_array_equal(rec.rows.updates.numpy(), by_hand[order])
            r = Census.seen[-1]
            np.testing.assert_array_equal(r.rows.numpy(), by_hand[r.client_ids])
            w = by_hand.sum(1)[r.client_ids] / by_hand.sum()
            np.testing.assert_allclose(r.delta.numpy(), w @ by_hand[r.client_ids], rtol=1e-6)
            assert r.delta.shape == (10,) and sim.space.size == 10
        np.testing.assert_array_equal(sim.server_state["total"].numpy(), 2 * by_hand.sum(0))
    finally:
        sim.close()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"defense": "median"},
            "defense 'median': algorithm 'census_test' sends 'counts', not model updates; "
            "this rule judges model updates",
        ),
        (
            {"attack": "signflip", "attack_fraction": 0.25},
            "attack 'signflip': algorithm 'census_test' sends 'counts', not model updates; "
            "a model attack rewrites update rows",
        ),
        (
            {"round_policy": "fedbuff", "policy_params": {"k": 2}},
            "round policy 'fedbuff': algorithm 'census_test' sends 'counts', not model updates",
        ),
    ],
)
def test_update_only_parts_refuse_other_uploads(
    census: None, tmp_path: Path, kw: dict[str, Any], message: str
) -> None:
    from simulator.round.engine import Simulation

    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        Simulation(config(tmp_path, **kw))


def test_a_data_attack_is_accepted(census: None, tmp_path: Path) -> None:
    from simulator.round.engine import Simulation

    Simulation(config(tmp_path, attack="labelflip", attack_fraction=0.25)).close()


def test_train_mask_freezes_entries_on_both_paths() -> None:
    """With weight decay and momentum on, a 0 in the mask keeps an entry exactly where it
    was on both paths; a mask of ones changes nothing (bitwise)."""
    from simulator.config.learning import AlgorithmConfig

    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=6).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(30, 1, 8, 8, generator=gen), torch.randint(0, 10, (30,), generator=gen)
    frozen = layout.slices[layout.param_names[0]]  # the first layer's weight
    a = Frozen(AlgorithmConfig(algorithm="frozen_test"))
    idx = [np.arange(0, 12), np.arange(12, 30)]

    def run(mask: torch.Tensor | None, vectorize: bool = True) -> torch.Tensor:
        spec = LocalSpec(
            lr=0.1, batch_size=5, weight_decay=0.01, momentum=0.9, step=None if mask is None else a
        )
        shared = {} if mask is None else {"mask": mask}
        out = train_clients(
            model, layout, g, x, y, idx, [2, 1], [1, 2], spec, vectorize=vectorize, shared=shared
        )
        return out.updates

    ones = torch.ones(layout.num_params)
    part = ones.clone()
    part[frozen] = 0.0
    free = run(None)
    assert torch.equal(run(ones), free)
    for v in (True, False):
        upd = run(part, v)
        assert torch.count_nonzero(upd[:, frozen]) == 0
        assert torch.count_nonzero(upd[:, frozen.stop :]) > 0
    torch.testing.assert_close(run(part, True), run(part, False), rtol=0, atol=1e-5)
    assert torch.count_nonzero(free[:, frozen]) > 0


def test_a_mask_of_the_wrong_size_is_refused() -> None:
    from simulator.config.learning import AlgorithmConfig

    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=6).build(seed=0)
    layout = FlatLayout(model)
    a = Frozen(AlgorithmConfig(algorithm="frozen_test"))
    x, y = torch.rand(4, 1, 8, 8), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="train_mask 'mask': 3 entries for"):
        train_clients(
            model,
            layout,
            layout.flatten(model),
            x,
            y,
            [np.arange(4)],
            [1],
            [0],
            LocalSpec(lr=0.1, batch_size=2, step=a),
            shared={"mask": torch.ones(3)},
        )
