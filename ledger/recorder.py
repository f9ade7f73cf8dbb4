"""The FLChain round callback: one ledger writer in the driver (Majeed & Hong, 2019).

Each round, for every update the round aggregated: the update goes into the content-addressed
store, its signed update record too, the client (registered and funded on first use) submits
``(round, update hash, samples, base-model hash)`` from its own account; then the aggregator
finalizes the round with the new global model's hash, the Merkle root of the accepted updates, the
hash of the verdict document, and the hash of the edge committee's BLS attestation. The committee
re-derives the aggregate (:class:`ledger.replay.Replayer`) and signs only when it matches.

Files (all under ``RUN_DIR/ledger/``): ``manifest.json`` (written once, atomically),
``rounds.jsonl`` (one line per finalized round, appended after the chain accepted it),
``blobs/sha256/`` and, for the embedded devnet, ``chain/`` (genesis + blocks, appended each round).
A resumed run re-imports the chain export (or reconnects to the node) and re-checks any round
it recomputes against what the ledger already holds.

This module records the rounds; starting a run (fresh deploy and manifest, or resume) and the
ledger's errors live in :mod:`ledger.recorder_start` and are importable from here.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from web3.exceptions import Web3Exception

from ledger.chain import Call, LedgerRevert
from ledger.committee import attestation_message
from ledger.merkle import leaf, merkle_root
from ledger.recorder_start import (
    LedgerError,
    LedgerRoundError,
    RecorderStart,
    channel_id,
    committee_of,
    connect,
    ledger_dir,
)
from ledger.records import (
    canonical_json,
    client_account,
    hx,
    key_hash,
    make_record,
    model_blob,
    sha256,
    sign_record,
    update_blob,
    verdict_document,
)
from ledger.store import write_json_atomic

if TYPE_CHECKING:
    from simulator.engine import Simulation
    from simulator.rounds import RoundRecord

__all__ = [
    "FUND_WEI",
    "GAS",
    "LedgerError",
    "LedgerRecorder",
    "LedgerRoundError",
    "channel_id",
    "committee_of",
    "connect",
    "ledger_dir",
]

log = logging.getLogger("fedsentry")

FUND_WEI = 10**17  # 0.1 ETH per client, enough for thousands of submissions at devnet fees
GAS = {"register": 100_000, "submit": 150_000, "finalize": 250_000}


class LedgerRecorder(RecorderStart):
    #: the ledger stores every update row: the actors must not pre-aggregate them
    needs_rows = True

    """Round callback that records a run on FLChain; see the module docstring.

    Its state and :meth:`start` (fresh or resumed) come from
    :class:`ledger.recorder_start.RecorderStart`."""

    # -- one round -------------------------------------------------------------------------
    def on_round_end(self, sim: Simulation, record: RoundRecord) -> None:
        t0 = time.perf_counter()
        try:
            self._record(sim, record)
        finally:
            self.seconds += time.perf_counter() - t0

    def _record(self, sim: Simulation, record: RoundRecord) -> None:
        if self.chain is None:
            self.start(sim)
        rnd, batch = record.round, record.rows
        if batch is None:
            raise LedgerRoundError("the ledger needs the round's update rows (fast path is on)")
        gblob = model_blob(sim.global_flat)
        global_hash = sha256(gblob)
        if self.replayer is not None:
            replayed = sha256(model_blob(self.replayer.step(rnd, batch, sim.history)[0]))
        if rnd in self.done:  # recomputed after a resume: it must equal what the ledger holds
            if hx(global_hash) != self.done[rnd]["global_hash"]:
                raise LedgerRoundError(f"round {rnd} recomputed after resume gives global "
                                  f"{hx(global_hash)}, the ledger holds "
                                  f"{self.done[rnd]['global_hash']}")
            self.globals[rnd + 1] = global_hash
            return
        assert self.chain is not None
        agg = self.chain.aggregator
        admit: list[Call] = []
        calls: list[Call] = []
        subs, new = [], []
        hashes: dict[int, bytes] = {}
        # after a resume, part of this round may be on chain already (the node kept it)
        resumed, already = self.reconcile, {}
        if resumed:
            self.reconcile = False
            already = {lg["args"]["client"]: lg for lg in self._logs("Submitted", rnd)}
        for i, c in enumerate(batch.client_ids.tolist()):
            acct = client_account(self.seed, c)
            if c not in self.registered:
                new.append({"client": c, "address": acct.address})
            if c not in self.registered and not (
                    resumed and any(self.contract.functions.registered(acct.address).call())):
                admit.append(Call(agg, acct.address, b"", "fund", 21_000, FUND_WEI))
                admit.append(Call.of(self.contract.functions.register(acct.address,
                                                                      key_hash(acct)),
                                     agg, GAS["register"]))
            u = bytes.fromhex(self.store.put(update_blob(batch.updates[i].numpy())))
            hashes[c] = u
            b = int(batch.base_rounds[i])
            base = self.globals[b]
            sig = batch.signals
            rec = make_record(self.channel, self.contract.address, rnd, c, acct.address, u,
                              int(batch.num_samples[i]), b, base,
                              float(sig["loss"][i]) if "loss" in sig else None,
                              bool(sig["alarm"][i]) if "alarm" in sig else False)
            signed = sign_record(rec, acct)
            subs.append({"client": c, "record": self.store.put(canonical_json(signed)),
                         "address": acct.address, "call": len(calls)})
            if acct.address in already:
                if bytes(already[acct.address]["args"]["update_hash"]) != u:
                    raise LedgerRoundError(f"round {rnd}: client {c}'s update recomputed after "
                                           "resume differs from the one on chain")
                subs[-1]["call"] = already[acct.address]["transactionHash"]
                continue
            calls.append(Call.of(self.contract.functions.submit(rnd, u, int(batch.num_samples[i]),
                                                                base), acct, GAS["submit"]))
        kept = {int(v["client"]) for v in record.verdicts if v["kept"]}
        accepted = sorted(c for c in hashes if c in kept)
        root = merkle_root([leaf(c, hashes[c]) for c in accepted])
        doc = verdict_document(rnd, self.cfg.defense.defense, self.cfg.defense.defense_params,
                               record.to_event(), accepted)
        vblob = canonical_json(doc)
        verdict_hash = bytes.fromhex(self.store.put(vblob))
        self.store.put(gblob)
        att, att_hash = None, b"\x00" * 32
        if self.committee is not None:
            ok = replayed == global_hash
            msg = attestation_message(self.channel, rnd, global_hash, root)
            try:
                a = self.committee.attest(msg, [ok] * self.committee.size)
            except RuntimeError as exc:
                raise LedgerRoundError(f"round {rnd}: the committee refused to attest: {exc}"
                                       ) from None
            att, att_hash = a.to_dict(), a.hash()
        calls.append(Call.of(self.contract.functions.finalize(
            rnd, global_hash, root, verdict_hash, att_hash), agg, GAS["finalize"]))
        entry = {"round": rnd, "submissions": subs, "registered": new,
                 "accepted": accepted, "merkle_root": hx(root), "verdicts": hx(verdict_hash),
                 "global_hash": hx(global_hash), "attestation": att,
                 "attestation_hash": hx(att_hash)}
        pend = {**entry, "submissions": [{k: v for k, v in x.items() if k != "call"}
                                         for x in subs]}
        # what to index if the run stops once the round is finalized
        write_json_atomic(self.dir / "pending.json", pend, indent=None)
        try:
            # new clients are funded and registered first and mined (a node checks a client's
            # balance when its transaction arrives), then one block: submissions and finalize
            self.chain.send_batch(admit)
            receipts = self.chain.send_batch(calls)
            fin = receipts[-1]
        except LedgerRevert as exc:
            raise LedgerRoundError(f"round {rnd}: the chain rejected a transaction: {exc}"
                                   ) from None
        except (ConnectionError, OSError) as exc:
            raise LedgerRoundError(f"round {rnd}: lost the ledger node: "
                                   f"{str(exc).splitlines()[0]}") from None
        except Web3Exception as exc:
            raise LedgerRoundError(f"round {rnd}: the ledger node failed: "
                                   f"{str(exc).splitlines()[0]}") from None
        for x in subs:
            call = x.pop("call")
            x["tx"] = hx(call if isinstance(call, bytes) else receipts[call]["transactionHash"])
            del x["address"]
        entry.update(finalize_tx=hx(fin["transactionHash"]), block=int(fin["blockNumber"]))
        self._append(entry)

    def summary(self) -> dict[str, Any]:
        """What the run's summary says about the ledger."""
        return {"contract": self.contract.address if self.contract is not None else None,
                "backend": self.chain.backend if self.chain is not None else None,
                "ledger_seconds": self.seconds, "gas_per_round": self.gas_per_round()}

    def close(self) -> None:
        if self.replayer is not None:
            self.replayer.close()

    def gas_per_round(self) -> dict[str, float]:
        """Mean gas per round by function (``submit`` summed over the round's clients)."""
        rounds = max(1, sum(1 for name, _ in self.chain.gas_log if name == "finalize")) \
            if self.chain else 1
        out: dict[str, float] = {}
        for name, g in (self.chain.gas_log if self.chain else []):
            out[name] = out.get(name, 0.0) + g / rounds
        return out
