"""Signed update records, client keys and canonical JSON of the ledger (v2)."""

from __future__ import annotations

import hashlib
import json
import math

import coincurve
import numpy as np

from ledger.keys import ClientKeys, client_secret
from ledger.records import (
    RECORD_DOMAIN,
    canonical_json,
    make_record,
    model_blob,
    record_body,
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


def test_record_body_writes_the_canonical_json_of_make_record() -> None:
    """The direct writer of a record's JSON gives exactly canonical_json(make_record(...)):
    the bytes a client signs and an audit re-derives from the parsed record."""
    contract = "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01"
    cases = [
        # round, client, samples, base round, loss, alarm
        (0, 0, 1, 0, 0.1 + 0.2, False),  # 0.30000000000000004: every digit of the repr
        (3, 7, 42, 2, math.inf, True),  # non-finite loss -> null
        (12, 2**40 + 1, 600, 9, float(np.float32(2.3125)), False),
        (5, 999_999, 16, 5, None, True),
        (1, 12, 8, 0, -1.5e-07, False),  # a float repr with an exponent
    ]
    for rnd, client, samples, base, loss, alarm in cases:
        args = (rnd, client, b"\x02" * 32, samples, base, b"\x03" * 32, loss, alarm)
        want = canonical_json(make_record(b"\x01" * 32, contract, 31337, *args))
        assert record_body("0x" + "01" * 32, contract, 31337, *args) == want
    by_hand = (
        b'{"alarm":false,"base_hash":"0x' + b"03" * 32 + b'","base_round":0,"chain_id":5,'
        b'"channel":"0x' + b"01" * 32 + b'","client":12,"contract":"0xab","loss":-1.5e-07,'
        b'"round":1,"samples":8,"update_hash":"0x' + b"02" * 32 + b'","v":2}'
    )
    assert record_body("0x" + "01" * 32, "0xab", 5, *cases[4][:2], b"\x02" * 32,
                       *cases[4][2:4], b"\x03" * 32, *cases[4][4:]) == by_hand  # fmt: skip
    key, pub = ClientKeys(0).get(7)
    assert sign_record(record_body("0x" + "01" * 32, contract, 1, 3, 7, b"\x02" * 32, 42, 2,
                                   b"\x03" * 32, None, True), key) == sign_record(
        make_record(b"\x01" * 32, contract, 1, 3, 7, b"\x02" * 32, 42, 2, b"\x03" * 32,
                    None, True), key)  # fmt: skip
    for bad in ('0x"ab', "0x\\n", "0xé1"):
        try:
            record_body("0x01", bad, 1, 0, 0, b"", 1, 0, b"", None, False)
        except ValueError as exc:
            assert "not plain 0x hex" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_prefetched_keys_are_the_derived_ones_and_counted_once() -> None:
    keys = ClientKeys(0, capacity=3)
    assert keys.prefetch([4, 5]) == 2 and keys.prefetch([5, 6]) == 1
    k5 = keys.get(5)
    assert k5[1] == ClientKeys(0).get(5)[1]  # the same key as derived on demand
    assert keys.prefetch(range(10, 20)) == 3  # only the last `capacity` ids are kept
    assert keys.prefetch([17, 18, 19]) == 0
