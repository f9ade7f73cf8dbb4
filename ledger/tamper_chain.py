"""Cases in which the aggregator (who holds the channel's key) rewrites the chain itself: it
replays another run's commitment with that run's signature, re-mines the chain without the last
round's commitment, or re-deploys the contract (edited, or with its own committee's keys), on a
devnet re-mined from genesis (:func:`ledger.tamper_tools.rebuild_chain`). Registered in
:mod:`ledger.tamper`; the re-committed rounds are in :mod:`ledger.tamper_aggregator`.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.pack import pack_path
from ledger.records import unhx
from ledger.tamper_tools import (
    Expected,
    NotApplicable,
    entries,
    ledger_of,
    manifest,
    rebuild_chain,
    recommit,
    write_entries,
)

Case = Callable[[Path, int], Expected]


def commitment_from_another_run(other: Path) -> Case:
    """A case that replays run ``other``'s round-r commitment (pack, fields and signature) as
    this run's round r."""

    def case(run: Path, r: int) -> Expected:
        theirs = entries(other)
        if r >= len(theirs):
            raise NotApplicable(f"{other} has no round {r}")
        t = theirs[r]
        src = pack_path(ledger_of(other), unhx(t["pack"]))
        shutil.copyfile(src, pack_path(ledger_of(run), unhx(t["pack"])))
        from ledger.pack import Pack

        pack = Pack.read(ledger_of(run), unhx(t["pack"]))
        recommit(run, r, pack.to_entries(), sign="keep", signers=t["signers"])
        es = entries(run)
        es[r]["signature"] = t["signature"]
        write_entries(run, es)
        from ledger.commitment import g2_eip2537

        e = es[r]
        tx = rebuild_chain(
            run,
            {
                ("commit", r): (
                    r,
                    unhx(e["global_hash"]),
                    unhx(e["submissions_root"]),
                    unhx(e["verdicts_hash"]),
                    unhx(e["admitted_root"]),
                    unhx(e["pack"]),
                    t["signers"],
                    g2_eip2537(bytes.fromhex(t["signature"])),
                )
            },
        )
        es[r]["tx"] = tx.get(r, es[r]["tx"])
        write_entries(run, es)
        return r, None, "committee-signature"

    case.__doc__ = commitment_from_another_run.__doc__
    return case


def commitment_removed(run: Path, r: int) -> Expected:
    """The aggregator re-mines the chain without the last round's commitment."""
    es = entries(run)
    if r != len(es) - 1:
        raise NotApplicable("only the last round's commitment can be left out")
    rebuild_chain(run, drop_after=es[r]["block"] - 1)
    return r, None, "round-on-chain"


def _deploy_with(committee_seed: str | None, source_edit: bool) -> Callable[[Any], bytes]:
    def data(chain: Any) -> bytes:
        from ledger.compile import compile_flchain

        c = compile_flchain()
        bytecode = c.bytecode
        if source_edit:  # the same contract, with one revert message changed
            from ledger.compile import CONTRACT_PATH, compile_source

            src = CONTRACT_PATH.read_text().replace('"not aggregator"', '"not the aggregator"')
            bytecode = compile_source(src, c.evm_version).bytecode
        m = chain.manifest
        keys = [bytes.fromhex(x["pubkey"]) for x in m["committee"]]
        from ledger.commitment import g1_eip2537

        if committee_seed is not None:
            from ledger.committee import Committee

            keys = [
                bytes.fromhex(x["pubkey"])
                for x in Committee.from_seed(committee_seed, len(keys)).public_info()
            ]
        factory = chain.w3.eth.contract(abi=c.abi, bytecode=bytecode)
        tx = factory.constructor(
            unhx(m["channel_id"]),
            [g1_eip2537(k) for k in keys],
            m["quorum"],
            bool(m["onchain_bls"]),
        ).build_transaction(
            {
                "from": chain.aggregator.address,
                "gas": 10_000_000,
                "nonce": 0,
                "maxFeePerGas": 10**10,
                "maxPriorityFeePerGas": 10**9,
            }
        )
        return unhx(tx["data"])

    return data


def contract_code_replaced(run: Path, r: int) -> Expected:
    """The aggregator deploys a contract compiled from an edited source."""
    rebuild_chain(run, deploy=_with_manifest(run, _deploy_with(None, True)))
    return None, None, "contract-code"


def contract_setup_changed(run: Path, r: int) -> Expected:
    """The aggregator deploys the contract with its own committee's keys."""
    if not manifest(run)["committee"]:
        raise NotApplicable("the run has no committee")
    rebuild_chain(run, deploy=_with_manifest(run, _deploy_with("not-the-committee", False)))
    return None, None, "contract-setup"


def _with_manifest(run: Path, fn: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    m = manifest(run)

    def data(chain: Any) -> bytes:
        chain.manifest = m
        return fn(chain)

    return data
