"""The event log's JSON text: one pass for finite events, the cleaning path for the rest, the
same bytes either way (vectors written out by hand)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.run import output
from simulator.run.output import EventLog, event_json

VECTORS = [
    # (event, its line's exact text)
    ({"round": 3, "loss": 0.5, "ids": (1, 2)}, '{"round": 3, "loss": 0.5, "ids": [1, 2]}'),
    (
        {"a": np.int64(7), "b": np.float32(0.25), "c": np.float64(0.1)},
        '{"a": 7, "b": 0.25, "c": 0.1}',
    ),
    (
        {"loss": math.nan, "v": [1.5, -math.inf, np.float32("nan")]},
        '{"loss": null, "v": [1.5, null, null]}',
    ),
    ({"x": {"y": np.float32(0.1)}}, '{"x": {"y": 0.10000000149011612}}'),
    ({"n": None, "ok": True, "s": "é"}, '{"n": null, "ok": true, "s": "\\u00e9"}'),
]


@pytest.mark.parametrize(("event", "text"), VECTORS)
def test_event_json_by_hand(event: dict, text: str) -> None:
    assert event_json(event) == text
    assert event_json(event) == json.dumps(output._clean(event))  # the cleaning path's text


def test_only_events_with_a_non_finite_float_take_the_cleaning_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[object] = []
    real = output._clean
    monkeypatch.setattr(output, "_clean", lambda v: calls.append(v) or real(v))
    event_json({"a": np.float32(1.0), "b": [np.int32(2)]})
    assert calls == []
    event_json({"a": np.float32("inf")})
    assert calls[0] == {"a": np.float32("inf")}


def test_unserializable_values_still_raise() -> None:
    with pytest.raises(TypeError, match="bool"):
        event_json({"flag": np.bool_(True)})
    with pytest.raises(TypeError, match="ndarray"):
        event_json({"row": np.zeros(2)})


def test_event_log_writes_the_lines(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "events.jsonl")
    for event, _ in VECTORS[:3]:
        log.write(event)
    log.close()
    want = "".join(text + "\n" for _, text in VECTORS[:3])
    assert (tmp_path / "events.jsonl").read_text() == want


def test_a_diverged_runs_summary_is_json(tmp_path: Path) -> None:
    # found at stop 57: a 1e30 gaussian attack under fedavg ends in a NaN loss, which
    # summary.json held as a bare NaN (not JSON; events.jsonl wrote null)
    from conftest import small_config

    from simulator.run.experiment import run_experiment

    cfg = small_config(
        tmp_path / "r",
        rounds=2,
        attack="gaussian",
        attack_params={"sigma": 1e30},
        attack_fraction=0.5,
    )
    run_experiment(cfg)
    text = (tmp_path / "r" / "summary.json").read_text()

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    summary = json.loads(text, parse_constant=refuse)
    assert summary["final_loss"] is None and text.startswith('{\n  "')
    assert (
        event_json({"a": math.nan, "b": [1]}, indent=2)
        == '{\n  "a": null,\n  "b": [\n    1\n  ]\n}'
    )
