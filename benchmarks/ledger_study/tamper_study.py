"""The tamper study of ``benchmarks/ledger_audit.py``: every case of :mod:`ledger.tamper`, applied
to a copy of a recorded run at its first, middle and last round (run-wide cases once), audited.

A case is *caught* when the audit reports its check at its round and client; the table also
lists any other round the audit flagged (none is expected: one bad round is reported once).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any


def _positions(run: Path) -> list[int]:
    from ledger.tamper_tools import entries

    n = len(entries(run))
    return sorted({0, n // 2, n - 1})


def tamper_study(
    run: Path, out: Path, other: Path | None = None, progress: bool = True
) -> list[dict[str, Any]]:
    """Rows ``{"case", "check", "position", "round", "client", "caught", "other_rounds"}``
    (``caught`` None: not applicable, with ``note``). Each case edits a fresh copy of ``run`` in
    ``out/.tamper``, removed however the study ends (the audit skips hidden directories too)."""
    from tqdm import tqdm

    from ledger.tamper import CASES, RECEIPT_CASES, RUN_CASES
    from ledger.tamper_chain import commitment_from_another_run

    cases: dict[str, Any] = dict(CASES)
    if other is not None:
        cases["commitment replayed from another run"] = commitment_from_another_run(other)
    plan = [(n, c, r) for n, c in cases.items() for r in _positions(run)]
    plan += [(n, c, None) for n, c in RUN_CASES.items()]
    plan += [(n, c, r) for n, c in RECEIPT_CASES.items() for r in _positions(run)]
    copy = out / ".tamper"
    try:  # the copy goes on any exit (Ctrl-C, SIGTERM, an error): left, it audits as findings
        return [
            _one_case(name, case, r, run, copy)
            for name, case, r in tqdm(
                plan, desc="tamper", unit="case", disable=not progress, file=sys.stderr
            )
        ]
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _one_case(name: str, case: Any, r: int | None, run: Path, copy: Path) -> dict[str, Any]:
    """The row of tamper case ``name`` applied at round ``r`` (``None``: run-wide) to a fresh
    copy of ``run`` at ``copy``, audited (a receipt case: its forged receipt verified)."""
    from ledger.audit import audit_run
    from ledger.proof import verify_receipt
    from ledger.tamper import RECEIPT_CASES, caught
    from ledger.tamper_tools import NotApplicable

    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(run, copy)
    row: dict[str, Any] = {"case": name, "position": r}
    try:
        if name in RECEIPT_CASES:
            expected, receipt = case(copy, r)
            found = [_F(*f) for f in verify_receipt(copy, receipt)]
        else:
            expected = case(copy, r if r is not None else 0)
            found = audit_run(copy).findings
    except NotApplicable as exc:
        row.update(check=None, round=None, client=None, caught=None, note=str(exc))
        return row
    at, _ = caught(found, expected)
    row.update(
        check=expected[2],
        round=expected[0],
        client=expected[1],
        caught=at,
        other_rounds=sorted(
            {f.round for f in found} - {expected[0]}, key=lambda x: -1 if x is None else x
        ),
        findings=len(found),
    )
    return row


class _F:
    """A receipt finding with the attributes of :class:`ledger.audit.Finding`."""

    def __init__(self, rnd: int | None, client: int | None, check: str, *_: Any) -> None:
        self.round, self.client, self.check = rnd, client, check


def print_table(rows: list[dict[str, Any]]) -> None:
    """The tamper table: case, where it was applied, the check expected, and the verdict."""
    print(
        "\ntamper case                                  at     check                 "
        "round client  verdict"
    )
    for t in rows:
        pos = "run" if t["position"] is None else f"r{t['position']}"
        if t["caught"] is None:
            print(f"{t['case']:<44} {pos:<6} n/a ({t['note']})")
            continue
        verdict = "caught" if t["caught"] else "MISSED"
        if t["caught"] and t["other_rounds"]:
            verdict += f" (also rounds {t['other_rounds']})"
        c = "-" if t["client"] is None else t["client"]
        rr = "-" if t["round"] is None else t["round"]
        print(f"{t['case']:<44} {pos:<6} {t['check']:<21} {rr:>5} {c:>6}  {verdict}")
    done = [t for t in rows if t["caught"] is not None]
    print(
        f"{sum(t['caught'] for t in done)} of {len(done)} applicable cases caught at their "
        f"round and client; {sum(bool(t['other_rounds']) for t in done)} with findings at "
        "other rounds"
    )
