"""A straggler-study run's figures saved beside its events (``cell.json``), so that a study
stopped part-way goes on with ``--resume`` where it was: a run of the same cell that finished is
read back, not run again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: a finished cell's figures beside its events.jsonl (written last: :func:`finished_cell`)
CELL_FILE = "cell.json"


def finished_cell(flat: dict[str, Any], out: Path) -> dict[str, Any] | None:
    """What :func:`benchmarks.straggler_study.core.run_cell` returned for a run of exactly
    ``flat`` that finished in ``out`` (its ``cell.json``, written after its events, names the
    same config), else None (also for a ``cell.json`` that is no JSON object)."""
    from simulator.run.output import read_events

    try:
        saved = json.loads((out / CELL_FILE).read_text())
        if not isinstance(saved, dict):  # valid JSON, but no cell's figures: run it again
            return None
        was = saved.get("flat")  # where the study is aside: a study moved elsewhere goes on
        was = {k: v for k, v in was.items() if k != "out"} if isinstance(was, dict) else was
        if was != json.loads(
            json.dumps({k: v for k, v in flat.items() if k != "out"}, default=str)
        ):
            return None
        events = read_events(out / "events.jsonl")
    except (OSError, ValueError):  # missing, or torn by a kill mid-write
        return None
    if len(events) != saved.get("rounds"):
        return None
    keys = ("quartiles", "run_seconds", "global_train_loss", "actor_node_ids")
    return {"events": events, **{k: saved.get(k) for k in keys}}


def save_cell(flat: dict[str, Any], out: Path, cell: dict[str, Any]) -> None:
    """Write ``cell.json`` (a temporary file renamed: a kill leaves the old state or the new)."""
    keep = {k: v for k, v in cell.items() if k != "events"}
    doc = {"flat": dict(flat, out=str(out)), "rounds": len(cell["events"]), **keep}
    tmp = out / (CELL_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, default=str))
    tmp.replace(out / CELL_FILE)
