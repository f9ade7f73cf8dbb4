"""Running the CLI in a subprocess for the kill -9 tests (a real SIGKILL needs a process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from simulator.run.appendlog import FAILPOINT_ENV

ROOT = Path(__file__).resolve().parents[1]
# wall-clock measurements differ between any two runs (as in test_engine.py)
WALL = ("wall_time", "slowest_train_seconds", "chunks", "placement")


def run_cli(
    *args: str, failpoint: str | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """``python -m simulator ARGS`` with ``FEDSENTRY_FAILPOINT`` set (or unset)."""
    env = {k: v for k, v in os.environ.items() if k != FAILPOINT_ENV}
    env["OMP_NUM_THREADS"] = "1"  # a tiny model: one thread is fastest, and every run alike
    if failpoint is not None:
        env[FAILPOINT_ENV] = failpoint
    return subprocess.run(
        [sys.executable, "-m", "simulator", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_child(
    args: list[str], timeout: float = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in its own session: on a hang past ``timeout`` the child and every
    process it started (e.g. its Ray) are killed together and the test fails."""
    import signal

    import pytest

    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # start_new_session: the group id is the child's pid
        proc.communicate()
        pytest.fail(f"python {' '.join(args)[:80]} did not exit within {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def strip_wall(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events without their wall-clock fields."""
    return [{k: v for k, v in e.items() if k not in WALL} for e in events]
