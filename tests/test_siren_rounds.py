"""Siren's ``rounds_total`` (the ``T`` of its ban threshold ``floor(0.45 T)``) follows the run's
``experiment.rounds`` when not given: resolved with the config
(:func:`simulator.config.plugins.defense_of`), so ``config.yaml``, the engine, a resume and the
ledger's replay all read the same value."""

from __future__ import annotations

from pathlib import Path

from defenses import make_defense
from simulator.config.sections import build_config, load_config

BASE = {"defense": "siren", "public_fraction": 0.06}


def test_rounds_total_defaults_to_the_runs_rounds() -> None:
    cfg = build_config(flat={**BASE, "rounds": 8})
    assert cfg.defense.defense_params == {"rounds_total": 8}
    # what the engine builds: banned at floor(0.45 x 8) = 3 strikes (45 with the old T = 100)
    assert make_defense("siren", **cfg.defense.defense_params).ban_threshold == 3


def test_a_given_rounds_total_is_kept() -> None:
    cfg = build_config(flat={**BASE, "rounds": 8, "defense_params": {"rounds_total": 30}})
    assert cfg.defense.defense_params == {"rounds_total": 30}


def test_the_benchmarks_explicit_value_gives_the_same_config() -> None:
    # benchmarks/robustness_study/grid.py passes rounds_total = rounds: nothing changes for it
    given = build_config(flat={**BASE, "rounds": 30, "defense_params": {"rounds_total": 30}})
    assert build_config(flat={**BASE, "rounds": 30}) == given


def test_other_defenses_are_untouched() -> None:
    assert build_config(flat={"defense": "median", "rounds": 8}).defense.defense_params == {}


def test_saved_config_keeps_the_value(tmp_path: Path) -> None:
    # what a resume and the ledger's replay read back: the value, not the default again
    build_config(flat={**BASE, "rounds": 8}).save(tmp_path / "config.yaml")
    assert "rounds_total: 8" in (tmp_path / "config.yaml").read_text()
    back = load_config(tmp_path / "config.yaml")
    assert back.defense.defense_params == {"rounds_total": 8}
