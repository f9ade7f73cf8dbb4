"""What an algorithm's client step sees: one client before its local steps (:class:`Start`), one
batch (:class:`Step`), and after the local steps (:class:`Finish`).

The trainer builds these inside the function it maps over a chunk of clients with
``torch.func.vmap`` (or calls once per client, the sequential reference), so every tensor here is
ONE client's: ``flat`` is ``[P]``, ``x`` is ``[B, ...]``, ``state["h"]`` is ``[P]``. Code written
against them must be vmap-safe: tensor operations only, no ``.item()``, no data-dependent Python
branches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

#: the name under which the server's public set's inputs reach the client step (``Step.shared``,
#: ``Finish.shared``) of an algorithm that uses them (``Algorithm.uses_public``)
PUBLIC_INPUTS = "public_x"


@dataclass(frozen=True)
class Start:
    """One client before its local steps (``Algorithm.client_start``).

    Attributes
    ----------
    flat : ``[P]`` the trainable parameters the local steps would start from: the round's global
        ones, or the client's own start where the trainer was given one (Siren's alarming
        clients, entries kept on the client).
    global_flat : ``[P]`` the round's global trainable parameters.
    state, shared : as in :class:`Step`.
    x, y, mask : the client's batches of one epoch ``[S1, B, ...]``, ``[S1, B]`` (its first
        epoch's order, seeded) and a mask marking each of its samples exactly once, as in
        :class:`Finish`.
    forward : ``forward(params, x) -> (features, logits)`` in evaluation mode with the client's
        start buffers (no augmentation, no batch statistics, no noise).
    split : ``[P] -> {name: tensor}``, the trainable parameters of a flat vector by name.
    iterations : the chunk's bound from
        :meth:`~simulator.algorithms.base.Algorithm.start_iterations` (a Python int, the same
        for every client of the chunk).
    noise : ``[D]`` standard normals from the client's own seeded stream
        (:meth:`~simulator.algorithms.base.Algorithm.start_noise_size` of them, a stream apart
        from its steps' noise: :data:`simulator.training.noise.START_TAG`), the same on both
        paths; ``[0]`` when the algorithm asks none (None where no trainer built the start).
    """

    flat: torch.Tensor
    global_flat: torch.Tensor
    state: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor]
    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    forward: Callable[[dict[str, torch.Tensor], torch.Tensor], Any]
    split: Callable[[torch.Tensor], dict[str, torch.Tensor]]
    iterations: int = 0
    noise: Any = None


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
    aux : the client-state tables trained beside the model
        (:attr:`~simulator.algorithms.base.Algorithm.client_trainable`), their current values
        (Ditto's personal model); the gradient of the returned loss moves them by the same
        optimizer. Empty for most algorithms.
    public : True on a pass over the server's public set
        (:meth:`~simulator.algorithms.base.Algorithm.public_passes`): ``x`` are public inputs,
        ``y`` zeros, ``ce`` zero; the same for every client of the call (a plain branch).
    index : on a public pass, ``[B]`` the rows of the public set in ``x`` (to look up a
        per-row target); None otherwise.
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
    aux: dict[str, torch.Tensor] = field(default_factory=dict)
    public: bool = False
    index: torch.Tensor | None = None


@dataclass(frozen=True)
class Finish:
    """One client after its local steps.

    Attributes
    ----------
    flat : ``[P]`` its trained parameters; ``global_flat`` the round's global ones.
    state, shared : as in :class:`Step`.
    steps : the number of local SGD steps it took (a float scalar tensor; 0 if none).
    lr : the client learning rate.
    aux : the trained client-state tables (see :class:`Step`); a table the finish does not
        return goes back to the store as trained.
    x, y, mask : the client's batches of one epoch ``[S1, B, ...]``, ``[S1, B]`` (S1: the
        longest first epoch of the chunk) and a mask marking each of its samples exactly once:
        per-class feature means (FedFM) and class counts (FedUFO) are sums over ``mask``.
    buffers : the client's normalization (and other) buffers after training, by name.
    forward : ``forward(params, x) -> (features, logits)`` in evaluation mode with the
        client's buffers (no augmentation, no batch statistics).
    split : ``[P] -> {name: tensor}``, the trainable parameters of a flat vector by name.
    """

    flat: torch.Tensor
    global_flat: torch.Tensor
    state: dict[str, torch.Tensor]
    shared: dict[str, torch.Tensor]
    steps: torch.Tensor
    lr: float
    aux: dict[str, torch.Tensor] = field(default_factory=dict)
    x: Any = None
    y: Any = None
    mask: Any = None
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    forward: Any = None
    split: Any = None


class PlainStep:
    """The client step of plain empirical risk minimization (FedAvg): the cross-entropy, no
    state, no extras. Used when no algorithm is given (tests, the server's own training)."""

    client_state: dict[str, str] = {}
    client_trainable: tuple[str, ...] = ()
    sends: tuple[str, ...] = ()
    random = False

    def noise_size(self, model: Any, batch_size: int) -> int:
        return 0

    def client_loss(self, s: Step) -> torch.Tensor:
        return s.ce

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        return {}


PLAIN = PlainStep()
