"""The server side of a round: what aggregation and the server update read and change.

:mod:`simulator.round.aggregate`'s ``aggregate``, ``context`` and ``server_step`` are functions of a
:class:`ServerSide`, never of the whole :class:`~simulator.round.engine.Simulation`. The engine
hands
them a view of its live state (:attr:`Simulation.server_side`); the ledger's committee and audit
(:class:`ledger.replay.Replayer`) build one from a run's config with :meth:`ServerSide.of`,
without the client-state store, the executor, client evaluation or the scheduler, and so
re-derive each round's global model through the same code as the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from defenses import Defense, make_defense
from simulator.algorithms import make_algorithm
from simulator.algorithms.base import Algorithm
from simulator.compression import Compressor, make_compressor
from simulator.round.wire import check_compression
from simulator.training.evaluation import ServerEval
from simulator.training.flat import FlatLayout
from simulator.training.space import ParamSpace
from simulator.training.spec import LocalSpec

if TYPE_CHECKING:
    from simulator.config.sections import Config
    from simulator.run.federation import Federation
    from simulator.state.store import ClientStore


def local_spec(cfg: Config, algorithm: Algorithm) -> LocalSpec:
    """The clients' optimizer settings and step (the algorithm's optimizer: learning rate,
    weight decay, momentum; the configured batch size), clean of any data attack. FLTrust's
    server update trains with it."""
    opt = algorithm.optimizer()
    return LocalSpec(
        opt.lr, cfg.algorithm.batch_size, opt.weight_decay, algorithm, momentum=opt.momentum
    )


@dataclass
class ServerSide:
    """What the server side of a round reads, and the state it carries between rounds.

    Attributes
    ----------
    defense : Defense
        The aggregation rule, with its own state across rounds (Siren's roll-back episode,
        centered clipping's momentum); per-client state it reads (Siren's bans) comes as batch
        signals.
    algorithm : Algorithm
        The FL algorithm (its ``server_update``).
    space : ParamSpace
        Shared and kept-local entries of the flat model (rows hold the shared ones).
    evaluation : ServerEval
        The server's evaluation: test set, public-set scores of candidate models, its own
        root-set update (FLTrust).
    public_x, public_y : Tensor or None
        The server-held public/root set (None without one: no scorer, no server update).
    num_clients : int
        N, the population size (an algorithm's server update may scale by it).
    layout : FlatLayout
        Where each named tensor of the model lies in the flat vector.
    seed : int
        The experiment seed (each round's defense stream is drawn from it).
    global_flat : Tensor
        ``[P]`` the global model the round starts from.
    server_state : dict of str to Tensor
        The algorithm's server state (its server update changes it in place).
    history : dict of int to Tensor
        Round -> the global model that round started from, for the rounds still kept (stale
        rows' bases, Siren's roll-back).
    store : ClientStore or None
        The run's client-state store, handed to the algorithm's server update
        (``ServerRound.store``); None where no run holds one (the ledger's replay).
    compression : Compressor
        What the transfers carry; a compressed download is part of the server step (the
        ledger's replay re-applies it).
    """

    defense: Defense
    algorithm: Algorithm
    space: ParamSpace
    evaluation: ServerEval
    public_x: torch.Tensor | None
    public_y: torch.Tensor | None
    num_clients: int
    layout: FlatLayout
    seed: int
    global_flat: torch.Tensor
    server_state: dict[str, torch.Tensor]
    history: dict[int, torch.Tensor] = field(default_factory=dict)
    store: ClientStore | None = None
    compression: Compressor = field(default_factory=Compressor)

    @classmethod
    def of(
        cls,
        cfg: Config,
        fed: Federation,
        algorithm: Algorithm | None = None,
        defense: Defense | None = None,
    ) -> ServerSide:
        """The server side of run ``cfg`` on ``fed`` as the run starts: the initial global
        model, the algorithm's initial server state, a fresh defense.

        Parameters
        ----------
        cfg : Config
            The run's config (algorithm, defense and their parameters, seed, batch size).
        fed : Federation
            Its federation (public and test sets, model, layout, population size).
        algorithm, defense : optional
            Already built from ``cfg`` (the engine builds them first, to fail fast).
        """
        alg = algorithm if algorithm is not None else make_algorithm(cfg.algorithm)
        d = cfg.defense
        rule = defense if defense is not None else make_defense(d.defense, **d.defense_params)
        seed = cfg.experiment.seed
        evaluation = ServerEval(fed, seed, cfg.algorithm.local_epochs, local_spec(cfg, alg))
        g = fed.initial.clone()  # not the template: a shared federation
        comp = make_compressor(cfg.compression.compression, **cfg.compression.compression_params)
        check_compression(alg, comp)
        return cls(
            rule,
            alg,
            ParamSpace.of(fed.layout, alg, fed.public_entries),
            evaluation,
            fed.public_x,
            fed.public_y,
            fed.num_clients,
            fed.layout,
            seed,
            g,
            alg.init_server(g, fed.layout.num_params),
            compression=comp,
        )

    @property
    def global_shared(self) -> torch.Tensor:
        """The global model restricted to the shared entries (what rows are relative to)."""
        return self.space.shared_of(self.global_flat)

    def base_model(self, rnd: int) -> torch.Tensor:
        """The global model that round ``rnd``'s clients trained from.

        Raises
        ------
        KeyError
            When that round's model is no longer kept (``max_staleness``).
        """
        if rnd not in self.history:
            raise KeyError(f"global model of round {rnd} is no longer kept (max_staleness)")
        return self.history[rnd]
