"""The README's config reference and CI command stay in agreement with the code."""

from __future__ import annotations

import subprocess
from pathlib import Path

from simulator.cli import config_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_readme_config_table_is_current() -> None:
    readme = (ROOT / "README.md").read_text()
    assert config_markdown() in readme, "regenerate: python -m simulator --config-markdown"


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```", 2)[1].splitlines()
    commands = [line for line in block[1:] if line.strip()]
    assert len(commands) == 2
    assert commands[1].endswith("-m pytest")
    extracted = subprocess.run(
        [
            "bash",
            "-c",
            "awk '/^## Quick start/{q=1} q && /^```/{n++; next} q && n==1 {print}' "
            "README.md | sed -n 2p",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert extracted.stdout.strip() == commands[1]
