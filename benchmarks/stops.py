"""The benchmark scripts' stop (the convention of :mod:`simulator.run.stop`), in one place.

Ctrl-C or SIGTERM, at any moment, ends a benchmark run through :func:`run_stoppable` in one line
on stderr and exit code 130 / 143, with no traceback: its ``finally`` blocks run, the Ray it
started is shut down, and every process it started (Ray's services and workers, spawned worker
processes, a child in a session of its own), which carries the run's mark in its environment
(:func:`started`), is gone before the line is printed; even one orphaned by a signal that landed
in the middle of ``ray.init``. A benchmark writes its files whole (:func:`whole`,
:func:`write_text`: a temporary file renamed into place), so that a stopped one leaves no
half-written file, and its stop line says which it wrote.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.ray_setup import let_ray_go, ray_is_up
from simulator.config.fields import ConfigError
from simulator.run.stop import report_stop, sigterm_raises, stopped

#: seconds the processes of a stopped benchmark get to end on their own before SIGKILL
GRACE_S = 2.0
#: Ray settings of the Ray a benchmark starts (a value already in the environment wins). A
#: SIGTERM to the process group reaches Ray's services too (Ctrl-C's SIGINT does not: Ray blocks
#: it in them), and the driver must take it first: no C++ failure-signal handler in the driver
#: (one that landed in ``ray.init`` once its core worker was up met it, not the application's:
#: a stack dump and SIGABRT, exit 134); a blocking ``ray.get`` looks for signals every 20 ms,
#: not every second (the node's death, seen in the meantime, ended the driver with exit 1 in 3
#: of 12 tries, or stalled it for 30 s); and a short flush of the task events at shutdown (the
#: GCS is gone by then: ``ray.shutdown`` waited 5 s for it)
RAY_ENV = {
    "RAY_DISABLE_FAILURE_SIGNAL_HANDLER": "1",
    "RAY_get_check_signal_interval_milliseconds": "20",
    "RAY_task_events_shutdown_flush_timeout_ms": "500",
}

_WRITTEN: list[Path] = []  # the files the running benchmark wrote, in order


@contextmanager
def whole(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write (same suffix: matplotlib takes the format from
    it), renamed to ``path`` when the block ends without an error (if it wrote anything) and
    removed otherwise: ``path`` is written whole or not at all.

    Parameters
    ----------
    path : str or Path
        The file to write.

    Yields
    ------
    Path
        Where the block writes it.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        if tmp.exists():
            os.replace(tmp, path)
            _WRITTEN.append(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole (:func:`whole`)."""
    with whole(path) as tmp:
        tmp.write_text(text)


def written() -> str:
    """What the running benchmark wrote, for its stop line."""
    if not _WRITTEN:
        return "nothing was written"
    if len(_WRITTEN) > 3:
        where = os.path.commonpath([str(p.parent) for p in _WRITTEN])
        return f"only {len(_WRITTEN)} files were written, under {where}"
    names = ", ".join(str(p) for p in _WRITTEN)
    return f"only {names} {'was' if len(_WRITTEN) == 1 else 'were'} written"


def started(mark: str) -> list[int]:
    """The live processes (this one and multiprocessing's resource tracker aside, which goes
    with this process) whose environment holds ``mark``, i.e. that the benchmark which set it
    started, directly or not."""
    from multiprocessing import resource_tracker

    needle = f"{mark}=1".encode()
    spared = {os.getpid(), getattr(resource_tracker._resource_tracker, "_pid", None)}
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) not in spared:
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:  # gone, or another user's
                pass
    return pids


def end_started(mark: str, grace_s: float = GRACE_S) -> None:
    """Wait up to ``grace_s`` for the processes carrying ``mark`` (:func:`started`) to end,
    then SIGKILL those left and wait for them to go."""
    for wait_s, kill in ((grace_s, True), (2.0, False)):
        deadline = time.monotonic() + wait_s
        while (left := started(mark)) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in left if kill else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def end_session(proc: subprocess.Popen[str], grace_s: float = 1.0) -> None:
    """End a child started in a session of its own (``start_new_session``: no signal to this
    process's group reaches it) and its group: SIGTERM, up to ``grace_s`` for the child to
    exit, then SIGKILL to what is left of the group (its Ray, which also held the child's pipes
    open); reaped."""
    if proc.returncode is None:  # not reaped: its pid, its group's id, is still its own
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # a session leader's group id is its pid
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and not os.waitid(
                os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT
            ):  # exited but not reaped: the group's id cannot be another's yet
                time.sleep(0.05)
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, ChildProcessError):
            pass
    try:
        proc.communicate(timeout=5.0)
    except subprocess.TimeoutExpired:  # a pipe held open outside its group: the mark ends it
        proc.kill()
        proc.wait()


@contextmanager
def ctrl_c_blocked() -> Iterator[None]:
    """Processes started inside never see Ctrl-C (SIGINT stays blocked in them, as Ray does in
    its own processes): a worker that reads jobs from its parent (``benchmarks/fused.py``'s)
    printed a ``KeyboardInterrupt`` traceback; its parent ends it. In this thread SIGINT waits
    for the block's end (or goes to another thread), nothing is lost."""
    from multiprocessing import resource_tracker

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    resource_tracker.ensure_running()  # started inside, it would unblock SIGINT here again
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_stoppable(
    name: str,
    body: Callable[[], int],
    study: tuple[str, list[str] | None, Callable[[], str]] | None = None,
) -> int:
    """``body()`` (a benchmark's work; returns its exit code), stopped the project's way.

    A :class:`ConfigError` the work meets (one only the cluster can refuse: more actors than
    its CPUs), or a ConnectionError (a ``--ray-address`` where no Ray answers) is one line on
    stderr, ``"error: ...; nothing was written"``, exit 2. On Ctrl-C
    (exit 130) or SIGTERM (143) it prints one line on stderr: ``"interrupted: NAME
    stopped before its end; nothing was written"`` (or the files it wrote whole); for a
    ``study`` ``(script, argv, kept)`` that goes on with ``--resume``, ``"interrupted: NAME
    stopped; KEPT; go on with: python SCRIPT ARGV --resume"``, ``kept()`` saying what is kept
    (:func:`simulator.run.stop.report_stop`; a full disk there is exit 1). Whatever ends it,
    the Ray it started is shut down (one that was up before, e.g. a test session's, is left),
    and every process it started is ended (:func:`end_started`).

    Parameters
    ----------
    name : str
        The benchmark's name in the line (``throughput``).
    body : callable
        The work; its files go through :func:`whole` / :func:`write_text`.
    study : (str, list of str or None, callable), optional
        The script, its arguments (None: this process's) and what is kept, for a benchmark
        that resumes.

    Returns
    -------
    int
        ``body``'s exit code, or the stop's.
    """
    mark = f"FEDSENTRY_BENCHMARK_{os.getpid()}_{uuid.uuid4().hex[:12]}"
    env = {mark: "1", **{k: v for k, v in RAY_ENV.items() if k not in os.environ}}
    os.environ.update(env)  # inherited by every process started from here on
    ray_before = ray_is_up()
    _WRITTEN.clear()
    seen: list[int] = []  # Ctrl-C came: an error that follows it is the stop's (a worker it
    # ended first breaks a process pool: BrokenProcessPool could reach here before it)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, _on_sigint(seen)) if main else None
    try:
        with sigterm_raises():
            try:
                return body()
            except Exception as exc:  # noqa: BLE001 - re-raised, as itself or as the stop
                if seen:
                    raise KeyboardInterrupt(f"after Ctrl-C: {exc}") from exc
                raise
            finally:
                try:
                    let_ray_go(ray_before)
                finally:
                    end_started(mark)
    except (ConfigError, ConnectionError) as e:  # met once the cluster is known (more actors
        # than its CPUs), or a --ray-address that names no Ray (one line, as the simulator's)
        print(f"error: {str(e).splitlines()[0]}; {written()}", file=sys.stderr, flush=True)
        return 2
    except (KeyboardInterrupt, OSError) as e:
        if study is not None:
            script, argv, kept = study
            return report_stop(e, script, argv, f"{name} stopped; {kept()}")
        if not isinstance(e, KeyboardInterrupt):
            raise
        what, code = stopped(e)
        print(f"{what}: {name} stopped before its end; {written()}", file=sys.stderr, flush=True)
        return code
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGINT, previous)
        for key in env:
            os.environ.pop(key, None)


def _on_sigint(seen: list[int]) -> Callable[[int, object], None]:
    """A SIGINT handler that notes the signal in ``seen``, then raises KeyboardInterrupt."""

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    return handler
