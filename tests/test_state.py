"""ClientStore: per-client rows in RAM within a budget, spilling to disk, incremental checkpoints.

Rows are small (4 float32 = 16 bytes) so every expected number can be checked by hand:
a checkpoint's payload is 16 bytes of values plus 8 bytes of id per row, 8 bytes per deletion.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from simulator.state import files as state_files
from simulator.state import spill as state_spill
from simulator.state.rows import StoreError
from simulator.state.store import ClientStore

ROW = 16  # bytes of one (4,) float32 row


def rows(*ids: int) -> np.ndarray:
    """Row of client i: [i, i + 0.5, -i, i / 4] (exact in float32)."""
    i = np.array(ids, np.float32)[:, None]
    return np.hstack([i, i + 0.5, -i, i / 4]).astype(np.float32)


def store_h(budget_rows: int = 100, spill: Path | None = None) -> ClientStore:
    store = ClientStore(budget_rows * ROW, spill)
    store.declare("h", (4,))
    return store


def manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def names(m: dict) -> set[str]:
    return {f["name"] for f in m["files"]}


def row_files(directory: Path) -> set[str]:
    return {p.name for p in directory.glob("*.npz")}


def assert_same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


# ------------------------------------------------------------------ basics


def test_absent_ids_read_as_zeros_and_not_present() -> None:
    store = store_h()
    store.put("h", np.array([2, 5]), np.array([[1, 2, 3, 4], [5, 6, 7, 8]], np.float32))
    values, present = store.get("h", np.array([5, 7, 2]))
    np.testing.assert_array_equal(values, [[5, 6, 7, 8], [0, 0, 0, 0], [1, 2, 3, 4]])
    np.testing.assert_array_equal(present, [True, False, True])
    assert values.dtype == np.float32
    np.testing.assert_array_equal(store.has("h", np.array([7, 2])), [False, True])
    assert ("h", 5) in store and ("h", 7) not in store and "h" in store and "g" not in store
    assert store.count("h") == 2 and store.count() == 2
    empty, none = store.get("h", np.array([], np.int64))
    assert empty.shape == (0, 4) and none.shape == (0,)


def test_round_trip_across_two_tables_with_different_shapes() -> None:
    store = ClientStore(1 << 20)
    store.declare("h", (3,))
    store.declare("bn", (2, 2), np.float64)
    store.declare("h", (3,))  # same declaration again: no-op
    assert store.row_bytes("h") == 12 and store.row_bytes("bn") == 32
    store.put("h", np.array([1, 9]), np.array([[1, 2, 3], [7, 8, 9]], np.float32))
    store.put("bn", np.array([9]), np.array([[[0.1, 0.2], [0.3, 0.4]]]))
    store.put("h", np.array([9]), np.array([[-7, -8, -9]], np.float32))  # overwrite
    h, _ = store.get("h", np.array([9, 1]))
    np.testing.assert_array_equal(h, [[-7, -8, -9], [1, 2, 3]])
    bn, present = store.get("bn", np.array([1, 9]))
    np.testing.assert_array_equal(present, [False, True])
    np.testing.assert_array_equal(bn, [[[0, 0], [0, 0]], [[0.1, 0.2], [0.3, 0.4]]])
    assert bn.dtype == np.float64
    assert store.count("h") == 2 and store.count("bn") == 1 and store.count() == 3
    assert store.memory_bytes_used <= store.memory_bytes


def test_values_keep_their_exact_bits(tmp_path: Path) -> None:
    bits = np.array([[0x7FC00001, 0x80000000, 0x00000001, 0x7F800000]], np.uint32)
    odd = bits.view(np.float32)  # NaN with payload, -0.0, smallest subnormal, +inf
    store = store_h(budget_rows=0, spill=tmp_path / "spill")  # everything lives on disk
    store.put("h", np.array([3]), odd)
    assert_same_bits(store.get("h", np.array([3]))[0], odd)
    store.save(tmp_path / "ck")
    loaded = ClientStore.load(tmp_path / "ck", 1 << 20)
    assert_same_bits(loaded.get("h", np.array([3]))[0], odd)


# ------------------------------------------------------------------ memory budget and spilling


def test_budget_of_three_rows_spills_and_reads_back(tmp_path: Path) -> None:
    store = store_h(budget_rows=3, spill=tmp_path)  # 48 bytes of RAM
    ids = np.arange(10)
    store.put("h", ids, rows(*range(10)))
    assert store.memory_bytes_used == 48 and store.disk_bytes_used > 0
    # the first three of the call fit in RAM, the other seven went to disk
    np.testing.assert_array_equal(store.resident("h", ids), [1, 1, 1] + [0] * 7)
    values, present = store.get("h", ids)
    assert present.all()
    assert_same_bits(values, rows(*range(10)))
    np.testing.assert_array_equal(values[7], [7, 7.5, -7, 1.75])
    assert store.memory_bytes_used <= 48 and store.count("h") == 10
    spill = list(tmp_path.iterdir())
    assert len(spill) == 1  # the store's private spill directory
    store.close()
    assert not spill[0].exists()


def test_least_recently_used_row_is_the_one_spilled(tmp_path: Path) -> None:
    store = store_h(budget_rows=3, spill=tmp_path)
    for i in (0, 1, 2):
        store.put("h", np.array([i]), rows(i))  # LRU order: 0 1 2
    store.get("h", np.array([0]))  # 1 2 0
    store.put("h", np.array([3]), rows(3))  # 1 is the oldest: spilled
    np.testing.assert_array_equal(store.resident("h", np.arange(4)), [1, 0, 1, 1])
    values, _ = store.get("h", np.array([1]))  # read back from disk, moves to RAM; 2 goes out
    assert_same_bits(values, rows(1))
    np.testing.assert_array_equal(store.resident("h", np.arange(4)), [1, 1, 0, 1])
    assert store.memory_bytes_used == 48


def test_lru_spans_tables(tmp_path: Path) -> None:
    store = ClientStore(3 * ROW, tmp_path)
    store.declare("a", (4,))
    store.declare("b", (2,))  # 8-byte rows
    store.put("a", np.array([0, 1]), rows(0, 1))
    store.put("b", np.array([5]), np.array([[1, 2]], np.float32))
    store.get("a", np.array([0]))  # order: a1 b5 a0
    store.put("b", np.array([6, 7]), np.array([[3, 4], [5, 6]], np.float32))  # needs 16 bytes
    np.testing.assert_array_equal(store.resident("a", np.array([0, 1])), [True, False])
    np.testing.assert_array_equal(store.resident("b", np.array([5, 6, 7])), [True, True, True])
    assert store.memory_bytes_used <= 48
    np.testing.assert_array_equal(store.get("b", np.array([5, 6, 7]))[0], [[1, 2], [3, 4], [5, 6]])
    assert_same_bits(store.get("a", np.array([0, 1]))[0], rows(0, 1))


def test_delete_frees_slots_that_are_reused(tmp_path: Path) -> None:
    ram = store_h(budget_rows=4)  # no spill directory: 4 rows at most
    ram.put("h", np.arange(4), rows(0, 1, 2, 3))
    ram.delete("h", np.array([1, 3, 99]))  # 99 has no row: ignored
    assert ram.count("h") == 2
    np.testing.assert_array_equal(ram.get("h", np.arange(4))[1], [True, False, True, False])
    ram.put("h", np.array([7, 8]), rows(7, 8))  # fits again in the freed slots
    assert ram.memory_bytes_used == 4 * ROW
    assert_same_bits(ram.get("h", np.array([0, 2, 7, 8]))[0], rows(0, 2, 7, 8))

    # On disk: rows of 256 KiB, so the spill file's first 1 MiB chunk holds exactly 4 rows.
    disk = ClientStore(0, tmp_path)
    disk.declare("big", (65536,))
    big = np.arange(6 * 65536, dtype=np.float32).reshape(6, 65536)
    disk.put("big", np.arange(4), big[:4])
    assert disk.disk_bytes_used == 1 << 20
    disk.delete("big", np.array([0, 2]))
    disk.put("big", np.array([4, 5]), big[4:])  # reuses the two freed slots
    assert disk.disk_bytes_used == 1 << 20
    values, present = disk.get("big", np.array([0, 1, 2, 3, 4, 5]))
    np.testing.assert_array_equal(present, [False, True, False, True, True, True])
    assert_same_bits(values[[1, 3, 4, 5]], big[[1, 3, 4, 5]])


def test_rows_in_ram_stay_put_and_evicted_slots_are_reused(tmp_path: Path) -> None:
    store = store_h(budget_rows=4, spill=tmp_path)
    store.put("h", np.arange(4), rows(0, 1, 2, 3))
    t = store._tiers.tables[0]
    before = dict(t.loc)
    store.get("h", np.array([1, 3]))  # order: 0 2 1 3
    store.put("h", np.array([7, 8]), rows(7, 8))  # 0 and 2 go to disk, 7 and 8 take their slots
    np.testing.assert_array_equal(
        store.resident("h", np.array([0, 1, 2, 3, 7, 8])), [0, 1, 0, 1, 1, 1]
    )
    assert t.loc[1] == before[1] and t.loc[3] == before[3]  # not moved
    assert {t.loc[7], t.loc[8]} == {before[0], before[2]}
    assert store.memory_bytes_used == 4 * ROW
    assert_same_bits(store.get("h", np.array([0, 1, 2, 3, 7, 8]))[0], rows(0, 1, 2, 3, 7, 8))


def test_an_eviction_is_one_background_write_that_reads_wait_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    pwrite = state_spill._pwrite

    def slow_pwrite(path: Path, data: np.ndarray, offset: int) -> None:
        calls.append((len(data) * data[0].nbytes, offset))
        time.sleep(0.2)
        pwrite(path, data, offset)

    monkeypatch.setattr(state_spill, "_pwrite", slow_pwrite)
    big = np.arange(12 * 65536, dtype=np.float32).reshape(12, 65536)  # 256 KiB rows
    store = ClientStore(4 * big[0].nbytes, tmp_path)
    store.declare("big", (65536,))
    store.put("big", np.arange(4), big[:4])
    store.put("big", np.arange(4, 8), big[4:8])  # rows 0-3 leave RAM in one write
    assert calls == [(4 * big[0].nbytes, 0)]
    values, present = store.get("big", np.arange(4))  # waits for that write
    assert present.all()
    assert_same_bits(values, big[:4])
    store.put("big", np.arange(8, 12), big[8:])
    assert_same_bits(store.get("big", np.arange(12))[0], big)
    store.close()


def test_random_operations_match_a_dict(tmp_path: Path) -> None:
    """Puts, gets, deletes and saves on three tables (one of 256 KiB rows, whose evictions are
    written in the background) against a plain dict, checking the tiers' invariants."""
    rng = np.random.default_rng(7)
    shapes = {"a": (3,), "b": (2, 2), "big": (65536,)}
    for budget, spill in [(40 * ROW + 3 * 65536 * 4, True), (9 * ROW, True), (60 * ROW, False)]:
        store = ClientStore(budget, tmp_path / "spill" if spill else None)
        model: dict[str, dict[int, np.ndarray]] = {name: {} for name in shapes}
        for name, shape in shapes.items():
            store.declare(name, shape)
        for _ in range(150):
            name = str(rng.choice(list(shapes)))
            ids = rng.choice(40, size=rng.integers(0, 12), replace=False) - 10  # some negative
            op = rng.random()
            if op < 0.45:
                values = rng.standard_normal((len(ids), *shapes[name])).astype(np.float32)
                try:
                    store.put(name, ids, values)
                except StoreError:
                    assert not spill
                    continue
                model[name].update(zip(ids.tolist(), values, strict=True))
            elif op < 0.8:
                ids = np.concatenate([ids, ids[:2]])  # repeated ids read the same row
                got, present = store.get(name, ids)
                for c, g, p in zip(ids.tolist(), got, present, strict=True):
                    assert p == (c in model[name])
                    assert_same_bits(g, model[name][c] if p else np.zeros_like(g))
            elif op < 0.95:
                store.delete(name, ids)
                for c in ids.tolist():
                    model[name].pop(c, None)
            else:
                store.save(tmp_path / f"ck{budget}")
                loaded = ClientStore.load(tmp_path / f"ck{budget}", 1 << 30)
                for n, rows_of in model.items():
                    ks = np.array(sorted(rows_of), np.int64)
                    assert loaded.count(n) == len(ks)
                    if len(ks):
                        assert_same_bits(loaded.get(n, ks)[0], np.stack([rows_of[c] for c in ks]))
                loaded.close()
            tiers = store._tiers
            assert tiers.memory_bytes_used() <= budget
            in_ram = set()
            for t in tiers.tables:
                assert set(t.loc) == set(model[t.name])
                slots = [s for s in t.loc.values() if s >= 0]
                assert len(slots) == t.n and len(t.free) == t.cap - t.n
                assert set(slots).isdisjoint(t.free) and len(set(t.free)) == len(t.free)
                assert all(t.owner[s] == c for c, s in t.loc.items() if s >= 0)
                in_ram |= {(t.index, c) for c, s in t.loc.items() if s >= 0}
                if t.disk is not None:
                    assert t.disk.used == len(t.loc) - t.n
            if spill:
                assert set(tiers._lru) == in_ram
        store.close()


# ------------------------------------------------------------------ checkpoints


def test_save_writes_only_changed_rows_and_load_is_bitwise(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    store = store_h()
    store.put("h", np.arange(10, 15), rows(10, 11, 12, 13, 14))
    store.save(ck)
    first = manifest(ck)["files"]
    assert [(f["kind"], f["rows"], f["payload"]) for f in first] == [("snapshot", 5, 5 * 24)]

    store.put("h", np.array([13, 11]), rows(130, 110))
    store.delete("h", np.array([14]))
    store.save(ck)
    files = manifest(ck)["files"]
    assert files[0] == first[0]
    delta = files[1]
    assert (delta["kind"], delta["rows"], delta["deleted"], delta["payload"]) == (
        "delta",
        2,
        1,
        2 * 24 + 8,
    )
    with np.load(ck / delta["name"]) as npz:
        np.testing.assert_array_equal(npz["ids_0"], [11, 13])
        assert_same_bits(npz["values_0"], rows(110, 130))
        np.testing.assert_array_equal(npz["deleted_0"], [14])
    assert delta["bytes"] == (ck / delta["name"]).stat().st_size < first[0]["bytes"]

    store.save(ck)  # nothing changed: nothing written
    assert manifest(ck)["files"] == files

    loaded = ClientStore.load(ck, 1 << 20)
    values, present = loaded.get("h", np.arange(10, 15))
    np.testing.assert_array_equal(present, [True, True, True, True, False])
    assert_same_bits(values[:4], rows(10, 110, 12, 130))
    assert loaded.count("h") == 4 and loaded.tables == {"h": ((4,), np.dtype(np.float32))}


def test_deltas_past_twice_the_live_data_compact_into_a_snapshot(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    store = store_h()
    store.put("h", np.arange(4), rows(0, 1, 2, 3))  # live payload 4 * 24 = 96, limit 192
    store.save(ck)
    store.put("h", np.array([0, 1, 2]), rows(10, 11, 12))
    store.save(ck)  # deltas 72 <= 192
    store.put("h", np.array([1, 2, 3]), rows(21, 22, 23))
    before = store.save(ck)  # 144 <= 192
    assert [f["kind"] for f in before["files"]] == ["snapshot", "delta", "delta"]
    store.put("h", np.array([0, 3]), rows(30, 33))
    store.delete("h", np.array([2]))  # live 3 * 24 = 72, limit 144 < 144 + 56
    after = store.save(ck)
    assert after == manifest(ck)
    assert [(f["kind"], f["rows"]) for f in after["files"]] == [("snapshot", 3)]
    # the replaced manifest's files stay until the next save
    assert row_files(ck) == names(after) | names(before)
    assert sorted(p.name for p in ck.iterdir() if p.suffix != ".npz") == ["manifest.json"]
    loaded = ClientStore.load(ck, 1 << 20)
    values, present = loaded.get("h", np.arange(4))
    np.testing.assert_array_equal(present, [True, True, False, True])
    assert_same_bits(values[[0, 1, 3]], rows(30, 21, 33))


def test_crash_between_delta_and_manifest_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ck = tmp_path / "ck"
    store = store_h()
    store.put("h", np.arange(3), rows(0, 1, 2))
    store.save(ck)
    store.put("h", np.array([1]), rows(100))

    def crash(directory: Path, data: dict) -> None:
        raise OSError("power cut")

    with monkeypatch.context() as m:
        m.setattr(state_files, "write_manifest", crash)
        with pytest.raises(OSError, match="power cut"):
            store.save(ck)
    assert len(list(ck.glob("*-delta.npz"))) == 1  # written, but no manifest lists it
    assert_same_bits(ClientStore.load(ck, 1 << 20).get("h", np.arange(3))[0], rows(0, 1, 2))

    store.save(ck)  # the change is still pending and goes into a delta now
    assert [f["kind"] for f in manifest(ck)["files"]] == ["snapshot", "delta"]
    assert_same_bits(ClientStore.load(ck, 1 << 20).get("h", np.arange(3))[0], rows(0, 100, 2))


def test_load_into_a_spilling_store_and_keep_saving_incrementally(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    store = store_h(budget_rows=2, spill=tmp_path / "spill")
    store.put("h", np.arange(6), rows(*range(6)))
    store.save(ck)
    store.close()
    loaded = ClientStore.load(ck, 2 * ROW, tmp_path / "spill")
    assert loaded.memory_bytes_used <= 2 * ROW and loaded.disk_bytes_used > 0
    assert_same_bits(loaded.get("h", np.arange(6))[0], rows(*range(6)))
    loaded.put("h", np.array([4]), rows(40))
    loaded.save(ck)
    assert [f["kind"] for f in manifest(ck)["files"]] == ["snapshot", "delta"]
    again = ClientStore.load(ck, 1 << 20)
    assert_same_bits(again.get("h", np.arange(6))[0], rows(0, 1, 2, 3, 40, 5))
    loaded.close()
    assert list((tmp_path / "spill").iterdir()) == []


@pytest.mark.parametrize("compact", [False, True], ids=["delta", "compacted"])
def test_an_older_manifest_stays_loadable_until_the_next_save(
    tmp_path: Path, compact: bool
) -> None:
    """The engine records save()'s manifest in its own checkpoint.pt, its commit point.

    A crash after ``save`` but before checkpoint.pt is replaced leaves the engine with the
    previous manifest, which must still load, and saving on from there must stay correct.
    """
    ck = tmp_path / "ck"
    store = store_h(budget_rows=2, spill=tmp_path / "spill")
    store.put("h", np.arange(4), rows(0, 1, 2, 3))
    store.save(ck)
    store.put("h", np.array([0]), rows(100))
    m1 = store.save(ck)  # committed: snapshot + delta
    assert [f["kind"] for f in m1["files"]] == ["snapshot", "delta"] and m1 == manifest(ck)
    assert store.save(ck) == m1  # nothing changed: the same manifest back
    if compact:  # live 24, limit 48 < deltas 24 + 24 + 4 * 8
        store.delete("h", np.arange(4))
        store.put("h", np.array([9]), rows(9))
    else:
        store.put("h", np.array([1, 2]), rows(11, 12))
    m2 = store.save(ck)  # ... and the process dies before checkpoint.pt names m2
    assert [f["kind"] for f in m2["files"]] == (
        ["snapshot"] if compact else ["snapshot", "delta", "delta"]
    )
    assert row_files(ck) == names(m1) | names(m2)

    # (a) the committed manifest loads bitwise, whatever the directory's manifest is now
    at_m1 = ClientStore.load(ck, 2 * ROW, tmp_path / "spill", manifest=m1)
    values, present = at_m1.get("h", np.arange(5))
    np.testing.assert_array_equal(present, [True] * 4 + [False])
    assert_same_bits(values[:4], rows(100, 1, 2, 3))
    assert at_m1.count("h") == 4
    assert_same_bits(
        ClientStore.load(ck, 1 << 20).get("h", np.array([9]))[0],
        rows(9) if compact else np.zeros((1, 4), np.float32),
    )

    # (b) saving on from m1: the directory holds m2, so this is a full snapshot
    at_m1.put("h", np.array([3, 7]), rows(33, 7))
    at_m1.delete("h", np.array([2]))
    m3 = at_m1.save(ck)
    assert [f["kind"] for f in m3["files"]] == ["snapshot"]
    expect_ids, expect = np.array([0, 1, 3, 7]), rows(100, 1, 33, 7)
    for m in (None, m3):
        again = ClientStore.load(ck, 1 << 20, manifest=m)
        assert again.count("h") == 4
        assert_same_bits(again.get("h", expect_ids)[0], expect)
    # m1 (still the committed one until checkpoint.pt names m3) is kept, and still loads
    assert row_files(ck) == names(m1) | names(m2) | names(m3)
    assert_same_bits(
        ClientStore.load(ck, 1 << 20, manifest=m1).get("h", np.arange(4))[0], rows(100, 1, 2, 3)
    )

    # (c) the next save continues m3 with a delta; only the last two manifests' files remain
    at_m1.put("h", np.array([1]), rows(11))
    m4 = at_m1.save(ck)
    assert [f["kind"] for f in m4["files"]] == ["snapshot", "delta"]
    assert row_files(ck) == names(m3) | names(m4)
    assert not (names(m1) | names(m2)) & row_files(ck)
    assert_same_bits(ClientStore.load(ck, 1 << 20).get("h", expect_ids)[0], rows(100, 11, 33, 7))
    with pytest.raises(StoreError, match="missing"):
        ClientStore.load(ck, 1 << 20, manifest=m1)


# ------------------------------------------------------------------ errors


def test_errors_name_what_is_wrong(tmp_path: Path) -> None:
    store = store_h(budget_rows=3)  # no spill directory
    store.put("h", np.arange(3), rows(0, 1, 2))
    with pytest.raises(StoreError, match=r"1 new rows need 64 bytes.*memory_bytes=48.*spill_dir"):
        store.put("h", np.array([3]), rows(3))
    assert store.count("h") == 3  # the failed put changed nothing
    with pytest.raises(
        StoreError,
        match=r"'h' is declared with shape \(4,\) and dtype float32, "
        r"not shape \(5,\)",
    ):
        store.declare("h", (5,))
    with pytest.raises(StoreError, match=r"values have shape \(2, 3\), expected \(2, 4\)"):
        store.put("h", np.array([0, 1]), np.zeros((2, 3), np.float32))
    with pytest.raises(StoreError, match="unknown table 'g'"):
        store.get("g", np.array([0]))
    with pytest.raises(StoreError, match="unique, 1 repeats"):
        store.put("h", np.array([1, 1]), rows(1, 1))
    with pytest.raises(StoreError, match="ids must be integers"):
        store.get("h", np.array([0.5]))
    with pytest.raises(StoreError, match="no checkpoint"):
        ClientStore.load(tmp_path / "nothing", 1 << 20)
    good = store.save(tmp_path / "ck")
    bad = {**good, "files": [{**good["files"][0], "name": "../escape.npz"}]}
    with pytest.raises(StoreError, match="lists its row files wrongly"):
        ClientStore.load(tmp_path / "ck", 1 << 20, manifest=bad)
    with pytest.raises(StoreError, match="not a fedsentry-client-store manifest"):
        ClientStore.load(tmp_path / "ck", 1 << 20, manifest={"seq": 1})
    # replaying a checkpoint into a store that already holds tables would mix the two
    with pytest.raises(StoreError, match=r"new, empty store; this one has the tables \['h'\]"):
        store.restore(tmp_path / "ck")
    assert store.count("h") == 3
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("h", np.array([0]))
