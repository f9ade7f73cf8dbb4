"""Faults of the two studies' input found by hand: ``benchmarks/stragglers.py`` with an attack
fraction > 0 (every attacked cell failed on ``unknown field 'malicious_fraction'`` after the
clean ones had run), flags out of range, given twice or too large refused up front in one line
(``robustness.py --seeds 0`` ran 3 seeds, ``--rounds 0`` 30), and a cell file that is valid JSON
but no object read by ``--resume`` as a cell to run again (it was an AttributeError)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.robustness_study import cli as robustness_cli  # noqa: E402
from benchmarks.robustness_study.main import main as robustness  # noqa: E402
from benchmarks.straggler_study import cli as stragglers_cli  # noqa: E402
from benchmarks.straggler_study.main import main as stragglers  # noqa: E402

#: a straggler study of a few seconds: 60 devices, 6 a round, 2 rounds, a 16-unit MLP
TINY = ["--population", "60", "--clients-per-round", "6", "--seeds", "1", "--rounds", "2"]
TINY += ["--set", "hidden=16", "--no-progress", "--no-plots"]
#: a robustness grid of a few seconds: one defense, fraction 0.4, one seed, 2 rounds
GRID = ["--attack", "labelflip", "--defenses", "fedavg", "--fractions", "0.4", "--workers", "1"]
GRID += ["--seeds", "1", "--rounds", "2", "--set", "num_clients=8"]
GRID += ["--set", "clients_per_round=4", "--set", "local_epochs=1"]


def _events(cell: Path) -> list[dict]:
    return [json.loads(line) for line in (cell / "events.jsonl").read_text().splitlines()]


def test_a_straggler_study_with_an_attack_fraction_runs_its_attacked_cells(
    tmp_path: Path,
) -> None:
    from attacks import pick_malicious

    out = tmp_path / "study"
    argv = [*TINY, "--policies", "wait_for_all", "--attack", "labelflip"]
    assert stragglers([*argv, "--attack-fractions", "0", "0.5", "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in doc["policies"]] == ["wait_for_all@0", "wait_for_all@0.5"]
    assert [r["rounds"] for r in doc["policies"]] == [2, 2]
    clean_acc, attacked_acc = (r["final_accuracy"] for r in doc["policies"])
    assert attacked_acc != clean_acc  # the flipped labels of 3 of 6 clients changed the model
    assert doc["settings"]["fractions"] == [0.0, 0.5]
    clean, attacked = out / "runs" / "wait_for_all-s0-f0", out / "runs" / "wait_for_all-s0-f0.5"
    flat = json.loads((attacked / "cell.json").read_text())["flat"]
    assert (flat["attack"], flat["attack_fraction"]) == ("labelflip", 0.5)
    assert "attack" not in json.loads((clean / "cell.json").read_text())["flat"]
    # 30 of the 60 devices are malicious (a seeded set): 3 of each round's 6
    bad = set(pick_malicious(60, 0.5, 0).tolist())
    assert len(bad) == 30
    for ev in _events(attacked):
        assert sorted(ev["malicious"]) == sorted(c for c in ev["selected"] if c in bad)
    assert [len(ev["malicious"]) for ev in _events(attacked)] == [3, 3]
    assert [len(ev["malicious"]) for ev in _events(clean)] == [0, 0]


def _refused(parse: Callable[[list[str]], object], argv: list[str], capsys) -> str:
    """The one line (exit 2) that ``parse`` refuses ``argv`` with."""
    with pytest.raises(SystemExit) as e:
        parse(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--attack-fractions", "-0.1"], "--attack-fractions: must be in [0, 1), got -0.1"),
        (["--attack-fractions", "1"], "--attack-fractions: must be in [0, 1), got 1.0"),
        (
            ["--attack-fractions", "0.3"],
            "--attack-fractions: 0.3 > 0 needs an --attack (e.g. --attack labelflip)",
        ),
        (
            ["--attack", "nosuch"],
            "--attack: unknown attack 'nosuch'; valid: ['alie', 'backdoor', 'gaussian', 'ipm', "
            "'labelflip', 'minmax', 'minsum', 'model_replacement', 'none', 'scale', 'signflip']",
        ),
        (["--policies", "deadline", "deadline"], "--policies: 'deadline' given twice"),
        (
            ["--attack", "labelflip", "--attack-fractions", "0", "0.2", "0.2"],
            "--attack-fractions: 0.2 given twice",
        ),
        (
            ["--attack", "labelflip", "--attack-fractions", "0.1", "0.1000001"],
            "--attack-fractions: 0.1 and 0.1000001 both name the runs f0.1; give fractions "
            "that differ in their first 6 significant digits",
        ),
        (["--rounds", "1000000001"], "--rounds: must be <= 1000000000, got 1000000001"),
        (
            ["--policies", "deadline", "fedbuff", "--seeds", "50001"],
            "--policies x --seeds x --attack-fractions: 2 x 50001 x 1 = 100002 runs; a study "
            "may have at most 100000",
        ),
        (
            ["--scenario", "sageflow", "--seeds", "33334"],
            "--seeds: 3 runs of --scenario sageflow x 33334 = 100002 runs; a study may have at "
            "most 100000",
        ),
    ],
)
def test_the_straggler_study_refuses_bad_input_in_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused(stragglers_cli.parse_args, [*TINY, *argv], capsys) == f"error: {line}"


def test_the_largest_study_and_rounds_are_taken(capsys: pytest.CaptureFixture[str]) -> None:
    a = stragglers_cli.parse_args([*TINY, "--policies", "deadline", "--seeds", "100000"])
    assert stragglers_cli.planned_runs(a)[0] == 100_000
    assert stragglers_cli.parse_args([*TINY, "--rounds", "1000000000"]).rounds == 10**9
    g = robustness_cli.parse_args([*GRID, "--seeds", "100000", "--rounds", "1000000000"])
    assert (g.seeds, g.rounds) == (100_000, 10**9)


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--seeds", "0"], "--seeds: must be >= 1, got 0"),
        (["--rounds", "0"], "--rounds: must be >= 1, got 0"),
        (["--rounds", "0", "--quick"], "--rounds: must be >= 1, got 0"),
        (["--workers", "0"], "--workers: must be >= 1, got 0"),
        (["--clients-per-round", "-1"], "--clients-per-round: must be >= 1, got -1"),
        (["--fractions", "0", "1"], "--fractions: must be in [0, 1), got 1.0"),
        (["--rounds", "99999999999999999999"], "--rounds: must be <= 1000000000, got "
         "99999999999999999999"),
        (["--defenses", "fedavg", "median", "fedavg"], "--defenses: 'fedavg' given twice"),
        (["--committee", "3"], "--committee: attests recorded rounds; give --ledger (or "
         "--ledger-url) too"),
        (
            ["--fractions", "0.2", "0.2000001"],
            "--fractions: 0.2 and 0.2000001 both name the runs f0.2; give fractions that "
            "differ in their first 6 significant digits",
        ),
        (
            ["--defenses", "fedavg", "median", "--fractions", "0", "0.2", "--seeds", "25001"],
            "--defenses x --fractions x --seeds: 2 x 2 x 25001 = 100004 runs; a grid may "
            "have at most 100000",
        ),
    ],
)  # fmt: skip
def test_the_robustness_grid_refuses_bad_input_in_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _refused(robustness_cli.parse_args, [*GRID, *argv], capsys) == f"error: {line}"


@pytest.mark.parametrize("text", ["[]", "null"])
def test_a_robustness_summary_that_is_no_object_is_run_again(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rb"
    argv = [*GRID, "--out", str(out)]
    assert robustness(argv) == 0
    cell = out / "runs" / "labelflip-fedavg-f0.4-s0"
    (cell / "summary.json").write_text(text + "\n")
    stamp = (cell / "events.jsonl").stat().st_mtime_ns
    capsys.readouterr()
    assert robustness([*argv, "--resume"]) == 0
    assert f"resume: 0 of 1 runs finished under {out}" in capsys.readouterr().err
    assert (cell / "events.jsonl").stat().st_mtime_ns != stamp  # run again, not read back
    assert json.loads((cell / "summary.json").read_text())["rounds"] == 2
    results = json.loads((out / "results.json").read_text())
    assert [(r["rounds"], r["error"]) for r in results] == [(2, None)]


@pytest.mark.parametrize("text", ["[]", "null"])
def test_a_straggler_cell_file_that_is_no_object_is_run_again(text: str, tmp_path: Path) -> None:
    out = tmp_path / "study"
    argv = [*TINY, "--policies", "deadline", "--out", str(out)]
    assert stragglers(argv) == 0
    cell = out / "runs" / "deadline-s0"
    (cell / "cell.json").write_text(text + "\n")
    stamp = (cell / "events.jsonl").stat().st_mtime_ns
    assert stragglers([*argv, "--resume"]) == 0
    assert (cell / "events.jsonl").stat().st_mtime_ns != stamp  # run again, not read back
    assert json.loads((cell / "cell.json").read_text())["rounds"] == 2
    assert [r["rounds"] for r in json.loads((out / "results.json").read_text())["policies"]] == [2]
