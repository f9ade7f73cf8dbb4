"""Model attacks: hand-checked outputs, constraints, determinism, validation and the registry."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest
import torch

from attacks import ATTACKS, AttackContext, make_attack, pick_malicious, redraw_malicious
from attacks.alie import alie_z
from attacks.base import malicious_count
from attacks.minmax import perturbation, search_gamma

BENIGN = torch.tensor([[1.0, 2.0, 0.0], [3.0, 2.0, 1.0], [2.0, 5.0, -1.0]])


def ctx(
    malicious: torch.Tensor,
    benign: torch.Tensor | None = None,
    n: int | None = None,
    seed: int = 0,
    global_flat: torch.Tensor | None = None,
) -> AttackContext:
    p = malicious.shape[1]
    benign = torch.zeros(0, p) if benign is None else benign
    f = malicious.shape[0]
    g = torch.zeros(p) if global_flat is None else global_flat
    return AttackContext(
        round=0,
        global_flat=g,
        benign=benign,
        num_byzantine=f,
        num_total=f + benign.shape[0] if n is None else n,
        rng=np.random.default_rng(seed),
    )


def test_signflip() -> None:
    mal = torch.tensor([[1.0, -2.0]])
    out = make_attack("signflip", scale=4).apply(mal, ctx(mal))
    assert torch.equal(out, torch.tensor([[-4.0, 8.0]]))
    assert torch.equal(make_attack("signflip").apply(mal, ctx(mal)), -mal)


def test_scale_sends_scaled_negated_model() -> None:
    mal = torch.tensor([[1.0, 0.0]])
    out = make_attack("scale").apply(mal, ctx(mal, global_flat=torch.tensor([1.0, 1.0])))
    assert torch.allclose(out, torch.tensor([[-1.2, -1.1]]))


def test_alie_hand_checked() -> None:
    assert alie_z(10, 2) == pytest.approx(NormalDist().inv_cdf(0.6))
    assert alie_z(10, 2) == pytest.approx(0.253347, abs=1e-6)
    mal = torch.zeros(2, 3)
    out = make_attack("alie").apply(mal, ctx(mal, BENIGN, n=10))
    mu = torch.tensor([2.0, 3.0, 0.0])
    sigma = torch.tensor([1.0, 3.0**0.5, 1.0])  # ddof=1: [(1+1+0)/2, (1+1+4)/2, ...]
    z = NormalDist().inv_cdf(0.6)
    assert out.shape == (2, 3)
    assert torch.allclose(out, (mu - z * sigma).expand(2, 3))
    out = make_attack("alie", z=1.5).apply(mal, ctx(mal, BENIGN, n=10))
    assert torch.allclose(out[0], mu - 1.5 * sigma)


def test_alie_z_stays_finite_for_malicious_majority() -> None:
    assert np.isfinite(alie_z(10, 8)) and alie_z(1, 1) == 0.0


def test_ipm() -> None:
    mal = torch.ones(3, 3)
    out = make_attack("ipm").apply(mal, ctx(mal, BENIGN))
    assert torch.allclose(out, torch.tensor([-0.2, -0.3, 0.0]).expand(3, 3))
    out = make_attack("ipm", eps=100).apply(mal, ctx(mal, BENIGN))
    assert torch.allclose(out[1], torch.tensor([-200.0, -300.0, 0.0]))


def test_omniscient_attacks_fall_back_to_own_rows_without_benign() -> None:
    mal = BENIGN.clone()
    out = make_attack("ipm").apply(mal, ctx(mal))
    assert torch.allclose(out[0], -0.1 * BENIGN.mean(0))


def test_gaussian_shape_determinism_and_std() -> None:
    mal = torch.zeros(2, 200_000)
    atk = make_attack("gaussian", sigma=2.5)
    a, b = atk.apply(mal, ctx(mal, seed=7)), atk.apply(mal, ctx(mal, seed=7))
    assert a.shape == (2, 200_000) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert not torch.equal(a, atk.apply(mal, ctx(mal, seed=8)))
    assert float(a.std()) == pytest.approx(2.5, rel=0.01)
    assert abs(float(a.mean())) < 0.02


def _violation(name: str, m: torch.Tensor, rows: torch.Tensor) -> float:
    """Constraint value minus its bound (<= 0 when satisfied), float64."""
    m, rows = m.double(), rows.double()
    sq = torch.cdist(rows, rows).square()
    d = ((rows - m) ** 2).sum(1)
    if name == "minmax":
        return float(d.max() - sq.max())
    return float(d.sum() - sq.sum(1).max())


@pytest.mark.parametrize("name", ["minmax", "minsum"])
@pytest.mark.parametrize("direction", ["std", "unit", "sign"])
def test_minmax_minsum_constraint_and_maximal_gamma(name: str, direction: str) -> None:
    rows = torch.from_numpy(np.random.default_rng(3).normal(0.5, 1.0, (8, 50))).float()
    mal = torch.zeros(2, 50)
    out = make_attack(name, direction=direction).apply(mal, ctx(mal, rows))
    assert out.shape == (2, 50) and out.dtype == torch.float32
    assert torch.equal(out[0], out[1])
    r64 = rows.double()
    p = perturbation(r64, direction)
    gamma = search_gamma(r64, p, name)
    assert gamma > 0.01
    m = r64.mean(0) + gamma * p
    assert torch.allclose(out[0].double(), m, atol=1e-5)
    assert _violation(name, m, rows) <= 1e-9 * torch.cdist(r64, r64).square().sum()
    assert _violation(name, r64.mean(0) + gamma * (1 + 1e-3) * p, rows) > 0


@pytest.mark.parametrize("name", ["minmax", "minsum"])
def test_minmax_large_gamma_found_beyond_init(name: str) -> None:
    rows = torch.tensor([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]], dtype=torch.float64)
    p = torch.tensor([0.01, 0.01], dtype=torch.float64)
    gamma = search_gamma(rows, p, name, gamma_init=1.0)
    assert gamma > 100
    assert _violation(name, rows.mean(0) + gamma * p, rows) <= 1e-6
    assert _violation(name, rows.mean(0) + gamma * (1 + 1e-3) * p, rows) > 0


@pytest.mark.parametrize("name", ["minmax", "minsum"])
def test_minmax_equal_rows_give_the_mean(name: str) -> None:
    rows = torch.tensor([[1.0, -2.0, 3.0]]).expand(4, 3)
    mal = torch.zeros(1, 3)
    assert torch.equal(make_attack(name).apply(mal, ctx(mal, rows))[0], rows[0])


ALL = [k for k, cls in ATTACKS.items() if cls is not None and cls.kind == "model"]


@pytest.mark.parametrize("name", ALL)
def test_shape_dtype_empty_and_determinism(name: str) -> None:
    rows = torch.from_numpy(np.random.default_rng(1).normal(size=(5, 7))).float()
    mal = torch.from_numpy(np.random.default_rng(2).normal(size=(3, 7))).float()
    atk = make_attack(name)
    out = atk.apply(mal, ctx(mal, rows, seed=4))
    assert out.shape == (3, 7) and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert torch.equal(out, atk.apply(mal, ctx(mal, rows, seed=4)))
    empty = atk.apply(torch.zeros(0, 7), ctx(torch.zeros(0, 7), rows))
    assert empty.shape == (0, 7) and empty.dtype == torch.float32
    assert atk.kind == "model" and atk.name == name


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("signflip", {"scale": 0}, "'scale'"),
        ("signflip", {"scale": "big"}, "'scale'"),
        ("gaussian", {"sigma": -1.0}, "'sigma'"),
        ("gaussian", {"sigma": float("nan")}, "'sigma'"),
        ("scale", {"factor": True}, "'factor'"),
        ("alie", {"z": "x"}, "'z'"),
        ("alie", {"z": float("inf")}, r"^attack 'alie': parameter 'z' must be finite, got inf$"),
        ("gaussian", {"sigma": -1.0}, r"'sigma' must be finite and > 0, got -1.0$"),
        ("ipm", {"eps": 0.0}, "'eps'"),
        ("minmax", {"direction": "up"}, "'direction'"),
        ("minsum", {"tau": 0}, "'tau'"),
        ("minmax", {"gamma_init": -1}, "'gamma_init'"),
        ("minmax", {"max_iters": 0}, "'max_iters'"),
        ("ipm", {"epsilon": 1.0}, r"unknown parameter 'epsilon'; valid: \['eps'\]"),
        ("none", {"scale": 1.0}, "unknown parameter 'scale'"),
    ],
)
def test_invalid_params(name: str, params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_attack(name, **params)


def test_numeric_string_params_are_accepted() -> None:
    assert make_attack("minmax", tau="1e-5").params["tau"] == 1e-5


def test_registry() -> None:
    assert ATTACKS["none"] is None and make_attack("none") is None
    assert set(ATTACKS) == {
        "none",
        "signflip",
        "gaussian",
        "scale",
        "alie",
        "ipm",
        "minmax",
        "minsum",
        "labelflip",
        "backdoor",
        "model_replacement",
    }
    with pytest.raises(ValueError, match=r"unknown attack 'nope'; valid: \['alie'"):
        make_attack("nope")


def test_apply_rejects_mismatched_context() -> None:
    mal = torch.zeros(2, 3)
    bad = AttackContext(
        0,
        torch.zeros(3),
        torch.zeros(1, 3),
        num_byzantine=1,
        num_total=3,
        rng=np.random.default_rng(0),
    )
    with pytest.raises(ValueError, match="num_byzantine"):
        make_attack("signflip").apply(mal, bad)
    with pytest.raises(ValueError, match="P=3"):
        make_attack("signflip").apply(mal, ctx(mal, torch.zeros(1, 4)))


def test_pick_malicious() -> None:
    a = pick_malicious(100, 0.2, seed=5)
    assert a.dtype == np.int64 and len(a) == 20 and len(set(a.tolist())) == 20
    assert np.all(np.diff(a) > 0) and a.min() >= 0 and a.max() < 100
    assert np.array_equal(a, pick_malicious(100, 0.2, seed=5))
    assert not np.array_equal(a, pick_malicious(100, 0.2, seed=6))
    assert len(pick_malicious(10, 0.0, 1)) == 0 and len(pick_malicious(10, 1.0, 1)) == 10
    assert len(pick_malicious(7, 0.3, 1)) == round(2.1)
    with pytest.raises(ValueError, match="attack_fraction"):
        pick_malicious(10, 1.5, 0)


def test_redraw_malicious() -> None:
    selected = np.array([40, 3, 17, 88, 9, 61, 25, 70, 12, 5])
    a = redraw_malicious(selected, 0.3, np.random.default_rng(0))
    assert len(a) == 3 and set(a.tolist()) <= set(selected.tolist()) and np.all(np.diff(a) > 0)
    assert np.array_equal(a, redraw_malicious(selected, 0.3, np.random.default_rng(0)))
    rng = np.random.default_rng(1)
    draws = {tuple(redraw_malicious(selected, 0.3, rng)) for _ in range(20)}
    assert len(draws) > 1
    assert len(redraw_malicious(np.array([], dtype=np.int64), 0.5, rng)) == 0


@pytest.mark.parametrize(
    ("n", "fraction", "count"),
    # half up: Python's round() took 2.5 to 2 and 4.5 to 4 (found at stop 57: 0.15 and 0.25 of
    # 10 both made 2 attackers, 0.35 and 0.45 both 4); 0.15 * 10 is 1.5000000000000002 in floats
    [(10, 0.15, 2), (10, 0.25, 3), (10, 0.35, 4), (10, 0.45, 5), (10, 0.04, 0), (10, 0.05, 1)],
)
def test_the_malicious_count_rounds_half_up(n: int, fraction: float, count: int) -> None:
    assert malicious_count(n, fraction) == count
    assert len(pick_malicious(n, fraction, seed=3)) == count
    assert len(redraw_malicious(np.arange(n), fraction, np.random.default_rng(0))) == count


def test_redraw_each_on_its_own_for_an_asynchronous_step() -> None:
    # a step of fedasync selects one client: a count of 0.3 x 1 rounds to none, so each selected
    # client is malicious with probability 0.3 instead; the draws are rng.random(n) < 0.3
    # default_rng(7).random(4) = 0.625, 0.897, 0.776, 0.225: only the fourth is below 0.3
    rng = np.random.default_rng(7)
    assert redraw_malicious(np.array([11, 12, 13, 14]), 0.3, rng, independent=True).tolist() == [14]
    ones = [
        redraw_malicious(np.array([5]), 0.3, np.random.default_rng(s), True) for s in range(200)
    ]
    assert 40 <= sum(len(o) for o in ones) <= 80  # ~60 of 200 (binomial sd ~6.5)
