"""The protocol's start hook (``Algorithm.client_start``, ``start_iterations``) on a test
algorithm with numbers checkable by hand: where the local steps start, the rows the start
writes, the bound each path asks for, and a client's own start (Siren's) seen as ``Start.flat``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simulator.algorithms import Algorithm
from simulator.config.learning import AlgorithmConfig
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients
from simulator.training.step import Finish, Start


class Offset(Algorithm):
    """Starts each client at ``Start.flat + c`` (its stored row ``c``); the start writes the
    bound it was given as row ``seen`` and 1 as row ``both``, the finish writes ``both`` too."""

    name = "offset_test"
    client_state = {"c": "params", "seen": 1, "both": 1}

    def __init__(self) -> None:
        super().__init__(AlgorithmConfig())
        self.asked: list[int] = []

    def start_iterations(self, state: dict[str, torch.Tensor]) -> int:
        self.asked.append(len(state["c"]))
        return 5

    def client_start(self, s: Start) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        seen = torch.zeros(1) + s.iterations + 0.0 * s.x.sum()
        return s.flat + s.state["c"], {"c": s.state["c"], "seen": seen, "both": seen * 0 + 1}

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {"both": f.state["both"] + 2}


def run(vectorize: bool, starts: dict[int, torch.Tensor] | None = None) -> Any:
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=4).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    x, y = torch.rand(30, 1, 8, 8, generator=gen), torch.randint(0, 10, (30,), generator=gen)
    n = layout.num_params
    c = torch.zeros(3, n)
    c[:, 0] = torch.tensor([1.0, 3.0, 0.5])
    c[:, -1] = torch.tensor([-2.0, 0.25, 4.0])
    state = {"c": c, "seen": torch.zeros(3, 1), "both": torch.zeros(3, 1)}
    alg = Offset()
    spec = LocalSpec(lr=0.0, batch_size=10, step=alg)  # lr 0: the local steps keep the start
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 30)]
    g = layout.flatten(model)
    out = train_clients(
        model,
        layout,
        g,
        x,
        y,
        idx,
        [1, 1, 2],
        [1, 2, 3],
        spec,
        vectorize,
        starts=starts,
        state=state,
    )
    return out, alg, g, c


def test_start_moves_the_local_steps_and_writes_rows() -> None:
    """Update = start - global = c (lr 0); ``seen`` = 5 (the bound) from the start; ``both``
    = 2 from the finish, which wins over the start's 1."""
    for vectorize in (True, False):
        out, alg, g, c = run(vectorize)
        torch.testing.assert_close(out.updates, c, rtol=0, atol=1e-6)
        torch.testing.assert_close(out.outputs["c"], c)
        torch.testing.assert_close(out.outputs["seen"], torch.full((3, 1), 5.0))
        torch.testing.assert_close(out.outputs["both"], torch.full((3, 1), 2.0))
        # the vectorized path asks once for the chunk, the sequential one per client
        assert alg.asked == ([3] if vectorize else [1, 1, 1])


def test_a_clients_own_start_is_the_starts_flat() -> None:
    """Client 1 given its own start (global + 0.5 everywhere): its update is 0.5 + c."""
    _, _, g, _ = run(True)
    own = {1: g + 0.5}
    for vectorize in (True, False):
        out, _, g, c = run(vectorize, starts=own)
        want = c.clone()
        want[1] += 0.5
        torch.testing.assert_close(out.updates, want, rtol=0, atol=1e-6)
