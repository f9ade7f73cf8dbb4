"""One run's FLChain recording, inside the recorder process (:mod:`ledger.host`).

A session starts fresh (connect, deploy the channel's contract with the edge committee's keys,
write the genesis pack and ``manifest.json``) or resumes (:mod:`ledger.session_resume`: re-import
the devnet export or reconnect, drop a torn last record, index a round the chain committed before
the run stopped, replay every recorded round so the committee's defense state catches up). Then,
for every round the driver hands over, :meth:`Session.record`:

1. the committee re-derives the round's global model from the rows (:class:`ledger.replay.
   Replayer`) and approves only if it equals the aggregator's (within the audit's tolerance);
2. each client signs its update record; the round's pack is written (:mod:`ledger.pack`);
3. the committee signs the commitment message (BLS, aggregated), and ONE transaction commits the
   round's roots (:func:`ledger.commitment.commit_message`);
4. the devnet's new block is appended to the export, then the round to ``rounds.jsonl``.

The chain is the authority: ``rounds.jsonl`` is an index that can always be rebuilt from the
chain's ``Committed`` event and the round's pack (what a resume does after a kill between 3 and 4).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ledger.commitment import commit_message
from ledger.committee import Committee
from ledger.errors import LedgerError, LedgerRoundError
from ledger.keys import ClientKeys
from ledger.pack import Entry, Pack, PackError, write_pack
from ledger.pack_rows import resumed_round
from ledger.pyevm import genesis_spec
from ledger.records import hx, model_blob, sha256, unhx
from ledger.replay import TOLERANCE, Replayer, replay_error
from ledger.round_build import Channel, RoundRows, build_round
from ledger.round_commit import attest, index_entry, send_commit
from ledger.session_resume import check_setup, open_index, open_resumed_chain, resumed_manifest
from ledger.session_start import (
    channel_id,
    clear_ledger,
    committee_of,
    deploy_channel,
    fresh_manifest,
    lock_ledger,
)
from ledger.store import decode, write_json_atomic
from simulator.run.appendlog import AppendLog

__all__ = ["Session"]


class Session:
    """The recorder of one run (see the module docstring).

    Parameters
    ----------
    cfg : Config
        The run's resolved config.
    run_dir : str or Path
        The run directory (the ledger lives in ``run_dir/ledger``).
    """

    def __init__(self, cfg: Any, run_dir: str | Path) -> None:
        self.cfg = cfg
        self.dir = Path(run_dir) / "ledger"
        self.channel = channel_id(cfg)
        self.seed = f"{cfg.experiment.seed}:{self.channel.hex()[:16]}"
        size = cfg.ledger.committee
        self.committee: Committee | None = committee_of(size) if size > 0 else None
        self.keys = ClientKeys(self.seed)
        self.chain: Any = None
        self.contract: Any = None
        self.exporter: Any = None
        self.where: Channel | None = None
        self.index: AppendLog | None = None
        self.replayer: Any = None
        self.hashes: dict[int, bytes] = {}  # round -> hash of the global model it started from
        self.history: dict[int, torch.Tensor] = {}  # round -> that model (recent rounds)
        self.admitted: set[int] = set()
        self.entries: dict[int, dict[str, Any]] = {}  # committed rounds (rounds.jsonl)
        self.onchain_bls = False
        self.gas: list[int] = []
        self.busy = 0.0  # seconds spent recording rounds
        self.cpu = 0.0  # of which CPU seconds (its own: at the lowest priority it may wait)
        self._lock: int | None = None

    def open(self, initial: np.ndarray | None, resume: bool) -> dict[str, Any]:
        """Start (fresh, or resume the run in place); returns what the driver needs to know."""
        t0, c0 = time.perf_counter(), time.process_time()
        self._lock = lock_ledger(self.dir)
        if resume and (self.dir / "manifest.json").is_file():
            self._resume()
        elif initial is None:
            raise LedgerError(
                f"cannot resume: {self.dir} has no manifest.json, and the "
                "checkpoint is past round 0"
            )
        else:
            self._fresh(initial)
        self.busy += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        return {
            "rounds": len(self.entries),
            "contract": self.contract.address,
            "backend": self.chain.backend,
            "onchain_bls": self.onchain_bls,
        }

    def _fresh(self, initial: np.ndarray) -> None:
        clear_ledger(self.dir)
        c = self.committee
        self.chain, self.contract, self.onchain_bls = deploy_channel(
            self.cfg, self.seed, self.channel, c
        )
        self.replayer = Replayer(self.cfg) if c is not None else None
        gblob = model_blob(initial)
        initial_pack = write_pack(self.dir, -1, [Entry.of("global", gblob)])
        self.hashes[0] = sha256(gblob)
        self.history[0] = torch.from_numpy(np.array(initial, np.float32))
        manifest = fresh_manifest(
            self.cfg,
            self.chain,
            self.contract,
            c,
            self.seed,
            self.hashes[0],
            initial_pack,
            self.onchain_bls,
        )
        if self.chain.backend == "embedded":
            from ledger.devnet import ChainExporter

            self.exporter = ChainExporter(self.chain, self.dir / "chain")
            self.exporter.flush()
            manifest["genesis"] = genesis_spec(self.seed, 1)
        (self.dir / "rounds.jsonl").write_bytes(b"")
        write_json_atomic(self.dir / "manifest.json", manifest)
        self.where = Channel(self.channel, self.contract.address, manifest["chain_id"])
        self.index = AppendLog(self.dir / "rounds.jsonl")

    def _resume(self) -> None:
        manifest = resumed_manifest(
            self.dir, self.cfg.experiment.seed
        )  # its form checked as the audit checks it
        # the run's own channel: a resume may train elsewhere (--num-actors, --ray-address)
        self.channel = unhx(manifest["channel_id"])
        self.seed = manifest["account_seed"]
        self.keys = ClientKeys(self.seed)
        self.chain, self.exporter = open_resumed_chain(self.cfg, self.seed, manifest, self.dir)
        self.contract = self.chain.w3.eth.contract(
            address=manifest["contract"], abi=manifest["abi"]
        )
        self.onchain_bls = bool(manifest.get("onchain_bls"))
        check_setup(self.chain, self.contract, manifest, self.dir)
        self.where = Channel(self.channel, self.contract.address, manifest["chain_id"])
        self.entries = open_index(self.dir, self.contract, manifest["channel_id"])
        self.index = AppendLog(self.dir / "rounds.jsonl")
        initial = Pack.read(self.dir, unhx(manifest["initial_pack"]))
        self.hashes[0] = initial.digest("global")
        g0 = np.frombuffer(initial.raw("global"), np.uint8)
        self.history[0] = torch.from_numpy(decode(g0.tobytes())["global"])
        self.replayer = Replayer(self.cfg) if self.committee is not None else None
        self._catch_up()

    def _catch_up(self) -> None:
        """Replay every recorded round: the committee's defense state, the admitted clients and
        the recent global models must be where the run left them."""
        from defenses import UpdateBatch

        for rnd in sorted(self.entries):
            e = self.entries[rnd]
            size = self.replayer.row_size if self.replayer is not None else None
            try:
                g, adm, got, extras = resumed_round(Pack.read(self.dir, unhx(e["pack"])), size)
            except (PackError, KeyError, ValueError) as exc:
                raise LedgerError(f"cannot resume: round {rnd}'s pack is unusable: {exc}") from None
            if self.replayer is not None and got is not None:
                batch = UpdateBatch(torch.from_numpy(got[0]), **got[1])
                self.replayer.step(rnd, batch, self.history, extras)
            self.admitted |= set(adm)
            self.hashes[rnd + 1] = unhx(e["global_hash"])
            self.history[rnd + 1] = torch.from_numpy(g)
            self._prune(rnd + 1)

    def _prune(self, rnd: int) -> None:
        keep = max(self.cfg.clock.max_staleness + 2, 64)
        for old in [r for r in self.history if r < rnd - keep]:
            del self.history[old]

    def record(self, data: RoundRows) -> dict[str, Any]:
        """Record one round (or, for a round the ledger already holds after a resume, check
        that the recomputed global model equals the recorded one)."""
        t0, c0 = time.perf_counter(), time.process_time()
        rnd = data.round
        ghash = sha256(model_blob(data.global_flat))
        if self._recorded_before(rnd, ghash):
            return {"round": rnd, "seconds": time.perf_counter() - t0, "recorded": False}
        approve = self._approves(data, ghash)
        try:
            built = build_round(
                data, self.where, self.keys, self._base_hash, self.admitted.__contains__
            )
        except KeyError as exc:
            raise LedgerRoundError(f"round {rnd}: a row's base model is unknown: {exc}") from None
        pack_id = write_pack(self.dir, rnd, built.entries)
        msg = commit_message(
            self.where.chain_id,
            self.where.contract,
            self.channel,
            rnd,
            built.global_hash,
            built.submissions_root,
            built.verdicts_hash,
            built.admitted_root,
            pack_id,
        )
        signers, sig, sig_eip = attest(self.committee, rnd, msg, approve)
        receipt = send_commit(self.chain, self.contract, rnd, built, pack_id, signers, sig_eip)
        self.gas.append(int(receipt["gasUsed"]))
        self._append(index_entry(rnd, built, pack_id, signers, sig, len(data), receipt))
        self.admitted |= set(built.admitted)
        self.history[rnd + 1] = torch.from_numpy(np.array(data.global_flat, np.float32))
        self._prune(rnd + 1)
        dt = time.perf_counter() - t0
        self.busy += dt
        self.cpu += time.process_time() - c0
        return {
            "round": rnd,
            "seconds": dt,
            "recorded": True,
            "gas": int(receipt.get("gasUsed", 0)),
        }

    def _recorded_before(self, rnd: int, ghash: bytes) -> bool:
        """Whether the ledger already holds round ``rnd`` (a resumed run recomputes it: its
        global model must be the recorded one); a round out of order raises."""
        if rnd in self.entries:
            if hx(ghash) != self.entries[rnd]["global_hash"]:
                raise LedgerRoundError(
                    f"round {rnd} recomputed after resume gives global "
                    f"{hx(ghash)}, the ledger holds "
                    f"{self.entries[rnd]['global_hash']}"
                )
            return True
        if rnd != len(self.entries):
            raise LedgerRoundError(
                f"round {rnd} handed over, the ledger is at round {len(self.entries)}"
            )
        return False

    def _approves(self, data: RoundRows, ghash: bytes) -> bool:
        """Whether the committee's replay of the round's rows gives the aggregator's global
        model (hash ``ghash``; or equal within the audit's tolerance); True without a committee."""
        if self.replayer is None:
            return True
        new, _ = self.replayer.step(data.round, data.batch(), self.history, data.extras_of())
        return sha256(model_blob(new)) == ghash or replay_error(new, data.global_flat) <= TOLERANCE

    def _base_hash(self, rnd: int) -> bytes:
        return self.hashes[rnd]

    def _append(self, entry: dict[str, Any]) -> None:
        if self.exporter is not None:
            self.exporter.flush()
        assert self.index is not None
        self.index.append((json.dumps(entry, separators=(",", ":")) + "\n").encode())
        self.entries[entry["round"]] = entry
        self.hashes[entry["round"] + 1] = unhx(entry["global_hash"])

    def close(self) -> dict[str, Any]:
        """Release the files and the lock (the lock even when closing a file fails: the run
        may then resume in this process); returns the session's figures."""
        try:
            if self.index is not None:
                self.index.close()
            if self.exporter is not None:
                self.exporter.close()
            if self.replayer is not None:
                self.replayer.close()
                self.replayer = None
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
        return {
            "contract": self.contract.address if self.contract is not None else None,
            "backend": self.chain.backend if self.chain is not None else None,
            "onchain_bls": self.onchain_bls,
            "rounds": len(self.entries),
            "recorder_seconds": self.busy,
            "recorder_cpu_seconds": self.cpu,
            "gas_per_round": float(np.mean(self.gas)) if self.gas else None,
        }
