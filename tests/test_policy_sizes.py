"""A round policy's own cohort (fedbuff's and fedasync's concurrency, overcommit's
ceil(ratio x k)) larger than the population is refused when the config is built, in one line
naming the parameter; fewer devices *online* than wanted is not an error (selection takes
those there are)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cli import main
from simulator.config.fields import ConfigError
from simulator.config.sections import build_config
from simulator.policies import make_policy
from simulator.population.selection import select_clients

POP = {"partition": "virtual", "num_clients": 1000, "clients_per_round": 5}


@pytest.mark.parametrize(
    "policy, params, line",
    [
        (
            "fedbuff",
            {"concurrency": 5000},
            "clock.policy_params: round policy 'fedbuff': concurrency (5000) exceeds the "
            "population (data.num_clients=1000); give at most 1000",
        ),
        (
            "fedasync",
            {"concurrency": 3000},
            "clock.policy_params: round policy 'fedasync': concurrency (3000) exceeds the "
            "population (data.num_clients=1000); give at most 1000",
        ),
        (
            "overcommit",
            {"k": 900},
            "clock.policy_params: round policy 'overcommit': ceil(ratio x k) = ceil(1.3 x 900) "
            "= 1170 clients a round exceeds the population (data.num_clients=1000); give at "
            "most 1000",
        ),
    ],
)
def test_a_policy_cohort_above_the_population_is_refused(
    policy: str, params: dict, line: str
) -> None:
    with pytest.raises(ConfigError) as e:
        build_config(flat={**POP, "round_policy": policy, "policy_params": params})
    assert str(e.value) == line


def test_overcommit_of_the_default_k_names_the_cohort_it_comes_from() -> None:
    flat = {**POP, "clients_per_round": 800, "round_policy": "overcommit"}
    with pytest.raises(ConfigError, match=r"ceil\(1.3 x 800\) = 1040 clients a round \(k def"):
        build_config(flat=flat)


@pytest.mark.parametrize(
    "policy, params",
    [
        ("fedbuff", {"concurrency": 1000}),
        ("fedasync", {"concurrency": 1000}),
        ("overcommit", {"k": 769}),  # ceil(1.3 x 769) = 1000: the whole population
        ("overcommit", {"ratio": 1.0, "k": 1000}),
    ],
)
def test_a_policy_cohort_of_the_whole_population_is_accepted(policy: str, params: dict) -> None:
    build_config(flat={**POP, "round_policy": policy, "policy_params": params})


def test_the_cli_refuses_it_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    args = "--partition virtual --num-clients 1000 --clients-per-round 5 --rounds 2"
    args += " --round-policy fedbuff --policy-param concurrency=5000 --print-config"
    assert main(args.split()) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: clock.policy_params: round policy 'fedbuff': concurrency (5000) exceeds the "
        "population (data.num_clients=1000); give at most 1000"
    ]


def test_fedbuff_k_above_the_default_concurrency_says_where_it_comes_from() -> None:
    """concurrency 0 is the cohort size: k=10 with 5 clients a round is refused when the
    config is built (it used to pass --print-config and fail when the run started)."""
    why = r"k \(10\) must be <= concurrency \(5\): concurrency defaults to --clients-per-round"
    with pytest.raises(ConfigError, match="clock.policy_params: round policy 'fedbuff': " + why):
        build_config(
            flat={"round_policy": "fedbuff", "policy_params": {"k": 10}, "clients_per_round": 5}
        )
    with pytest.raises(ValueError, match=why):
        make_policy("fedbuff", clients_per_round=5, k=10)
    assert make_policy("fedbuff", clients_per_round=10, k=10).concurrency == 10


class FewOnline:
    """Availability stub: devices 2, 5 and 7 of 10 are online."""

    def __len__(self) -> int:
        return 10

    def online(self, t: float) -> np.ndarray:
        mask = np.zeros(10, dtype=bool)
        mask[[2, 5, 7]] = True
        return mask


def test_selection_takes_the_devices_online_when_fewer_than_wanted() -> None:
    rng = np.random.default_rng(0)
    got = select_clients(FewOnline(), 0.0, 8, np.array([5]), rng)  # type: ignore[arg-type]
    assert got.tolist() == [2, 7]
