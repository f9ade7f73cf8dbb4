"""benchmarks/robustness.py --defense-param over the scenario's preset: the precondition judged
on the parameters the run uses, a user's alternative replacing the preset's, bad parameters
refused before the grid starts, and a grid with failed runs exiting 1."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.robustness_study import cli, core, grid  # noqa: E402
from benchmarks.robustness_study.main import main  # noqa: E402
from benchmarks.robustness_study.worker import run_job  # noqa: E402

#: the siren scenario: 10 clients, all of them a round, so n = 10 and f = ceil(fraction * 10)
SIREN = ["--attack", "signflip", "--seeds", "1", "--rounds", "2", "--workers", "1"]


def cells(argv: list[str]) -> dict[tuple[str, float], tuple[dict, str | None]]:
    """{(defense, fraction): (defense_params, error)} of the grid's jobs."""
    args = cli.parse_args([*SIREN, *argv])
    base = grid.resolve_scenario(args.scenario, "digits", 2)
    jobs = core.make_jobs(args, base)
    return {
        (j["defense"], j["malicious_fraction"]): (j["flat"]["defense_params"], j["error"])
        for j in jobs
    }


def test_the_precondition_is_judged_on_the_users_parameters() -> None:
    # krum at 0.4: the preset's f = 4 needs 10 > 2*4 + 2 (no); the user's f = 1: 10 > 4
    assert cells(["--defenses", "krum", "--fractions", "0.4"]) == {
        ("krum", 0.4): ({"f": 4}, "n/a (precondition): krum needs n > 2f + 2 (n=10, f=4)")
    }
    got = cells(["--defenses", "krum", "--fractions", "0", "0.4", "--defense-param", "krum.f=1"])
    assert got == {("krum", 0.0): ({"f": 1}, None), ("krum", 0.4): ({"f": 1}, None)}
    # and the other way: buckets of 2 leave krum 5 rows, 5 > 2*2 + 2 fails at 0.2 (f = 2)
    got = cells(["--defenses", "krum", "--fractions", "0.2", "--defense-param", "krum.bucket=2"])
    assert got == {
        ("krum", 0.2): (
            {"f": 2, "bucket": 2},
            "n/a (precondition): krum needs n > 2f + 2 (n=5, f=2) in buckets of 2",
        )
    }
    # a user's m against the preset's f: m <= n - f holds at 0 (9 <= 10 - 1), not at 0.2
    got = cells(
        ["--defenses", "multikrum", "--fractions", "0", "0.2", "--defense-param", "multikrum.m=9"]
    )
    assert got == {
        ("multikrum", 0.0): ({"f": 1, "m": 9}, None),
        ("multikrum", 0.2): (
            {"f": 2, "m": 9},
            "n/a (precondition): multikrum needs m <= n - f (n=10, f=2, m=9)",
        ),
    }


def test_a_users_alternative_replaces_the_presets() -> None:
    assert grid.over_preset({"f": 2}, {"beta": 0.1}) == {"beta": 0.1}
    assert grid.over_preset({"f": 2}, {"f": 3}) == {"f": 3}
    mixed = {"f": 28, "weighting": "samples", "nnm": 28, "nnm_rank": "angle"}
    assert grid.over_preset(mixed, {"beta": 0.1}) == {
        "weighting": "samples",
        "nnm": 28,
        "nnm_rank": "angle",
        "beta": 0.1,
    }
    assert grid.over_preset(mixed, {"bucket": 2, "beta": 0.1}) == {
        "weighting": "samples",
        "bucket": 2,
        "beta": 0.1,
    }
    # trimmed mean with beta = 0.1 trims floor(0.1 * 10) = 1 a side: 2 < 10 at every fraction
    got = cells(
        ["--defenses", "trimmedmean", "--fractions", "0.2", "0.6"]
        + ["--defense-param", "trimmedmean.beta=0.1"]
    )
    assert got == {
        ("trimmedmean", 0.2): ({"beta": 0.1}, None),
        ("trimmedmean", 0.6): ({"beta": 0.1}, None),
    }


def test_every_preset_builds_its_rule() -> None:
    from defenses import DEFENSES

    for scenario, n in (("siren", 10), ("partial", 10), ("sageflow", 20), ("crossdevice", 100)):
        for d in sorted(DEFENSES):
            for frac in (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8):
                grid.defense_preset(d, frac, n, 30, set(DEFENSES), scenario)  # raises if not


def test_parameters_that_build_no_rule_stop_the_grid_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(grid, "ALTERNATIVES", ())  # as if beta could not replace the preset's f
    out = tmp_path / "rb"
    argv = [*SIREN, "--defenses", "trimmedmean", "--fractions", "0.2", "--out", str(out)]
    assert main([*argv, "--defense-param", "trimmedmean.beta=0.1"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --defense-param trimmedmean.beta=0.1 at fraction 0.2: defense 'trimmedmean': "
        "give f or beta, not both (f=2, beta=0.1)"
    ]
    assert not out.exists()


@pytest.mark.parametrize(
    ("param", "why"),
    [
        (
            "median.bucket=2",
            "--defense-param median.bucket=2: 'median' is not in --defenses "
            "['krum', 'trimmedmean']",
        ),
        (
            "krum.bogus=1",
            "--defense-param: defense 'krum': unknown parameter 'bogus'; valid: "
            "['bucket', 'exact', 'f', 'nnm', 'nnm_rank']",
        ),
        ("krum.f=abc", "--defense-param: defense 'krum': f 'abc' invalid; valid: integer >= 0"),
        (
            "trimmedmean.beta=0.7",
            "--defense-param: defense 'trimmedmean': beta 0.7 invalid; valid: 0 <= beta < 0.5",
        ),
    ],
)
def test_a_bad_defense_param_is_one_line_exit_2(
    param: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.parse_args([*SIREN, "--defenses", "krum", "trimmedmean", "--defense-param", param])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {why}"]


def test_a_defense_param_given_twice_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        cli.parse_args(
            [
                *SIREN,
                "--defenses",
                "krum",
                "--defense-param",
                "krum.f=1",
                "--defense-param",
                "krum.f=2",
            ]
        )
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: --defense-param krum.f: given twice (1 and 2)"
    ]


def test_failed_runs_exit_1_after_the_table_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a rule's own "needs ..." at run time is a failure too: the grid judged its precondition
    BOOM = "ValueError: defense 'median': needs n >= 1 (n=0)"

    def fake(job: dict) -> dict:  # fedavg ends well, median fails; no training
        rec = run_job({**job, "error": job["error"] or BOOM})  # not run
        if job["defense"] == "fedavg":
            rec.update(error=None, final_accuracy=0.5, rounds=2)
        return rec

    monkeypatch.setattr(core, "run_job", fake)
    tiny = ["--set", "num_clients=4", "--set", "clients_per_round=4", "--fractions", "0.4"]
    out = tmp_path / "rb"
    # bulyan needs 4 >= 4*2 + 3 rows: n/a (precondition), not a failure
    argv = [*SIREN, *tiny, "--defenses", "fedavg", "median", "bulyan", "--out", str(out)]
    assert main(argv) == 1
    got = capsys.readouterr()
    rows = {line.split()[0]: line.split()[1:] for line in got.out.splitlines()[3:6]}
    assert rows == {"fedavg": ["0.500±0.000"], "median": ["error"], "bulyan": ["n/a", "(precond)"]}
    assert got.err.strip().splitlines()[-2:] == [
        f"error: median f=0.4 s0: {BOOM}",
        f"error: 1 of 2 runs failed (listed above, and in {out}/results.json); tracebacks: "
        "error.txt in each one's run directory",
    ]
    assert [r["error"] for r in json.loads((out / "results.json").read_text())][:2] == [
        None,
        BOOM,
    ]
    argv = [*SIREN, *tiny, "--defenses", "fedavg", "bulyan", "--out", str(tmp_path / "ok")]
    assert main(argv) == 0  # an n/a cell alone is no failure


def test_a_failed_run_leaves_its_traceback_and_a_later_run_drops_it(tmp_path: Path) -> None:
    flat = dict(num_clients=4, clients_per_round=4, local_epochs=1, rounds=1, seed=0)
    flat |= dict(attack="none", attack_fraction=0.0, backend="local", progress=False)
    flat |= dict(plots=False, out=str(tmp_path / "r"))
    job = {"attack": "none", "defense": "krum", "malicious_fraction": 0.0, "seed": 0}
    # krum with f = 1 needs 4 > 2*1 + 2 rows: the engine refuses the run (a ValueError)
    rec = run_job({**job, "flat": {**flat, "defense": "krum", "defense_params": {"f": 1}}})
    assert rec["error"] == (
        "ValueError: defense 'krum': needs n > 2f + 2 (n=4, f=1) with 4 clients a round"
    )
    tb = (tmp_path / "r" / "error.txt").read_text()
    assert tb.startswith("Traceback") and tb.splitlines()[-1] == rec["error"]
    rec = run_job({**job, "flat": {**flat, "defense": "fedavg", "defense_params": {}}})
    assert rec["error"] is None and not (tmp_path / "r" / "error.txt").exists()
