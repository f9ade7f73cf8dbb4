"""benchmarks/straggler_study/ (report, output, plots): hand-worked metrics, targets, files, table
and plots."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.straggler_study import output, plots  # noqa: E402
from benchmarks.straggler_study import report as sr  # noqa: E402

# A deadline-with-carry-over run of 4 devices (ids 0..3), three server steps:
# step 0 [0 s, 600 s]: 0..3 start; 0 and 1 arrive and are kept; 2 is late (carried over);
#   3 goes offline (dropout); 0 and 1 trained 100 + 200 device-seconds. Not evaluated.
# step 1 [600 s, 1500 s]: 0 and 1 start and arrive; 2's stale update (staleness 1) joins:
#   3 aggregated, 1 stale; the defense keeps 0 and 2; 100 + 200 + 700 device-seconds.
# step 2 [1500 s, 2400 s]: 0 and 2 start; 0 is kept; 2 misses the deadline and is dropped:
#   its 900 device-seconds are wasted (100 + 900 resolved).
STEPS: list[dict[str, Any]] = [
    {
        "round": 0,
        "round_start": 0.0,
        "virtual_time": 600.0,
        "accuracy": None,
        "train_loss": None,
        "selected": [0, 1, 2, 3],
        "participants": [0, 1],
        "aggregated": 2,
        "stale": [],
        "staleness": [0, 0],
        "dropped": [],
        "dropout": [3],
        "device_seconds": 300.0,
        "wasted_device_seconds": 0.0,
        "wall_time": 1.0,
    },
    {
        "round": 1,
        "round_start": 600.0,
        "virtual_time": 1500.0,
        "accuracy": 0.5,
        "train_loss": 1.2,
        "selected": [0, 1],
        "participants": [0, 2],
        "aggregated": 3,
        "stale": [2],
        "staleness": [0, 0, 1],
        "dropped": [],
        "dropout": [],
        "device_seconds": 1000.0,
        "wasted_device_seconds": 0.0,
    },
    {
        "round": 2,
        "round_start": 1500.0,
        "virtual_time": 2400.0,
        "accuracy": 0.6,
        "train_loss": 0.9,
        "selected": [0, 2],
        "participants": [0],
        "aggregated": 1,
        "stale": [],
        "staleness": [0],
        "dropped": [2],
        "dropout": [],
        "device_seconds": 1000.0,
        "wasted_device_seconds": 900.0,
    },
]


def _run(hours_acc: list[tuple[float, float | None]]) -> list[dict[str, Any]]:
    """Events of consecutive steps ending at the given virtual hours, one device each."""
    out, start = [], 0.0
    for i, (h, acc) in enumerate(hours_acc):
        out.append(
            {
                "round": i,
                "round_start": start,
                "virtual_time": h * 3600,
                "accuracy": acc,
                "selected": [i],
                "participants": [i],
                "aggregated": 1,
            }
        )
        start = h * 3600
    return out


# two policies x two seeds; final accuracies A: 0.8, 0.6 (mean 0.7), B: 0.5, 0.5 (mean 0.5)
# -> best 0.7, targets 0.8 x 0.7 = 0.56 and 0.9 x 0.7 = 0.63
STUDY: list[dict[str, Any]] = [
    {
        "policy": "A",
        "seed": 0,
        "events": _run([(1, 0.5), (2, 0.6), (3, 0.8)]),
        "quartiles": {"slow_q_accuracy": 0.4, "fast_q_accuracy": 0.9},
        "run_seconds": 12.5,
    },
    {
        "policy": "A",
        "seed": 1,
        "events": _run([(1, 0.6), (2, 0.6)]),
        "quartiles": {"slow_q_accuracy": 0.6, "fast_q_accuracy": 0.8},
        "run_seconds": 10.0,
    },
    {"policy": "B", "seed": 0, "events": _run([(1, 0.5), (2, 0.5)])},
    {"policy": "B", "seed": 1, "events": _run([(0.5, 0.57), (1, 0.5)])},
]


def test_gini_hand_cases() -> None:
    assert sr.gini([0, 0, 0, 4]) == pytest.approx(0.75)
    assert sr.gini([1, 1, 1, 1]) == 0.0
    # [1, 2, 3]: C = 1, 3, 6 -> (4 - 2 * 10 / 6) / 3 = 2/9 (= sum|xi-xj| 8 / (2 * 9 * 2))
    assert sr.gini([3, 1, 2]) == pytest.approx(2 / 9)
    assert sr.gini([0, 0, 0]) == 0.0 and sr.gini([]) == 0.0
    with pytest.raises(ValueError, match="non-negative"):
        sr.gini([1, -1])
    with pytest.raises(ValueError, match="finite"):
        sr.gini([1, float("nan")])


def test_run_metrics_hand_worked() -> None:
    m = sr.run_metrics(STEPS, quartiles={"slow_q_accuracy": 0.3, "fast_q_accuracy": 0.7})
    assert m["final_accuracy"] == 0.6 and m["best_accuracy"] == 0.6
    assert m["curve"] == [(1, pytest.approx(1500 / 3600), 0.5), (2, pytest.approx(2 / 3), 0.6)]
    assert m["round_durations_s"].tolist() == [600.0, 900.0, 900.0]
    assert m["rounds"] == 3 and m["virtual_hours"] == pytest.approx(2 / 3)
    assert m["stale_share"] == pytest.approx(1 / 6)  # 1 stale of 2 + 3 + 1
    assert m["wasted_compute_share"] == pytest.approx(900 / 2300)
    assert m["dropout_share"] == pytest.approx(1 / 8)  # 1 of 4 + 2 + 2 started
    assert m["device_seconds"] == 2300.0 and m["aggregated_updates"] == 6
    # device 3 was selected but never kept: it counts 0
    assert m["participation"] == {0: 3, 1: 1, 2: 1, 3: 0}
    assert m["participation_histogram"] == {0: 1, 1: 2, 3: 1}
    # [0, 1, 1, 3]: C = 0, 1, 2, 5 -> (5 - 2 * 8 / 5) / 4 = 0.45
    assert m["participation_gini"] == pytest.approx(0.45)
    assert m["slow_q_accuracy"] == 0.3 and m["fast_q_accuracy"] == 0.7


def test_run_metrics_old_run_and_bad_input() -> None:
    old = [
        {"round": 0, "virtual_time": 100.0, "accuracy": 0.3, "participants": [5]},
        {"round": 1, "virtual_time": 250.0, "accuracy": None, "participants": [5, 6]},
    ]
    m = sr.run_metrics(old)
    assert m["round_durations_s"].tolist() == [100.0, 150.0]  # starts where the last ended
    assert m["stale_share"] is None and m["wasted_compute_share"] is None
    assert m["dropout_share"] is None
    assert m["participation"] == {5: 2, 6: 1}
    assert m["participation_gini"] == pytest.approx((3 - 2 * 4 / 3) / 2)  # [1, 2] -> 1/6
    unevaluated = sr.run_metrics([{"virtual_time": 1.0, "accuracy": None}])
    assert unevaluated["final_accuracy"] is None and unevaluated["curve"] == []
    assert unevaluated["participation_gini"] is None
    with pytest.raises(ValueError, match="no round events"):
        sr.run_metrics([])
    with pytest.raises(ValueError, match="before round_start"):
        sr.run_metrics([{"round_start": 10.0, "virtual_time": 5.0}])
    with pytest.raises(ValueError, match="'virtual_time'"):
        sr.run_metrics([{"round": 0}])
    with pytest.raises(ValueError, match="'stale' must be a list"):
        sr.run_metrics([{"virtual_time": 1.0, "stale": 3}])
    with pytest.raises(ValueError, match="collides"):
        sr.run_metrics(STEPS, quartiles={"rounds": 1})


def test_time_to_target() -> None:
    curve = [(0, 0.5, 0.4), (1, 1.0, 0.7), (2, 1.5, 0.65), (3, 2.0, 0.9)]
    assert sr.time_to_target(curve, 0.6) == 1.0  # the first step reaching it, not later
    assert sr.time_to_target(curve, 0.7) == 1.0  # >= counts
    assert sr.time_to_target(curve, 0.85) == 2.0
    assert sr.time_to_target(curve, 0.95) is None  # never reached
    assert sr.time_to_target(curve, None) is None
    assert sr.time_to_target([], 0.1) is None


def test_study_results_targets_by_hand() -> None:
    recs = sr.study_results(STUDY)
    assert [(r["policy"], r["seed"]) for r in recs] == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    assert list(recs[0])[:7] == [
        "policy",
        "seed",
        "final_accuracy",
        "time_to_target_h",
        "stale_share",
        "wasted_compute_share",
        "participation_gini",
    ]
    assert recs[0]["targets"] == {"0.8": pytest.approx(0.56), "0.9": pytest.approx(0.63)}
    # A s0 reaches 0.56 at 0.6 (2 h) and 0.63 at 0.8 (3 h); A s1 tops at 0.6: 0.63 never
    assert recs[0]["time_to_target_h"] == {"0.8": 2.0, "0.9": 3.0}
    assert recs[1]["time_to_target_h"] == {"0.8": 1.0, "0.9": None}
    assert recs[2]["time_to_target_h"] == {"0.8": None, "0.9": None}
    assert recs[3]["time_to_target_h"] == {"0.8": 0.5, "0.9": None}  # 0.57 at 0.5 h
    assert [r["final_accuracy"] for r in recs] == [0.8, 0.6, 0.5, 0.5]
    assert recs[0]["rounds"] == 3 and recs[0]["virtual_hours"] == 3.0
    assert recs[0]["median_round_s"] == 3600.0 and recs[0]["stale_share"] == 0.0
    assert recs[0]["slow_q_accuracy"] == 0.4 and recs[2]["fast_q_accuracy"] is None
    assert recs[0]["run_seconds"] == 12.5 and recs[2]["run_seconds"] is None
    assert recs[0]["wasted_compute_share"] is None and recs[0]["participation_gini"] == 0.0


def test_study_results_round_percentiles_and_errors() -> None:
    # durations 100, 200, 300, 400, 1000 s: median 300; p90 at rank 0.9 * 4 = 3.6 ->
    # 400 + 0.6 * (1000 - 400) = 760
    ends = np.cumsum([100, 200, 300, 400, 1000]) / 3600
    rec = sr.study_results([{"policy": "p", "seed": 0, "events": _run([(h, None) for h in ends])}])[
        0
    ]
    assert rec["median_round_s"] == pytest.approx(300.0)
    assert rec["p90_round_s"] == pytest.approx(760.0)
    assert rec["targets"] == {"0.8": None, "0.9": None}  # nothing evaluated anywhere
    with pytest.raises(ValueError, match="no runs"):
        sr.study_results([])
    with pytest.raises(ValueError, match="lacks 'events'"):
        sr.study_results([{"policy": "p", "seed": 0}])
    with pytest.raises(ValueError, match="duplicate run policy=A seed=0"):
        sr.study_results([STUDY[0], STUDY[0]])


def test_write_results_strict_json_and_csv(tmp_path: Path) -> None:
    recs = sr.study_results(STUDY)
    recs[3]["run_seconds"] = float("nan")  # must come out as null, never NaN
    paths = output.write_results(recs, tmp_path / "out", extra={"config": {"devices": 100000}})
    assert [p.name for p in paths] == ["results.json", "results.csv"]

    def no_constants(name: str) -> None:
        raise AssertionError(f"non-strict JSON constant {name}")

    doc = json.loads(paths[0].read_text(), parse_constant=no_constants)
    assert doc["config"] == {"devices": 100000} and len(doc["policies"]) == 4
    assert doc["policies"][1]["time_to_target_h"] == {"0.8": 1.0, "0.9": None}
    assert doc["policies"][3]["run_seconds"] is None
    with paths[1].open() as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames is not None
    assert reader.fieldnames[:8] == [
        "policy",
        "seed",
        "final_accuracy",
        "ttt_0.8_h",
        "ttt_0.9_h",
        "stale_share",
        "wasted_compute_share",
        "participation_gini",
    ]
    assert {"target_0.8", "target_0.9", "median_round_s", "slow_q_accuracy"} <= set(
        reader.fieldnames
    )
    assert [r["ttt_0.9_h"] for r in rows] == ["3.0", "", "", ""]
    assert float(rows[0]["target_0.8"]) == pytest.approx(0.56)
    with pytest.raises(ValueError, match="'policies'"):
        output.write_results(recs, tmp_path, extra={"policies": []})


def test_table_every_policy_and_partial_targets() -> None:
    text = output.table(sr.study_results(STUDY))
    lines = text.splitlines()
    assert "ttt 0.8 (h)" in lines[0] and "median round s" in lines[0]
    a = next(ln for ln in lines if ln.startswith("A "))
    b = next(ln for ln in lines if ln.startswith("B "))
    # A: final (0.8 + 0.6) / 2; ttt 0.8 (2 + 1) / 2; ttt 0.9 reached by seed 0 only
    assert a.split()[:5] == ["A", "2", "0.700", "1.5", "3"] and "(1/2)" in a  # 3 digits
    assert "0.400" not in a and "0.500" in a and "0.850" in a  # slow-q (0.4+0.6)/2, fast-q
    assert b.split()[:6] == ["B", "2", "0.500", "0.5", "(1/2)", "n/a"]
    assert len({len(ln) for ln in lines}) == 1  # aligned: every line as wide as the header


def test_plot_study_writes_pngs(tmp_path: Path) -> None:
    runs = [*STUDY, {"policy": "C", "seed": 0, "events": _run([(1, None), (2, None)])}]
    recs = sr.study_results(runs)
    paths = plots.plot_study(runs, recs, tmp_path / "plots")
    names = {p.name for p in paths}
    assert names == {
        "accuracy_vs_time.png",
        "accuracy_vs_round.png",
        "round_durations.png",
        "participation_hist.png",
        "quartile_accuracy.png",
    }
    for p in paths:
        assert p.is_file() and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # nothing evaluated anywhere, no quartiles, a zero-length step: still five plots
    lone = [
        {
            "policy": "C",
            "seed": 0,
            "events": [{"round": 0, "round_start": 0.0, "virtual_time": 0.0}],
        }
    ]
    paths = plots.plot_study(lone, sr.study_results(lone), tmp_path / "empty")
    assert len(paths) == 5 and all(p.stat().st_size > 0 for p in paths)
