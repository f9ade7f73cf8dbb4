"""Scenarios, defense presets and the accuracy curves of ``benchmarks/robustness.py``.

Kept apart from the script so that the pieces are testable on their own; the one-run worker is
:mod:`benchmarks.robustness_study.worker`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

#: server-held public/root set size the scenarios aim for (Siren/FLTrust use ~100 samples)
PUBLIC_SAMPLES = 100

#: flat config overrides of each scenario; ``public_fraction`` and ``deadline_s`` are resolved
#: per dataset by :func:`resolve_scenario`
SCENARIOS: dict[str, dict[str, Any]] = {
    # Siren (Guo et al.), the benchmark's default: 10 IID clients, all of them every round, E=5,
    # root set ~100. Full participation is the paper's setting and what its ban rule assumes: a
    # client gains a strike in each round it is excluded and is banned at int(0.45 T) strikes,
    # so with half the clients selected a round, attackers are only banned near the end of T.
    "siren": dict(num_clients=10, partition="iid", clients_per_round=10, local_epochs=5, rounds=30),
    # the README's default task with an IID split: 20 clients, 10 a round, E=5, B=10, MLP.
    # IID as in the Siren and Krum/median papers; under label skew (--set partition=dirichlet)
    # Siren's clients raise many false alarms (measured: 0.67 at 40% label flip)
    "partial": dict(
        num_clients=20, partition="iid", clients_per_round=10, local_epochs=5, rounds=30
    ),
    # Sageflow (Park et al.): 100 devices with 2-class shards, 20 a round, malicious re-drawn
    # every round, deadline with carry-over of late (stale) updates, public set ~2%
    "sageflow": dict(
        num_clients=100,
        partition="shards",
        classes_per_client=2,
        clients_per_round=20,
        local_epochs=5,
        rounds=30,
        malicious_mode="redraw",
        round_policy="deadline_carryover",
        max_staleness=5,
        public_fraction=0.02,
    ),
    # cross-device FL: 10^6 virtual devices on mnist5k (each a seeded draw with a
    # Dirichlet(0.5) label mix and a log-normal size, median 32), 100 a round, E=1; the
    # attackers are a fixed share of the population, so a cohort holds a binomial number of
    # them and most clients are seen once; deadline with carry-over of late updates
    "crossdevice": dict(
        dataset="mnist5k",
        num_clients=1_000_000,
        partition="virtual",
        dirichlet_alpha=0.5,
        clients_per_round=100,
        local_epochs=1,
        rounds=30,
        malicious_mode="fixed",
        round_policy="deadline_carryover",
        max_staleness=5,
    ),
}

#: scenarios whose f (Byzantine rows a rule tolerates) comes from the expected number of
#: attackers in a cohort plus a margin, ``F_MARGIN_SD`` binomial standard deviations
BINOMIAL_F = {"crossdevice"}

#: rules that weigh rows by their sample counts in the BINOMIAL_F scenarios: device sizes
#: span 4-512 samples there, and the papers' uniform weights pull the aggregate toward the many
#: small devices (measured, crossdevice signflip, 3 seeds, clean / 0.1: Multi-Krum 0.825 ->
#: 0.849 / 0.767 -> 0.808, median 0.691 -> 0.784 / 0.657 -> 0.757, centered clipping 0.825 ->
#: 0.850 / 0.799 -> 0.831)
SAMPLE_WEIGHTED = {"multikrum", "median", "trimmedmean", "centeredclip", "fltrust"}

#: rules built for IID rows that get nearest-neighbour mixing (``nnm=f``, Allouah et al.
#: 2023, :mod:`defenses.nnm`) in the BINOMIAL_F scenarios: on Dirichlet(0.5) cohorts they
#: otherwise discard most of the benign signal (stop 22, 3 seeds, signflip 0.1: Krum 0.327,
#: median 0.757, trimmed mean 0.754 against FedAvg 0.830)
NNM_MIXED = {"krum", "multikrum", "median", "trimmedmean", "bulyan"}

#: the margin of ``f`` over the expected attackers of a cohort, in standard deviations of
#: Binomial(n, fraction): 2 covers ~98% of the cohort draws; a round above it (or with too few
#: arrivals for the rule) is skipped with verdicts naming the precondition
F_MARGIN_SD = 2.0

#: the scenario of ``benchmarks/robustness.py`` without ``--scenario``
DEFAULT_SCENARIO = "siren"

#: percentile of the population's full-round durations used as the Sageflow-scenario deadline:
#: the slowest ~30% of each round's updates arrive one or more rounds late
DEADLINE_PERCENTILE = 70.0

#: Sageflow's E_th. Measured on digits (partial scenario): local models of round 0 have mean
#: softmax entropy on the public set of ~0.9-2.3 nats (ln 10 = 2.30 is an untrained model),
#: falling to ~0.3-1.0 by round 20. 2.5 (above ln 10) never rejects anything; the paper's 1.0
#: rejects most of round 0 and let signflip at 0.4 collapse the model (acc 0.1-0.3); 1.5 kept
#: accuracy (labelflip 0.4: 0.83/0.90, signflip 0.4: 0.74/0.78 on seeds 0/1) and rejects some
#: malicious rows (precision ~0.4-0.5, recall ~0.1). Rejected rows never move the model, so E_th
#: must sit above the first rounds' entropies or a run can stall.
SAGEFLOW_ENTROPY_THRESHOLD = 1.5

#: E_th per scenario. With IID clients (siren, partial) a round-0 local model is barely trained
#: (entropy ~2.28 on digits, ln 10 = 2.30), so any E_th below ln C rejects every update and the
#: model never moves; 2.35 lets the first rounds through and still filters high-entropy models
#: later (measured, seed 0, 30 rounds: labelflip 0.4 -> 0.925, signflip 0.4 -> 0.900).
SAGEFLOW_THRESHOLDS: dict[str, float] = {
    "partial": 2.35,
    "siren": 2.35,
    "sageflow": SAGEFLOW_ENTROPY_THRESHOLD,
}

#: our variants of two rules in the BINOMIAL_F scenarios (each documented in its module).
#: Sageflow: keep a row iff its model's entropy is below its base model's, and apply late
#: updates to the current model (E=1 steps on small devices leave every model's entropy near
#: the global model's, so the absolute E_th=2.35 rejected nothing; averaging stale models cost
#: 2.2 points on clean runs). FLTrust: full trust from the round's median cosine to the root
#: update up (the paper's cosine shares lean toward the 100-sample root set's direction).
#: Measured (crossdevice signflip, 3 seeds, f=0/0.1/0.2/0.3; FedAvg 0.850/0.830/0.787/0.730):
#: Sageflow 0.828/0.805/0.762/0.688 -> 0.842/0.826/0.791/0.728, FLTrust 0.806/0.808/0.803/
#: 0.799 -> 0.822/0.823/0.815/0.801 (backdoor success at 0.3: 0.12 -> 0.35, FedAvg 0.99)
BINOMIAL_PARAMS: dict[str, dict[str, Any]] = {
    "sageflow": {"entropy_filter": "relative", "stale": "updates"},
    "fltrust": {"trust": "median"},
}

#: defenses whose parameter ``f`` (Byzantine clients tolerated) the grid sets; whether a cell
#: can run is judged by the rule itself, built with the parameters the run will use
#: (:func:`precondition`: Krum n > 2f + 2, Bulyan n >= 4f + 3, trimmed mean n > 2f, ...)
F_DEFENSES = frozenset({"krum", "multikrum", "bulyan", "trimmedmean"})

#: pairs of parameter alternatives a rule takes one of: a user's parameter that chooses one
#: alternative (the first key of its tuple) replaces the preset's keys of the other, unless the
#: user gives a key of that one too (then the rule refuses the pair, before the grid starts)
ALTERNATIVES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("bucket",), ("nnm", "nnm_rank")),  # bucketing or nearest-neighbour mixing
    (("beta",), ("f",)),  # trimmed mean: the share trimmed on each side, or the count
)


def train_size(dataset: str, data_path: str | None = None, test_fraction: float = 0.2) -> int:
    """Number of training samples of ``dataset`` (before the public set is carved out)."""
    from simulator.data import load_dataset

    ds = load_dataset(dataset, seed=0, path=data_path, test_fraction=test_fraction)
    return len(ds.y_train)


def round_deadline(flat: dict[str, Any], percentile: float = DEADLINE_PERCENTILE) -> float:
    """``percentile`` of every client's full-round duration (compute + transfer, E epochs)
    in the population that ``flat`` generates with seed 0."""
    from simulator.config.sections import build_config
    from simulator.population.clock import compute_seconds, transfer_seconds
    from simulator.run.federation import build_federation

    cfg = build_config(flat={**flat, "seed": 0, "backend": "local"})
    fed = build_federation(cfg)
    pop, c = fed.population, cfg.clock
    epochs = np.full(fed.num_clients, cfg.algorithm.local_epochs)
    dur = compute_seconds(
        fed.client_sizes, epochs, pop.compute_ms_per_sample, c.compute_factor
    ) + transfer_seconds(
        4 * fed.layout.size,
        4 * fed.layout.size,
        up_kbps=pop.up_kbps,
        down_kbps=pop.down_kbps,
        latency_ms=pop.latency_ms,
    )
    return round(float(np.percentile(np.atleast_1d(dur), percentile)), 3)


def resolve_scenario(
    name: str, dataset: str | None, rounds: int | None, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The flat config overrides of scenario ``name`` for ``dataset``: public_fraction sized to
    ~100 samples (siren, partial, crossdevice), deadline_s from the population (sageflow,
    crossdevice). ``dataset`` None: the scenario's own (mnist5k for crossdevice), else digits."""
    flat = dict(SCENARIOS[name])
    flat["dataset"] = dataset or flat.get("dataset", "digits")
    if rounds is not None:
        flat["rounds"] = rounds
    flat.update(extra or {})
    if "public_fraction" not in flat:
        n = train_size(
            flat["dataset"],
            data_path=flat.get("data_path"),
            test_fraction=flat.get("test_fraction", 0.2),
        )
        flat["public_fraction"] = round(min(PUBLIC_SAMPLES / n, 0.5), 4)
    if flat.get("round_policy") in ("deadline", "deadline_carryover") and "deadline_s" not in flat:
        flat["deadline_s"] = round_deadline(flat)
    return flat


def byzantine_f(fraction: float, n: int, margin_sd: float = 0.0) -> int:
    """Clients a robust rule should tolerate: ``ceil(fraction * n + margin_sd * sqrt(n *
    fraction * (1 - fraction)))``, at least 1 (the rules' own default, also used for the clean
    baseline). ``margin_sd`` 0 (full participation: the cohort holds exactly the share); > 0
    when a cohort is drawn from a population with that share of attackers."""
    sd = math.sqrt(n * fraction * (1.0 - fraction))
    return max(1, math.ceil(fraction * n + margin_sd * sd - 1e-9))


def defense_preset(
    defense: str,
    fraction: float,
    n: int,
    rounds: int,
    registered: set[str],
    scenario: str = "sageflow",
    given: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """(defense_params, None), or (defense_params, "n/a (precondition): ...") when a round of
    ``n`` rows breaks the rule built with them: the scenario's preset with the user's
    ``given`` parameters (``--defense-param``) over it (:func:`over_preset`). Raises
    ValueError when they build no rule."""
    params: dict[str, Any] = {}
    f = byzantine_f(fraction, n, F_MARGIN_SD if scenario in BINOMIAL_F else 0.0)
    if defense in F_DEFENSES:
        params["f"] = f
    if defense in SAMPLE_WEIGHTED and scenario in BINOMIAL_F:
        params["weighting"] = "samples"
    if defense in NNM_MIXED and scenario in BINOMIAL_F:
        params["nnm"], params["nnm_rank"] = f, "angle"
    if scenario in BINOMIAL_F:
        params.update(BINOMIAL_PARAMS.get(defense, {}))
    elif defense == "sageflow":
        params["entropy_threshold"] = SAGEFLOW_THRESHOLDS.get(scenario, SAGEFLOW_ENTROPY_THRESHOLD)
    if defense == "siren" and "siren" in registered:
        params["rounds_total"] = rounds
    params = over_preset(params, given or {})
    return params, precondition(defense, params, n)


def precondition(defense: str, params: dict[str, Any], n: int) -> str | None:
    """``"n/a (precondition): DEFENSE needs ..."`` when a round of ``n`` rows breaks the rule
    built with ``params`` (its own check, as the engine's before a run: f, m, beta, buckets,
    mixing), else None. Raises ValueError when ``params`` build no rule."""
    from defenses import make_defense

    why = make_defense(defense, **params).rule_precondition(n)
    return None if why is None else f"n/a (precondition): {defense} needs {why}"


def over_preset(preset: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The preset's parameters with the user's (``--defense-param``) over them; a user's
    parameter that chooses one of two :data:`ALTERNATIVES` replaces the preset's other one
    (``bucket`` the preset's nearest-neighbour mixing, trimmed mean's ``beta`` its ``f``)."""
    drop: set[str] = set()
    for pair in ALTERNATIVES:
        for mine, other in (pair, pair[::-1]):
            if mine[0] in given and not any(k in given for k in other):
                drop.update(other)
    return {**{k: v for k, v in preset.items() if k not in drop}, **given}


def mean_curve(run_dirs: list[str]) -> tuple[list[int], list[float]]:
    """Rounds (1-based) and accuracy averaged over the runs' events.jsonl (evaluated rounds)."""
    per_round: dict[int, list[float]] = {}
    for d in run_dirs:
        p = Path(d) / "events.jsonl"
        if not p.is_file():
            continue
        for line in p.read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                if e.get("accuracy") is not None:
                    per_round.setdefault(int(e["round"]) + 1, []).append(e["accuracy"])
    xs = sorted(per_round)
    return xs, [float(np.mean(per_round[x])) for x in xs]
