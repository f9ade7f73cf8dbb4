"""benchmarks/stragglers.py end to end on a tiny population, its bad-input errors, and
mid-training dropout in the engine."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.straggler_study import core
from benchmarks.straggler_study.main import main
from simulator.config.sections import Config

MakeConfig = Callable[..., Config]
TINY = [
    "--population",
    "60",
    "--clients-per-round",
    "6",
    "--seeds",
    "1",
    "--rounds",
    "6",
    "--set",
    "hidden=16",
    "--no-progress",
    "--no-plots",
]


def test_study_writes_the_json_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "study"
    rc = main(
        [
            *TINY,
            "--policies",
            "deadline",
            "fedbuff",
            "fedasync",
            "--policy-param",
            "fedbuff:k=2",
            "--out",
            str(out),
            "--json",
            str(tmp_path / "q.json"),
        ]
    )
    assert rc == 0
    doc = json.loads(
        (tmp_path / "q.json").read_text(),
        parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"),
    )
    recs = doc["policies"]
    assert [r["policy"] for r in recs] == ["deadline", "fedbuff", "fedasync"]
    for r in recs:
        assert list(r)[:7] == [
            "policy",
            "seed",
            "final_accuracy",
            "time_to_target_h",
            "stale_share",
            "wasted_compute_share",
            "participation_gini",
        ]
        assert set(r["time_to_target_h"]) == {"0.8", "0.9"}
        assert 0.0 <= r["final_accuracy"] <= 1.0 and 0.0 <= r["participation_gini"] <= 1.0
        assert r["slow_q_accuracy"] is not None and r["fast_q_accuracy"] is not None
    # the best policy reaches 0.8 of its own final accuracy
    best = max(recs, key=lambda r: r["final_accuracy"])
    assert best["time_to_target_h"]["0.8"] is not None
    # fedbuff: 2 updates a step, with stale ones among them after the first steps
    fb = [
        json.loads(x)
        for x in (out / "runs" / "fedbuff-s0" / "events.jsonl").read_text().splitlines()
    ]
    assert [e["aggregated"] for e in fb] == [2] * 6
    assert recs[1]["stale_share"] == pytest.approx(sum(len(e["stale"]) for e in fb) / 12)
    assert doc["settings"]["policies"]["fedbuff"]["policy_params"] == {"k": 2}
    table = capsys.readouterr().out
    assert all(p in table for p in ("deadline", "fedbuff", "fedasync", "ttt 0.8 (h)"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--policies", "slowest"], "--policies: unknown round policy 'slowest'; valid: "),
        (
            ["--policies", "fedbuff", "--policy-param", "fedbuff:kk=1"],
            "round policy 'fedbuff': unknown parameter 'kk'",
        ),
        (
            ["--policies", "overcommit", "--policy-param", "overcommit:ratio=0.5"],
            "ratio must be a finite number >= 1",
        ),
        (["--policy-param", "k=1"], "expected POLICY:KEY=VALUE"),
        (["--virtual-hours", "0"], "--virtual-hours: must be > 0"),
        (["--json", "/dev/null/x.json"], "--json: cannot make the directory /dev/null"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = main([*TINY, "--out", str(tmp_path), *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    import re

    assert re.search(message, err), err


def test_malformed_availability_trace_names_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "avail.csv"
    bad.write_text("device_id,start_s,end_s\n0,0,100\n1,50,20\n")
    rc = main(
        [
            *TINY,
            "--policies",
            "deadline",
            "--out",
            str(tmp_path / "o"),
            "--availability-trace",
            str(bad),
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and f"{bad}:3:" in err and len(err.splitlines()) == 1


def test_dropout_loses_the_updates_of_devices_going_offline(
    tmp_path: Path, make_config: MakeConfig
) -> None:
    """Devices 0-4 are always online; 5-9 only for the first millisecond of each 1000 s, so
    every one of them selected at t = 0 goes offline before its update lands."""
    trace = tmp_path / "avail.csv"
    trace.write_text(
        "device_id,start_s,end_s\n"
        + "".join(f"{i},0,1000\n" for i in range(5))
        + "".join(f"{i},0,0.001\n" for i in range(5, 10))
    )
    from simulator.round.engine import Simulation

    cfg = make_config(
        "drop",
        num_clients=10,
        clients_per_round=10,
        rounds=1,
        availability_trace=str(trace),
        dropout=True,
    )
    sim = Simulation(cfg)
    try:
        rec = sim.run_round(0, 0.0)
    finally:
        sim.close()
    assert rec.selected == list(range(10))
    assert rec.extra["dropout"] == [5, 6, 7, 8, 9]
    assert sorted(rec.participants) == [0, 1, 2, 3, 4]
    # each lost device trained 0.001 s before going offline (its compute takes longer)
    assert rec.extra["wasted_device_seconds"] == pytest.approx(5 * 0.001)
    # without --dropout the same devices deliver
    cfg = make_config(
        "keep", num_clients=10, clients_per_round=10, rounds=1, availability_trace=str(trace)
    )
    sim = Simulation(cfg)
    try:
        rec = sim.run_round(0, 0.0)
    finally:
        sim.close()
    assert rec.extra["dropout"] == [] and sorted(rec.participants) == list(range(10))
    assert rec.extra["wasted_device_seconds"] == 0.0 and math.isfinite(rec.extra["device_seconds"])


def test_speed_label_skew_slows_the_devices_of_the_lower_classes(make_config: MakeConfig) -> None:
    import numpy as np

    from simulator.run.federation import build_federation

    fed = build_federation(make_config("skew", num_clients=40, partition="virtual"))
    pop = core.skew_speeds(fed, 1.0)
    dominant = np.array([np.argmax(fed.clients.label_mix(i)[1]) for i in range(40)])
    ratio = pop.compute_ms_per_sample / fed.population.compute_ms_per_sample
    np.testing.assert_allclose(ratio, np.where(dominant < 5, math.e, 1.0))
    assert 0 < (dominant < 5).sum() < 40
    np.testing.assert_array_equal(pop.up_kbps, fed.population.up_kbps)


def test_resume_keeps_the_finished_runs_and_runs_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "study"
    argv = [*TINY, "--policies", "deadline", "fedbuff", "--out", str(out)]
    assert main(argv) == 0
    first = json.loads((out / "results.json").read_text())["policies"]
    kept, rerun = out / "runs" / "deadline-s0", out / "runs" / "fedbuff-s0"
    (rerun / core.CELL_FILE).unlink()  # as if the study had been killed during this run
    stamp = {d: (d / "events.jsonl").stat().st_mtime_ns for d in (kept, rerun)}
    assert main([*argv, "--resume"]) == 0
    assert (kept / "events.jsonl").stat().st_mtime_ns == stamp[kept]  # read back, not run
    assert (rerun / "events.jsonl").stat().st_mtime_ns != stamp[rerun]
    second = json.loads((out / "results.json").read_text())["policies"]
    assert second[0] == first[0]  # the kept run's figures, wall time included
    wall = ("run_seconds", "wall_seconds")
    assert {k: v for k, v in second[1].items() if k not in wall} == {
        k: v for k, v in first[1].items() if k not in wall
    }
    # the study moved elsewhere goes on where it was (until stop 50 every run ran again)
    moved = tmp_path / "moved"
    out.rename(moved)
    argv[argv.index("--out") + 1] = str(moved)
    kept, rerun = moved / "runs" / "deadline-s0", moved / "runs" / "fedbuff-s0"
    stamp = {d: (d / "events.jsonl").stat().st_mtime_ns for d in (kept, rerun)}
    assert main([*argv, "--resume"]) == 0
    assert all((d / "events.jsonl").stat().st_mtime_ns == stamp[d] for d in (kept, rerun))
    # another config (7 rounds): nothing is kept
    argv[argv.index("--rounds") + 1] = "7"
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert all(d["rounds"] == 7 for d in map(_cell_doc, (kept, rerun)))


def _cell_doc(d: Path) -> dict:
    return json.loads((d / core.CELL_FILE).read_text())


def test_a_stopped_study_says_how_to_go_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from simulator.run.stop import Terminated

    out = tmp_path / "study"
    argv = [*TINY, "--policies", "deadline", "fedbuff", "--out", str(out)]
    real, ran = core.run_cell, []

    def second_stops(*args: object, **kw: object) -> dict:
        if ran:  # SIGTERM during the second run
            raise Terminated()
        ran.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(core, "run_cell", second_stops)
    out.mkdir()
    for name in ("results.json", "accuracy_vs_time.png", "mine.txt"):  # an earlier study's
        (out / name).write_text("earlier")
    assert main(argv) == 143
    # its results went (until stop 50 they stayed, looking like this study's); others stay
    assert sorted(p.name for p in out.glob("[!.]*") if p.is_file()) == ["mine.txt"]
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"terminated (SIGTERM): 1 of 2 runs finished under {out}; go on with: "
        f"python benchmarks/stragglers.py {' '.join(argv)} --resume"
    )
    assert (out / "runs" / "deadline-s0" / core.CELL_FILE).is_file()


def test_a_new_seed_lets_the_last_population_go_before_it_builds_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # until stop 49 the last seed's federation stayed referenced while the next was built: two
    # populations at once (5*10^7 devices, 2 seeds: 4.50 GB peak against 2.79 GB for 1 seed)
    import gc
    import weakref

    from benchmarks.straggler_study.cli import parse_args

    class Fed:
        pass

    made: list[weakref.ref] = []
    alive_at_build: list[list[bool]] = []

    def federation(a: object, seed: int, settings: dict, old: object) -> tuple[Fed, None]:
        gc.collect()
        alive_at_build.append([r() is not None for r in made])
        fed = Fed()
        made.append(weakref.ref(fed))
        return fed, None

    monkeypatch.setattr(core, "_federation", federation)
    monkeypatch.setattr(core, "_cell", lambda *args: {"actor_node_ids": []})
    args = parse_args([*TINY, "--policies", "deadline", "fedbuff"])
    args.seeds = 3
    runs, _ = core.study(args)
    assert len(runs) == 6
    assert alive_at_build == [[], [False], [False, False]]
