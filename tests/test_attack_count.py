"""How many clients an attack fraction makes malicious, in a run's config and in its rounds
(``attacks.base.malicious_count``, ``simulator.config.plugins.check_attack_count``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run_records, small_config

from simulator.config.fields import ConfigError
from simulator.config.sections import Config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"num_clients": 10, "attack_fraction": 0.04},
            "attack.attack_fraction: 0.04 of the 10 devices makes no malicious client "
            "(0.04 x 10 rounds to 0); give at least 0.05, or --attack none",
        ),
        (
            {"num_clients": 10, "clients_per_round": 3, "attack_fraction": 0.1},
            "attack.attack_fraction: 0.1 of the 3 clients a round selects makes no malicious "
            "client (0.1 x 3 rounds to 0); give at least 0.1667, or --attack none",
        ),
    ],
)
def test_a_fraction_that_makes_no_attacker_is_refused(
    tmp_path: Path, overrides: dict[str, Any], message: str
) -> None:
    # found at stop 57: 0.04 of 10 devices ran a clean run under the attack's name, exit 0
    mode = "redraw" if "clients_per_round" in overrides else "fixed"
    with pytest.raises(ConfigError) as err:
        small_config(tmp_path / "r", attack="signflip", malicious_mode=mode, **overrides)
    assert str(err.value) == message


def test_an_asynchronous_redraw_draws_each_selected_client(
    make_config: Callable[..., Config],
) -> None:
    # found at stop 57: after its first step fedasync selects one client a step, of which
    # round(0.3 x 1) = 0 were malicious: the attack stopped after step 0 without a word
    cfg = make_config(
        num_clients=20,
        clients_per_round=5,
        rounds=40,
        round_policy="fedasync",
        attack="signflip",
        attack_fraction=0.3,
        malicious_mode="redraw",
    )
    recs = run_records(cfg)
    late = [r for r in recs[1:] if len(r.selected) == 1]
    assert len(late) == 39
    hits = sum(len(r.extra["malicious"]) for r in late)
    assert 4 <= hits <= 20  # ~11.7 of 39 (binomial sd ~2.9)
    assert all(set(r.extra["malicious"]) <= set(r.selected) for r in recs)
