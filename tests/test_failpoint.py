"""``FEDSENTRY_FAILPOINT``, the project's one fault-injection point
(:mod:`simulator.run.appendlog`): its syntax, a full disk halfway through a record, and a real
SIGKILL at the N-th append."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.run import appendlog
from simulator.run.appendlog import (
    AppendLog,
    Failpoint,
    drop_torn_tail,
    parse_failpoint,
    read_jsonl,
)

ROOT = Path(__file__).resolve().parents[1]


def _rec(payload: bytes) -> bytes:
    """A ``records`` entry: uint32 big-endian length || payload."""
    return len(payload).to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (None, None),
        ("", None),
        ("events.jsonl:4", Failpoint("events.jsonl", 4, False)),
        ("events.jsonl:12:after", Failpoint("events.jsonl", 12, True)),
        ("blocks.rlp:1", Failpoint("blocks.rlp", 1, False)),
        ("events.jsonl:3:enospc", Failpoint("events.jsonl", 3, False, True)),
    ],
)
def test_failpoint_parses(spec: str | None, want: Failpoint | None) -> None:
    assert parse_failpoint(spec) == want


@pytest.mark.parametrize(
    "spec",
    [
        "events.jsonl",
        "events.jsonl:0",
        "events.jsonl:-1",
        "events.jsonl:x",
        ":3",
        "events.jsonl:3:before",
        "events.jsonl:3:after:1",
        "a:b:3",
    ],
)
def test_failpoint_rejects_bad_syntax_in_one_line(spec: str) -> None:
    with pytest.raises(ValueError, match="FEDSENTRY_FAILPOINT") as err:
        parse_failpoint(spec)
    assert "\n" not in str(err.value)


def _arm(monkeypatch: pytest.MonkeyPatch, spec: str) -> None:
    """This process's failpoint is ``spec`` from the next append on."""
    monkeypatch.setenv(appendlog.FAILPOINT_ENV, spec)
    monkeypatch.setattr(appendlog, "_ARMED", appendlog._Armed())


def test_enospc_failpoint_writes_half_then_fails_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _arm(monkeypatch, "blocks.rlp:2:enospc")
    path = tmp_path / "blocks.rlp"
    with AppendLog(path, "records") as log:
        log.append(b"\x00\x00\x00\x02ab")
        with pytest.raises(OSError, match="No space left on device"):
            log.append(b"\x00\x00\x00\x04cdef")
        log.append(b"\x00\x00\x00\x01g")
    assert path.read_bytes() == b"\x00\x00\x00\x02ab\x00\x00\x00\x01g"


def test_bad_failpoint_fails_at_first_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _arm(monkeypatch, "events.jsonl:soon")
    log = AppendLog(tmp_path / "events.jsonl")  # opening does not read it
    with pytest.raises(ValueError, match="FEDSENTRY_FAILPOINT='events.jsonl:soon'"):
        log.append(b"{}\n")
    log.close()


_CHILD = """
import sys
from pathlib import Path
from simulator.run.appendlog import AppendLog
d = Path(sys.argv[1])
with AppendLog(d / "other.jsonl") as o, AppendLog(d / "events.jsonl") as a:
    for i in range(5):
        o.append(b'{"o": %d}\\n' % i)
        a.append(b'{"round": %d, "pad": "xxxxxxxxxx"}\\n' % i)
    b = AppendLog(d / "blocks.rlp", "records")
    for i in range(3):
        b.append(bytes([0, 0, 0, 4]) + b"blk%d" % i)
"""


@pytest.mark.parametrize(
    ("spec", "events", "tail"),
    [
        ("events.jsonl:3", 2, b'{"round": 2, "pad'),  # the first 17 of the 3rd line's 34 bytes
        ("events.jsonl:3:after", 3, b""),
        ("blocks.rlp:2", 5, b"\x00\x00\x00\x04"),  # half of the 2nd 8-byte record
        ("nothing.jsonl:1", 5, None),
    ],
)
def test_failpoint_kills_the_process_at_the_nth_append(
    tmp_path: Path, spec: str, events: int, tail: bytes | None
) -> None:
    env = {**os.environ, appendlog.FAILPOINT_ENV: spec}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == (0 if tail is None else -9), proc.stderr.decode()
    lines = (tmp_path / "events.jsonl").read_bytes().split(b"\n")
    assert [json.loads(x)["round"] for x in lines[:-1]] == list(range(events))
    if spec.startswith("events"):
        assert lines[-1] == tail
        assert len(read_jsonl(tmp_path / "other.jsonl")) == 3  # counted per basename
    elif tail is not None:
        assert (tmp_path / "blocks.rlp").read_bytes() == _rec(b"blk0") + tail
        assert drop_torn_tail(tmp_path / "blocks.rlp", "records") == 4
