"""Bad input to the benchmark scripts is refused in one line naming the flag (exit 2), before
any work starts and without creating an output: throughput, algorithm_throughput, scale,
defense_cost, heterogeneity and scheduler."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks import algorithm_throughput, scale
from benchmarks.defense_cost_study.main import main as defense_cost_main
from benchmarks.heterogeneity_study.main import main as heterogeneity_main
from benchmarks.scheduler_study.main import main as scheduler_main
from benchmarks.throughput_study.main import main as throughput_main

PROC = "/proc/fedsentry-no-such-file"
NO_PROC = "error: {flag}: cannot write in /proc (No such file or directory)"  # no file there


def refused(capsys: pytest.CaptureFixture[str], main: Callable[..., int], argv: list[str]) -> str:
    """The one stderr line of ``main(argv)``, which must exit with code 2 (raised or returned)."""
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.strip()


@pytest.mark.parametrize(
    ("main", "argv", "flag"),
    [
        (throughput_main, ["--json", PROC], "--json"),
        (throughput_main, ["--plot", PROC], "--plot"),
        (algorithm_throughput.main, ["--json", PROC], "--json"),
        (scale.main, ["--json", PROC], "--json"),
        (defense_cost_main, ["--json", PROC], "--json"),
        (scheduler_main, ["--json", PROC, "--parts", "instances"], "--json"),
    ],
)
def test_unwritable_output_file_refused(
    capsys: pytest.CaptureFixture[str], main: Callable[..., int], argv: list[str], flag: str
) -> None:
    assert refused(capsys, main, argv) == NO_PROC.format(flag=flag)


def test_file_in_the_way_of_a_json_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = refused(capsys, throughput_main, ["--json", str(blocker / "t.json")])
    assert line == f"error: --json: cannot make the directory {blocker} (a file is there)"


def test_heterogeneity_outputs_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = refused(capsys, heterogeneity_main, ["--out", str(blocker)])
    assert line == f"error: --out: cannot make the directory {blocker} (a file is there)"
    out = tmp_path / "runs"
    line = refused(capsys, heterogeneity_main, ["--out", str(out), "--csv", PROC])
    assert line == NO_PROC.format(flag="--csv")
    assert not out.exists()


def test_scheduler_out_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = refused(capsys, scheduler_main, ["--out", str(blocker), "--parts", "instances"])
    assert line == f"error: --out: cannot make the directory {blocker} (a file is there)"
    out = tmp_path / "sched"
    json_file = tmp_path / "q.json"
    line = refused(capsys, scheduler_main, ["--out", str(out), "--json", PROC])
    assert line == NO_PROC.format(flag="--json")
    assert not out.exists() and not json_file.exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--rounds", "0"], "error: --rounds: must be >= 1, got 0"),
        (["--repeats", "0"], "error: --repeats: must be >= 1, got 0"),
        (["--flower-rounds", "0"], "error: --flower-rounds: must be >= 1, got 0"),
        (["--flower-rounds-large", "-1"], "error: --flower-rounds-large: must be >= 1, got -1"),
        (["--flower-cpus", "0"], "error: --flower-cpus: must be >= 1, got 0"),
        (["--actors", "-1"], "error: --actors: must be >= 0 (0 = one per CPU), got -1"),
        (["--seed", "-1"], "error: --seed: must be in [0, 2**32), got -1"),
    ],
)
def test_throughput_bad_numbers_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], line: str
) -> None:
    out = tmp_path / "t.json"
    assert refused(capsys, throughput_main, [*argv, "--json", str(out)]) == line
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--rounds", "0"], "error: --rounds: must be >= 1, got 0"),
        (["--repeats", "0"], "error: --repeats: must be >= 1, got 0"),
        (["--actors", "-1"], "error: --actors: must be >= 0 (0 = one per CPU), got -1"),
        (["--seed", "-1"], "error: --seed: must be in [0, 2**32), got -1"),
    ],
)
def test_algorithm_throughput_bad_numbers_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], line: str
) -> None:
    out = tmp_path / "a.json"
    assert refused(capsys, algorithm_throughput.main, [*argv, "--json", str(out)]) == line
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--timeout", "nan"], "error: --timeout: must be a finite number of seconds > 0, got nan"),
        (["--timeout", "0"], "error: --timeout: must be a finite number of seconds > 0, got 0.0"),
        (["--local-epochs", "0"], "error: --local-epochs: must be >= 1, got 0"),
        # every run's config is built before the first run, the state run's included
        (
            ["--state-memory", "abc"],
            "error: the run of population 1,000,000 (feddyn): execution.state_memory: 'abc' is "
            "not a size; give a number of bytes with an optional unit B, KB, MB, GB, TB, KiB, "
            "MiB, GiB or TiB, e.g. 64MB, 2GB, 512KiB",
        ),
        (
            ["--actors", "-1"],
            "error: the run of population 10,000 (fedavg): execution.num_actors: must be >= 0, "
            "got -1",
        ),
        (
            ["--populations", "100", "--clients-per-round", "500"],
            "error: the run of population 100 (fedavg): experiment.clients_per_round: 500 "
            "clients a round, but the population has 100 devices (data.num_clients); give at "
            "most 100",
        ),
    ],
)
def test_scale_bad_numbers_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], line: str
) -> None:
    out = tmp_path / "s.json"
    assert refused(capsys, scale.main, [*argv, "--json", str(out)]) == line
    assert not out.exists()


def test_scale_refuses_a_run_that_will_not_fit_before_the_first_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "s.json"
    line = refused(capsys, scale.main, ["--populations", "1000", "10000000000", "--json", str(out)])
    assert line.startswith(
        "error: the run of population 10,000,000,000 (fedavg): data.num_clients: this run needs "
    )
    assert "GB of memory is available" in line and not out.exists()


def test_scale_unknown_state_algorithm_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.algorithms import ALGORITHMS

    line = refused(capsys, scale.main, ["--state-algorithm", "nope"])
    assert line == f"error: --state-algorithm: unknown 'nope'; valid: {ALGORITHMS.names()}"
    assert "feddyn" in line


def test_help_texts(capsys: pytest.CaptureFixture[str]) -> None:
    """Every flag named is explained in --help; scale's --help shows the defaults."""
    from benchmarks.scheduler_study.cli import build_parser as scheduler_parser

    def help_of(parser_help: str, flag: str) -> str:
        return parser_help.split(f"\n  {flag}", 1)[1].split("\n  --", 1)[0]

    text = scheduler_parser().format_help()
    assert "seed of" in help_of(text, "--seed")
    text = algorithm_throughput.build_parser().format_help()
    assert "seed of" in help_of(text, "--seed")
    assert "the task of" in help_of(text, "--task {")
    with pytest.raises(SystemExit):
        scale.main(["--help"])
    text = capsys.readouterr().out
    assert "(default: 1800.0)" in help_of(text, "--timeout")
    assert "(default: feddyn)" in help_of(text, "--state-algorithm")
