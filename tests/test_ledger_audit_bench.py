"""benchmarks/ledger_audit.py end to end on a tiny study, and its tamper table."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.ledger_study import tamper_study  # noqa: E402
from benchmarks.ledger_study.main import main  # noqa: E402

#: the settings both tiny studies share: 3 rounds, a one-member committee, one audit process
TINY = ["--rounds", "3", "--committee", "1", "--jobs", "1", "--no-tamper", "--no-progress"]


def test_tiny_study_writes_the_json_the_issue_asks_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    import simulator.run.experiment as experiment

    threads: dict[str, set[int]] = {}  # arm -> the torch threads its rounds planned with
    run = experiment.run_experiment

    class Threads:
        def __init__(self, arm: str) -> None:
            self.arm = arm

        def on_plan(self, sim: Any, plan: Any) -> None:  # in the arm's thread
            threads.setdefault(self.arm, set()).add(torch.get_num_threads())

        def on_round_end(self, sim: Any, record: Any) -> None:
            return None

    def spy(cfg: Any, callbacks: Any = ()) -> dict[str, Any]:
        arm = Path(cfg.output.out).name.split("-")[0]
        return run(cfg, callbacks=[*callbacks, Threads(arm)])

    monkeypatch.setattr(experiment, "run_experiment", spy)
    out = tmp_path / "study"
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # an earlier test may have left one
    try:
        rc = _tiny_robustness(out, tmp_path / "l.json")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert rc == 0
    res = json.loads((tmp_path / "l.json").read_text())
    (task,) = res["tasks"]
    assert {
        "task",
        "clients_per_round",
        "rounds",
        "overhead",
        "audit_rounds_per_s",
        "recorder_lag_max",
    } <= set(task)
    assert (task["task"], task["clients_per_round"], task["rounds"]) == ("robustness", 10, 3)
    assert 0 <= task["recorder_lag_max"] <= 2 and task["audit_rounds_per_s"] > 0
    assert [r["seed"] for r in task["runs"]] == [0, 1]
    assert all(r["same_accuracy"] for r in task["runs"]) and task["audit"]["clean"]
    assert res["tamper"] == [] and res["recorder_start_s"] > 0
    # a ledger run trains with all the driver's torch threads, as the plain run does (the
    # recorder, at the lowest priority, takes what training leaves idle)
    runs = task["runs"]
    assert threads == {"plain": {2}, "ledger": {2}}
    assert sorted(p.name for p in (out / "robustness").iterdir()) == [
        "ledger-s0", "ledger-s1", "plain-s0", "plain-s1"
    ]  # fmt: skip
    # the recorder's CPU seconds, and their median share of the machine's core-seconds over the
    # plain runs; its busy (wall) seconds are left out where it was stopped in other arms' turns
    assert task["interleave"] == "rounds"  # the default
    assert all(r["recorder_cpu_s"] > 0 and r["recorder_busy_s"] is None for r in runs)
    shares = [r["recorder_cpu_s"] / (task["cores"] * r["plain_seconds"]) for r in runs]
    assert task["recorder_cpu_share"] == pytest.approx(sum(shares) / 2)
    printed = capsys.readouterr().out
    assert "median overhead" in printed
    # the table gives the driver's waits for the recorder; no busy column where none is known
    assert "lag  waited s  cpu s" in printed and "recorder busy s" not in printed
    assert all(r["driver_waited_s"] >= 0 for r in runs)
    assert f"recorder CPU: {100 * task['recorder_cpu_share']:.1f}% of the machine's" in printed
    here = ["--out", str(tmp_path / "audit")]  # not the default runs/ledger-audit of the cwd
    assert main([str(tmp_path / "nothing-here"), *here]) == 2
    # audit recorded runs only
    assert main([str(out), "--jobs", "1", *here]) == 0
    assert "audited 2 runs, 6 rounds" in capsys.readouterr().out


def _tiny_robustness(out: Path, json_path: Path) -> int:
    return main(
        [
            "--tasks",
            "robustness",
            "--seeds",
            "2",
            "--repeats",
            "1",
            *TINY,
            "--set",
            "local_epochs=1",
            "--out",
            str(out),
            "--json",
            str(json_path),
        ]
    )


def test_repeats_pair_the_arms_and_take_the_median_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--repeats 3 with whole runs: each seed's arms run three times back to back (the order
    alternating), its
    overhead is the median of the three ratios, its times the medians; the first repetition's
    ledger run is the one audited."""
    out = tmp_path / "study"
    args = ["--tasks", "robustness", "--seeds", "1", "--repeats", "3", *TINY]
    args += ["--interleave", "runs"]
    assert main([*args, "--out", str(out), "--json", str(tmp_path / "r.json")]) == 0
    (task,) = json.loads((tmp_path / "r.json").read_text())["tasks"]
    (run,) = task["runs"]
    plain = [_seconds(out / "robustness" / d) for d in ("plain-s0", "plain-s0-r1", "plain-s0-r2")]
    led = [_seconds(out / "robustness" / d) for d in ("ledger-s0", "ledger-s0-r1", "ledger-s0-r2")]
    ratios = [b / a - 1 for a, b in zip(plain, led, strict=True)]
    assert run["pair_overheads"] == pytest.approx(ratios)
    assert run["overhead"] == pytest.approx(sorted(ratios)[1]) == task["overhead"]
    assert run["plain_seconds"] == pytest.approx(sorted(plain)[1])
    assert task["repeats"] == 3 and run["run_dir"] == str(out / "robustness" / "ledger-s0")
    order = ["plain-s0", "ledger-s0", "ledger-s0-r1", "plain-s0-r1", "plain-s0-r2", "ledger-s0-r2"]
    done = [(out / "robustness" / d / "summary.json").stat().st_mtime_ns for d in order]
    assert done == sorted(done)  # the arms' order alternates from one repetition to the next
    printed = capsys.readouterr().out
    assert "each seed: the median of 3 back-to-back pairs" in printed
    assert "lag  waited s  recorder busy s  cpu s" in printed  # whole runs: busy is known
    assert 0 < run["recorder_cpu_s"] <= run["recorder_busy_s"] + 0.05  # CPU within its wall
    # one seed: the interval is that of the median of its three ratios, resampled
    lo, hi = task["overhead_ci90"]
    assert min(ratios) <= lo <= run["overhead"] <= hi <= max(ratios)
    assert f"90% bootstrap interval of the median overhead: {100 * lo:+.1f}%" in printed
    with pytest.raises(SystemExit) as exc:
        main(["--repeats", "0"])
    assert exc.value.code == 2


def test_the_overheads_bootstrap_interval_by_hand() -> None:
    """Equal ratios: no spread. One seed's three pairs 0.1, 0.2, 0.3: the median of three draws
    is 0.1 with probability 7/27 (two or three draws of 0.1), well over 5%, and likewise 0.3:
    the 90% interval is (0.1, 0.3). The same runs give the same interval."""
    from benchmarks.ledger_study.tasks import interval

    assert interval([[0.05, 0.05], [0.05]]) == (0.05, 0.05)
    assert interval([[0.1, 0.2, 0.3]]) == (0.1, 0.3)
    runs = [[0.157, 0.181, 0.159], [0.023, 0.028, 0.118]]
    assert interval(runs) == interval(runs)
    lo, hi = interval(runs, level=0.5)
    assert 0.023 <= lo <= hi <= 0.181


def _seconds(run_dir: Path) -> float:
    return float(json.loads((run_dir / "summary.json").read_text())["run_seconds"])


def test_tamper_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ledger import tamper
    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment

    run = tmp_path / "run"
    run_experiment(
        build_config(
            flat=dict(
                dataset="digits",
                num_clients=6,
                clients_per_round=4,
                rounds=3,
                local_epochs=1,
                backend="local",
                ledger=True,
                committee=1,
                out=str(run),
                progress=False,
                plots=False,
            )
        )
    )
    keep = ("signature forged", "commitment left out of the chain")
    monkeypatch.setattr(tamper, "CASES", {k: tamper.CASES[k] for k in keep})
    monkeypatch.setattr(tamper, "RUN_CASES", {})
    rows = tamper_study.tamper_study(run, tmp_path, progress=False)
    assert [(r["case"], r["position"], r["caught"]) for r in rows] == [
        ("signature forged", 0, True),
        ("signature forged", 1, True),
        ("signature forged", 2, True),
        ("commitment left out of the chain", 0, None),
        ("commitment left out of the chain", 1, None),
        ("commitment left out of the chain", 2, True),
        ("proof for a client not in the round", 0, True),
        ("proof for a client not in the round", 1, True),
        ("proof for a client not in the round", 2, True),
    ]
    assert all(r["other_rounds"] == [] for r in rows if r["caught"])
    tamper_study.print_table(rows)
    assert "7 of 7 applicable cases caught" in capsys.readouterr().out


# slow (~11 s: three 10^4-device runs); the robustness task's arms are checked by the tiny study
@pytest.mark.slow
def test_crossdevice_splits_the_row_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ray_session: None
) -> None:
    """The crossdevice task runs each seed a third time without the ledger and without the
    actors' partial sums; its overhead is reported beside the ledger's. In rounds, its three
    arms hold their actors at once: the session's 2-CPU Ray is refused with one line."""
    argv = ["--tasks", "crossdevice", "--population", "1000", "--clients-per-round", "8"]
    argv += ["--seeds", "1", "--repeats", "1", *TINY, "--out", str(tmp_path / "study")]
    assert main([*argv, "--interleave", "rounds"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --interleave rounds: 3 arms of ") and "\n" not in err
    assert "the one running here has 2" in err
    rc = main([*argv, "--interleave", "runs", "--json", str(tmp_path / "l.json")])
    assert rc == 0
    (task,) = json.loads((tmp_path / "l.json").read_text())["tasks"]
    (run,) = task["runs"]
    assert run["rows_seconds"] > 0
    assert run["row_path_overhead"] == pytest.approx(run["rows_seconds"] / run["plain_seconds"] - 1)
    assert task["row_path_overhead"] == run["row_path_overhead"]
    assert sorted(p.name for p in (tmp_path / "study" / "crossdevice").iterdir()) == [
        "ledger-s0",
        "plain-s0",
        "rows-s0",
    ]
    assert "row path alone" in capsys.readouterr().out


def test_the_study_s_disk_need_by_hand(tmp_path: Path) -> None:
    """Per robustness run (the digits MLP, 8,970 parameters: 35,880 bytes a model; 10 clients,
    30 rounds): 35,880 + 30 x (10 x (35,880 + 2,048) + 35,880) = 12,490,680 bytes; 6 seeds x
    3 repeats + the tamper study's copy = 19 runs.  Crossdevice --quick (the same MLP, 100
    clients, 10 rounds): 35,880 + 10 x (100 x (35,880 + 2,048) + 35,880) = 38,322,680."""
    from benchmarks.ledger_study.cli import parse_args
    from benchmarks.ledger_study.tasks import disk_needed

    out = ["--out", str(tmp_path)]
    assert disk_needed(parse_args(["--tasks", "robustness", *out])) == (19 * 12_490_680, 0)
    assert disk_needed(parse_args(["--tasks", "robustness", "--no-tamper", *out]))[0] == (
        18 * 12_490_680
    )
    quick = parse_args(["--tasks", "crossdevice", "--quick", "--no-tamper", *out])
    earlier = tmp_path / "crossdevice" / "ledger-s1-r2" / "ledger" / "packs"
    earlier.mkdir(parents=True)
    (earlier / "p").write_bytes(b"x" * 1000)  # an earlier study's pack, which its run replaces
    (tmp_path / "crossdevice" / "plain-s0").mkdir()  # not a ledger run: not counted
    assert disk_needed(quick) == (6 * 38_322_680, 1000)


def test_a_study_that_cannot_fit_stops_before_its_first_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    from benchmarks.ledger_study import main as study_main

    need = 18 * 12_490_680
    argv = ["--tasks", "robustness", "--no-tamper", "--out", str(tmp_path / "o")]
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=need - 1))
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: --out {tmp_path / 'o'}: the study's ledger runs write ~0.22 GB of round "
        "packs; 0.22 GB is free; free disk, choose another --out, or lower --seeds, --repeats "
        "or --rounds\n"
    )
    assert [p.name for p in (tmp_path / "o").iterdir()] == []  # nothing run, nothing written
    packs = tmp_path / "o" / "robustness" / "ledger-s5-r2" / "ledger" / "packs"
    packs.mkdir(parents=True)
    (packs / "p").write_bytes(b"x")  # 1 byte of an earlier run's packs, which it replaces
    study_main._check_disk(study_main.parse_args(argv))  # fits now: no error
