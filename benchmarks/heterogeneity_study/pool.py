"""The worker processes of ``benchmarks/heterogeneity.py`` (``--workers`` > 1), stoppable.

A ``ProcessPoolExecutor`` left to itself does not stop: a worker hit by Ctrl-C hands the
``KeyboardInterrupt`` back as the run's result and takes the next job, and leaving its ``with``
block waits for every queued job (a stopped study ran its four queued runs to the end, 51 s). Here
a worker that a signal reaches in a run ends that run (its ``finally`` blocks run) and then its
process; an idle one just exits; and :func:`run_pool`, stopped, cancels the queued jobs and ends
the workers (SIGTERM, then SIGKILL after :data:`STOP_S`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.robustness_study.worker import init_worker
from simulator.run.stop import Terminated, die_with_parent

#: seconds the workers of a stopped study get to end their runs before SIGKILL
STOP_S = 10.0

_busy = False  # this worker is in a run
_stopping = False  # a signal already ended (or is ending) this worker


def _stop(signum: int, frame: Any) -> None:
    """A worker's SIGINT / SIGTERM: in a run, raise (the run's ``finally`` blocks run, then
    :func:`run_one` ends the process); idle, exit now; once stopping, nothing more."""
    global _stopping
    if _stopping:
        return
    _stopping = True
    if _busy:
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    os._exit(128 + signum)


def init_stoppable(parent: int) -> None:
    """A worker's initializer: SIGTERM when ``parent`` (the study) dies, even by ``kill -9``
    (the worker ends its run and exits rather than run on for good), one torch thread,
    :func:`_stop` on SIGINT and SIGTERM, and a
    thread lock for tqdm (its default, a multiprocessing lock made by a run's bar, is a named
    semaphore that a worker ended by ``os._exit`` cannot unregister: the resource tracker then
    warned of leaked semaphores)."""
    from tqdm import tqdm

    die_with_parent(parent)
    init_worker()
    tqdm.set_lock(threading.RLock())
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)


def run_one(fn: Callable[[dict[str, Any]], dict[str, Any]], job: dict[str, Any]) -> Any:
    """``fn(job)`` in a worker; a stop in it ends the worker once the run has ended (it takes
    no other job)."""
    global _busy
    try:
        _busy = True
        rec = fn(job)
        _busy = False
        return rec
    except KeyboardInterrupt as e:
        sys.stderr.flush()
        os._exit(128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT))


def end_workers(procs: list[Any], stop_s: float = STOP_S) -> None:
    """SIGTERM each live process of ``procs`` (a run in progress ends through its ``finally``
    blocks), wait up to ``stop_s`` for them all, then SIGKILL those left."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + stop_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(2.0)


def run_pool(
    fn: Callable[[dict[str, Any]], dict[str, Any]], jobs: list[dict[str, Any]], workers: int
) -> Iterator[dict[str, Any]]:
    """``fn(job)`` of every job on ``workers`` spawned processes, as the runs finish. Closed
    or stopped early (use it in ``contextlib.closing``), the queued jobs are cancelled and the
    workers ended (:func:`end_workers`) before it returns."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(
        workers,
        mp_context=mp.get_context("spawn"),
        initializer=init_stoppable,
        initargs=(os.getpid(),),
    )
    try:
        for fut in as_completed([pool.submit(run_one, fn, j) for j in jobs]):
            yield fut.result()
    except BaseException:
        procs = mp.active_children()  # the pool's workers (shutdown() forgets them)
        pool.shutdown(wait=False, cancel_futures=True)
        end_workers(procs)
        pool.shutdown()  # its manager thread and queues, the workers gone
        raise
    pool.shutdown()
