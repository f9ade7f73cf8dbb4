"""One run at a time in a run directory (:mod:`simulator.run.runlock`).

Until stop 49 two runs into the same ``--out`` interleaved their rounds in one ``events.jsonl``
(rounds 0, 13, 1, 14, ... seen) and both exited 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helper import ROOT

from simulator.cli import main
from simulator.config.fields import ConfigError
from simulator.config.sections import build_config
from simulator.run.experiment import run_experiment
from simulator.run.runlock import LOCK_FILE, lock_run_dir


def _in_use(d: Path, pid: int) -> str:
    return (
        f"output.out: {d} is in use by another run (pid {pid}): choose another --out, "
        "or wait for that run to end"
    )


def test_a_second_lock_is_refused_until_the_first_lets_go(tmp_path: Path) -> None:
    d = tmp_path / "run"
    fd = lock_run_dir(d)
    assert (d / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(ConfigError) as e:
        lock_run_dir(d)
    assert str(e.value) == _in_use(d, os.getpid())
    os.close(fd)
    os.close(lock_run_dir(d))


def test_a_run_into_a_directory_in_use_is_refused_and_touches_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "run"
    fd = lock_run_dir(d)
    (d / "events.jsonl").write_text('{"round": 0}\n')
    (d / "config.yaml").write_text("mine\n")
    flat = {"dataset": "digits", "backend": "local", "num_clients": 4, "clients_per_round": 2}
    flat |= {"rounds": 1, "local_epochs": 1, "plots": False, "out": str(d)}
    try:
        with pytest.raises(ConfigError, match="is in use by another run"):
            run_experiment(build_config(flat=flat), progress=False)
        argv = ["--backend", "local", "--rounds", "1", "--no-progress", "--out", str(d)]
        assert main(argv) == 2
        assert capsys.readouterr().err == f"error: {_in_use(d, os.getpid())}\n"
        assert (d / "events.jsonl").read_text() == '{"round": 0}\n'
        assert (d / "config.yaml").read_text() == "mine\n"
        assert sorted(p.name for p in d.iterdir()) == [LOCK_FILE, "config.yaml", "events.jsonl"]
    finally:
        os.close(fd)
    run_experiment(build_config(flat=flat), progress=False)  # free again: it runs
    assert (d / "summary.json").is_file()


def test_a_killed_run_lets_go_of_its_directory(tmp_path: Path) -> None:
    d = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from simulator.run.runlock import "
            "lock_run_dir; lock_run_dir(Path(sys.argv[1])); print('locked', flush=True); "
            "time.sleep(60)",
            str(d),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            lock_run_dir(d)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    os.close(lock_run_dir(d))  # a kill -9 frees it at once: --resume is never refused


def test_an_output_that_cannot_be_made_is_one_line_exit_2_in_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # until stop 49 each of these ended in a FileExistsError / NotADirectoryError traceback
    # (the audit's and the ledger study's --json only after all their work)
    from benchmarks.ledger_study.main import main as ledger_study
    from benchmarks.robustness_study.main import main as robustness
    from benchmarks.straggler_study.main import main as stragglers
    from ledger.audit import main as audit
    from simulator.run.runlock import make_out_dir, writable_file

    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ConfigError) as e:
        make_out_dir(afile)
    assert str(e.value) == f"output.out: cannot make the directory {afile} (a file is there)"
    with pytest.raises(ConfigError) as e:
        writable_file(afile / "r.json", "--json")
    assert str(e.value) == f"--json: cannot make the directory {afile} (a file is there)"
    with pytest.raises(ConfigError) as e:
        writable_file(tmp_path, "--json")
    assert str(e.value) == f"--json: {tmp_path} is a directory (a file name is expected)"
    writable_file(tmp_path / "new" / "r.json", "--json")
    assert (tmp_path / "new").is_dir() and not (tmp_path / "new" / "r.json").exists()

    made = f"cannot make the directory {afile} (a file is there)"
    cases = [
        (main, ["--backend", "local", "--no-progress", "--out", str(afile)], f"output.out: {made}"),
        (robustness, ["--attack", "labelflip", "--quick", "--out", str(afile)], f"--out: {made}"),
        (stragglers, ["--no-progress", "--out", str(afile)], f"--out: {made}"),
        (ledger_study, ["--quick", "--out", str(afile)], f"--out: {made}"),
        (ledger_study, ["--quick", "--out", str(tmp_path / "s"), "--json", str(afile / "j")],
         f"--json: {made}"),
        (audit, [str(tmp_path), "--json", str(afile / "j")],
         f"--json: {made}"),
    ]  # fmt: skip
    for command, argv, line in cases:
        assert command(argv) == 2, argv
        assert capsys.readouterr().err == f"error: {line}\n", argv


def test_a_study_into_a_directory_in_use_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # two grids into one --out wrote each other's results.json, and every cell of the second
    # failed on the first's run locks
    from benchmarks.robustness_study.main import main as robustness
    from benchmarks.straggler_study.main import main as stragglers

    out = tmp_path / "study"
    fd = lock_run_dir(out)
    try:
        for command, argv in (
            (robustness, ["--attack", "labelflip", "--quick", "--out", str(out)]),
            (stragglers, ["--no-progress", "--out", str(out)]),
        ):
            assert command(argv) == 2
            assert capsys.readouterr().err == (
                f"error: --out: {out} is in use by another run (pid {os.getpid()}): choose "
                "another --out, or wait for that run to end\n"
            )
    finally:
        os.close(fd)
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]  # nothing written
