"""benchmarks/robustness.py (benchmarks/robustness_study/): a tiny grid end to end, bad input,
preconditions, worker pool."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.robustness_study import cli, core, grid  # noqa: E402
from benchmarks.robustness_study.main import FIELDS, main  # noqa: E402
from benchmarks.robustness_study.worker import run_job  # noqa: E402

TINY = [
    "--seeds",
    "1",
    "--rounds",
    "2",
    "--set",
    "num_clients=8",
    "--set",
    "clients_per_round=4",
    "--set",
    "local_epochs=1",
]


def test_tiny_grid_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "rb"
    rc = main(
        [
            "--attack",
            "labelflip",
            "--defenses",
            "fedavg",
            "median",
            "bulyan",
            "--fractions",
            "0",
            "0.4",
            "--workers",
            "1",
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "fedavg" in printed and "f=0.4" in printed and "n/a (precond)" in printed
    recs = json.loads((out / "results.json").read_text())
    assert len(recs) == 3 * 2 * 1
    for r in recs:
        assert set(FIELDS) <= set(r)
        assert r["attack"] == ("none" if r["malicious_fraction"] == 0 else "labelflip")
    ok = [r for r in recs if r["defense"] != "bulyan"]
    assert all(r["error"] is None and 0 <= r["final_accuracy"] <= 1 for r in ok)
    assert all(r["server_seconds_per_round"] >= 0 and r["rounds"] == 2 for r in ok)
    attacked = [r for r in ok if r["malicious_fraction"] == 0.4]
    assert all(r["detection_recall"] is not None for r in attacked)
    # bulyan needs n >= 4f + 3 rows: impossible with 4 clients a round -> recorded, not run
    bul = [r for r in recs if r["defense"] == "bulyan"]
    assert all(r["error"].startswith("n/a (precondition)") for r in bul)
    assert all(r["final_accuracy"] is None for r in bul)
    with (out / "results.csv").open() as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == FIELDS and len(rows) == 1 + len(recs)
    for png in ("accuracy_vs_round.png", "accuracy_vs_fraction.png"):
        assert (out / png).stat().st_size > 0
    assert (out / "grid.yaml").is_file()
    assert (out / "runs" / "labelflip-median-f0.4-s0" / "events.jsonl").is_file()
    assert (out / "runs" / "none-fedavg-f0-s0" / "summary.json").is_file()


def test_unknown_attack_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--attack", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "labelflip" in err


def test_unknown_defense_and_bad_attack_param_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["--attack", "signflip", "--defenses", "nope"],
        ["--attack", "scale", "--attack-param", "bogus=1"],
    ):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_presets_respect_preconditions() -> None:
    reg = {"krum", "bulyan", "siren", "sageflow"}
    assert grid.defense_preset("krum", 0.2, 10, 30, reg) == ({"f": 2}, None)
    params, na = grid.defense_preset("krum", 0.4, 10, 30, reg)
    assert na and na.startswith("n/a (precondition)")
    assert grid.defense_preset("bulyan", 0.0, 10, 30, reg) == ({"f": 1}, None)
    assert grid.defense_preset("bulyan", 0.2, 10, 30, reg)[1] is not None
    assert grid.defense_preset("siren", 0.2, 10, 30, reg)[0] == {"rounds_total": 30}
    assert "entropy_threshold" in grid.defense_preset("sageflow", 0.2, 10, 30, reg)[0]


def test_default_scenario_is_sirens_full_participation() -> None:
    """Without --scenario the grid runs Siren's setting: 10 IID clients, all of them each round
    (its ban rule counts excluded rounds, so partial participation would delay every ban)."""
    args = cli.parse_args(["--attack", "labelflip"])
    assert args.scenario == grid.DEFAULT_SCENARIO == "siren"
    flat = grid.resolve_scenario(args.scenario, "digits", None)
    assert (flat["num_clients"], flat["clients_per_round"]) == (10, 10)
    assert flat["partition"] == "iid" and flat["local_epochs"] == 5 and flat["rounds"] == 30
    # ~100 root samples out of the 1,438 digits training samples (1,797 less a 20% test split)
    assert flat["public_fraction"] == round(100 / 1438, 4) == 0.0695
    partial = grid.resolve_scenario("partial", "digits", 12)
    assert (partial["num_clients"], partial["clients_per_round"], partial["rounds"]) == (20, 10, 12)


def test_midrun_precondition_error_is_recorded(tmp_path: Path) -> None:
    """A defense that raises ValueError during a round gives a record with the error."""
    flat = dict(
        num_clients=8,
        clients_per_round=4,
        local_epochs=1,
        rounds=2,
        seed=0,
        defense="krum",
        defense_params={"f": 3},
        attack="none",
        attack_fraction=0.0,
        backend="local",
        progress=False,
        plots=False,
        out=str(tmp_path / "r"),
    )
    rec = run_job(
        {"attack": "none", "defense": "krum", "malicious_fraction": 0.0, "seed": 0, "flat": flat}
    )
    assert rec["error"].startswith("ValueError") and "2f + 2" in rec["error"]
    assert rec["final_accuracy"] is None


def test_worker_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pool"
    rc = main(
        [
            "--attack",
            "signflip",
            "--defenses",
            "fedavg",
            "--fractions",
            "0",
            "0.25",
            "--workers",
            "2",
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0
    recs = json.loads((out / "results.json").read_text())
    assert [r["malicious_fraction"] for r in recs] == [0.0, 0.25]
    assert all(r["error"] is None for r in recs)


def test_ledger_grid_then_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ledger.audit import main as audit

    out = tmp_path / "rbl"
    rc = main(
        [
            "--attack",
            "labelflip",
            "--defenses",
            "fedavg",
            "median",
            "--fractions",
            "0.25",
            "--workers",
            "1",
            "--ledger",
            "--committee",
            "1",
            "--out",
            str(out),
            *TINY,
        ]
    )
    assert rc == 0
    assert "ledger: 2 runs recorded" in capsys.readouterr().out
    recs = json.loads((out / "results.json").read_text())
    assert all(r["ledger_seconds"] > 0 and r["error"] is None for r in recs)
    assert audit([str(out), "-q"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and "2 runs, 4 rounds, 0 with findings" in lines[-1]


def test_defense_param_overrides_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.parse_args(
        [
            "--attack",
            "labelflip",
            "--defenses",
            "siren",
            "krum",
            "--defense-param",
            "siren.variant=paper",
            "--defense-param",
            "krum.bucket=2",
        ]
    )
    assert args.defense_params == {"siren": {"variant": "paper"}, "krum": {"bucket": 2}}
    base = grid.resolve_scenario("siren", "digits", 3)
    jobs = {(j["defense"], j["malicious_fraction"]): j for j in core.make_jobs(args, base)}
    assert jobs[("siren", 0.2)]["flat"]["defense_params"] == {"rounds_total": 3, "variant": "paper"}
    assert jobs[("krum", 0.2)]["flat"]["defense_params"] == {"f": 2, "bucket": 2}
    for bad, why in (
        (["--defense-param", "variant=paper"], "expected DEFENSE.KEY=VALUE"),
        (["--defense-param", "siren.variant=nope"], "--defense-param: defense"),
    ):
        with pytest.raises(SystemExit) as e:
            cli.parse_args(["--attack", "labelflip", *bad])
        assert e.value.code == 2 and why in capsys.readouterr().err


def test_resume_keeps_the_finished_runs_and_runs_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rb"
    argv = ["--attack", "labelflip", "--defenses", "fedavg", "median", "--fractions", "0.4"]
    argv += ["--workers", "1", "--out", str(out), *TINY]
    assert main(argv) == 0
    first = {r["defense"]: r for r in json.loads((out / "results.json").read_text())}
    runs = out / "runs"
    kept, rerun = runs / "labelflip-fedavg-f0.4-s0", runs / "labelflip-median-f0.4-s0"
    (rerun / "summary.json").unlink()  # as if the grid had been killed during this run
    stamp = {d: (d / "events.jsonl").stat().st_mtime_ns for d in (kept, rerun)}
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert f"resume: 1 of 2 runs finished under {out}" in capsys.readouterr().err
    assert (kept / "events.jsonl").stat().st_mtime_ns == stamp[kept]  # read back, not run
    assert (rerun / "events.jsonl").stat().st_mtime_ns != stamp[rerun]
    second = {r["defense"]: r for r in json.loads((out / "results.json").read_text())}
    assert second["fedavg"] == first["fedavg"]  # its wall-clock figures too
    wall = ("run_seconds", "server_seconds_per_round")
    strip = [{k: v for k, v in second["median"].items() if k not in wall}]
    assert strip == [{k: v for k, v in first["median"].items() if k not in wall}]
    # the grid moved elsewhere goes on where it was (until stop 50 every run ran again)
    moved = tmp_path / "moved"
    out.rename(moved)
    argv[argv.index("--out") + 1] = str(moved)
    assert main([*argv, "--resume"]) == 0
    assert f"resume: 2 of 2 runs finished under {moved}" in capsys.readouterr().err
    out = moved
    # another config (3 rounds): nothing is kept
    argv[argv.index("--rounds") + 1] = "3"
    assert main([*argv, "--resume"]) == 0
    assert f"resume: 0 of 2 runs finished under {out}" in capsys.readouterr().err
    assert {r["rounds"] for r in json.loads((out / "results.json").read_text())} == {3}


def test_a_run_into_a_directory_drops_the_summary_an_earlier_run_left(tmp_path: Path) -> None:
    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    out = tmp_path / "run"
    flat = {"dataset": "digits", "backend": "local", "num_clients": 4, "clients_per_round": 2}
    flat |= {"rounds": 1, "local_epochs": 1, "plots": False, "out": str(out)}
    run_experiment(build_config(flat=flat), progress=False)
    assert (out / "summary.json").is_file()
    with pytest.raises(KeyboardInterrupt):  # killed before its end: no summary of its own
        run_experiment(build_config(flat={**flat, "rounds": 3}), progress=False, crash_after=1)
    assert not (out / "summary.json").exists()


def test_a_stopped_grid_says_how_to_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulator.run.stop import Terminated

    out = tmp_path / "rb"
    argv = ["--attack", "labelflip", "--defenses", "fedavg", "median", "--fractions", "0.4"]
    argv += ["--workers", "1", "--out", str(out), *TINY]
    out.mkdir()
    for name in ("results.json", "results.csv", "accuracy_vs_fraction.png", "mine.txt"):
        (out / name).write_text("an earlier grid's")  # (mine.txt: not the grid's)
    for stop, rc, name in (
        (KeyboardInterrupt, 130, "interrupted"),
        (Terminated, 143, "terminated (SIGTERM)"),
    ):
        ran: list[str] = []

        def second_stops(job: dict, stop: type = stop, ran: list = ran) -> dict:
            if ran:  # Ctrl-C / SIGTERM during the second run
                raise stop()
            ran.append(job["defense"])
            return run_job(job)

        monkeypatch.setattr(core, "run_job", second_stops)
        assert main(argv) == rc
        assert capsys.readouterr().err.strip().splitlines()[-1] == (
            f"{name}: 1 of 2 runs finished under {out}; go on with: python "
            f"benchmarks/robustness.py {' '.join(argv)} --resume"
        )
    # the earlier grid's results went (until stop 50 they stayed, looking like this grid's)
    assert sorted(p.name for p in out.glob("[!.]*") if p.is_file()) == ["grid.yaml", "mine.txt"]
    monkeypatch.setattr(core, "run_job", run_job)
    assert main([*argv, "--resume"]) == 0
    assert f"resume: 1 of 2 runs finished under {out}" in capsys.readouterr().err
