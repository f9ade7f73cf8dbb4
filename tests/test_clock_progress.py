"""The virtual clock moves when every selected device drops out (``--dropout``): a step that only
drop-outs end ends at the last drop-out instant (a deadline policy: no later than its deadline),
the next step starts there, and a run stops on ``--max-virtual-hours``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.config.sections import Config
from simulator.policies import Arrival, make_policy
from simulator.round.engine import Simulation

MakeConfig = Callable[..., Config]

#: drop-out instants of three devices that started at t = 100
LOST = [110.0, 130.0, 120.0]


@pytest.mark.parametrize(
    "name, params, end",
    [
        ("wait_for_all", {}, 130.0),
        ("first_k", {"k": 2}, 130.0),
        ("overcommit", {"k": 2}, 130.0),
        ("fedbuff", {"k": 2, "concurrency": 3}, 130.0),
        ("fedasync", {"concurrency": 3}, 130.0),
        ("deadline", {"deadline_s": 50.0}, 130.0),  # the last drop-out comes first
        ("deadline", {"deadline_s": 25.0}, 125.0),  # the deadline comes first
        ("deadline_carryover", {"deadline_s": 25.0}, 125.0),
        ("deadline_carryover", {"deadline_s": 60.0}, 130.0),
    ],
)
def test_a_step_every_device_dropped_out_of_ends_at_the_last_drop_out(
    name: str, params: dict, end: float
) -> None:
    out = make_policy(name, **params).close_step(4, 100.0, [], [], LOST)
    assert out.round_end == end
    assert out.arrived == () and out.dropped == () and out.pending == ()


def test_drop_outs_do_not_move_a_step_an_update_ends() -> None:
    """Updates that land keep ending the step as before; without drop-outs an empty step ends
    at its start (nothing happened, nothing was learned)."""
    landed = [Arrival(1, 4, 105.0)]
    assert make_policy("wait_for_all").close_step(4, 100.0, landed, [], LOST).round_end == 105.0
    p = make_policy("fedbuff", k=1, concurrency=3)
    assert p.close_step(4, 100.0, [], [Arrival(2, 3, 103.0)], LOST).round_end == 103.0
    assert make_policy("wait_for_all").close_step(4, 100.0, [], [], []).round_end == 100.0


def test_drop_out_instants_must_be_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        make_policy("wait_for_all").close_step(0, 0.0, [], [], [float("inf")])


def trace(tmp_path: Path) -> str:
    """Devices 0, 1, 2 online on [0, 10), [0, 20), [0, 30) of every 1000 s; device 0 also on
    [25, 900). Training takes hours, so every selected device drops out when it goes offline."""
    path = tmp_path / "avail.csv"
    path.write_text("device_id,start_s,end_s\n0,0,10\n0,25,900\n1,0,20\n2,0,30\n")
    return str(path)


def dropout_config(make_config: MakeConfig, tmp_path: Path, **overrides: object) -> Config:
    flat = {
        "num_clients": 3,
        "clients_per_round": 3,
        "partition": "iid",
        "availability_trace": trace(tmp_path),
        "availability_period_s": 1000.0,
        "compute_ms_median": 1e7,
        "dropout": True,
    }
    return make_config("drop", **(flat | overrides))


def test_rounds_whose_devices_all_drop_out_end_at_the_last_drop_out(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    """Round 0: devices 0, 1, 2 start at 0 and go offline at 10, 20, 30: it ends at 30.
    Round 1 starts there with device 0 (online again since 25), which goes offline at 900.
    Round 2: nobody is online at 900, so it starts at 1000 (the trace's next period), when all
    three are back, and ends at 1030."""
    sim = Simulation(dropout_config(make_config, tmp_path, rounds=3))
    try:
        recs = sim.run()
    finally:
        sim.close()
    assert [r.extra["round_start"] for r in recs] == [0.0, 30.0, 1000.0]
    assert [r.virtual_time for r in recs] == [30.0, 900.0, 1030.0]
    assert [r.selected for r in recs] == [[0, 1, 2], [0], [0, 1, 2]]
    assert [r.extra["dropout"] for r in recs] == [[0, 1, 2], [0], [0, 1, 2]]
    assert all(r.extra["aggregated"] == 0 for r in recs)
    # each device trained until it went offline: 10 + 20 + 30, then 900 - 30
    assert recs[0].extra["wasted_device_seconds"] == pytest.approx(60.0)
    assert recs[1].extra["wasted_device_seconds"] == pytest.approx(870.0)


def test_a_deadline_ends_an_all_dropped_round_first(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    cfg = dropout_config(make_config, tmp_path, rounds=1, round_policy="deadline", deadline_s=15.0)
    sim = Simulation(cfg)
    try:
        (rec,) = sim.run()
    finally:
        sim.close()
    assert rec.extra["dropout"] == [0, 1, 2] and rec.virtual_time == 15.0


def test_a_run_of_drop_outs_stops_on_max_virtual_hours(
    make_config: MakeConfig, tmp_path: Path
) -> None:
    """Rounds 0 and 1 end at 30 and 900 s; 900 s is the 0.25 h budget, so round 2 never runs
    (it used to spin: ten rounds at t = 0)."""
    cfg = dropout_config(make_config, tmp_path, rounds=10, max_virtual_hours=0.25)
    sim = Simulation(cfg)
    try:
        recs = sim.run()
    finally:
        sim.close()
    assert [r.virtual_time for r in recs] == [30.0, 900.0]


def test_the_cli_run_of_the_report_advances_and_stops(tmp_path: Path) -> None:
    """The reported run (5 devices at 1% to 100% availability, 5 s a sample, --dropout): every
    round used to read virtual_time 0.0; now each ends later than it started and the run stops
    once an hour of virtual time has passed."""
    from simulator.cli import main

    out = tmp_path / "fx1"
    args = "--partition iid --num-clients 5 --clients-per-round 5 --rounds 10 --local-epochs 1"
    args += " --availability-low 0.01 --compute-ms-median 5000 --dropout --max-virtual-hours 1"
    args += f" --backend local --no-progress --no-plots --out {out}"
    main(args.split())
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert 0 < len(events) < 10
    for e in events:
        assert e["virtual_time"] > e["round_start"]
    starts = [e["round_start"] for e in events]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert events[-1]["virtual_time"] >= 3600.0 > events[-1]["round_start"]
