"""What the audit reads from a run directory before it checks anything: ``ledger/manifest.json``
and ``ledger/rounds.jsonl``, their form checked where they are read.

A value of the wrong form (a manifest that is no JSON object, a field missing, a round given as
``"1"``, ``1.0`` or ``true``, a hash that is not ``0x``-hex of 32 bytes, an index line with a
field no recorder writes) makes the run impossible to audit: :class:`AuditInputError`, one line
naming the file (and line) and the field, exit status 2. A value of the right form that is
wrong (another transaction hash, 11 submissions where the pack holds 10) is a finding of
:mod:`ledger.audit_checks`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledger.errors import FORMAT

__all__ = [
    "INDEX_FIELDS",
    "AuditInputError",
    "check_manifest",
    "load_manifest",
    "read_index",
    "read_manifest",
]


class AuditInputError(ValueError):
    """The run directory or the node cannot be audited at all (exit status 2)."""


_HEX32 = re.compile(r"0x[0-9a-f]{64}")
_HEX = re.compile(r"(?:[0-9a-f]{2})*")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_URL = re.compile(r"https?://\S+")


def _count(v: Any) -> bool:
    return type(v) is int and v >= 0  # a coerced "1", 1.0 or true is no recorder's


def _hash(v: Any) -> bool:
    return isinstance(v, str) and _HEX32.fullmatch(v) is not None


def _hex(v: Any) -> bool:
    return isinstance(v, str) and _HEX.fullmatch(v) is not None


#: a form: (test, what a value must be, said in the error line)
Form = tuple[Callable[[Any], bool], str]
COUNT: Form = (_count, "an integer >= 0")
HASH: Form = (_hash, "lowercase 0x-hex of 32 bytes")
ADDRESS: Form = (lambda v: isinstance(v, str) and _ADDRESS.fullmatch(v) is not None, "an address")
TEXT: Form = (lambda v: isinstance(v, str), "a string")
OBJECT: Form = (lambda v: isinstance(v, dict), "a JSON object")

#: every field of a ``rounds.jsonl`` line and its form (:func:`ledger.round_commit.index_entry`)
INDEX_FIELDS: dict[str, Form] = {
    "round": COUNT,
    "pack": HASH,
    "global_hash": HASH,
    "submissions_root": HASH,
    "verdicts_hash": HASH,
    "admitted_root": HASH,
    "signers": COUNT,
    "signature": (lambda v: v is None or _hex(v), "lowercase hex or null"),
    "submissions": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "admitted": (lambda v: v is None or _count(v), "an integer >= 0 or null"),
    "tx": HASH,
    "block": COUNT,
}

#: the fields of ``manifest.json`` the audit reads, and their form
#: (:func:`ledger.session_start.fresh_manifest`); others (the ABI, the genesis) are not read
MANIFEST_FIELDS: dict[str, Form] = {
    "config": OBJECT,
    "channel_id": HASH,
    "contract": ADDRESS,
    "chain_id": COUNT,
    "backend": (lambda v: v in ("embedded", "rpc"), "'embedded' or 'rpc'"),
    "url": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "compiler": OBJECT,
    "aggregator": ADDRESS,
    "account_seed": TEXT,
    "initial_global_hash": HASH,
    "initial_pack": HASH,
    "committee": (lambda v: isinstance(v, list), "a list"),
    "quorum": COUNT,
    "onchain_bls": (lambda v: type(v) is bool, "true or false"),
}
#: the fields of a committee member (``manifest["committee"][i]``)
MEMBER_FIELDS: dict[str, Form] = {
    "index": COUNT,
    "pubkey": (lambda v: _hex(v) and len(v) == 96, "hex of 48 bytes (a BLS public key)"),
    "pop": (lambda v: _hex(v) and len(v) == 192, "hex of 96 bytes (a BLS signature)"),
}


def _shown(v: Any) -> str:
    """``v`` as the JSON file holds it (``"1"``, ``1.0``, ``true``), cut to 80 characters."""
    s = json.dumps(v)
    return s if len(s) <= 80 else s[:77] + "..."


def _check(where: str, doc: dict[str, Any], fields: dict[str, Form], prefix: str = "") -> None:
    """Raise :class:`AuditInputError` for the first field of ``fields`` that ``doc`` lacks
    or holds in another form (``where``: the file, and line, the error line names)."""
    for key, (ok, want) in fields.items():
        if key not in doc:
            raise AuditInputError(f"{where}: its {prefix}{key!r} is missing")
        if not ok(doc[key]):
            raise AuditInputError(f"{where}: its {prefix}{key!r} is {_shown(doc[key])}, not {want}")


def load_manifest(run_dir: Path) -> dict[str, Any]:
    """``run_dir/ledger/manifest.json`` as a JSON object, its fields not yet checked
    (:class:`AuditInputError`, naming the file, when it is missing, unreadable or no object)."""
    path = run_dir / "ledger" / "manifest.json"
    if not path.is_file():
        raise AuditInputError(f"{run_dir}: no ledger/manifest.json (not a --ledger run)")
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AuditInputError(f"{path}: unreadable: {str(exc).splitlines()[0]}") from None
    if not isinstance(m, dict):
        raise AuditInputError(f"{path}: not a manifest (a JSON {type(m).__name__})")
    return m


def check_manifest(path: Path, m: dict[str, Any], more: dict[str, Form] | None = None) -> None:
    """Check the form of every field of the manifest ``m`` (read from ``path``) that the audit
    reads (:data:`MANIFEST_FIELDS`, the committee's members, a node's URL), and those of
    ``more`` (a resume also reads the ABI): :class:`AuditInputError` naming the first."""
    _check(str(path), m, {**MANIFEST_FIELDS, **(more or {})})
    if m["backend"] == "rpc" and not _URL.fullmatch(m["url"] or ""):  # the node it was on
        raise AuditInputError(
            f"{path}: its 'url' is {_shown(m['url'])}, not an http(s):// URL (the run was "
            "recorded on a node: 'backend' is \"rpc\")"
        )
    _check(str(path), m["compiler"], {"runtime_sha256": (_hex, "hex")}, "compiler.")
    for i, member in enumerate(m["committee"]):
        if not isinstance(member, dict):
            raise AuditInputError(
                f"{path}: its 'committee'[{i}] is {_shown(member)}, not an object"
            )
        _check(str(path), member, MEMBER_FIELDS, f"committee[{i}].")


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """``run_dir/ledger/manifest.json``, its form checked (format, then every field the audit
    reads: see :data:`MANIFEST_FIELDS`).

    Raises
    ------
    AuditInputError
        One line naming the file and the first missing or malformed field.
    """
    m = load_manifest(run_dir)
    if m.get("format") != FORMAT:
        raise AuditInputError(
            f"{run_dir}: ledger format {m.get('format')!r}; "
            f"this audit reads {FORMAT!r} (record the run again)"
        )
    check_manifest(run_dir / "ledger" / "manifest.json", m)
    return m


def read_index(path: Path) -> list[dict[str, Any]]:
    """The lines of ``rounds.jsonl`` at ``path``, each a JSON object with exactly the fields
    of :data:`INDEX_FIELDS` in their form. A torn last line (no newline: a kill mid-write) is
    left out, as a resume drops it; blank lines are skipped.

    Raises
    ------
    AuditInputError
        One line naming the file, the line and the field (or the unknown field).
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"{path}: unreadable ({exc.strerror})") from None
    out = []
    for n, raw in enumerate(data.split(b"\n")[:-1], start=1):  # [-1]: "" or the torn tail
        if not raw.strip():
            continue
        where = f"{path} line {n}"
        try:
            e = json.loads(raw)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise AuditInputError(f"{where}: not JSON ({str(exc).splitlines()[0]})") from None
        if not isinstance(e, dict):
            raise AuditInputError(f"{where}: not an index line (a JSON {type(e).__name__})")
        _check(where, e, INDEX_FIELDS)
        extra = sorted(set(e) - set(INDEX_FIELDS))
        if extra:
            raise AuditInputError(
                f"{where}: an unknown field {extra[0]!r} (a line holds {', '.join(INDEX_FIELDS)})"
            )
        out.append(e)
    return out
