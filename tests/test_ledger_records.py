"""Signed update records, canonical JSON and accounts of the ledger."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
from eth_utils import keccak

from ledger.records import (
    canonical_json,
    client_account,
    key_hash,
    make_record,
    model_blob,
    recover_signer,
    sign_record,
    update_blob,
)
from ledger.store import decode


def test_canonical_json_is_sorted_compact_and_finite() -> None:
    assert canonical_json({"b": 1, "a": [1.5, math.nan, np.float32(2.0)]}) == \
        b'{"a":[1.5,null,2.0],"b":1}'


def test_update_and_model_blobs_are_canonical_float32() -> None:
    row = np.array([1.0, -2.0, 0.5])
    blob = update_blob(row)
    assert decode(blob)["delta"].dtype == np.float32
    assert blob == update_blob(row.astype(np.float32))  # same values, same bytes
    assert hashlib.sha256(model_blob(row)).digest() != hashlib.sha256(blob).digest()


def _record() -> dict:
    return make_record(b"\x01" * 32, "0x" + "ab" * 20, 3, 7, client_account(0, 7).address,
                       b"\x02" * 32, 42, 2, b"\x03" * 32, math.inf, True)


def test_record_fields() -> None:
    rec = _record()
    assert rec["round"] == 3 and rec["client"] == 7 and rec["samples"] == 42
    assert rec["base_round"] == 2 and rec["alarm"] is True and rec["loss"] is None
    assert rec["update_hash"] == "0x" + "02" * 32
    json.dumps(rec, allow_nan=False)  # plain JSON


def test_signature_recovers_the_client_and_breaks_on_any_change() -> None:
    acct = client_account(0, 7)
    signed = sign_record(_record(), acct)
    assert recover_signer(signed) == acct.address
    changed = {"record": dict(signed["record"], samples=43), "signature": signed["signature"]}
    assert recover_signer(changed) not in (None, acct.address)
    assert recover_signer({"record": signed["record"], "signature": "0x1234"}) is None


def test_accounts_are_seeded_and_key_hash_is_keccak_of_public_key() -> None:
    a, b = client_account(0, 7), client_account(0, 7)
    assert a.address == b.address != client_account(1, 7).address != client_account(0, 8).address
    assert key_hash(a) == keccak(a._key_obj.public_key.to_bytes())
    assert len(key_hash(a)) == 32
