"""What the engine hands an algorithm's methods: the round its server update sees
(:class:`ServerRound`), what it reads to price a round's transfers (:class:`WireInfo`) and the
client optimizer it declares (:class:`Optimizer`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch


@dataclass
class ServerRound:
    """What an algorithm's server update sees (all tensors on the CPU, float32).

    Attributes
    ----------
    round : the round index.
    global_flat : ``[P]`` the global model the round started from.
    delta : ``[P]`` the defended aggregate update (zero at the entries kept on clients); for an
        algorithm whose :attr:`Algorithm.upload` is not ``"update"``, the defended aggregate of
        its rows (``[R]``, the rows' space).
    client_ids : ``[K]`` the clients whose updates arrived, in row order.
    kept : ``[K]`` the defense's verdict per row (True = aggregated).
    weights : ``[K]`` each row's share of the aggregate (0 for rejected rows).
    extras : named ``[K, ...]`` tensors the clients returned beside their rows.
    server : the algorithm's server state (mutate it in place).
    num_clients : N, the population size.
    slices : where each named tensor of the flat model lies in ``global_flat``.
    store : the run's client-state store (:class:`~simulator.state.store.ClientStore`): per-client
        rows the server update keeps beside the clients' own (FedUFO's scores; declare the table
        on first use); None where no run holds one (a replay of recorded rounds).
    rows : ``[K, R]`` the rows the clients sent, aligned with ``client_ids`` (rejected ones
        included: ``kept`` says which the defense kept), for an algorithm that
        :attr:`~Algorithm.reads_rows` (the ledger's replay passes the recorded rows); None
        otherwise.
    model_spec : the model's :class:`~simulator.training.models.ModelSpec`, for a server update
        that builds or trains the model itself (FedAF's training on condensed data, a fresh
        initialisation); None where not given.
    seed : the experiment seed, for the server update's own draws (derive them from it and
        ``round``).
    """

    round: int
    global_flat: torch.Tensor
    delta: torch.Tensor
    client_ids: np.ndarray
    kept: np.ndarray
    weights: np.ndarray
    extras: dict[str, torch.Tensor]
    server: dict[str, torch.Tensor]
    num_clients: int
    slices: dict[str, slice] = field(default_factory=dict)
    store: Any = None
    rows: torch.Tensor | None = None
    model_spec: Any = None
    seed: int = 0


@dataclass(frozen=True)
class WireInfo:
    """What an algorithm reads to size a round's transfers, before any client trains
    (:meth:`Algorithm.wire_bytes`; the virtual clock's transfer times use the result).

    Attributes
    ----------
    client_ids : ``[K]`` the selected clients, sorted.
    shared_size : entries of one shared update row (the model's shared parameters).
    row_size : entries of one row as a client sends it: ``shared_size`` for model updates,
        :meth:`Algorithm.row_entries` resolved for other uploads (0: not given).
    num_classes : classes of the dataset.
    label_counts : ``() -> [K, C]`` int64 counts of each selected client's training labels
        (computed only when called).
    slices : where each named tensor of the flat model lies.
    server : the algorithm's server state as the round starts (read only).
    """

    client_ids: np.ndarray
    shared_size: int
    num_classes: int
    label_counts: Callable[[], np.ndarray]
    slices: dict[str, slice] = field(default_factory=dict)
    row_size: int = 0
    #: the algorithm's server state as the round starts (read only; FedMA's stage)
    server: dict[str, torch.Tensor] = field(default_factory=dict)

    def trainable_entries(self) -> int:
        """Entries of the model's trainable parameters (a ``"params"`` client-state row, the
        ``[P]`` vectors a client step sees): the flat model's :attr:`slices` less its float
        buffers, which in the simulator's models are BatchNorm's ``running_mean`` and
        ``running_var``; ValueError without slices."""
        if not self.slices:
            raise ValueError("WireInfo.slices (the flat model's layout) is needed for its bytes")
        buffers = ("running_mean", "running_var")
        return sum(
            s.stop - s.start for n, s in self.slices.items() if n.rpartition(".")[2] not in buffers
        )

    def sent_entries(self, names: tuple[str, ...]) -> int:
        """Entries of the server tensors ``names`` (an algorithm's ``sends``) as the round
        starts, each at its size in :attr:`server` (absent: 0, e.g. where only an upload is
        priced)."""
        return sum(int(self.server[n].numel()) for n in names if n in self.server)


@dataclass(frozen=True)
class Optimizer:
    """The client optimizer: SGD with (heavy-ball) momentum and L2 weight decay, as
    ``torch.optim.SGD(lr, momentum, weight_decay)`` with dampening 0; the momentum buffer starts
    at zero every round."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
