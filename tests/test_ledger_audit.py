"""End to end: a run recorded on FLChain, audited clean, then tampered with case by case.

Each tamper case must be reported at the right round (and client, where there is one) and
nowhere else; the untouched run must audit clean.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from eth_account import Account

from ledger.audit import audit_run, main
from ledger.records import canonical_json, sign_record
from ledger.store import BlobStore

ROUNDS = 4


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from simulator.config import build_config
    from simulator.run import run_experiment

    out = tmp_path_factory.mktemp("ledger") / "run"
    cfg = build_config(flat=dict(
        dataset="digits", num_clients=6, clients_per_round=4, rounds=ROUNDS, local_epochs=1,
        partition="iid", backend="local", defense="median", ledger=True, committee=2,
        out=str(out), progress=False, plots=False, seed=3))
    summary = run_experiment(cfg)
    assert summary["ledger"]["gas_per_round"]["submit"] > 0
    return out


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    """A fresh copy of the recorded run to tamper with."""
    dst = tmp_path / "run"
    shutil.copytree(recorded, dst)
    return dst


def _entries(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "ledger/rounds.jsonl").read_text().splitlines()]


def _write_entries(run: Path, entries: list[dict]) -> None:
    (run / "ledger/rounds.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


def _record(run: Path, digest: str) -> dict:
    return json.loads(BlobStore(run / "ledger").get(digest))


def _where(report) -> set[tuple]:
    return {(f.round, f.client, f.check) for f in report.findings}


def test_clean_run_audits_clean(recorded: Path, capsys: pytest.CaptureFixture) -> None:
    report = audit_run(recorded)
    assert report.clean, report.text()
    assert report.rounds == ROUNDS and report.submissions == 4 * ROUNDS
    assert report.gas_per_round is not None and report.gas_per_round > 4 * 50_000
    assert main([str(recorded), "-q"]) == 0
    assert "CLEAN" in capsys.readouterr().out


def test_update_blob_edited(run: Path) -> None:
    sub = _entries(run)[1]["submissions"][0]
    upd = _record(run, sub["record"])["record"]["update_hash"][2:]
    p = run / "ledger/blobs/sha256" / upd
    data = bytearray(p.read_bytes())
    data[-1] ^= 0x01
    p.write_bytes(bytes(data))
    rep = audit_run(run, bls=False)
    assert (1, sub["client"], "update-blob") in _where(rep)
    assert {f.round for f in rep.findings} == {1}


def test_global_blob_replaced(run: Path) -> None:
    e0, e1 = _entries(run)[:2]
    (run / "ledger/blobs/sha256" / e1["global_hash"][2:]).write_bytes(
        (run / "ledger/blobs/sha256" / e0["global_hash"][2:]).read_bytes())
    rep = audit_run(run, bls=False)
    assert _where(rep) == {(1, None, "global-blob")}


def test_signature_forged(run: Path) -> None:
    entries = _entries(run)
    sub = entries[2]["submissions"][1]
    signed = _record(run, sub["record"])
    forged = sign_record(signed["record"], Account.from_key(b"\x07" * 32))
    sub["record"] = BlobStore(run / "ledger").put(canonical_json(forged))
    _write_entries(run, entries)
    rep = audit_run(run, bls=False)
    assert _where(rep) == {(2, sub["client"], "signature")}


def test_submission_replayed_from_earlier_round(run: Path) -> None:
    entries = _entries(run)
    r, c = next((r, s["client"]) for r in range(1, ROUNDS) for s in entries[r]["submissions"]
                if s["client"] in {x["client"] for x in entries[r - 1]["submissions"]})
    old = next(s for s in entries[r - 1]["submissions"] if s["client"] == c)
    for s in entries[r]["submissions"]:
        if s["client"] == c:
            s["record"] = old["record"]
    _write_entries(run, entries)
    rep = audit_run(run, bls=False)
    assert (r, c, "replayed-submission") in _where(rep)
    assert {(f.round, f.client) for f in rep.findings} <= {(r, c), (r, None)}


def test_unregistered_sender(run: Path) -> None:
    entries = _entries(run)
    e = entries[1]
    stranger = Account.from_key(b"\x09" * 32)
    rec = dict(_record(run, e["submissions"][0]["record"])["record"], client=99,
               address=stranger.address)
    digest = BlobStore(run / "ledger").put(canonical_json(sign_record(rec, stranger)))
    e["submissions"].append({"client": 99, "record": digest, "tx": None})
    _write_entries(run, entries)
    rep = audit_run(run, bls=False, replay=False)
    assert (1, 99, "registered-sender") in _where(rep)
    assert {(f.round, f.client) for f in rep.findings} == {(1, 99)}


def _block_records(path: Path) -> list[bytes]:
    data, out, i = path.read_bytes(), [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(data[i:i + 4 + n])
        i += 4 + n
    return out


def _blocks_of_round(run: Path, rnd: int) -> range:
    entries = _entries(run)
    first = entries[rnd - 1]["block"] + 1 if rnd > 0 else 1
    return range(first, entries[rnd]["block"] + 1)


def test_round_deleted_from_export(run: Path) -> None:
    path = run / "ledger/chain/blocks.rlp"
    recs = _block_records(path)
    gone = _blocks_of_round(run, 2)
    first_exported = int(json.loads((run / "ledger/chain/genesis.json").read_text())
                         .get("first_block", 1))
    keep = [r for i, r in enumerate(recs, start=first_exported) if i not in gone]
    path.write_bytes(b"".join(keep))
    rep = audit_run(run, bls=False)
    assert (2, None, "chain-block") in _where(rep)
    assert {f.round for f in rep.findings} == {2}


def test_chain_block_edited(run: Path) -> None:
    import rlp

    path = run / "ledger/chain/blocks.rlp"
    recs = _block_records(path)
    target = _entries(run)[1]["block"]  # the block that finalizes round 1
    header, txs, *rest = rlp.decode(recs[target - 1][4:])
    header = list(header)
    header[12] = b"edited"  # extra_data
    body = rlp.encode([header, txs, *rest])
    recs[target - 1] = len(body).to_bytes(4, "big") + body
    path.write_bytes(b"".join(recs))
    rep = audit_run(run, bls=False)
    assert (1, None, "chain-block") in _where(rep)
    assert {f.round for f in rep.findings} == {1}


def test_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "no recorded run found" in err
