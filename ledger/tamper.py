"""Tampering with a recorded run, for the audit's tests and ``benchmarks/ledger_audit.py``.

Each case edits a finished run directory in place the way one of the attackers of
:mod:`ledger.tamper_tools` would (the files-only cases are here, the aggregator's in
:mod:`ledger.tamper_aggregator` and :mod:`ledger.tamper_chain`), at a given round, and returns
where the audit must report it: ``(round, client, check)`` (client ``None`` for whole-round
evidence, round ``None`` for the whole run). A case that cannot apply to a run (no rejected
client in any round, say) raises :class:`NotApplicable`. Together the cases trigger every check
of the audit (:data:`ledger.audit_names.CHECKS`); ``RUN_CASES`` apply to the whole run, the
others to a round.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlp
from eth_utils import keccak

from ledger.pack import pack_path
from ledger.records import hx, sha256, unhx
from ledger.tamper_aggregator import (
    admission_rewritten,
    admitted_root_rewritten,
    base_rewritten,
    global_swapped,
    leaf_swapped,
    merkle_rewritten,
    record_other_channel,
    records_swapped,
    signature_forged,
    signed_by_non_member,
    submission_replayed,
    unadmitted_client,
    verdict_rewritten,
    verdicts_inconsistent,
)
from ledger.tamper_chain import commitment_removed, contract_code_replaced, contract_setup_changed
from ledger.tamper_tools import (
    Expected,
    NotApplicable,
    clients_of,
    entries,
    flip,
    ledger_of,
    manifest,
    write_entries,
)

__all__ = ["CASES", "RECEIPT_CASES", "RUN_CASES", "caught"]

Case = Callable[[Path, int], Expected]


# -- files only -----------------------------------------------------------------------------
def _blocks(run: Path) -> tuple[Path, list[bytes]]:
    path = ledger_of(run) / "chain/blocks.rlp"
    if not path.is_file():
        raise NotApplicable("not an embedded-devnet run")
    data, recs, i = path.read_bytes(), [], 0
    while i < len(data):  # records: 4-byte big-endian length, then the block's RLP
        n = int.from_bytes(data[i : i + 4], "big")
        recs.append(data[i : i + 4 + n])
        i += 4 + n
    return path, recs


def chain_block_edited(run: Path, r: int) -> Expected:
    """Change a header field (extra_data) of the block that commits round ``r``."""
    path, recs = _blocks(run)
    n = entries(run)[r]["block"]
    header, *body = rlp.decode(recs[n - 1][4:])
    header = list(header)
    header[12] = b"edited"  # extra_data
    raw = rlp.encode([header, *body])
    recs[n - 1] = len(raw).to_bytes(4, "big") + raw
    path.write_bytes(b"".join(recs))
    return r, None, "chain-block"


def round_cut_from_export(run: Path, r: int) -> Expected:
    """Cut the block that commits round ``r`` out of the devnet's export."""
    path, recs = _blocks(run)
    n = entries(run)[r]["block"]
    path.write_bytes(b"".join(b for i, b in enumerate(recs, start=1) if i != n))
    return r, None, "chain-block"


def rounds_swapped(run: Path, r: int) -> Expected:
    """Swap round ``r``'s line of ``rounds.jsonl`` with its neighbour's."""
    es = entries(run)
    o = r + 1 if r + 1 < len(es) else r - 1
    es[r], es[o] = es[o], es[r]
    write_entries(run, es)
    first = min(r, o)
    return first, None, "round-order"


def index_line_removed(run: Path, r: int) -> Expected:
    """Remove round ``r``'s line from ``rounds.jsonl`` (the chain still has the round)."""
    es = entries(run)
    write_entries(run, es[:r] + es[r + 1 :])
    return r, None, "round-off-chain"


def last_round_dropped(run: Path, r: int) -> Expected:
    """Drop the last round everywhere a file holds it: its ``rounds.jsonl`` line, its block
    and every later one from the export, and ``head.json`` pointed at the block before (the
    run's ``summary.json`` still says it finished)."""
    es = entries(run)
    if r != len(es) - 1:
        raise NotApplicable("only the last round can be dropped")
    path, recs = _blocks(run)
    keep = recs[: es[r]["block"] - 1]
    path.write_bytes(b"".join(keep))
    header = rlp.decode(keep[-1][4:])[0]
    head = {"number": len(keep), "hash": hx(keccak(rlp.encode(header)))}
    (ledger_of(run) / "chain/head.json").write_text(json.dumps(head))
    write_entries(run, es[:r])
    return r, None, "round-count"


def pack_deleted(run: Path, r: int) -> Expected:
    """Delete round ``r``'s pack."""
    pack_path(ledger_of(run), unhx(entries(run)[r]["pack"])).unlink()
    return r, None, "pack"


def _entry_edited(name: str, check: str) -> Case:
    def case(run: Path, r: int) -> Expected:
        c = clients_of(run, r)[0] if "/" in name else None
        flip(run, r, name.format(c=c))
        return r, c, check

    case.__doc__ = f"Flip one bit of round r's {name.split('/')[0]} entry."
    return case


def index_entry_edited(run: Path, r: int) -> Expected:
    """Claim another global model for round ``r`` in ``rounds.jsonl``."""
    es = entries(run)
    es[r]["global_hash"] = hx(sha256(b"another model"))
    write_entries(run, es)
    return r, None, "commitment"


def index_landing_edited(run: Path, r: int) -> Expected:
    """Claim another transaction and block for round ``r``'s commitment in ``rounds.jsonl``."""
    es = entries(run)
    es[r]["tx"] = hx(sha256(b"another transaction"))
    es[r]["block"] += 1
    write_entries(run, es)
    return r, None, "commitment"


def index_counts_edited(run: Path, r: int) -> Expected:
    """Claim one submission and one admission more for round ``r`` in ``rounds.jsonl``."""
    es = entries(run)
    es[r]["submissions"] += 1
    es[r]["admitted"] += 1
    write_entries(run, es)
    return r, None, "commitment"


def config_edited(run: Path, r: int) -> Expected:
    """Edit the manifest's config (the clients' learning rate, doubled): the config no longer
    hashes to the channel id."""
    m = manifest(run)
    m["config"]["algorithm"]["lr"] *= 2
    (ledger_of(run) / "manifest.json").write_text(json.dumps(m, indent=1))
    return None, None, "channel-config"


def pop_forged(run: Path, r: int) -> Expected:
    """Give a committee member another member's proof of possession in the manifest."""
    m = manifest(run)
    if len(m["committee"]) < 2:
        raise NotApplicable("needs a committee of 2 or more")
    m["committee"][0]["pop"] = m["committee"][1]["pop"]
    (ledger_of(run) / "manifest.json").write_text(json.dumps(m, indent=1))
    return None, None, "committee-pop"


#: cases applied at a round (first, middle and last by the study)
CASES: dict[str, Case] = {
    "chain block edited": chain_block_edited,
    "round's block cut from the export": round_cut_from_export,
    "index lines swapped": rounds_swapped,
    "index line removed": index_line_removed,
    "last round dropped from index, export and head": last_round_dropped,
    "commitment left out of the chain": commitment_removed,
    "pack deleted": pack_deleted,
    "update entry edited": _entry_edited("update/{c}", "update-blob"),
    "record entry edited": _entry_edited("record/{c}", "record-blob"),
    "global model entry edited": _entry_edited("global", "global-blob"),
    "verdict document edited": _entry_edited("verdicts", "verdict-blob"),
    "admission list edited": _entry_edited("admitted", "admission-blob"),
    "index entry edited": index_entry_edited,
    "index entry's transaction and block edited": index_landing_edited,
    "index entry's counts edited": index_counts_edited,
    "submission replayed from another round": submission_replayed,
    "record from another channel": record_other_channel,
    "records swapped between clients": records_swapped,
    "leaf swapped between clients": leaf_swapped,
    "signature forged": signature_forged,
    "client never admitted": unadmitted_client,
    "admission with a wrong key": admission_rewritten,
    "base model rewritten": base_rewritten,
    "submissions root rewritten": merkle_rewritten,
    "admission root rewritten": admitted_root_rewritten,
    "accepted list inconsistent": verdicts_inconsistent,
    "rejected verdict rewritten to kept": verdict_rewritten,
    "global model swapped, all consistent": global_swapped,
    "signed by non-members": signed_by_non_member,
}

#: cases applied to the whole run
RUN_CASES: dict[str, Case] = {
    "contract code replaced": contract_code_replaced,
    "contract deployed with another committee": contract_setup_changed,
    "proof of possession forged": pop_forged,
    "config edited in the manifest": config_edited,
}


def caught(findings: list[Any], expected: Expected) -> tuple[bool, bool]:
    """(reported at the expected round/client/check, nothing reported at any other round)."""
    r, c, check = expected
    where = {(f.round, f.client, f.check) for f in findings}
    return (r, c, check) in where, {f.round for f in findings} <= {r}


def receipt_for_outsider(run: Path, r: int) -> tuple[Expected, dict[str, Any]]:
    """A member's receipt of round ``r`` presented for a client that did not submit in it."""
    from ledger.proof import receipt, receipt_leaf

    ids = clients_of(run, r)
    outsider = max(ids) + 1
    rec = receipt(run, r, ids[0])
    rec["client"] = outsider
    rec["leaf"] = hx(receipt_leaf(outsider, rec))
    return (r, outsider, "inclusion-proof"), rec


#: cases that forge a client's receipt (checked by :func:`ledger.proof.verify_receipt`)
RECEIPT_CASES: dict[str, Callable[[Path, int], tuple[Expected, dict[str, Any]]]] = {
    "proof for a client not in the round": receipt_for_outsider,
}


if __name__ == "__main__":
    import sys

    print(
        "error: ledger.tamper is a library, not a command: its cases are applied by "
        "python benchmarks/ledger_audit.py (the tamper study) and the audit's tests",
        file=sys.stderr,
    )
    sys.exit(2)
