"""``python -m ledger.proof RUN_DIR --round R --client C``: a client's receipt for a round.

A client's tamper evidence in ledger v2 is its submission leaf and the leaf's Merkle proof against
the submissions root its round committed on chain (:mod:`ledger.merkle`). :func:`receipt` builds
that receipt from a recorded run; :func:`verify_receipt` checks one against the chain (the
embedded devnet's export re-imported with full validation, or the node), without trusting the
run's files: ``--verify FILE`` checks a receipt a client kept, and everything its root rests
on (:mod:`ledger.proof_verify`). Exit status: 0 valid, 1 invalid (a well-formed receipt whose
leaf or proof does not lead to the committed root, or a failed check of the chain it rests on,
each printed with its check), 2 bad input, a malformed receipt included (:func:`check_receipt`),
and a run whose chain cannot be read or verified.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from ledger.audit_checks import RunAudit
from ledger.audit_input import AuditInputError
from ledger.merkle import merkle_proof, submission_leaf
from ledger.pack import Pack, PackError
from ledger.records import hx, unhx

Finding = tuple[int | None, int | None, str, Any, Any]

#: a receipt's hashes as :func:`receipt` prints them: lowercase 0x-hex of 32 bytes
_HEX32 = re.compile(r"0x[0-9a-f]{64}")
_HASH = "lowercase 0x-hex of 32 bytes (as printed)"
_U64 = 2**64


def receipt(run_dir: str | Path, rnd: int, client: int) -> dict[str, Any]:
    """Client ``client``'s receipt for round ``rnd``: its leaf's fields, the leaf and its proof
    (``ValueError`` if the client did not submit in that round)."""
    audit = RunAudit(Path(run_dir))
    entry = next((e for e in audit.entries if int(e["round"]) == rnd), None)
    if entry is None:
        have = sorted(int(e["round"]) for e in audit.entries)
        held = f"rounds {have[0]} to {have[-1]}" if have else "no round yet"
        raise ValueError(f"round {rnd} is not in {run_dir}: its ledger records {held}")
    pack = Pack.read(audit.dir, unhx(entry["pack"]))
    fields, leaves = {}, {}
    for c in pack.clients("record"):
        rec = json.loads(bytes(pack.raw(f"record/{c}")))["record"]
        f = {
            "update_hash": rec["update_hash"],
            "samples": int(rec["samples"]),
            "base_hash": rec["base_hash"],
            "record_hash": hx(pack.digest(f"record/{c}")),
        }
        fields[c] = f
        leaves[c] = receipt_leaf(c, f)
    if client not in fields:
        raise ValueError(f"client {client} did not submit in round {rnd}")
    order = sorted(leaves)
    proof = merkle_proof([leaves[c] for c in order], order.index(client))
    return {
        "run": str(run_dir),
        "round": rnd,
        "client": client,
        **fields[client],
        "leaf": hx(leaves[client]),
        "proof": [[hx(s), left] for s, left in proof],
    }


def receipt_leaf(client: int, f: dict[str, Any]) -> bytes:
    """The submission leaf of ``client`` from a receipt's fields (``update_hash``, ``samples``,
    ``base_hash``, ``record_hash``): what the round's submissions root commits to."""
    if type(f["samples"]) is not int:  # as printed: a coerced 164.9 or "164" is no receipt's
        raise ValueError(f"samples {f['samples']!r} is not an integer")
    return submission_leaf(
        client,
        unhx(f["update_hash"]),
        f["samples"],
        unhx(f["base_hash"]),
        unhx(f["record_hash"]),
    )


def verify_receipt(
    run_dir: str | Path, rec: dict[str, Any], ledger_url: str | None = None
) -> list[Finding]:
    """Findings if ``rec`` does not prove its client's submission against the submissions root
    committed on chain for its round, or if what that root rests on fails (the channel, the
    chain, the contract's code and setup, the committee's keys, the round's quorum signature:
    :mod:`ledger.proof_verify`), each naming its check; ``[]`` if it does.

    Raises
    ------
    ValueError
        ``rec`` is not a well-formed receipt (:func:`check_receipt`), before the chain is read.
    AuditInputError
        The run or its chain cannot be read (or ``ledger_url`` is given for a run recorded on
        the embedded devnet, or the node's contract at the run's address is another channel's).
    """
    check_receipt(rec)  # a malformed receipt is bad input (exit 2), not a failed proof
    from ledger.proof_verify import verify_against_chain

    leaf = receipt_leaf(rec["client"], rec)
    return verify_against_chain(run_dir, rec, leaf, ledger_url)


def check_receipt(rec: dict[str, Any]) -> None:
    """Check the form of the receipt ``rec`` as :func:`receipt` prints it, before any value is
    judged: ``round`` an integer, ``client`` and ``samples`` integers in ``[0, 2**64)``,
    ``update_hash``, ``base_hash``, ``record_hash`` and ``leaf`` lowercase 0x-hex of 32 bytes,
    ``proof`` a list of ``[hash, direction]`` pairs (direction a JSON boolean). ``run`` names
    the run it came from and is not read.

    Raises
    ------
    ValueError
        One line naming the first malformed field: ``not a receipt: its 'proof' is missing``.
    """

    def bad(key: str, value: Any, want: str) -> ValueError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return ValueError(f"not a receipt: its {key} is {shown}, not {want}")

    for key in ("round", "client", "samples", "update_hash", "base_hash", "record_hash", "leaf"):
        if key not in rec:
            raise ValueError(f"not a receipt: its {key!r} is missing")
        v = rec[key]
        if key in ("round", "client", "samples"):
            if type(v) is not int:  # as printed: a coerced 164.9, "164" or true is no receipt's
                raise bad(repr(key), v, "an integer")
            if key != "round" and not 0 <= v < _U64:
                raise bad(repr(key), v, "an integer from 0 to 2**64 - 1")
        elif not (isinstance(v, str) and _HEX32.fullmatch(v)):
            raise bad(repr(key), v, _HASH)
    if "proof" not in rec:
        raise ValueError("not a receipt: its 'proof' is missing")
    if not isinstance(rec["proof"], list):
        raise bad("'proof'", rec["proof"], "a list of [hash, direction] pairs")
    for i, step in enumerate(rec["proof"]):
        if not (isinstance(step, list) and len(step) == 2):
            raise bad(f"'proof'[{i}]", step, "a [hash, direction] pair")
        if not (isinstance(step[0], str) and _HEX32.fullmatch(step[0])):
            raise bad(f"'proof'[{i}][0]", step[0], _HASH)
        if type(step[1]) is not bool:  # 0, 1 or "false" are no JSON booleans
            raise bad(f"'proof'[{i}][1]", step[1], "a JSON boolean (true or false)")


def read_receipt(path: str) -> dict[str, Any]:
    """The receipt in the file ``path`` (a JSON object); ``ValueError`` in one line naming the
    file when it cannot be read, is not JSON or is not an object."""
    try:
        rec = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"--verify {path}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"--verify {path}: not JSON ({str(exc).splitlines()[0]})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"--verify {path}: not a receipt (a JSON {type(rec).__name__})")
    return rec


def main(argv: list[str] | None = None) -> int:
    from simulator.cli import OneLineParser

    p = OneLineParser(
        prog="python -m ledger.proof",
        description="A client's receipt for a round of a run recorded with --ledger (its leaf "
        "and Merkle proof: --round R --client C, printed as JSON), or a kept receipt checked "
        "against the chain (--verify FILE: the contract's code and setup, the channel, the "
        "round's quorum signature and the proof). Exit 0 valid, 1 invalid, 2 bad input.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run recorded with --ledger")
    p.add_argument("--round", type=int, default=None, help="the round (with --client)")
    p.add_argument("--client", type=int, default=None, help="the client (with --round)")
    p.add_argument(
        "--verify",
        metavar="FILE",
        default=None,
        help="check this receipt (JSON, as printed) against the chain instead",
    )
    p.add_argument(
        "--ledger-url", default=None, help="with --verify: read the chain from this node"
    )
    args = p.parse_args(argv)
    try:
        if args.verify == "":
            p.error("--verify: the path is empty (give the receipt's file)")
        if args.verify is not None:
            found = verify_receipt(args.run_dir, read_receipt(args.verify), args.ledger_url)
            for f in found:
                r, c = ("-" if x is None else x for x in f[:2])
                print(f"round {r} client {c} {f[2]}: expected {f[3]}, found {f[4]}")
            print("VALID" if not found else "INVALID")
            return 1 if found else 0
        if args.round is None or args.client is None:
            p.error("give --round and --client, or --verify FILE")
        if args.ledger_url is not None:  # a receipt is built from the run's own files
            p.error("--ledger-url applies to --verify (a receipt is made from the run's files)")
        print(json.dumps(receipt(args.run_dir, args.round, args.client), indent=1))
    except (AuditInputError, PackError, ValueError, OSError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
