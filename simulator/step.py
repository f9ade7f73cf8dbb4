"""What an algorithm's client step sees: one client, one batch (:class:`Step`), and after the
local steps (:class:`Finish`).

The trainer builds these inside the function it maps over a chunk of clients with
``torch.func.vmap`` (or calls once per client, the sequential reference), so every tensor here is
ONE client's: ``flat`` is ``[P]``, ``x`` is ``[B, ...]``, ``state["h"]`` is ``[P]``. Code written
against them must be vmap-safe: tensor operations only, no ``.item()``, no data-dependent Python
branches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Step:
    """One local step of one client.

    Attributes
    ----------
    params : the client's current trainable parameters by name (views of ``flat``).
    flat : ``[P]`` the same parameters as one vector (layout order).
    x, y, mask : the batch ``[B, ...]``, its labels ``[B]`` and which rows are real (1) or
        padding of a partial last batch (0).
    features, logits : the model's representation ``[B, H]`` and output ``[B, C]`` on ``x``.
    ce : the mean cross-entropy over the real rows (a scalar).
    global_flat, global_params : the round's global trainable parameters.
    state : the client's own tensors from the client-state store (zeros before its first round).
    shared : the tensors the server sent this round (:attr:`Algorithm.sends`).
    forward : ``forward(params, x) -> (features, logits)`` with other parameters (e.g. the
        global model's, for a representation of the same batch).
    """

    params: dict[str, torch.Tensor]
    flat: torch.Tensor
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    features: torch.Tensor
    logits: torch.Tensor
    ce: torch.Tensor
    global_flat: torch.Tensor
    global_params: dict[str, torch.Tensor]
    state: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor]
    forward: Callable[[dict[str, torch.Tensor], torch.Tensor], Any]


@dataclass(frozen=True)
class Finish:
    """One client after its local steps.

    Attributes
    ----------
    flat : ``[P]`` its trained parameters; ``global_flat`` the round's global ones.
    state, shared : as in :class:`Step`.
    steps : the number of local SGD steps it took (a float scalar tensor; 0 if none).
    lr : the client learning rate.
    """

    flat: torch.Tensor
    global_flat: torch.Tensor
    state: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor]
    steps: torch.Tensor
    lr: float


class PlainStep:
    """The client step of plain empirical risk minimization (FedAvg): the cross-entropy, no
    state, no extras. Used when no algorithm is given (tests, the server's own training)."""

    client_state: dict[str, str] = {}
    sends: tuple[str, ...] = ()
    random = False

    def client_loss(self, s: Step) -> torch.Tensor:
        return s.ce

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {}


PLAIN = PlainStep()
