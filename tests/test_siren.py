"""Tests for Siren's server side (defenses/siren.py): each branch of the decision on hand-built
batches with a stub root-set scorer, equal-weight averaging, the cosine rule, strikes and bans
(in a client-state store, as the client side keeps them), roll-back, state, row order,
parameters, and one run through the engine."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from defense_stubs import Scorer, ctx_of, stub_scorer
from defense_stubs import batch_of as stub_batch

from defenses import DEFENSES, DefenseContext, UpdateBatch, make_defense
from defenses.siren import SirenDefense
from defenses.siren_reputation import (
    NOT_SEEN,
    STRIKES,
    banned_among,
    declare,
    strikes_of,
    update_strikes,
)
from defenses.siren_screen import screen
from simulator.state.store import ClientStore

KEPT = (True, "")


def batch_of(
    rows: list[list[float]],
    alarms: list[int] | None = None,
    ids: list[int] | None = None,
    taus: list[int] | None = None,
    samples: list[int] | None = None,
    rnd: int = 0,
) -> UpdateBatch:
    """Rows fresh at round ``rnd`` unless ``taus`` says otherwise."""
    n = len(rows)
    signals = {} if alarms is None else {"alarm": np.array(alarms, bool)}
    return stub_batch(rows, samples or [1] * n, taus or [rnd] * n, ids, signals)


def fixed_scorer(
    acc: list[float],
    expect: list[list[float]] | None = None,
    seen: list[torch.Tensor] | None = None,
) -> Scorer:
    """Returns the given accuracies in row order; checks it got the full models (``expect``)."""
    return stub_scorer(acc, [1.0] * len(acc), [1.0] * len(acc), expect, seen)


def paper(**params: Any) -> SirenDefense:
    """The paper's Siren (``variant="paper"``): its tests keep their assertions."""
    d = make_defense("siren", variant="paper", **params)
    assert isinstance(d, SirenDefense)
    return d


def outcome(res: Any) -> list[tuple[bool, str]]:
    return [(v.kept, v.reason) for v in res.verdicts]


class Reputed:
    """The paper variant with its strikes in a client-state store, round by round as a run
    keeps them (``defenses/siren_client.py``): the rows of clients whose strikes reach the ban
    threshold carry the signal ``"banned"``, and the verdicts update the strikes."""

    def __init__(self, **params: Any) -> None:
        self.d = paper(**params)
        self.store = ClientStore(1 << 20)
        declare(self.store)

    def __call__(self, b: UpdateBatch, ctx: DefenseContext) -> Any:
        ban = banned_among(self.store, b.client_ids.tolist(), self.d.ban_threshold)
        b.signals["banned"] = np.array([c in ban for c in b.client_ids.tolist()], bool)
        res = self.d(b, ctx)
        update_strikes(self.store, [v.to_dict() for v in res.verdicts], self.d.reward, NOT_SEEN)
        return res

    def strikes(self, *ids: int) -> list[float]:
        return strikes_of(self.store, np.array(ids)).tolist()

    def banned(self, *ids: int) -> list[int]:
        return sorted(banned_among(self.store, ids, self.d.ban_threshold))


# ---------------------------------------------------------------- the decision, branch by branch


def test_no_alarm_plain_equal_weight_mean() -> None:
    # global [1, -1]; the scorer must see global + update; samples differ but weights do not
    rows = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [-3.0, 1.0]]
    models = [[2.0, -1.0], [1.0, 0.0], [3.0, 1.0], [-2.0, 0.0]]
    acc = [0.9, 0.2, 0.5, 0.1]
    ctx = ctx_of(fixed_scorer(acc, expect=models), 0, {0: [1.0, -1.0]})
    for alarms in (None, [0, 0, 0, 0]):  # no signal = no alarms
        res = paper()(batch_of(rows, alarms, samples=[1, 5, 20, 3]), ctx)
        assert res.delta.tolist() == [0.0, 1.0]  # (1 + 0 + 2 - 3) / 4, 4 / 4
        assert outcome(res) == [KEPT] * 4
        assert [v.weight for v in res.verdicts] == [0.25] * 4
        assert [v.score for v in res.verdicts] == pytest.approx(acc)


def test_one_alarm_screens_everyone() -> None:
    # best = row 4 (0.95, u=[1, 1]); threshold 0.9 * 0.95 = 0.855
    rows = [[1.0, 0.0], [1.0, 1.0], [2.0, 2.0], [-1.0, -0.5], [1.0, 1.0], [1.0, -1.0]]
    acc = [0.9, 0.85, 0.7, 0.88, 0.95, 0.9]
    res = paper()(batch_of(rows, [1, 0, 0, 0, 0, 0]), ctx_of(fixed_scorer(acc)))
    assert outcome(res) == [
        KEPT,  # the alarmer itself is normal: kept
        (False, "abnormal-accuracy"),  # 0.85 < 0.855
        (False, "abnormal-accuracy"),  # 0.7, though its direction agrees with the best
        (False, "abnormal-cosine"),  # accurate, but cos with [1, 1] < 0
        KEPT,  # the best row
        (False, "abnormal-cosine"),  # orthogonal to the best: cos = 0 counts
    ]
    assert res.delta.tolist() == [1.0, 0.5]  # mean([1, 0], [1, 1])
    assert [v.weight for v in res.verdicts] == [0.5, 0, 0, 0, 0.5, 0]


def test_alarms_with_an_abnormal_alarmer_drop_non_alarmers() -> None:
    # alarmers 0-3: best row 0 (0.9, [1, 1]), threshold 0.81; row 1 too inaccurate, row 3
    # pointing away; non-alarmers 4, 5 are dropped whatever their accuracy
    rows = [[1.0, 1.0], [1.0, 1.0], [2.0, 1.0], [-1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    acc = [0.9, 0.5, 0.88, 0.89, 0.95, 0.2]
    res = paper()(batch_of(rows, [1, 1, 1, 1, 0, 0]), ctx_of(fixed_scorer(acc)))
    assert outcome(res) == [
        KEPT,
        (False, "abnormal-accuracy"),
        KEPT,
        (False, "abnormal-cosine"),
        (False, "non-alarmer-dropped"),
        (False, "non-alarmer-dropped"),
    ]
    assert res.delta.tolist() == [1.5, 1.0]
    assert [v.weight for v in res.verdicts] == [0.5, 0, 0.5, 0, 0, 0]


def test_alarms_confirmed_by_weak_non_alarmers() -> None:
    # alarmers normal (best 0.9, threshold 0.81); the non-alarmers' best 0.8 < 0.81: the alarms
    # were right, every non-alarmer is dropped (even though 0.8 vs 0.5 alone would be fine)
    rows = [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [3.0, 3.0]]
    acc = [0.9, 0.85, 0.5, 0.8]
    res = paper()(batch_of(rows, [1, 1, 0, 0]), ctx_of(fixed_scorer(acc)))
    assert outcome(res) == [
        KEPT,
        KEPT,
        (False, "non-alarmer-dropped"),
        (False, "non-alarmer-dropped"),
    ]
    assert res.delta.tolist() == [1.0, 0.5]


def test_false_alarms_drop_alarmers_and_abnormal_non_alarmers() -> None:
    # alarmers 0, 1 normal among themselves (best 0.6); non-alarmers' best 0.9 >= 0.54: the
    # alarms were false, both alarmers are dropped; the non-alarmers are screened (best row 2,
    # [1, 1], threshold 0.81): row 4 inaccurate, row 5 pointing away
    rows = [[-1.0, 0.0], [-1.0, -0.2], [1.0, 1.0], [1.0, 0.5], [1.0, 1.0], [-1.0, 0.0]]
    acc = [0.6, 0.58, 0.9, 0.85, 0.7, 0.88]
    res = paper()(batch_of(rows, [1, 1, 0, 0, 0, 0]), ctx_of(fixed_scorer(acc)))
    assert outcome(res) == [
        (False, "alarmer-dropped"),
        (False, "alarmer-dropped"),
        KEPT,
        KEPT,
        (False, "abnormal-accuracy"),
        (False, "abnormal-cosine"),
    ]
    assert res.delta.tolist() == [1.0, 0.75]
    assert [v.weight for v in res.verdicts] == [0, 0, 0.5, 0.5, 0, 0]


def test_everyone_alarms_and_is_normal() -> None:
    rows = [[1.0, 0.0], [1.0, 1.0], [0.5, 2.0]]
    res = paper()(batch_of(rows, [1, 1, 1]), ctx_of(fixed_scorer([0.9, 0.85, 0.82])))
    assert outcome(res) == [KEPT] * 3
    assert res.delta.tolist() == pytest.approx([2.5 / 3, 1.0])


def test_threshold_boundary_and_ties() -> None:
    # cs = 0.5, best 0.8: threshold exactly 0.4 -> 0.4 is normal, below it abnormal
    u = torch.tensor([[1.0], [1.0], [1.0], [1.0]])
    ids = np.array([5, 3, 9, 1])
    acc = np.array([0.8, 0.4, 0.39, 0.8])
    bad, best = screen(np.arange(4), acc, u, ids, 0.5)
    assert best == 0.8 and bad == {2: "abnormal-accuracy"}
    # tied best rows: the smaller client id is the reference, so only it escapes the cosine
    u = torch.tensor([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]])
    acc = np.array([0.9, 0.9, 0.9])
    assert screen(np.arange(3), acc, u, np.array([4, 2, 7]), 0.1)[0] == {
        0: "abnormal-cosine",
        2: "abnormal-cosine",
    }  # row 1 (id 2) is the best: zero
    assert screen(np.arange(3), acc, u, np.array([1, 2, 7]), 0.1)[0] == {
        1: "abnormal-cosine",
        2: "abnormal-cosine",
    }  # a zero update has cos 0
    # a non-finite accuracy is abnormal and never the best; none finite: all abnormal
    acc = np.array([np.nan, 0.5, 0.49])
    assert screen(np.arange(3), acc, torch.ones(3, 1), np.arange(3), 0.1)[0] == {
        0: "abnormal-accuracy"
    }
    assert screen(
        np.arange(2), np.array([np.nan, np.inf]), torch.ones(2, 1), np.arange(2), 0.1
    ) == ({0: "abnormal-accuracy", 1: "abnormal-accuracy"}, -math.inf)
    assert screen(np.zeros(0, np.int64), acc, torch.ones(3, 1), np.arange(3), 0.1) == (
        {},
        -math.inf,
    )


def test_scores_full_models_of_stale_rows() -> None:
    # t=2: rows 0, 2, 3 fresh (base [1, -1]); row 1 from round 1 (base [0.5, 0.5]). The mean is
    # of the updates, equal weights; one score_models call with all rows
    rows = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [1.0, 1.0]]
    models = [[2.0, -1.0], [0.5, 1.5], [3.0, 1.0], [2.0, 0.0]]
    seen: list[torch.Tensor] = []
    ctx = ctx_of(
        fixed_scorer([0.5] * 4, expect=models, seen=seen), 2, {1: [0.5, 0.5], 2: [1.0, -1.0]}
    )
    res = paper()(batch_of(rows, None, taus=[2, 1, 2, 2]), ctx)
    assert len(seen) == 1 and res.delta.tolist() == [1.0, 1.0]
    # no base_model in the context: fresh rows fall back to the global model
    ctx = DefenseContext(
        0,
        torch.tensor([1.0, -1.0]),
        score_models=fixed_scorer([0.5, 0.5], expect=models[:1] + [[1.0, 0.0]]),
    )
    assert paper()(batch_of(rows[:2]), ctx).delta.tolist() == [0.5, 0.5]
    ctx = DefenseContext(1, torch.zeros(2), score_models=fixed_scorer([0.5, 0.5]))
    with pytest.raises(ValueError, match="'siren': stale rows need ctx.base_model"):
        paper()(batch_of(rows[:2], taus=[1, 0]), ctx)


def test_needs_root_set() -> None:
    with pytest.raises(
        ValueError,
        match=r"^defense 'siren': needs a server root set "
        r"\(--public-fraction > 0\)$",
    ):
        make_defense("siren")(batch_of([[1.0, 0.0]]), ctx_of(None))


def test_alarm_signal_length_checked() -> None:
    b = UpdateBatch(
        torch.ones(3, 2),
        np.arange(3),
        np.ones(3, np.int64),
        np.zeros(3, np.int64),
        {"alarm": np.array([1, 0])},
    )
    with pytest.raises(ValueError, match="'siren': signal 'alarm' has 2 entries for 3 rows"):
        paper()(b, ctx_of(fixed_scorer([0.5] * 3)))


# ---------------------------------------------------------------- strikes, bans, roll-back

GOOD = [[1.0, 1.0], [1.0, 2.0], [2.0, 1.0]]


BAD = [1.0, 0.5]


def lookup_scorer(bad_acc: float) -> Scorer:
    """Accuracy 0.9 for the models ``GOOD`` (zero base), ``bad_acc`` for ``BAD``: follows the
    rows, so it also serves batches whose banned rows are left out of scoring."""

    def score(models: torch.Tensor) -> dict[str, np.ndarray]:
        acc = np.array([bad_acc if m == BAD else 0.9 for m in models.tolist()])
        return {"accuracy": acc, "loss": 1 - acc, "entropy": 1 - acc}

    return score


def bad_batch(rnd: int = 0, bad_alarm: int = 1) -> UpdateBatch:
    """Clients 1-3 send ``GOOD``, client 7 sends ``BAD`` and alarms."""
    return batch_of([*GOOD, BAD], [0, 0, 0, bad_alarm], ids=[1, 2, 3, 7], rnd=rnd)


def round_with(d: Any, bad_acc: float, bad_alarm: int = 1, rnd: int = 0) -> Any:
    """Clients 1-3 good (acc 0.9), client 7 alarms with accuracy ``bad_acc``."""
    return d(bad_batch(rnd, bad_alarm), ctx_of(lookup_scorer(bad_acc), rnd))


def test_strikes_ban_at_threshold_and_persist() -> None:
    d = Reputed(rounds_total=10, rollback=False)  # int(0.45 * 10) = 4 strikes
    assert d.d.ban_threshold == 4
    for k in range(1, 4):
        assert outcome(round_with(d, 0.1))[3] == (False, "abnormal-accuracy")
        assert d.strikes(7) == [k] and d.banned(1, 2, 3, 7) == []
    assert outcome(round_with(d, 0.1))[3] == (False, "abnormal-accuracy")
    assert d.strikes(7) == [4] and d.banned(1, 2, 3, 7) == [7]
    # banned: rejected whatever its accuracy, not scored, and its alarm no longer counts
    # (no other alarm -> plain mean of the good rows)
    res = round_with(d, 0.95)
    assert outcome(res) == [KEPT, KEPT, KEPT, (False, "banned")]
    assert math.isnan(res.verdicts[3].score) and res.verdicts[3].weight == 0.0
    assert res.delta.tolist() == pytest.approx([4 / 3, 4 / 3])
    assert d.strikes(1, 2, 3, 7) == [0.0, 0.0, 0.0, 5.0] and d.store.count(STRIKES) == 1
    assert outcome(round_with(d, 0.95, bad_alarm=0))[3] == (False, "banned")
    # the rule takes the ban from the row's signal: without it the row is judged again
    assert outcome(round_with(d.d, 0.95))[3] == KEPT


def test_strikes_forgiven_by_half() -> None:
    d = Reputed(rounds_total=10, rollback=False)
    want = [
        (0.1, 1.0),
        (0.9, 0.5),
        (0.9, 0.0),
        (0.9, 0.0),
        (0.1, 1.0),
        (0.1, 2.0),
        (0.9, 1.5),
        (0.1, 2.5),
        (0.1, 3.5),
        (0.9, 3.0),
        (0.1, 4.0),
    ]
    for i, (acc, strikes) in enumerate(want):
        round_with(d, acc)
        assert d.strikes(7) == [strikes], i
        assert d.banned(7) == ([7] if strikes >= 4 else [])
    d = Reputed(rounds_total=10, reward=0.0, rollback=False)
    for acc in (0.1, 0.9, 0.9):
        round_with(d, acc)
    assert d.strikes(7) == [1.0]


def test_ban_threshold_rounding() -> None:
    assert make_defense("siren").ban_threshold == 45
    assert make_defense("siren", rounds_total=2).ban_threshold == 1  # never 0
    assert make_defense("siren", rounds_total=100, ban_fraction=0.29).ban_threshold == 29
    assert make_defense("siren", rounds_total=7, ban_fraction=1.0).ban_threshold == 7


def test_rollback_once_per_episode() -> None:
    # t=3, previous global b2: a detecting round that opens an episode returns
    # b2 - g3 + mean (g3 = 0); the next detecting round does not; a clean round closes the
    # episode
    bases = {2: [10.0, 20.0], 3: [0.0, 0.0], 4: [0.0, 0.0], 5: [0.0, 0.0], 6: [0.0, 0.0]}
    d = paper()
    mean = [4 / 3, 4 / 3]

    def go(rnd: int, bad_acc: float) -> Any:
        return d(bad_batch(rnd), ctx_of(lookup_scorer(bad_acc), rnd, bases))

    res = go(3, 0.1)
    assert res.delta.tolist() == pytest.approx([10 + 4 / 3, 20 + 4 / 3])
    assert outcome(res) == [(True, "rollback")] * 3 + [(False, "abnormal-accuracy")]
    assert d.state_dict()["in_episode"] is True
    bases[3] = [5.0, 5.0]  # would be rolled back to
    res = go(4, 0.1)
    assert res.delta.tolist() == pytest.approx(mean) and outcome(res)[0] == KEPT
    res = go(5, 0.9)  # nothing rejected: episode over
    assert res.delta.tolist() == pytest.approx([1.25, 1.125])  # mean of all 4
    assert d.state_dict()["in_episode"] is False
    bases[5] = [0.0, 2.0]
    res = go(6, 0.1)  # a new episode: roll back again
    assert res.delta.tolist() == pytest.approx([4 / 3, 2 + 4 / 3])
    assert outcome(res)[0] == (True, "rollback")


def test_rollback_unavailable_or_off() -> None:
    sc = lookup_scorer(0.1)
    mean = [4 / 3, 4 / 3]
    d = paper()
    assert d(bad_batch(0), ctx_of(sc, 0)).delta.tolist() == pytest.approx(mean)  # no t - 1
    assert d.state_dict()["in_episode"] is True
    d = paper()
    ctx = ctx_of(sc, 4, {4: [0.0, 0.0]})  # round 3 pruned
    assert d(bad_batch(4), ctx).delta.tolist() == pytest.approx(mean)
    d = paper(rollback=False)
    ctx = ctx_of(sc, 4, {3: [7.0, 7.0], 4: [0.0, 0.0]})
    res = d(bad_batch(4), ctx)
    assert res.delta.tolist() == pytest.approx(mean)
    assert all(v.reason != "rollback" for v in res.verdicts)
    # bans alone are no detection: no roll-back, and the episode closes
    r = Reputed(rounds_total=2)  # one strike bans
    r(bad_batch(3), ctx_of(sc, 3, {2: [0.0, 0.0], 3: [0.0, 0.0]}))
    assert r.banned(1, 2, 3, 7) == [7]
    res = r(bad_batch(4), ctx_of(sc, 4, {3: [7.0, 7.0], 4: [0.0, 0.0]}))
    assert res.delta.tolist() == pytest.approx(mean) and r.d.state_dict()["in_episode"] is False


def test_nothing_kept() -> None:
    # a single alarmer screened alone is always normal; with all rows banned nothing is kept
    d = Reputed(rounds_total=1, rollback=False)
    b = batch_of([[1.0, 0.0], [-1.0, 0.0]], [1, 0], ids=[4, 5])
    d(b, ctx_of(fixed_scorer([0.9, 0.1])))  # 5 rejected -> banned
    assert d.banned(4, 5) == [5]
    d.store.put(STRIKES, np.array([4]), np.array([1.0]))
    seen: list[torch.Tensor] = []
    res = d(b, ctx_of(fixed_scorer([], seen=seen)))
    assert not seen and res.delta.tolist() == [0.0, 0.0]
    assert outcome(res) == [(False, "banned")] * 2


# ---------------------------------------------------------------- state, row order, parameters


def test_state_dict_roundtrip() -> None:
    d = Reputed(rounds_total=10)
    for acc in (0.1, 0.1, 0.9, 0.1):
        round_with(d, acc, rnd=1)
    st = d.d.state_dict()
    assert st == {"in_episode": True} and type(st["in_episode"]) is bool
    # strikes in the store: zero strikes hold no row
    assert d.strikes(1, 2, 3, 7) == [0.0, 0.0, 0.0, 2.5] and d.store.count(STRIKES) == 1
    twin = Reputed(rounds_total=10)
    twin.d.load_state_dict(st)
    twin.store.put(STRIKES, np.array([7]), np.array([2.5]))
    assert twin.d.state_dict() == st
    for acc in (0.1, 0.1, 0.9):
        a, b = round_with(d, acc, rnd=1), round_with(twin, acc, rnd=1)
        assert outcome(a) == outcome(b) and a.delta.tolist() == b.delta.tolist()
    assert twin.d.state_dict() == d.d.state_dict() and d.banned(1, 2, 3, 7) == [7]
    # 2.5 + 1 + 1 = 4.5 >= 4: banned, and the banned row of the last round counts: 5.5
    assert twin.strikes(1, 2, 3, 7) == d.strikes(1, 2, 3, 7) == [0.0, 0.0, 0.0, 5.5]
    twin.d.load_state_dict({})
    assert twin.d.state_dict() == {"in_episode": False}
    with pytest.raises(ValueError, match="'siren': state keys"):
        twin.d.load_state_dict({"strikes": {}})


def content_scorer(models: torch.Tensor) -> dict[str, np.ndarray]:
    """Accuracy a pure function of each model row (follows rows through any permutation)."""
    x = models.double().numpy()
    acc = 0.5 + 0.4 * np.tanh(x[:, 0] + 0.5 * x[:, 1])
    return {"accuracy": acc, "loss": 1 - acc, "entropy": 1 - acc}


@pytest.mark.parametrize(
    "alarms",
    [
        [0] * 9,
        [0, 0, 0, 0, 1, 0, 0, 0, 0],
        [1, 0, 1, 0, 0, 1, 0, 0, 0],
        [0, 1, 1, 1, 1, 1, 0, 1, 0],
    ],
)
def test_row_order_does_not_matter(alarms: list[int]) -> None:
    g = np.random.default_rng(0)
    n, p = 9, 4
    b = UpdateBatch(
        torch.tensor(g.normal(size=(n, p)), dtype=torch.float32),
        np.arange(100, 100 + n),
        g.integers(1, 20, size=n),
        g.integers(4, 6, size=n),
        {"alarm": np.array(alarms, bool)},
    )
    bases = {r: torch.tensor(g.normal(size=p) * 0.3, dtype=torch.float32) for r in (3, 4, 5)}
    ctx = DefenseContext(5, bases[5], score_models=content_scorer, base_model=bases.__getitem__)
    perm = np.random.default_rng(1).permutation(n)
    d1, d2 = Reputed(cs=0.3), Reputed(cs=0.3)
    for _ in range(2):  # second round: with strikes
        a, c = d1(b, ctx), d2(b.subset(perm), ctx)
        torch.testing.assert_close(a.delta, c.delta, rtol=1e-6, atol=1e-7)
        assert [v.client_id for v in c.verdicts] == b.client_ids[perm].tolist()
        va = {v.client_id: v for v in a.verdicts}
        for w in c.verdicts:
            v = va[w.client_id]
            assert (v.kept, v.reason, v.weight) == (w.kept, w.reason, w.weight)
            assert v.score == pytest.approx(w.score, rel=1e-6)
        kept = [v for v in a.verdicts if v.kept]
        assert kept and sum(v.weight for v in kept) == pytest.approx(1.0)
        assert all(v.weight == 0.0 and v.reason for v in a.verdicts if not v.kept)
        assert d1.d.state_dict() == d2.d.state_dict()
        ids = b.client_ids.tolist()
        assert d1.strikes(*ids) == d2.strikes(*ids)
    if any(alarms):
        assert len(kept) < n  # these cases reject someone


def test_identical_rows_return_that_row() -> None:
    u = torch.tensor([0.3, -0.2, 0.1, 0.05])
    n = 7
    for alarms in ([0] * n, [1] + [0] * (n - 1), [1, 1, 0, 0, 1, 0, 0]):
        b = UpdateBatch(
            u.repeat(n, 1),
            np.arange(n),
            np.arange(1, n + 1),
            np.zeros(n, np.int64),
            {"alarm": np.array(alarms, bool)},
        )
        ctx = DefenseContext(
            0, torch.zeros(4), score_models=content_scorer, base_model=lambda r: torch.zeros(4)
        )
        torch.testing.assert_close(paper()(b, ctx).delta, u, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        ({"cs": 0.0}, r"'siren': cs 0.0 invalid; valid: 0 < cs < 1"),
        ({"cs": 1.0}, r"'siren': cs 1.0 invalid"),
        ({"cs": float("nan")}, r"'siren': cs nan invalid"),
        ({"cs": True}, r"'siren': cs True invalid"),
        ({"rounds_total": 0}, r"'siren': rounds_total 0 invalid; valid: integer >= 1"),
        ({"rounds_total": 10.0}, r"'siren': rounds_total 10.0 invalid"),
        ({"ban_fraction": 0.0}, r"'siren': ban_fraction 0.0 invalid; valid: 0 < ban_fraction <= 1"),
        ({"ban_fraction": 1.5}, r"'siren': ban_fraction 1.5 invalid"),
        ({"reward": -0.5}, r"'siren': reward -0.5 invalid; valid: finite float >= 0"),
        ({"reward": float("inf")}, r"'siren': reward inf invalid"),
        ({"rollback": 1}, r"'siren': rollback 1 invalid; valid: True, False or None"),
        ({"c_c": 0.04}, r"'siren': unknown parameter 'c_c'"),
    ],
)
def test_invalid_parameters(params: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_defense("siren", **params)


def test_registered() -> None:
    d = make_defense("siren", cs=0.2, rounds_total=30, ban_fraction=0.5, reward=1, rollback=False)
    assert DEFENSES["siren"] is type(d) and not d.linear
    assert (d.cs, d.rounds_total, d.ban_fraction, d.reward, d.rollback) == (
        0.2,
        30,
        0.5,
        1.0,
        False,
    )
    assert d.ban_threshold == 15


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize("variant", ["paper", "calibrated"])
def test_simulation_smoke(tmp_path: Path, variant: str) -> None:
    from tests.conftest import run_records, small_config

    cfg = small_config(
        tmp_path,
        defense="siren",
        public_fraction=0.06,
        rounds=3,
        defense_params={"rounds_total": 3, "variant": variant},
    )
    recs = run_records(cfg)
    assert len(recs) == 3
    for rec in recs:
        vs = rec.verdicts
        assert vs and all(
            0 <= v["score"] <= 1 if v["score"] is not None else v["reason"] == "banned" for v in vs
        )
        kept = [v for v in vs if v["kept"]]
        assert sum(v["weight"] for v in kept) == pytest.approx(1.0)
        if not rec.extra.get("alarms"):  # no alarm: the mean of every row
            assert len(kept) == len(vs)
            if variant == "paper":  # equal weights
                assert all(v["weight"] == pytest.approx(1 / len(vs)) for v in vs)
    assert isinstance(recs[-1].accuracy, float) and math.isfinite(recs[-1].accuracy)
