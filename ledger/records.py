"""Signed update records, accounts and hashes of the FLChain ledger (Majeed & Hong, 2019).

In FLChain each device submits its local update as a transaction signed by its own key, and the
global model of a round is committed by the channel's aggregator. Here every update and global
model is a canonical tensor blob (:mod:`ledger.store`); what goes on chain is its SHA-256. Each
submission is also kept off chain as a *signed update record*: the round, the client, the hashes
of its update and of the model it started from, its sample count and the signals the defense used
(loss, Siren alarm), signed by the client's secp256k1 account (EIP-191 personal message over the
record's canonical JSON). An audit recovers the signer and checks it against the registered
address and the on-chain ``Submitted`` event.

Accounts are derived from the run seed so the same seed gives the same addresses.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_utils import keccak

from ledger.store import canonical_bytes

#: record format version (bump when the fields change)
RECORD_VERSION = 1

#: anvil's and hardhat's first dev account (public test key, funded on their dev chains); the
#: aggregator of a ``--ledger-url`` run when $FEDSENTRY_LEDGER_KEY is not set
DEV_KEY = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def canonical_json(obj: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8; non-finite floats become ``null`` (so the bytes are JSON)."""
    return json.dumps(_finite(obj), sort_keys=True, separators=(",", ":"),
                      allow_nan=False).encode()


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


def model_blob(flat: Any) -> bytes:
    """Canonical bytes of a global model (the flat float32 parameter vector)."""
    if hasattr(flat, "detach"):
        flat = flat.detach().cpu().numpy()
    return canonical_bytes({"global": np.asarray(flat, dtype=np.float32)})


def client_account(seed: int | str, client_id: int) -> LocalAccount:
    """Client ``client_id``'s account: key = sha256(``"flchain-client:{seed}:{id}"``)."""
    return Account.from_key(sha256(f"flchain-client:{seed}:{client_id}".encode()))


def key_hash(account: LocalAccount) -> bytes:
    """keccak256 of the account's uncompressed public key: what ``register`` stores on chain."""
    return keccak(account._key_obj.public_key.to_bytes())  # noqa: SLF001


def make_record(channel: bytes, contract: str, rnd: int, client: int, address: str,
                update_hash: bytes, samples: int, base_round: int, base_hash: bytes,
                loss: float | None, alarm: bool) -> dict[str, Any]:
    """The off-chain update record of one submission (all hashes as hex)."""
    return {"v": RECORD_VERSION, "channel": "0x" + channel.hex(), "contract": contract,
            "round": int(rnd), "client": int(client), "address": address,
            "update_hash": "0x" + update_hash.hex(), "samples": int(samples),
            "base_round": int(base_round), "base_hash": "0x" + base_hash.hex(),
            "loss": None if loss is None or not math.isfinite(loss) else float(loss),
            "alarm": bool(alarm)}


def sign_record(record: dict[str, Any], account: LocalAccount) -> dict[str, Any]:
    """``{"record": ..., "signature": hex}``: EIP-191 signature of the record's canonical JSON."""
    sig = account.sign_message(encode_defunct(primitive=canonical_json(record)))
    return {"record": record, "signature": "0x" + bytes(sig.signature).hex()}


def recover_signer(signed: dict[str, Any]) -> str | None:
    """Address that signed a signed record, or ``None`` if the signature is malformed."""
    try:
        msg = encode_defunct(primitive=canonical_json(signed["record"]))
        return Account.recover_message(msg, signature=bytes.fromhex(
            str(signed["signature"]).removeprefix("0x")))
    except Exception:  # noqa: BLE001 - any malformed signature is simply "no signer"
        return None


def verdict_document(rnd: int, defense: str, defense_params: dict[str, Any],
                     event: dict[str, Any], accepted: list[int]) -> dict[str, Any]:
    """What ``verdict_hash`` commits to: the defense's per-client verdicts and the metrics."""
    keys = ("selected", "participants", "rejected", "dropped", "stale", "verdicts", "accuracy",
            "loss", "train_loss", "attack_success_rate", "alarms", "detection")
    return {"round": int(rnd), "defense": defense, "defense_params": defense_params,
            "accepted": sorted(int(c) for c in accepted),
            **{k: event.get(k) for k in keys}}


def hx(b: bytes) -> str:
    return "0x" + bytes(b).hex()


def unhx(s: str) -> bytes:
    return bytes.fromhex(str(s).removeprefix("0x"))
