"""FedAF's server-side training (not an algorithm: no :func:`~simulator.algorithms.register`
here; :mod:`simulator.algorithms.fedaf` uses it): the round's global model trained on the union
of the kept condensed sets (:func:`train_on_union`) and the next round's embedding network by
model resampling (:func:`resampled`).

Both draw from seeds of their own, derived from the experiment seed and the round through two
pseudo-client ids (:data:`SHUFFLE_ID`, :data:`FRESH_ID`), so a replay of the round re-derives
the same model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from simulator.algorithms.exchange import ServerRound
from simulator.algorithms.fedaf_losses import ServerObjective
from simulator.config.learning import AlgorithmConfig
from simulator.rng import client_seeds
from simulator.training.flat import FlatLayout
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients

#: pseudo-client ids of the server's own seeds (its training shuffle, the fresh init)
SHUFFLE_ID, FRESH_ID = 2**31 - 11, 2**31 - 12


def train_on_union(
    r: ServerRound,
    cfg: AlgorithmConfig,
    p: dict[str, Any],
    model: Any,
    layout: FlatLayout,
    x: torch.Tensor,
    y: torch.Tensor,
    v: torch.Tensor,
    have: torch.Tensor,
) -> torch.Tensor:
    """The update of the server's training on ``(x, y)``.

    Parameters
    ----------
    r : ServerRound
        The round (its global model, experiment seed and index).
    cfg : AlgorithmConfig
        The algorithm section: the model's ``lr``, ``momentum`` and ``weight_decay``.
    p : dict[str, Any]
        FedAF's validated parameters (``server_batch``, ``server_epochs``, ``lambda_glob``,
        ``tau``).
    model, layout : Any, FlatLayout
        A template of the model and its flat layout.
    x, y : torch.Tensor
        The union of the round's kept condensed sets and their labels.
    v, have : torch.Tensor
        The global class-wise mean logits ``[C, C]`` and which classes have them ``[C]``.

    Returns
    -------
    torch.Tensor
        ``[P]``: the trained model minus ``r.global_flat``.
    """
    seed = int(client_seeds(r.seed, r.round, np.array([SHUFFLE_ID]))[0])
    spec = LocalSpec(
        cfg.lr,
        p["server_batch"],
        cfg.weight_decay,
        ServerObjective(p["lambda_glob"], p["tau"]),
        momentum=cfg.momentum,
    )
    shared = {"log_r": F.log_softmax(v / p["tau"], dim=-1), "have": have}
    out = train_clients(
        model,
        layout,
        r.global_flat,
        x,
        y,
        [np.arange(len(y))],
        [p["server_epochs"]],
        [seed],
        spec,
        vectorize=False,
        shared=shared,
    )
    return out.updates[0]


def resampled(r: ServerRound, w: torch.Tensor, gamma: float) -> torch.Tensor:
    """``gamma * w + (1 - gamma) * w~``, w~ a fresh init seeded by (seed, next round)."""
    if gamma == 1.0:
        return w.clone()
    seed = int(client_seeds(r.seed, r.round + 1, np.array([FRESH_ID]))[0])
    fresh = r.model_spec.build(seed=seed)
    return gamma * w + (1.0 - gamma) * FlatLayout(fresh).flatten(fresh)[: w.numel()]
