"""A recorded round read back from its pack (ledger v2): the update rows in the engine's order,
the clients' extras, and the batch fields the committee's catch-up and the audit's replay
re-derive the round from (:mod:`ledger.session`, :mod:`ledger.audit_replay`)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from defenses.siren_reputation import BANNED
from ledger.records import update_prefix
from ledger.store import BlobError, decode


def rows_of_pack(
    pack: Any, size: int, extras: dict[int, dict[str, np.ndarray]] | None = None
) -> tuple[np.ndarray, list[int]]:
    """The update rows of a pack, in its order (``[n, size]`` float32) and their clients; the
    clients' extras go into ``extras`` (client id -> name -> array) when it is given. Raises
    ``ValueError`` if an update entry does not hold ``size`` values (and readable extras)."""
    prefix = len(update_prefix(size))
    end = prefix + 4 * size
    ids = list(pack.clients("update"))
    rows = np.empty((len(ids), size), np.float32)
    for i, c in enumerate(ids):
        raw = pack.raw(f"update/{c}")
        if len(raw) < end or (len(raw) > end and extras is None):
            raise ValueError(f"update of client {c} has {len(raw)} bytes, expected {end}")
        rows[i] = np.frombuffer(raw[prefix:end], "<f4")
        if extras is not None and len(raw) > end:
            try:
                extras[int(c)] = decode(bytes(raw[end:]))
            except BlobError as exc:
                raise ValueError(f"update of client {c}: unreadable extras ({exc})") from None
    return rows, ids


def banned_rows(client_ids: np.ndarray, doc: dict[str, Any]) -> np.ndarray:
    """The batch signal ``"banned"`` of a recorded round, from its verdict document ``doc``: a
    row is banned when the document gives its client the verdict ``"banned"``.

    Which clients are banned is per-client state of the run (Siren's strikes, in the
    client-state store, which the replay does not have); the server's rule takes it as an input
    and rejects their rows unjudged (Siren's paper rule), and the verdict document records
    exactly that decision. Raises ``ValueError`` on a malformed document."""
    try:
        out = {int(v["client"]) for v in doc["verdicts"] if v["reason"] == BANNED}
    except (KeyError, TypeError) as exc:
        raise ValueError(f"verdict document without readable verdicts: {exc!r}") from None
    return np.array([c in out for c in np.asarray(client_ids).tolist()], bool)


def batch_of_pack(
    pack: Any, size: int, extras: dict[int, dict[str, np.ndarray]] | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """A recorded round's rows and the other fields of its update batch, in the order the
    engine aggregated them (the committee's catch-up and the audit's replay): ``UpdateBatch(
    torch.from_numpy(rows), **fields)``; the clients' extras go into ``extras`` when given
    (:func:`rows_of_pack`). The signals are the records' (loss, alarm) and the verdict
    document's bans (:func:`banned_rows`). Raises ``ValueError``/``KeyError`` on a bad entry."""
    rows, ids = rows_of_pack(pack, size, extras)
    recs = [json.loads(bytes(pack.raw(f"record/{c}")))["record"] for c in ids]
    client_ids = np.array(ids, np.int64)
    return rows, {
        "client_ids": client_ids,
        "num_samples": np.array([r["samples"] for r in recs], np.int64),
        "base_rounds": np.array([r["base_round"] for r in recs], np.int64),
        "signals": {
            "loss": np.array(
                [np.nan if r["loss"] is None else r["loss"] for r in recs], np.float32
            ),
            "alarm": np.array([bool(r["alarm"]) for r in recs], bool),
            "banned": banned_rows(client_ids, json.loads(bytes(pack.raw("verdicts")))),
        },
    }


def resumed_round(
    pack: Any, size: int | None
) -> tuple[np.ndarray, list[int], tuple[np.ndarray, dict[str, Any]] | None, dict[int, Any]]:
    """What a resumed recorder takes from a recorded round's pack: the new global model, the
    clients admitted that round and, with a committee (``size``, the row length), the update
    batch (:func:`batch_of_pack`) and the clients' extras. Raises ``PackError``, ``KeyError``
    or ``ValueError`` on a bad pack."""
    g = decode(bytes(pack.raw("global")))["global"]
    admitted = [int(c) for c, _ in json.loads(bytes(pack.raw("admitted")))["admitted"]]
    extras: dict[int, Any] = {}
    batch = batch_of_pack(pack, size, extras) if size is not None else None
    return g, admitted, batch, extras
