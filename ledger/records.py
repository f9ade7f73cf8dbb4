"""Signed update records, client keys and hashes of the FLChain ledger (Majeed & Hong, 2019).

In FLChain each device signs its local update with its own key and the channel's aggregator
commits the round. Here every update and global model is a canonical tensor blob
(:mod:`ledger.store`); a round's commitment carries hashes and Merkle roots of them. Each
submission is kept off chain as a *signed update record*: the round, the client, the hashes of its
update and of the model it started from, its sample count and the signals the defense used (loss,
Siren alarm), signed by the client's secp256k1 key (a recoverable ECDSA signature over
``sha256(RECORD_DOMAIN || canonical JSON)``, made with coincurve, libsecp256k1's binding). An
audit recovers the public key from the signature and compares it with the key the client was
admitted with (:func:`ledger.merkle.admission_leaf`).

Departure from FLChain: devices there send their own transactions; here clients send none and need
no funding (ledger v2: one transaction per round). A client's signature and its leaf in the
round's Merkle tree (with its proof against the on-chain root) are its tamper evidence.

Client keys (:mod:`ledger.keys`) are derived from the run seed
(``sha256("flchain-client:{seed}:{id}")``) so the same seed gives the same ledger: the simulator
plays every client, so anyone holding the seed can sign as a client. The signatures prove that a
record was not altered after its client signed it; they do not hide a simulator that lies about its
own clients (the committee's re-derivation and the audit's replay cover that).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import coincurve
import numpy as np

from ledger.store import canonical_bytes

#: record format version (bump when the fields change)
RECORD_VERSION = 2
#: prefix of the bytes a client signs (domain separation from any other use of its key)
RECORD_DOMAIN = b"FLCHAIN-RECORD-v2\x00"

#: anvil's and hardhat's first dev account (public test key, funded on their dev chains); the
#: aggregator of a ``--ledger-url`` run when $FEDSENTRY_LEDGER_KEY is not set
DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8; non-finite floats become ``null`` (so the bytes are JSON)."""
    try:  # the common case (no NaN/Inf, no numpy scalars) without walking the object
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except (ValueError, TypeError):
        return json.dumps(
            _finite(obj), sort_keys=True, separators=(",", ":"), allow_nan=False
        ).encode()


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if isinstance(obj, np.generic):
        return _finite(obj.item())
    return obj


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def update_blob(row: Any) -> bytes:
    """Canonical bytes of one client's update (the flat float32 delta)."""
    return canonical_bytes({"delta": np.asarray(row, dtype=np.float32)})


def extras_blob(extras: Any) -> bytes:
    """The bytes after a row in its update entry: the named extras the client sent beside its
    row (SCAFFOLD's control-variate change, FedAF's class logits), as one canonical tensor blob;
    empty without extras, so a run whose clients send none records exactly the row."""
    return canonical_bytes(extras) if extras else b""


def update_prefix(size: int) -> bytes:
    """The bytes before the values in :func:`update_blob` of a row of ``size`` entries (the same
    for every row of a run: hash it once, then only the values)."""
    blob = update_blob(np.zeros(size, np.float32))
    return blob[: len(blob) - 4 * size]


def model_blob(flat: Any) -> bytes:
    """Canonical bytes of a global model (the flat float32 parameter vector)."""
    if hasattr(flat, "detach"):
        flat = flat.detach().cpu().numpy()
    return canonical_bytes({"global": np.asarray(flat, dtype=np.float32)})


def make_record(
    channel: bytes,
    contract: str,
    chain_id: int,
    rnd: int,
    client: int,
    update_hash: bytes,
    samples: int,
    base_round: int,
    base_hash: bytes,
    loss: float | None,
    alarm: bool,
) -> dict[str, Any]:
    """The off-chain update record of one submission (all hashes as ``0x`` hex)."""
    return {
        "v": RECORD_VERSION,
        "channel": "0x" + channel.hex(),
        "contract": contract,
        "chain_id": int(chain_id),
        "round": int(rnd),
        "client": int(client),
        "update_hash": "0x" + update_hash.hex(),
        "samples": int(samples),
        "base_round": int(base_round),
        "base_hash": "0x" + base_hash.hex(),
        "loss": None if loss is None or not math.isfinite(loss) else float(loss),
        "alarm": bool(alarm),
    }


def _record_json(record: dict[str, Any]) -> bytes:
    """Canonical JSON of a record from :func:`make_record` (flat, every float finite: plain
    ``json.dumps`` gives the canonical bytes; other dicts go through :func:`canonical_json`)."""
    if all(
        isinstance(v, str | int | bool | None) or (isinstance(v, float) and math.isfinite(v))
        for v in record.values()
    ):
        return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return canonical_json(record)


def record_body(
    channel_hex: str,
    contract: str,
    chain_id: int,
    rnd: int,
    client: int,
    update_hash: bytes,
    samples: int,
    base_round: int,
    base_hash: bytes,
    loss: float | None,
    alarm: bool,
) -> bytes:
    """The canonical JSON of :func:`make_record`'s record, written directly: the same bytes as
    ``_record_json(make_record(...))`` (keys in sorted order, floats as ``repr``, no escapes:
    every string is hex or a hex address), ~1 us instead of ~9 (a 1,000-client round signs
    1,000 records). ``channel_hex`` is the channel id as ``0x`` hex and ``contract`` a ``0x``
    address: a string JSON would escape raises ``ValueError``."""
    for s in (channel_hex, contract):  # hex: nothing JSON would escape
        if not (s.isascii() and s.isalnum()):
            raise ValueError(f"{s!r} is not plain 0x hex")
    lo = "null" if loss is None or not math.isfinite(loss) else repr(float(loss))
    return (
        f'{{"alarm":{"true" if alarm else "false"},"base_hash":"0x{base_hash.hex()}",'
        f'"base_round":{int(base_round)},"chain_id":{int(chain_id)},"channel":"{channel_hex}",'
        f'"client":{int(client)},"contract":"{contract}","loss":{lo},"round":{int(rnd)},'
        f'"samples":{int(samples)},"update_hash":"0x{update_hash.hex()}",'
        f'"v":{RECORD_VERSION}}}'
    ).encode()


def record_digest(record: dict[str, Any]) -> bytes:
    """What a client signs: sha256(:data:`RECORD_DOMAIN` || canonical JSON of the record)."""
    return sha256(RECORD_DOMAIN + _record_json(record))


def sign_record(record: dict[str, Any] | bytes, key: coincurve.PrivateKey) -> bytes:
    """Canonical JSON bytes of ``{"record": ..., "signature": hex}`` (65-byte recoverable
    ECDSA signature over :func:`record_digest`); ``record`` is a record dict or its canonical
    JSON (:func:`record_body`)."""
    body = record if isinstance(record, bytes) else _record_json(record)
    sig = key.sign_recoverable(sha256(RECORD_DOMAIN + body), hasher=None)
    return b'{"record":' + body + b',"signature":"' + sig.hex().encode() + b'"}'


def recover_key(signed: dict[str, Any]) -> bytes | None:
    """Compressed public key that signed a signed record, or ``None`` if the signature is
    malformed (never raises)."""
    try:
        sig = bytes.fromhex(str(signed["signature"]))
        pub = coincurve.PublicKey.from_signature_and_message(
            sig, record_digest(signed["record"]), hasher=None
        )
        return pub.format(compressed=True)
    except Exception:  # noqa: BLE001 - any malformed signature is simply "no signer"
        return None


def verdict_document(
    rnd: int,
    defense: str,
    defense_params: dict[str, Any],
    event: dict[str, Any],
    accepted: list[int],
) -> dict[str, Any]:
    """What ``verdicts_hash`` commits to: the defense's per-client verdicts and the metrics."""
    keys = (
        "selected",
        "participants",
        "rejected",
        "dropped",
        "stale",
        "verdicts",
        "accuracy",
        "loss",
        "train_loss",
        "attack_success_rate",
        "alarms",
        "detection",
    )
    return {
        "round": int(rnd),
        "defense": defense,
        "defense_params": defense_params,
        "accepted": sorted(int(c) for c in accepted),
        **{k: event.get(k) for k in keys},
    }


#: what the channel id leaves out of a run's config: where results go and are recorded (the
#: ``output`` and ``ledger`` sections), and the execution fields a resume may change because
#: they change no result (the number of actors, the Ray cluster's address)
UNHASHED: dict[str, tuple[str, ...] | None] = {
    "output": None,
    "ledger": None,
    "execution": ("num_actors", "ray_address"),
}


def channel_of(config: dict[str, Any]) -> bytes:
    """The channel (experiment / global model) id of a config as :meth:`Config.to_dict` gives
    it: the SHA-256 of its canonical JSON less :data:`UNHASHED`, so the same experiment is the
    same channel wherever it is written and on however many actors it trains."""
    kept: dict[str, Any] = {}
    for section, fields in config.items():
        if section not in UNHASHED:
            kept[section] = fields
        elif UNHASHED[section] is not None and isinstance(fields, dict):
            kept[section] = {k: v for k, v in fields.items() if k not in UNHASHED[section]}
    return sha256(canonical_json(kept))


def hx(b: bytes) -> str:
    return "0x" + bytes(b).hex()


def unhx(s: str) -> bytes:
    return bytes.fromhex(str(s).removeprefix("0x"))
