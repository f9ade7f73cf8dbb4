"""The audit's checks of one round's pack, in one pass (no chain, no replay: these run in
parallel over rounds with ``--jobs``).

:func:`check_pack` reads the pack the round's on-chain commitment names, checks its index against
the pack id and every entry against its hash, parses the signed records, checks each one's fields
and recovers its signer's key, rebuilds the submission leaves and both Merkle roots and compares
them with the commitment. What needs other rounds (was a client admitted earlier, which global
model a base round had) goes back as :class:`PackFacts` for :mod:`ledger.audit_checks` to finish;
:func:`check_packs` checks every round's pack, on several processes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger.keys import ClientKeys
from ledger.merkle import admission_leaf, merkle_root, submission_leaf
from ledger.pack import Pack, PackError
from ledger.records import hx, recover_key, unhx

Finding = tuple[int | None, int | None, str, Any, Any]

#: entry kind -> the check that reports a corrupt entry of that kind
BLOB_CHECK = {
    "update": "update-blob",
    "record": "record-blob",
    "global": "global-blob",
    "verdicts": "verdict-blob",
    "admitted": "admission-blob",
}

#: entry kinds the replay reads (rows, records; the verdict document's bans)
REPLAY_INPUTS = ("update", "record", "verdicts")


@dataclass
class Commitment:
    """What the chain says about one round (the fields of its ``Committed`` event)."""

    round: int
    pack: str
    global_hash: str
    submissions_root: str
    verdicts_hash: str
    admitted_root: str
    signers: int
    signature: str | None  # compressed, hex


@dataclass
class PackFacts:
    """What one round's pack check found and what the cross-round checks need."""

    round: int
    findings: list[Finding] = field(default_factory=list)
    readable: bool = False  # the pack could be read and its index matches the commitment
    admitted: dict[int, bytes] = field(default_factory=dict)  # client -> key, this round
    signers: dict[int, bytes | None] = field(default_factory=dict)  # client -> its signer
    bases: dict[int, tuple[int, str]] = field(default_factory=dict)  # client -> base round/hash
    accepted: list[int] | None = None  # the verdict document's accepted clients
    global_ok: bool = False  # the global entry is intact and is the committed global model
    submissions: int = 0
    pack: Any = None  # the pack itself when checked in the same process (not sent back)
    admitted_known: bool = False  # the admission list is intact and readable
    # every update and record entry and the verdict document (its bans) are intact: a replay
    # means something
    inputs_ok: bool = True


def _entry_ok(pack: Pack, name: str, rnd: int, facts: PackFacts) -> bool:
    if name not in pack.entries:
        kind = name.split("/")[0]
        c = int(name.split("/")[1]) if "/" in name else None
        facts.findings.append((rnd, c, BLOB_CHECK[kind], f"entry {name}", "missing"))
        facts.inputs_ok = facts.inputs_ok and kind not in REPLAY_INPUTS
        return False
    if pack.ok(name):
        return True
    kind = name.split("/")[0]
    c = int(name.split("/")[1]) if "/" in name else None
    got, (_, size) = len(pack.raw(name)), pack.span(name)
    what = f"{got} of its {size} bytes (the pack file is cut short)" if got < size else None
    facts.findings.append(
        (
            rnd,
            c,
            BLOB_CHECK.get(kind, "pack"),
            hx(pack.digest(name)),
            what or "bytes that hash differently",
        )
    )
    if kind in REPLAY_INPUTS:
        facts.inputs_ok = False
    return False


def check_pack(
    ledger: Path, com: Commitment, channel: str, contract: str, chain_id: int, account_seed: str
) -> PackFacts:
    """Check round ``com.round``'s pack against its commitment (see the module docstring).

    Client keys are derived from the run's account seed (:func:`ledger.records.client_secret`):
    an admitted key or a record's signer that is not the client's key is a finding here, so a
    bad admission is reported once, in its round, and later rounds are checked against the
    right key."""
    rnd, facts = com.round, PackFacts(com.round)
    keys = ClientKeys(account_seed, capacity=4096)
    out = facts.findings
    try:
        pack = Pack.read(ledger, unhx(com.pack))
    except PackError as exc:
        out.append((rnd, None, "pack", com.pack, str(exc)))
        return facts
    if pack.round != rnd:
        out.append((rnd, None, "pack", f"a pack of round {rnd}", f"round {pack.round}"))
    facts.readable, facts.pack = True, pack
    for name, want, check in (
        ("global", com.global_hash, "global-blob"),
        ("verdicts", com.verdicts_hash, "verdict-blob"),
    ):
        if name in pack.entries and hx(pack.digest(name)) != want:
            out.append((rnd, None, check, want, hx(pack.digest(name))))
    facts.global_ok = (
        _entry_ok(pack, "global", rnd, facts) and hx(pack.digest("global")) == com.global_hash
    )
    if _entry_ok(pack, "verdicts", rnd, facts):
        _check_verdicts(pack, rnd, facts)
    if _entry_ok(pack, "admitted", rnd, facts):
        _check_admitted(pack, com, keys, facts)
    leaves: dict[int, bytes] = {}
    for c in pack.clients("update"):
        facts.submissions += 1
        _check_client(pack, c, rnd, (channel, contract, chain_id), keys, facts, leaves)
    for c in pack.clients("record"):
        if f"update/{c}" not in pack.entries:
            out.append((rnd, c, "update-blob", f"entry update/{c}", "missing"))
    root = merkle_root([leaves[c] for c in sorted(leaves)])
    if hx(root) != com.submissions_root:
        out.append((rnd, None, "merkle-root", com.submissions_root, hx(root)))
    return facts


def check_packs(
    ledger: Path,
    coms: list[Commitment],
    where: tuple[str, str, int, str],
    jobs: int = 1,
    progress: bool = False,
) -> list[PackFacts]:
    """:func:`check_pack` of every round of ``coms``, on ``jobs`` processes (``where``: the
    channel, contract, chain id and account seed)."""
    from tqdm import tqdm

    args = [(ledger, c, *where) for c in coms]
    bar = tqdm(total=len(args), desc="audit", unit="round", disable=not progress, leave=False)
    try:
        if jobs <= 1 or len(args) < 2:
            out = []
            for a in args:
                out.append(check_pack(*a))
                bar.update()
            return out
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
            out = []
            for f in pool.map(_check_pack_star, args, chunksize=max(1, len(args) // 64)):
                out.append(f)
                bar.update()
            return out
    finally:
        bar.close()


def _check_pack_star(args: tuple[Any, ...]) -> PackFacts:
    facts = check_pack(*args)
    facts.pack = None  # the main process reads it again if it replays (page cache)
    return facts


def _check_verdicts(pack: Pack, rnd: int, facts: PackFacts) -> None:
    """The verdict document: readable, and its kept submitters are the accepted clients."""
    out = facts.findings
    try:
        doc = json.loads(bytes(pack.raw("verdicts")))
        facts.accepted = sorted(int(c) for c in doc["accepted"])
        kept = sorted(int(v["client"]) for v in doc["verdicts"] if v["kept"])
        submitted = set(pack.clients("update"))  # once: per kept client it was O(n^2)
        if [c for c in kept if c in submitted] != facts.accepted:
            out.append((rnd, None, "verdict-document", kept, facts.accepted))
    except (ValueError, KeyError, TypeError):
        out.append((rnd, None, "verdict-document", "a verdict document", "unreadable"))


def _check_admitted(pack: Pack, com: Commitment, keys: ClientKeys, facts: PackFacts) -> None:
    """The admission list: readable, every key the client's own, its root the committed one."""
    rnd, out = com.round, facts.findings
    try:
        adm = json.loads(bytes(pack.raw("admitted")))["admitted"]
        facts.admitted = {int(c): bytes.fromhex(k) for c, k in adm}
        for c, k in facts.admitted.items():
            if k != keys.get(c)[1]:
                out.append(
                    (rnd, c, "admission", f"client {c}'s key {keys.get(c)[1].hex()}", k.hex())
                )
        root = merkle_root([admission_leaf(c, facts.admitted[c]) for c in sorted(facts.admitted)])
        facts.admitted_known = True
    except (ValueError, KeyError, TypeError):
        out.append((rnd, None, "admission-blob", "an admission list", "unreadable"))
        root = None
    if root is not None and hx(root) != com.admitted_root:
        out.append((rnd, None, "admitted-root", com.admitted_root, hx(root)))


def _check_client(
    pack: Pack,
    c: int,
    rnd: int,
    where: tuple[str, str, int],
    keys: ClientKeys,
    facts: PackFacts,
    leaves: dict[int, bytes],
) -> None:
    out = facts.findings
    channel, contract, chain_id = where
    _entry_ok(pack, f"update/{c}", rnd, facts)
    if not _entry_ok(pack, f"record/{c}", rnd, facts):
        return
    try:
        signed = json.loads(bytes(pack.raw(f"record/{c}")))
        rec = signed["record"]
        fields = (
            int(rec["client"]),
            int(rec["round"]),
            rec["channel"],
            rec["contract"],
            int(rec["chain_id"]),
            rec["update_hash"],
            int(rec["samples"]),
            int(rec["base_round"]),
            rec["base_hash"],
        )
    except (ValueError, KeyError, TypeError):
        out.append((rnd, c, "record-blob", "a signed update record", "unreadable"))
        return
    client, r, ch, addr, cid, uhash, samples, base_round, base_hash = fields
    if client != c:
        out.append((rnd, c, "record-client", c, client))
    if r != rnd:
        out.append((rnd, c, "replayed-submission", f"round {rnd}", f"record of round {r}"))
    if (ch, addr.lower(), cid) != (channel, contract.lower(), chain_id):
        out.append(
            (
                rnd,
                c,
                "record-channel",
                f"{channel} {contract} chain {chain_id}",
                f"{ch} {addr} chain {cid}",
            )
        )
    if uhash != hx(pack.digest(f"update/{c}")):
        out.append((rnd, c, "record-update", hx(pack.digest(f"update/{c}")), uhash))
    signer, want = recover_key(signed), keys.get(c)[1]
    if signer != want:
        out.append((rnd, c, "signature", want.hex(), signer.hex() if signer else "no signer"))
    facts.signers[c] = signer
    facts.bases[c] = (base_round, base_hash)
    try:
        leaves[c] = submission_leaf(
            c, unhx(uhash), samples, unhx(base_hash), pack.digest(f"record/{c}")
        )
    except ValueError as exc:
        out.append((rnd, c, "record-blob", "a well-formed record", str(exc)))
