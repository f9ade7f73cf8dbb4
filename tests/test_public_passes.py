"""Passes over the server's public set (``Algorithm.public_passes``): each client visits every
public row once per pass, before or after its local epochs, with the step told so
(``Step.public``, ``Step.index``); the vectorized and sequential paths agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from simulator.algorithms.base import Algorithm
from simulator.config.learning import AlgorithmConfig
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import PUBLIC_INPUTS, Step


class IndexSum(Algorithm):
    """On a public pass the loss is sum_b mask_b * (mean(x_b) * w_0 + (index_b + 1) * w_1)
    (w_0, w_1: the first two parameters); public row i is an image of constant value i + 1, so
    one pass over M rows moves w_0 and w_1 by -lr * M (M + 1) / 2 whatever the order; on local
    steps the cross-entropy (``local_ce``) or nothing."""

    name = "index_sum_test"
    uses_public = True

    def __init__(self, cfg: AlgorithmConfig, before: int, after: int, local_ce: bool) -> None:
        super().__init__(cfg)
        self.passes, self.local_ce = (before, after), local_ce

    def public_passes(self) -> tuple[int, int]:
        return self.passes

    def client_loss(self, s: Step) -> torch.Tensor:
        if not s.public:
            return s.ce if self.local_ce else 0.0 * s.flat.sum()
        assert s.index is not None
        value = s.x.reshape(s.x.shape[0], -1).mean(-1)
        rows = (s.index + 1).to(s.flat.dtype)
        return (s.mask * (value * s.flat[0] + rows * s.flat[1])).sum()


def run(before: int, after: int, epochs: list[int], vectorize: bool) -> torch.Tensor:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=4).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(20, 1, 8, 8, generator=gen), torch.randint(0, 10, (20,), generator=gen)
    public = (torch.arange(7.0) + 1).reshape(7, 1, 1, 1).expand(7, 1, 8, 8).contiguous()
    alg = IndexSum(AlgorithmConfig(), before, after, local_ce=epochs != [1, 1])
    out = train_clients(
        model,
        layout,
        layout.flatten(model),
        x,
        y,
        [np.arange(0, 8), np.arange(8, 20)],
        epochs,
        [1, 2],
        LocalSpec(lr=0.01, batch_size=3, step=alg),
        vectorize=vectorize,
        shared={PUBLIC_INPUTS: public},
    )
    return out.updates


@pytest.mark.parametrize("vectorize", [True, False])
def test_each_pass_visits_every_public_row_once(vectorize: bool) -> None:
    """Local steps without a loss, 2 passes over 7 public rows in batches of 3 (the last one
    partial): w_0 (by the inputs) and w_1 (by the rows' indices) each move by -0.01 * 2 *
    (1 + ... + 7) = -0.56, nothing else moves. A client with no local work (0 epochs) takes
    no public step either."""
    for before, after in ((2, 0), (0, 2)):
        upd = run(before, after, [1, 1], vectorize)
        np.testing.assert_allclose(upd[:, :2].numpy(), np.full((2, 2), -0.56), rtol=1e-6)
        assert torch.count_nonzero(upd[:, 2:]) == 0
    assert torch.count_nonzero(run(2, 0, [0, 1], vectorize)[0]) == 0


def test_passes_around_local_epochs_and_both_paths_agree() -> None:
    ups = {(b, a): run(b, a, [1, 2], True) for b, a in ((1, 0), (0, 1), (0, 0))}
    assert not torch.equal(ups[(1, 0)], ups[(0, 1)])  # the order matters
    assert not torch.equal(ups[(1, 0)], ups[(0, 0)])
    for b, a in ((1, 0), (0, 1)):
        torch.testing.assert_close(ups[(b, a)], run(b, a, [1, 2], False), rtol=0, atol=1e-5)


def test_passes_need_the_public_inputs() -> None:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=4).build(seed=0)
    layout = FlatLayout(model)
    with pytest.raises(ValueError, match="public passes: the server sent no 'public_x'"):
        train_clients(
            model,
            layout,
            layout.flatten(model),
            torch.rand(4, 1, 8, 8),
            torch.zeros(4).long(),
            [np.arange(4)],
            [1],
            [0],
            LocalSpec(lr=0.1, batch_size=2, step=IndexSum(AlgorithmConfig(), 1, 0, True)),
        )
