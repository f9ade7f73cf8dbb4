"""What the round steps read: the run's parts, as one narrow, read-only context.

The steps of :mod:`simulator.round` (plan, train, collect, aggregate, record) are functions of a
:class:`RoundContext` and of the state they are handed (the virtual time, the updates in flight,
the global model); they return what they changed and the engine
(:class:`~simulator.round.engine.Simulation`) applies it. No step imports the engine or
reaches into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from defenses import Defense
from simulator.algorithms.base import Algorithm
from simulator.compression import Compressor
from simulator.config.sections import Config
from simulator.placement.runtime import Scheduler
from simulator.policies import RoundPolicy
from simulator.round.adversary import Adversary
from simulator.run.federation import Federation
from simulator.state.store import ClientStore
from simulator.training.evaluation import ClientEval, ServerEval
from simulator.training.space import ParamSpace


@dataclass(frozen=True)
class RoundContext:
    """The parts of a run that a round reads.

    Attributes
    ----------
    cfg : the resolved configuration.
    fed : the federation (population, availability, data, model).
    policy, algorithm, defense, adversary : the round policy, the FL algorithm, the aggregation
        rule and the adversary (who is malicious, what model attacks send).
    space : shared and kept-local entries of the flat model.
    store : the client-state store (steps read it; writes come back to the engine).
    train_clients : the clients' training data (without Siren's holdouts).
    scheduler : the placement of training tasks on actors (its learning is the engine's).
    server, client_eval : the server's evaluation and the per-client evaluation.
    flops_per_sample : the model's training FLOPs per sample (the clock's compute cost).
    compression : what the transfers carry (:mod:`simulator.compression`); with the
        algorithm's ``wire_bytes`` it sizes each client's download and upload
        (:mod:`simulator.round.wire`), the clock's transfer cost.
    spaces : with several model groups, each group's shared and kept-local entries (``space``
        is group 0's); empty with one group.
    """

    cfg: Config
    fed: Federation
    policy: RoundPolicy
    algorithm: Algorithm
    defense: Defense
    adversary: Adversary
    space: ParamSpace
    store: ClientStore
    train_clients: Any
    scheduler: Scheduler
    server: ServerEval
    client_eval: ClientEval
    flops_per_sample: float
    compression: Compressor
    spaces: tuple[ParamSpace, ...] = ()
