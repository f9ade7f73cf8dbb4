"""Run outputs: a JSONL event per round, a summary JSON and a CSV (the PNG plots: :mod:`.plots`).

The event log is an :class:`~simulator.run.appendlog.AppendLog`: one JSON line per round, written
in one write and flushed, so a run killed at any moment (even mid-write) keeps every round it
finished and at most a torn last line; :func:`truncate_events` drops that tail and the rounds
past a checkpoint when a run resumes.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.run.appendlog import AppendLog, CorruptLogError, drop_torn_tail, read_jsonl

CSV_FIELDS = (
    "round",
    "virtual_time",
    "wall_time",
    "accuracy",
    "loss",
    "train_loss",
    "participants",
    "dropped",
    "stale",
    "rejected",
    "upload_bytes",
    "download_bytes",
)

#: the events' byte counts the summary totals (``total_<key>``)
WIRE_FIELDS = (
    "upload_bytes",
    "download_bytes",
    "upload_bytes_uncompressed",
    "download_bytes_uncompressed",
)


def _numpy_scalar(v: Any) -> Any:
    """``json.dumps``' ``default`` for numpy scalars (``np.float64`` is a ``float`` already)."""
    if isinstance(v, (np.floating, np.integer)):
        return v.item()
    raise TypeError(f"Object of type {type(v).__name__} is not JSON serializable")


def event_json(event: dict[str, Any], indent: int | None = None) -> str:
    """One event as a JSON line's text (or, with ``indent``, a document's: ``summary.json``):
    non-finite floats as ``null``, numpy scalars as numbers.

    The common case (every float finite) goes through ``json.dumps`` in one pass; an event
    with a NaN or an infinity (``allow_nan=False`` raises) is cleaned by :func:`_clean` first,
    which gives the same text for everything else (``np.float64`` is a ``float`` subclass and
    ``json`` writes floats with ``float.__repr__``, as it writes ``.item()``'s).
    """
    try:
        return json.dumps(event, allow_nan=False, default=_numpy_scalar, indent=indent)
    except (ValueError, TypeError):
        return json.dumps(_clean(event), indent=indent)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (np.floating, np.integer)):
        return _clean(v.item())
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


class EventLog:
    """Appends one JSON object per line to ``events.jsonl`` (one write and a flush per event).

    Parameters
    ----------
    path : Path
        The log; one that may end in a torn line goes through :func:`truncate_events` first.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._log = AppendLog(path, "jsonl")

    def write(self, event: dict[str, Any]) -> None:
        """Append one round's event."""
        self._log.append((event_json(event) + "\n").encode())

    def close(self) -> None:
        """Close the log."""
        self._log.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a log (none when it is missing), ignoring a torn last line.

    Raises
    ------
    simulator.run.appendlog.CorruptLogError
        A line before the last does not parse.
    """
    return read_jsonl(path)


def truncate_events(path: Path, next_round: int) -> None:
    """Keep only events of rounds before ``next_round`` (used when resuming).

    A torn last line (a kill mid-write) is cut off first; the log is then streamed line by
    line into a temporary file that replaces it, so a kill here leaves one log or the other.
    """
    if not path.is_file():
        if next_round == 0:
            path.write_text("")
            return
        raise CorruptLogError(f"{path} is missing: the run's rounds 0-{next_round - 1} are gone")
    drop_torn_tail(path, "jsonl")
    tmp, kept = path.with_suffix(".jsonl.tmp"), []
    with path.open("rb") as src, tmp.open("wb") as dst:
        for line in src:
            if line.strip() and (r := json.loads(line).get("round", -1)) < next_round:
                kept.append(r)
                dst.write(line)
    if kept != list(range(next_round)):  # the log holds each round before the checkpoint once
        tmp.unlink()
        raise CorruptLogError(
            f"{path} holds {_gap(kept, next_round)} (the checkpoint is at round {next_round}): "
            "it was edited or replaced; the run cannot resume from it"
        )
    tmp.replace(path)


def _gap(kept: list[int], n: int) -> str:
    """What is wrong with a log's rounds ``kept`` that should be ``0 .. n-1`` once each."""
    seen: set[int] = set()
    for r in kept:
        if r in seen:
            return f"round {r} twice"
        seen.add(r)
    gone = next((r for r in range(n) if r not in seen), None)
    return f"no round {gone}" if gone is not None else "its rounds out of order"


class RunSummary:
    """The run's summary, accumulated event by event (never by re-reading the log).

    Memory is O(rounds) small numbers (the CSV/plot series) plus the first-ban rounds of banned
    clients; it is checkpointed with the run (:meth:`state_dict`).
    """

    def __init__(self) -> None:
        self.rounds = 0
        self.last: dict[str, Any] = {}
        self.accs: list[float] = []
        self.final_loss: float | None = None
        self.totals = {
            "client_updates": 0,
            "dropped_total": 0,
            "stale_total": 0,
            "rejected_total": 0,
            "precondition_rounds": 0,
        }
        self.det = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
        self.asr: float | None = None
        self.first_ban: dict[int, int] = {}
        self.clients: dict[str, Any] = {}
        self.series: list[dict[str, Any]] = []  # one CSV row per round
        self.wire = dict.fromkeys(WIRE_FIELDS, 0.0)  # bytes on the wire, summed

    def add(self, e: dict[str, Any]) -> None:
        """Account for one round's event."""
        self.rounds += 1
        self.last = {k: e.get(k) for k in ("virtual_time", "wall_time")}
        if e.get("accuracy") is not None:
            self.accs.append(e["accuracy"])
            self.final_loss = e.get("loss")
        for k, src in (
            ("client_updates", "participants"),
            ("dropped_total", "dropped"),
            ("stale_total", "stale"),
            ("rejected_total", "rejected"),
        ):
            self.totals[k] += len(e.get(src, []))
        # rounds skipped because the draw broke the rule's precondition (verdicts say which)
        self.totals["precondition_rounds"] = self.totals.get("precondition_rounds", 0) + int(
            e.get("precondition") is not None
        )
        for k in self.det:
            self.det[k] += e.get("detection", {}).get(k, 0)
        for k in WIRE_FIELDS:
            self.wire[k] += e.get(k) or 0.0
        if e.get("attack_success_rate") is not None:
            self.asr = e["attack_success_rate"]
        for v in e.get("verdicts", []):
            if v.get("reason") == "banned":
                self.first_ban.setdefault(int(v["client"]), int(e["round"]))
        if e.get("client_accuracy_mean") is not None:
            self.clients = {k: e[k] for k in CLIENT_FIELDS}
        self.series.append(
            {k: (len(e[k]) if isinstance(e.get(k), list) else e.get(k)) for k in CSV_FIELDS}
        )

    def to_dict(self) -> dict[str, Any]:
        """Final, best and last-5 accuracy, totals, throughput and detection figures."""
        accs, wall = self.accs, self.last.get("wall_time") or 0.0
        tp, fp, fn, tn = (self.det[k] for k in ("tp", "fp", "fn", "tn"))
        updates = self.totals["client_updates"]
        return {
            "rounds": self.rounds,
            "final_accuracy": accs[-1] if accs else None,
            "final_loss": self.final_loss,
            "best_accuracy": max(accs) if accs else None,
            "last5_accuracy": float(np.mean(accs[-5:])) if accs else None,
            "virtual_time": self.last.get("virtual_time"),
            "wall_time": wall,
            **self.totals,
            "updates_per_second": updates / wall if wall else None,
            "attack_success_rate": self.asr,
            "detection_precision": tp / (tp + fp) if tp + fp else None,
            "detection_recall": tp / (tp + fn) if tp + fn else None,
            "detection_f1": 2 * tp / (2 * tp + fp + fn) if tp else (0.0 if fp + fn else None),
            "benign_false_rejection": fp / (fp + tn) if fp + tn else None,
            **self.wire_totals(),
            # round at which each banned client was first refused as banned (Siren's penalty)
            "first_ban_round": dict(sorted(self.first_ban.items())),
            **self.clients,
        }

    def wire_totals(self) -> dict[str, float | None]:
        """Bytes on the wire over the run, and each direction's volume: the bytes sent over
        the bytes the same transfers take uncompressed (1 without compression)."""
        w = self.wire
        up, down = w["upload_bytes_uncompressed"], w["download_bytes_uncompressed"]
        return {
            **{f"total_{k}": v for k, v in w.items()},
            "upload_volume": w["upload_bytes"] / up if up else None,
            "download_volume": w["download_bytes"] / down if down else None,
        }

    def state_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.__dict__.update(st)


#: per-client evaluation figures of the last evaluated round, copied into the summary
CLIENT_FIELDS = (
    "client_accuracy_mean",
    "client_accuracy_std",
    "client_accuracy_worst10",
    "clients_evaluated",
)


def summarize(events: list[dict[str, Any]]) -> dict[str, Any]:
    """:class:`RunSummary` of a list of events (tools that hold a log)."""
    s = RunSummary()
    for e in events:
        s.add(e)
    return s.to_dict()


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """The per-round series (:attr:`RunSummary.series`, or events) as a CSV table."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for e in rows:
            w.writerow(
                {k: (len(e[k]) if isinstance(e.get(k), list) else e.get(k)) for k in CSV_FIELDS}
            )
