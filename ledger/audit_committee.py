"""The audit's check of the edge committee's signatures: each round's commitment message is
rebuilt from its on-chain fields (:func:`ledger.commitment.commit_message`) and the committee's
BLS aggregates over it are verified :data:`BLS_BATCH` rounds at a time
(:func:`ledger.attestation.verify_attestations`). A round without a valid quorum signature
proves nothing; :mod:`ledger.audit_checks` runs this first and trusts only the other rounds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ledger.attestation import Attestation, verify_attestations
from ledger.audit_round import Commitment
from ledger.commitment import commit_message
from ledger.records import unhx

Finding = tuple[int | None, int | None, str, Any, Any]
#: rounds whose committee signatures are verified as one batch
BLS_BATCH = 64


def attestation(com: Commitment, where: tuple[int, str, str]) -> tuple[int, Attestation, bytes]:
    """Round ``com.round``'s attestation as committed (its signer bitmap and signature) and
    the message it must sign; ``where``: the chain id, the contract and the channel id."""
    chain_id, contract, channel = where
    msg = commit_message(
        chain_id,
        contract,
        unhx(channel),
        com.round,
        unhx(com.global_hash),
        unhx(com.submissions_root),
        unhx(com.verdicts_hash),
        unhx(com.admitted_root),
        unhx(com.pack),
    )
    try:
        att = Attestation.from_bitmap(com.signers, bytes.fromhex(com.signature or ""), msg)
    except (ValueError, TypeError):
        att = Attestation((), b"", msg)
    return com.round, att, msg


def committee_findings(
    committee: list[dict[str, Any]],
    quorum: int | None,
    coms: list[Commitment],
    where: tuple[int, str, str],
) -> Iterator[Finding]:
    """A ``committee-signature`` finding for every round of ``coms`` whose signature is not a
    valid BLS aggregate of a quorum of ``committee`` (verified in batches)."""
    for k in range(0, len(coms), BLS_BATCH):
        signed = [attestation(c, where) for c in coms[k : k + BLS_BATCH]]
        oks = verify_attestations(committee, [(att, msg) for _, att, msg in signed], quorum=quorum)
        for (rnd, att, _), ok in zip(signed, oks, strict=True):
            if not ok:
                yield (
                    rnd,
                    None,
                    "committee-signature",
                    "a valid BLS aggregate of a quorum",
                    f"signers {list(att.signers)}: invalid",
                )
