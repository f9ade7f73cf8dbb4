"""Training a few clients in one call, for the tests of a client's bits alone and in chunks."""

from __future__ import annotations

import numpy as np
import torch

from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def train_some(
    model: object,
    layout: FlatLayout,
    g: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: list[np.ndarray],
    spec: LocalSpec,
    ix: list[int],
    vectorize: bool = True,
    state: dict | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """Clients ``ix`` (client i: rows ``idx[i]``, 2 epochs, seed 10 + i, its ``state`` rows)
    trained in one call, mapped or (``vectorize`` False) one by one: (updates, losses)."""
    out = train_clients(
        model,
        layout,
        g,
        x,
        y,
        [idx[i] for i in ix],
        [2] * len(ix),
        [10 + i for i in ix],
        spec,
        vectorize=vectorize,
        state={k: v[ix] for k, v in (state or {}).items()},
    )
    return out.updates, out.losses


def small_mlp(
    rows: int, extension: object = None, norm: str = "none"
) -> tuple[object, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The 8x8-input MLP (hidden 16, seed 0, an algorithm's ``extension``), its layout and flat
    model, and ``rows`` random samples with labels (seed 0): ``(model, layout, g, x, y)``."""
    model = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm=norm, extension=extension).build(seed=0)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(rows, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (rows,), generator=gen)
    return model, layout, layout.flatten(model), x, y
