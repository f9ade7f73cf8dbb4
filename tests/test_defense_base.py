"""Tests for defenses.base and defenses.fedavg: batch, verdicts, malformed rows, registry."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from defenses import (
    DEFENSES,
    DefenseContext,
    UpdateBatch,
    Verdict,
    make_defense,
    screen_malformed,
    weighted_mean,
)
from defenses.fedavg import FedAvgDefense


def batch_of(
    rows: list[list[float]], samples: list[int], ids: list[int] | None = None
) -> UpdateBatch:
    k = len(rows)
    return UpdateBatch(
        torch.tensor(rows, dtype=torch.float32),
        np.array(ids if ids is not None else range(10, 10 + k), np.int64),
        np.array(samples, np.int64),
        np.zeros(k, np.int64),
        {"loss": np.arange(k, dtype=np.float32)},
    )


CTX = DefenseContext(round=0, global_flat=torch.zeros(3))
ROWS = [[4.0, 0.0, -8.0], [0.0, 2.0, 4.0], [8.0, -4.0, 0.0]]


def test_fedavg_sample_weighted_mean() -> None:
    # weights 1/4, 2/4, 1/4: (4+0+8)/4... per coordinate: (1*4 + 2*0 + 1*8)/4 = 3,
    # (0 + 2*2 - 4)/4 = 0, (-8 + 2*4 + 0)/4 = 0
    res = make_defense("fedavg")(batch_of(ROWS, [1, 2, 1]), CTX)
    assert res.delta.tolist() == [3.0, 0.0, 0.0]
    assert [v.weight for v in res.verdicts] == [0.25, 0.5, 0.25]
    assert [v.client_id for v in res.verdicts] == [10, 11, 12]
    assert all(v.kept and v.reason == "" and math.isnan(v.score) for v in res.verdicts)
    d = res.verdicts[1].to_dict()
    assert d == {"client": 11, "kept": True, "weight": 0.5, "score": None, "reason": ""}


def test_fedavg_uniform_weighting() -> None:
    res = make_defense("fedavg", weighting="uniform")(batch_of(ROWS, [1, 2, 1]), CTX)
    torch.testing.assert_close(res.delta, torch.tensor([4.0, -2 / 3, -4 / 3]))
    assert [v.weight for v in res.verdicts] == pytest.approx([1 / 3] * 3)


def test_empty_batch_gives_zero_update() -> None:
    empty = UpdateBatch(
        torch.zeros(0, 3), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    )
    res = FedAvgDefense()(empty, CTX)
    assert res.delta.tolist() == [0.0, 0.0, 0.0] and res.verdicts == ()


def test_weighted_mean() -> None:
    u = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert weighted_mean(u, np.array([3.0, 1.0])).tolist() == [1.5, 3.0]
    assert weighted_mean(u, np.array([0.0, 0.0])).tolist() == [0.0, 0.0]


def test_subset_keeps_rows_aligned() -> None:
    b = batch_of(ROWS, [1, 2, 3])
    s = b.subset(np.array([2, 0]))
    assert len(s) == 2
    assert s.updates.tolist() == [ROWS[2], ROWS[0]]
    assert s.client_ids.tolist() == [12, 10] and s.num_samples.tolist() == [3, 1]
    assert s.signals["loss"].tolist() == [2.0, 0.0]


def test_screen_malformed_non_finite() -> None:
    rows = [
        [1.0, 2.0, 3.0],
        [float("nan"), 0.0, 0.0],
        [0.0, float("inf"), 0.0],
        [0.0, 0.0, -float("inf")],
        [1.0, 1.0, 1.0],
    ]
    ok, bad = screen_malformed(batch_of(rows, [1] * 5), size=3)
    assert ok.tolist() == [0, 4]
    assert [(v.client_id, v.kept, v.weight, v.reason) for v in bad] == [
        (11, False, 0.0, "non-finite"),
        (12, False, 0.0, "non-finite"),
        (13, False, 0.0, "non-finite"),
    ]


def test_screen_malformed_bad_shape() -> None:
    ok, bad = screen_malformed(batch_of(ROWS, [1, 1, 1]), size=4)
    assert ok.tolist() == []
    assert [(v.client_id, v.reason) for v in bad] == [
        (10, "bad-shape"),
        (11, "bad-shape"),
        (12, "bad-shape"),
    ]
    flat = UpdateBatch(torch.zeros(3), np.arange(3), np.ones(3, np.int64), np.zeros(3, np.int64))
    ok, bad = screen_malformed(flat, size=3)
    assert ok.tolist() == [] and {v.reason for v in bad} == {"bad-shape"}


def test_screen_then_aggregate_ignores_bad_rows() -> None:
    rows = [[2.0, 2.0, 2.0], [float("nan")] * 3, [4.0, 0.0, 2.0]]
    b = batch_of(rows, [1, 5, 3])
    ok, _ = screen_malformed(b, 3)
    res = FedAvgDefense()(b.subset(ok), CTX)
    assert res.delta.tolist() == [3.5, 0.5, 2.0]  # (1*[2,2,2] + 3*[4,0,2]) / 4
    assert [v.weight for v in res.verdicts] == [0.25, 0.75]


def test_verdict_to_dict_rounds_and_scores() -> None:
    v = Verdict(3, False, 1 / 3, 0.5, "outlier")
    assert v.to_dict() == {
        "client": 3,
        "kept": False,
        "weight": 0.33333333,
        "score": 0.5,
        "reason": "outlier",
    }


def test_make_defense_errors_list_valid() -> None:
    with pytest.raises(ValueError) as e:
        make_defense("krum2")
    assert "'krum2'" in str(e.value) and str(sorted(DEFENSES)) in str(e.value)
    with pytest.raises(ValueError) as e:
        make_defense("fedavg", weightin="uniform")
    assert "'weightin'" in str(e.value) and "['weighting']" in str(e.value)
    with pytest.raises(ValueError, match=r"weighting 'median' invalid; valid: \['samples', "):
        make_defense("fedavg", weighting="median")


def test_defense_state_roundtrip_default() -> None:
    d = make_defense("fedavg")
    assert d.state_dict() == {}
    d.load_state_dict({})


def test_round_breaking_a_precondition_is_skipped_with_verdicts() -> None:
    """Krum f=1 on 4 rows (needs n > 4): no crash, no clamp; every row rejected with the
    reason, the aggregate zero. With 5 rows the same rule aggregates."""
    from types import SimpleNamespace

    from simulator.round.aggregate import aggregate

    side = SimpleNamespace(
        space=SimpleNamespace(size=3),
        defense=make_defense("krum", f=1),
        public_x=None,
        public_y=None,
        evaluation=None,
        global_flat=torch.zeros(3),
        global_shared=torch.zeros(3),
        seed=0,
    )
    four = batch_of(ROWS + [[1.0, 1.0, 1.0]], [1, 1, 1, 1])
    delta, verdicts = aggregate(side, 3, four)  # type: ignore[arg-type]
    assert delta.tolist() == [0.0, 0.0, 0.0]
    assert [(v.client_id, v.kept, v.reason) for v in verdicts] == [
        (c, False, "precondition: n > 2f + 2 (n=4, f=1)") for c in (10, 11, 12, 13)
    ]
    five = batch_of(ROWS + [[1.0, 1.0, 1.0], [2.0, 0.0, 0.0]], [1] * 5)
    delta, verdicts = aggregate(side, 3, five)  # type: ignore[arg-type]
    assert sum(v.kept for v in verdicts) == 1 and delta.abs().sum() > 0


def test_configuration_breaking_the_precondition_every_round_is_refused(tmp_path) -> None:
    from simulator.config.sections import build_config
    from simulator.round.engine import Simulation

    cfg = build_config(
        flat=dict(
            num_clients=8,
            clients_per_round=4,
            rounds=1,
            defense="krum",
            defense_params={"f": 1},
            backend="local",
            progress=False,
            plots=False,
            out=str(tmp_path / "r"),
        )
    )
    with pytest.raises(
        ValueError,
        match=r"'krum': needs n > 2f \+ 2 \(n=4, f=1\) with 4 "
        r"clients a round",
    ):
        Simulation(cfg)


@pytest.mark.parametrize(
    ("policy", "defense", "expected"),
    [
        (
            {"round_policy": "first_k", "first_k": 6},
            {"defense": "krum", "defense_params": {"f": 3}},
            r"'krum': needs n > 2f \+ 2 \(n=6, f=3\) with the 6 updates round policy 'first_k' "
            "aggregates a step",
        ),
        (
            {"round_policy": "fedbuff", "policy_params": {"k": 5}},
            {"defense": "krum", "defense_params": {"f": 3}},
            r"\(n=5, f=3\) with the 5 updates round policy 'fedbuff' aggregates a step",
        ),
        (
            {"round_policy": "fedasync"},
            {"defense": "trimmedmean"},
            r"'trimmedmean': needs n > 2f \(n=1, f=1\) with the 1 update round policy "
            "'fedasync' aggregates a step",
        ),
    ],
)
def test_a_policy_whose_every_step_breaks_the_precondition_is_refused(
    tmp_path, policy: dict, defense: dict, expected: str
) -> None:
    """A round of 10 clients would do for Krum with f=3 (10 > 8), but first_k and fedbuff
    aggregate only their k updates a step and fedasync one: every step would be skipped."""
    from simulator.config.sections import build_config
    from simulator.round.engine import Simulation

    flat = dict(num_clients=20, clients_per_round=10, rounds=1, backend="local")
    cfg = build_config(flat={**flat, **policy, **defense, "out": str(tmp_path / "r")})
    with pytest.raises(ValueError, match=expected):
        Simulation(cfg)
    ok = {**flat, **defense, "out": str(tmp_path / "r")}  # the same rule on whole rounds
    if policy["round_policy"] != "fedasync":
        Simulation(build_config(flat={**ok, **policy, "first_k": 9, "policy_params": {}}))
