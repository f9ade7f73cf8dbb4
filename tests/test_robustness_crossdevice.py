"""benchmarks/robustness.py --scenario crossdevice: f from the cohort's binomial share, the
preset (sample weights, nearest-neighbour mixing), the scenario's settings and a shrunken grid
end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.robustness_study import cli, grid  # noqa: E402
from benchmarks.robustness_study.main import main  # noqa: E402


def test_crossdevice_f_is_the_expected_share_plus_two_binomial_std() -> None:
    # n = 100: 10 + 2*sqrt(9) = 16; 20 + 2*sqrt(16) = 28; 30 + 2*sqrt(21) = 39.17 -> 40
    assert [grid.byzantine_f(p, 100, 2.0) for p in (0.0, 0.1, 0.2, 0.3)] == [1, 16, 28, 40]
    assert grid.byzantine_f(0.3, 100) == 30  # full participation: no margin
    reg = {"krum", "bulyan"}
    mix = {"nnm_rank": "angle"}
    assert grid.defense_preset("krum", 0.3, 100, 30, reg, "crossdevice") == (
        {"f": 40, "nnm": 40, **mix},
        None,
    )
    assert grid.defense_preset("multikrum", 0.1, 100, 30, reg, "crossdevice") == (
        {"f": 16, "weighting": "samples", "nnm": 16, **mix},
        None,
    )
    # rules without f mix with the same f; rules meant for heterogeneity are left alone
    assert grid.defense_preset("median", 0.2, 100, 30, reg, "crossdevice") == (
        {"weighting": "samples", "nnm": 28, **mix},
        None,
    )
    assert grid.defense_preset("geomed", 0.2, 100, 30, reg, "crossdevice") == ({}, None)
    assert grid.defense_preset("fltrust", 0.2, 100, 30, reg, "crossdevice") == (
        {"weighting": "samples", "trust": "median"},
        None,
    )
    assert grid.defense_preset("median", 0.2, 10, 30, reg, "siren") == ({}, None)
    # Sageflow: the entropy drop against the base model, late updates on the current model;
    # the paper's E_th elsewhere
    assert grid.defense_preset("sageflow", 0.1, 100, 30, reg, "crossdevice") == (
        {"entropy_filter": "relative", "stale": "updates"},
        None,
    )
    assert grid.defense_preset("sageflow", 0.1, 20, 30, reg, "sageflow") == (
        {"entropy_threshold": 1.5},
        None,
    )
    assert grid.defense_preset("multikrum", 0.1, 10, 30, reg, "siren") == ({"f": 1}, None)
    params, na = grid.defense_preset("bulyan", 0.2, 100, 30, reg, "crossdevice")
    assert params == {"f": 28, "nnm": 28, **mix} and na == (
        "n/a (precondition): bulyan needs n >= 4f + 3 (n=100, f=28)"
    )


def test_a_users_bucket_replaces_the_presets_mixing() -> None:
    preset = {"f": 16, "weighting": "samples", "nnm": 16, "nnm_rank": "angle"}
    assert grid.over_preset(preset, {"bucket": 2}) == {
        "f": 16,
        "weighting": "samples",
        "bucket": 2,
    }
    assert grid.over_preset(preset, {"nnm_rank": "distance"}) == {**preset, "nnm_rank": "distance"}
    assert grid.over_preset({"f": 1}, {}) == {"f": 1}


def test_crossdevice_scenario_settings() -> None:
    sc = grid.SCENARIOS["crossdevice"]
    assert (
        sc["dataset"],
        sc["num_clients"],
        sc["partition"],
        sc["dirichlet_alpha"],
        sc["clients_per_round"],
        sc["local_epochs"],
        sc["malicious_mode"],
        sc["round_policy"],
    ) == ("mnist5k", 1_000_000, "virtual", 0.5, 100, 1, "fixed", "deadline_carryover")
    args = cli.parse_args(
        [
            "--attack",
            "signflip",
            "--scenario",
            "crossdevice",
            "--quick",
            "--clients-per-round",
            "1000",
        ]
    )
    assert args.fractions == [0.0, 0.1, 0.3] and args.rounds == 20
    assert args.clients_per_round == 1000
    assert cli.parse_args(["--attack", "signflip", "--scenario", "crossdevice"]).fractions == [
        0.0,
        0.1,
        0.2,
        0.3,
    ]


def test_crossdevice_grid_runs_with_per_round_preconditions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A shrunken cross-device grid end to end: a population share of attackers, rounds whose
    arrivals break Krum's precondition are skipped and counted, never a crash."""
    out = tmp_path / "cd"
    rc = main(
        [
            "--attack",
            "signflip",
            "--scenario",
            "crossdevice",
            "--defenses",
            "fedavg",
            "krum",
            "--fractions",
            "0.3",
            "--seeds",
            "1",
            "--rounds",
            "3",
            "--workers",
            "1",
            "--set",
            "num_clients=2000",
            "--clients-per-round",
            "40",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "expected attackers of a cohort of 40 + 2 binomial std" in printed
    recs = {r["defense"]: r for r in json.loads((out / "results.json").read_text())}
    assert all(r["error"] is None for r in recs.values())
    # 12 + 2*sqrt(8.4) = 17.8 -> 18, and mixing with the same f
    assert recs["krum"]["defense_params"] == {"f": 18, "nnm": 18, "nnm_rank": "angle"}
    events = [
        json.loads(x)
        for x in (out / "runs" / "signflip-krum-f0.3-s0" / "events.jsonl").read_text().splitlines()
    ]
    skipped = [e for e in events if e.get("precondition")]
    assert recs["krum"]["precondition_rounds"] == len(skipped) >= 1  # round 0: ~70% arrive
    for e in skipped:
        assert all(not v["kept"] and v["reason"] == e["precondition"] for v in e["verdicts"])
