"""The ledger study's round-interleaved arms (benchmarks/ledger_study/lockstep.py): the turns,
the times less the waits, a failing arm, the pause order, each arm's own torch threads, and the
study's flag end to end (a real recorder-like process stopped and continued:
test_ledger_lockstep_process.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lockstep_helper import interleaved  # noqa: E402

from benchmarks.ledger_study.cli import parse_args  # noqa: E402
from benchmarks.ledger_study.lockstep import Paused, Turns  # noqa: E402


class FakeClock:
    """Seconds that only the arm holding the turn moves on."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _jobs(
    clock: FakeClock,
    rounds: dict[str, int],
    cost: dict[str, float],
    log: list,
    fail: tuple[str, int] | None = None,
    setup: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Fake runs: a set-up (``setup[arm]`` seconds, logged ``(arm, "setup")``, outside the run's
    seconds as in ``run_experiment``), then each round plans (the callbacks' ``on_plan``), logs
    ``(arm, round)`` and spends ``cost[arm]`` seconds; ``fail = (arm, round)`` raises there."""

    def job(arm: str) -> Any:
        def run(callbacks: list[Any]) -> dict[str, Any]:
            log.append((arm, "setup"))
            clock.now += (setup or {}).get(arm, 0.0)
            t0 = clock()
            for r in range(rounds[arm]):
                for cb in callbacks:
                    cb.on_plan(None, None)
                if fail == (arm, r):
                    raise RuntimeError(f"{arm} failed at round {r}")
                log.append((arm, r))
                clock.now += cost[arm]
            return {"run_seconds": clock() - t0, "arm": arm}

        return run

    return {arm: job(arm) for arm in rounds}


def test_arms_take_turns_a_round_at_a_time_and_their_waits_come_off() -> None:
    """A: set-up 0.25 s, 3 rounds of 1 s; B: 0.5 s, 3 of 2 s; C: none, 2 of 0.5 s; in turn
    order A, B, C. An arm's first turn is its set-up and round 0: A [0,1.25], B [1.25,3.75],
    C0 [3.75,4.25], A1 [4.25,5.25], B1 [5.25,7.25], C1 [7.25,7.75] (C done), A2 [7.75,8.75],
    B2 [8.75,10.75]. Its run's seconds start after its set-up: A 0.25..8.75 (wall 8.5, its own
    3), B 1.75..10.75 (9, 6), C 3.75..7.75 (4, 1)."""
    clock, log = FakeClock(), []
    rounds, cost = {"A": 3, "B": 3, "C": 2}, {"A": 1.0, "B": 2.0, "C": 0.5}
    jobs = _jobs(clock, rounds, cost, log, setup={"A": 0.25, "B": 0.5})
    out = interleaved(jobs, ["A", "B", "C"], clock)
    assert log == [
        ("A", "setup"), ("A", 0), ("B", "setup"), ("B", 0), ("C", "setup"), ("C", 0),
        ("A", 1), ("B", 1), ("C", 1), ("A", 2), ("B", 2),
    ]  # fmt: skip
    assert {a: out[a]["wall_seconds"] for a in out} == {"A": 8.5, "B": 9.0, "C": 4.0}
    assert {a: out[a]["waited_seconds"] for a in out} == {"A": 5.5, "B": 3.0, "C": 3.0}
    assert {a: out[a]["run_seconds"] for a in out} == {"A": 3.0, "B": 6.0, "C": 1.0}
    assert out["B"]["arm"] == "B"  # the rest of a run's summary comes back as it was


def test_the_turn_order_is_the_one_given() -> None:
    clock, log = FakeClock(), []
    rounds, cost = {"plain": 2, "ledger": 2}, {"plain": 1.0, "ledger": 1.5}
    out = interleaved(_jobs(clock, rounds, cost, log), ["ledger", "plain"], clock)
    assert [e for e in log if e[1] != "setup"] == [
        ("ledger", 0), ("plain", 0), ("ledger", 1), ("plain", 1)
    ]  # fmt: skip
    assert out["ledger"]["run_seconds"] == 3.0 and out["plain"]["run_seconds"] == 2.0
    assert out["ledger"]["waited_seconds"] == 1.0  # plain's round 0


def test_a_failing_arm_hands_the_turn_on_and_its_error_is_raised() -> None:
    clock, log = FakeClock(), []
    rounds, cost = {"A": 3, "B": 3, "C": 3}, {"A": 1.0, "B": 1.0, "C": 1.0}
    jobs = _jobs(clock, rounds, cost, log, fail=("B", 1))
    with pytest.raises(RuntimeError, match="B failed at round 1"):
        interleaved(jobs, ["A", "B", "C"], clock)
    assert [e for e in log if e[1] != "setup"] == [
        ("A", 0), ("B", 0), ("C", 0), ("A", 1), ("C", 1), ("A", 2), ("C", 2)
    ]  # fmt: skip


def test_turns_refuse_repeated_or_no_arms() -> None:
    with pytest.raises(ValueError, match="distinct"):
        Turns(["A", "A"])
    with pytest.raises(ValueError, match="distinct"):
        Turns([])


class LogPause(Paused):
    """A :class:`Paused` that logs instead of signalling."""

    def __init__(self, log: list, arm: str) -> None:
        super().__init__(lambda: None)
        self.log, self.arm = log, arm

    def leave(self) -> None:
        self.log.append((self.arm, "leave"))

    def back(self) -> None:
        self.log.append((self.arm, "back"))


def test_a_paused_arm_leaves_before_the_next_arm_runs_and_is_back_before_its_own() -> None:
    clock, log = FakeClock(), []
    rounds, cost = {"ledger": 3, "plain": 2}, {"ledger": 1.0, "plain": 1.0}
    jobs = _jobs(clock, rounds, cost, log)
    interleaved(jobs, ["ledger", "plain"], clock, paused={"ledger": LogPause(log, "ledger")})
    assert log == [
        ("ledger", "setup"), ("ledger", 0), ("ledger", "leave"),
        ("plain", "setup"), ("plain", 0), ("ledger", "back"),
        ("ledger", 1), ("ledger", "leave"), ("plain", 1), ("ledger", "back"), ("ledger", 2),
    ]  # fmt: skip


def test_each_arm_trains_with_its_own_torch_threads() -> None:
    """Arms of 1, 2 and 1 torch threads read their own count in every turn after a parallel
    call, though each arm's thread sets the process-wide value as it starts (a thread's first
    parallel call would copy the last one set, 1, into arm B)."""
    import torch

    seen: dict[str, list[int]] = {"A": [], "B": [], "C": []}

    def job(arm: str) -> Any:
        def run(callbacks: list[Any]) -> dict[str, Any]:
            for _ in range(3):
                for cb in callbacks:
                    cb.on_plan(None, None)
                torch.ones(64, 64).add(1).sum()  # a parallel call: the thread's count is set
                seen[arm].append(torch.get_num_threads())
            return {"run_seconds": 1.0}

        return run

    before = torch.get_num_threads()
    threads = {"A": 1, "B": 2, "C": 1}
    interleaved({a: job(a) for a in threads}, list(threads), time.perf_counter, threads=threads)
    assert seen == {"A": [1, 1, 1], "B": [2, 2, 2], "C": [1, 1, 1]}
    assert torch.get_num_threads() == before  # this thread's own count is untouched


def test_rounds_are_the_default_and_runs_can_be_asked(capsys: pytest.CaptureFixture[str]):
    assert parse_args([]).interleave == "rounds"
    assert parse_args(["--interleave", "runs"]).interleave == "runs"
    with pytest.raises(SystemExit) as exc:
        parse_args(["--interleave", "seeds"])
    assert exc.value.code == 2 and "invalid choice: 'seeds'" in capsys.readouterr().err


def test_tiny_study_interleaves_rounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The study's two arms of a seed take turns a round at a time (by default); their times
    exclude the waits (this checks the mechanics, not the figures)."""
    import simulator.run.experiment as experiment
    from benchmarks.ledger_study.main import main

    log: list[tuple[str, int]] = []
    run = experiment.run_experiment

    class Log:
        def __init__(self, arm: str) -> None:
            self.arm = arm

        def on_round_end(self, sim: Any, record: Any) -> None:
            log.append((self.arm, record.round))

    def spy(cfg: Any, callbacks: Any = ()) -> dict[str, Any]:
        arm = Path(cfg.output.out).name.split("-")[0]
        return run(cfg, callbacks=[*callbacks, Log(arm)])

    monkeypatch.setattr(experiment, "run_experiment", spy)
    out = tmp_path / "study"
    argv = ["--tasks", "robustness", "--seeds", "1", "--repeats", "1", "--rounds", "3"]
    argv += [
        "--committee",
        "1",
        "--jobs",
        "1",
        "--no-tamper",
        "--no-progress",
    ]
    argv += ["--set", "local_epochs=1", "--out", str(out), "--json", str(tmp_path / "l.json")]
    assert main(argv) == 0
    assert log == [("plain", 0), ("ledger", 0), ("plain", 1), ("ledger", 1), ("plain", 2)] + [
        ("ledger", 2)
    ]
    (task,) = json.loads((tmp_path / "l.json").read_text())["tasks"]
    (row,) = task["runs"]
    assert task["interleave"] == "rounds" and row["same_accuracy"] and task["audit"]["clean"]
    for arm in ("plain", "ledger"):  # the run's own seconds include the other arm's turns
        wall = json.loads((out / "robustness" / f"{arm}-s0" / "summary.json").read_text())
        assert 0 < row[f"{arm}_seconds"] < wall["run_seconds"]
    assert row["overhead"] == pytest.approx(row["ledger_seconds"] / row["plain_seconds"] - 1)
    assert "the arms taking turns a round at a time" in capsys.readouterr().out
