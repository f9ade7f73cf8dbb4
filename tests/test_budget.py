"""The memory and disk estimate made before a run starts (``simulator/run/budget.py``): a run
that cannot fit stops with one line before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import small_config

from simulator.config.fields import ConfigError
from simulator.run.budget import check_budget, estimate


def config(tmp_path: Path, **over: Any) -> Any:
    return small_config(tmp_path / "run", **over)


def test_a_population_that_cannot_fit_stops_before_anything_starts(tmp_path: Path) -> None:
    cfg = config(tmp_path, num_clients=10**10, partition="virtual")
    est = estimate(cfg)
    assert est.devices == pytest.approx(48 * 10**10)  # six float64 values per device
    with pytest.raises(ConfigError) as e:
        check_budget(cfg, available=16e9)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("data.num_clients: this run needs ~480.")
    assert "16.0 GB of memory is available" in msg
    check_budget(config(tmp_path, num_clients=1000, partition="virtual"), available=16e9)
    # client state that would spill beyond the free disk
    big = config(
        tmp_path,
        num_clients=10**6,
        partition="virtual",
        algorithm="feddyn",
        clients_per_round=1000,
        rounds=1000,
        state_memory="64MB",
    )
    with pytest.raises(ConfigError, match="execution.state_memory: client state"):
        check_budget(big, available=64e9, disk_free=1e9)


def test_a_ledger_run_whose_packs_cannot_fit_on_disk_stops_before_it_starts(
    tmp_path: Path,
) -> None:
    """The round packs: per round each submission's row (4 bytes a parameter) and 2,048 bytes
    of record, plus the global model; and the initial model's pack. The digits MLP with two
    hidden layers of 16 units has 64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10 = 1,482
    parameters, so 10 rounds of 1,000 clients need
    10 * (1000 * (4 * 1482 + 2048) + 4 * 1482) + 4 * 1482 = 79,825,208 bytes."""
    over = {"num_clients": 10**6, "partition": "virtual", "clients_per_round": 1000}
    cfg = config(tmp_path, **over, rounds=10, ledger=True)
    assert estimate(cfg).ledger == 79_825_208
    with pytest.raises(ConfigError) as e:
        check_budget(cfg, available=64e9, disk_free=50e6)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("ledger.ledger: the round packs in ")
    assert "need ~0.08 GB of disk; 0.05 GB is free" in msg
    check_budget(cfg, available=64e9, disk_free=80e6)
    plain = config(tmp_path, **over, rounds=10)
    assert estimate(plain).ledger == 0
    check_budget(plain, available=64e9, disk_free=1)
    # memory: the recorder process (0.45 GB) and 4 copies of a round's rows (three slots and
    # the pack buffer): 4 * 1000 * 4 * 1482 = 23,712,000 bytes
    led, pl = estimate(cfg), estimate(plain)
    assert led.processes - pl.processes == 0.45e9
    assert led.round - pl.round == 23_712_000


def test_cli_exits_2_with_one_line_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    rc = main(
        [
            "--partition",
            "virtual",
            "--num-clients",
            str(10**11),
            "--backend",
            "local",
            "--out",
            str(tmp_path / "x"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "GB of memory is available" in err
    assert not (tmp_path / "x").exists()  # nothing started, nothing written


def test_a_container_limit_is_the_memory_available(tmp_path: Path) -> None:
    """cgroup v2: room = memory.max - memory.current (1e9 - 4e8 = 6e8 bytes); 'max' is no
    limit, and the machine's MemAvailable is the bound."""
    from simulator.run.budget import available_memory

    (tmp_path / "memory.max").write_text("1000000000\n")
    (tmp_path / "memory.current").write_text("400000000\n")
    assert available_memory(tmp_path) == 6e8
    (tmp_path / "memory.stat").write_text("active_file 5\ninactive_file 100000000\n")
    assert available_memory(tmp_path) == 7e8  # reclaimable page cache is room
    (tmp_path / "memory.max").write_text("max\n")
    machine = available_memory(tmp_path / "none")
    assert 6e8 < available_memory(tmp_path) and 0.5 < available_memory(tmp_path) / machine < 2


def test_running_out_of_memory_mid_run_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's allocator failing mid-run (a limit the estimate could not see): one line, exit 1,
    with how to resume; any other RuntimeError stays a traceback."""
    import simulator.run.experiment as experiment
    from simulator.cli import main

    def fails(cfg: Any) -> None:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate "
            "memory: you tried to allocate 1292160200 bytes. Error code 12"
        )

    monkeypatch.setattr(experiment, "run_experiment", fails)
    argv = ["--backend", "local", "--out", str(tmp_path / "x")]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: out of memory ([enforce fail at ")
    assert "you tried to allocate 1292160200 bytes" in err and "--checkpoint-every N" in err

    def breaks(cfg: Any) -> None:
        raise RuntimeError("something else")

    monkeypatch.setattr(experiment, "run_experiment", breaks)
    with pytest.raises(RuntimeError, match="something else"):
        main(argv)


def test_a_cluster_joined_by_address_holds_its_actors(tmp_path: Path) -> None:
    # found at stop 57: the README's `--ray-address HEAD:6379 --num-actors 64` was refused at
    # "processes 29.85" GB, 64 actors counted against this machine's memory. With a Ray of its
    # own: the driver, 64 actors (0.45 GB each) and Ray (0.6 GB): 65 * 0.45 + 0.6 = 29.85 GB;
    # joining a cluster, only the driver's 0.45 GB is this machine's
    own = config(tmp_path, backend="ray", num_actors=64)
    joined = config(tmp_path, backend="ray", num_actors=64, ray_address="10.0.0.1:6379")
    assert estimate(own).processes == pytest.approx(29.85e9)
    assert estimate(joined).processes == pytest.approx(0.45e9)
    local = config(tmp_path, backend="ray", num_actors=64, ray_address="local")
    assert estimate(local).processes == pytest.approx(29.85e9)
    check_budget(joined, available=24e9)
    with pytest.raises(ConfigError, match="^execution.num_actors: this run needs"):
        check_budget(own, available=24e9)
