"""Re-deriving a round's global model from its recorded updates (FLChain's verification step).

The edge committee (while a run records) and the audit (afterwards) both rebuild the run's
server side from its saved config (:meth:`simulator.round.server.ServerSide.of`): the same
federation (server public/root set, test set, model layout), the same defense with its state
(Siren's roll-back episode, centered clipping's momentum) and the same algorithm with its server
state, and feed it the recorded update batches round after round. Nothing client-side is built
(no client-state store, executor, client evaluation or scheduler): per-client state a rule
reads comes with the recorded batch, as signals (the clients' alarms from their signed records;
Siren's bans, which the run keeps in its client-state store, from the verdict document:
:func:`ledger.round_build.banned_rows`). The
aggregation is the engine's own code (:func:`simulator.round.aggregate.aggregate` and
:func:`simulator.round.aggregate.server_step`), so on the same platform and torch version the result
is bit-identical to the run's global model. Across platforms float reductions may differ in the
last bits; the audit then compares within :data:`TOLERANCE` and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from defenses import UpdateBatch

if TYPE_CHECKING:
    from simulator.config.sections import Config

#: max |recomputed - recorded| (relative to max(1, |recorded|)) accepted as equal when the
#: recomputed global model is not bit-identical (other CPU, other BLAS)
TOLERANCE = 1e-5


def replay_error(new: torch.Tensor, recorded: Any) -> float:
    """``max |new - recorded|`` relative to ``max(1, max |recorded|)``: at most
    :data:`TOLERANCE` for the same model summed in another order (the driver's torch threads
    against the committee's one: seen on an AMD EPYC host, FedAF's server training)."""
    import numpy as np

    g = np.asarray(recorded, dtype=np.float64).ravel()
    diff = np.abs(g - new.detach().double().numpy().ravel())
    return float(np.max(diff, initial=0.0) / max(1.0, float(np.abs(g).max(initial=0.0))))


class Replayer:
    """The server side of a run, replayed from recorded update batches.

    Parameters
    ----------
    cfg : Config
        The run's resolved config; only the server side is built (clients never train here).

    Attributes
    ----------
    side : ServerSide
        The replayed server side: defense and algorithm state carry from one step to the next.
    """

    def __init__(self, cfg: Config) -> None:
        from simulator.round.server import ServerSide
        from simulator.run.federation import build_federation

        self.side = ServerSide.of(cfg, build_federation(cfg, devices=False))

    @property
    def row_size(self) -> int:
        """Entries of an update row: the shared part of the model (an algorithm's kept-local
        entries, e.g. FedBN's BatchNorm, never leave the clients)."""
        return int(self.side.space.size)

    def step(
        self,
        rnd: int,
        batch: UpdateBatch,
        history: dict[int, torch.Tensor],
        extras_of: dict[int, dict[str, Any]] | None = None,
    ) -> tuple[torch.Tensor, list[Any]]:
        """Aggregate round ``rnd``'s batch on top of ``history[rnd]``.

        Parameters
        ----------
        rnd : int
            Round index.
        batch : UpdateBatch
            The round's update rows, in the order the engine aggregated them.
        history : dict of int to Tensor
            Global model each recent round started from (stale updates need their base).
        extras_of : dict, optional
            Client id -> the named extras it sent beside its row (recorded with the row).

        Returns
        -------
        (Tensor, list of Verdict)
            The new global model and the defense's verdicts.
        """
        from simulator.round.aggregate import aggregate, server_step

        s = self.side
        s.history = dict(history)
        s.global_flat = history[rnd]
        delta, verdicts = aggregate(s, rnd, batch)
        new = server_step(s, rnd, delta, verdicts, batch.client_ids, extras_of or {}, batch)
        s.global_flat = new
        return new, verdicts

    def close(self) -> None:
        """Release nothing: the replayer holds no executor or client-state store (kept so that
        callers may close it like any other part)."""
