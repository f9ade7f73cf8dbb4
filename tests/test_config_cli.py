"""Tests for simulator.config.sections (typed, validated config) and simulator.cli (the CLI)."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.cli import build_parser, main
from simulator.config.fields import ConfigError
from simulator.config.sections import SECTIONS, Config, build_config, field_index, load_config
from simulator.data import DATASETS, PARTITIONS
from simulator.policies import POLICIES
from simulator.run.output import CSV_FIELDS

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


# ------------------------------------------------------------------------------------- CLI


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Call ``simulator.cli.main`` in-process; an argparse exit counts as its return code."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = int(e.code) if e.code is not None else 0
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_help_mentions_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(["--help"], capsys)
    assert rc == 0
    for name, (_sec, f) in field_index().items():
        flag = "--" + name.replace("_", "-")
        assert re.search(re.escape(flag) + r"\b", out), flag
        if isinstance(f.default, bool):
            assert "--no-" + name.replace("_", "-") in out
    for sec in SECTIONS:
        assert f"{sec} options" in out
    assert "--print-config" in out and "--config FILE" in out


def test_help_shows_one_default(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(["--help"], capsys)
    text = " ".join(out.split())
    assert "number of federated rounds (default: 40)" in text
    assert "(default: 40) (default: None)" not in text


def _one_error_line(rc: int, err: str, needle: str) -> None:
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error:"), err
    assert needle in lines[0], err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--rounds", "abc"], "experiment.rounds"),
        (["--lr", "-1"], "algorithm.lr"),
        (["--public-fraction", "1.5"], "data.public_fraction"),
        (["--dataset", "mnist_idx"], "data.data_path"),
        (["--clients-per-round", "0"], "experiment.clients_per_round"),
    ],
)
def test_cli_invalid_value_one_error_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run_cli(argv, capsys)
    _one_error_line(rc, err, needle)
    assert out == ""


def test_cli_bad_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(["--config", str(tmp_path / "missing.yaml")], capsys)
    _one_error_line(rc, err, "missing.yaml")
    path = write_yaml(tmp_path / "c.yaml", {"experiment": {"roundz": 3}})
    rc, _, err = run_cli(["--config", str(path)], capsys)
    _one_error_line(rc, err, "experiment.roundz")


def test_cli_resume_without_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, _, err = run_cli(["--resume", str(empty)], capsys)
    _one_error_line(rc, err, "output.resume")
    assert "config.yaml" in err
    build_config().save(empty / "config.yaml")
    rc, _, err = run_cli(["--resume", str(empty)], capsys)
    _one_error_line(rc, err, "output.resume")
    assert "checkpoint.pt" in err


def test_cli_unknown_defense(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run_cli(
        [
            "--backend",
            "local",
            "--defense",
            "krum2",
            "--num-clients",
            "5",
            "--clients-per-round",
            "3",
            "--out",
            str(tmp_path / "o"),
            "--no-progress",
            "--no-plots",
        ],
        capsys,
    )
    _one_error_line(rc, err, "defense")
    assert "'krum2'" in err and "'fedavg'" in err


@pytest.mark.parametrize(
    "argv, needle, extra",
    [
        (["--partition", "foo"], "--partition", ("'foo'", "iid", "dirichlet", "natural")),
        (["--defense-params", "weighting"], "--defense-params", ("KEY=VALUE",)),
        (["--no-such-flag"], "--no-such-flag", ()),
    ],
)
def test_cli_argparse_errors_one_line(
    argv: list[str], needle: str, extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run_cli(argv, capsys)
    _one_error_line(rc, err, needle)
    for word in extra:
        assert word in err
    assert out == ""


def test_print_config_is_resolved_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_yaml(tmp_path / "c.yaml", {"experiment": {"rounds": 11, "seed": 4}})
    rc, out, err = run_cli(
        [
            "--config",
            str(path),
            "--print-config",
            "--rounds",
            "7",
            "--defense-params",
            "weighting=uniform",
            "--no-vectorize",
            "--partition",
            "iid",
        ],
        capsys,
    )
    assert rc == 0 and err == ""
    printed = yaml.safe_load(out)
    expected = build_config(
        {"experiment": {"seed": 4}},
        {
            "rounds": 7,
            "defense_params": {"weighting": "uniform"},
            "vectorize": False,
            "partition": "iid",
        },
    )
    assert printed == expected.to_dict()
    assert printed["experiment"] == {
        "seed": 4,
        "rounds": 7,
        "clients_per_round": 10,
        "eval_every": 1,
        "eval_clients": 100,
        "client_finetune_epochs": 0,
        "max_virtual_hours": 0.0,
    }
    assert list(printed) == list(SECTIONS)


def test_config_markdown_lists_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(["--config-markdown"], capsys)
    assert rc == 0
    rows = [line for line in out.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(field_index())
    assert "| experiment | `rounds` / `--rounds` | `40` | number of federated rounds |" in rows
    assert any("80% of selected" in r for r in rows)  # '%%' is unescaped


def test_parser_flags_match_fields() -> None:
    dests = {a.dest for a in build_parser()._actions}
    assert set(field_index()) <= dests


TINY = [
    "--backend",
    "local",
    "--rounds",
    "2",
    "--num-clients",
    "6",
    "--clients-per-round",
    "3",
    "--local-epochs",
    "1",
    "--hidden",
    "8",
    "--no-progress",
]


def test_cli_tiny_run_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "run"
    rc, out, err = run_cli([*TINY, "--no-plots", "--out", str(out_dir)], capsys)
    assert rc == 0, err
    lines = out.strip().splitlines()
    m = re.fullmatch(r"final test accuracy: (\d\.\d{4})", lines[-1])
    assert m, lines[-1]
    summary = json.loads((out_dir / "summary.json").read_text())
    assert f"{summary['final_accuracy']:.4f}" == m.group(1)
    assert json.loads(lines[0])["rounds"] == 2 == summary["rounds"]
    assert summary["out"] == str(out_dir)
    events = [json.loads(x) for x in (out_dir / "events.jsonl").read_text().splitlines()]
    assert [e["round"] for e in events] == [0, 1]
    assert all(len(e["selected"]) == 3 for e in events)
    with (out_dir / "metrics.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == list(CSV_FIELDS) and len(rows) == 2
    assert rows[1]["participants"] == "3"
    saved = load_config(out_dir / "config.yaml")
    assert saved.experiment.rounds == 2 and saved.execution.backend == "local"
    assert saved.output.out == str(out_dir) and saved.output.resume is None
    expected = build_config(
        flat={
            "backend": "local",
            "rounds": 2,
            "num_clients": 6,
            "clients_per_round": 3,
            "local_epochs": 1,
            "hidden": 8,
            "progress": False,
            "plots": False,
            "out": str(out_dir),
        }
    )
    assert saved == expected
    assert not (out_dir / "accuracy_vs_round.png").exists()


def test_cli_subprocess_run_with_plots(tmp_path: Path) -> None:
    out_dir = tmp_path / "sub"
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", *TINY, "--plots", "--out", str(out_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("final test accuracy: ")
    for name in (
        "events.jsonl",
        "summary.json",
        "metrics.csv",
        "config.yaml",
        "accuracy_vs_round.png",
        "accuracy_vs_time.png",
    ):
        assert (out_dir / name).is_file(), name
    for png in ("accuracy_vs_round.png", "accuracy_vs_time.png"):
        assert (out_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len((out_dir / "events.jsonl").read_text().splitlines()) == 2
    assert load_config(out_dir / "config.yaml").output.plots is True


def test_resume_refuses_other_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    rc, _, _ = run_cli(
        [
            "--backend",
            "local",
            "--rounds",
            "2",
            "--checkpoint-every",
            "1",
            "--no-progress",
            "--no-plots",
            "--out",
            str(out),
        ],
        capsys,
    )
    assert rc == 0
    rc, _, err = run_cli(["--resume", str(out), "--lr", "0.5"], capsys)
    assert rc == 2
    assert err.strip() == (
        "error: output.resume: --lr cannot be combined with --resume "
        "(a resumed run keeps its saved config)"
    )
    rc, outp, _ = run_cli(["--resume", str(out), "--no-progress"], capsys)
    assert rc == 0 and "final test accuracy:" in outp
    # how a resumed run shows is the flags' (until stop 50 --plots was refused and --progress
    # accepted but ignored): plots now, and a progress bar
    assert not list(out.glob("*.png"))
    rc, _, err = run_cli(["--resume", str(out), "--plots", "--progress"], capsys)
    assert rc == 0 and (out / "accuracy_vs_round.png").is_file() and "rounds: " in err
    assert load_config(out / "config.yaml").output.plots is False  # the run's config stays
    # where it trains may change too (until stop 51 refused: a cluster restarted elsewhere, or
    # left with fewer CPUs, could not take its runs back); the checkpoint's config check
    # leaves these fields out
    argv = ["--resume", str(out), "--num-actors", "1", "--ray-address", "local", "--no-progress"]
    rc, outp, err = run_cli(argv, capsys)
    assert rc == 0 and "final test accuracy:" in outp, err
    assert load_config(out / "config.yaml").execution.num_actors == 0


def test_attack_params_validated_at_load() -> None:
    with pytest.raises(ConfigError, match=r"^attack\.attack_params: "):
        build_config(flat={"attack": "signflip", "attack_params": {"nope": 1}})


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["--state-memory", "lots"],
            "error: execution.state_memory: 'lots' is not a size; give a number of bytes with an "
            "optional unit B, KB, MB, GB, TB, KiB, MiB, GiB or TiB, e.g. 64MB, 2GB, 512KiB",
        ),
        (
            ["--placement", "ga", "--placement-params", "generations=x"],
            "error: execution.placement_params: placement 'ga' parameter 'generations' "
            "must be int, "
            "got 'x'",
        ),
        (  # until stop 51: accepted, then Ray's tuple-repr error after Ray started
            ["--gpus-per-actor", "1.5"],
            "error: execution.gpus_per_actor: above 1 it must be a whole number (Ray shares a "
            "GPU only in fractions of one), got 1.5",
        ),
        (  # until stop 51: accepted, and the run went on an embedded Ray
            ["--ray-address", ""],
            "error: execution.ray_address: empty; leave it out to start a local Ray, or give "
            "HOST:PORT",
        ),
        (
            ["--placement", "lpt", "--placement-params", "chunking=3"],
            "error: execution.placement_params: placement 'lpt' parameter 'chunking' must be bool, "
            "got 3",
        ),
        (
            ["--clients-per-round", "2000", "--num-clients", "1000"],
            "error: experiment.clients_per_round: 2000 clients a round, "
            "but the population has 1000 "
            "devices (data.num_clients); give at most 1000",
        ),
        (
            ["--clients-per-round", "2000", "--num-clients", "1000", "--partition", "virtual"],
            "error: experiment.clients_per_round: 2000 clients a round, "
            "but the population has 1000 "
            "devices (data.num_clients); give at most 1000",
        ),
    ],
)
def test_cli_config_errors_name_the_expected_form(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong size, a wrongly typed placement parameter and a cohort larger than the
    population: exit code 2 and one line naming the field, what it takes and the value."""
    rc, out, err = run_cli([*argv, "--print-config"], capsys)
    assert (rc, out, err.strip()) == (2, "", line)


def test_sizes_and_cohorts_at_the_boundary() -> None:
    """What the errors above refuse, just inside: a size in each unit form, a cohort of the
    whole population, an int placement parameter."""
    cfg = build_config(flat={"state_memory": "512KiB", "clients_per_round": 20, "num_clients": 20})
    assert cfg.execution.state_memory_bytes == 512 * 1024
    assert build_config(flat={"state_memory": "2 gb"}).execution.state_memory_bytes == 2 * 10**9
    assert build_config(flat={"state_memory": 64}).execution.state_memory_bytes == 64
    ga = build_config(flat={"placement": "ga", "placement_params": {"generations": 5}})
    assert ga.execution.placement_params == {"generations": 5}
