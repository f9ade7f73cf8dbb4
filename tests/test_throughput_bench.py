"""benchmarks/throughput.py: its JSON schema and ratios on one small task (no Flower here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks import fused
from benchmarks.throughput_study.main import main
from benchmarks.throughput_study.tasks import TASKS, task_config
from simulator.run.federation import build_federation


def test_throughput_json_schema(
    ray_session: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t.json"
    png = tmp_path / "t.png"
    rc = main(
        [
            "--tasks",
            "digits-mlp-k10",
            "--rounds",
            "2",
            "--min-seconds",
            "0",
            "--repeats",
            "1",
            "--no-flower",
            "--actors",
            "2",
            "--json",
            str(out),
            "--plot",
            str(png),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    (task,) = data["tasks"]
    assert set(task) == {
        "name",
        "fedsentry",
        "flower",
        "fused",
        "speedup_vs_flower",
        "fraction_of_fused",
    }
    assert task["name"] == "digits-mlp-k10" and task["flower"] is None
    fs, fu = task["fedsentry"], task["fused"]
    # 2 timed rounds of 10 clients each, E=1: every count is exact
    assert fs["client_updates"] == fu["client_updates"] == 20
    assert fs["rounds_timed"] == fu["rounds_timed"] == 2
    assert fs["samples"] == fu["samples"] > 0
    assert task["fraction_of_fused"] == pytest.approx(fs["updates_per_s"] / fu["updates_per_s"])
    assert png.stat().st_size > 0
    assert "digits-mlp-k10" in capsys.readouterr().out


def test_unknown_task_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tasks", "nope"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: unknown task 'nope'; valid:")


def test_min_seconds_times_more_rounds_and_rejects_bad_values(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cheap task keeps timing rounds until --min-seconds have passed; a negative value or
    nan is an error (exit 2)."""
    cfg = task_config(TASKS[0], seed=0, num_actors=1)
    fed = build_federation(cfg)
    fu = fused.measure_fused(cfg, fed, warmup=1, rounds=1, min_seconds=0.3)
    assert fu["seconds"] >= 0.3 and fu["rounds_timed"] > 1
    assert fu["client_updates"] == 10 * fu["rounds_timed"]
    for bad in ("-1", "nan"):
        assert main(["--tasks", "digits-mlp-k10", "--min-seconds", bad]) == 2
        assert "--min-seconds" in capsys.readouterr().err


def test_flower_gpu_shares_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """--flower-gpus: a share outside (0, 1] is an error (exit 2); without CUDA any share is."""
    for bad in ("0", "1.5"):
        assert main(["--tasks", "digits-mlp-k10", "--flower-gpus", bad]) == 2
        assert "is not a share in (0, 1]" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["--tasks", "digits-mlp-k10", "--flower-gpus", "0.5"]) == 2
        assert "--flower-gpus needs a CUDA device" in capsys.readouterr().err
