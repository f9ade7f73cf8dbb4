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
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web3.exceptions import Web3Exception

from ledger.chain import Call, Chain, LedgerRevert
from ledger.committee import Committee, attestation_message, verify_registration
from ledger.compile import compile_flchain
from ledger.devnet import ChainExporter, import_chain, make_embedded_chain
from ledger.merkle import leaf, merkle_root
from ledger.records import (
    DEV_KEY,
    canonical_json,
    client_account,
    hx,
    key_hash,
    make_record,
    model_blob,
    sha256,
    sign_record,
    unhx,
    update_blob,
    verdict_document,
)
from ledger.store import BlobStore, write_json_atomic

if TYPE_CHECKING:
    from simulator.config import Config
    from simulator.engine import Simulation
    from simulator.rounds import RoundRecord

log = logging.getLogger("fedsentry")

FUND_WEI = 10**17  # 0.1 ETH per client, enough for thousands of submissions at devnet fees
GAS = {"register": 100_000, "submit": 150_000, "finalize": 250_000}


class LedgerError(RuntimeError):
    """The ledger cannot start (node unreachable, wrong chain id, no contract, bad export)."""


class LedgerRoundError(LedgerError):
    """Recording a round failed mid-run (node gone, transaction rejected): the run stops with
    every earlier round recorded, its events written and a checkpoint to resume from."""


def ledger_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / "ledger"


def channel_id(cfg: Config) -> bytes:
    """The channel (experiment / global model) id: sha256 of the resolved config without its
    output and ledger sections (where results go and where they are recorded do not change
    what is learned), so the same experiment is the same channel wherever it is written."""
    d = cfg.to_dict()
    return sha256(canonical_json({k: v for k, v in d.items() if k not in ("output", "ledger")}))


@functools.lru_cache(maxsize=4)
def committee_of(size: int) -> Committee:
    """The edge validators, registered once and shared by every channel (in FLChain they are
    the MEC infrastructure, not part of an experiment; their public keys and proofs go into each
    run's manifest). Registration checks every proof of possession (what makes
    FastAggregateVerify safe against rogue keys); keys, proofs and checks cost ~0.5 s a
    validator in py-ecc, so the committee is built once per process."""
    committee = Committee.from_seed("flchain-edge", size)
    bad = verify_registration(committee.public_info())
    if bad:
        raise LedgerError(f"edge validators {bad} failed their proof of possession")
    return committee


def connect(cfg: Config, seed: str) -> Chain:
    """The chain a run records on: the node at ``ledger_url`` or a fresh embedded devnet."""
    lc = cfg.ledger
    if lc.ledger_url is None:
        return make_embedded_chain(seed, 1)
    key = os.environ.get("FEDSENTRY_LEDGER_KEY") or DEV_KEY
    try:
        return Chain.rpc(lc.ledger_url, [key], chain_id=lc.ledger_chain_id)
    except (ConnectionError, ValueError) as exc:
        raise LedgerError(str(exc)) from None


class LedgerRecorder:
    """Round callback that records a run on FLChain; see the module docstring."""

    def __init__(self, cfg: Config, run_dir: str | Path) -> None:
        self.cfg = cfg
        self.dir = ledger_dir(run_dir)
        self.channel = channel_id(cfg)
        self.seed = f"{cfg.experiment.seed}:{self.channel.hex()[:16]}"
        self.store = BlobStore(self.dir)
        self.committee = (committee_of(cfg.ledger.committee)
                          if cfg.ledger.committee > 0 else None)
        self.replayer: Any = None
        self.chain: Chain | None = None
        self.contract: Any = None
        self.exporter: ChainExporter | None = None
        self.globals: dict[int, bytes] = {}  # round -> hash of the global model it started from
        self.registered: set[int] = set()
        self.done: dict[int, dict[str, Any]] = {}  # rounds already in rounds.jsonl
        self.seconds = 0.0  # wall time spent recording (start included)
        self.reconcile = False  # after a resume: look for this round's submissions on chain

    # -- start / resume --------------------------------------------------------------------
    def start(self, sim: Simulation) -> None:
        t0 = time.perf_counter()
        try:
            self._start(sim)
        finally:
            self.seconds += time.perf_counter() - t0

    def _start(self, sim: Simulation) -> None:
        if self.cfg.output.resume and (self.dir / "manifest.json").is_file():
            self._resume(sim)
        else:
            self._fresh(sim)
        if self.committee is not None:
            from ledger.replay import Replayer, catch_up

            self.replayer = Replayer(self.cfg)
            if self.done:  # resumed: the committee's defense state must catch up with the run's
                catch_up(self.replayer, self.store, list(self.done.values()), self.globals[0])

    def _fresh(self, sim: Simulation) -> None:
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.chain = connect(self.cfg, self.seed)
        try:
            self.contract = self.chain.deploy(self.channel)
        except (LedgerRevert, ConnectionError, OSError) as exc:
            raise LedgerError(f"cannot deploy the FLChain contract: {exc}") from None
        g0 = self.store.put(model_blob(sim.global_flat))
        self.globals[0] = bytes.fromhex(g0)
        c = compile_flchain()
        manifest = {
            "format": "fedsentry-ledger/1", "config": self.cfg.replace(resume=None).to_dict(),
            "seed": self.cfg.experiment.seed, "channel_id": hx(self.channel),
            "contract": self.contract.address, "abi": c.abi,
            "compiler": {"vyper": c.compiler_version, "evm_version": c.evm_version,
                         "runtime_sha256": c.runtime_sha256, "source_sha256": c.source_sha256},
            "backend": self.chain.backend, "url": self.cfg.ledger.ledger_url,
            "chain_id": self.chain.w3.eth.chain_id,
            "aggregator": self.chain.aggregator.address, "account_seed": self.seed,
            "initial_global_hash": "0x" + g0,
            "committee": self.committee.public_info() if self.committee else [],
            "quorum": self.committee.quorum if self.committee else 0,
        }
        if self.chain.backend == "embedded":
            self.exporter = ChainExporter(self.chain, self.dir / "chain")
            self.exporter.flush()
            from ledger.devnet import genesis_spec

            manifest["genesis"] = genesis_spec(self.seed, 1)
        write_json_atomic(self.dir / "manifest.json", manifest)
        (self.dir / "rounds.jsonl").write_text("")

    def _resume(self, sim: Simulation) -> None:
        manifest = json.loads((self.dir / "manifest.json").read_text())
        if manifest.get("backend") == "embedded":
            try:
                res = import_chain(self.dir / "chain")
            except ValueError as exc:  # ChainExportError: a file missing or malformed
                raise LedgerError(f"cannot resume: {exc}") from None
            if res.error is not None or res.chain is None:
                raise LedgerError(f"cannot resume: chain export is invalid: {res.error}")
            self.chain = res.chain
            self.exporter = ChainExporter(self.chain, self.dir / "chain", append=True)
        else:
            self.chain = connect(self.cfg, self.seed)
            if not bytes(self.chain.w3.eth.get_code(manifest["contract"])):
                raise LedgerError(f"cannot resume: no contract at {manifest['contract']} on "
                                  f"{self.cfg.ledger.ledger_url}")
        self.contract = self.chain.w3.eth.contract(address=manifest["contract"],
                                                   abi=manifest["abi"])
        self.globals[0] = unhx(manifest["initial_global_hash"])
        for line in (self.dir / "rounds.jsonl").read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                self.done[e["round"]] = e
                self.globals[e["round"] + 1] = unhx(e["global_hash"])
                self.registered |= {int(r["client"]) for r in e["registered"]}
        on_chain = self.contract.functions.current_round().call()
        pending = self.dir / "pending.json"
        if on_chain == len(self.done) + 1 and pending.is_file():
            self._complete(json.loads(pending.read_text()))  # finalized, then interrupted
        if on_chain != len(self.done):
            raise LedgerError(f"cannot resume: chain is at round {on_chain} but rounds.jsonl "
                              f"holds {len(self.done)} rounds")
        if sim.next_round > len(self.done):
            raise LedgerError(f"cannot resume: checkpoint is at round {sim.next_round}, the "
                              f"ledger only at {len(self.done)}")
        self.reconcile = True  # the next round may have submissions on chain from before

    def _logs(self, event: str, rnd: int) -> list[Any]:
        ev = getattr(self.contract.events, event)()
        return list(ev.get_logs(from_block=0, argument_filters={"round": rnd}))

    def _complete(self, e: dict[str, Any]) -> None:
        """Index a round the chain finalized before the run stopped (tx hashes from its logs)."""
        tx = {lg["args"]["client"]: lg["transactionHash"] for lg in self._logs("Submitted",
                                                                              e["round"])}
        for s in e["submissions"]:
            s["tx"] = hx(tx[s.pop("address")])
        (fin,) = self._logs("Finalized", e["round"])
        e["finalize_tx"], e["block"] = hx(fin["transactionHash"]), int(fin["blockNumber"])
        self._append(e)

    def _append(self, e: dict[str, Any]) -> None:
        if self.exporter is not None:
            self.exporter.flush()
        with open(self.dir / "rounds.jsonl", "a") as f:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
        (self.dir / "pending.json").unlink(missing_ok=True)
        self.done[e["round"]] = e
        self.globals[e["round"] + 1] = unhx(e["global_hash"])
        self.registered |= {int(r["client"]) for r in e["registered"]}

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
        rnd, batch = record.round, sim.round_batch
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
