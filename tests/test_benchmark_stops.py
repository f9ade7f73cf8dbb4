"""Stopping the benchmark scripts (Ctrl-C, SIGTERM, ``scale.py --timeout``): one line on
stderr, exit code 130 / 143 (1 for a timeout), no traceback, the queued work never started, no
half-written file and no process left behind (:mod:`benchmarks.stops`).

Before, a stopped ``heterogeneity.py`` ran its queued runs to their end (51 s) and ended in a
traceback; ``throughput.py`` ended in a traceback (Ctrl-C) or Ray's core-worker stack dump and
SIGABRT (SIGTERM); and ``scale.py --timeout`` left its run's child process running.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cluster_helper import OFFLINE_ENV, ROOT, marked_pids

from benchmarks import stops
from simulator.run.stop import Terminated


class Bench:
    """A benchmark script in a process group of its own, with a mark in its environment that
    every process it starts inherits; its stderr lines as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths: short
        self.mark = f"FEDSENTRY_STOP_TEST={uuid.uuid4().hex}"
        key, value = self.mark.split("=")
        full = {**os.environ, **OFFLINE_ENV, "OMP_NUM_THREADS": "1", "RAY_TMPDIR": self.ray_tmp}
        full.pop("RAY_ADDRESS", None)
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**full, **(env or {}), key: value},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self.pumps = [
            threading.Thread(target=self._pump, args=(s, keep), daemon=True)
            for s, keep in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))
        ]
        for t in self.pumps:
            t.start()

    @staticmethod
    def _pump(stream: object, keep: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            keep.append(line.rstrip("\n"))

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 240) -> None:
        """Wait until ``ready()`` (the benchmark is at work), or fail."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"never got to {what}: {self.err[-20:]}")
            time.sleep(0.1)

    def finish(self, timeout: float = 120) -> tuple[int, float]:
        """Its exit code and how long it took to exit from now."""
        t0 = time.monotonic()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout:g} s on: {self.err[-20:]}")
        for t in self.pumps:
            t.join(10)
        return self.proc.returncode, time.monotonic() - t0

    def left(self) -> list[int]:
        """The processes it started that are still there (a few seconds to go allowed)."""
        deadline = time.monotonic() + 3
        while (pids := marked_pids(self.mark)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return pids

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid in marked_pids(self.mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.ray_tmp, ignore_errors=True)


@pytest.fixture
def bench() -> Iterator[Callable[..., Bench]]:
    started: list[Bench] = []

    def start(args: list[str], env: dict[str, str] | None = None) -> Bench:
        started.append(Bench(args, env))
        return started[-1]

    yield start
    for b in started:
        b.close()


def _one_stop_line(err: list[str]) -> str:
    """The last stderr line, which must be the only one saying so, with no traceback."""
    assert not any("Traceback" in ln or "SIGTERM received" in ln for ln in err), err[-30:]
    assert sum("stopped" in ln or "went past" in ln for ln in err) == 1, err[-30:]
    return err[-1]


# ------------------------------------------------------------------------------ the helper


def test_a_file_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    with pytest.raises(KeyboardInterrupt), stops.whole(path) as tmp:
        tmp.write_text("{half")
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    stops.write_text(path, "{}")
    assert path.read_text() == "{}" and list(tmp_path.iterdir()) == [path]


def test_a_config_the_cluster_refuses_mid_benchmark_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.config.fields import ConfigError

    def body() -> int:
        stops.write_text(tmp_path / "a.json", "{}")
        raise ConfigError("execution.num_actors: 5 actors need 5 CPUs; the Ray cluster has 2")

    assert stops.run_stoppable("throughput", body) == 2
    assert capsys.readouterr().err == (
        "error: execution.num_actors: 5 actors need 5 CPUs; the Ray cluster has 2; only "
        f"{tmp_path / 'a.json'} was written\n"
    )

    def no_ray() -> int:  # found at stop 57: stragglers.py --ray-address HOST:PORT, no Ray there
        raise ConnectionError("execution.ray_address: cannot join Ray at '127.0.0.1:1': nothing")

    assert stops.run_stoppable("stragglers", no_ray, ("s.py", [], lambda: "x")) == 2
    assert capsys.readouterr().err == (
        "error: execution.ray_address: cannot join Ray at '127.0.0.1:1': nothing; nothing was "
        "written\n"
    )

    def bug() -> int:
        raise ValueError("a bug stays a traceback")

    with pytest.raises(ValueError, match="a bug"):
        stops.run_stoppable("throughput", bug)


def test_a_stopped_benchmark_ends_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def body(stop: type[KeyboardInterrupt], files: int) -> Callable[[], int]:
        def run() -> int:
            for i in range(files):
                stops.write_text(tmp_path / f"f{i}.json", "{}")
            raise stop

        return run

    assert stops.run_stoppable("demo", body(KeyboardInterrupt, 0)) == 130
    assert (
        capsys.readouterr().err == "interrupted: demo stopped before its end; nothing was written\n"
    )
    assert stops.run_stoppable("demo", body(Terminated, 1)) == 143
    assert capsys.readouterr().err == (
        f"terminated (SIGTERM): demo stopped before its end; only {tmp_path}/f0.json was written\n"
    )
    kept = ("benchmarks/demo.py", ["--out", "o"], lambda: "2 of 6 runs finished under o")
    assert stops.run_stoppable("demo", body(KeyboardInterrupt, 0), kept) == 130
    assert capsys.readouterr().err == (
        "interrupted: demo stopped; 2 of 6 runs finished under o; go on with: python "
        "benchmarks/demo.py --out o --resume\n"
    )


# ------------------------------------------------------------------------------ the scripts


@pytest.mark.slow  # ~30 s: two spawned workers start their runs, then the stop
def test_a_stopped_heterogeneity_study_starts_none_of_its_queued_runs(
    tmp_path: Path, bench: Callable[..., Bench]
) -> None:
    out = tmp_path / "out"
    argv = [
        "--case", "fedprox", "--quick", "--seeds", "1", "--workers", "2", "--no-progress",
        "--out", str(out), "--json", str(out / "h.json"), "--csv", str(out / "h.csv"),
    ]  # fmt: skip
    b = bench(["benchmarks/heterogeneity.py", *argv])
    runs = out / "runs" / "fedprox"

    def both_running() -> bool:
        events = list(runs.glob("*/events.jsonl"))
        return len(events) == 2 and all(e.stat().st_size > 0 for e in events)

    b.wait_for(both_running, "two runs at work")
    os.killpg(b.proc.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    rc, took = b.finish()
    assert rc == 130, b.err[-30:]
    assert _one_stop_line(b.err) == (
        f"interrupted: heterogeneity stopped; 0 of 6 runs finished under {out}; go on with: "
        f"python benchmarks/heterogeneity.py {shlex.join([*argv, '--resume'])}"
    )
    assert took < 30  # the two runs end at once (the queued four used to run: 51 s)
    assert len(list(runs.iterdir())) == 2  # the four queued runs never started ...
    assert list(runs.glob("*/summary.json")) == []  # ... and the two stopped ones never ended
    assert not any((out / f).exists() for f in ("h.json", "h.csv", "fedprox.png"))
    assert b.left() == []


@pytest.mark.slow  # ~25 s each: Ray, its actors and the fused ceiling's processes start
@pytest.mark.parametrize(
    ("sig", "group", "code", "what"),
    [
        (signal.SIGINT, True, 130, "interrupted"),  # Ctrl-C
        (signal.SIGTERM, False, 143, "terminated (SIGTERM)"),  # `timeout`, `kill`
    ],
)
def test_a_stopped_throughput_run_shuts_its_ray_down_in_one_line(
    sig: int, group: bool, code: int, what: str, bench: Callable[..., Bench]
) -> None:
    b = bench(
        [
            "benchmarks/throughput.py",
            "--tasks",
            "digits-mlp-k10",
            "--no-flower",
            "--rounds",
            "1",
            "--min-seconds",
            "8",  # the second measurement then has seconds of work left when it is stopped
            "--repeats",
            "2",
            "--actors",
            "1",
        ]  # fmt: skip
    )
    # the second measurement starts once the first, on a Ray of its own, has ended
    b.wait_for(lambda: any("(2/2)" in ln for ln in b.err), "the second measurement")
    if group:
        os.killpg(b.proc.pid, sig)
    else:
        b.proc.send_signal(sig)
    rc, took = b.finish()
    assert rc == code, b.err[-30:]
    assert (
        _one_stop_line(b.err) == f"{what}: throughput stopped before its end; nothing was written"
    )
    assert took < 30
    assert b.left() == []  # Ray's services and workers, the fused ceiling's processes


@pytest.mark.slow  # ~25 s: the run starts its Ray, then the timeout ends it
def test_a_scale_run_past_its_timeout_is_ended_with_its_session(
    bench: Callable[..., Bench],
) -> None:
    b = bench(
        [
            "benchmarks/scale.py",
            "--populations",
            "10000",
            "--clients-per-round",
            "20",
            "--rounds",
            "300",
            "--timeout",
            "8",
            "--state-algorithm",
            "",
        ]  # fmt: skip
    )
    rc, took = b.finish()
    assert rc == 1, b.err[-30:]
    assert _one_stop_line(b.err) == (
        "error: scale: the run of population 10,000 (fedavg) went past --timeout 8 s: it was "
        "stopped; the benchmark ends here, nothing was written"
    )
    assert b.left() == []  # the run's child, in a session of its own, and its Ray
