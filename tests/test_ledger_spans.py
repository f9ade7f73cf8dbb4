"""A round's per-client ledger work split over threads (ledger/spans.py): the spans cover every
index once, and a round built on 1 or 4 CPUs is the same round, byte for byte."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from ledger import spans as spans_mod
from ledger.keys import ClientKeys
from ledger.records import update_prefix
from ledger.round_build import Channel, RoundRows, build_round


def _cpus(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr(spans_mod.os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)


@pytest.mark.parametrize(
    ("cpus", "n", "want"),
    [
        (1, 200, [(0, 200)]),  # one CPU: inline
        (4, 40, [(0, 40)]),  # too few items to split
        (3, 100, [(0, 33), (33, 66), (66, 100)]),
        (8, 100, [(0, 33), (33, 66), (66, 100)]),  # at least 32 items a span
        (8, 200, [(0, 50), (50, 100), (100, 150), (150, 200)]),  # at most 4 spans
        (2, 64, [(0, 32), (32, 64)]),
    ],
)
def test_spans_cover_every_index_once(
    monkeypatch: pytest.MonkeyPatch, cpus: int, n: int, want: list[tuple[int, int]]
) -> None:
    _cpus(monkeypatch, cpus)
    seen: list[tuple[int, int]] = []
    spans_mod.spans(n, lambda lo, hi: seen.append((lo, hi)))
    assert sorted(seen) == want


def test_an_error_in_a_span_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    _cpus(monkeypatch, 2)

    def work(lo: int, hi: int) -> None:
        if lo > 0:
            raise KeyError("client 7")

    with pytest.raises(KeyError, match="client 7"):
        spans_mod.spans(100, work)


def _round(n: int) -> RoundRows:
    rng = np.random.default_rng(3)
    return RoundRows(
        2,
        rng.standard_normal((n, 6)).astype(np.float32),
        np.arange(1000, 1000 + 3 * n, 3),
        rng.integers(1, 50, n),
        np.where(np.arange(n) % 5 == 0, 1, 2),  # some rows from round 1's model
        rng.random(n).astype(np.float32),
        np.arange(n) % 7 == 0,
        np.zeros(4, np.float32),
        {"round": 2},
    )


def test_a_round_built_on_one_or_four_cpus_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    where = Channel(b"\x05" * 32, "0x" + "ab" * 20, 31337)
    bases = {1: b"\x01" * 32, 2: b"\x02" * 32}
    data = _round(150)
    built = {}
    for cpus in (1, 4):
        _cpus(monkeypatch, cpus)
        keys = ClientKeys("seed")
        built[cpus] = build_round(data, where, keys, bases.__getitem__, lambda c: c % 2 == 0)
    one, four = built[1], built[4]
    assert [(e.name, e.digest) for e in one.entries] == [(e.name, e.digest) for e in four.entries]
    assert (one.submissions_root, one.admitted_root, one.admitted) == (
        four.submissions_root,
        four.admitted_root,
        four.admitted,
    )
    # by hand: row 17's update entry is the blob header then its float32 values
    upd = {e.name: e for e in four.entries}[f"update/{1000 + 3 * 17}"]
    want = hashlib.sha256(update_prefix(6) + data.rows[17].astype("<f4").tobytes()).digest()
    assert upd.digest == want
    # the odd clients, not admitted before, are admitted with their own public keys
    assert four.admitted == [c for c in data.client_ids.tolist() if c % 2 == 1]


def test_keys_derived_on_threads_are_the_keys_derived_one_by_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _cpus(monkeypatch, 2)
    ids = [5, 9, 5, *range(100, 180)]  # a repeat, and enough to split
    many = ClientKeys(1).get_many(ids, spans_mod.spans)
    one = ClientKeys(1)
    assert [pub for _, pub in many] == [one.get(c)[1] for c in ids]
    assert [k.secret for k, _ in many] == [one.get(c)[0].secret for c in ids]


def test_lent_cpus_run_a_span_and_are_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recorder pinned to CPU 1: inline; with CPU 0 lent (a driver waiting for the round),
    two spans, the pool's thread moved onto {0, 1} for its span and back onto {1} after."""
    _cpus(monkeypatch, 1)
    monkeypatch.setattr(spans_mod.os, "sched_getaffinity", lambda pid: {1}, raising=False)
    moves: list[set[int]] = []
    monkeypatch.setattr(
        spans_mod.os, "sched_setaffinity", lambda pid, cpus: moves.append(set(cpus)), raising=False
    )
    seen: list[tuple[int, int]] = []
    spans_mod.spans(200, lambda lo, hi: seen.append((lo, hi)))
    assert seen == [(0, 200)] and moves == []
    seen.clear()
    with spans_mod.lent([0]):
        spans_mod.spans(200, lambda lo, hi: seen.append((lo, hi)))
    assert sorted(seen) == [(0, 100), (100, 200)]
    assert moves == [{0, 1}, {1}]
    seen.clear()
    spans_mod.spans(200, lambda lo, hi: seen.append((lo, hi)))  # lent for that work only
    assert seen == [(0, 200)]
