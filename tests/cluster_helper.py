"""Running a helper script that starts its own Ray (a ``ray.cluster_utils.Cluster``) in a
subprocess, and cleaning up after it: one Ray per process, and this pytest session may already
own one. Used by tests/test_two_node.py and tests/test_pool_pinning.py."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OFFLINE_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment holds ``marker`` (the ``RAY_TMPDIR=...`` given to the helper
    alone, which every Ray process it starts inherits)."""
    pids = []
    needle = marker.encode()
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:  # gone, or not ours
                pass
    return pids


def stop(proc: subprocess.Popen[str], marker: str) -> None:
    """Stop the helper's process group, then any process that still carries ``marker``."""
    if proc.poll() is None:  # not reaped yet, so its group id cannot have been reused
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait_s)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
    for _ in range(3):  # Ray processes outside the group (none expected)
        left = marked_pids(marker)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


@contextmanager
def helper_run(script: Path, args: list[str], what: str, timeout_s: float) -> Iterator[str]:
    """Run ``python script *args`` with a private short ``RAY_TMPDIR`` (Ray's socket paths must
    stay short; it also keeps the helper's cluster away from ``/tmp/ray``, where a plain
    ``ray.init()`` would find and join it); yield its output once it exits with status 0 (the
    test fails otherwise, or after ``timeout_s``); stop everything it started on the way out."""
    short = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    env = {**os.environ, **OFFLINE_ENV, "RAY_TMPDIR": short}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{what} still running after {timeout_s:g} s")
        assert proc.returncode == 0, f"{what} failed:\n{log[-4000:]}"
        yield log
    finally:
        stop(proc, f"RAY_TMPDIR={short}")
        shutil.rmtree(short, ignore_errors=True)
