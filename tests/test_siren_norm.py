"""Siren's norm bound (calibrated variant, ``defenses/siren_screen.py``): a row whose update norm
is more than ``norm_ratio`` times the non-alarmers' median norm fails the robust screening
(``"abnormal-norm"``), by hand and on a run whose attackers send Gaussian noise of sigma 1e30."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from defense_stubs import batch_of, stub_scorer

from defenses import DefenseContext, make_defense
from defenses.siren_screen import screen_robust

#: rows 0-2 raise no alarm (norms 1, 2, 1000: median 2, bound 10 x 2 = 20), rows 3-4 alarm
#: (norms 30 and exactly 20). Every model scores 0.1 on the root set, as at round 0: the
#: accuracy test passes them all (ref 0.1, margin 2 x sqrt(2 x 0.1 x 0.9 / 100) = 0.0849)
ROWS = [[1.0, 0.0], [0.0, 2.0], [-1000.0, 0.0], [30.0, 0.0], [12.0, 16.0]]
ALARM = np.array([0, 0, 0, 1, 1], bool)
ACC = np.full(5, 0.1)


def screened(norm_ratio: float) -> dict[int, str]:
    u = torch.tensor(ROWS, dtype=torch.float64)
    ids = np.arange(5)
    return screen_robust(ids, ACC, u, ids, ALARM, 100, 0.1, 2.0, norm_ratio)[0]


def test_norm_bound_by_hand() -> None:
    # 1000 > 20 and 30 > 20 fail; 20 is not above 20. The reference mean update leaves row 2
    # out (beyond the bound): mean of [1, 0] and [0, 2] = [0.5, 1], every dot product > 0
    assert screened(10.0) == {2: "abnormal-norm", 3: "abnormal-norm"}
    # no bound (the screening before the fix): the mean of rows 0-2 is [-333, 2/3], so the
    # huge row 2 is kept and rows 0 ([1, 0]: -333), 3 (-9990) and 4 (-3996 + 10.7) fail
    assert screened(math.inf) == {0: "abnormal-cosine", 3: "abnormal-cosine", 4: "abnormal-cosine"}


def test_no_norm_bound_without_a_typical_norm() -> None:
    # the quiet rows' updates are all zero (median norm 0): no norm test, and a zero mean
    # update means no direction test either, so the alarmer's [5, 0] is kept
    u = torch.tensor([[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]], dtype=torch.float64)
    ids = np.arange(3)
    alarm = np.array([0, 0, 1], bool)
    assert screen_robust(ids, np.full(3, 0.1), u, ids, alarm, 100, 0.1, 2.0) == ({}, 0.1)


def test_defense_rejects_the_huge_rows_and_the_paper_variant_has_no_bound() -> None:
    b = batch_of(ROWS, [1] * 5, signals={"alarm": ALARM})
    ctx = DefenseContext(
        0,
        torch.zeros(2),
        public_y=torch.zeros(100, dtype=torch.int64),
        score_models=stub_scorer([0.1] * 5, [1.0] * 5, [1.0] * 5),
    )
    res = make_defense("siren")(b, ctx)
    assert [(v.kept, v.reason) for v in res.verdicts] == [
        (True, ""),
        (True, ""),
        (False, "abnormal-norm"),
        (False, "abnormal-norm"),
        (True, ""),
    ]
    # one sample each: the mean of [1, 0], [0, 2], [12, 16]
    assert res.delta.tolist() == pytest.approx([13 / 3, 6.0])
    unbounded = make_defense("siren", norm_ratio=math.inf)(b, ctx)
    assert [v.kept for v in unbounded.verdicts] == [False, True, True, False, False]
    # paper rule (two alarmers): alarmers 3-4 pass (best 3, cos(u4, u3) > 0), the quiet best
    # 0.1 is not below 0.9 x 0.1, so the alarmers are dropped; against the quiet best row 0,
    # rows 1 (dot 0) and 2 (dot -1000) fail by direction
    paper = make_defense("siren", variant="paper")(b, ctx)
    assert [v.reason for v in paper.verdicts] == [
        "",
        "abnormal-cosine",
        "abnormal-cosine",
        "alarmer-dropped",
        "alarmer-dropped",
    ]


@pytest.mark.parametrize("bad", [0.5, float("nan"), "10", True])
def test_norm_ratio_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match=r"^defense 'siren': norm_ratio .* invalid; valid: float"):
        make_defense("siren", norm_ratio=bad)


def test_gaussian_noise_of_sigma_1e30_is_rejected_and_the_model_stays_finite(
    tmp_path: Path,
) -> None:
    from simulator.config.sections import build_config
    from simulator.run.experiment import run_experiment
    from simulator.run.output import read_events

    flat = {
        "backend": "local",
        "progress": False,
        "plots": False,
        "out": str(tmp_path),
        "rounds": 2,
        "num_clients": 12,
        "clients_per_round": 12,
        "partition": "iid",
        "public_fraction": 0.05,
        "attack": "gaussian",
        "attack_params": {"sigma": 1e30},
        "attack_fraction": 0.25,
        "defense": "siren",
    }
    run_experiment(build_config(flat=flat))
    first = read_events(tmp_path / "events.jsonl")[0]
    assert first["malicious"] == [5, 6, 11]
    # before: rows 5 and 11 (or 6) kept at round 0, every benign row of round 1 non-finite and
    # a final accuracy of 0.10
    assert {v["client"]: v["reason"] for v in first["verdicts"] if not v["kept"]} == {
        5: "abnormal-norm",
        6: "abnormal-norm",
        11: "abnormal-norm",
    }
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["benign_false_rejection"] == 0.0
    assert summary["final_accuracy"] > 0.5  # measured 0.749; 0.10 before
    # rounds_total follows --rounds (2): one strike bans, so the three are banned in round 1
    assert summary["first_ban_round"] == {"5": 1, "6": 1, "11": 1}
