"""Joining an existing Ray cluster by address (slow: starts a real Ray head node)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).with_name("ray")
#: what ``ray start`` prints once the head's node is registered with its GCS (alive)
READY = "Ray runtime started."


def free_port() -> int:
    """A TCP port nobody listens on now (bound to port 0, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(head: subprocess.Popen[str], timeout_s: float) -> None:
    """Wait until ``ray start --head --block`` says it started (it prints :data:`READY` only
    after the head's raylet answers from its GCS); fail at once if it exits, or after
    ``timeout_s``. Its output is drained to the end, so the head never blocks on the pipe."""
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert head.stdout is not None
        for line in head.stdout:
            lines.append(line)
            if READY in line:
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    while not ready.wait(0.2):
        if head.poll() is not None:
            pytest.fail(f"ray head exited with {head.returncode}:\n{''.join(lines)[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"ray head not ready after {timeout_s:g} s:\n{''.join(lines)[-3000:]}")


@pytest.mark.slow
def test_simulator_joins_a_running_cluster(tmp_path: Path) -> None:
    short = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = dict(
        os.environ,
        RAY_USAGE_STATS_ENABLED="0",
        NO_PROXY="127.0.0.1,localhost",
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
    )
    env.pop("RAY_ADDRESS", None)
    # free ports for the GCS and for the head's other fixed-default listeners, so that a
    # cluster already running on this machine (another test run) cannot collide with it
    port, client_port, agent_port = free_port(), free_port(), free_port()
    # --block keeps the head in this process group, so stopping it stops only this cluster
    head = subprocess.Popen(
        [
            str(RAY),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=2",
            f"--ray-client-server-port={client_port}",
            f"--dashboard-agent-listen-port={agent_port}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={short}",
            "--object-store-memory=200000000",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_ready(head, timeout_s=120)
        assert head.poll() is None, "ray head failed to start"
        out = tmp_path / "run"
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "simulator",
                "--ray-address",
                f"127.0.0.1:{port}",
                "--rounds",
                "2",
                "--num-actors",
                "2",
                "--no-progress",
                "--no-plots",
                "--out",
                str(out),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr
        assert "final test accuracy:" in r.stdout
        assert json.loads((out / "summary.json").read_text())["rounds"] == 2
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
        shutil.rmtree(short, ignore_errors=True)
