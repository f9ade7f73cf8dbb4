"""A kill -9 at any moment, even mid-write, leaves a run that ``--resume`` finishes.

Real SIGKILLs: the CLI runs in a subprocess with ``FEDSENTRY_FAILPOINT`` set (see
:mod:`simulator.run.appendlog`), dies at an exact byte of ``events.jsonl``, and a second subprocess
resumes it; its events and summary must equal an uninterrupted run's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_helper import run_cli, strip_wall

from simulator.run.output import read_events

ROUNDS = 6
RUN = [
    "--backend",
    "local",
    "--dataset",
    "digits",
    "--num-clients",
    "8",
    "--clients-per-round",
    "4",
    "--local-epochs",
    "1",
    "--rounds",
    str(ROUNDS),
    "--checkpoint-every",
    "1",
    "--no-progress",
    "--no-plots",
]


def _summary(out: Path) -> dict[str, Any]:
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run, shared by the module."""
    out = tmp_path_factory.mktemp("kill") / "reference"
    proc = run_cli(*RUN, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert [e["round"] for e in read_events(out / "events.jsonl")] == list(range(ROUNDS))
    return out


def _assert_resumes_to(out: Path, reference: Path) -> None:
    proc = run_cli("--resume", str(out))
    assert proc.returncode == 0, proc.stderr
    raw = (out / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == ROUNDS  # nothing lost, nothing twice
    resumed, ref = read_events(out / "events.jsonl"), read_events(reference / "events.jsonl")
    assert [e["round"] for e in resumed] == list(range(ROUNDS))
    assert strip_wall(resumed) == strip_wall(ref)
    got, want = _summary(out), _summary(reference)
    assert got["final_accuracy"] == want["final_accuracy"]
    assert got["rounds"] == want["rounds"] == ROUNDS
    assert not (out / "checkpoint.pt.tmp").exists()


@pytest.mark.parametrize(
    ("failpoint", "complete"),
    [
        ("events.jsonl:4", 3),  # killed halfway through writing round 3's event
        pytest.param(  # killed after round 3's event, before its checkpoint (slow: ~10 s)
            "events.jsonl:4:after", 4, marks=pytest.mark.slow
        ),
    ],
)
def test_sigkill_then_resume_matches_uninterrupted(
    tmp_path: Path, reference: Path, failpoint: str, complete: int
) -> None:
    out = tmp_path / "killed"
    proc = run_cli(*RUN, "--out", str(out), failpoint=failpoint)
    assert proc.returncode == -9, proc.stderr  # a real SIGKILL, not an exception
    raw = (out / "events.jsonl").read_bytes()
    assert raw.count(b"\n") == complete
    assert raw.endswith(b"\n") == failpoint.endswith(":after")  # torn mid-write, or whole
    assert not (out / "summary.json").exists()
    # the last checkpoint is the one after round 2: it never runs ahead of the log
    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_round"] == 3
    if failpoint.endswith(":after"):
        # as if the kill had also landed mid-checkpoint: a torn temporary file is left over
        (out / "checkpoint.pt.tmp").write_bytes(b"PK\x03\x04 torn")
    _assert_resumes_to(out, reference)


def test_kill_after_the_last_checkpoint_resumes_to_the_same_summary(
    tmp_path: Path, reference: Path
) -> None:
    # every round is logged and checkpointed, the kill lands while summary.json is written
    out = tmp_path / "finishing"
    shutil.copytree(reference, out)
    (out / "summary.json").write_bytes((reference / "summary.json").read_bytes()[:40])
    (out / "metrics.csv").unlink()
    _assert_resumes_to(out, reference)
    assert (out / "metrics.csv").is_file()


def test_a_full_disk_stops_the_run_in_one_line_and_resume_finishes_it(
    tmp_path: Path, reference: Path
) -> None:
    # the disk fills halfway through writing round 3's event: the file is cut back to its
    # three whole records, the run says so in one line (exit 1), and --resume finishes it
    out = tmp_path / "full"
    proc = run_cli(*RUN, "--out", str(out), failpoint="events.jsonl:4:enospc")
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr.strip().splitlines()[-1]
    assert err == (
        f"error: no space left on the disk of {out / 'events.jsonl'}; the rounds before it "
        f"are saved: free some space, then resume with: python -m simulator --resume {out}"
    )
    raw = (out / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 3  # no torn record left behind
    assert torch.load(out / "checkpoint.pt", weights_only=False)["next_round"] == 3
    _assert_resumes_to(out, reference)


def test_a_full_disk_during_a_checkpoint_keeps_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills after 100 bytes of a checkpoint: OSError (ENOSPC) names the temporary
    file, which is gone; checkpoint.pt is still the last whole one."""
    import errno
    import io

    from conftest import small_config

    from simulator.round.engine import Simulation

    sim = Simulation(small_config(tmp_path / "run"))
    try:
        first = sim.save_checkpoint(tmp_path / "run", 0.0)
        saved = first.read_bytes()
        sim.run_round(0, 0.0)
        real_open = Path.open

        class Full(io.FileIO):
            def write(self, b) -> int:  # type: ignore[no-untyped-def]
                if self.tell() >= 100:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return super().write(bytes(b)[:100])

        def fake_open(self: Path, mode: str = "r", *a, **kw):  # type: ignore[no-untyped-def]
            if self.name == "checkpoint.pt.tmp":
                return Full(self, mode)
            return real_open(self, mode, *a, **kw)

        monkeypatch.setattr(Path, "open", fake_open)
        with pytest.raises(OSError) as err:
            sim.save_checkpoint(tmp_path / "run", 1.0)
        monkeypatch.setattr(Path, "open", real_open)
    finally:
        sim.close()
    assert err.value.errno == errno.ENOSPC
    assert err.value.filename == str(tmp_path / "run" / "checkpoint.pt.tmp")
    assert not (tmp_path / "run" / "checkpoint.pt.tmp").exists()
    assert first.read_bytes() == saved
