"""Reading a JSON availability trace (``{"period_s": ..., "devices": [{"device_id": ...,
"online": [[start_s, end_s], ...]}, ...]}``; see :mod:`simulator.population.availability`);
an error names the line where the bad device entry starts."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from simulator.population.availability_rows import finish_rows
from simulator.population.online_intervals import IntervalTrace, period_of
from simulator.population.traces import TraceError

_WS = re.compile(r"[ \t\n\r]*")


def read_json(path: Path, text: str, period_s: float) -> IntervalTrace:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), list):
        raise TraceError(f'{path}:1: expected {{"period_s": ..., "devices": [...]}}')
    extra = sorted(set(doc) - {"period_s", "devices"})
    if extra:
        raise TraceError(f"{path}:1: unexpected key {extra[0]!r}; expected period_s, devices")
    if "period_s" in doc:
        p = doc["period_s"]
        if isinstance(p, bool) or not isinstance(p, int | float) or not math.isfinite(p) or p <= 0:
            line = text.count("\n", 0, max(text.find('"period_s"'), 0)) + 1
            raise TraceError(f"{path}:{line}: period_s must be a finite number > 0, got {p!r}")
        period_s = float(p)
    dev, st, en, entry, traced = [], [], [], [], []
    pending = None
    for i, item in enumerate(doc["devices"]):
        why = _json_entry(item, i, dev, st, en, entry)
        if why:
            pending = (i, why)
            break
        traced.append(item["device_id"])
    rows = (np.array(dev, np.int64), np.array(st, np.float64), np.array(en, np.float64))
    period = period_of(period_s, rows[2]) if len(rows[2]) else 1.0
    cache: dict[int, int] = {}

    def line_of(r: int) -> int:
        k = entry[r] if 0 <= r < len(entry) else -1
        if k not in cache:
            cache[k] = _json_entry_line(text, k)
        return cache[k]

    if pending:
        pending = (_json_entry_line(text, pending[0]), pending[1])
    return finish_rows(path, rows, period, line_of, pending, np.array(traced, np.int64))


def _json_entry(
    item: object, i: int, dev: list[int], st: list[float], en: list[float], entry: list[int]
) -> str | None:
    """Append device entry ``i``'s intervals; what is wrong with it, or None."""
    if not isinstance(item, dict):
        return f"device entry #{i} is not an object"
    for key in ("device_id", "online"):
        if key not in item:
            return f"device entry #{i}: missing key {key!r}"
    extra = sorted(set(item) - {"device_id", "online"})
    if extra:
        return f"device entry #{i}: unexpected key {extra[0]!r}; expected device_id, online"
    d = item["device_id"]
    if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d < 2**63:
        return f"device_id is not an int >= 0: {d!r}"
    if not isinstance(item["online"], list):
        return f"device {d}: 'online' must be a list of [start_s, end_s] pairs"
    for pair in item["online"]:
        if not (
            isinstance(pair, list)
            and len(pair) == 2
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)
        ):
            return f"device {d}: interval {pair!r} is not a [start_s, end_s] pair of numbers"
        try:
            a, b = float(pair[0]), float(pair[1])
        except OverflowError:
            a = b = math.inf
        if not (math.isfinite(a) and math.isfinite(b)):
            return f"device {d}: interval {pair!r} is not finite"
        dev.append(d)
        st.append(a)
        en.append(b)
        entry.append(i)
    return None


def _json_entry_line(text: str, k: int) -> int:
    """Line where device entry ``k`` of the (valid JSON) document starts; -1: the document."""
    dec = json.JSONDecoder()
    pos = _WS.match(text, 0).end() + 1  # past the top-level "{"
    start = 0
    while k >= 0:
        pos = _WS.match(text, pos).end()
        key, pos = dec.raw_decode(text, pos)
        pos = _WS.match(text, pos).end() + 1  # past ":"
        pos = _WS.match(text, pos).end()
        if key != "devices":
            _, pos = dec.raw_decode(text, pos)
            pos = _WS.match(text, pos).end() + 1  # past "," (or the closing "}")
            continue
        pos += 1  # past "["
        for _ in range(k + 1):
            pos = _WS.match(text, pos).end()
            if text[pos] == ",":
                pos = _WS.match(text, pos + 1).end()
            start = pos
            _, pos = dec.raw_decode(text, pos)
        break
    return text.count("\n", 0, start) + 1
