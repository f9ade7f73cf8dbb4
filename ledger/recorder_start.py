"""Starting a ledger run: the FLChain recorder's state, a fresh start or a resume.

:class:`RecorderStart` is the base of :class:`ledger.recorder.LedgerRecorder`.  A fresh start
connects (:func:`connect`), deploys the channel's contract and writes ``manifest.json`` once,
atomically; a resume re-imports the chain export (or reconnects to the node), reloads
``rounds.jsonl``, indexes a round the chain finalized before the run stopped
(``pending.json``) and checks that chain, index and checkpoint agree.  Also here: the ledger's
errors, the channel id and the shared edge committee.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.chain import Chain, LedgerRevert
from ledger.committee import Committee, verify_registration
from ledger.compile import compile_flchain
from ledger.devnet import ChainExporter, import_chain, make_embedded_chain
from ledger.records import DEV_KEY, canonical_json, hx, model_blob, sha256, unhx
from ledger.store import BlobStore, write_json_atomic

if TYPE_CHECKING:
    from simulator.config import Config
    from simulator.engine import Simulation


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


class RecorderStart:
    """The recorder's state, its start (fresh or resumed) and the index of finalized rounds."""

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
