"""A worker dies with the process that started it, even when that one is killed with
``kill -9`` (:func:`simulator.run.stop.die_with_parent`; the heterogeneity study's workers used
to run on, writing into its directory, for good)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CHILD = textwrap.dedent(
    """
    import pathlib, sys, time
    from simulator.run.stop import die_with_parent
    die_with_parent(int(sys.argv[1]))
    pathlib.Path(sys.argv[2]).write_text("ready")
    time.sleep(60)
    """
)
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), sys.argv[2]])
    print(child.pid, flush=True)
    child.wait()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is dead too
        return fh.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(tmp_path / "ready")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # the child has set its signal
    assert (tmp_path / "ready").exists() and _alive(child)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not _alive(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the child outlived its killed parent"
