"""A fresh run into a directory an earlier run used: what the earlier run left that is not this
run's goes (``simulator/run/experiment.py``, ``start_or_resume``)."""

from __future__ import annotations

from pathlib import Path

from simulator.config.sections import build_config
from simulator.run.experiment import run_experiment

FLAT = {"dataset": "digits", "backend": "local", "num_clients": 4, "clients_per_round": 2}
FLAT |= {"rounds": 1, "local_epochs": 1, "plots": False, "progress": False}


def test_a_run_without_the_ledger_drops_an_earlier_runs_ledger_and_checkpoint(
    tmp_path: Path,
) -> None:
    # found at stop 57: a run without --ledger into a --ledger run's --out left the earlier
    # ledger/, and `python -m ledger.audit` called the directory CLEAN
    out = tmp_path / "run"
    flat = {**FLAT, "out": str(out)}
    run_experiment(
        build_config(flat={**flat, "ledger": True, "committee": 0, "checkpoint_every": 1})
    )
    assert (out / "ledger" / "manifest.json").is_file() and (out / "checkpoint.pt").is_file()
    run_experiment(build_config(flat={**flat, "checkpoint_every": 1}))
    assert not (out / "ledger").exists() and (out / "checkpoint.pt").is_file()
    (out / "ledger").mkdir()  # as if left again
    run_experiment(build_config(flat=flat))  # no checkpoints: the earlier one is not this run's
    assert not (out / "ledger").exists() and not (out / "checkpoint.pt").exists()
    assert not (out / "state" / "checkpoint").exists()
    assert (out / "summary.json").is_file()
