"""Tests for simulator.cli (the CLI over the config of test_config_cli.py): help, one-line
errors, --print-config, runs in and out of process, --resume."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_config_cli import write_yaml

from simulator.cli import build_parser, main
from simulator.config.fields import ConfigError
from simulator.config.sections import SECTIONS, build_config, field_index, load_config
from simulator.run.output import CSV_FIELDS

REPO = Path(__file__).resolve().parents[1]


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
