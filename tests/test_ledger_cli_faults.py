"""The ledger tools' command lines on bad input, found by a probe of a small recorded run.

``python -m ledger.proof``, ``python -m ledger.audit`` and ``benchmarks/ledger_audit.py``: bad
input is one ``error:`` line and exit 2 (never a finding, never silently ignored), a tampered
value exit 1, and one bad run among several does not stop the audit of the others.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ledger.audit import main as audit_main  # noqa: E402
from ledger.audit_find import find_runs  # noqa: E402
from ledger.proof import main as proof_main  # noqa: E402
from ledger.proof import receipt  # noqa: E402
from tests.test_ledger_audit import ROUNDS, _record  # noqa: E402

#: nothing listens there
DEAD = "http://127.0.0.1:1"
HASH = "not lowercase 0x-hex of 32 bytes (as printed)"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of tests/test_ledger_audit.py's recording (8 clients, 6 a round, 4 rounds)."""
    return _record(tmp_path_factory.mktemp("faults") / "run", 3)


@pytest.fixture()
def run(recorded: Path, tmp_path: Path) -> Path:
    """A fresh copy of the recorded run to edit."""
    return Path(shutil.copytree(recorded, tmp_path / "run"))


@pytest.fixture()
def good(recorded: Path) -> dict[str, Any]:
    """A receipt of round 1 (six submissions: a proof of three steps)."""
    from ledger.tamper_tools import pack_of

    return receipt(recorded, 1, next(pack_of(recorded, 1).clients("update")))


def _verify(run: Path, path: Path, doc: dict[str, Any], *extra: str) -> int:
    path.write_text(json.dumps(doc))
    return proof_main([str(run), "--verify", str(path), *extra])


def test_ledger_url_is_refused_for_a_run_on_the_embedded_devnet(
    run: Path, good: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # until now the node was never asked: VALID and CLEAN (exit 0) from the run's own export
    line = (
        f"error: {run} was recorded on the embedded devnet (its chain is in {run}/ledger/chain); "
        "--ledger-url applies to runs recorded on a node\n"
    )
    assert audit_main([str(run), "--ledger-url", DEAD, "-q"]) == 2
    assert capsys.readouterr().err == line
    assert _verify(run, tmp_path / "r.json", good, "--ledger-url", DEAD) == 2
    assert capsys.readouterr() == ("", line)
    assert _verify(run, tmp_path / "r.json", good) == 0
    assert capsys.readouterr().out == "VALID\n"
    # making a receipt reads the run's files: a node there was ignored
    with pytest.raises(SystemExit) as stop:
        proof_main([str(run), "--round", "1", "--client", "0", "--ledger-url", DEAD])
    assert stop.value.code == 2
    assert capsys.readouterr().err.endswith(
        "error: --ledger-url applies to --verify (a receipt is made from the run's files)\n"
    )


def _edit(good: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    doc = {k: v for k, v in good.items() if k != key}
    if value is not None:
        doc[key] = value(good) if callable(value) else value
    return doc


def _step(i: int, part: int, value: Any) -> Any:
    """``proof`` with step ``i``'s ``part`` (0 hash, 1 direction) replaced by ``value``."""

    def edit(good: dict[str, Any]) -> list[Any]:
        proof = [list(s) for s in good["proof"]]
        proof[i][part] = value(proof[i][part]) if callable(value) else value
        return proof

    return edit


MALFORMED = [  # (field, new value or None to drop it, the error line's text)
    ("proof", None, "its 'proof' is missing"),
    ("update_hash", None, "its 'update_hash' is missing"),
    ("base_hash", None, "its 'base_hash' is missing"),
    ("leaf", None, "its 'leaf' is missing"),
    ("update_hash", 5, f"its 'update_hash' is 5, {HASH}"),
    ("record_hash", "0x00", f"its 'record_hash' is '0x00', {HASH}"),
    ("samples", 84.5, "its 'samples' is 84.5, not an integer"),
    ("samples", True, "its 'samples' is True, not an integer"),
    ("client", -1, "its 'client' is -1, not an integer from 0 to 2**64 - 1"),
    ("proof", "x", "its 'proof' is 'x', not a list of [hash, direction] pairs"),
    ("proof", lambda g: [g["proof"][0][:1]], "its 'proof'[0] is ['0x"),
    ("proof", _step(1, 1, 0), "its 'proof'[1][1] is 0, not a JSON boolean (true or false)"),
    ("proof", _step(1, 1, "false"), "its 'proof'[1][1] is 'false', not a JSON boolean"),
    ("proof", _step(2, 0, str.upper), "its 'proof'[2][0] is '0X"),
]
# every hash field alike: uppercase or without its 0x is malformed (until now only the leaf was)
MALFORMED += [
    (key, fn, f"its {key!r} is '{shown}")
    for key in ("update_hash", "base_hash", "record_hash", "leaf")
    for fn, shown in (
        (lambda g, k=key: "0x" + g[k][2:].upper(), "0x"),
        (lambda g, k=key: g[k][2:], ""),
    )
]


@pytest.mark.parametrize(("key", "value", "text"), MALFORMED)
def test_a_malformed_receipt_is_bad_input_naming_its_field(
    recorded: Path,
    good: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: Any,
    text: str,
) -> None:
    # until now a KeyError's 'proof', "not enough values to unpack" or fromhex()'s message as
    # a failed proof (INVALID, exit 1); "false" read as true, 0 and uppercase hashes accepted
    assert _verify(recorded, tmp_path / "r.json", _edit(good, key, value)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"error: not a receipt: {text}")
    if "lowercase" in err:
        assert err.endswith(f"{HASH}\n")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("samples", lambda g: g["samples"] + 1),
        ("leaf", "0x" + "00" * 32),
        ("update_hash", "0x" + "ab" * 32),
        ("proof", _step(0, 1, lambda d: not d)),
        ("proof", lambda g: g["proof"][:-1]),
    ],
)
def test_an_edited_value_is_still_invalid(
    recorded: Path,
    good: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    value: Any,
) -> None:
    assert _verify(recorded, tmp_path / "r.json", _edit(good, key, value)) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "INVALID" and "inclusion-proof" in out[0]


def test_one_bad_run_among_several_is_reported_and_the_rest_audited(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # until now the first run's line, then the error, exit 2: the others never audited
    runs = tmp_path / "runs"
    for name in ("a", "b_del", "c"):
        shutil.copytree(recorded, runs / name)
    (runs / "b_del/ledger/rounds.jsonl").unlink()
    assert audit_main([str(runs), "-q"]) == 2
    out, err = capsys.readouterr()
    assert err == f"error: {runs}/b_del: ledger/rounds.jsonl is missing\n"
    lines = out.splitlines()
    assert [ln.split(":")[0] for ln in lines[:2]] == [f"{runs}/a", f"{runs}/c"]
    assert all("CLEAN" in ln for ln in lines[:2])
    assert lines[2].startswith(
        f"3 runs, {2 * ROUNDS} rounds, 0 with findings, 1 not audited (bad input) ("
    )
    # the same on two processes, the JSON in the runs' order
    assert audit_main([str(runs), "-q", "--jobs", "2", "--json", "-"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out[out.index("[") :])
    assert [(d["run_dir"], d.get("clean"), d.get("error")) for d in doc] == [
        (f"{runs}/a", True, None),
        (f"{runs}/b_del", None, f"{runs}/b_del: ledger/rounds.jsonl is missing"),
        (f"{runs}/c", True, None),
    ]


def test_a_run_just_started_is_still_being_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # between .run.lock and ledger/ (~3 s) it was "no recorded run found (...--ledger?)"
    from simulator.run.runlock import lock_run_dir

    d = tmp_path / "starting"
    fd = lock_run_dir(d)  # what a run holds from before it writes anything
    try:
        assert audit_main([str(d)]) == 2
        assert capsys.readouterr().err == (
            f"error: {d}: the run is still being written (it holds .run.lock and has no "
            "ledger/manifest.json yet): audit it once the run has ended\n"
        )
    finally:
        os.close(fd)
    assert audit_main([str(d)]) == 2  # ended without a ledger: no run, as before
    assert "no recorded run found" in capsys.readouterr().err


def test_hidden_directories_are_not_searched(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a tamper study stopped by Ctrl-C left OUT/.tamper, which the audit of OUT found: FINDINGS
    from ledger.tamper import CASES

    out = tmp_path / "study"
    shutil.copytree(run, out / "task" / "ledger-s0")
    shutil.copytree(run, out / ".tamper")
    CASES["signature forged"](out / ".tamper", 1)
    assert find_runs([str(out)]) == [out / "task" / "ledger-s0"]
    assert audit_main([str(out), "-q"]) == 0
    assert "CLEAN" in capsys.readouterr().out
    assert find_runs([str(out / ".tamper")]) == [out / ".tamper"]  # named, it is audited
    assert audit_main([str(out / ".tamper"), "-q"]) == 1


def test_the_tamper_study_removes_its_copy_when_stopped(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ledger.audit
    from benchmarks.ledger_study.tamper_study import tamper_study

    def ctrl_c(*_: Any, **__: Any) -> None:
        assert (tmp_path / ".tamper").is_dir()  # the copy being audited
        raise KeyboardInterrupt

    monkeypatch.setattr(ledger.audit, "audit_run", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        tamper_study(run, tmp_path, progress=False)
    assert not (tmp_path / ".tamper").exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--tasks", "crossdevice", "--population", "0"], "--population must be >= 1, got 0"),
        (
            ["--tasks", "crossdevice", "--clients-per-round", "0"],
            "--clients-per-round must be >= 1, got 0",
        ),
        (["--population", "-5"], "--population must be >= 1, got -5"),
        (
            ["--tasks", "robustness", "--population", "100"],
            "--population applies to the crossdevice task only; --tasks robustness does not use it",
        ),
        (
            ["--tasks", "robustness", "--clients-per-round", "5"],
            "--clients-per-round applies to the crossdevice task only; --tasks robustness "
            "does not use it",
        ),
        (["--ledger-url", DEAD], f"--ledger-url: cannot reach JSON-RPC node at {DEAD}: "),
    ],
)
def test_the_ledger_study_refuses_flags_it_would_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    # until now 0 meant the default (10^6 devices, 1,000 a round), robustness ignored both, and
    # a dead --ledger-url was found by the first run (exit 1)
    from benchmarks.ledger_study.main import main as study

    out = tmp_path / "study"
    with pytest.raises(SystemExit) as e:
        study([*argv, "--out", str(out), "--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {line}") and err.count("\n") == 1
    assert not out.exists()  # before any work
