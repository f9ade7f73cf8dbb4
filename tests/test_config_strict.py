"""Values a config refuses rather than bends: YAML's true where a number goes, a key given twice,
an empty directory, contradictory settings, and the flags' help (``simulator/config/``,
``simulator/cli.py``, ``simulator/run/budget.py``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import small_config

from simulator.config.fields import ConfigError, coerce
from simulator.config.output import MAX_COMMITTEE


@pytest.mark.parametrize(
    ("typ", "value", "expected"),
    [
        (int, True, "expected int, got True"),
        (float, False, "expected float, got False"),
        (str, True, "expected str, got True"),
        (bool, 2, "expected bool, got 2"),
        (bool, 0.5, "expected bool, got 0.5"),
    ],
)
def test_yaml_booleans_and_numbers_are_not_each_other(typ: Any, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=f"^s.f: {re.escape(expected)}$"):
        coerce("s", "f", typ, value)


def test_what_each_type_still_takes() -> None:
    assert coerce("s", "f", bool, 1) is True and coerce("s", "f", bool, 0) is False
    assert coerce("s", "f", bool, "yes") is True and coerce("s", "f", bool, False) is False
    assert coerce("s", "f", int, 3.0) == 3 and coerce("s", "f", int, "7") == 7
    assert coerce("s", "f", float, 2) == 2.0 and coerce("s", "f", str, 5) == "5"


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path: Path) -> None:
    from simulator.config.sections import load_config

    p = tmp_path / "c.yaml"
    p.write_text("experiment:\n  rounds: 3\n  seed: 1\n  rounds: 4\n")
    with pytest.raises(ConfigError, match=r"key 'rounds' given twice \(again on line 4\)$"):
        load_config(p)
    p.write_text("experiment:\n  rounds: 3\nexperiment:\n  seed: 1\n")
    with pytest.raises(ConfigError, match="key 'experiment' given twice"):
        load_config(p)
    p.write_text("? [a, b]\n: 1\n")  # an unhashable key: YAML's own error, one line
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(p)
    p.write_text("experiment:\n  rounds: 3\nalgorithm:\n  rounds: 4\n")  # other sections
    with pytest.raises(ConfigError, match="algorithm.rounds: unknown key"):
        load_config(p)


@pytest.mark.parametrize(
    ("over", "expected"),
    [
        ({"out": ""}, "output.out: empty"),
        ({"out": "  "}, "output.out: empty"),
        ({"resume": ""}, "output.resume: empty"),
        ({"committee": MAX_COMMITTEE + 1}, "ledger.committee: at most 32 validators"),
        ({"ledger_chain_id": 5}, "ledger.ledger_chain_id: checks the chain of --ledger-url"),
        ({"ledger_url": "http://h:1", "ledger_chain_id": 0}, "ledger.ledger_chain_id: must be > 0"),
        ({"attack_fraction": 0.5}, "attack.attack_fraction: 0.5 of the clients malicious"),
        (
            {"round_policy": "first_k", "first_k": 5, "clients_per_round": 4},
            "clock.first_k: a round closes at its first 5 updates, but only 4 clients",
        ),
        (
            {"round_policy": "first_k", "policy_params": {"k": 5}, "clients_per_round": 4},
            "clock.policy_params: a round closes at its first 5 updates",
        ),
    ],
)
def test_contradictions_and_empty_values_are_refused(
    tmp_path: Path, over: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(expected)}"):
        small_config(tmp_path / "run", **over)


def test_the_limits_just_inside_are_taken(tmp_path: Path) -> None:
    small_config(tmp_path / "run", committee=MAX_COMMITTEE)
    small_config(tmp_path / "run", ledger_url="http://h:1", ledger_chain_id=1)
    small_config(tmp_path / "run", attack="labelflip", attack_fraction=0.5)
    small_config(tmp_path / "run", round_policy="first_k", first_k=4, clients_per_round=4)


def test_the_committee_limit_is_the_contracts() -> None:
    vy = (Path(__file__).parents[1] / "ledger" / "contracts" / "FLChain.vy").read_text()
    (limit,) = re.findall(r"^MAX_COMMITTEE: constant\(uint256\) = (\d+)$", vy, re.M)
    assert int(limit) == MAX_COMMITTEE == 32


def test_resume_cannot_come_from_an_empty_flag_or_a_config_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    out = tmp_path / "x"
    assert main(["--resume", "", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == "error: output.resume: empty; give the directory of the run to resume\n"
    conf = tmp_path / "c.yaml"
    conf.write_text(f"output:\n  resume: {tmp_path / 'old'}\n  out: {out}\n")
    assert main(["--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: output.resume: cannot be set in a config file (")
    assert err.count("\n") == 1 and not out.exists()  # nothing started


def test_no_ledger_with_a_ledger_url_is_refused_but_a_saved_config_still_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    out = tmp_path / "x"
    assert main(["--no-ledger", "--ledger-url", "http://h:1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: ledger.ledger: --no-ledger contradicts ledger_url (http://h:1), which records "
        "on that node; drop one\n"
    )
    assert not out.exists()
    conf = tmp_path / "c.yaml"  # as a run with --ledger-url saves it: ledger false, a URL
    conf.write_text("ledger:\n  ledger: false\n  ledger_url: http://h:1\n")
    assert main(["--config", str(conf), "--no-ledger", "--out", str(out)]) == 2
    assert "contradicts" in capsys.readouterr().err
    assert main(["--config", str(conf), "--print-config"]) == 0
    assert "ledger_url: http://h:1" in capsys.readouterr().out


def test_a_model_too_large_to_allocate_is_sized_and_refused_by_its_field(tmp_path: Path) -> None:
    """The digits MLP with two hidden layers of H units has 64H + H + H*H + H + 10H + 10
    parameters: 10,007,600,010 for H = 100,000 (40 GB a copy, sized on torch's meta device)."""
    from simulator.run.budget import check_budget, model_layout

    one = small_config(tmp_path / "run", hidden=100_000, clients_per_round=1)
    assert model_layout(one).size == 10_007_600_010
    with pytest.raises(ConfigError, match=r"^model.hidden: this run needs .* 10,007,600,010 "):
        check_budget(one, available=16e9)
    many = small_config(tmp_path / "run", hidden=2_000, clients_per_round=10)
    with pytest.raises(ConfigError, match="^experiment.clients_per_round: .*--clients-per-round"):
        check_budget(many, available=1e9)


def test_test_fraction_zero_names_its_field() -> None:
    from simulator.data import DataError, load_dataset

    with pytest.raises(DataError, match=r"^data.test_fraction: dataset 'digits' .* got 0"):
        load_dataset("digits", seed=0, test_fraction=0.0)


def test_help_lists_every_registered_plugin_and_shows_what_a_flag_takes() -> None:
    from attacks import ATTACKS
    from defenses import DEFENSES
    from simulator.algorithms import ALGORITHMS
    from simulator.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    for flag, reg in (("algorithm", ALGORITHMS), ("defense", DEFENSES), ("attack", ATTACKS)):
        assert f"one of: {', '.join(reg.names())} (default:" in text, flag
    assert "fedma" in ALGORITHMS.names()
    for shown in (
        "--clients-per-round CLIENTS",
        "--classes-per-client CLASSES",
        "--gpus-per-actor GPUS",
        "--eval-every N",
        "--checkpoint-every N",
        "--out DIR",
        "--resume DIR",
        "--state-memory SIZE",
        "--model-groups GROUP",
    ):
        assert shown in text, shown
    assert "NAME in logreg, mlp, mlp1, cnn" in text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("rate=1e-1", 0.1),
        ("rate=5E3", 5000.0),
        ("rate=-2.5e+3", -2500.0),
        ("rate=1.5e-2", 0.015),
        ("rate=5", 5),  # an integer stays one
        ("rate=1e", "1e"),  # not a number
        ("rate=e5", "e5"),
    ],
)
def test_a_number_in_exponent_form_is_a_number(text: str, value: Any) -> None:
    from simulator.cli import parse_kv

    key, got = parse_kv(text)
    assert key == "rate" and got == value and type(got) is type(value)


def test_exponent_numbers_reach_every_parameter_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    flags = ["--compression", "mask", "--compression-params", "rate=1e-1"]
    assert main([*flags, "--partition-params", "alpha=5e-1", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "    rate: 0.1\n" in out and "    alpha: 0.5\n" in out
    conf = tmp_path / "c.yaml"  # the same in a config file
    conf.write_text("compression:\n  compression: mask\n  compression_params:\n    rate: 2e-1\n")
    assert main(["--config", str(conf), "--print-config"]) == 0
    assert "    rate: 0.2\n" in capsys.readouterr().out
