"""What a recorder session needs to start: the ledger's lock, the channel id, the committee, the
chain connection and the contract's deployment, and the manifest of a fresh run (the resume path
is :mod:`ledger.session_resume`).
"""

from __future__ import annotations

import fcntl
import functools
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
