"""benchmarks/stragglers.py: what ``--resume`` matches beyond a run's flat config (the speed-label
skew, a trace's contents), ``--quick`` against flags given in any spelling, ``--set seed=`` and
a ``--policy-param`` of a policy not run refused, and the label mixes of every device at once
equal to ``VirtualData.label_mix`` one device at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks.straggler_study import cli, core, saved
from benchmarks.straggler_study.main import main
from benchmarks.straggler_study.mixes import dominant_classes
from simulator.data.virtual import VirtualData

#: a study of a few seconds: 60 devices, 6 a round, 3 rounds, a 16-unit MLP, one policy whose
#: config has no deadline (one from the skewed population would tell the runs apart anyway)
TINY = ["--population", "60", "--clients-per-round", "6", "--seeds", "1", "--rounds", "3"]
TINY += ["--set", "hidden=16", "--no-progress", "--no-plots", "--policies", "wait_for_all"]


def _stamp(out: Path) -> int:
    return (out / "runs" / "wait_for_all-s0" / "events.jsonl").stat().st_mtime_ns


def _inputs(out: Path) -> dict:
    return json.loads((out / "runs" / "wait_for_all-s0" / core.CELL_FILE).read_text())["inputs"]


def test_resume_runs_again_a_run_of_another_speed_label_skew(tmp_path: Path) -> None:
    out = tmp_path / "study"
    argv = [*TINY, "--out", str(out)]
    assert main(argv) == 0
    first = _stamp(out)
    assert main([*argv, "--resume"]) == 0 and _stamp(out) == first  # same skew: kept
    assert main([*argv, "--speed-label-skew", "3", "--resume"]) == 0
    assert _stamp(out) != first  # until now the unskewed run was read back
    assert _inputs(out)["speed_label_skew"] == 3.0
    second = _stamp(out)
    assert main([*argv, "--speed-label-skew", "3", "--resume"]) == 0 and _stamp(out) == second
    assert main([*argv, "--resume"]) == 0 and _stamp(out) != second  # back to 0: run again


def test_resume_runs_again_a_run_whose_trace_file_changed(tmp_path: Path) -> None:
    out, trace = tmp_path / "study", tmp_path / "avail.csv"
    trace.write_text("device_id,start_s,end_s\n" + "".join(f"{i},0,100000\n" for i in range(60)))
    argv = [*TINY, "--out", str(out), "--availability-trace", str(trace)]
    assert main(argv) == 0
    first = _stamp(out)
    assert main([*argv, "--resume"]) == 0 and _stamp(out) == first
    trace.write_text("device_id,start_s,end_s\n" + "".join(f"{i},0,50000\n" for i in range(60)))
    assert main([*argv, "--resume"]) == 0 and _stamp(out) != first  # same name, new contents
    digest = _inputs(out)["trace_sha256"]["availability_trace"]
    assert (
        digest
        == saved.run_inputs({"availability_trace": str(trace)})["trace_sha256"][
            "availability_trace"
        ]
    )


@pytest.mark.parametrize(
    "inputs, kept",
    [
        ({"speed_label_skew": 0.0, "trace_sha256": {}}, True),
        ({"speed_label_skew": 3.0, "trace_sha256": {}}, False),
        ({"speed_label_skew": 0.0, "trace_sha256": {"device_trace": "ab"}}, False),
        (None, True),  # the inputs of the flat config alone: no skew, no trace
    ],
)
def test_a_finished_cell_is_kept_only_for_the_same_inputs(
    inputs: dict | None, kept: bool, tmp_path: Path
) -> None:
    flat = {"seed": 0, "rounds": 1}
    (tmp_path / "events.jsonl").write_text(json.dumps({"round": 0}) + "\n")
    saved.save_cell(flat, tmp_path, {"events": [{"round": 0}], "quartiles": None})
    assert (saved.finished_cell(flat, tmp_path, inputs) is not None) is kept


@pytest.mark.parametrize(
    "given",
    [
        ["--population=5000", "--clients-per-round=10", "--virtual-hours=1"],
        ["--population", "5000", "--clients-per-round", "10", "--virtual-hours", "1"],
        ["--pop", "5000", "--clients", "10", "--virtual", "1"],
    ],
    ids=["equals", "separate", "abbreviated"],
)
def test_quick_presets_only_the_flags_not_given(given: list[str]) -> None:
    a = cli.parse_args(["--quick", *given])
    assert (a.population, a.clients_per_round, a.virtual_hours) == (5000, 10, 1.0)
    assert a.seeds == cli.QUICK["seeds"]  # not given: the preset's
    a = cli.parse_args(given)
    assert (a.population, a.clients_per_round, a.virtual_hours, a.seeds) == (5000, 10, 1.0, 2)


def test_the_presets_fill_in_what_is_not_given() -> None:
    a = cli.parse_args([])
    assert {k: getattr(a, k) for k in cli.DEFAULTS} == cli.DEFAULTS
    a = cli.parse_args(["--quick"])
    assert {k: getattr(a, k) for k in cli.QUICK} == cli.QUICK


@pytest.mark.parametrize(
    "argv, line",
    [
        (
            ["--set", "seed=3", "--seeds", "2"],
            "--set seed=3: the study runs seeds 0..N-1; give --seeds N",
        ),
        (
            ["--policies", "deadline", "--policy-param", "fedbuff:k=2"],
            "--policy-param: 'fedbuff' is not among the policies run: ['deadline']",
        ),
        (
            ["--policies", "deadline", "first_k", "--policy-param", "overcommit:ratio=1.5"],
            "--policy-param: 'overcommit' is not among the policies run: ['deadline', 'first_k']",
        ),
        (
            ["--scenario", "fedbuff", "--policy-param", "fedasync:concurrency=3"],
            "--policy-param: 'fedasync' is not among the policies run: ['wait_for_all', 'fedbuff']",
        ),
        (
            ["--scenario", "sageflow", "--policy-param", "deadline:deadline_s=3"],
            "--policy-param: 'deadline' is not among the policies run: []",
        ),
    ],
)
def test_settings_that_would_be_ignored_are_refused_in_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cli.parse_args(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == f"error: {line}\n"


def test_a_policy_param_of_a_policy_run_is_taken() -> None:
    a = cli.parse_args(["--policies", "fedbuff", "--policy-param", "fedbuff:k=2"])
    assert a.policy_params == {"fedbuff": {"k": 2}}
    a = cli.parse_args(["--scenario", "fedbuff", "--policy-param", "fedbuff:k=2"])
    assert a.policy_params == {"fedbuff": {"k": 2}}


def _dominant_one_by_one(clients: VirtualData) -> np.ndarray:
    """The reference: the loop ``skew_speeds`` ran until the mixes were drawn all at once."""
    n = clients.num_clients
    mixes = (int(np.argmax(clients.label_mix(i)[1])) for i in range(n))
    return np.fromiter(mixes, np.int64, n)


@pytest.mark.parametrize(
    "seed, n, alpha, classes",
    [
        (0, 5000, 0.5, 10),  # the study's setting
        (7, 2000, 0.3, 10),
        (3, 2000, 0.1, 4),  # the smallest alpha numpy draws by gammas
        (11, 2000, 1.0, 10),  # gammas of shape 1: exponentials
        (2**40 + 1, 1500, 0.5, 10),  # a seed of two 32-bit words
        (5, 300, 0.05, 10),  # below 0.1 and above 1: one client at a time
        (5, 300, 2.0, 3),
    ],
)
def test_the_dominant_classes_equal_the_label_mixes_one_by_one(
    seed: int, n: int, alpha: float, classes: int
) -> None:
    labels = np.repeat(np.arange(classes), 50)
    clients = VirtualData(
        labels, n, seed=seed, alpha=alpha, size_median=20, size_sigma=1, size_min=1, size_max=99
    )
    got = dominant_classes(clients)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _dominant_one_by_one(clients))
    assert len(set(got.tolist())) > 1


@pytest.mark.parametrize("quick, threads", [(["--quick"], 1), ([], None)])
def test_quick_runs_on_one_torch_thread_and_gives_the_threads_back(
    quick: list[str], threads: int | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 threads on 2 cores loaded by other jobs: 340 CPU-s and 13 min for --quick, not 37 CPU-s
    import torch

    from benchmarks.straggler_study import main as main_module

    seen: list[int] = []

    def study(*args: object) -> None:
        seen.append(torch.get_num_threads())
        raise ValueError("stopped here")

    monkeypatch.setattr(main_module.core, "study", study)
    before = torch.get_num_threads()
    assert main([*quick, "--no-progress", "--out", str(tmp_path)]) == 2
    assert seen == [before if threads is None else threads]
    assert torch.get_num_threads() == before


def test_a_ray_address_where_no_ray_answers_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # found at stop 57: a 30-line traceback, exit 1 (a ConnectionError is an OSError, which the
    # study reported as a stop and raised again)
    argv = [*TINY, "--backend", "ray", "--inline", "never", "--ray-address", "127.0.0.1:1"]
    assert main([*argv, "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: execution.ray_address: ") and "127.0.0.1:1" in err[-1]
    assert "Traceback" not in "".join(err)


def test_a_bad_set_stops_before_the_out_directory_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # found at stop 57: refused after the progress bar started, leaving --out with a .run.lock
    out = tmp_path / "s"
    assert main([*TINY, "--set", "nonfield=1", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith("error: config: unknown field 'nonfield'")
    assert not out.exists()
