"""Siren's server side: alarm-driven accuracy screening on a root set, penalties and roll-back.

References
----------
H. Guo, H. Wang, T. Song, Y. Hua, Z. Lv, X. Jin, Z. Xue, R. Ma, H. Guan. "Siren: Byzantine-robust
Federated Learning via Proactive Alarming". ACM Symposium on Cloud Computing (SoCC), 2021.
Official code: github.com/AISIGSJTU/Siren (``server_detect`` and the ``siren`` branch of
``train_fn`` in ``main.py``).

The client side (holdout test, alarms, alarming clients training from their own previous model,
strikes and bans) is ``defenses/siren_client.py`` and runs in the engine; the screenings are in
``defenses/siren_screen.py``, the decision rules in ``defenses/siren_rules.py``, the variants
and the choice of screening in ``defenses/siren_variants.py``.

Where state lives: per-client state (each client's previous local model and its strikes, hence
its ban) is in the run's client-state store, kept by the client side (tables ``siren_prev`` and
``siren_strikes``, ``defenses/siren_reputation.py``), which checkpoints and spills it with the
rest. This object holds only whether a detection episode is open; its aggregation is a function
of that flag, the round's rows and their batch signals ``"alarm"`` and ``"banned"``, so the
ledger's replay re-derives it from recorded rounds.

Two variants. ``variant="paper"`` is the paper's method as it ran here before (same results):
the margin alarm, screening against the best root-set score, group decisions, equal weights,
banned clients still train and their rows are rejected unjudged. ``variant="calibrated"``
(default) is ours: a McNemar alarm, screening against the non-alarmers' median and mean update
with a margin that widens on a small root set or a spread-out cohort and a bound on update
norms, every row judged on its own evidence, sample weights, banned clients refused before they
train. Why (method notes ``shared/notes/methods-ktpfl-fedma-fedala-fedvb-siren.md`` §6; the norm
bound: ``defenses/siren_screen.py``): with ~144 samples a client a 10% holdout is ~14 samples, one
sample is 7 points against the 4-point alarm margin; the best of 10 noisy root-set scores sits
~1.5 standard errors above the typical one; one failing alarmer drops every non-alarmer.
Measured (``benchmarks/robustness.py --attack labelflip``, siren scenario, 3 seeds): the paper
variant rejects 0.30 of the honest updates of clean runs, ours none; on 10^6 virtual clients (100
a round, 30% sign flippers) 0.998 (accuracy 0.22) against 0.04 (0.78; clean FedAvg 0.82).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from defenses.base import (
    DEFENSES,
    AggregateResult,
    Defense,
    DefenseContext,
    UpdateBatch,
    Verdict,
    check_choice,
)
from defenses.geomed import check_positive, check_unit
from defenses.krum import check_count
from defenses.siren_client import SirenClient
from defenses.siren_reputation import BANNED
from defenses.siren_rules import (
    kept_mean,
    kept_weights,
    paper_rule,
    population_rule,
    rollback_base,
    row_flags,
)
from defenses.siren_screen import margin_of, root_accuracy
from defenses.siren_variants import PARTS, VARIANTS, screening_of

__all__ = ["ROLLBACK", "SirenDefense"]

#: note on kept rows of a round whose aggregate was applied to the previous round's global model
ROLLBACK = "rollback"


@DEFENSES.register
class SirenDefense(Defense):
    """Siren (Guo et al., SoCC 2021), the server's decision in one round.

    Parameters
    ----------
    cs : float
        The server margin ``C_s``, ``0 < cs < 1`` (default 0.1): relative accuracy margin of the
        screening.
    rounds_total : int
        ``T``, the run's number of rounds, integer >= 1. Only used for the ban threshold. A
        run's config fills in ``experiment.rounds`` when it is not given (``from_experiment``,
        resolved by :func:`simulator.config.plugins.defense_of`, so ``config.yaml`` records
        it); 100 for an object built directly.
    ban_fraction : float
        ``0 < ban_fraction <= 1`` (default 0.45): a client is banned once its strikes reach
        ``max(1, floor(ban_fraction * T))`` (floor taken with a 1e-9 tolerance so that e.g.
        ``0.29 * 100`` gives 29, not 28).
    reward : float
        Strikes forgiven per round in which a client's rows are all accepted, finite >= 0
        (default 0.5; strikes never go below 0).
    rollback : bool or None
        Apply the roll-back (Notes, step 5). None (default): under the paper rule only. Under
        the population rule a handful of alarming clients whose models pass (attackers
        included) could undo a whole cohort's step, again in every other round.
    variant : {"calibrated", "paper"}
        Default of ``alarm``, ``screen``, ``rule`` and ``weighting`` (default "calibrated":
        ``mcnemar``, ``robust``, ``population``, ``samples``; "paper": ``paper`` three times
        and ``uniform``, the paper's method as it ran here before).
    alarm, screen, rule, weighting : str or None
        Override the variant's part (None: the variant's). ``alarm`` (``siren_client.py``):
        ``"paper"`` (``acc_loc > acc_glob + cc * acc_loc``) or ``"mcnemar"`` (one-sided exact
        test at level ``alpha``). ``screen`` (``siren_screen.py``): ``"paper"`` (against the
        best score) or ``"robust"`` (against the non-alarmers' median and mean update).
        ``rule`` (``siren_rules.py``): ``"paper"`` (group decisions) or ``"population"``
        (each row on its own screening, strikes in the store). ``weighting``: ``"uniform"``
        (``1 / |kept|``, the paper's equal shards) or ``"samples"`` (``n_k / sum n``: a device
        with 4 samples should not count as much as one with 512).
    trigger : {"alarm", "always"}
        Population rule: screen rounds with an alarm (default, the paper's trigger) or every
        round (also catches attackers who never alarm, but rejects honest models that are
        merely behind in early rounds).
    alpha : float
        Level of the McNemar alarm, ``0 < alpha < 1`` (default 0.05).
    z : float
        Standard errors of the robust screening, finite > 0 (default 2).
    norm_ratio : float
        Robust screening only, ``>= 1`` (default 10; ``inf``: no bound): a row whose update
        norm exceeds ``norm_ratio`` times the reference rows' median norm fails
        (``"abnormal-norm"``). Not in the paper; why: ``defenses/siren_screen.py``.
    cc : float
        The paper alarm's client margin ``C_c``, ``0 < cc < 1`` (default 0.04).
    holdout : float
        Fraction of each client's samples held out for the alarm, ``0 < holdout < 1``
        (default 0.1).

    ``alarm``, ``alpha``, ``cc``, ``holdout``, the ban threshold and ``reward`` are the client
    side's: the engine's :class:`~defenses.siren_client.SirenClient` reads them from this object
    and keeps the strikes in the client-state store (table ``siren_strikes``). This object's own
    state (``state_dict``) is ``{"in_episode": bool}``.

    Notes
    -----
    Row ``k`` stands for the full model ``w_k = base_model(tau_k) + u_k`` (``ctx.global_flat``
    for a fresh row when the context has no ``base_model``). The ``[K, P]`` full models of all
    non-banned rows are scored together by ``ctx.score_models`` every round; a row's verdict
    score is its root-set accuracy (``nan`` for banned rows, which are not scored). The
    server-held public set is Siren's root set; a run without one fails with ValueError (the
    robust screening also reads its size, ``len(ctx.public_y)``).

    1. *Bans* (paper rule): rows with the signal ``"banned"`` (their clients' strikes reached
       the ban threshold; the client side marks them from the store) are rejected
       (``"banned"``) and take no further part: their alarms are not counted and they are not
       screened. Under the population rule the client side refuses banned clients before they
       train (the signal is not read: a row a client sent before its ban is judged).
    2. *Decision*: :func:`~defenses.siren_rules.paper_rule` or
       :func:`~defenses.siren_rules.population_rule`, with the screening chosen by ``screen``.
       The official code uses absolute margins (8, 3 and 5 accuracy points for the screening,
       the group test and the one-alarm screening); here one relative margin ``cs`` serves.
    3. *Aggregate*: :func:`~defenses.siren_rules.kept_mean` with the ``weighting``'s weights.
    4. *Penalty and reward* (the client side, on the store at the round's end,
       :func:`~defenses.siren_reputation.update_strikes`): a client gains one strike per
       rejected row (under the paper rule its ``"banned"`` rows included) and, in a round where
       all its rows were accepted, loses ``reward`` strikes (floor 0). At ``strikes >= ban
       threshold`` it is banned for the rest of the run.
    5. *Roll-back*: under the paper rule a round *detects* an attack when it rejects a row for a
       reason other than ``"banned"``; under the population rule when it has a confirmed alarm
       (an alarmer whose own row passed: rejecting a failing row needs no roll-back, the poison
       never entered). The first detecting round of an episode (the previous aggregated round
       detected nothing) returns the new global model ``base_model(t - 1) + mean``, i.e. it
       undoes the previous round's step, which may carry poison that the clients' alarms
       only reveal now, and applies this round's mean to the model before it. The returned
       delta is ``base_model(t - 1) - global_t + mean`` and kept rows get the note
       ``"rollback"``. Later detecting rounds of the same episode do not roll back again; a
       round without a detection ends the episode. This is the official code's ``flag`` /
       ``exist_mal`` logic (there, bans also count as a detection, which would keep the
       episode open forever once a client is banned). Round 0, a context without
       ``base_model``, or a pruned round ``t - 1`` (``base_model`` raises ``KeyError``) give
       no roll-back (the episode still starts).

    Two defects of the official code are not reproduced: benign updates are picked by their
    position in the shuffled selection rather than by client id, and the root set is drawn with
    replacement (here the engine's public set is a fixed split without repeats).
    """

    client_side = SirenClient
    name = "siren"
    #: parameters a run's config fills in from ``experiment`` fields when they are not given
    from_experiment = {"rounds_total": "rounds"}

    def __init__(
        self,
        cs: float = 0.1,
        rounds_total: int = 100,
        ban_fraction: float = 0.45,
        reward: float = 0.5,
        rollback: bool | None = None,
        variant: str = "calibrated",
        alarm: str | None = None,
        screen: str | None = None,
        rule: str | None = None,
        trigger: str = "alarm",
        weighting: str | None = None,
        alpha: float = 0.05,
        z: float = 2.0,
        norm_ratio: float = 10.0,
        cc: float = 0.04,
        holdout: float = 0.1,
    ) -> None:
        self.cs = check_unit(self.name, "cs", cs)
        self.rounds_total = check_count(self.name, "rounds_total", rounds_total, 1)
        self.ban_fraction = check_unit(self.name, "ban_fraction", ban_fraction, include_one=True)
        self.reward = check_positive(self.name, "reward", reward, allow_zero=True)
        if rollback is not None and not isinstance(rollback, bool | np.bool_):
            raise ValueError(
                f"defense {self.name!r}: rollback {rollback!r} invalid; valid: True, False or None"
            )
        self.variant = check_choice(self.name, "variant", variant, list(VARIANTS))
        given = (alarm, screen, rule, weighting)
        self.alarm, self.screen, self.rule, self.weighting = (
            check_choice(self.name, k, d if v is None else v, valid)
            for (k, valid), v, d in zip(PARTS, given, VARIANTS[self.variant], strict=True)
        )
        self.rollback = self.rule == "paper" if rollback is None else bool(rollback)
        self.trigger = check_choice(self.name, "trigger", trigger, ["alarm", "always"])
        self.alpha = check_unit(self.name, "alpha", alpha)
        self.z = check_positive(self.name, "z", z)
        real = isinstance(norm_ratio, int | float) and not isinstance(norm_ratio, bool)
        if not (real and norm_ratio >= 1):  # nan fails too
            raise ValueError(
                f"defense {self.name!r}: norm_ratio {norm_ratio!r} invalid; valid: float >= 1 "
                "(inf: no norm bound)"
            )
        self.norm_ratio = float(norm_ratio)
        self.cc = check_unit(self.name, "cc", cc)
        self.holdout = check_unit(self.name, "holdout", holdout)
        self.in_episode = False

    @property
    def ban_threshold(self) -> int:
        """Strikes at which a client is banned: ``max(1, floor(ban_fraction * T))``."""
        return max(1, int(math.floor(self.ban_fraction * self.rounds_total + 1e-9)))

    # -- one round -------------------------------------------------------------------------
    def aggregate(self, batch: UpdateBatch, ctx: DefenseContext) -> AggregateResult:
        if ctx.score_models is None:
            raise ValueError(
                f"defense {self.name!r}: needs a server root set (--public-fraction > 0)"
            )
        if self.screen == "robust" and ctx.public_y is None:
            raise ValueError(
                f"defense {self.name!r}: screen 'robust' needs the root set's size (ctx.public_y)"
            )
        n = len(batch)
        ids = batch.client_ids.astype(np.int64)
        alarm = row_flags(batch, "alarm", self.name)
        paper = self.rule == "paper"  # the population rule's bans never reach a row
        banned = row_flags(batch, "banned", self.name) if paper else np.zeros(n, bool)
        live = np.flatnonzero(~banned)
        acc = np.full(n, np.nan)
        if len(live):
            acc[live] = root_accuracy(batch, ctx, live, self.name)
        screening = screening_of(
            self.screen, batch, ctx, acc, alarm, self.cs, self.z, self.norm_ratio
        )
        if paper:
            reasons = paper_rule(live, alarm, screening, self.cs)
            for r in np.flatnonzero(banned):
                reasons[int(r)] = BANNED
            detected = any(why != BANNED for why in reasons.values())
        else:
            n_root = None if ctx.public_y is None else len(ctx.public_y)
            margin = margin_of(self.screen, n_root, self.cs, self.z)
            always = self.trigger == "always"
            reasons, detected = population_rule(live, alarm, screening, acc, margin, always)
        kept = np.array([r not in reasons for r in range(n)], dtype=bool)
        first = detected and not self.in_episode
        base_prev = rollback_base(ctx, self.rollback) if first else None
        self.in_episode = detected
        uniform = self.weighting == "uniform"
        w = kept_weights(kept, batch.num_samples, uniform)
        delta = kept_mean(batch, ctx.global_flat, kept, w, uniform, base_prev)
        note = ROLLBACK if base_prev is not None else ""
        verdicts = tuple(
            Verdict(int(c), True, float(w[r]), float(acc[r]), note)
            if kept[r]
            else Verdict(int(c), False, 0.0, float(acc[r]), reasons[r])
            for r, c in enumerate(ids)
        )
        return AggregateResult(delta, verdicts)

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Whether a detection episode is open (a plain value); strikes and bans are in the
        client-state store."""
        return {"in_episode": bool(self.in_episode)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`'s output; an empty dict resets to the fresh state."""
        if not state:
            self.in_episode = False
            return
        if set(state) != {"in_episode"}:
            raise ValueError(
                f"defense {self.name!r}: state keys {sorted(state)} invalid; valid: ['in_episode']"
            )
        self.in_episode = bool(state["in_episode"])
