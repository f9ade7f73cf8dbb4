"""What the tamper cases (:mod:`ledger.tamper`) do to a recorded run, as three kinds of attacker:

* someone with write access to the results only: edits files (:func:`entries`, :func:`flip`);
* the aggregator, who also holds the channel's key: rewrites a round's pack and re-commits it,
  re-mining the embedded devnet from genesis with the new transaction (:func:`recommit`,
  :func:`rebuild_chain`); it cannot sign for the committee (``sign="keep"`` keeps the old
  signature, ``"stranger"`` signs with keys that are not the committee's);
* the aggregator with a colluding committee (``sign="committee"``): every hash and signature
  consistent; only the audit's replay can tell.

Client keys are derived from the run's account seed, so every attacker can also re-sign a
client's record (the simulator plays the clients; see :mod:`ledger.records`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eth_utils import keccak

from ledger.commitment import commit_message
from ledger.committee import Committee
from ledger.keys import ClientKeys
from ledger.merkle import admission_leaf, merkle_root, submission_leaf
from ledger.pack import Entry, Pack, pack_path, write_pack
from ledger.records import canonical_json, hx, sign_record, unhx

Expected = tuple[int | None, int | None, str]


class NotApplicable(ValueError):
    """The run does not have what this tamper case needs."""


def ledger_of(run: Path) -> Path:
    return run / "ledger"


def manifest(run: Path) -> dict[str, Any]:
    return json.loads((ledger_of(run) / "manifest.json").read_text())


def entries(run: Path) -> list[dict[str, Any]]:
    return [
        json.loads(x)
        for x in (ledger_of(run) / "rounds.jsonl").read_text().splitlines()
        if x.strip()
    ]


def write_entries(run: Path, es: list[dict[str, Any]]) -> None:
    (ledger_of(run) / "rounds.jsonl").write_text(
        "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in es)
    )


def pack_of(run: Path, rnd: int) -> Pack:
    return Pack.read(ledger_of(run), unhx(entries(run)[rnd]["pack"]))


def pack_json(pack: Pack, name: str) -> Any:
    """Entry ``name`` of a pack, parsed as JSON."""
    return json.loads(bytes(pack.raw(name)))


def clients_of(run: Path, rnd: int) -> list[int]:
    """The clients that submitted in round ``rnd`` (NotApplicable if none did)."""
    ids = list(pack_of(run, rnd).clients("update"))
    if not ids:
        raise NotApplicable(f"round {rnd} has no submissions")
    return ids


def flip(run: Path, rnd: int, name: str) -> None:
    """Flip the last bit of entry ``name`` of round ``rnd``'s pack, in place (the index, and so
    the pack id, stay the same)."""
    pack = pack_of(run, rnd)
    path = pack_path(ledger_of(run), pack.id)
    data = bytearray(path.read_bytes())
    start, size = pack.span(name)
    data[start + size - 1] ^= 0x01
    path.write_bytes(bytes(data))


def replace_entries(
    pack: Pack, changes: dict[str, bytes | None], add: list[tuple[str, bytes]] = ()
) -> list[Entry]:
    """The pack's entries with ``changes`` applied (``None`` removes one), then ``add``."""
    out = []
    for e in pack.to_entries():
        if e.name in changes:
            if changes[e.name] is not None:
                out.append(Entry.of(e.name, changes[e.name]))
        else:
            out.append(e)
    return out + [Entry.of(n, d) for n, d in add]


def resign(run: Path, record: dict[str, Any], client: int) -> bytes:
    """A record signed again with client ``client``'s key (derivable from the account seed)."""
    key, _ = ClientKeys(manifest(run)["account_seed"]).get(client)
    return sign_record(record, key)


def roots_of(pack_entries: list[Entry]) -> dict[str, bytes]:
    """The commitment hashes of a (possibly edited) pack, computed as the recorder does."""
    by = {e.name: b"".join(bytes(p) for p in e.parts) for e in pack_entries}
    dig = {e.name: e.digest for e in pack_entries}
    leaves = {}
    for name in by:
        if name.startswith("record/"):
            rec = json.loads(by[name])["record"]
            c = int(name.split("/")[1])
            leaves[c] = submission_leaf(
                c, unhx(rec["update_hash"]), int(rec["samples"]), unhx(rec["base_hash"]), dig[name]
            )
    adm = {int(c): bytes.fromhex(k) for c, k in json.loads(by["admitted"])["admitted"]}
    return {
        "global_hash": dig["global"],
        "verdicts_hash": dig["verdicts"],
        "submissions_root": merkle_root([leaves[c] for c in sorted(leaves)]),
        "admitted_root": merkle_root([admission_leaf(c, adm[c]) for c in sorted(adm)]),
    }


def recommit(
    run: Path,
    rnd: int,
    pack_entries: list[Entry] | None = None,
    sign: str = "committee",
    override: dict[str, bytes] | None = None,
    signers: int | None = None,
) -> dict[str, Any]:
    """Write round ``rnd``'s new pack, re-commit it on a re-mined chain and index it.

    ``sign``: ``"committee"`` (colluding validators sign the new message), ``"stranger"``
    (validators that are not the committee sign it), ``"keep"`` (the old signature).
    ``override`` replaces commitment hashes after they are computed; ``signers`` the bitmap.
    """
    m, es = manifest(run), entries(run)
    led = ledger_of(run)
    if pack_entries is None:
        pack_entries = pack_of(run, rnd).to_entries()
    pack_id = write_pack(led, rnd, pack_entries)
    f = {**roots_of(pack_entries), "pack_id": pack_id, **(override or {})}
    msg = commit_message(
        int(m["chain_id"]),
        m["contract"],
        unhx(m["channel_id"]),
        rnd,
        f["global_hash"],
        f["submissions_root"],
        f["verdicts_hash"],
        f["admitted_root"],
        f["pack_id"],
    )
    e = es[rnd]
    size = len(m["committee"])
    if sign == "keep" or not size:
        bitmap, sig = e["signers"], bytes.fromhex(e["signature"] or "")
    else:
        seed = "flchain-edge" if sign == "committee" else "not-the-committee"
        att = Committee.from_seed(seed, size).attest(msg)
        bitmap, sig = att.bitmap(), att.signature
    if signers is not None:
        bitmap = signers
    from ledger.commitment import g2_eip2537

    args = (
        rnd,
        f["global_hash"],
        f["submissions_root"],
        f["verdicts_hash"],
        f["admitted_root"],
        f["pack_id"],
        bitmap,
        g2_eip2537(sig) if sig else b"",
    )
    receipt = rebuild_chain(run, {("commit", rnd): args})
    e.update(
        pack=hx(pack_id),
        global_hash=hx(f["global_hash"]),
        submissions_root=hx(f["submissions_root"]),
        verdicts_hash=hx(f["verdicts_hash"]),
        admitted_root=hx(f["admitted_root"]),
        signers=bitmap,
        signature=sig.hex() if sig else None,
        tx=receipt.get(rnd, e["tx"]),
    )
    write_entries(run, es)
    return e


def rebuild_chain(
    run: Path,
    replace: dict[tuple[str, int], Any] | None = None,
    drop_after: int | None = None,
    deploy: Callable[[Any], bytes] | None = None,
) -> dict[int, str]:
    """Re-mine the embedded devnet from genesis as its aggregator: the same transactions, but
    round ``r``'s commitment replaced by ``replace[("commit", r)]`` (the ``commit`` arguments),
    blocks after ``drop_after`` left out, the deployment replaced by ``deploy(chain)`` (its
    raw data); then export it again. Returns the new transaction hash of each replaced round."""
    from ledger.chain import Chain
    from ledger.devnet import ChainExporter
    from ledger.devnet_import import import_chain
    from ledger.pyevm import DeterministicBackend

    led = ledger_of(run)
    if not (led / "chain" / "blocks.rlp").is_file():
        raise NotApplicable("not an embedded-devnet run")
    old = import_chain(led / "chain")
    if old.error is not None or old.chain is None:
        raise NotApplicable(f"the chain export is already broken: {old.error}")
    evm = old.chain.w3.provider.ethereum_tester.backend.chain
    spec = json.loads((led / "chain" / "genesis.json").read_text())
    backend = DeterministicBackend.from_spec(spec)
    chain = Chain.on_devnet(backend, spec)
    agg = chain.aggregator
    m = manifest(run)
    contract = chain.w3.eth.contract(address=m["contract"], abi=m["abi"])
    new_tx: dict[int, str] = {}
    head = evm.get_canonical_head().block_number
    for n in range(1, head + 1):
        if drop_after is not None and n > drop_after:
            break
        raws = []
        for tx in evm.get_canonical_block_by_number(n).transactions:
            raw = tx.encode()
            if n == 1 and deploy is not None:
                raw = _signed(chain, agg, tx, None, deploy(chain))
            elif tx.to == unhx(m["contract"]) and replace:
                rnd = int.from_bytes(tx.data[4:36], "big")
                if ("commit", rnd) in replace:
                    data = contract.encode_abi("commit", args=list(replace[("commit", rnd)]))
                    raw = _signed(chain, agg, tx, m["contract"], unhx(data))
                    new_tx[rnd] = hx(keccak(raw))
            raws.append(raw)
        backend.mine_transactions(raws)
    exporter = ChainExporter(chain, led / "chain")
    exporter.flush()
    exporter.close()
    return new_tx


def _signed(chain: Any, sender: Any, tx: Any, to: str | None, data: bytes) -> bytes:
    """``tx`` with new data, signed again by ``sender`` (same nonce, gas and fees)."""
    d = {
        "to": to or "",
        "data": data,
        "value": tx.value,
        "gas": tx.gas,
        "nonce": tx.nonce,
        "chainId": tx.chain_id,
        "type": 2,
        "maxFeePerGas": tx.max_fee_per_gas,
        "maxPriorityFeePerGas": tx.max_priority_fee_per_gas,
    }
    if to is None:
        del d["to"]
    return bytes(sender.sign_transaction(d).raw_transaction)


__all__ = [
    "Expected",
    "NotApplicable",
    "canonical_json",
    "clients_of",
    "entries",
    "flip",
    "manifest",
    "pack_json",
    "pack_of",
    "rebuild_chain",
    "recommit",
    "replace_entries",
    "resign",
    "roots_of",
    "write_entries",
]
