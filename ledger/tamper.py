"""Tampering with a recorded run, for the audit's tests and ``benchmarks/ledger_audit.py``.

Each case edits a finished run directory in place the way an attacker with write access to the
results would, and returns where the audit must report it: ``(round, client, check)`` (client
``None`` for whole-round evidence). A case that cannot apply to a run (e.g. no client took part
in two consecutive rounds) raises :class:`NotApplicable`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlp
from eth_account import Account

from ledger.records import canonical_json, sign_record
from ledger.store import BlobStore

Expected = tuple[int, int | None, str]


class NotApplicable(ValueError):
    """The run does not have what this tamper case needs."""


def entries(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "ledger/rounds.jsonl").read_text().splitlines()
            if x.strip()]


def write_entries(run: Path, es: list[dict[str, Any]]) -> None:
    (run / "ledger/rounds.jsonl").write_text("".join(json.dumps(e) + "\n" for e in es))


def _signed(run: Path, digest: str) -> dict[str, Any]:
    return json.loads(BlobStore(run / "ledger").get(digest))


def _round(es: list[dict[str, Any]]) -> int:
    if len(es) < 3:
        raise NotApplicable("needs at least 3 recorded rounds")
    return len(es) // 2


def edit_update_blob(run: Path) -> Expected:
    """Flip one bit of an accepted update's blob."""
    es = entries(run)
    r = _round(es)
    sub = es[r]["submissions"][0]
    digest = _signed(run, sub["record"])["record"]["update_hash"][2:]
    p = run / "ledger/blobs/sha256" / digest
    data = bytearray(p.read_bytes())
    data[-1] ^= 0x01
    p.write_bytes(bytes(data))
    return r, sub["client"], "update-blob"


def replace_global_blob(run: Path) -> Expected:
    """Put the previous round's global model in place of this round's."""
    es = entries(run)
    r = _round(es)
    d = run / "ledger/blobs/sha256"
    (d / es[r]["global_hash"][2:]).write_bytes((d / es[r - 1]["global_hash"][2:]).read_bytes())
    return r, None, "global-blob"


def forge_signature(run: Path) -> Expected:
    """Re-sign a client's update record with a key that is not the client's."""
    es = entries(run)
    r = _round(es)
    sub = es[r]["submissions"][-1]
    forged = sign_record(_signed(run, sub["record"])["record"], Account.from_key(b"\x07" * 32))
    sub["record"] = BlobStore(run / "ledger").put(canonical_json(forged))
    write_entries(run, es)
    return r, sub["client"], "signature"


def replay_submission(run: Path) -> Expected:
    """Swap a client's record for its (validly signed) record of the round before."""
    es = entries(run)
    for r in range(len(es) - 1, 0, -1):
        before = {s["client"]: s for s in es[r - 1]["submissions"]}
        for s in es[r]["submissions"]:
            if s["client"] in before:
                s["record"] = before[s["client"]]["record"]
                write_entries(run, es)
                return r, s["client"], "replayed-submission"
    raise NotApplicable("no client submitted in two consecutive rounds")


def unregistered_sender(run: Path) -> Expected:
    """Add a well-signed submission from an account the channel never registered."""
    es = entries(run)
    r = _round(es)
    stranger = Account.from_key(b"\x09" * 32)
    rec = dict(_signed(run, es[r]["submissions"][0]["record"])["record"], client=10**6,
               address=stranger.address)
    digest = BlobStore(run / "ledger").put(canonical_json(sign_record(rec, stranger)))
    es[r]["submissions"].append({"client": 10**6, "record": digest, "tx": None})
    write_entries(run, es)
    return r, 10**6, "registered-sender"


def _export(run: Path) -> tuple[list[dict[str, Any]], int, Path, list[bytes]]:
    """(entries, round to tamper with, blocks.rlp path, its records)."""
    es = entries(run)
    r = _round(es)
    path = run / "ledger/chain/blocks.rlp"
    if not path.is_file():
        raise NotApplicable("not an embedded-devnet run")
    data, recs, i = path.read_bytes(), [], 0
    while i < len(data):  # records: 4-byte big-endian length, then the block's RLP
        n = int.from_bytes(data[i:i + 4], "big")
        recs.append(data[i:i + 4 + n])
        i += 4 + n
    return es, r, path, recs


def delete_round_from_export(run: Path) -> Expected:
    """Cut the blocks of one round out of the embedded devnet's export."""
    es, r, path, recs = _export(run)
    gone = range(es[r - 1]["block"] + 1, es[r]["block"] + 1)
    path.write_bytes(b"".join(b for i, b in enumerate(recs, start=1) if i not in gone))
    return r, None, "chain-block"


def edit_chain_block(run: Path) -> Expected:
    """Change a header field (extra_data) of the block that finalizes a round."""
    es, r, path, recs = _export(run)
    n = es[r]["block"]
    header, *body = rlp.decode(recs[n - 1][4:])
    header = list(header)
    header[12] = b"edited"  # extra_data
    raw = rlp.encode([header, *body])
    recs[n - 1] = len(raw).to_bytes(4, "big") + raw
    path.write_bytes(b"".join(recs))
    return r, None, "chain-block"


CASES: dict[str, Callable[[Path], Expected]] = {
    "update blob edited": edit_update_blob,
    "global model blob replaced": replace_global_blob,
    "signature forged": forge_signature,
    "submission replayed from an earlier round": replay_submission,
    "unregistered sender": unregistered_sender,
    "round deleted from the export": delete_round_from_export,
    "chain block edited": edit_chain_block,
}


def caught(findings: list[Any], expected: Expected) -> tuple[bool, bool]:
    """(reported at the expected round/client/check, nothing reported at any other round)."""
    r, c, check = expected
    where = {(f.round, f.client, f.check) for f in findings}
    return (r, c, check) in where, {f.round for f in findings} <= {r}
