"""The phases of a client's local training: its local epochs on its own data, and the passes
over the server's public set an algorithm may add before or after them
(:meth:`~simulator.algorithms.base.Algorithm.public_passes`: KT-pFL's and FedMD's
distillation towards a target on the public inputs).

A :class:`Phase` is a batch schedule of the K clients of one training call: which rows each
client takes at each step, which of them are real, and its noise draws. Every client takes the
same number of passes over the same public inputs, each pass in its own seeded order (from its
shuffling seed and a tag, so it shares nothing with its local epochs' order); the inputs of a
public step are gathered when the step runs, so the schedule holds indices, not copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from simulator.training.noise import client_noise
from simulator.training.spec import make_schedule
from simulator.training.step import PUBLIC_INPUTS

#: the seed tag of the public passes' order and noise
PUBLIC_TAG = 0x9B1C


@dataclass(frozen=True)
class Phase:
    """One phase's schedule for K clients: ``[K, S, ...]`` tensors.

    Attributes
    ----------
    xs : the inputs of each step (local epochs), or the public inputs ``[M, ...]`` the
        ``index`` rows are gathered from (public passes).
    ys : labels ``[K, S, B]`` (zeros for public passes: the public set is unlabeled).
    mask : ``[K, S, B]`` 1 for real rows, 0 for padding.
    noise : ``[K, S, D]`` the clients' noise draws per step.
    index : ``[K, S, B]`` rows of the public set of each step; None for local epochs.
    """

    xs: torch.Tensor
    ys: torch.Tensor
    mask: torch.Tensor
    noise: torch.Tensor
    index: torch.Tensor | None = None

    @property
    def public(self) -> bool:
        """Whether the phase runs over the public set (no labels)."""
        return self.index is not None

    @property
    def steps(self) -> int:
        return int(self.mask.shape[1])

    @property
    def active(self) -> torch.Tensor:
        """``[K, S]`` whether each client takes a step."""
        return self.mask.sum(-1) > 0

    def batch(
        self, sl: slice | int, s: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x, y, mask, noise)`` of step ``s`` of the clients ``sl``."""
        x = self.xs[sl, s] if self.index is None else self.xs[self.index[sl, s]]
        return x, self.ys[sl, s], self.mask[sl, s], self.noise[sl, s]


def public_seeds(seeds: Sequence[int]) -> list[int]:
    """Each client's seed of its public passes, from its shuffling seed."""
    return [
        int(np.random.SeedSequence([int(s) & (2**63 - 1), PUBLIC_TAG]).generate_state(1)[0])
        for s in seeds
    ]


def public_phase(
    inputs: torch.Tensor,
    seeds: Sequence[int],
    passes: int,
    batch_size: int,
    noise_size: int,
    works: np.ndarray,
) -> Phase:
    """``passes`` passes of each of the K clients (``seeds``: their shuffling seeds) over the
    public ``inputs`` ``[M, ...]``, in batches of ``batch_size``, the last one partial; a client
    without local work (``works`` False: no local step) takes none either."""
    k, m, device = len(seeds), int(inputs.shape[0]), inputs.device
    pseeds = public_seeds(seeds)
    local, mask = make_schedule([m] * k, [passes] * k, pseeds, batch_size)
    mask[~np.asarray(works, dtype=bool)] = 0.0
    index = torch.from_numpy(local).to(device)
    return Phase(
        inputs,
        torch.zeros(index.shape, dtype=torch.long, device=device),
        torch.from_numpy(mask).to(device),
        client_noise(pseeds, mask.shape[1], noise_size, device),
        index,
    )


def grad_mask(
    step_obj: object,
    shared: dict[str, torch.Tensor],
    dtype: torch.dtype,
    p_num: int,
    aux_sizes: Sequence[int],
) -> torch.Tensor | None:
    """The step's :attr:`~simulator.algorithms.base.Algorithm.train_mask` (a sent ``[P]`` tensor
    over the ``p_num`` trainable parameters) extended by ones over the trained client-state
    tables (``aux_sizes`` entries each); None when every entry trains."""
    name = getattr(step_obj, "train_mask", None)
    if name is None:
        return None
    if name not in shared:
        raise ValueError(f"train_mask {name!r} is not among the tensors the server sends")
    m = shared[name].to(dtype).reshape(-1)
    if m.numel() != p_num:
        raise ValueError(
            f"train_mask {name!r}: {m.numel()} entries for {p_num} trainable parameters"
        )
    ones = [torch.ones(n, dtype=m.dtype, device=m.device) for n in aux_sizes]
    return torch.cat([m, *ones]) if ones else m


def public_phases(
    step_obj: object,
    shared: dict[str, torch.Tensor],
    seeds: Sequence[int],
    batch_size: int,
    n_noise: int,
    plain: bool,
    works: np.ndarray,
) -> tuple[Phase | None, Phase | None]:
    """The passes over the public inputs (the sent tensor :data:`PUBLIC_INPUTS`) the step takes
    before and after its local epochs (``public_passes``); None for none. ``plain``: the step
    has no client_loss of its own; ``works``: ``[K]`` which clients train at all."""
    passes = step_obj.public_passes() if hasattr(step_obj, "public_passes") else (0, 0)
    if not any(passes):
        return None, None
    if PUBLIC_INPUTS not in shared:
        raise ValueError(
            f"public passes: the server sent no {PUBLIC_INPUTS!r} (the public set's inputs)"
        )
    if plain:
        raise ValueError("public passes need the step's own client_loss (no labels there)")
    x = shared[PUBLIC_INPUTS]
    return tuple(  # type: ignore[return-value]
        public_phase(x, seeds, n, batch_size, n_noise, works) if n else None for n in passes
    )
