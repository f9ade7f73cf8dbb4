"""Round-interleaved arms: a seed's runs (without the ledger, with it, ...) in threads of one
process, taking turns a round at a time.

Why: this machine's speed moves in steps that last seconds. The per-round times of stop 42's
back-to-back runs show it: one ledger run went at 150 ms a round for 26 rounds, then at 100 ms;
its plain partner ran at 90-125 ms throughout. Two whole runs 3 s apart can then differ by 25%
for nothing the ledger did, and 18 such pairs left a 90% interval 20 points wide. Taking turns a
round at a time puts every arm's round ``r`` within a second of the others', in the same regime.

How: each arm's run gets a :class:`TakeTurns` callback, which at the plan of every round after
round 0 hands the turn to the next arm and waits for it to come back (so an arm's first turn is
its set-up and round 0, as when it runs alone: a ledger run's deployment overlaps its round 0
only). Only the arm holding the turn runs; an arm's time is its run's ``run_seconds`` less what
it waited for the others (:func:`run_interleaved`).

What stays an arm's own:

- **Its recorder's work.** The ledger arm stops the recorder process (SIGSTOP) when it hands the
  turn on and continues it when the turn is back (:class:`Paused`). Its work for round ``r - 1``
  then overlaps the arm's own round ``r``, as in a run alone, whether it shares the arms' cores
  (it would slow the next arm) or has one of its own (its memory traffic would); and the lag it
  reports is the lag of a run alone.
- **Its torch threads.** Torch keeps the count per OS thread once a thread has made its first
  parallel call, copying the value any thread last set (:func:`own_threads`). Each arm's thread
  fixes its count first, so that whatever one run sets stays in its own arm.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

Clock = Callable[[], float]
#: seconds a stopped study waits for its arms' runs to end (each ends at its next turn)
STOP_GRACE_S = 10.0
STUCK: dict[str, threading.Event] = {}  # the last stopped run_interleaved's unended arms


def own_threads(n: int) -> None:
    """Give the calling thread ``n`` torch threads of its own.

    Torch keeps the count per OS thread (OpenMP's), but a thread's first parallel call copies
    the process-wide value that any thread last set. That copy is made here first, so that a
    later ``set_num_threads`` in another arm's thread leaves this one's count alone."""
    import torch

    torch.get_num_threads()  # the per-thread initialisation, before the set below
    torch.set_num_threads(n)


class Paused:
    """A process stopped while its arm waits for the others (:meth:`leave`: SIGSTOP) and
    continued when the turn is back (:meth:`back`: SIGCONT).

    Parameters
    ----------
    pid : callable
        The process's id at each leave; ``None``: there is none to stop.
    """

    def __init__(self, pid: Callable[[], int | None]) -> None:
        self.pid = pid
        self.stopped: int | None = None

    def leave(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self.stopped = pid

    def back(self) -> None:
        if self.stopped is not None:
            pid, self.stopped = self.stopped, None
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


class Turns:
    """Whose turn it is among ``arms``: cycling in their order, skipping the finished.

    Parameters
    ----------
    arms : sequence of str
        The arms, in turn order; the first holds the first turn.
    clock : callable, optional
        Seconds (``time.perf_counter``); tests give a fake one.
    """

    def __init__(self, arms: Sequence[str], clock: Clock = time.perf_counter) -> None:
        if len(set(arms)) != len(arms) or not arms:
            raise ValueError(f"arms must be distinct and at least one, got {list(arms)}")
        self.arms = list(arms)
        self.turn: str | None = self.arms[0]
        self.done: set[str] = set()
        self.clock = clock
        self.stopping = False  # set by :meth:`stop`: every arm stops at its next turn
        self._cv = threading.Condition()

    def _after(self, arm: str) -> str | None:
        """The next unfinished arm after ``arm`` (itself when it is the last one left)."""
        i = self.arms.index(arm)
        for k in range(1, len(self.arms) + 1):
            nxt = self.arms[(i + k) % len(self.arms)]
            if nxt not in self.done:
                return nxt
        return None

    def wait_turn(self, arm: str, hand_on: bool = False) -> float:
        """Block until it is ``arm``'s turn (first handing the turn on, with ``hand_on``); the
        seconds waited. The clock is read under the lock, before the next arm can start."""
        with self._cv:
            t0 = self.clock()
            if hand_on:
                self.turn = self._after(arm)
                self._cv.notify_all()
            self._cv.wait_for(lambda: self.turn == arm or self.stopping)
            if self.stopping:  # Ctrl-C or SIGTERM in the caller: this arm's run stops here
                raise KeyboardInterrupt(f"arm {arm} stopped")
            return self.clock() - t0

    def stop(self) -> None:
        """Stop every arm: each raises ``KeyboardInterrupt`` where it waits for its turn, or at
        its next round's plan (its run then ends as an interrupted run does)."""
        with self._cv:
            self.stopping = True
            self._cv.notify_all()

    def pass_turn(self, arm: str) -> float:
        """Hand the turn on and wait for it to come back; the seconds waited."""
        return self.wait_turn(arm, hand_on=True)

    def finish(self, arm: str) -> None:
        """``arm`` is done (or failed): the turn moves on and never comes back to it."""
        with self._cv:
            self.done.add(arm)
            if self.turn == arm or self.turn is None:
                self.turn = self._after(arm)
            self._cv.notify_all()


class TakeTurns:
    """Round callback: at the plan of every round after round 0, hand the turn on (hooked
    before the ledger's own callback, so the ledger's work for a round stays in its arm's turn)."""

    def __init__(self, turns: Turns, arm: str, paused: Paused | None = None) -> None:
        self.turns, self.arm, self.paused = turns, arm, paused
        self.waited = 0.0  # seconds this arm's run spent waiting for the others
        self._planned = 0

    def on_plan(self, sim: Any, plan: Any) -> None:
        if self._planned:
            if self.paused is not None:
                self.paused.leave()
            try:
                self.waited += self.turns.pass_turn(self.arm)
            finally:
                if self.paused is not None:
                    self.paused.back()
        self._planned += 1

    def on_round_end(self, sim: Any, record: Any) -> None:
        return None


def run_interleaved(
    jobs: dict[str, Callable[[list[Any]], dict[str, Any]]],
    order: Sequence[str],
    clock: Clock = time.perf_counter,
    threads: dict[str, int] | None = None,
    paused: dict[str, Paused] | None = None,
) -> dict[str, dict[str, Any]]:
    """Run ``jobs`` (arm -> a function of the extra round callbacks returning the run's
    summary) in threads taking turns a round at a time, in ``order``.

    ``threads`` gives arms their torch threads (:func:`own_threads`); ``paused`` stops an arm's
    process (its recorder) while the others hold the turn. Each summary comes back with
    ``run_seconds`` the arm's own time (its run's seconds less its waits), ``wall_seconds`` the
    run's and ``waited_seconds`` the waits. An arm that fails hands the turn on, the others
    finish, and its error is raised (the first arm's in ``order``).
    """
    turns = Turns(order, clock)
    ended = {arm: threading.Event() for arm in order}
    STUCK.clear()
    out: dict[str, dict[str, Any]] = {}
    errors: dict[str, BaseException] = {}

    def go(arm: str) -> None:
        cb = TakeTurns(turns, arm, (paused or {}).get(arm))
        try:
            if threads and arm in threads:
                own_threads(threads[arm])
            turns.wait_turn(arm)
            summary = dict(jobs[arm]([cb]))
            wall = float(summary["run_seconds"])
            summary.update(
                run_seconds=wall - cb.waited, wall_seconds=wall, waited_seconds=cb.waited
            )
            out[arm] = summary
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread below
            errors[arm] = exc
        finally:
            turns.finish(arm)
            ended[arm].set()

    runs = [threading.Thread(target=go, args=(a,), name=f"arm-{a}", daemon=True) for a in order]
    try:  # a stop may come while the arms start: the first one may have stopped its recorder
        for t in runs:
            t.start()
        # not Thread.join: a join interrupted by a signal marks a running thread as ended
        for arm in order:  # (CPython 3.11's _wait_for_tstate_lock), never waited for again
            ended[arm].wait()
    except BaseException:  # Ctrl-C, SIGTERM: every arm's run stops at its next turn and ends
        turns.stop()  # as an interrupted run does; a recorder stopped in another arm's turn
        for p in (paused or {}).values():  # must not stay stopped (its run's close would
            p.back()  # wait for it)
        started = [arm for arm, t in zip(order, runs, strict=True) if t.ident is not None]
        deadline = time.monotonic() + STOP_GRACE_S  # an arm waiting on a Ray the signal
        for arm in started:  # killed never comes back: see :func:`stuck_arms`
            ended[arm].wait(max(0.0, deadline - time.monotonic()))
        STUCK.update({arm: ended[arm] for arm in started if not ended[arm].is_set()})
        raise
    if threads:  # the process-wide count the arms' threads set: this thread's again
        import torch

        torch.set_num_threads(torch.get_num_threads())
    for arm in order:
        if arm in errors:
            raise errors[arm]
    return out


def stuck_arms() -> list[str]:
    """The arms whose runs have not ended, of those still running :data:`STOP_GRACE_S` after
    the last :func:`run_interleaved` was stopped: one mid-round, or waiting on a Ray that the signal
    killed with the process group (it never returns). The process must then end with
    ``os._exit``: at the interpreter's exit such a thread went on to fail on the closed
    recorder, or torch aborted the process ("terminate called without an active exception"),
    or Ray's core worker ended it 60 s later with exit code 1."""
    return [arm for arm, ended in STUCK.items() if not ended.is_set()]


def ray_for_arms(flat: dict[str, Any], arms: int) -> None:
    """Round-interleaved arms on the Ray pool each hold their actors for the whole run: one
    actor per CPU this process may use (as a run alone has), and a local Ray with a CPU for
    each arm's actors (they take turns on the same cores).

    Raises
    ------
    ValueError
        A Ray already running in this process has too few CPUs for them (one line).
    """
    if flat.get("backend", "ray") != "ray" or flat.get("ray_address"):
        return
    import ray

    from actors.ray_setup import ensure_ray

    flat["num_actors"] = flat.get("num_actors") or len(os.sched_getaffinity(0))
    need = arms * flat["num_actors"]
    if ray.is_initialized():
        have = int(ray.cluster_resources().get("CPU", 0))
        if have < need:
            raise ValueError(
                f"--interleave rounds: {arms} arms of {flat['num_actors']} actors need {need} "
                f"CPUs in Ray, the one running here has {have} (or use --interleave runs)"
            )
    ensure_ray(num_cpus=need)
