"""Checking a client's receipt (:mod:`ledger.proof`) against the chain, as the audit would.

A receipt is VALID only when everything it rests on holds, checked in this order, each failure
named by the audit's check: the manifest's config hashes to its channel (``channel-config``);
the chain re-validates up to the round (``chain-block``); the contract at the run's address has
the compiled code (``contract-code``) and this channel's setup: aggregator, channel id,
committee and quorum (``contract-setup``); the committee's keys carry valid proofs of possession
(``committee-pop``); the round was committed on chain (``round-on-chain``) with a valid BLS
aggregate of a quorum of the committee (``committee-signature``); and the receipt's leaf and
proof lead to the round's committed submissions root (``inclusion-proof``).

A run recorded on a node whose contract at the run's address belongs to another channel (the
node was restarted since the run: a devnet forgets its chain) cannot be verified there at all:
:class:`~ledger.audit_input.AuditInputError` (exit status 2), not a claim of tampering.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.attestation import verify_registration
from ledger.audit_channel import channel_findings
from ledger.audit_checks import RunAudit
from ledger.audit_committee import committee_findings
from ledger.audit_input import AuditInputError
from ledger.merkle import verify_proof
from ledger.records import hx, unhx

Finding = tuple[int | None, int | None, str, Any, Any]


def chain_findings(audit: RunAudit, rnd: int) -> list[Finding]:
    """What the receipt of round ``rnd`` rests on besides its proof: the channel, the chain up
    to the round, the contract's code and setup, the committee's keys, and the round's
    commitment with a valid quorum signature (its :class:`Commitment` is then in
    ``audit.events``)."""
    out: list[Finding] = list(channel_findings(audit.manifest, audit.cfg.experiment.seed))
    for f in audit.open_chain():  # a block before the round's that fails validation
        if f[0] is None or f[0] <= rnd:
            out.append(f)
    if audit.chain is None:
        return out + [(rnd, None, "chain-block", "a readable chain", "none")]
    contract = list(audit.read_contract())
    if audit.foreign_channel:  # the node's contract is another channel's: nothing to check
        raise AuditInputError(
            f"{audit.run_dir}: cannot verify the receipt: the contract at {audit.contract} is "
            "another channel's (if the node was restarted since the run, it no longer holds "
            "this run's chain; --ledger-url if it moved)"
        )
    out += contract
    committee = audit.manifest["committee"]
    for i in verify_registration(committee) if committee else []:
        out.append((None, None, "committee-pop", "valid proof of possession", f"validator {i}"))
    com = audit.events.get(rnd)
    if com is None:
        return out + [(rnd, None, "round-on-chain", f"round {rnd} committed on chain", "missing")]
    if committee:
        where = (audit.chain_id, audit.contract, audit.channel)
        quorum = int(audit.manifest["quorum"]) or None
        out += committee_findings(committee, quorum, [com], where)
    return out


def verify_against_chain(
    run_dir: str | Path, rec: dict[str, Any], leaf: bytes, ledger_url: str | None = None
) -> list[Finding]:
    """Findings if the receipt ``rec`` (already checked in form, its leaf rebuilt as ``leaf``)
    does not rest on a valid chain or does not prove its client's submission; ``[]`` if it
    does. ``AuditInputError`` when the run or its chain cannot be read."""
    audit = RunAudit(Path(run_dir), ledger_url=ledger_url)
    rnd, client = rec["round"], rec["client"]
    found = chain_findings(audit, rnd)
    com = audit.events.get(rnd)
    if com is None:
        return found
    proof = [(unhx(s), left) for s, left in rec["proof"]]
    if hx(leaf) != rec["leaf"] or not verify_proof(leaf, proof, unhx(com.submissions_root)):
        found.append(
            (
                rnd,
                client,
                "inclusion-proof",
                com.submissions_root,
                "a leaf and proof that do not lead to it",
            )
        )
    return found
