"""Cases in which the aggregator (who holds the channel's key) rewrites rounds: it re-commits
a round's new pack on a devnet re-mined from genesis (:func:`ledger.tamper_tools.recommit`),
signed by a colluding committee or by non-members. Registered in :mod:`ledger.tamper`; the cases
that rewrite the chain itself (a commitment from another run or left out, the contract
re-deployed) are in :mod:`ledger.tamper_chain`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import coincurve

from ledger.records import canonical_json, hx, sha256, sign_record, unhx
from ledger.tamper_tools import (
    Expected,
    NotApplicable,
    clients_of,
    entries,
    ledger_of,
    manifest,
    pack_json,
    pack_of,
    recommit,
    replace_entries,
    resign,
)


# -- the aggregator: re-committed rounds -------------------------------------------------------
def _edit_record(
    run: Path,
    r: int,
    c: int,
    edit: Callable[[dict[str, Any]], None],
    key: coincurve.PrivateKey | None = None,
) -> list[Any]:
    pack = pack_of(run, r)
    rec = pack_json(pack, f"record/{c}")["record"]
    edit(rec)
    signed = sign_record(rec, key) if key is not None else resign(run, rec, c)
    return replace_entries(pack, {f"record/{c}": signed})


def submission_replayed(run: Path, r: int) -> Expected:
    """Put a client's (validly signed) record of another round into round ``r``."""
    es = entries(run)
    o = r - 1 if r > 0 else r + 1
    if o >= len(es):
        raise NotApplicable("needs two rounds")
    other = set(clients_of(run, o))
    common = [c for c in clients_of(run, r) if c in other]
    if not common:
        raise NotApplicable(f"no client submitted in rounds {r} and {o}")
    c = common[0]
    other = bytes(pack_of(run, o).raw(f"record/{c}"))
    recommit(run, r, replace_entries(pack_of(run, r), {f"record/{c}": other}))
    return r, c, "replayed-submission"


def record_other_channel(run: Path, r: int) -> Expected:
    """Re-sign a client's record with another channel's id in it."""
    c = clients_of(run, r)[-1]
    recommit(
        run,
        r,
        _edit_record(run, r, c, lambda rec: rec.update(channel=hx(sha256(b"another channel")))),
    )
    return r, c, "record-channel"


def _swap_two(run: Path, r: int, kind: str) -> int:
    """Swap the ``kind`` entries (``record`` or ``update``) of round ``r``'s first two clients
    and re-commit; returns the first."""
    ids = clients_of(run, r)
    if len(ids) < 2:
        raise NotApplicable("needs two submissions in a round")
    a, b = ids[0], ids[1]
    pack = pack_of(run, r)
    recommit(
        run,
        r,
        replace_entries(
            pack,
            {
                f"{kind}/{a}": bytes(pack.raw(f"{kind}/{b}")),
                f"{kind}/{b}": bytes(pack.raw(f"{kind}/{a}")),
            },
        ),
    )
    return a


def records_swapped(run: Path, r: int) -> Expected:
    """Swap two clients' signed records."""
    a = _swap_two(run, r, "record")
    return r, a, "record-client"


def leaf_swapped(run: Path, r: int) -> Expected:
    """Swap two clients' updates under their (unchanged) records and leaves."""
    a = _swap_two(run, r, "update")
    return r, a, "record-update"


def signature_forged(run: Path, r: int) -> Expected:
    """Sign a client's record with a key that is not the client's."""
    c = clients_of(run, r)[-1]
    recommit(
        run, r, _edit_record(run, r, c, lambda rec: None, key=coincurve.PrivateKey(b"\x07" * 32))
    )
    return r, c, "signature"


def unadmitted_client(run: Path, r: int) -> Expected:
    """Add a well-signed submission from a client never admitted to the channel."""
    pack = pack_of(run, r)
    c0, stranger = clients_of(run, r)[0], 10**6
    rec = dict(pack_json(pack, f"record/{c0}")["record"], client=stranger)
    recommit(
        run,
        r,
        replace_entries(
            pack,
            {},
            [
                (f"update/{stranger}", bytes(pack.raw(f"update/{c0}"))),
                (f"record/{stranger}", resign(run, rec, stranger)),
            ],
        ),
    )
    return r, stranger, "admission"


def base_rewritten(run: Path, r: int) -> Expected:
    """Re-sign a client's record claiming it trained from another model."""
    c = clients_of(run, r)[0]
    recommit(
        run,
        r,
        _edit_record(run, r, c, lambda rec: rec.update(base_hash=hx(sha256(b"another base")))),
    )
    return r, c, "base-model"


def merkle_rewritten(run: Path, r: int) -> Expected:
    """Commit a submissions root that is not the root of the round's leaves."""
    recommit(run, r, override={"submissions_root": sha256(b"another root")})
    return r, None, "merkle-root"


def admitted_root_rewritten(run: Path, r: int) -> Expected:
    """Commit an admission root that is not the root of the round's admission list."""
    recommit(run, r, override={"admitted_root": sha256(b"another root")})
    return r, None, "admitted-root"


def admission_rewritten(run: Path, r: int) -> Expected:
    """Admit a client with a key that is not its own (or, in a round that admits nobody,
    admit an earlier client a second time)."""
    pack = pack_of(run, r)
    doc = pack_json(pack, "admitted")
    stranger = coincurve.PrivateKey(b"\x05" * 32).public_key.format().hex()
    if doc["admitted"]:
        c = int(doc["admitted"][0][0])
        doc["admitted"][0][1] = stranger
    else:
        c = clients_of(run, r)[0]
        doc["admitted"] = [[c, stranger]]
    recommit(run, r, replace_entries(pack, {"admitted": canonical_json(doc)}))
    return r, c, "admission"


def verdicts_inconsistent(run: Path, r: int) -> Expected:
    """Drop a kept client from the verdict document's accepted list."""
    pack = pack_of(run, r)
    doc = pack_json(pack, "verdicts")
    if not doc["accepted"]:
        raise NotApplicable(f"round {r} accepted nobody")
    doc["accepted"] = doc["accepted"][1:]
    recommit(run, r, replace_entries(pack, {"verdicts": canonical_json(doc)}))
    return r, None, "verdict-document"


def verdict_rewritten(run: Path, r: int) -> Expected:
    """Colluding committee: a rejected client's verdict rewritten to kept (every hash and
    signature consistent; only the replay can tell)."""
    pack = pack_of(run, r)
    doc = pack_json(pack, "verdicts")
    submitted = set(pack.clients("update"))
    bad = [v for v in doc["verdicts"] if not v["kept"] and v["client"] in submitted]
    if not bad:
        raise NotApplicable(f"round {r} rejected no client")
    bad[0]["kept"] = True
    doc["accepted"] = sorted([*doc["accepted"], bad[0]["client"]])
    recommit(run, r, replace_entries(pack, {"verdicts": canonical_json(doc)}))
    return r, None, "recompute-verdicts"


def global_swapped(run: Path, r: int) -> Expected:
    """Colluding committee: the round's global model swapped for another (the initial one),
    with hashes and signatures made consistent (only the replay can tell)."""
    m = manifest(run)
    from ledger.pack import Pack

    initial = Pack.read(ledger_of(run), unhx(m["initial_pack"]))
    recommit(run, r, replace_entries(pack_of(run, r), {"global": bytes(initial.raw("global"))}))
    return r, None, "recompute-global"


def signed_by_non_member(run: Path, r: int) -> Expected:
    """The aggregator re-commits round ``r`` with a signature of validators that are not the
    committee."""
    recommit(run, r, sign="stranger")
    return r, None, "committee-signature"
