"""A built round on the chain: the committee's attestation, the one ``commit`` transaction and the
round's line in ``rounds.jsonl`` (steps 3 and 4 of :meth:`ledger.session.Session.record`; the
round's pack and hashes are :mod:`ledger.round_build`'s).
"""

from __future__ import annotations

from typing import Any

from ledger.chain_batch import Call
from ledger.chain_errors import ChainLost, LedgerRevert
from ledger.committee import Committee, QuorumError
from ledger.errors import LedgerChainLost, LedgerRoundError
from ledger.records import hx
from ledger.round_build import BuiltRound
from ledger.session_start import COMMIT_GAS


def attest(
    committee: Committee | None, rnd: int, msg: bytes, approve: bool
) -> tuple[int, Any, bytes]:
    """The committee's signature of the commitment message ``msg``: ``(signer bitmap,
    aggregate signature or None, its EIP-2537 encoding)``; no committee signs nothing.

    Raises
    ------
    LedgerRoundError
        When the committee does not reach its quorum (its members approve only a round whose
        global model they re-derived, ``approve``).
    """
    if committee is None:
        return 0, None, b""
    try:
        att = committee.attest(msg, [approve] * committee.size)
    except QuorumError as exc:
        raise LedgerRoundError(
            f"round {rnd}: the committee refused to attest ({exc}): its re-derived "
            "global model differs from the aggregator's"
        ) from None
    return att.bitmap(), att.signature, att.signature_eip2537()


def send_commit(
    chain: Any,
    contract: Any,
    rnd: int,
    built: BuiltRound,
    pack_id: bytes,
    signers: int,
    sig: bytes,
) -> Any:
    """Send round ``rnd``'s ``commit`` transaction (its four hashes, the pack id and the
    committee's signature) and return its receipt; :class:`LedgerRoundError` when the chain
    rejects it or the node fails."""
    args = [
        rnd,
        built.global_hash,
        built.submissions_root,
        built.verdicts_hash,
        built.admitted_root,
        pack_id,
        signers,
        sig,
    ]
    call = Call.of(contract, "commit", args, chain.aggregator, COMMIT_GAS)
    try:
        (receipt,) = chain.send_batch([call])
    except LedgerRevert as exc:
        raise LedgerRoundError(f"round {rnd}: the chain rejected the commitment: {exc}") from None
    except ChainLost as exc:
        raise LedgerChainLost(f"round {rnd}: {exc}") from None
    except (ConnectionError, OSError) as exc:
        raise LedgerRoundError(
            f"round {rnd}: lost the ledger node: {str(exc).splitlines()[0]}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - web3's errors: the node failed
        raise LedgerRoundError(
            f"round {rnd}: the ledger node failed: {str(exc).splitlines()[0]}"
        ) from None
    return receipt


def index_entry(
    rnd: int,
    built: BuiltRound,
    pack_id: bytes,
    signers: int,
    sig: Any,
    submissions: int,
    receipt: Any,
) -> dict[str, Any]:
    """Round ``rnd``'s line in ``rounds.jsonl``: what its ``Committed`` event says, plus the
    counts of submissions and admissions and where the transaction landed."""
    return {
        "round": rnd,
        "pack": hx(pack_id),
        "global_hash": hx(built.global_hash),
        "submissions_root": hx(built.submissions_root),
        "verdicts_hash": hx(built.verdicts_hash),
        "admitted_root": hx(built.admitted_root),
        "signers": signers,
        "signature": sig.hex() if sig is not None else None,
        "submissions": submissions,
        "admitted": len(built.admitted),
        "tx": hx(receipt["transactionHash"]),
        "block": int(receipt["blockNumber"]),
    }
