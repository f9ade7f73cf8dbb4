"""benchmarks.fused.interleaved: runners take turns until each has its quota, and a runner that
is done takes no more turns while a slower one catches up."""

from __future__ import annotations

import time

from benchmarks.fused import interleaved


def test_a_done_runner_takes_no_more_turns() -> None:
    """``slow`` needs one turn per round (each round outlasts the 10 ms block); ``fast`` does
    its 3 rounds in its first turn. Each must report exactly 3 timed rounds (30 updates, 3
    samples), and each runner sees rounds 0, 1, 2, 3 (one warm-up) exactly once."""
    seen: dict[str, list[int]] = {"slow": [], "fast": []}

    def runner(name: str, pause: float):
        def run(r: int) -> tuple[int, int]:
            seen[name].append(r)
            time.sleep(pause)
            return 10, 1

        return run

    res = interleaved(
        {"slow": runner("slow", 0.03), "fast": runner("fast", 0.0)},
        warmup=1,
        rounds=3,
        block_seconds=0.01,
    )
    assert seen == {"slow": [0, 1, 2, 3], "fast": [0, 1, 2, 3]}
    for name in ("slow", "fast"):
        assert res[name]["rounds_timed"] == 3
        assert res[name]["client_updates"] == 30
