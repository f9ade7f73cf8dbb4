"""The client-state store on a full disk: spill blocks reserved before they are mapped, the
checkpoint's temporary files removed, and a run stopped by a full spill disk resumed bit for bit.

A write through the memory map of a sparse spill file allocates its blocks in a page fault; on a
full disk that fault kills the process with SIGBUS (exit 135, no message: tried on a full tmpfs).
The spill file therefore reserves its blocks (``posix_fallocate``) when it grows, where a full
disk is an ``OSError`` that names the file.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from simulator.state import files as state_files
from simulator.state.spill import SpillFile
from tests.test_population import FEDDYN_SPILLING, _final_global, config

#: the tests of reserved blocks (macOS has no posix_fallocate: its spill files stay sparse)
FALLOCATE = pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="no posix_fallocate")
ROW = (1000,)  # float32: 4,000 bytes a row; a 1 MiB growth step is 262 rows (1,048,000 bytes)


def _enospc(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@FALLOCATE
def test_a_grown_spill_file_has_its_blocks_reserved(tmp_path: Path) -> None:
    """Not sparse: every byte of its capacity is allocated on disk once it grows."""
    f = SpillFile(tmp_path / "t.bin", ROW, np.float32)
    f.alloc(10)
    assert f.capacity == 262  # 1 MiB // 4,000 bytes
    assert os.stat(f.path).st_blocks * 512 >= 262 * 4000 == os.path.getsize(f.path)
    f.alloc(300)  # 310 rows needed: doubles to 524
    assert f.capacity == 524
    assert os.stat(f.path).st_blocks * 512 >= 524 * 4000 == os.path.getsize(f.path)
    f.close()


@FALLOCATE
def test_a_full_disk_while_the_spill_file_grows_names_it_and_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = SpillFile(tmp_path / "t.bin", ROW, np.float32)
    slots = f.alloc(262)  # the first step, full
    f.write(slots[::2], np.arange(131 * 1000, dtype=np.float32).reshape(131, 1000))
    f.release(slots[:3])
    real = os.posix_fallocate

    def half_then_full(fd: int, offset: int, length: int) -> None:
        real(fd, offset, length // 2)  # the file grew by half before the disk filled
        _enospc()

    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", half_then_full)
        with pytest.raises(OSError) as err:
            f.alloc(5)  # 3 freed slots + 2 fresh: needs 264 > 262
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(f.path)
    assert (f.capacity, f.used, os.path.getsize(f.path)) == (262, 259, 262 * 4000)
    again = f.alloc(5)  # room again: the freed slots first, then the grown file's
    assert sorted(again.tolist()) == [0, 1, 2, 262, 263] and f.capacity == 524
    assert f.read(np.array([4, 260]))[:, 0].tolist() == [2000.0, 130000.0]
    f.close()


def test_a_full_disk_while_writing_a_checkpoint_file_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row file's and the manifest's temporary files go, and the error names them."""

    def blocks():
        yield np.zeros((4, 2), np.float32)
        _enospc()

    member = ("values_0", np.dtype(np.float32), (8, 2), blocks())
    with pytest.raises(OSError) as err:
        state_files.write_row_file(tmp_path, "00000002-delta.npz", [member])
    assert err.value.filename == str(tmp_path / ".00000002-delta.npz.tmp")
    assert list(tmp_path.iterdir()) == []

    state_files.write_manifest(tmp_path, {"seq": 1})
    with monkeypatch.context() as m:
        m.setattr(os, "fsync", _enospc)  # a full disk shows at fsync on some filesystems
        with pytest.raises(OSError) as err:
            state_files.write_manifest(tmp_path, {"seq": 2})
    assert err.value.errno == errno.ENOSPC
    assert err.value.filename == str(tmp_path / ".manifest.json.tmp")
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]
    assert (tmp_path / "manifest.json").read_text() == '{\n "seq": 1\n}'


@FALLOCATE
def test_a_run_stopped_by_a_full_spill_disk_resumes_bit_for_bit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FedDyn over 10^5 virtual devices, 100 a round, a 1 MB store: 168 rows of 5,928 bytes
    (the 1,482-parameter MLP's) stay in RAM, so rows spill from round 1 on (32 rows), and the
    spill file grows to 176 rows there (1 MiB) and to 352 at round 3 (232 rows).  The disk is
    full at that second growth: the run stops with an OSError naming the spill file, rounds
    0-2 are saved, and --resume ends with the events and the global model of a run never
    stopped."""
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events

    over = FEDDYN_SPILLING
    grows: list[int] = []
    real = os.posix_fallocate

    def second_fails(fd: int, offset: int, length: int) -> None:
        grows.append(length)
        if len(grows) == 2:
            _enospc()
        real(fd, offset, length)

    stopped = config(tmp_path / "stopped", **over)
    out = Path(stopped.output.out)
    with monkeypatch.context() as m:
        m.setattr(os, "posix_fallocate", second_fails)
        with pytest.raises(OSError) as err:
            run_experiment(stopped)
    assert err.value.errno == errno.ENOSPC and grows == [176 * 5928, 176 * 5928]
    assert Path(err.value.filename).name == "table-0.bin"
    assert len(read_events(out / "events.jsonl")) == 3  # rounds 0-2
    assert not list((out / "state" / "spill").iterdir())  # the spill files are gone

    run_experiment(resume_config(out))
    full_cfg = config(tmp_path / "full", **over)
    run_experiment(full_cfg)
    strip = ("wall_time", "slowest_train_seconds", "chunks", "placement")
    ev, ref = (
        [{k: v for k, v in e.items() if k not in strip} for e in read_events(d / "events.jsonl")]
        for d in (out, Path(full_cfg.output.out))
    )
    assert ev == ref and len(ev) == 5
    assert torch.equal(_final_global(out), _final_global(Path(full_cfg.output.out)))


def test_a_killed_runs_spill_directory_goes_when_the_directory_is_next_used(
    tmp_path: Path,
) -> None:
    # a kill -9 skips the store's cleanup of its spill directory: until stop 50 each kill left
    # one for good (1.1 MB at 200 KB of store; far more at 10^6 FedDyn clients)
    from simulator.run.experiment import run_experiment

    cfg = config(tmp_path / "run", rounds=1)
    spill = Path(cfg.output.out) / "state" / "spill"
    (spill / "clientstore-killed").mkdir(parents=True)
    (spill / "clientstore-killed" / "table-0.bin").write_bytes(b"\0" * 4096)
    (spill / "notes.txt").write_text("not the store's")
    run_experiment(cfg)
    assert [p.name for p in spill.iterdir()] == ["notes.txt"]
