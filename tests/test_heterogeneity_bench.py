"""benchmarks/heterogeneity.py (benchmarks/heterogeneity_study/): the case registry and its
checks and shared runs (the CLI and its JSON: test_heterogeneity_cli.py; the verdict rule:
test_heterogeneity_stats.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heterogeneity_study import cli, core  # noqa: E402
from benchmarks.heterogeneity_study.cases import (  # noqa: E402
    CASES,
    Case,
    CaseError,
    Comparison,
    versus,
)
from benchmarks.heterogeneity_study.main import main  # noqa: E402
from simulator.registry import Registry  # noqa: E402


def use_case(monkeypatch: pytest.MonkeyPatch, case: Case) -> None:
    """Make the command line see ``case`` in place of the registered case of its name."""
    reg: Registry[Case] = Registry("heterogeneity case")
    for name, c in CASES.items():
        reg.register(case if name == case.name else c)
    monkeypatch.setattr(cli, "CASES", reg)


# ------------------------------------------------------------------------------ registry


def test_registry_discovers_one_case_per_file() -> None:
    folder = ROOT / "benchmarks" / "heterogeneity_study" / "cases"
    files = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")} - {"base"}
    assert set(CASES) == files
    assert {"fedbn", "fedprox", "scaffold", "feddyn"} <= set(CASES)
    before = CASES.items()
    CASES.discover("benchmarks.heterogeneity_study.cases")  # a second discovery adds nothing
    assert CASES.items() == before
    fedprox = CASES["fedprox"]
    assert [(c.method, c.baseline) for c in fedprox.comparisons] == [
        ("fedprox-mu1-st0", "fedavg-drop-st0"),
        ("fedprox-mu1-st50", "fedavg-drop-st50"),
        ("fedprox-mu1-st90", "fedavg-drop-st90"),
    ]
    assert fedprox.flat("fedavg-drop-st90", quick=True)["straggler_fraction"] == 0.9


def test_a_dropped_case_file_is_discovered_and_registered_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package outside the repository (a tmp dir on sys.path) with one case file and one
    private helper file: discovery imports the case file, whose ``CASES.register`` puts its
    case under its name; the ``_helper`` module is not imported."""
    from benchmarks.heterogeneity_study.cases import base

    pkg = tmp_path / "extra_cases_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_helper.py").write_text("raise RuntimeError('a private module was imported')\n")
    (pkg / "tiny.py").write_text(
        "from benchmarks.heterogeneity_study.cases.base import CASES, Case, versus\n"
        "CASE = CASES.register(Case(name='tiny', claim='b beats a',\n"
        "                           base={'dataset': 'digits', 'rounds': 50},\n"
        "                           arms={'a': {}, 'b': {'algorithm': 'fedprox'}},\n"
        "                           comparisons=versus('a', ['b']),\n"
        "                           quick={'rounds': 2}, full={'rounds': 9}))\n"
    )
    fresh: Registry[Case] = Registry("heterogeneity case")
    monkeypatch.setattr(base, "CASES", fresh)  # the file registers here, not in CASES
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh.discover("extra_cases_pkg")
    assert fresh.names() == ["tiny"]
    tiny = fresh.get("tiny")
    assert tiny.claim == "b beats a"
    # RUN_DEFAULTS | base | quick (or full) | arm
    assert tiny.flat("b", quick=True) == {
        "backend": "local",
        "progress": False,
        "plots": False,
        "dataset": "digits",
        "rounds": 2,
        "algorithm": "fedprox",
    }
    assert tiny.flat("a", quick=False)["rounds"] == 9
    with pytest.raises(ValueError, match=r"unknown heterogeneity case 'nope'; valid: \['tiny'\]"):
        fresh.get("nope")
    assert "tiny" not in CASES


def test_case_declarations_are_checked() -> None:
    arms = {"a": {}, "b": {"algorithm": "fedprox"}}
    with pytest.raises(CaseError, match=r"unknown arm 'c'; arms: \['a', 'b'\]"):
        Case("x", "claim", {}, arms, versus("a", ["c"]))
    with pytest.raises(CaseError, match="unknown metric 'speed'"):
        Comparison("b", "a", "speed")
    with pytest.raises(CaseError, match="direction must be one of"):
        Comparison("b", "a", direction="up")
    with pytest.raises(CaseError, match="'seed' is set by the harness"):
        Case("x", "claim", {"seed": 1}, arms, versus("a", ["b"]))
    with pytest.raises(
        CaseError,
        match=r"scores names 'speed'; valid: \['feature_silhouette', 'upload_bytes_per_round', "
        r"'class_affinity'\]",
    ):
        Case("x", "claim", {}, arms, versus("a", ["b"]), scores={"speed": len})
    with pytest.raises(CaseError, match=r"b vs a on 'feature_silhouette' needs scores"):
        Case("x", "claim", {}, arms, versus("a", ["b"], "feature_silhouette"))


def test_arm_sizes_override_the_case_sizes() -> None:
    """An arm's own quick/full overrides come after the case's and the arm's; other arms keep
    the case's sizes; unknown arms and harness keys are refused. The moon case's CNN arms run
    their own rounds with E = 10, its MLP arms the shared 20/30 rounds with E = 5."""
    arms = {"a": {"lr": 0.1}, "b": {"algorithm": "fedprox", "rounds": 7}}
    c = Case(
        "x",
        "claim",
        {"rounds": 1, "lr": 0.5},
        arms,
        versus("a", ["b"]),
        quick={"rounds": 2},
        full={"rounds": 9},
        arm_quick={"b": {"rounds": 3}},
        arm_full={"b": {"rounds": 4, "lr": 0.2}},
    )
    assert [c.flat(a, True)["rounds"] for a in "ab"] == [2, 3]
    assert [c.flat(a, False)["rounds"] for a in "ab"] == [9, 4]
    assert [c.flat(a, False)["lr"] for a in "ab"] == [0.1, 0.2]
    with pytest.raises(CaseError, match=r"arm sizes name unknown arm 'z'; arms: \['a', 'b'\]"):
        Case("x", "claim", {}, arms, versus("a", ["b"]), arm_full={"z": {}})
    with pytest.raises(CaseError, match="'out' is set by the harness"):
        Case("x", "claim", {}, arms, versus("a", ["b"]), arm_quick={"a": {"out": "d"}})
    moon = CASES["moon"]
    cnn, mlp = moon.flat("cnn-moon-b0.5", False), moon.flat("moon-b0.5", False)
    assert (cnn["model"], cnn["local_epochs"], cnn["algorithm_params"]) == ("cnn", 10, {"mu": 5.0})
    assert cnn["rounds"] == moon.arm_full["cnn-moon-b0.5"]["rounds"] != mlp["rounds"] == 30
    head = moon.flat("cnn-fedavg-head-b0.5", False)
    assert head["algorithm_params"] == {"mu": 0.0} and head["model"] == "cnn"
    assert {k: v for k, v in head.items() if k != "algorithm_params"} == {
        k: v for k, v in cnn.items() if k != "algorithm_params"
    }


def test_shared_runs_run_once(tmp_path: Path) -> None:
    """scaffold and feddyn declare the same FedAvg arm: 2 seeds x (fedavg, scaffold, feddyn)
    = 6 distinct runs, not 8."""
    jobs, index = core.make_jobs([CASES["scaffold"], CASES["feddyn"]], True, 2, tmp_path)
    assert len(jobs) == 6 and len(index) == 8
    assert index[("scaffold", "fedavg", 1)] == index[("feddyn", "fedavg", 1)]
    assert index[("scaffold", "fedavg", 0)] != index[("scaffold", "fedavg", 1)]


def test_shared_runs_carry_every_cases_scores(tmp_path: Path) -> None:
    """moon (8 arms: 2 CNN + 6 MLP) and fedfm (9 arms) share the Dirichlet(0.5) MLP fedavg
    and moon runs: 15 distinct runs per seed; the shared ones carry fedfm's silhouette score
    even though moon, which has no scores, declared them first; moon's own fedavg-head runs
    carry none."""
    from benchmarks.heterogeneity_study.cases.fedfm import silhouette

    jobs, index = core.make_jobs([CASES["moon"], CASES["fedfm"]], True, 1, tmp_path)
    assert len(jobs) == 15
    by_key = {j["key"]: j for j in jobs}
    shared = by_key[index[("moon", "fedavg-b0.5", 0)]]
    assert index[("fedfm", "fedavg-b0.5", 0)] == shared["key"]
    assert shared["scores"] == {"feature_silhouette": silhouette}
    assert shared["case"] == "moon"
    assert by_key[index[("moon", "fedavg-head-b0.5", 0)]]["scores"] == {}


def test_scored_metric_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A fedfm-like case on digits, 2 rounds, 1 seed: the silhouette rows come out with the
    scores the harness computed, and each equals the score recomputed from the run's
    checkpoint (the value the harness stored is the run's, not another run's); the progress
    bar counts the 2 runs on stderr."""
    from benchmarks.heterogeneity_study.cases.fedfm import silhouette

    base = {
        "dataset": "digits",
        "num_clients": 4,
        "clients_per_round": 4,
        "model": "mlp",
        "hidden": 16,
        "local_epochs": 1,
        "rounds": 2,
        "checkpoint_every": 2,
    }
    arms = {
        "fedavg": {"algorithm": "fedavg"},  # FedFM with its loss on from round 1
        "fedfm": {"algorithm": "fedfm", "algorithm_params": {"start_round": 1}},
    }
    case = Case(
        "fedfm",
        "claim",
        base,
        arms,
        versus("fedavg", ["fedfm"], "feature_silhouette"),
        scores={"feature_silhouette": silhouette},
    )
    use_case(monkeypatch, case)
    out, js = tmp_path / "out", tmp_path / "r.json"
    rc = main(
        [
            "--case",
            "fedfm",
            "--quick",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
            "--json",
            str(js),
        ]
    )
    assert rc == 0
    err = capsys.readouterr().err
    assert "runs: 100%" in err and "2/2" in err
    (row,) = json.loads(js.read_text())["cases"]
    assert row["metric"] == "feature_silhouette" and row["error"] is None
    runs = out / "runs" / "fedfm"
    assert row["method_values"] == [pytest.approx(silhouette(runs / "fedfm-s0"))]
    assert row["baseline_values"] == [pytest.approx(silhouette(runs / "fedavg-s0"))]
    assert -1.0 <= row["method_mean"] <= 1.0
    assert row["method_values"] != row["baseline_values"]
