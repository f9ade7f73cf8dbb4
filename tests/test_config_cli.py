"""Tests for simulator.config.sections (typed, validated config); the CLI's are in
test_config_cli_run.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.config.fields import ConfigError
from simulator.config.sections import SECTIONS, Config, build_config, field_index, load_config
from simulator.data import DATASETS, PARTITIONS
from simulator.policies import POLICIES

REPO = Path(__file__).resolve().parents[1]


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ---------------------------------------------------------------------------------- config


def test_defaults_are_valid_and_documented() -> None:
    cfg = build_config()
    assert cfg == Config() == load_config(None)
    assert (cfg.experiment.rounds, cfg.experiment.clients_per_round, cfg.experiment.seed) == (
        40,
        10,
        0,
    )
    assert (cfg.data.dataset, cfg.data.partition, cfg.data.num_clients) == (
        "digits",
        "dirichlet",
        20,
    )
    assert (cfg.algorithm.algorithm, cfg.algorithm.lr, cfg.algorithm.local_epochs) == (
        "fedavg",
        0.1,
        5,
    )
    assert cfg.clock.round_policy == "wait_for_all" and cfg.execution.backend == "ray"
    assert cfg.defense.defense_params == {} and cfg.data.data_path is None
    index = field_index()
    assert len(index) == sum(len(dataclasses.fields(c)) for c in SECTIONS.values())
    for name, (_sec, f) in index.items():
        assert f.metadata["help"], f"field {name} has no help text"


def test_yaml_then_flags_precedence(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "c.yaml",
        {
            "experiment": {"rounds": 7, "seed": 3},
            "algorithm": {"lr": 0.05, "local_epochs": 2},
            "defense": {"defense_params": {"weighting": "uniform"}},
            "model": None,  # an empty section is allowed
        },
    )
    cfg = load_config(path, {"rounds": 9, "local_epochs": 4})
    assert cfg.experiment.rounds == 9  # flag beats file
    assert cfg.algorithm.local_epochs == 4  # flag beats file
    assert cfg.experiment.seed == 3  # file beats default
    assert cfg.algorithm.lr == 0.05
    assert cfg.defense.defense_params == {"weighting": "uniform"}
    assert cfg.data.num_clients == 20  # default untouched
    assert load_config(path).experiment.rounds == 7


def test_yaml_strings_are_coerced(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "c.yaml",
        {
            "experiment": {"rounds": "12"},
            "output": {"plots": "no", "progress": "yes"},
            "algorithm": {"lr": "0.5", "local_epochs": 3.0},
        },
    )
    cfg = load_config(path)
    assert cfg.experiment.rounds == 12 and isinstance(cfg.experiment.rounds, int)
    assert cfg.output.plots is False and cfg.output.progress is True
    assert cfg.algorithm.lr == 0.5 and cfg.algorithm.local_epochs == 3


def test_unknown_section_lists_valid() -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"experimnet": {"rounds": 3}})
    msg = str(e.value)
    assert "'experimnet'" in msg
    for sec in SECTIONS:
        assert sec in msg


def test_unknown_key_lists_valid() -> None:
    with pytest.raises(ConfigError) as e:
        build_config({"experiment": {"roundz": 3}})
    msg = str(e.value)
    assert msg.startswith("experiment.roundz: unknown key")
    for name in ("seed", "rounds", "clients_per_round", "eval_every"):
        assert f"'{name}'" in msg


def test_unknown_flat_field_lists_valid() -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={"learning_rate": 0.1})
    msg = str(e.value)
    assert "'learning_rate'" in msg and "'lr'" in msg and "'rounds'" in msg


def test_section_must_be_mapping() -> None:
    with pytest.raises(ConfigError, match="section 'experiment' must be a mapping"):
        build_config({"experiment": [1, 2]})


@pytest.mark.parametrize(
    "field, value, qualified, valid",
    [
        ("partition", "foo", "data.partition", tuple(PARTITIONS)),
        ("dataset", "imagenet", "data.dataset", tuple(DATASETS)),
        ("round_policy", "async", "clock.round_policy", tuple(POLICIES)),
        ("model", "resnet", "model.model", ("logreg", "mlp", "mlp1", "cnn")),
        ("norm", "layer", "model.norm", ("none", "batch")),
        ("algorithm", "fedsgd", "algorithm.algorithm", ("fedavg", "feddyn", "fedprox", "scaffold")),
        ("backend", "dask", "execution.backend", ("ray", "local")),
        (
            "placement",
            "genetic",
            "execution.placement",
            ("ga", "greedy", "lpt", "minmin", "round_robin", "sufferage"),
        ),
    ],
)
def test_bad_choice_lists_valid(
    field: str, value: str, qualified: str, valid: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={field: value})
    msg = str(e.value)
    assert msg.startswith(f"{qualified}: unknown value '{value}'")
    for v in valid:
        assert f"'{v}'" in msg


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("rounds", "abc", "experiment.rounds: expected int, got 'abc'"),
        ("rounds", 2.5, "experiment.rounds: expected int, got 2.5"),
        ("lr", "fast", "algorithm.lr: expected float, got 'fast'"),
        ("progress", "maybe", "output.progress: expected bool, got 'maybe'"),
        (
            "defense_params",
            "weighting",
            "defense.defense_params: expected a mapping, got 'weighting'",
        ),
        ("rounds", None, "experiment.rounds: must not be empty"),
    ],
)
def test_bad_type_rejected(field: str, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={field: value})
    assert str(e.value).startswith(expected)


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("lr", -1, "algorithm.lr: must be > 0, got -1.0"),
        ("rounds", 0, "experiment.rounds: must be > 0, got 0"),
        ("public_fraction", 1.5, "data.public_fraction: must be in [0, 1), got 1.5"),
        ("test_fraction", 1.0, "data.test_fraction: must be in [0, 1), got 1.0"),
        ("availability_low", 0.0, "devices.availability_low: must be in (0, 1], got 0.0"),
        ("straggler_fraction", 1.5, "algorithm.straggler_fraction: must be in [0, 1], got 1.5"),
        ("attack_fraction", -0.1, "attack.attack_fraction: must be in [0, 1], got -0.1"),
        ("momentum", 1.5, "algorithm.momentum: must be in [0, 1), got 1.5"),
        ("first_k", -1, "clock.first_k: must be >= 0, got -1"),
        ("num_actors", -2, "execution.num_actors: must be >= 0, got -2"),
        ("checkpoint_every", -1, "output.checkpoint_every: must be >= 0, got -1"),
    ],
)
def test_out_of_range_rejected(field: str, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={field: value})
    assert str(e.value) == expected


@pytest.mark.parametrize(
    "field, value", [("lr", "nan"), ("deadline_s", "inf"), ("compute_ms_median", "nan")]
)
def test_non_finite_rejected(field: str, value: str) -> None:
    with pytest.raises(ConfigError, match=field):
        build_config(flat={field: value})


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_seed_out_of_range_rejected(seed: int) -> None:
    with pytest.raises(ConfigError, match="experiment.seed"):
        build_config(flat={"seed": seed})


@pytest.mark.parametrize("dataset", ["mnist_idx", "cifar10", "femnist_leaf"])
def test_file_dataset_needs_data_path(dataset: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={"dataset": dataset})
    assert str(e.value).startswith("data.data_path:") and dataset in str(e.value)
    cfg = build_config(flat={"dataset": dataset, "data_path": str(tmp_path)})
    assert cfg.data.data_path == str(tmp_path)


def test_save_load_roundtrip(tmp_path: Path) -> None:
    cfg = build_config(
        flat={
            "rounds": 3,
            "lr": 0.025,
            "partition": "shards",
            "defense_params": {"weighting": "uniform"},
            "attack": "signflip",
            "attack_params": {"scale": 2.5},
            "drop_stragglers": True,
            "data_path": None,
            "vectorize": False,
            "out": str(tmp_path / "x"),
        }
    )
    cfg.save(tmp_path / "c.yaml")
    back = load_config(tmp_path / "c.yaml")
    assert back == cfg
    assert back.to_dict() == cfg.to_dict()
    assert yaml.safe_load((tmp_path / "c.yaml").read_text()) == cfg.to_dict()


def test_replace_is_validated_and_pure() -> None:
    cfg = build_config()
    new = cfg.replace(rounds=5, lr=0.3)
    assert (new.experiment.rounds, new.algorithm.lr) == (5, 0.3)
    assert (cfg.experiment.rounds, cfg.algorithm.lr) == (40, 0.1)
    with pytest.raises(ConfigError, match="algorithm.lr"):
        cfg.replace(lr=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.experiment.rounds = 3  # type: ignore[misc]


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "bad.yaml").write_text("experiment: {rounds: [1\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "binary.yaml").write_bytes(b"\x80\x81\xff")  # was a message without the file
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "binary.yaml")
    assert (
        str(err.value)
        == f"config: {tmp_path / 'binary.yaml'} is not valid YAML (UnicodeDecodeError)"
    )


def test_unknown_attack_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"attack\.attack: unknown 'no_such_attack'; valid"):
        build_config(
            flat={
                "backend": "local",
                "attack": "no_such_attack",
                "attack_fraction": 0.3,
                "out": str(tmp_path),
            }
        )


@pytest.mark.parametrize(
    ("flat", "message"),
    [
        ({"defense": "krum2"}, "defense.defense: unknown 'krum2'; valid: ['bulyan', "),
        (
            {"defense": "krum", "defense_params": {"m": 2}},
            "defense.defense_params: defense 'krum': unknown parameter 'm'; "
            "valid: ['bucket', 'exact', 'f', 'nnm', 'nnm_rank']",
        ),
        (
            {"defense": "krum", "defense_params": {"f": -1}},
            "defense.defense_params: defense 'krum': f -1 invalid; valid: integer >= 0",
        ),
    ],
)
def test_bad_defense_fails_when_the_config_is_built(flat: dict[str, Any], message: str) -> None:
    """A defense's name and parameters are checked with the rest of the config, before any
    data is loaded or Ray started, and the line names the config field."""
    with pytest.raises(ConfigError) as e:
        build_config(flat=flat)
    assert str(e.value).startswith(message)
