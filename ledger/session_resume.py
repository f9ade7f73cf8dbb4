"""The resume path of a recorder session: the manifest read and its form checked as the audit
checks it, the chain re-imported or reconnected, the index of committed rounds made to agree with
it. Every input is checked before anything changes: a malformed file is one line naming it (and
its line or field), :class:`~ledger.errors.LedgerError`.

A kill -9 can land anywhere, so a resume then drops a torn last record of the append-only files
(``chain/blocks.rlp``, ``rounds.jsonl``; :func:`simulator.run.appendlog.drop_torn_tail`), and
treats the chain as the authority: a round the chain committed but ``rounds.jsonl`` does not list
(the run stopped between the two) is indexed from its ``Committed`` event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ledger.chain import Chain
from ledger.errors import LedgerError
from ledger.records import hx
from ledger.session_start import check_format, connect
from simulator.run.appendlog import drop_torn_tail

__all__ = [
    "check_setup",
    "committed_events",
    "entry_of_event",
    "open_index",
    "open_resumed_chain",
    "resumed_manifest",
]


def resumed_manifest(ledger: Path, seed: int) -> dict[str, Any]:
    """The manifest of the run being resumed, its form checked as the audit checks it
    (:func:`ledger.audit_input.check_manifest`, and the ABI a resume reads): one line naming
    the file and the first malformed field (:class:`LedgerError`), before anything changes;
    and its config must hash to its channel, its account seed be the run's ``seed``'s."""
    from ledger.audit_input import AuditInputError, check_manifest, load_manifest

    try:
        m = load_manifest(ledger.parent)
        check_format(m, ledger)
        check_manifest(ledger / "manifest.json", m, {"abi": (_is_list, "a list")})
    except AuditInputError as exc:
        raise LedgerError(f"cannot resume: {exc}") from None
    from ledger.audit_channel import channel_findings

    for _, _, _, want, found in channel_findings(m, seed):
        raise LedgerError(  # the config or account seed edited: not the channel's any more
            f"cannot resume: {ledger / 'manifest.json'}: its config is not its channel's "
            f"(expected {want}, found {found})"
        )
    return m


def check_setup(chain: Any, contract: Any, m: dict[str, Any], ledger: Path) -> None:
    """Refuse (one line) a manifest whose committee or quorum is not the one the channel's
    contract was deployed with (what the audit reports as ``contract-setup``)."""
    from ledger.commitment import g1_eip2537

    want = {"quorum": m["quorum"], "committee_size": len(m["committee"])}
    try:
        if hx(chain.view(contract, "channel_id")) != m["channel_id"]:
            return  # another channel's contract: open_index says so
        got = {k: chain.view(contract, k) for k in want}
        for i, member in enumerate(m["committee"]):
            want[f"committee_key({i})"] = hx(g1_eip2537(bytes.fromhex(member["pubkey"])))
            got[f"committee_key({i})"] = hx(chain.view(contract, "committee_key", i))
    except Exception as exc:  # noqa: BLE001 - other code at the address, a key of no point
        why = (str(exc).splitlines() or [""])[0]
        raise LedgerError(
            f"cannot resume: the contract at {contract.address} is not this run's (its setup "
            f"cannot be read: {type(exc).__name__}: {why})"
        ) from None
    for key in want:
        if want[key] != got[key]:
            raise LedgerError(
                f"cannot resume: {ledger / 'manifest.json'}: its {key} is {want[key]}, the "
                f"contract's {got[key]} (the manifest is not its channel's)"
            )


def _is_list(v: Any) -> bool:
    return isinstance(v, list)


def open_resumed_chain(
    cfg: Any, seed: str, manifest: dict[str, Any], ledger: Path
) -> tuple[Chain, Any]:
    """The chain of a run being resumed, and the exporter that continues its export (embedded
    devnet; ``None`` for a node)."""
    if manifest.get("backend") == "embedded":
        from ledger.devnet import BLOCKS_FILE, ChainExporter, ChainExportError
        from ledger.devnet_import import import_chain

        drop_torn_tail(ledger / "chain" / BLOCKS_FILE, "records")
        try:
            res = import_chain(ledger / "chain")
        except ChainExportError as exc:
            raise LedgerError(f"cannot resume: {exc}") from None
        if res.error is not None or res.chain is None:
            e = res.error
            why = (
                f"block {e.block_number}: {e.message} (expected {e.expected}, found {e.found})"
                if e is not None
                else "no chain in it"
            )
            raise LedgerError(f"cannot resume: {ledger / 'chain' / BLOCKS_FILE}: {why}")
        return res.chain, ChainExporter(res.chain, ledger / "chain", append=True)
    chain = connect(cfg, seed)
    if not bytes(chain.w3.eth.get_code(manifest["contract"])):
        raise LedgerError(
            f"cannot resume: no contract at {manifest['contract']} on {cfg.ledger.ledger_url}"
        )
    return chain, None


def committed_events(contract: Any, from_round: int = 0) -> dict[int, Any]:
    """The contract's ``Committed`` events (round -> log), from round ``from_round`` on."""
    logs = contract.events.Committed().get_logs(from_block=0)
    return {int(lg["args"]["round"]): lg for lg in logs if int(lg["args"]["round"]) >= from_round}


def entry_of_event(log: Any, ledger: Path | None = None) -> dict[str, Any]:
    """The ``rounds.jsonl`` entry of a committed round, from its ``Committed`` event; the
    counts of submissions and admissions come from the round's pack in ``ledger`` (written
    before the commitment), so the line is the one the recorder would have written."""
    from ledger.commitment import g2_compress_eip2537 as g2_compress
    from ledger.pack import Pack, PackError

    a = log["args"]
    sig = bytes(a["signature"])
    submissions = admitted = None
    if ledger is not None:
        try:
            pack = Pack.read(ledger, bytes(a["pack_id"]))
            submissions = sum(1 for _ in pack.clients("update"))
            admitted = len(json.loads(bytes(pack.raw("admitted")))["admitted"])
        except (PackError, KeyError, ValueError):
            pass  # the audit reports a missing or corrupt pack
    return {
        "round": int(a["round"]),
        "pack": hx(a["pack_id"]),
        "global_hash": hx(a["global_hash"]),
        "submissions_root": hx(a["submissions_root"]),
        "verdicts_hash": hx(a["verdicts_hash"]),
        "admitted_root": hx(a["admitted_root"]),
        "signers": int(a["signers"]),
        "signature": g2_compress(sig).hex() if sig else None,
        "submissions": submissions,
        "admitted": admitted,
        "tx": hx(log["transactionHash"]),
        "block": int(log["blockNumber"]),
    }


def open_index(ledger: Path, contract: Any, channel: str) -> dict[int, dict[str, Any]]:
    """``rounds.jsonl`` made to agree with the chain (round -> entry), after a restart, once
    the contract is known to be this run's: its channel is the manifest's ``channel``, and it
    holds the index's last round with the same transaction (a node restarted since, where
    another run deployed at the same address, is refused before anything is written)."""
    from ledger.audit_input import AuditInputError, read_index

    path = ledger / "rounds.jsonl"
    try:  # every line's form, as the audit checks it, before the torn tail is dropped
        entries = {e["round"]: e for e in read_index(path)} if path.exists() else {}
    except AuditInputError as exc:
        raise LedgerError(f"cannot resume: {exc}") from None
    drop_torn_tail(path)
    other = f"the contract at {contract.address} is not this run's"
    if hx(contract.functions.channel_id().call()) != channel:
        raise LedgerError(f"cannot resume: {other} (another channel; was the node restarted?)")
    if entries:
        last = max(entries)
        log = committed_events(contract, last).get(last)
        if log is None or hx(log["transactionHash"]) != entries[last].get("tx"):
            raise LedgerError(
                f"cannot resume: {other} (it does not hold round {last} as rounds.jsonl "
                "records it; was the node restarted?)"
            )
    on_chain = int(contract.functions.current_round().call())
    if sorted(entries) != list(range(len(entries))) or len(entries) > on_chain:
        raise LedgerError(
            f"cannot resume: rounds.jsonl holds rounds {sorted(entries)[:5]}..., "
            f"the chain {on_chain} rounds"
        )
    missing = range(len(entries), on_chain)
    if missing:  # committed, then stopped before the index line was written
        events = committed_events(contract, len(entries))
        with open(path, "ab") as f:
            for rnd in missing:
                e = entry_of_event(events[rnd], ledger)
                f.write((json.dumps(e, separators=(",", ":")) + "\n").encode())
                entries[rnd] = e
    return entries
