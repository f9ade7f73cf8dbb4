"""Joining an existing Ray cluster by address (slow: starts a real Ray head node)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).with_name("ray")


@pytest.mark.slow
def test_simulator_joins_a_running_cluster(tmp_path: Path) -> None:
    short = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", NO_PROXY="127.0.0.1,localhost",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")
    env.pop("RAY_ADDRESS", None)
    port = "6391"
    # --block keeps the head in this process group, so stopping it stops only this cluster
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
         "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={short}",
         "--object-store-memory=200000000"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(8)
        assert head.poll() is None, "ray head failed to start"
        out = tmp_path / "run"
        r = subprocess.run(
            [sys.executable, "-m", "simulator", "--ray-address", f"127.0.0.1:{port}",
             "--rounds", "2", "--num-actors", "2", "--no-progress", "--no-plots",
             "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
            timeout=300)
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
