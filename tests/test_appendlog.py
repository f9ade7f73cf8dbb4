"""Append-only run files: torn tails are cut at the byte, corruption is named, the failpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simulator.run import appendlog
from simulator.run.appendlog import (
    AppendLog,
    CorruptLogError,
    drop_torn_tail,
    read_jsonl,
)
from simulator.run.output import EventLog, read_events, truncate_events

TWO = b'{"round": 0}\n{"round": 1}\n'


def _rec(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def _file(tmp_path: Path, data: bytes, name: str = "events.jsonl") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# ------------------------------------------------------------------------------ jsonl


def test_intact_jsonl_drops_nothing(tmp_path: Path) -> None:
    p = _file(tmp_path, TWO)
    assert drop_torn_tail(p) == 0
    assert p.read_bytes() == TWO
    assert drop_torn_tail(_file(tmp_path, b"", "empty.jsonl")) == 0


def test_missing_file_is_zero_and_stays_missing(tmp_path: Path) -> None:
    p = tmp_path / "absent.jsonl"
    assert drop_torn_tail(p) == 0 and drop_torn_tail(p, "records") == 0
    assert read_jsonl(p) == [] and not p.exists()


def test_torn_json_tail_is_cut_at_the_byte(tmp_path: Path) -> None:
    p = _file(tmp_path, TWO + b'{"rou')
    ino = p.stat().st_ino
    assert read_jsonl(p) == [{"round": 0}, {"round": 1}]
    assert p.read_bytes() == TWO + b'{"rou'  # reading never modifies the file
    assert drop_torn_tail(p) == 5
    assert p.read_bytes() == TWO
    assert p.stat().st_ino == ino  # truncated in place, not rewritten and renamed
    assert drop_torn_tail(p) == 0  # idempotent


def test_last_line_without_newline_is_torn_even_if_it_parses(tmp_path: Path) -> None:
    p = _file(tmp_path, TWO + b'{"round": 2}')
    assert read_jsonl(p) == [{"round": 0}, {"round": 1}]
    assert drop_torn_tail(p) == len(b'{"round": 2}')
    assert p.read_bytes() == TWO


def test_unparsable_last_line_with_newline_is_dropped(tmp_path: Path) -> None:
    p = _file(tmp_path, TWO + b'{"round": \n')
    assert read_jsonl(p) == [{"round": 0}, {"round": 1}]
    assert drop_torn_tail(p) == len(b'{"round": \n')
    assert p.read_bytes() == TWO


@pytest.mark.parametrize("bad", [b'{"rou\n', b"[1, 2]\n", b"\xff\xfe\n"])
def test_bad_middle_line_is_corruption_named_by_line(tmp_path: Path, bad: bytes) -> None:
    data = b'{"round": 0}\n' + bad + b'{"round": 2}\n{"rou'
    p = _file(tmp_path, data)
    for call in (lambda: drop_torn_tail(p), lambda: read_jsonl(p)):
        with pytest.raises(CorruptLogError) as err:
            call()
        msg = str(err.value)
        assert msg.startswith(f"{p}:2: not a JSON record (") and "\n" not in msg
    assert isinstance(err.value, ValueError)
    assert p.read_bytes() == data  # corruption is never silently dropped


def test_blank_lines_are_not_records(tmp_path: Path) -> None:
    p = _file(tmp_path, b'{"round": 0}\n\n{"round": 1}\n')
    assert drop_torn_tail(p) == 0
    assert read_jsonl(p) == [{"round": 0}, {"round": 1}]


# ------------------------------------------------------------------------------ records


def test_records_intact_and_truncated(tmp_path: Path) -> None:
    whole = _rec(b"abc") + _rec(b"") + _rec(b"\x00" * 300)
    p = _file(tmp_path, whole, "blocks.rlp")
    assert drop_torn_tail(p, "records") == 0 and p.read_bytes() == whole
    for torn in (b"\x00\x00", _rec(b"hello")[:-2]):  # cut in the length prefix, in the payload
        p.write_bytes(whole + torn)
        assert drop_torn_tail(p, "records") == len(torn)
        assert p.read_bytes() == whole
    p.write_bytes(b"\x00\x00\x00\x09abc")  # the only record is torn: nothing is left
    assert drop_torn_tail(p, "records") == 7 and p.read_bytes() == b""


def test_unknown_kind_lists_the_valid_ones(tmp_path: Path) -> None:
    for call in (
        lambda: AppendLog(tmp_path / "x", "csv"),
        lambda: drop_torn_tail(tmp_path / "x", "csv"),
    ):
        with pytest.raises(ValueError, match="jsonl, records"):
            call()
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------ writing


def test_append_writes_whole_records(tmp_path: Path) -> None:
    with AppendLog(tmp_path / "a.jsonl") as log:
        log.append(b'{"round": 0}\n')
        assert (tmp_path / "a.jsonl").read_bytes() == b'{"round": 0}\n'  # flushed at once
        for bad in (b'{"round": 1}', b'{"a": 1}\n{"b": 2}\n'):
            with pytest.raises(ValueError, match="one line"):
                log.append(bad)
    with AppendLog(tmp_path / "a.jsonl") as log:  # reopened: appends after what is there
        log.append(b'{"round": 1}\n')
    assert (tmp_path / "a.jsonl").read_bytes() == TWO
    with AppendLog(tmp_path / "b.rlp", "records") as rec:
        rec.append(_rec(b"xy"))
        with pytest.raises(ValueError, match="length"):
            rec.append(b"\x00\x00\x00\x05xy")
    assert (tmp_path / "b.rlp").read_bytes() == _rec(b"xy")


def test_opening_a_torn_jsonl_refuses_to_append(tmp_path: Path) -> None:
    p = _file(tmp_path, TWO + b'{"rou')
    with pytest.raises(ValueError, match="drop_torn_tail"):
        AppendLog(p)
    assert p.read_bytes() == TWO + b'{"rou'


def test_event_log_round_trip_and_resume_truncation(tmp_path: Path) -> None:
    p = tmp_path / "events.jsonl"
    log = EventLog(p)
    for r in range(3):
        log.write({"round": r, "accuracy": float("nan") if r == 1 else 0.5})
    log.close()
    assert p.read_text().splitlines()[1] == '{"round": 1, "accuracy": null}'
    with p.open("ab") as fh:
        fh.write(b'{"round": 3, "acc')  # a kill mid-write of round 3
    assert [e["round"] for e in read_events(p)] == [0, 1, 2]
    truncate_events(p, 2)
    assert p.read_bytes() == b'{"round": 0, "accuracy": 0.5}\n{"round": 1, "accuracy": null}\n'


def test_a_failed_write_cuts_the_file_back_to_its_last_whole_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills after 5 bytes of the second record: the error names the file, the file
    holds the first record only, and the next append (space freed) follows it directly."""
    import errno

    path = tmp_path / "events.jsonl"
    log = AppendLog(path)
    log.append(b'{"round": 0}\n')
    real, calls = os.write, []

    def full(fd: int, data: memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, data[:5])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(appendlog.os, "write", full)
    with pytest.raises(OSError) as err:
        log.append(b'{"round": 1}\n')
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(path)
    assert appendlog.is_disk_full(err.value) and not appendlog.is_disk_full(ValueError())
    assert calls == [13, 8]  # the rest of a partial write is tried before giving up
    assert path.read_bytes() == b'{"round": 0}\n'
    monkeypatch.setattr(appendlog.os, "write", real)
    log.append(b'{"round": 2}\n')
    log.close()
    assert path.read_bytes() == b'{"round": 0}\n{"round": 2}\n'
