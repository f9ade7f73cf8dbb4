"""The cohort-scale paths of the distance-based rules: Gram distances with exact re-scoring
(Krum, Multi-Krum, Bulyan), the one-pass Weiszfeld loop, and benchmarks/defense_cost.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import defenses.distances as distances
import defenses.screen as screen
from benchmarks import defense_cost
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.bulyan import closest_to_median, select_exact, select_fast
from defenses.distances import exact_sq_dist_rows, exact_sq_dists, gram_sq_dists, share_copies
from defenses.geomed import weiszfeld, weiszfeld_reference
from defenses.krum import fast_krum_scores, krum_scores, select_lowest
from defenses.median import median_of_sorted

CTX = DefenseContext(round=0, global_flat=torch.zeros(1))


@pytest.fixture
def fast_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small batches take the fast path too (they take the exact one by default)."""
    monkeypatch.setattr(distances, "EXACT_WORK", 0)


def batch_of(x: torch.Tensor, ids: np.ndarray | None = None) -> UpdateBatch:
    n = len(x)
    return UpdateBatch(
        x, np.arange(n) if ids is None else ids, np.ones(n, np.int64), np.zeros(n, np.int64)
    )


ROWS = torch.tensor([[0.0, 0.0], [3.0, 4.0], [6.0, 8.0], [0.0, 1.0]])
#   squared distances: (0,1)=25 (0,2)=100 (0,3)=1 (1,2)=25 (1,3)=18 (2,3)=85
D2 = [[0, 25, 100, 1], [25, 0, 25, 18], [100, 25, 0, 85], [1, 18, 85, 0]]


def test_hand_checked_distances_and_scores() -> None:
    np.testing.assert_allclose(exact_sq_dists(ROWS), D2, rtol=1e-15)  # sqrt, then squared
    gd = gram_sq_dists(ROWS)
    np.testing.assert_allclose(gd.d2, D2, rtol=1e-12, atol=1e-12)
    assert (np.diag(gd.d2) == 0).all() and (gd.d2 == gd.d2.T).all()
    scores, bound = fast_krum_scores(gd, 2)  # two nearest: 1+25, 18+25, 25+85, 1+18
    np.testing.assert_allclose(scores, [26, 43, 110, 19], rtol=1e-12)
    assert (bound < 1e-9).all()


def test_exact_rows_match_the_exact_matrix_bit_for_bit() -> None:
    x = torch.randn(40, 300, generator=torch.Generator().manual_seed(3)) + 5.0
    full = exact_sq_dists(x)
    rows = exact_sq_dist_rows(x.double(), [0, 5, 22])
    assert np.array_equal(rows, full[[0, 5, 22]])


def cases() -> list[tuple[torch.Tensor, np.ndarray]]:
    """Random clouds with an offset, near-ties (a lattice) and bit-identical rows."""
    g = np.random.default_rng(0)
    out = []
    for t in range(24):
        n, d = int(g.integers(7, 30)), int(g.integers(2, 120))
        x = g.normal(size=(n, d)) * 10 ** g.uniform(-2, 2) + g.normal(size=d) * 10 ** g.uniform(
            -1, 3
        )
        x = torch.tensor(x, dtype=torch.float32)
        if t % 3 == 0:
            for _ in range(n // 2):
                x[g.integers(n)] = x[g.integers(n)]
        if t % 3 == 1:
            x = torch.round(x * 2) / 2
        out.append((x, g.permutation(n) + 100))
    return out


@pytest.mark.parametrize(
    ("name", "screened"),
    [("krum", False), ("multikrum", False), ("bulyan", False), ("krum", True), ("multikrum", True)],
)
def test_fast_selection_equals_exact(
    name: str, screened: bool, fast_always: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Gram path (and, ``screened``, the float32 screen of defenses/screen.py, whose scores
    are within SCREEN_RTOL) selects the exact path's rows."""
    if screened:
        monkeypatch.setattr(screen, "SCREEN_WORK", 0)
    for x, ids in cases():
        n = len(x)
        for f in range(0, (n - 3) // 4 + 1, 2):
            a = make_defense(name, f=f)(batch_of(x, ids), CTX)
            b = make_defense(name, f=f, exact=True)(batch_of(x, ids), CTX)
            assert [v.kept for v in a.verdicts] == [v.kept for v in b.verdicts]
            np.testing.assert_allclose(
                [v.score for v in a.verdicts],
                [v.score for v in b.verdicts],
                rtol=screen.SCREEN_RTOL if screened else 1e-6,
            )
            torch.testing.assert_close(a.delta, b.delta, rtol=1e-6, atol=1e-6)


def test_duplicates_share_distances_and_tie_by_id(fast_always: None) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 40, generator=g) * 3 + 100.0
    x[4] = x[7] = x[1]  # three copies: the best Krum scores, tied
    gd = gram_sq_dists(x)
    assert gd.group.tolist() == [0, 1, 2, 3, 1, 5, 6, 1, 8]
    assert gd.d2[1, 4] == gd.d2[4, 7] == gd.d2[1, 7] == 0
    assert np.array_equal(np.sort(gd.d2[1]), np.sort(gd.d2[7]))
    ids = np.array([50, 40, 30, 20, 12, 60, 70, 11, 80])
    scores, bound = fast_krum_scores(gd, 9 - 1 - 2)
    assert scores[1] == scores[4] == scores[7]
    assert select_lowest(gd, scores, bound, ids, 6, 1).tolist() == [7]  # client 11
    assert gd.exact_calls == 0  # copies tie by id without re-scoring
    res = make_defense("krum", f=1)(batch_of(x, ids), CTX)
    assert [v.client_id for v in res.verdicts if v.kept] == [11]


def test_copies_share_their_first_rows_distances() -> None:
    d2 = np.array([[0, 4.0, 1e-17, 9], [4.0, 0, 4.1, 5], [1e-17, 4.1, 0, 9.2], [9, 5, 9.2, 0]])
    out, radius = share_copies(d2, np.array([1.0, 2, 1.5, 3]), np.array([0, 1, 0, 3]))
    assert out.tolist() == [[0, 4, 0, 9], [4, 0, 4, 5], [0, 4, 0, 9], [9, 5, 9, 0]]
    assert radius.tolist() == [1, 2, 1, 3]


def test_boundary_recheck_repairs_a_wrong_gram_order() -> None:
    # row 1 scores 2^-38 below row 0; a Gram error of 1e-9 on one pair would flip them
    x = torch.tensor([[0.0], [2.0**-41], [2.0], [-2.0], [100.0]])
    gd = gram_sq_dists(x)
    exact = krum_scores(exact_sq_dists(x), 2)
    gd.d2[1, 2] = gd.d2[2, 1] = gd.d2[1, 2] + 1e-9  # the Gram path alone would pick row 0
    scores, bound = fast_krum_scores(gd, 2)
    bound[:] = np.maximum(bound, 2e-9)  # ... and the bound says it may be off
    assert np.argmin(scores) != np.argmin(exact)
    calls = gd.exact_calls
    chosen = select_lowest(gd, scores, bound, np.arange(5), 2, 1)
    assert chosen.tolist() == [int(np.argmin(exact))] and gd.exact_calls > calls


def test_boundary_recheck_triggers_on_ties(fast_always: None) -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [9.0, 9.0]])
    gd = gram_sq_dists(x)
    scores, bound = fast_krum_scores(gd, 2)
    chosen = select_lowest(gd, scores, bound, np.array([4, 3, 2, 1, 0]), 2, 1)
    assert chosen.tolist() == [3] and gd.exact_calls >= 2  # four tied corners: client 1 wins


def test_bulyan_incremental_loop_matches_reference(fast_always: None) -> None:
    g = np.random.default_rng(5)
    for _ in range(6):
        n = int(g.integers(11, 40))
        x = torch.tensor(g.normal(size=(n, 30)) + g.normal(size=30) * 50, dtype=torch.float32)
        x[: n // 5] = x[0]
        ids = g.permutation(n)
        f = int(g.integers(1, (n - 3) // 4 + 1))
        gd = gram_sq_dists(x)
        assert select_fast(gd, f, n - 2 * f, ids) == select_exact(
            exact_sq_dists(x), f, n - 2 * f, ids
        )


def test_closest_to_median_window() -> None:
    g = torch.Generator().manual_seed(2)
    s = torch.sort(torch.round(torch.randn(13, 200, generator=g) * 3), dim=0).values.double()
    med = median_of_sorted(s)
    ref = torch.gather(s, 0, torch.argsort((s - med).abs(), dim=0, stable=True)[:5]).mean(0)
    torch.testing.assert_close(closest_to_median(s, 5), ref, rtol=1e-12, atol=1e-12)


def test_geomed_matches_reference_loop() -> None:
    g = torch.Generator().manual_seed(4)
    x = (torch.randn(40, 500, generator=g) + 2.0).double()
    x[:5] *= 30
    a = torch.rand(40, generator=g, dtype=torch.float64) + 0.1
    a = a / a.sum()
    v, w = weiszfeld(x, a, 1e-6, 100, 1e-10)
    v0, w0 = weiszfeld_reference(x, a, 1e-6, 100, 1e-10)
    torch.testing.assert_close(v, v0, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(w, w0, rtol=1e-9, atol=1e-15)


def test_compute_device_cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distances.compute_device() == torch.device("cpu")
    gd = gram_sq_dists(ROWS)
    assert isinstance(gd.d2, np.ndarray) and gd.x.device.type == "cpu"
    res = make_defense("geomed")(batch_of(ROWS), CTX)
    assert res.delta.device.type == "cpu"


def test_benchmark_quick_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "d.json"
    assert (
        defense_cost.main(
            [
                "--quick",
                "--sizes",
                "12",
                "--dims",
                "20",
                "--defenses",
                "krum,multikrum,bulyan,geomed,median,fltrust",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    assert {r["defense"] for r in rows} == {
        "krum",
        "multikrum",
        "bulyan",
        "geomed",
        "median",
        "median/samples",  # sample-weighted, against the sorted weighted code
        "fltrust",
    }
    assert all(r["same_rows"] for r in rows if "same_rows" in r)
    assert all(r["rel_err"] <= 1e-6 for r in rows if "rel_err" in r)
    assert "krum" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--sizes", "x"],
        ["--defenses", "nope"],
        ["--repeats", "0"],
        ["--sizes", "2"],
        ["--budget-s", "-1"],
    ],
)
def test_benchmark_bad_input_exits_2(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        defense_cost.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
