"""The FLChain round callback in the driver: hands each round to the recorder process.

``--ledger`` records every round on FLChain (Majeed & Hong, 2019; ledger v2). The work of a round
(the committee's re-derivation, client signatures, the round's pack, one commitment transaction)
runs in the recorder process (:mod:`ledger.host`, :mod:`ledger.session`), off the training path:
:meth:`LedgerRecorder.on_round_end` copies the round's update rows into shared memory and sends
their fields, and the driver goes on with the next round. Guarantees:

* the recorder is never more than two rounds behind: handing over round r waits until round
  r - 3 is recorded (``recorder_lag_max`` in the summary says how far behind it ever was);
* a recorder error (node gone, transaction rejected, committee refusal) surfaces at the next
  round or at the end as :class:`LedgerRoundError`;
* :meth:`flush` waits for every round handed over; the run calls it before each checkpoint and at
  the end, so the ledger is never behind the checkpoint and a kill -9 followed by ``--resume``
  audits clean.
"""

from __future__ import annotations

import errno
import itertools
import os
import time
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from ledger.errors import LedgerChainLost, LedgerError, LedgerRoundError
from ledger.host import SLOTS, RecorderHost
from ledger.records import verdict_document
from ledger.slots import MADV_POPULATE_READ, PREFAULT_BYTES, MemSlot, populate

_SESSIONS = itertools.count()

__all__ = ["LedgerRecorder"]


def aligned_extras(extras: dict[int, dict[str, Any]], ids: np.ndarray) -> dict[str, np.ndarray]:
    """The clients' extras as one ``[n, ...]`` array per name, in row order (``ids``); empty
    when no client sent any. Every row's client must have sent the same names."""
    names = sorted({k for c in ids.tolist() for k in extras.get(c, {})})
    if not names:
        return {}
    try:
        return {k: np.stack([np.asarray(extras[c][k]) for c in ids.tolist()]) for k in names}
    except KeyError as exc:
        raise LedgerRoundError(f"a client sent no extra {exc} that others sent") from None


class LedgerRecorder:
    """Round callback that records a run on FLChain through the recorder process.

    Parameters
    ----------
    cfg : Config
        The run's resolved config.
    run_dir : str or Path
        The run directory.
    """

    #: the ledger stores every update row: the actors must not pre-aggregate them
    needs_rows = True

    def __init__(self, cfg: Any, run_dir: str | Path) -> None:
        self.cfg, self.run_dir = cfg, str(run_dir)
        self.host = RecorderHost.get()  # its start overlaps with building the simulation
        self.host.busy = True
        self.acked = -1  # last round the recorder has recorded (or checked)
        self.sent = -1  # last round handed over
        self.info: dict[str, Any] | None = None
        self.lag_max = 0
        self.seconds = 0.0  # time the driver waited for or talked to the recorder
        self.gas: list[int] = []
        self._slots: list[Any] = [None] * SLOTS  # MemSlot or SharedMemory
        self._fresh: set[int] = set()  # slots not written yet
        self._gen = 0
        self._uid = next(_SESSIONS)
        self._closed = False
        self._summary: dict[str, Any] = {}

    # -- protocol ----------------------------------------------------------------------------
    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            self.info = msg[1]
        elif kind == "done":
            self.acked = max(self.acked, int(msg[1]))
            if msg[2].get("gas"):
                self.gas.append(int(msg[2]["gas"]))
        elif kind == "closed":
            self._summary = msg[1]
            self._closed = True
        elif kind == "error":
            _, rnd, where, text, full = msg
            self._closed = True
            self.host.busy = False
            self._free_slots()  # the session is over: the run will not close it
            if full:  # a full disk is the disk's fault: every caller stops on it as on its own
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), full)
            if where == "start":
                raise LedgerError(text)
            if where == "lost":
                raise LedgerChainLost(text)
            raise LedgerRoundError(text if str(rnd) in text else f"round {rnd}: {text}")

    def _recv(self) -> None:
        try:
            msg = self.host.conn.recv()
        except (EOFError, OSError):
            self._closed = True
            self._free_slots()
            raise LedgerRoundError(
                f"the ledger recorder process {self.host.exit_reason()} "
                f"(last round recorded: {self.acked})"
            ) from None
        self._handle(msg)

    def _poll(self) -> None:
        while not self._closed and self.host.conn.poll():
            self._recv()

    def _wait(self, done: Any) -> None:
        t0 = time.perf_counter()
        try:
            while not done():
                self._recv()
        finally:
            self.seconds += time.perf_counter() - t0

    # -- the run -----------------------------------------------------------------------------
    def start(self, sim: Any) -> None:
        """Open the run's session: fresh (deploy while round 0 trains) or resumed (wait for the
        ledger and check it is not behind the checkpoint).

        The driver keeps all its torch threads: the recorder, at the lowest CPU priority
        (:func:`ledger.host_process.lowest_priority`), takes the cycles training leaves idle.
        Training with a thread fewer, to leave the recorder a core, cost the robustness task
        +5-7% on 2 shared cores (stop 44, rounds in turn), about all of the ledger's overhead
        there."""
        resume = bool(self.cfg.output.resume)
        # a run resumed at round 0 (killed before its ledger started) starts its ledger afresh
        initial = np.array(sim.global_flat.numpy(), np.float32) if sim.next_round == 0 else None
        self.host.conn.send(("open", self.cfg.to_dict(), self.run_dir, initial, resume))
        self._prefault(sim)  # after "open", which unmaps the last run's slots
        self.acked = self.sent = sim.next_round - 1
        if resume:
            self._wait(lambda: self.info is not None)
            assert self.info is not None
            if sim.next_round > self.info["rounds"]:
                raise LedgerError(
                    f"cannot resume: checkpoint is at round {sim.next_round}, "
                    f"the ledger only at {self.info['rounds']}"
                )

    def on_plan(self, sim: Any, plan: Any) -> None:
        """Name this round's clients to the recorder, which derives their keys while they
        train (~22 us a new client: ~22 ms of a 1,000-client round, spent earlier)."""
        ids = sorted(plan.now | plan.hold)
        if ids and not self._closed:
            self.host.conn.send(("keys", np.array(ids, np.int64)))

    def on_round_end(self, sim: Any, record: Any) -> None:
        """Hand the round over (waiting while the recorder is three rounds behind)."""
        rnd = record.round
        self._poll()
        self._wait(lambda: self.acked >= rnd - SLOTS)
        self.lag_max = max(self.lag_max, rnd - 1 - self.acked)
        t0 = time.perf_counter()
        batch = record.rows
        if batch is None:
            raise LedgerRoundError(f"round {rnd}: the ledger needs the round's update rows")
        rows = batch.updates.numpy()
        kept = {int(v["client"]) for v in record.verdicts if v["kept"]}
        ids = batch.client_ids.astype(np.int64)
        doc = verdict_document(
            rnd,
            self.cfg.defense.defense,
            self.cfg.defense.defense_params,
            record.to_event(),
            sorted(c for c in ids.tolist() if c in kept),
        )
        meta = {
            "round": rnd,
            "client_ids": ids,
            "num_samples": batch.num_samples.astype(np.int64),
            "base_rounds": batch.base_rounds.astype(np.int64),
            "loss": np.asarray(batch.signals.get("loss", np.zeros(0)), np.float32),
            "alarm": np.asarray(batch.signals.get("alarm", np.zeros(0)), bool),
            "global_flat": np.asarray(sim.global_flat.numpy(), np.float32),
            "verdicts": doc,
            "extras": aligned_extras(getattr(record, "extras", {}), ids),
        }
        slot = self._put(rnd % SLOTS, rows) if rows.size else None
        self.host.conn.send(("round", meta, slot, self._lend(rnd)))
        self.sent = rnd
        self.seconds += time.perf_counter() - t0

    def _lend(self, rnd: int) -> list[int] | None:
        """The driver's CPUs, lent to the recorder for round ``rnd`` when the driver will wait
        for that round right after handing it over (the run's last round, a checkpoint's
        flush): the recorder's per-client work then runs on them too (:mod:`ledger.spans`).
        Pinned at 1,000 clients a round, the last round's records take ~48 ms instead of ~85."""
        every = self.cfg.output.checkpoint_every
        if rnd != self.cfg.experiment.rounds - 1 and not (every and (rnd + 1) % every == 0):
            return None
        return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None

    def _new_slot(self, i: int, size: int) -> Any:
        """A fresh shared slot ``i`` of ``size`` bytes (the old one, if any, let go)."""
        old = self._slots[i]
        if old is not None:
            old.close()
            old.unlink()
        self._gen += 1
        # a name never used before: the recorder maps a slot again when its name changes
        tag, size = f"fsrec{os.getpid()}-{self._uid}-{i}-{self._gen}", max(size, 1 << 16)
        shm: Any = (
            MemSlot(tag, size)
            if hasattr(os, "memfd_create")  # Linux: not bound by /dev/shm's size
            else shared_memory.SharedMemory(create=True, size=size, name=tag)
        )
        self._slots[i] = shm
        self._fresh.add(i)
        return shm

    def _prefault(self, sim: Any) -> None:
        """Create the slots for a full round's rows now and have the recorder fault their
        pages in on its own core while round 0 trains.

        A slot's first copy otherwise pays its page faults in the driver: 26-52 ms against
        3 ms for 36 MB (1,000 digits-MLP rows), three times a run. Small rounds skip this."""
        size = self.cfg.experiment.clients_per_round * sim.global_flat_shared.numel() * 4
        if size < PREFAULT_BYTES:
            return
        names = [self._new_slot(i, size).name for i in range(SLOTS)]
        self.host.conn.send(("prefault", names))

    def _put(self, i: int, rows: np.ndarray) -> tuple[int, str, int, int]:
        """Copy ``rows`` into shared slot ``i`` (grown when too small)."""
        shm = self._slots[i]
        if shm is None or shm.size < rows.nbytes:
            shm = self._new_slot(i, rows.nbytes)
        if i in self._fresh:  # map its pages at once (already there if the recorder faulted
            self._fresh.discard(i)  # them in): ~5 ms against ~20 ms of faults for 36 MB
            populate(shm, MADV_POPULATE_READ)
        n, d = rows.shape
        np.ndarray((n, d), "<f4", buffer=shm.buf)[...] = rows
        return i, shm.name, n, d

    def flush(self, rnd: int | None = None) -> None:
        """Wait until round ``rnd`` (default: every round handed over) is on the ledger."""
        target = self.sent if rnd is None else rnd
        if not self._closed:
            self._wait(lambda: self.acked >= target)

    def close(self, flush: bool = True) -> dict[str, Any]:
        """Flush (unless the run is failing), end the session and free the slots."""
        try:
            if not self._closed:
                if flush:
                    self.flush()
                self.host.conn.send(("close",))
                self._wait(lambda: self._closed)
        finally:
            self.host.busy = False
            self._free_slots()
        return self.summary()

    def _free_slots(self) -> None:
        """Unmap and unlink the shared-memory slots (the recorder keeps its own mappings)."""
        for shm in self._slots:
            if shm is not None:
                shm.close()
                shm.unlink()
        self._slots = [None] * SLOTS

    @property
    def closed(self) -> bool:
        """Whether the session has ended (closed, or failed)."""
        return self._closed

    def summary(self) -> dict[str, Any]:
        """What the run's summary says about the ledger."""
        s = dict(self._summary)
        s.update(
            ledger_seconds=self.seconds,
            recorder_lag_max=self.lag_max,
            gas_per_round=float(np.mean(self.gas)) if self.gas else s.get("gas_per_round"),
        )
        return s
