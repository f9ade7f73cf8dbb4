"""Tests for actors.kinds (actor kinds: parsing, cluster feasibility), their config and CLI
errors, per-chunk timings and regrouping (the pool of two kinds on Ray: test_actor_kinds_ray.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helper import run_child

from actors.kinds import ActorKind, parse_actor_kinds
from actors.merge import chunk_timings, expand, merge_results
from actors.replace import regroup
from actors.request import TrainTask
from simulator.config.fields import ConfigError
from simulator.config.sections import build_config, load_config

# ---------------------------------------------------------------------------------- parsing


def test_parse_strings_sorted_by_name() -> None:
    kinds = parse_actor_kinds(
        {"b": "device=gpu,count=2,gpus=0.5,threads=2,resource=fast", "a": "device=cpu,count=3"}
    )
    assert kinds == [
        ActorKind("a", "cpu", 3, 1, 0.0, None),
        ActorKind("b", "gpu", 2, 2, 0.5, "fast"),
    ]
    assert kinds[1].demand() == {"CPU": 2.0, "GPU": 0.5, "fast": 0.001}
    assert kinds[1].ray_options() == {"num_cpus": 2, "num_gpus": 0.5, "resources": {"fast": 0.001}}
    assert (kinds[0].torch_device, kinds[1].torch_device) == ("cpu", "cuda")
    assert kinds[0].ray_options() == {"num_cpus": 1, "num_gpus": 0.0}


def test_parse_mappings_and_defaults() -> None:
    """YAML mappings; an empty SPEC is one CPU actor, one thread; a GPU kind gets 0.25 GPU."""
    kinds = parse_actor_kinds(
        {
            "g": {"device": "gpu", "count": 1},
            "c": None,
            "d": "",
            "h": {"device": "gpu", "gpus": 2, "threads": 4},
        }
    )
    assert kinds == [
        ActorKind("c"),
        ActorKind("d"),
        ActorKind("g", "gpu", 1, 1, 0.25),
        ActorKind("h", "gpu", 1, 4, 2.0),
    ]
    assert parse_actor_kinds({}) == []


@pytest.mark.parametrize(
    "mapping, message",
    [
        ({"x": "device=tpu"}, "actor kind 'x': unknown device 'tpu'; valid: cpu, gpu"),
        (
            {"x": "cpus=2"},
            "actor kind 'x': unknown key 'cpus'; valid: device, count, threads, gpus, resource",
        ),
        ({"x": "count=0"}, "actor kind 'x': count must be an integer >= 1, got '0'"),
        ({"x": "threads=1.5"}, "actor kind 'x': threads must be an integer >= 1, got '1.5'"),
        ({"x": {"count": True}}, "actor kind 'x': count must be an integer >= 1, got True"),
        ({"x": "device=gpu,gpus=-1"}, "actor kind 'x': gpus must be a number > 0, got '-1'"),
        (
            {"x": "device=gpu,gpus=1.5"},
            "actor kind 'x': gpus above 1 must be a whole number (Ray), got '1.5'",
        ),
        ({"x": "gpus=0.5"}, "actor kind 'x': gpus is only for device=gpu"),
        (
            {"x": "count"},
            "actor kind 'x': expected KEY=VALUE items separated by commas, got 'count'",
        ),
        ({"x": "count=1,count=2"}, "actor kind 'x': key 'count' given twice"),
        (
            {"x": "resource=GPU"},
            "actor kind 'x': resource must be a custom Ray resource label "
            "(not empty, CPU or GPU: use threads and gpus), got 'GPU'",
        ),
        ({"x y": ""}, "actor kind name 'x y': use letters, digits, '_', '-' or '.'"),
    ],
)
def test_parse_errors_one_line(mapping: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_actor_kinds(mapping)
    assert str(e.value) == message


# ----------------------------------------------------------------------------------- config


def test_config_validates_kinds_and_conflicts(tmp_path: Path) -> None:
    from simulator.cli import parse_kv

    flat = {"actor_kinds": dict([parse_kv("a=device=cpu,count=2"), parse_kv("b=")])}
    cfg = build_config(flat=flat)
    assert cfg.execution.actor_kinds == {"a": "device=cpu,count=2", "b": None}
    cfg.save(tmp_path / "c.yaml")
    assert load_config(tmp_path / "c.yaml") == cfg
    with pytest.raises(ConfigError) as e:
        build_config(flat={"actor_kinds": {"a": "device=tpu"}})
    assert str(e.value) == (
        "execution.actor_kinds: actor kind 'a': unknown device 'tpu'; valid: cpu, gpu"
    )
    with pytest.raises(ConfigError) as e:
        build_config(flat={**flat, "num_actors": 2})
    assert str(e.value) == (
        "execution.actor_kinds: conflicts with num_actors=2 (the kinds' "
        "counts size the pool; leave num_actors 0)"
    )
    with pytest.raises(ConfigError) as e:
        build_config(flat={**flat, "gpus_per_actor": 0.5})
    assert str(e.value) == (
        "execution.actor_kinds: conflicts with gpus_per_actor=0.5 (give each kind its own gpus=)"
    )


# --------------------------------------------------------------------- timings and regroup


def answer(clients: list[int], **extra: Any) -> dict[str, Any]:
    """A worker's compact answer: client c has loss c/10, 2c steps, 3c samples, its row
    returned."""
    meta = np.array([[c, c / 10, 2 * c, 3 * c, 1.0, 1.0] for c in clients])
    rows = np.array([[float(c)] * 2 for c in clients], np.float32)
    return {"meta": meta, "rows": rows, "sum": None, "sum_weight": 0.0, "seconds": 3.0, **extra}


def test_chunk_timings_from_chunks_and_tags() -> None:
    chunks = [
        {"clients": 2, "max_steps": 4, "steps": 6, "samples": 9, "start": 0.5, "end": 1.25},
        {"clients": 1, "max_steps": 6, "steps": 6, "samples": 9, "start": 1.25, "end": 2.0},
    ]
    tagged = expand(answer([1, 2, 3], chunks=chunks, actor=1, kind="b", finished=2.1234567))
    assert chunk_timings([tagged]) == [
        {
            "clients": 2,
            "max_steps": 4,
            "steps": 6,
            "samples": 9,
            "seconds": 0.75,
            "start": 0.5,
            "end": 1.25,
            "actor": 1,
            "kind": "b",
            "finished": 2.123457,
        },
        {
            "clients": 1,
            "max_steps": 6,
            "steps": 6,
            "samples": 9,
            "seconds": 0.75,
            "start": 1.25,
            "end": 2.0,
            "actor": 1,
            "kind": "b",
            "finished": 2.123457,
        },
    ]
    # no chunks: one entry of all the clients (steps 2, 4; samples 3, 6), its training time
    plain = expand(answer([1, 2], actor=0, kind="local"))
    assert chunk_timings([plain]) == [
        {
            "clients": 2,
            "max_steps": 4,
            "steps": 6,
            "samples": 9,
            "seconds": 3.0,
            "actor": 0,
            "kind": "local",
        }
    ]
    # the tags stay on the chunk entries, not on the merged result
    one = merge_results([answer([1, 2], actor=0, kind="a", finished=1.0)], [1, 2])
    two = merge_results(
        [
            answer([2], actor=1, kind="b", finished=1.0),
            answer([1], actor=0, kind="a", finished=2.0),
        ],
        [1, 2],
    )
    for res in (one, two):
        assert not {"actor", "kind", "finished"} & set(res)
    assert [(c["actor"], c["kind"]) for c in two["chunks"]] == [(1, "b"), (0, "a")]
    assert two["client_ids"].tolist() == [1, 2]


TASKS3 = [TrainTask(10, 1, 0), TrainTask(11, 1, 1), TrainTask(12, 1, 2)]


def test_regroup_positions_and_errors() -> None:
    assert regroup(TASKS3, [[TASKS3[2]], [TASKS3[1], TASKS3[0]]], 2) == [[2], [1, 0]]
    assert regroup(TASKS3, [[], list(TASKS3)], 2) == [[], [0, 1, 2]]
    bad = [
        ([list(TASKS3)], 2, "replace: returned 1 groups for 2 candidate actors"),
        (
            [[TrainTask(99, 1, 0)], list(TASKS3)],
            2,
            "replace: client 99 is not among the dead actor's tasks",
        ),
        ([list(TASKS3), [TASKS3[0]]], 2, "replace: client 10 placed twice"),
        ([[TASKS3[0]], []], 2, "replace: clients [11, 12] of the dead actor were not placed"),
    ]
    for groups, n, message in bad:
        with pytest.raises(ValueError) as e:
            regroup(TASKS3, groups, n)
        assert str(e.value) == message


def run_cli_child(argv: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``python -m simulator ARGV`` in its own session (its Ray is killed with it on a hang)."""
    return run_child(["-m", "simulator", *argv], timeout)


# slow (a CLI child that starts Ray, ~13 s); check_schedulable's refusals: tests/test_schedulable.py
@pytest.mark.slow
def test_cli_unschedulable_kind_exits_2(tmp_path: Path) -> None:
    """A kind needing 64 CPUs per actor fails before any actor starts: exit 2, one line."""
    proc = run_cli_child(
        [
            "--actor-kinds",
            "big=device=cpu,threads=64",
            "--backend",
            "ray",
            "--rounds",
            "1",
            "--num-clients",
            "6",
            "--clients-per-round",
            "3",
            "--local-epochs",
            "1",
            "--hidden",
            "8",
            "--no-progress",
            "--no-plots",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(
        "error: actor kind 'big': needs 64 CPUs per actor; the largest node has "
    ), lines[0]


def test_cli_unknown_device_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main

    rc = main(["--actor-kinds", "gpu1=device=tpu", "--print-config"])
    out, err = capsys.readouterr()
    assert (rc, out) == (2, "")
    assert err == (
        "error: execution.actor_kinds: actor kind 'gpu1': unknown device 'tpu'; valid: cpu, gpu\n"
    )
