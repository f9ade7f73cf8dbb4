"""Joining an existing Ray cluster by address (slow: starts a real Ray head node)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RAY = Path(sys.executable).with_name("ray")


@pytest.mark.slow
def test_simulator_joins_a_running_cluster(tmp_path: Path) -> None:
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", NO_PROXY="127.0.0.1,localhost",
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9",
               RAY_TMPDIR=str(tmp_path / "ray"))
    env.pop("RAY_ADDRESS", None)
    port = "6391"
    subprocess.run([str(RAY), "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats",
                    "--object-store-memory=200000000"], env=env, check=True,
                   capture_output=True, timeout=120)
    try:
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
        subprocess.run([str(RAY), "stop", "--force"], env=env, capture_output=True, timeout=120)
