"""``python -m simulator --resume RUN`` of a ``--ledger`` run whose ledger files are malformed:
one line naming the file (and its line or field), exit 2, as the audit says for the same input,
and no file changed. Found by a tester: a traceback, then ``JSONDecodeError`` or
``KeyError: 'contract'`` naming no file; ``chain_id: "x"`` failed at round 3 (exit 1); a bad
``rounds.jsonl`` line printed the recorder's traceback; a cut export was a raw dataclass; a
manifest edited off its channel (another learning rate, no committee) resumed (exit 0)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from ledger_run_helper import ledger_config

ROOT = Path(__file__).resolve().parent.parent


def _resume(run: Path) -> tuple[int, str]:
    """``python -m simulator --resume RUN`` in its own process (the recorder's traceback, if it
    printed one, is in its stderr too): its exit status and stderr."""
    p = subprocess.run(
        [sys.executable, "-m", "simulator", "--resume", str(run), "--no-progress"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p.returncode, p.stderr


@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 4-round --ledger run killed after round 3 (3 rounds recorded, a checkpoint)."""
    from simulator.run.experiment import run_experiment

    out = tmp_path_factory.mktemp("resume_input") / "run"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(ledger_config(out), crash_after=3)
    return out


def _manifest(edit: Callable[[dict], object]) -> Callable[[Path], None]:
    def apply(run: Path) -> None:
        path = run / "ledger/manifest.json"
        m = json.loads(path.read_text())
        edit(m)
        path.write_text(json.dumps(m))

    return apply


def _truncate(run: Path) -> None:
    path = run / "ledger/manifest.json"
    path.write_bytes(path.read_bytes()[:200])


def _line_2(run: Path) -> None:
    path = run / "ledger/rounds.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b"garbage\n" + b"".join(lines[2:]))


def _files(run: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run)): p.read_bytes()
        for p in sorted(run.rglob("*"))
        if p.is_file() and p.name not in (".lock", ".run.lock")
    }


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_truncate, "ledger/manifest.json: unreadable: Expecting property name enclosed in"),
        (_manifest(lambda m: m.pop("contract")), "ledger/manifest.json: its 'contract' is missing"),
        (
            _manifest(lambda m: m.update(chain_id="x")),
            "ledger/manifest.json: its 'chain_id' is \"x\", not an integer >= 0",
        ),
        (_line_2, "ledger/rounds.jsonl line 2: not JSON (Expecting value: line 1 column 1"),
        # until now these resumed (exit 0), and the audit then found them
        (
            _manifest(lambda m: m["config"]["algorithm"].update(lr=0.2)),
            "ledger/manifest.json: its config is not its channel's (expected channel_id=0x",
        ),
        (
            _manifest(lambda m: m.update(committee=[])),
            "ledger/manifest.json: its committee_size is 0, the contract's 3 (the manifest is "
            "not its channel's)",
        ),
        (
            _manifest(lambda m: m["committee"][0].update(pubkey="ab")),
            "ledger/manifest.json: its committee[0].'pubkey' is \"ab\", not hex of 48 bytes",
        ),
    ],
)
def test_a_malformed_ledger_file_refuses_the_resume_in_one_line(
    killed: Path, tmp_path: Path, edit: Callable, says: str
) -> None:
    run = Path(shutil.copytree(killed, tmp_path / "run"))
    edit(run)
    before = _files(run)
    rc, err = _resume(run)
    assert rc == 2, err
    assert err.startswith(f"error: cannot resume: {run}/{says}") and err.count("\n") == 1, err
    assert _files(run) == before


def test_an_export_cut_short_names_the_file_and_block(killed: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(killed, tmp_path / "run"))
    blocks = run / "ledger/chain/blocks.rlp"
    data = blocks.read_bytes()
    blocks.write_bytes(data[:-100])  # the last block torn: dropped, and the head is then ahead
    rc, err = _resume(run)
    assert rc == 2, err
    assert err.startswith(
        f"error: cannot resume: {blocks}: block 4: blocks #4..#4 missing at the end (expected "
        "head #4 0x"
    )
    assert err.count("\n") == 1, err
