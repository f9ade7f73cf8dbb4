"""Checks of the throughput scripts' command lines (``throughput.py``,
``algorithm_throughput.py``): one-line errors through the parser (exit 2) before any work."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.throughput_study.tasks import TASKS, task_config
from simulator.config.fields import ConfigError
from simulator.run.runlock import writable_file


class DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each flag's default, except where there is none to show (None) or its
    help already says it (``"(default 30; quick: 10)"`` was followed by ``"(default: None)"``)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default is None or "default" in text:
            return text
        return super()._get_help_string(action)


def at_least_one(p: argparse.ArgumentParser, args: argparse.Namespace, names: list[str]) -> None:
    """``--NAME`` of each of ``names`` (attributes of ``args``) is unset (None) or >= 1: a 0
    is refused, not taken for the default."""
    for name in names:
        value = getattr(args, name)
        if value is not None and not 1 <= value < float("inf"):
            p.error(f"--{name.replace('_', '-')}: must be >= 1, got {value:g}")


def seed_and_actors(p: argparse.ArgumentParser, seed: int, actors: int) -> None:
    """``--seed`` in [0, 2**32) and ``--actors`` >= 0, and a task config they build."""
    if actors < 0:
        p.error(f"--actors: must be >= 0 (0 = one per CPU), got {actors}")
    if not 0 <= seed < 2**32:
        p.error(f"--seed: must be in [0, 2**32), got {seed}")
    try:
        task_config(TASKS[0], seed, actors)
    except ConfigError as e:
        p.error(str(e).splitlines()[0])


def outputs(p: argparse.ArgumentParser, files: dict[str, str | Path | None]) -> None:
    """Each given output file (``{flag: path}``) can be written: its directory is made and the
    path is no directory (:func:`simulator.run.runlock.writable_file`)."""
    for flag, path in files.items():
        if path:
            try:
                writable_file(Path(path), flag)
            except ValueError as e:
                p.error(str(e))
