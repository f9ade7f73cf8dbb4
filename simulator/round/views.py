"""The views a run gives of its live state (the view half of
:class:`simulator.round.engine.Simulation`, which inherits :class:`RunViews`).

The round steps never see the simulation itself: :mod:`simulator.round.aggregate`'s functions
read a :class:`~simulator.round.server.ServerSide` (:attr:`RunViews.server_side`), the other
steps a :class:`~simulator.round.context.RoundContext` (:meth:`RunViews.context`). Both are built
from the live objects each time they are asked for, so they always show the current round.
"""

from __future__ import annotations

import torch

from simulator.round.context import RoundContext
from simulator.round.server import ServerSide


class RunViews:
    """The views of a simulation's live state; they read its parts (``cfg``, ``fed``,
    ``policy``, ``algorithm``, ``defense``, ``adversary``, ``space``, ``spaces``, ``store``,
    ``train_clients``, ``scheduler``, ``server``, ``client_eval``, ``flops_per_sample``,
    ``compression``) and its run state (``global_flat``, ``server_state``, ``history``)."""

    @property
    def global_flat_shared(self) -> torch.Tensor:
        """The global model restricted to the shared entries (what rows are relative to)."""
        return self.space.shared_of(self.global_flat)

    @property
    def server_side(self) -> ServerSide:
        """A view of this run's server side (defense, algorithm, global model, history, server
        state: the live objects) for :mod:`simulator.round.aggregate`'s functions."""
        f = self.fed
        return ServerSide(
            self.defense,
            self.algorithm,
            self.space,
            self.server,
            f.public_x,
            f.public_y,
            f.num_clients,
            f.layout,
            self.cfg.experiment.seed,
            self.global_flat,
            self.server_state,
            self.history,
            self.store,
            self.compression,
        )

    def context(self) -> RoundContext:
        """What this round's steps read (:class:`~simulator.round.context.RoundContext`)."""
        return RoundContext(
            self.cfg,
            self.fed,
            self.policy,
            self.algorithm,
            self.defense,
            self.adversary,
            self.space,
            self.store,
            self.train_clients,
            self.scheduler,
            self.server,
            self.client_eval,
            self.flops_per_sample,
            self.compression,
            self.spaces,
        )
