"""The arms of ``benchmarks/algorithm_throughput.py``: their syntax, the default set (FedBN
timed on a BatchNorm model beside FedAvg on the same model) and the configs they build."""

from __future__ import annotations

import pytest

from benchmarks.algorithm_throughput import main
from benchmarks.throughput_study.algorithm_arms import arm_config, default_arms, parse_arm
from benchmarks.throughput_study.algorithm_rows import BARS, best_rows
from benchmarks.throughput_study.tasks import TASKS, task_config


def test_parse_arm_splits_params_and_model() -> None:
    assert parse_arm("fedavg") == ("fedavg", {}, {})
    assert parse_arm("fedprox:mu=0.01") == ("fedprox", {"mu": "0.01"}, {})
    assert parse_arm("fedbn@norm=batch") == ("fedbn", {}, {"norm": "batch"})
    assert parse_arm("moon:mu=0,tau=0.5@hidden=32,norm=batch") == (
        "moon",
        {"mu": "0", "tau": "0.5"},
        {"hidden": "32", "norm": "batch"},
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nosuch", "unknown algorithm 'nosuch'"),
        ("fedprox:mu", "parameter 'mu' is not KEY=VALUE"),
        ("fedbn@width=3", "unknown model key 'width'; valid: ['hidden', 'norm']"),
        ("fedbn@hidden=x", "hidden must be a positive integer, got 'x'"),
    ],
)
def test_parse_arm_rejects_bad_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_arm(text)


def test_default_arms_time_fedbn_on_its_own_model() -> None:
    arms = default_arms()
    assert "fedbn" not in arms  # the tasks' models have no BatchNorm
    assert arms.count("fedbn@norm=batch") == 1 and arms.count("fedavg@norm=batch") == 1
    assert "fedavg" not in arms  # always timed, added by main
    assert arms[-1] == "moon:mu=0"
    assert BARS["fedbn@norm=batch"] == "fedavg@norm=batch"


def test_arm_config_changes_only_the_named_model_fields() -> None:
    base = task_config(TASKS[0], 0, 0)
    cfg = arm_config(base, *parse_arm("fedbn@norm=batch,hidden=32"))
    assert (cfg.algorithm.algorithm, cfg.model.norm, cfg.model.hidden) == ("fedbn", "batch", 32)
    assert cfg.model.model == base.model.model and cfg.data == base.data
    assert arm_config(base, *parse_arm("fedavg")).model == base.model


def test_bar_ratio_is_against_the_same_model() -> None:
    runs = [
        {
            "fedavg": {"updates_per_s": 100.0, "samples_per_s": 1.0},
            "fedbn@norm=batch": {"updates_per_s": 30.0, "samples_per_s": 1.0},
            "fedavg@norm=batch": {"updates_per_s": 40.0, "samples_per_s": 1.0},
        }
    ]
    rows = {r["algorithm"]: r for r in best_rows(runs, list(runs[0]))}
    assert rows["fedbn@norm=batch"]["ratio_to_fedavg"] == pytest.approx(0.3)
    assert rows["fedbn@norm=batch"]["bar_ratio"] == pytest.approx(0.75)
    assert rows["fedavg@norm=batch"]["bar_ratio"] is None


def test_cli_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--algorithm", "fedbn@width=3"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ("fedprox:bogus=1", "algorithm 'fedprox': unknown parameter 'bogus'; valid: ['mu']"),
        ("fedprox:mu=-1", "fedprox"),
        ("moon:mu=x", "moon"),
    ],
)
def test_an_arm_a_run_would_refuse_is_refused_before_any_timing(
    arm: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--algorithm", arm, "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_an_arm_that_needs_a_public_set_gets_the_benchmarks_one() -> None:
    from benchmarks.algorithm_throughput import PUBLIC_FRACTION, with_public
    from benchmarks.throughput_study.tasks import TASKS, task_config

    base = with_public(task_config(TASKS[0], 0, 0), ["fedavg", "ktpfl"])
    assert base.data.public_fraction == PUBLIC_FRACTION
    arm_config(base, "ktpfl", {})  # validated: no error
