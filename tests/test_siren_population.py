"""Tests for our Siren variant (defenses/siren_screen.py, siren_rules.py, siren_reputation.py):
the robust screening on hand-checked rows, the population rule judging each row on its own
evidence, variant and parameter resolution, and strikes and bans in the client-state store."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from defense_stubs import Scorer, batch_of, stub_scorer

from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.siren import SirenDefense
from defenses.siren_reputation import STRIKES, strikes_of, update_strikes
from defenses.siren_screen import difference_se, robust_margin, screen, screen_robust
from simulator.state.store import ClientStore

KEPT = (True, "")


def rows_of(vals: list[list[float]]) -> torch.Tensor:
    return torch.tensor(vals, dtype=torch.float64)


def scorer(acc: list[float]) -> Scorer:
    return stub_scorer(acc, [1.0] * len(acc), [1.0] * len(acc))


def ctx(
    score: Scorer, rnd: int = 0, bases: dict[int, list[float]] | None = None, n_root: int = 100
) -> DefenseContext:
    """A context with a root set of ``n_root`` samples (the robust screening reads its size)."""
    table = {r: torch.tensor(b) for r, b in (bases or {rnd: [0.0, 0.0]}).items()}
    return DefenseContext(
        rnd,
        table[rnd],
        public_y=torch.zeros(n_root, dtype=torch.int64),
        score_models=score,
        base_model=table.__getitem__,
    )


def batch(
    rows: list[list[float]], alarms: list[int], ids: list[int] | None = None, rnd: int = 0
) -> UpdateBatch:
    n = len(rows)
    return batch_of(rows, [1] * n, [rnd] * n, ids, {"alarm": np.array(alarms, bool)})


def outcome(res: Any) -> list[tuple[bool, str]]:
    return [(v.kept, v.reason) for v in res.verdicts]


# ---------------------------------------------------------------- the robust screening


def test_margin_by_hand() -> None:
    assert difference_se(0.8, 100) == pytest.approx(math.sqrt(0.0032))  # 0.05657
    assert difference_se(1.0, 100) == 0.0 and difference_se(1.3, 100) == 0.0  # clipped
    # spread: MAD of [0.9, 0.8, 0.7] is 0.1 -> 2 * 1.4826 * 0.1 = 0.29652 beats 2 se, cs ref
    assert robust_margin(0.8, np.array([0.9, 0.8, 0.7]), 100, 0.1, 2.0) == pytest.approx(0.29652)
    # one value has no spread: 2 se = 0.11314 beats 0.08
    assert robust_margin(0.8, np.array([0.8]), 100, 0.1, 2.0) == pytest.approx(0.113137, abs=1e-6)


def test_robust_screen_median_of_non_alarmers_and_their_mean_update() -> None:
    # quiet rows 0-2 are the reference: median 0.8, margin 0.29652 (spread) -> bar 0.50348;
    # mean update [2/3, 2/3]
    u = rows_of([[1, 0], [1, 1], [0, 1], [1, 0], [-1, 0]])
    acc = np.array([0.9, 0.8, 0.7, 0.5, 0.85])
    alarm = np.array([0, 0, 0, 1, 1], bool)
    bad, ref = screen_robust(np.arange(5), acc, u, np.arange(5), alarm, 100, 0.1, 2.0)
    assert ref == 0.8
    assert bad == {
        3: "abnormal-accuracy",  # 0.5 < 0.50348
        4: "abnormal-cosine",
    }  # [-1, 0] . [2/3, 2/3] < 0; 0.85 is fine
    # attackers a majority of the round, all alarming: the two quiet rows are the reference
    # (median 0.91, margin cs * ref = 0.091, bar 0.819; mean update [1, 1/2])
    u2 = rows_of([[1, 1], [1, 0], [-1, -1], [-1, -1], [-1, -1]])
    acc2 = np.array([0.90, 0.92, 0.2, 0.2, 0.2])
    assert screen_robust(
        np.arange(5), acc2, u2, np.arange(5), np.array([0, 0, 1, 1, 1], bool), 100, 0.1, 2.0
    ) == ({2: "abnormal-accuracy", 3: "abnormal-accuracy", 4: "abnormal-accuracy"}, 0.91)
    # the paper's screening of the first rows: best 0.9 (row 0), bar 0.81, cosine with [1, 0]
    assert screen(np.arange(5), acc, u, np.arange(5), 0.1)[0] == {
        1: "abnormal-accuracy",
        2: "abnormal-accuracy",
        3: "abnormal-accuracy",
        4: "abnormal-cosine",
    }


def test_robust_screen_margin_follows_the_root_set_size() -> None:
    # four equal quiet rows: no spread; ref 0.9; root 100: max(0.09, 2 * 0.042426) = 0.09 ->
    # bar 0.81; root 25: 2 * 0.084853 = 0.16971 -> bar 0.73029
    u = rows_of([[1, 0]] * 7)
    acc = np.array([0.9, 0.9, 0.9, 0.9, 0.82, 0.80, 0.75])
    alarm = np.array([0, 0, 0, 0, 1, 1, 1], bool)
    assert screen_robust(np.arange(7), acc, u, np.arange(7), alarm, 100, 0.1, 2.0) == (
        {5: "abnormal-accuracy", 6: "abnormal-accuracy"},
        0.9,
    )
    assert screen_robust(np.arange(7), acc, u, np.arange(7), alarm, 25, 0.1, 2.0) == ({}, 0.9)


def test_robust_screen_edge_cases() -> None:
    u = rows_of([[1, 0], [-1, 0], [2, 0], [0, 1]])
    # everyone alarms: the reference is all of them; median 0.85 of [0.9, 0.8, 0.85, nan]...
    acc = np.array([0.9, 0.8, 0.85, np.nan])
    bad, ref = screen_robust(np.arange(4), acc, u, np.arange(4), np.ones(4, bool), 100, 0.1, 2)
    # mean update of rows 0-2: [2/3, 0]; row 1 points away, row 3 is not finite
    assert ref == 0.85 and bad == {1: "abnormal-cosine", 3: "abnormal-accuracy"}
    # a zero mean reference update: no direction test
    bad, _ = screen_robust(
        np.arange(2), np.array([0.9, 0.9]), u[:2], np.arange(2), np.zeros(2, bool), 100, 0.1, 2
    )
    assert bad == {}
    # nothing finite / nothing at all
    assert screen_robust(
        np.arange(2),
        np.array([np.nan, np.inf]),
        u[:2],
        np.arange(2),
        np.zeros(2, bool),
        100,
        0.1,
        2,
    ) == ({0: "abnormal-accuracy", 1: "abnormal-accuracy"}, -math.inf)
    assert screen_robust(
        np.zeros(0, np.int64), acc, u, np.arange(4), np.zeros(4, bool), 100, 0.1, 2
    ) == ({}, -math.inf)


# ---------------------------------------------------------------- the population rule

#: r0 alarms and is fine; r1 alarms with a bad model; r6 alarms pointing away; r2-r5 are quiet
#: (accuracies 0.91, 0.93, 0.92, 0.90: median 0.915, margin cs * ref = 0.0915, bar 0.8235;
#: mean update [3/4, 1])
ROWS = [[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 2.0], [-1.0, -1.0]]
ACC = [0.90, 0.30, 0.91, 0.93, 0.92, 0.90, 0.92]
ALARMS = [1, 1, 0, 0, 0, 0, 1]


def test_population_rule_judges_each_row_on_its_own_evidence() -> None:
    res = make_defense("siren")(batch(ROWS, ALARMS), ctx(scorer(ACC)))
    assert outcome(res) == [
        KEPT,
        (False, "abnormal-accuracy"),
        KEPT,
        KEPT,
        KEPT,
        KEPT,
        (False, "abnormal-cosine"),
    ]
    assert [v.weight for v in res.verdicts] == [0.2, 0, 0.2, 0.2, 0.2, 0.2, 0]
    assert res.delta.tolist() == pytest.approx([0.8, 1.0])  # mean of rows 0, 2-5
    # the paper's rule on the same round: an abnormal alarmer drops every non-alarmer, and the
    # best alarmer (r6, 0.92) makes the honest r0 fail its cosine: only r6 is kept
    paper = make_defense("siren", variant="paper")
    assert [v.kept for v in paper(batch(ROWS, ALARMS), ctx(scorer(ACC))).verdicts] == [
        False
    ] * 6 + [True]


def test_sample_weights_of_the_kept_rows() -> None:
    # the same round with 1, 2, 3, ... samples a row: rows 0, 2-5 kept (1 + 3 + 4 + 5 + 6 = 19)
    b = batch(ROWS, ALARMS)
    b = UpdateBatch(b.updates, b.client_ids, np.arange(1, 8), b.base_rounds, b.signals)
    res = make_defense("siren")(b, ctx(scorer(ACC)))
    assert [v.weight for v in res.verdicts] == pytest.approx(
        [1 / 19, 0, 3 / 19, 4 / 19, 5 / 19, 6 / 19, 0]
    )
    # 1 [1, 1] + 3 [1, 0] + 4 [1, 1] + 5 [0, 1] + 6 [1, 2]: [14, 22] / 19
    assert res.delta.tolist() == pytest.approx([14 / 19, 22 / 19])
    res = make_defense("siren", weighting="uniform")(b, ctx(scorer(ACC)))
    assert res.delta.tolist() == pytest.approx([0.8, 1.0])


def test_population_rule_screens_only_rounds_with_an_alarm() -> None:
    quiet = [0, 0, 0, 0, 0, 0, 0]
    res = make_defense("siren")(batch(ROWS, quiet), ctx(scorer(ACC)))
    assert outcome(res) == [KEPT] * 7
    res = make_defense("siren", trigger="always")(batch(ROWS, quiet), ctx(scorer(ACC)))
    # every row is the reference now: median 0.91, spread 2 * 1.4826 * 0.01 < cs * ref
    assert [v.kept for v in res.verdicts] == [True, False, True, True, True, True, False]


def test_confirmed_alarm_opens_a_rollback_only_when_asked() -> None:
    # alarmers 0, 1 score 0.81 (median) against the non-alarmers' 0.605: below by more than
    # max(0.081, 2 se(0.81) = 0.11096) -> confirmed; all rows pass the screening
    rows = [[1.0, 1.0], [1.0, 2.0], [1.0, 1.0], [2.0, 1.0], [1.0, 1.0], [1.0, 1.0]]
    acc = [0.80, 0.82, 0.60, 0.62, 0.61, 0.60]
    alarms = [1, 1, 0, 0, 0, 0]
    bases = {2: [10.0, 20.0], 3: [0.0, 0.0]}
    mean = [7 / 6, 7 / 6]
    d = make_defense("siren")
    assert isinstance(d, SirenDefense) and d.rollback is False  # population: off
    res = d(batch(rows, alarms, rnd=3), ctx(scorer(acc), 3, bases))
    assert outcome(res) == [KEPT] * 6 and res.delta.tolist() == pytest.approx(mean)
    assert d.state_dict()["in_episode"] is True
    d = make_defense("siren", rollback=True)
    res = d(batch(rows, alarms, rnd=3), ctx(scorer(acc), 3, bases))
    assert outcome(res) == [(True, "rollback")] * 6
    assert res.delta.tolist() == pytest.approx([10 + 7 / 6, 20 + 7 / 6])
    # an alarm whose own model fails confirms nothing: alarmer 1 alone, rejected
    d = make_defense("siren", rollback=True)
    res = d(
        batch(rows, [0, 1, 0, 0, 0, 0], rnd=3),
        ctx(scorer([0.6, 0.1, 0.6, 0.62, 0.61, 0.6]), 3, bases),
    )
    assert outcome(res)[1] == (False, "abnormal-accuracy")
    assert all(v.reason != "rollback" for v in res.verdicts)
    assert d.state_dict() == {"in_episode": False}  # strikes and bans live in the store


def test_needs_the_root_set_size() -> None:
    c = DefenseContext(0, torch.zeros(2), score_models=scorer([0.9]))
    with pytest.raises(ValueError, match=r"'siren': screen 'robust' needs the root set's size"):
        make_defense("siren")(batch([[1.0, 0.0]], [1]), c)


# ---------------------------------------------------------------- variants and parameters


def test_variants_and_overrides() -> None:
    def parts(**kw: Any) -> tuple[Any, ...]:
        d = make_defense("siren", **kw)
        assert isinstance(d, SirenDefense)
        return d.alarm, d.screen, d.rule, d.rollback, d.weighting

    assert parts() == ("mcnemar", "robust", "population", False, "samples")
    assert parts(variant="paper") == ("paper", "paper", "paper", True, "uniform")
    assert parts(variant="paper", screen="robust") == ("paper", "robust", "paper", True, "uniform")
    assert parts(rule="paper") == ("mcnemar", "robust", "paper", True, "samples")
    assert parts(rollback=True, weighting="uniform") == (
        "mcnemar",
        "robust",
        "population",
        True,
        "uniform",
    )


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"variant": "ours"}, r"variant 'ours' invalid; valid: \['calibrated', 'paper'\]"),
        ({"alarm": "margin"}, r"alarm 'margin' invalid; valid: \['mcnemar', 'paper'\]"),
        ({"screen": "median"}, r"screen 'median' invalid; valid: \['robust', 'paper'\]"),
        ({"rule": "groups"}, r"rule 'groups' invalid; valid: \['population', 'paper'\]"),
        ({"weighting": "equal"}, r"weighting 'equal' invalid; valid: \['samples', 'uniform'\]"),
        ({"trigger": "never"}, r"trigger 'never' invalid; valid: \['alarm', 'always'\]"),
        ({"alpha": 0.0}, r"alpha 0.0 invalid; valid: 0 < alpha < 1"),
        ({"z": -1.0}, r"z -1.0 invalid; valid: finite float > 0"),
        ({"cc": 1.0}, r"cc 1.0 invalid; valid: 0 < cc < 1"),
        ({"holdout": 0.0}, r"holdout 0.0 invalid; valid: 0 < holdout < 1"),
    ],
)
def test_invalid_parameters(params: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match="'siren': " + pattern):
        make_defense("siren", **params)


def test_population_rule_judges_rows_marked_banned() -> None:
    """Under the population rule banned clients are refused before they train; a row that
    still carries the signal "banned" (one its client sent before the ban, replayed from a
    verdict document that names the client banned) is judged like any other, never rejected
    unjudged as under the paper rule."""
    rows = [[1.0, 1.0], [1.0, 2.0], [2.0, 1.0]]
    b = batch(rows, [0, 0, 0])
    b.signals["banned"] = np.array([False, True, False])
    res = make_defense("siren")(b, ctx(scorer([0.9, 0.9, 0.9])))
    assert outcome(res) == [KEPT] * 3  # no alarm: every row kept
    assert res.delta.tolist() == pytest.approx([4 / 3, 4 / 3])
    paper = make_defense("siren", variant="paper")(b, ctx(scorer([0.9, 0.9])))
    assert outcome(paper) == [KEPT, (False, "banned"), KEPT]


# ---------------------------------------------------------------- strikes in the store


def verdicts(*rows: tuple[int, bool, str]) -> list[dict[str, Any]]:
    return [{"client": c, "kept": k, "reason": r, "weight": 0.0, "score": None} for c, k, r in rows]


def test_strikes_in_the_store_by_hand(tmp_path: Path) -> None:
    with ClientStore(1 << 20, tmp_path) as store:
        ids = np.array([1, 2, 3])
        assert strikes_of(store, ids).tolist() == [0.0, 0.0, 0.0]
        update_strikes(
            store,
            verdicts((1, False, "abnormal-accuracy"), (2, True, ""), (3, False, "banned")),
            0.5,
        )
        assert strikes_of(store, ids).tolist() == [1.0, 0.0, 0.0]
        assert store.count(STRIKES) == 1  # zero strikes hold no row
        update_strikes(
            store,
            verdicts(
                (1, False, "abnormal-cosine"),
                (3, False, "partial-work"),
                (2, False, "abnormal-cosine"),
            ),
            0.5,
        )
        assert strikes_of(store, ids).tolist() == [2.0, 1.0, 0.0]
        update_strikes(store, verdicts((1, True, "rollback"), (2, True, "")), 0.5)
        assert strikes_of(store, ids).tolist() == [1.5, 0.5, 0.0]
        update_strikes(store, verdicts((2, True, "")), 0.5)
        assert strikes_of(store, ids).tolist() == [1.5, 0.0, 0.0]
        assert store.count(STRIKES) == 1  # back at zero: row deleted


def test_bans_through_the_engine_survive_a_resume(tmp_path: Path) -> None:
    from simulator.config.sections import build_config
    from simulator.run.experiment import resume_config, run_experiment
    from simulator.run.output import read_events
    from tests.conftest import SMALL

    # T = 2: one strike bans (threshold max(1, floor(0.9)) = 1). Seed 3: label flippers 3 and 5
    # fail the screening in round 2, the last round before the crash, and are refused before
    # training when next selected (5 in rounds 3 and 4, 3 in round 5) in the resumed run: their
    # strikes came back from the checkpoint
    flat = {
        **SMALL,
        "rounds": 6,
        "defense": "siren",
        "public_fraction": 0.06,
        "attack": "labelflip",
        "attack_fraction": 0.3,
        "checkpoint_every": 1,
        "seed": 3,
        "local_epochs": 3,
        "defense_params": {"rounds_total": 2},
    }
    crashed = build_config(flat={**flat, "out": str(tmp_path / "crashed")})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(crashed, crash_after=3)
    run_experiment(resume_config(tmp_path / "crashed"))
    run_experiment(build_config(flat={**flat, "out": str(tmp_path / "full")}))
    wall = ("wall_time", "slowest_train_seconds", "chunks", "placement")

    def strip(p: Path) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k not in wall} for e in read_events(p)]

    got, want = (
        strip(tmp_path / "crashed" / "events.jsonl"),
        strip(tmp_path / "full" / "events.jsonl"),
    )
    assert got == want
    banned = [
        (e["round"], v["client"]) for e in want for v in e["verdicts"] if v["reason"] == "banned"
    ]
    assert banned == [(3, 5), (4, 5), (5, 3)] and want[2]["malicious"] == [3, 5]
    for e in want:  # refused: never trained
        refused = {v["client"] for v in e["verdicts"] if v["reason"] == "banned"}
        assert refused.isdisjoint(e["participants"]) and refused <= set(e["selected"])
