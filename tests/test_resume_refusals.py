"""A resume that cannot be right is refused in one line, and leaves the directory as it was.

Found by hand at stop 50 (each resumed with exit 0 and wrong numbers, or lost a file):

- ``config.yaml`` emptied or cut short resumed on the missing fields' defaults (an emptied one
  of a SCAFFOLD run went on as 40 rounds of FedAvg);
- another run's ``checkpoint.pt`` (another seed or learning rate) was taken as this run's;
- a refused resume of a finished run deleted its ``summary.json`` first;
- ``events.jsonl`` deleted, or a line of it doubled, resumed into a log missing or repeating
  rounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from simulator.config.fields import ConfigError
from simulator.config.sections import Config
from simulator.run.appendlog import CorruptLogError
from simulator.run.experiment import config_identity, resume_config, run_experiment
from simulator.run.output import read_events, truncate_events

MakeConfig = Callable[..., Config]


def _crashed(make_config: MakeConfig, name: str, **over: object) -> Path:
    """A 4-round run with a checkpoint every 2 rounds, crashed after 3 rounds."""
    cfg = make_config(name, rounds=4, checkpoint_every=2, **over)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, crash_after=3)
    return Path(cfg.output.out)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_config_identity_leaves_out_where_a_run_is_and_how_it_shows(
    make_config: MakeConfig,
) -> None:
    a = config_identity(make_config("a", lr=0.05, progress=True))
    b = config_identity(make_config("b", lr=0.05, progress=False).replace(resume="x"))
    assert a == b and "out" not in a["output"] and "resume" not in a["output"]
    assert config_identity(make_config("c", lr=0.1)) != a


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        ("", "experiment.rounds is 40 there, 4 in the checkpoint"),  # all fields' defaults
        ("seed", "experiment.seed is 7 there, 0 in the checkpoint"),
        ("cut", "output.checkpoint_every is 0 there, 2 in the checkpoint"),
    ],
)
def test_a_config_that_is_not_the_checkpoints_is_refused(
    make_config: MakeConfig, edit: str, named: str
) -> None:
    out = _crashed(make_config, "run", algorithm="scaffold")
    path = out / "config.yaml"
    text = path.read_text()
    if edit == "seed":
        text = text.replace("seed: 0\n", "seed: 7\n")
    elif edit == "cut":  # everything from the output section on falls back to defaults
        text = text[: text.index("output:")]
    else:
        text = ""
    path.write_text(text)
    before = _files(out)
    with pytest.raises(ConfigError) as err:
        run_experiment(resume_config(out))
    line = str(err.value)
    assert "\n" not in line and f"{path} does not match its checkpoint.pt" in line
    assert named in line
    assert _files(out) == before


def test_another_runs_checkpoint_is_refused(make_config: MakeConfig) -> None:
    out = _crashed(make_config, "run")
    other = _crashed(make_config, "other", seed=1)
    (out / "checkpoint.pt").write_bytes((other / "checkpoint.pt").read_bytes())
    with pytest.raises(ConfigError, match="experiment.seed is 0 there, 1 in the checkpoint"):
        run_experiment(resume_config(out))


def test_a_refused_resume_keeps_the_finished_runs_summary(make_config: MakeConfig) -> None:
    cfg = make_config("done", rounds=4, checkpoint_every=2)
    run_experiment(cfg)
    out = Path(cfg.output.out)
    lines = (out / "events.jsonl").read_text().splitlines(keepends=True)
    (out / "events.jsonl").write_text("".join([lines[0], lines[0], *lines[2:]]))
    before = _files(out)
    with pytest.raises(CorruptLogError, match="holds round 0 twice"):
        run_experiment(resume_config(out))
    assert _files(out) == before and json.loads((out / "summary.json").read_text())["rounds"] == 4


def test_a_resume_checks_the_rounds_its_log_holds(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"

    def write(*rounds: int) -> None:
        log.write_text("".join(json.dumps({"round": r}) + "\n" for r in rounds))

    for rounds, why in [
        ((0, 1, 1, 2), "round 1 twice"),
        ((0, 2, 3), "no round 1"),
        ((1, 0, 2), "its rounds out of order"),
        ((0, 1), "no round 2"),
    ]:
        write(*rounds)
        with pytest.raises(CorruptLogError, match=f"holds {why} \\(the checkpoint is at round 3"):
            truncate_events(log, 3)
        assert [e["round"] for e in read_events(log)] == list(rounds)  # left as it was
        assert not log.with_suffix(".jsonl.tmp").exists()
    write(0, 1, 2, 3, 4)  # rounds past the checkpoint go
    truncate_events(log, 3)
    assert [e["round"] for e in read_events(log)] == [0, 1, 2]
    log.unlink()
    with pytest.raises(CorruptLogError, match="is missing: the run's rounds 0-2 are gone"):
        truncate_events(log, 3)
    truncate_events(log, 0)  # a run killed before its first round: an empty log
    assert log.read_text() == ""
