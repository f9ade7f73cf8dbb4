"""What a recorder session needs to start: the ledger's lock, the channel id, the committee, the
chain connection, and the resume path (the chain re-imported or reconnected, the index of committed
rounds made to agree with it).

A kill -9 can land anywhere, so a resume first drops a torn last record of the append-only files
(``chain/blocks.rlp``, ``rounds.jsonl``; :func:`simulator.run.appendlog.drop_torn_tail`), then
treats
the chain as the authority: a round the chain committed but ``rounds.jsonl`` does not list (the
run stopped between the two) is indexed from its ``Committed`` event.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ledger.attestation import verify_registration
from ledger.chain import Chain
from ledger.chain_errors import LedgerRevert
from ledger.committee import Committee
from ledger.errors import FORMAT, LedgerError
from ledger.records import DEV_KEY, channel_of, hx
from simulator.run.appendlog import drop_torn_tail, read_jsonl

__all__ = [
    "COMMIT_GAS",
    "being_recorded",
    "channel_id",
    "check_format",
    "clear_ledger",
    "committee_of",
    "connect",
    "deploy_channel",
    "fresh_manifest",
    "lock_ledger",
    "open_index",
    "open_resumed_chain",
]

#: gas limit of a commitment (with on-chain BLS verification ~200k; only what is used is paid)
COMMIT_GAS = 600_000


def lock_ledger(directory: Path) -> int:
    """Take the exclusive lock of the ledger in ``directory`` (created if needed) and return
    its file descriptor; :class:`LedgerError` when another process holds it for ~10 s."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    for _ in range(200):  # a recorder killed with its driver lets go within moments
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            time.sleep(0.05)
    os.close(fd)
    raise LedgerError(f"{directory}: another process is recording this run")


def being_recorded(directory: Path) -> bool:
    """Whether a recorder holds the lock of the ledger in ``directory`` (:func:`lock_ledger`)
    now. Read-only: nothing is created; a shared lock is taken and let go at once (a recorder
    starting meanwhile retries)."""
    try:
        fd = os.open(directory / ".lock", os.O_RDONLY)
    except OSError:  # no lock file (or not readable): no recorder took it here
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing lets go of the shared lock
    return False


def clear_ledger(directory: Path) -> None:
    """A run started over: nothing of an earlier ledger in ``directory`` stays (but its lock)."""
    for old in directory.iterdir():
        if old.name != ".lock":
            shutil.rmtree(old) if old.is_dir() else old.unlink()


def check_format(manifest: dict[str, Any], where: Path) -> None:
    """Refuse a ledger written in another format, in one line naming its version."""
    found = manifest.get("format")
    if found != FORMAT:
        raise LedgerError(
            f"{where}: ledger format {found!r}; this FedSentry reads {FORMAT!r} "
            "(a run recorded by an older version cannot be resumed or audited "
            "here; record it again)"
        )


def channel_id(cfg: Any) -> bytes:
    """The channel id of run config ``cfg`` (:func:`ledger.records.channel_of`)."""
    return channel_of(cfg.to_dict())


@functools.lru_cache(maxsize=4)
def committee_of(size: int) -> Committee:
    """The edge validators, registered once and shared by every channel (in FLChain they are
    the MEC infrastructure, not part of an experiment; their public keys and proofs of
    possession go into each run's manifest). Registration checks every proof of possession."""
    committee = Committee.from_seed("flchain-edge", size)
    bad = verify_registration(committee.public_info())
    if bad:
        raise LedgerError(f"edge validators {bad} failed their proof of possession")
    return committee


def connect(cfg: Any, seed: str) -> Chain:
    """The chain a run records on: the node at ``ledger_url`` or a fresh embedded devnet."""
    lc = cfg.ledger
    if lc.ledger_url is None:
        return Chain.embedded(seed, 1)
    key = os.environ.get("FEDSENTRY_LEDGER_KEY") or DEV_KEY
    try:
        return Chain.rpc(lc.ledger_url, [key], chain_id=lc.ledger_chain_id)
    except (ConnectionError, ValueError) as exc:
        raise LedgerError(str(exc)) from None


def deploy_channel(
    cfg: Any, seed: str, channel: bytes, committee: Committee | None
) -> tuple[Chain, Any, bool]:
    """Connect and deploy the channel's contract with the committee's keys and quorum; returns
    the chain, the contract and whether the contract verifies the committee's signatures on
    chain (a JSON-RPC node with the BLS precompiles)."""
    chain = connect(cfg, seed)
    c = committee
    try:
        onchain_bls = c is not None and chain.backend == "rpc" and chain.supports_bls_precompiles()
        contract = chain.deploy(
            channel, c.pubkeys_eip2537() if c else [], c.quorum if c else 0, onchain_bls
        )
    except Exception as exc:  # noqa: BLE001 - a revert, a node gone, a node without eth_*
        why = (str(exc).splitlines() or [""])[0]
        if not isinstance(exc, LedgerRevert | ConnectionError | OSError):
            why = f"{type(exc).__name__}: {why}"  # e.g. web3's MethodUnavailable
        raise LedgerError(f"cannot deploy the FLChain contract: {why}") from None
    return chain, contract, onchain_bls


def open_resumed_chain(
    cfg: Any, seed: str, manifest: dict[str, Any], ledger: Path
) -> tuple[Chain, Any]:
    """The chain of a run being resumed, and the exporter that continues its export (embedded
    devnet; ``None`` for a node)."""
    if manifest.get("backend") == "embedded":
        from ledger.devnet import BLOCKS_FILE, ChainExporter, ChainExportError
        from ledger.devnet_import import import_chain

        drop_torn_tail(ledger / "chain" / BLOCKS_FILE, "records")
        try:
            res = import_chain(ledger / "chain")
        except ChainExportError as exc:
            raise LedgerError(f"cannot resume: {exc}") from None
        if res.error is not None or res.chain is None:
            raise LedgerError(f"cannot resume: chain export is invalid: {res.error}")
        return res.chain, ChainExporter(res.chain, ledger / "chain", append=True)
    chain = connect(cfg, seed)
    if not bytes(chain.w3.eth.get_code(manifest["contract"])):
        raise LedgerError(
            f"cannot resume: no contract at {manifest['contract']} on {cfg.ledger.ledger_url}"
        )
    return chain, None


def committed_events(contract: Any, from_round: int = 0) -> dict[int, Any]:
    """The contract's ``Committed`` events (round -> log), from round ``from_round`` on."""
    logs = contract.events.Committed().get_logs(from_block=0)
    return {int(lg["args"]["round"]): lg for lg in logs if int(lg["args"]["round"]) >= from_round}


def entry_of_event(log: Any, ledger: Path | None = None) -> dict[str, Any]:
    """The ``rounds.jsonl`` entry of a committed round, from its ``Committed`` event; the
    counts of submissions and admissions come from the round's pack in ``ledger`` (written
    before the commitment), so the line is the one the recorder would have written."""
    from ledger.commitment import g2_compress_eip2537 as g2_compress
    from ledger.pack import Pack, PackError

    a = log["args"]
    sig = bytes(a["signature"])
    submissions = admitted = None
    if ledger is not None:
        try:
            pack = Pack.read(ledger, bytes(a["pack_id"]))
            submissions = sum(1 for _ in pack.clients("update"))
            admitted = len(json.loads(bytes(pack.raw("admitted")))["admitted"])
        except (PackError, KeyError, ValueError):
            pass  # the audit reports a missing or corrupt pack
    return {
        "round": int(a["round"]),
        "pack": hx(a["pack_id"]),
        "global_hash": hx(a["global_hash"]),
        "submissions_root": hx(a["submissions_root"]),
        "verdicts_hash": hx(a["verdicts_hash"]),
        "admitted_root": hx(a["admitted_root"]),
        "signers": int(a["signers"]),
        "signature": g2_compress(sig).hex() if sig else None,
        "submissions": submissions,
        "admitted": admitted,
        "tx": hx(log["transactionHash"]),
        "block": int(log["blockNumber"]),
    }


def open_index(ledger: Path, contract: Any, channel: str) -> dict[int, dict[str, Any]]:
    """``rounds.jsonl`` made to agree with the chain (round -> entry), after a restart, once
    the contract is known to be this run's: its channel is the manifest's ``channel``, and it
    holds the index's last round with the same transaction (a node restarted since, where
    another run deployed at the same address, is refused before anything is written)."""
    path = ledger / "rounds.jsonl"
    drop_torn_tail(path)
    try:
        entries = {int(e["round"]): e for e in read_jsonl(path)}
    except (ValueError, KeyError) as exc:
        raise LedgerError(f"cannot resume: {exc}") from None
    other = f"the contract at {contract.address} is not this run's"
    if hx(contract.functions.channel_id().call()) != channel:
        raise LedgerError(f"cannot resume: {other} (another channel; was the node restarted?)")
    if entries:
        last = max(entries)
        log = committed_events(contract, last).get(last)
        if log is None or hx(log["transactionHash"]) != entries[last].get("tx"):
            raise LedgerError(
                f"cannot resume: {other} (it does not hold round {last} as rounds.jsonl "
                "records it; was the node restarted?)"
            )
    on_chain = int(contract.functions.current_round().call())
    if sorted(entries) != list(range(len(entries))) or len(entries) > on_chain:
        raise LedgerError(
            f"cannot resume: rounds.jsonl holds rounds {sorted(entries)[:5]}..., "
            f"the chain {on_chain} rounds"
        )
    missing = range(len(entries), on_chain)
    if missing:  # committed, then stopped before the index line was written
        events = committed_events(contract, len(entries))
        with open(path, "ab") as f:
            for rnd in missing:
                e = entry_of_event(events[rnd], ledger)
                f.write((json.dumps(e, separators=(",", ":")) + "\n").encode())
                entries[rnd] = e
    return entries


def fresh_manifest(
    cfg: Any,
    chain: Chain,
    contract: Any,
    committee: Committee | None,
    account_seed: str,
    initial_hash: bytes,
    initial_pack: bytes,
    onchain_bls: bool,
) -> dict[str, Any]:
    """``manifest.json`` of a fresh ledger: format, config, contract and its compilation,
    chain, aggregator, account seed, initial model and its pack, committee (the devnet's
    genesis is added by the session)."""
    from ledger.compile import compile_flchain

    comp = compile_flchain()
    return {
        "format": FORMAT,
        "config": cfg.replace(resume=None).to_dict(),
        "seed": cfg.experiment.seed,
        "channel_id": hx(channel_id(cfg)),
        "contract": contract.address,
        "abi": comp.abi,
        "compiler": {
            "vyper": comp.compiler_version,
            "evm_version": comp.evm_version,
            "runtime_sha256": comp.runtime_sha256,
            "source_sha256": comp.source_sha256,
        },
        "backend": chain.backend,
        "url": cfg.ledger.ledger_url,
        "chain_id": chain.w3.eth.chain_id,
        "aggregator": chain.aggregator.address,
        "account_seed": account_seed,
        "initial_global_hash": hx(initial_hash),
        "initial_pack": hx(initial_pack),
        "committee": committee.public_info() if committee else [],
        "quorum": committee.quorum if committee else 0,
        "onchain_bls": onchain_bls,
    }
