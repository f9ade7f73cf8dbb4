"""What a checkpoint holds of a run, and writing and reading it back (the checkpoint half of
:class:`simulator.round.engine.Simulation`, which inherits :class:`Checkpointed`).

A checkpoint is the state a round carries: next round, global model, virtual clock, server and
defense state, in-flight updates, past global models, the scheduler's state and the client-state
store's manifest; resuming from it is bitwise identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from simulator.config.fields import ConfigError
from simulator.population.clock import VirtualClock
from simulator.round.types import InFlight
from simulator.state.store import ClientStore


class Checkpointed:
    """The checkpoint methods of a simulation; they read and set its run state (``next_round``,
    ``global_flat``, ``clock``, ``server_state``, ``defense``, ``in_flight``, ``wall_offset``,
    ``history``, ``scheduler``, ``store``, ``client_eval``, ``cfg``)."""

    def state_dict(self) -> dict[str, Any]:
        return {
            "next_round": self.next_round,
            "global": self.global_flat.clone(),
            "now": self.clock.now,
            "server_state": dict(self.server_state),
            "defense": self.defense.state_dict(),
            "in_flight": [
                (f.arrival, f.row, f.num_samples, f.loss, f.malicious, f.alarm, f.extras)
                for f in self.in_flight
            ],
            "wall_time": self.wall_offset,
            "history": dict(self.history),
            "scheduler": self.scheduler.state_dict(),
        }

    def save_checkpoint(self, directory: Path, wall_time: float, **extra: Any) -> Path:
        """Atomically write ``checkpoint.pt`` (write to a temporary file, then rename).

        The client-state store first writes what changed since its last save into
        ``state/checkpoint/``; the manifest it returns goes into ``checkpoint.pt``, whose rename
        is the one commit point (a crash before it leaves the previous checkpoint and its store
        files intact). ``extra`` entries (the run summary) are saved beside the simulation
        state. A full disk raises ``OSError`` naming the temporary file, which is removed.
        """
        directory.mkdir(parents=True, exist_ok=True)
        st = self.state_dict()
        st["store"] = self.store.save(directory / "state" / "checkpoint")
        st["wall_time"] = wall_time
        st.update(extra)
        tmp = directory / "checkpoint.pt.tmp"
        try:  # through a Python file, whose OSError torch keeps in the chain of what it raises
            with tmp.open("wb") as fh:
                torch.save(st, fh)
        except (OSError, RuntimeError) as exc:  # the last checkpoint stands
            tmp.unlink(missing_ok=True)  # no partial file keeps the space
            os_error = _os_error_in(exc)
            if os_error is None:
                raise
            raise OSError(os_error.errno, os_error.strerror, str(tmp)) from exc
        final = directory / "checkpoint.pt"
        tmp.replace(final)
        return final

    def load_state_dict(self, st: dict[str, Any], store_dir: Path | None = None) -> None:
        if "server_state" not in st:
            raise ConfigError(
                "output.resume: the checkpoint was written by a FedSentry before "
                "engine v2 and cannot be resumed; run it again"
            )
        self.next_round = int(st["next_round"])
        self.global_flat = st["global"].clone()
        self.clock = VirtualClock()
        self.clock.advance_to(float(st["now"]))
        self.server_state = dict(st["server_state"])
        self.defense.load_state_dict(st["defense"])
        self.in_flight = [InFlight(*f) for f in st["in_flight"]]
        self.wall_offset = float(st.get("wall_time", 0.0))
        self.history = dict(st.get("history", {}))
        if "scheduler" in st:
            self.scheduler.load_state_dict(st["scheduler"])
        if st.get("store") is not None and store_dir is not None:
            self.store.close()
            self.store = ClientStore.load(
                store_dir,
                self.cfg.execution.state_memory_bytes,
                Path(self.cfg.output.out) / "state" / "spill",
                manifest=st["store"],
            )
            self.client_eval.store = self.store


def _os_error_in(exc: BaseException) -> OSError | None:
    """The first ``OSError`` in ``exc``'s chain (torch raises RuntimeError("unexpected pos")
    while handling a file write's ENOSPC)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
