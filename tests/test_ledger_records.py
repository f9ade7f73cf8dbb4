"""Signed update records, client keys and canonical JSON of the ledger (v2)."""

from __future__ import annotations

import hashlib
import json
import math

import coincurve
import numpy as np

from ledger.records import (
    RECORD_DOMAIN,
    ClientKeys,
    canonical_json,
    client_secret,
    make_record,
    model_blob,
    recover_key,
    sign_record,
    update_blob,
    update_prefix,
)
from ledger.store import decode


def test_canonical_json_is_sorted_compact_and_finite() -> None:
    assert (
        canonical_json({"b": 1, "a": [1.5, math.nan, np.float32(2.0)]})
        == b'{"a":[1.5,null,2.0],"b":1}'
    )


def test_update_and_model_blobs_are_canonical_float32() -> None:
    row = np.array([1.0, -2.0, 0.5])
    blob = update_blob(row)
    assert decode(blob)["delta"].dtype == np.float32
    assert blob == update_blob(row.astype(np.float32))  # same values, same bytes
    assert blob == update_prefix(3) + np.array([1.0, -2.0, 0.5], "<f4").tobytes()
    assert hashlib.sha256(model_blob(row)).digest() != hashlib.sha256(blob).digest()


def _record() -> dict:
    return make_record(
        b"\x01" * 32,
        "0x" + "ab" * 20,
        31337,
        3,
        7,
        b"\x02" * 32,
        42,
        2,
        b"\x03" * 32,
        math.inf,
        True,
    )


def test_record_fields() -> None:
    rec = _record()
    assert rec["round"] == 3 and rec["client"] == 7 and rec["samples"] == 42
    assert rec["base_round"] == 2 and rec["alarm"] is True and rec["loss"] is None
    assert rec["update_hash"] == "0x" + "02" * 32 and rec["chain_id"] == 31337
    json.dumps(rec, allow_nan=False)  # plain JSON


def test_signed_bytes_are_canonical_and_recover_the_client_key() -> None:
    key, pub = ClientKeys(0).get(7)
    signed = sign_record(_record(), key)
    doc = json.loads(signed)
    assert signed == canonical_json(doc)  # the fast path writes canonical JSON
    # by hand: a recoverable ECDSA signature over sha256(domain || canonical record JSON)
    digest = hashlib.sha256(RECORD_DOMAIN + canonical_json(_record())).digest()
    want = coincurve.PublicKey.from_signature_and_message(
        bytes.fromhex(doc["signature"]), digest, hasher=None
    ).format()
    assert want == pub == recover_key(doc)
    changed = {"record": dict(doc["record"], samples=43), "signature": doc["signature"]}
    assert recover_key(changed) not in (None, pub)
    assert recover_key({"record": doc["record"], "signature": "1234"}) is None


def test_client_keys_are_seeded_cached_and_standard() -> None:
    keys = ClientKeys(0, capacity=2)
    a = keys.get(7)
    assert keys.get(7) is a  # cached
    keys.get(8), keys.get(9)  # 7 is evicted beyond capacity, then derived again, equal
    assert keys.get(7) is not a and keys.get(7)[1] == a[1]
    assert a[1] == coincurve.PrivateKey(client_secret(0, 7)).public_key.format()
    assert client_secret(0, 7) == hashlib.sha256(b"flchain-client:0:7").digest()
    assert a[1] != ClientKeys(1).get(7)[1] != ClientKeys(0).get(8)[1]
