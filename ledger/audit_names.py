"""The names of the audit's checks (a finding's ``check``) and what each guarantees; the
README's table of audit checks lists the same."""

from __future__ import annotations

__all__ = ["CHECKS"]

#: every check the audit makes (a finding's ``check``): what it guarantees and how it is checked
CHECKS: dict[str, str] = {
    "chain-block": "every block of the devnet export re-imports with py-evm's full validation "
    "(parent hash, devnet header rule, re-executed transactions and roots) up to "
    "the head recorded in head.json",
    "contract-code": "the code deployed at the channel address hashes to the code compiled from "
    "ledger/contracts/FLChain.vy, and to the manifest's hash",
    "contract-setup": "the contract's aggregator, channel id, quorum, committee size and keys "
    "and verification flag equal the manifest's",
    "channel-config": "the manifest's config (less its output and ledger sections) hashes to "
    "the channel id (SHA-256 of its canonical JSON) and the account seed is the config's seed "
    "and that channel: the config the audit replays with, and its rounds, are the channel's",
    "committee-pop": "every committee key's proof of possession verifies (blspy PopVerify)",
    "round-order": "rounds.jsonl lists rounds 0, 1, 2, ... in order",
    "round-off-chain": "every round committed on chain has its line in rounds.jsonl",
    "round-on-chain": "every line of rounds.jsonl has its Committed event on chain",
    "round-count": "a finished run (it wrote summary.json) recorded every round its config "
    "planned (under max_virtual_hours, which may end it sooner, the rounds its summary says "
    "it ran), and no run recorded more",
    "commitment": "each rounds.jsonl line equals its Committed event field by field, the "
    "transaction and block that emitted it, and its pack's counts of submissions and "
    "admissions",
    "pack": "the pack the commitment names exists, is a round pack of that round and its index "
    "hashes to the pack id",
    "update-blob": "each update entry is present and hashes to its index digest",
    "record-blob": "each signed record is present, hashes to its index digest and parses",
    "global-blob": "the global model entry hashes to its digest, which is the committed global",
    "verdict-blob": "the verdict document hashes to its digest, which is the committed hash",
    "admission-blob": "the admission list hashes to its digest and parses",
    "verdict-document": "the accepted clients are exactly the kept clients that submitted",
    "admitted-root": "the Merkle root of the admission list equals the committed root",
    "admission": "each admitted key is the client's key; a client is admitted once, before or "
    "in its first submission",
    "record-client": "a record names the client whose entry holds it",
    "replayed-submission": "a record names the round it is committed in",
    "record-channel": "a record names this run's channel, contract and chain id",
    "record-update": "a record's update hash is the hash of the update it is committed with",
    "signature": "a record's recoverable ECDSA signature recovers to its client's key",
    "base-model": "a record's base model hash is the global model of its base round",
    "merkle-root": "the Merkle root of the round's submission leaves equals the committed root",
    "recompute-global": "the global model re-derived from the round's rows with the recorded "
    "defense, algorithm and config is the committed one (bit for bit)",
    "recompute-verdicts": "the re-derived verdicts keep exactly the accepted clients",
    "committee-signature": "the commitment carries a valid BLS aggregate signature of a quorum "
    "of the committee over the commitment message (batched)",
    "inclusion-proof": "a client's receipt (leaf and Merkle proof) leads to the committed "
    "submissions root (python -m ledger.proof --verify)",
}
