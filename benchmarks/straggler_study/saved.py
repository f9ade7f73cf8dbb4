"""A straggler-study run's figures saved beside its events (``cell.json``), so that a study
stopped part-way goes on with ``--resume`` where it was: a run of the same cell that finished is
read back, not run again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

#: a finished cell's figures beside its events.jsonl (written last: :func:`finished_cell`)
CELL_FILE = "cell.json"
#: config fields naming a file whose contents, not only its name, make the run
TRACE_FIELDS = ("availability_trace", "device_trace")


def run_inputs(flat: dict[str, Any], speed_label_skew: float = 0.0) -> dict[str, Any]:
    """What makes a run of ``flat`` beyond its flat config, as ``cell.json`` keeps it: the
    study's ``--speed-label-skew`` (it slows devices of the population the runs share, which
    the config does not name) and the sha256 of each trace file ``flat`` names (None for one
    that cannot be read: the run would fail)."""
    files: dict[str, str | None] = {}
    for key in TRACE_FIELDS:
        if flat.get(key):
            try:
                files[key] = hashlib.sha256(Path(flat[key]).read_bytes()).hexdigest()
            except OSError:
                files[key] = None
    return {"speed_label_skew": float(speed_label_skew), "trace_sha256": files}


def _plain(doc: Any) -> Any:
    """``doc`` as it reads back from JSON."""
    return json.loads(json.dumps(doc, default=str))


def finished_cell(
    flat: dict[str, Any], out: Path, inputs: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """What :func:`benchmarks.straggler_study.core.run_cell` returned for a run of exactly
    ``flat`` and ``inputs`` (:func:`run_inputs`) that finished in ``out`` (its ``cell.json``,
    written after its events, names the same config and inputs), else None (also for a
    ``cell.json`` that is no JSON object, or one written before it kept its inputs)."""
    from simulator.run.output import read_events

    try:
        saved = json.loads((out / CELL_FILE).read_text())
        if not isinstance(saved, dict):  # valid JSON, but no cell's figures: run it again
            return None
        was = saved.get("flat")  # where the study is aside: a study moved elsewhere goes on
        was = {k: v for k, v in was.items() if k != "out"} if isinstance(was, dict) else was
        if was != _plain({k: v for k, v in flat.items() if k != "out"}):
            return None
        if saved.get("inputs") != (run_inputs(flat) if inputs is None else _plain(inputs)):
            return None
        events = read_events(out / "events.jsonl")
    except (OSError, ValueError):  # missing, or torn by a kill mid-write
        return None
    if len(events) != saved.get("rounds"):
        return None
    keys = ("quartiles", "run_seconds", "global_train_loss", "actor_node_ids")
    return {"events": events, **{k: saved.get(k) for k in keys}}


def save_cell(flat: dict[str, Any], out: Path, cell: dict[str, Any]) -> None:
    """Write ``cell.json``: the cell's figures but its events, with its ``inputs``
    (:func:`run_inputs`; those of ``flat`` alone when the cell has none), a temporary file
    renamed: a kill leaves the old state or the new."""
    keep = {k: v for k, v in cell.items() if k != "events"}
    keep.setdefault("inputs", run_inputs(flat))
    doc = {"flat": dict(flat, out=str(out)), "rounds": len(cell["events"]), **keep}
    tmp = out / (CELL_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, default=str))
    tmp.replace(out / CELL_FILE)
