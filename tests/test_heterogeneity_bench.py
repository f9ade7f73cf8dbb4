"""benchmarks/heterogeneity.py (benchmarks/heterogeneity_study/): the verdict rule on hand-made
numbers, rounds-to-baseline, the case registry and its checks, the JSON schema of a tiny run, and
the CLI's errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.heterogeneity_study import cli, core, plots, stats  # noqa: E402
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


# ------------------------------------------------------------------------------ verdict rule


def test_one_std_rule_and_wins_are_kept() -> None:
    """method 0.80, 0.82, 0.84: mean 0.82, sample std 0.02; baseline 0.70, 0.75, 0.80: mean
    0.75, std 0.05. Gain 0.07 > max(0.02, 0.05) -> the 1-std rule holds; wins 3/3; the paired
    diffs 0.10, 0.07, 0.04 (mean 0.07, std 0.03) give p = 1/8: inconclusive with 3 seeds."""
    v = stats.verdict([0.80, 0.82, 0.84], [0.70, 0.75, 0.80], "higher")
    assert v["method_mean"] == pytest.approx(0.82) and v["method_std"] == pytest.approx(0.02)
    assert v["baseline_mean"] == pytest.approx(0.75)
    assert v["baseline_std"] == pytest.approx(0.05)
    assert v["gain"] == pytest.approx(0.07) and v["reproduced"] is True
    assert v["wins"] == 3  # 0.80>0.70, 0.82>0.75, 0.84>0.80
    assert v["paired_diffs"] == pytest.approx([0.10, 0.07, 0.04])
    assert v["paired_diff_mean"] == pytest.approx(0.07)
    assert v["paired_diff_std"] == pytest.approx(0.03)
    assert v["p_value"] == 0.125 and v["verdict"] == "inconclusive"
    # baseline 0.70, 0.78, 0.86: std 0.08 > gain 0.04; the third seed lost
    v = stats.verdict([0.80, 0.82, 0.84], [0.70, 0.78, 0.86], "higher")
    assert v["gain"] == pytest.approx(0.04) and v["reproduced"] is False and v["wins"] == 2
    with pytest.raises(ValueError, match="direction must be"):
        stats.verdict([1.0], [0.0], "up")
    with pytest.raises(ValueError, match="paired values: 2 method vs 1 baseline"):
        stats.verdict([0.8, 0.9], [0.7], "higher")


def test_sign_flip_p_by_hand() -> None:
    """Exact enumeration of the 2^n sign patterns, the observed one included.

    [1, 2, 3]: pattern sums 6, 4, 2, 0, 0, -2, -4, -6; only the observed reaches 6 -> 1/8.
    [3, -1, 2, 2, 1]: |d| sums to 9, the observed sum is 7 = 9 - 2 * 1; a pattern reaches it
    when the |d| it flips sum to <= 1: none, the first 1, the second 1 -> 3/32.
    [1, 1, -1]: sums 3 (x1), 1 (x3), -1 (x3), -3 (x1); >= 1: 4 -> 1/2 (ties count).
    [1, 1, 0]: flipping the 0 changes nothing: 2 patterns reach 2 -> 2/8.
    [0, 0, 0]: every pattern ties -> 1. [-1, -2, -3]: every pattern reaches -6 -> 1.
    """
    assert stats.sign_flip_p([1, 2, 3]) == 1 / 8
    assert stats.sign_flip_p([3, -1, 2, 2, 1]) == 3 / 32
    assert stats.sign_flip_p([1, 1, -1]) == 0.5
    assert stats.sign_flip_p([1, 1, 0]) == 0.25
    assert stats.sign_flip_p([0, 0, 0]) == 1.0
    assert stats.sign_flip_p([-1, -2, -3]) == 1.0
    # floating-point ties: 0.1 + 0.2 - 0.3 is 5.6e-17, not 0, yet the patterns tying with the
    # observed one still count
    # ([1, 2, -3]: sum 0 = 6 - 2 * 3; flipped |d| <= 3: {}, {1}, {2}, {3}, {1, 2} -> 5/8)
    assert stats.sign_flip_p([0.1, 0.2, -0.3]) == stats.sign_flip_p([1, 2, -3]) == 5 / 8
    assert stats.sign_flip_p([1, 2, 3, 4, 5]) == 1 / 32
    assert stats.smallest_p(3) == 1 / 8 and stats.smallest_p(5) == 1 / 32
    with pytest.raises(ValueError, match="at most 16 seeds"):
        stats.sign_flip_p([1.0] * 17)


def test_paired_verdicts_by_hand() -> None:
    """Method 4, 0, 3, 3, 2 vs baseline 1 on 5 seeds: diffs 3, -1, 2, 2, 1, mean 1.4, std
    sqrt(9.2 / 4) = 1.5166, p = 3/32 > 0.05 -> inconclusive. Diffs 1..5: p = 1/32 ->
    reproduced. Predicted lower, the same numbers swapped give the same diffs. A method that
    loses on average is contradicted, and so is a tie."""
    v = stats.verdict([4, 0, 3, 3, 2], [1, 1, 1, 1, 1], "higher")
    assert v["paired_diffs"] == [3, -1, 2, 2, 1]
    assert v["paired_diff_mean"] == pytest.approx(1.4)
    assert v["paired_diff_std"] == pytest.approx((9.2 / 4) ** 0.5)
    assert v["p_value"] == 3 / 32 and v["verdict"] == "inconclusive" and v["wins"] == 4
    w = stats.verdict([1, 1, 1, 1, 1], [4, 0, 3, 3, 2], "lower")
    assert w["paired_diffs"] == [3, -1, 2, 2, 1] and w["p_value"] == 3 / 32
    v = stats.verdict([2, 3, 4, 5, 6], [1, 1, 1, 1, 1], "higher")
    assert v["p_value"] == 1 / 32 and v["verdict"] == "reproduced"
    # rounds to target: fewer is the claim; 10, 12, 14, 11, 9 vs 20, 21, 22, 20, 19
    v = stats.verdict([10, 12, 14, 11, 9], [20, 21, 22, 20, 19], "lower")
    assert v["paired_diffs"] == [10, 9, 8, 9, 10] and v["verdict"] == "reproduced"
    # the method behind on average: diffs -0.1, 0.05, -0.02 (mean -0.0233) -> contradicted
    v = stats.verdict([0.6, 0.75, 0.68], [0.7, 0.7, 0.7], "higher")
    assert v["paired_diff_mean"] == pytest.approx(-0.07 / 3)
    assert v["p_value"] == 0.75 and v["verdict"] == "contradicted"
    assert stats.verdict([0.5], [0.5], "higher")["verdict"] == "contradicted"  # a tie
    assert stats.classify(0.01, 0.05) == "reproduced"
    assert stats.classify(0.01, 0.0625) == "inconclusive"


def test_paired_verdicts_with_a_margin_by_hand() -> None:
    """A claim with a size ("+2 or more") tests diff - margin. Diffs 3, 4, 5, 6, 7 (method
    4..8 vs 1): margin 2 -> 1..5, p = 1/32, reproduced; margin 4 -> -1, 0, 1, 2, 3: mean 1,
    and a flip keeps the sum >= 5 when the flipped values sum to <= 0: {}, {-1}, {0}, {-1, 0},
    {-1, 1}, {-1, 0, 1}, p = 6/32, inconclusive; margin 6 -> -3..1, mean -1, contradicted. The
    raw diffs are reported unchanged. "At most 2 lost" (margin -2): diffs -1, -1, -1 -> 1, 1,
    1, p = 1/8. The one-std rule judges gain - margin: gain 5, stds 1.58 / 0 -> yes at
    margin 2, no at 4."""
    m, b = [4, 5, 6, 7, 8], [1, 1, 1, 1, 1]
    v = stats.verdict(m, b, "higher", margin=2)
    assert v["paired_diffs"] == [3, 4, 5, 6, 7] and v["paired_diff_mean"] == 5
    assert v["p_value"] == 1 / 32 and v["verdict"] == "reproduced" and v["margin"] == 2
    assert v["reproduced"]
    v = stats.verdict(m, b, "higher", margin=4)
    assert v["p_value"] == 6 / 32 and v["verdict"] == "inconclusive"
    assert v["wins"] == 3  # seeds ahead by more than the margin: diffs 5, 6, 7
    assert not v["reproduced"]
    v = stats.verdict(m, b, "higher", margin=6)
    assert v["verdict"] == "contradicted" and v["paired_diff_mean"] == 5
    v = stats.verdict([1, 2, 3], [2, 3, 4], "higher", margin=-2)
    assert v["paired_diffs"] == [-1, -1, -1] and v["p_value"] == 1 / 8
    assert v["verdict"] == "inconclusive"
    with pytest.raises(ValueError, match="margin must be finite"):
        stats.verdict(m, b, "higher", margin=float("nan"))


def test_compare_pairs_seeds_and_marks_failed_runs() -> None:
    """Two seeds: a comparison whose runs all finished gets the paired fields; one whose
    baseline run of seed 1 failed pairs seed 0 only and is 'failed' with the run's error."""
    comparisons = (Comparison("b", "a"), Comparison("a", "c"))
    case = Case("x", "claim", {}, {"a": {}, "b": {}, "c": {}}, comparisons)

    def run(acc: float | None, error: str | None = None) -> dict[str, object]:
        return {"error": error, "final_accuracy": acc}

    index = {("x", arm, s): f"{arm}{s}" for arm in "abc" for s in (0, 1)}
    records = {
        "a0": run(0.5),
        "a1": run(0.6),
        "b0": run(0.7),
        "b1": run(0.9),
        "c0": run(0.5),
        "c1": run(None, "RuntimeError: boom"),
    }
    b, a = core.compare([case], index, records, 2, quick=True)
    assert b["method_values"] == [0.7, 0.9] and b["baseline_values"] == [0.5, 0.6]
    assert b["paired_diffs"] == pytest.approx([0.2, 0.3]) and b["p_value"] == 0.25
    assert b["verdict"] == "inconclusive" and b["error"] is None
    assert a["method_values"] == [0.5] and a["baseline_values"] == [0.5]
    assert a["verdict"] == "failed" and a["error"] == "RuntimeError: boom"
    assert a["reproduced"] is False


def test_rounds_to_baseline_pairs_seeds() -> None:
    """Baseline final accuracy 0.6 (reached first at round 3 of 4); the method reaches 0.6 at
    round 2; a second method never does -> rounds + 1 = 5."""
    base = {
        "final_accuracy": 0.6,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.2, 0.5, 0.6, 0.6]},
    }
    fast = {
        "final_accuracy": 0.7,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.3, 0.65, 0.7, 0.7]},
    }
    slow = {
        "final_accuracy": 0.5,
        "rounds": 4,
        "curves": {"round": [1, 2, 3, 4], "accuracy": [0.1, 0.2, 0.4, 0.5]},
    }
    c = Comparison("m", "b", "rounds_to_baseline", "lower")
    assert core.metric_values(c, [fast, slow], [base, base]) == ([2.0, 5.0], [3.0, 3.0])


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


# ------------------------------------------------------------------------------ the CLI


def test_unknown_case_exits_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--case", "fedbn", "--case", "nope"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert err == f"error: unknown case 'nope'; valid: {list(CASES)}"
    with pytest.raises(SystemExit) as e:
        main(["--seeds", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--seeds", "17"])
    assert e.value.code == 2
    assert "--seeds must be in 1..16" in capsys.readouterr().err
    assert cli.parse_args(["--quick"]).seeds == 3 and cli.parse_args([]).seeds == 5


def test_json_schema_of_a_tiny_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The fedbn case, 1 seed, 2 rounds, in this process: the JSON has one entry per
    comparison with the required keys, the CSV and the plot exist; ``--no-progress`` leaves
    no progress bar on stderr, one line per finished run instead."""
    case = CASES["fedbn"]
    use_case(
        monkeypatch,
        Case(case.name, case.claim, case.base, case.arms, case.comparisons, quick={"rounds": 2}),
    )
    out, js, cs = tmp_path / "out", tmp_path / "r.json", tmp_path / "r.csv"
    rc = main(
        [
            "--case",
            "fedbn",
            "--quick",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
            "--json",
            str(js),
            "--csv",
            str(cs),
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr()
    assert "runs:" not in printed.err
    # instead, one line per finished run (fedbn's quick case: 3 arms x 1 seed)
    lines = [ln for ln in printed.err.splitlines() if ln.startswith("run ")]
    assert [ln.split(" (")[0].split(" ", 2)[1] for ln in lines] == ["1/3", "2/3", "3/3"]
    assert "note: with 1 seed(s) the smallest possible p is 1/2 = 0.500 > 0.05" in printed.out
    assert "paired diff" in printed.out and "1-std" in printed.out
    data = json.loads(js.read_text())
    assert list(data) == ["cases"] and len(data["cases"]) == 3
    required = {
        "case",
        "method",
        "baseline",
        "method_mean",
        "method_std",
        "baseline_mean",
        "baseline_std",
        "reproduced",
        "paired_diff_mean",
        "paired_diff_std",
        "p_value",
        "verdict",
    }
    for row in data["cases"]:
        assert required <= set(row)
        assert row["case"] == "fedbn" and row["error"] is None
        assert isinstance(row["reproduced"], bool)
        assert row["method_std"] == 0.0 and 0.0 <= row["method_mean"] <= 1.0
        assert row["paired_diff_std"] == 0.0 and row["p_value"] in (0.5, 1.0)
        assert row["verdict"] in ("inconclusive", "contradicted")
    assert [(r["method"], r["baseline"]) for r in data["cases"]] == [
        ("fedbn", "fedavg"),
        ("fedbn", "fedprox"),
        ("fedbn", "fedavg"),
    ]
    assert len(cs.read_text().splitlines()) == 4
    assert (out / "fedbn.png").is_file()
    assert (out / "runs" / "fedbn" / "fedbn-s0" / "events.jsonl").is_file()


def test_plot_panels_follow_the_comparisons() -> None:
    """Arms that comparisons connect share a panel: fedfm's three partitions give three panels
    of three; fedufo's arms are all compared with fedavg, one panel; an arm in no comparison
    is a panel of its own."""
    assert plots.panels(CASES["fedfm"], list(CASES["fedfm"].arms)) == [
        ["fedavg-b0.5", "moon-b0.5", "fedfm-b0.5"],
        ["fedavg-miss3", "moon-miss3", "fedfm-miss3"],
        ["fedavg-miss7", "moon-miss7", "fedfm-miss7"],
    ]
    assert plots.panels(CASES["fedufo"], list(CASES["fedufo"].arms)) == [
        ["fedavg", "feduad", "fedufo-nods", "fedufo"]
    ]
    assert plots.panels(CASES["fedufo"], ["lonely", "fedufo", "fedavg"]) == [
        ["lonely"],
        ["fedufo", "fedavg"],
    ]
