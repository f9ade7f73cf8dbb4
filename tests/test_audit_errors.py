"""``python -m ledger.audit``: a run whose input the checks of :mod:`ledger.audit_input` did not
foresee is still that run's one error line, and the other runs are audited (exit 2). Found by a
tester: a manifest's null ``url`` raised an AttributeError that ended a directory audit."""

from __future__ import annotations

from pathlib import Path

import pytest

import ledger.audit as audit


def test_an_unforeseen_error_is_the_runs_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(run_dir: Path, **_: object) -> None:
        None.startswith("http")  # type: ignore[attr-defined]

    monkeypatch.setattr(audit, "audit_run", boom)
    assert audit._audit_or_error(Path("/runs/a"), jobs=1) == (
        "/runs/a: cannot be audited: AttributeError: 'NoneType' object has no attribute "
        "'startswith'"
    )
