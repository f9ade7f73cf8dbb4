"""What one FLChain round stores and commits: its pack entries, leaves and roots (ledger v2).

:func:`build_round` turns a round's rows (the updates the defense aggregated, in the engine's
order), the new global model and the verdict document into the round's pack entries
(:mod:`ledger.pack`) and the four hashes its on-chain commitment carries: the global model's hash,
the Merkle root of the submissions, the verdict document's hash and the Merkle root of the clients
admitted this round. Each client signs its update record with its own key here (the simulator
plays the clients); a client seen for the first time is admitted with its public key.

The recorder (:mod:`ledger.session`) calls it for every round; the tamper cases call it to rebuild
a round consistently.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from defenses.base import UpdateBatch
from ledger.keys import ClientKeys
from ledger.merkle import admission_leaf, merkle_root, submission_leaf
from ledger.pack import Entry
from ledger.pack_rows import banned_rows
from ledger.records import (
    canonical_json,
    extras_blob,
    model_blob,
    record_body,
    sha256,
    sign_record,
    update_prefix,
)
from ledger.spans import spans


@dataclass(frozen=True)
class Channel:
    """Where a run's records belong: the channel id, the contract and the chain."""

    channel: bytes
    contract: str
    chain_id: int


@dataclass
class RoundRows:
    """One round's rows as the engine aggregated them (``rows`` may be a view of shared memory:
    it is hashed and written, never copied)."""

    round: int
    rows: np.ndarray  # [n, d] float32
    client_ids: np.ndarray
    num_samples: np.ndarray
    base_rounds: np.ndarray
    loss: np.ndarray
    alarm: np.ndarray
    global_flat: np.ndarray  # the new global model (full)
    verdicts: dict[str, Any]  # the verdict document
    #: the clients' named extras, each ``[n, ...]`` in row order (empty when they send none)
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.client_ids)

    def tails(self) -> list[bytes]:
        """Each row's extras blob (:func:`ledger.records.extras_blob`), in row order."""
        if not self.extras:
            return [b""] * len(self)
        return [extras_blob({k: v[i] for k, v in self.extras.items()}) for i in range(len(self))]

    def extras_of(self) -> dict[int, dict[str, np.ndarray]]:
        """Client id -> its extras (what the server update reads)."""
        return {
            int(c): {k: v[i] for k, v in self.extras.items()}
            for i, c in enumerate(self.client_ids.tolist())
        }

    def batch(self) -> UpdateBatch:
        """The update batch the engine aggregated (what the committee re-derives the round
        from): the rows, their signals and the verdict document's bans (:func:`banned_rows`)."""
        return UpdateBatch(
            torch.from_numpy(self.rows),
            self.client_ids,
            self.num_samples,
            self.base_rounds,
            {
                "loss": self.loss,
                "alarm": self.alarm,
                "banned": banned_rows(self.client_ids, self.verdicts),
            },
        )


@dataclass
class BuiltRound:
    """A round ready to write and commit."""

    entries: list[Entry]
    global_hash: bytes
    submissions_root: bytes
    verdicts_hash: bytes
    admitted_root: bytes
    admitted: list[int] = field(default_factory=list)


def hash_rows(rows: np.ndarray, tails: list[bytes] | None = None) -> list[bytes]:
    """SHA-256 of each row's update entry: its update blob (:func:`ledger.records.update_blob`)
    followed by its extras blob (``tails[i]``, none by default), hashing the shared blob header
    once."""
    head = hashlib.sha256(update_prefix(rows.shape[1] if rows.ndim == 2 else 0))
    out = []
    for i, row in enumerate(rows):
        h = head.copy()
        h.update(np.ascontiguousarray(row, dtype="<f4"))
        if tails is not None and tails[i]:
            h.update(tails[i])
        out.append(h.digest())
    return out


def build_round(
    data: RoundRows,
    where: Channel,
    keys: ClientKeys,
    base_hash: Callable[[int], bytes],
    admitted_before: Callable[[int], bool],
) -> BuiltRound:
    """The round's pack entries and commitment hashes.

    Parameters
    ----------
    data : RoundRows
        The round's rows and results.
    where : Channel
        Channel, contract and chain id the records bind to.
    keys : ClientKeys
        The run's client keys.
    base_hash : callable
        Hash of the global model a round started from (a row's base round).
    admitted_before : callable
        Whether a client was admitted in an earlier round.

    Returns
    -------
    BuiltRound
    """
    rows = np.ascontiguousarray(data.rows, dtype="<f4")
    size = rows.shape[1] if rows.ndim == 2 else 0
    prefix = update_prefix(size)
    tails = data.tails()
    n = len(data)
    # per-row fields as Python lists once (indexing numpy arrays row by row costs more)
    ids, samples, bases = (
        a.tolist() for a in (data.client_ids, data.num_samples, data.base_rounds)
    )
    losses = data.loss.tolist() if len(data.loss) else [None] * n
    alarms = data.alarm.tolist() if len(data.alarm) else [False] * n
    channel_hex, rnd = "0x" + where.channel.hex(), int(data.round)
    ks = keys.get_many(ids, spans)
    bhs = [base_hash(b) for b in bases]
    head = hashlib.sha256(prefix)
    hashes: list[bytes] = [b""] * n
    signed: list[Any] = [None] * n

    def work(lo: int, hi: int) -> None:  # row i's hash, signed record and leaf
        for i in range(lo, hi):
            h = head.copy()
            h.update(rows[i])
            if tails[i]:
                h.update(tails[i])
            hashes[i] = d = h.digest()
            c = ids[i]
            body = record_body(
                channel_hex, where.contract, where.chain_id, rnd, c, d, samples[i], bases[i],
                bhs[i], losses[i], bool(alarms[i]),
            )  # fmt: skip
            record = sign_record(body, ks[i][0])
            rhash = sha256(record)
            leaf = submission_leaf(c, d, samples[i], bhs[i], rhash)
            signed[i] = Entry(f"record/{c}", rhash, (record,)), leaf

    spans(n, work)
    entries: list[Entry] = []
    leaves: dict[int, bytes] = {}
    admitted: dict[int, bytes] = {}
    for i, c in enumerate(ids):
        if not admitted_before(c) and c not in admitted:
            admitted[c] = ks[i][1]
        record, leaves[c] = signed[i]
        parts = (prefix, rows[i], tails[i]) if tails[i] else (prefix, rows[i])
        entries += [Entry(f"update/{c}", hashes[i], parts), record]
    gblob = model_blob(data.global_flat)
    glob = Entry.of("global", gblob)
    verdicts = Entry.of("verdicts", canonical_json(data.verdicts))
    adm = sorted(admitted)
    admitted_doc = Entry.of(
        "admitted",
        canonical_json(
            {"round": int(data.round), "admitted": [[c, admitted[c].hex()] for c in adm]}
        ),
    )
    return BuiltRound(
        [glob, verdicts, admitted_doc, *entries],
        glob.digest,
        merkle_root([leaves[c] for c in sorted(leaves)]),
        verdicts.digest,
        merkle_root([admission_leaf(c, admitted[c]) for c in adm]),
        adm,
    )
