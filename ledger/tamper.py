"""Tampering with a recorded run, for the audit's tests and ``benchmarks/ledger_audit.py``.

Each case edits a finished run directory in place the way one of the attackers of
:mod:`ledger.tamper_tools` would, at a given round, and returns where the audit must report it:
``(round, client, check)`` (client ``None`` for whole-round evidence, round ``None`` for the
whole run). A case that cannot apply to a run (no rejected client in any round, say) raises
:class:`NotApplicable`. Together the cases trigger every check of the audit
(:data:`ledger.audit.CHECKS`); ``RUN_CASES`` apply to the whole run, the others to a round.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import coincurve
import rlp

from ledger.pack import pack_path
from ledger.records import canonical_json, hx, sha256, sign_record, unhx
from ledger.tamper_tools import (
    Expected,
    NotApplicable,
    entries,
    flip,
    ledger_of,
    manifest,
    pack_of,
    rebuild_chain,
    recommit,
    replace_entries,
    resign,
    write_entries,
)

__all__ = ["CASES", "RECEIPT_CASES", "RUN_CASES", "Expected", "NotApplicable", "caught", "entries",
           "write_entries"]

Case = Callable[[Path, int], Expected]


def _json(pack: Any, name: str) -> Any:
    return json.loads(bytes(pack.raw(name)))


def _clients(run: Path, rnd: int) -> list[int]:
    ids = list(pack_of(run, rnd).clients("update"))
    if not ids:
        raise NotApplicable(f"round {rnd} has no submissions")
    return ids


# -- files only -----------------------------------------------------------------------------
def _blocks(run: Path) -> tuple[Path, list[bytes]]:
    path = ledger_of(run) / "chain/blocks.rlp"
    if not path.is_file():
        raise NotApplicable("not an embedded-devnet run")
    data, recs, i = path.read_bytes(), [], 0
    while i < len(data):  # records: 4-byte big-endian length, then the block's RLP
        n = int.from_bytes(data[i:i + 4], "big")
        recs.append(data[i:i + 4 + n])
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
    write_entries(run, es[:r] + es[r + 1:])
    return r, None, "round-off-chain"


def pack_deleted(run: Path, r: int) -> Expected:
    """Delete round ``r``'s pack."""
    pack_path(ledger_of(run), unhx(entries(run)[r]["pack"])).unlink()
    return r, None, "pack"


def _entry_edited(name: str, check: str) -> Case:
    def case(run: Path, r: int) -> Expected:
        c = _clients(run, r)[0] if "/" in name else None
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


def pop_forged(run: Path, r: int) -> Expected:
    """Give a committee member another member's proof of possession in the manifest."""
    m = manifest(run)
    if len(m["committee"]) < 2:
        raise NotApplicable("needs a committee of 2 or more")
    m["committee"][0]["pop"] = m["committee"][1]["pop"]
    (ledger_of(run) / "manifest.json").write_text(json.dumps(m, indent=1))
    return None, None, "committee-pop"


# -- the aggregator: re-committed rounds -------------------------------------------------------
def _edit_record(run: Path, r: int, c: int, edit: Callable[[dict[str, Any]], None],
                 key: coincurve.PrivateKey | None = None) -> list[Any]:
    pack = pack_of(run, r)
    rec = _json(pack, f"record/{c}")["record"]
    edit(rec)
    signed = sign_record(rec, key) if key is not None else resign(run, rec, c)
    return replace_entries(pack, {f"record/{c}": signed})


def submission_replayed(run: Path, r: int) -> Expected:
    """Put a client's (validly signed) record of another round into round ``r``."""
    es = entries(run)
    o = r - 1 if r > 0 else r + 1
    if o >= len(es):
        raise NotApplicable("needs two rounds")
    common = [c for c in _clients(run, r) if c in set(_clients(run, o))]
    if not common:
        raise NotApplicable(f"no client submitted in rounds {r} and {o}")
    c = common[0]
    other = bytes(pack_of(run, o).raw(f"record/{c}"))
    recommit(run, r, replace_entries(pack_of(run, r), {f"record/{c}": other}))
    return r, c, "replayed-submission"


def record_other_channel(run: Path, r: int) -> Expected:
    """Re-sign a client's record with another channel's id in it."""
    c = _clients(run, r)[-1]
    recommit(run, r, _edit_record(run, r, c, lambda rec: rec.update(
        channel=hx(sha256(b"another channel")))))
    return r, c, "record-channel"


def records_swapped(run: Path, r: int) -> Expected:
    """Swap two clients' signed records."""
    ids = _clients(run, r)
    if len(ids) < 2:
        raise NotApplicable("needs two submissions in a round")
    a, b = ids[0], ids[1]
    pack = pack_of(run, r)
    recommit(run, r, replace_entries(pack, {f"record/{a}": bytes(pack.raw(f"record/{b}")),
                                            f"record/{b}": bytes(pack.raw(f"record/{a}"))}))
    return r, a, "record-client"


def leaf_swapped(run: Path, r: int) -> Expected:
    """Swap two clients' updates under their (unchanged) records and leaves."""
    ids = _clients(run, r)
    if len(ids) < 2:
        raise NotApplicable("needs two submissions in a round")
    a, b = ids[0], ids[1]
    pack = pack_of(run, r)
    recommit(run, r, replace_entries(pack, {f"update/{a}": bytes(pack.raw(f"update/{b}")),
                                            f"update/{b}": bytes(pack.raw(f"update/{a}"))}))
    return r, a, "record-update"


def signature_forged(run: Path, r: int) -> Expected:
    """Sign a client's record with a key that is not the client's."""
    c = _clients(run, r)[-1]
    recommit(run, r, _edit_record(run, r, c, lambda rec: None,
                                  key=coincurve.PrivateKey(b"\x07" * 32)))
    return r, c, "signature"


def unadmitted_client(run: Path, r: int) -> Expected:
    """Add a well-signed submission from a client never admitted to the channel."""
    pack = pack_of(run, r)
    c0, stranger = _clients(run, r)[0], 10**6
    rec = dict(_json(pack, f"record/{c0}")["record"], client=stranger)
    recommit(run, r, replace_entries(pack, {}, [
        (f"update/{stranger}", bytes(pack.raw(f"update/{c0}"))),
        (f"record/{stranger}", resign(run, rec, stranger))]))
    return r, stranger, "admission"


def base_rewritten(run: Path, r: int) -> Expected:
    """Re-sign a client's record claiming it trained from another model."""
    c = _clients(run, r)[0]
    recommit(run, r, _edit_record(run, r, c, lambda rec: rec.update(
        base_hash=hx(sha256(b"another base")))))
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
    doc = _json(pack, "admitted")
    stranger = coincurve.PrivateKey(b"\x05" * 32).public_key.format().hex()
    if doc["admitted"]:
        c = int(doc["admitted"][0][0])
        doc["admitted"][0][1] = stranger
    else:
        c = _clients(run, r)[0]
        doc["admitted"] = [[c, stranger]]
    recommit(run, r, replace_entries(pack, {"admitted": canonical_json(doc)}))
    return r, c, "admission"


def verdicts_inconsistent(run: Path, r: int) -> Expected:
    """Drop a kept client from the verdict document's accepted list."""
    pack = pack_of(run, r)
    doc = _json(pack, "verdicts")
    if not doc["accepted"]:
        raise NotApplicable(f"round {r} accepted nobody")
    doc["accepted"] = doc["accepted"][1:]
    recommit(run, r, replace_entries(pack, {"verdicts": canonical_json(doc)}))
    return r, None, "verdict-document"


def verdict_rewritten(run: Path, r: int) -> Expected:
    """Colluding committee: a rejected client's verdict rewritten to kept (every hash and
    signature consistent; only the replay can tell)."""
    pack = pack_of(run, r)
    doc = _json(pack, "verdicts")
    bad = [v for v in doc["verdicts"] if not v["kept"] and v["client"] in
           set(pack.clients("update"))]
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


def commitment_from_another_run(other: Path) -> Case:
    """A case that replays run ``other``'s round-r commitment (pack, fields and signature) as
    this run's round r."""

    def case(run: Path, r: int) -> Expected:
        theirs = entries(other)
        if r >= len(theirs):
            raise NotApplicable(f"{other} has no round {r}")
        t = theirs[r]
        src = pack_path(ledger_of(other), unhx(t["pack"]))
        shutil.copyfile(src, pack_path(ledger_of(run), unhx(t["pack"])))
        from ledger.pack import Pack

        pack = Pack.read(ledger_of(run), unhx(t["pack"]))
        recommit(run, r, pack.to_entries(), sign="keep", signers=t["signers"])
        es = entries(run)
        es[r]["signature"] = t["signature"]
        write_entries(run, es)
        from ledger.commitment import g2_eip2537

        e = es[r]
        tx = rebuild_chain(run, {("commit", r): (
            r, unhx(e["global_hash"]), unhx(e["submissions_root"]), unhx(e["verdicts_hash"]),
            unhx(e["admitted_root"]), unhx(e["pack"]), t["signers"],
            g2_eip2537(bytes.fromhex(t["signature"])))})
        es[r]["tx"] = tx.get(r, es[r]["tx"])
        write_entries(run, es)
        return r, None, "committee-signature"

    case.__doc__ = commitment_from_another_run.__doc__
    return case


def commitment_removed(run: Path, r: int) -> Expected:
    """The aggregator re-mines the chain without the last round's commitment."""
    es = entries(run)
    if r != len(es) - 1:
        raise NotApplicable("only the last round's commitment can be left out")
    rebuild_chain(run, drop_after=es[r]["block"] - 1)
    return r, None, "round-on-chain"


def _deploy_with(committee_seed: str | None, source_edit: bool) -> Callable[[Any], bytes]:
    def data(chain: Any) -> bytes:
        from ledger.compile import compile_flchain

        c = compile_flchain()
        bytecode = c.bytecode
        if source_edit:  # the same contract, with one revert message changed
            from ledger.compile import CONTRACT_PATH, _compile

            src = CONTRACT_PATH.read_text().replace('"not aggregator"', '"not the aggregator"')
            bytecode = _compile(src, c.evm_version).bytecode
        m = chain.manifest
        keys = [bytes.fromhex(x["pubkey"]) for x in m["committee"]]
        from ledger.commitment import g1_eip2537

        if committee_seed is not None:
            from ledger.committee import Committee

            keys = [bytes.fromhex(x["pubkey"]) for x in
                    Committee.from_seed(committee_seed, len(keys)).public_info()]
        factory = chain.w3.eth.contract(abi=c.abi, bytecode=bytecode)
        tx = factory.constructor(unhx(m["channel_id"]), [g1_eip2537(k) for k in keys],
                                 m["quorum"], bool(m["onchain_bls"])).build_transaction(
            {"from": chain.aggregator.address, "gas": 10_000_000, "nonce": 0,
             "maxFeePerGas": 10**10, "maxPriorityFeePerGas": 10**9})
        return unhx(tx["data"])

    return data


def contract_code_replaced(run: Path, r: int) -> Expected:
    """The aggregator deploys a contract compiled from an edited source."""
    rebuild_chain(run, deploy=_with_manifest(run, _deploy_with(None, True)))
    return None, None, "contract-code"


def contract_setup_changed(run: Path, r: int) -> Expected:
    """The aggregator deploys the contract with its own committee's keys."""
    if not manifest(run)["committee"]:
        raise NotApplicable("the run has no committee")
    rebuild_chain(run, deploy=_with_manifest(run, _deploy_with("not-the-committee", False)))
    return None, None, "contract-setup"


def _with_manifest(run: Path, fn: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    m = manifest(run)

    def data(chain: Any) -> bytes:
        chain.manifest = m
        return fn(chain)

    return data


#: cases applied at a round (first, middle and last by the study)
CASES: dict[str, Case] = {
    "chain block edited": chain_block_edited,
    "round's block cut from the export": round_cut_from_export,
    "index lines swapped": rounds_swapped,
    "index line removed": index_line_removed,
    "commitment left out of the chain": commitment_removed,
    "pack deleted": pack_deleted,
    "update entry edited": _entry_edited("update/{c}", "update-blob"),
    "record entry edited": _entry_edited("record/{c}", "record-blob"),
    "global model entry edited": _entry_edited("global", "global-blob"),
    "verdict document edited": _entry_edited("verdicts", "verdict-blob"),
    "admission list edited": _entry_edited("admitted", "admission-blob"),
    "index entry edited": index_entry_edited,
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
}


def caught(findings: list[Any], expected: Expected) -> tuple[bool, bool]:
    """(reported at the expected round/client/check, nothing reported at any other round)."""
    r, c, check = expected
    where = {(f.round, f.client, f.check) for f in findings}
    return (r, c, check) in where, {f.round for f in findings} <= {r}


def receipt_for_outsider(run: Path, r: int) -> tuple[Expected, dict[str, Any]]:
    """A member's receipt of round ``r`` presented for a client that did not submit in it."""
    from ledger.proof import receipt

    ids = _clients(run, r)
    outsider = max(ids) + 1
    rec = receipt(run, r, ids[0])
    rec["client"] = outsider
    from ledger.proof import _leaf

    rec["leaf"] = hx(_leaf(outsider, rec))
    return (r, outsider, "inclusion-proof"), rec


#: cases that forge a client's receipt (checked by :func:`ledger.proof.verify_receipt`)
RECEIPT_CASES: dict[str, Callable[[Path, int], tuple[Expected, dict[str, Any]]]] = {
    "proof for a client not in the round": receipt_for_outsider,
}
