"""A Ray cluster that loses a node (with no room left for the dead actor's replacement) or goes
away mid-run: the run stops at once in one line that says how to resume, and the resumed run
ends as an uninterrupted one.

Until stop 51 the lost node left the run waiting 300 s for a replacement that could not start,
then said (exit 2, no resume line) that the cluster's totals fit; the cluster gone was a
traceback; a resume could not be given the cluster's new address or fewer actors.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cluster_helper import helper_run
from lost_cluster import RUN

from simulator.cli import main as sim_main

HELPER = Path(__file__).resolve().parent / "lost_cluster.py"


def _accuracy(run: Path) -> list[float]:
    return [json.loads(x)["accuracy"] for x in (run / "events.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_lost_node_or_cluster_stops_the_run_in_one_line_and_it_resumes(tmp_path: Path) -> None:
    with helper_run(HELPER, [str(tmp_path)], "a cluster losing a node", 600):
        found = json.loads((tmp_path / "lost.json").read_text())
    node = found["node"]
    assert node["rc"] == 1 and node["seconds"] < 60, node  # not START_WAIT_S (300 s)
    assert node["stderr"].strip().splitlines()[-1] == (
        "error: actor 1 died with its node, and the Ray cluster left (1 node(s), 1 CPUs) cannot "
        f"hold the pool's 2 actors; resume with: python -m simulator --resume {tmp_path / 'node'} "
        "--num-actors 1"
    )
    assert found["resume"]["rc"] == 0, found["resume"]["stderr"][-500:]
    gone = found["cluster"]
    last = gone["stderr"].strip().splitlines()[-1]
    assert gone["rc"] == 1 and gone["seconds"] < 60, gone
    assert last.startswith("error: ") and last.endswith(
        f"; resume with: python -m simulator --resume {tmp_path / 'cluster'} --num-actors 1"
    )
    # the run resumed with one actor ends as one never interrupted (results do not depend on
    # the number of actors or nodes)
    ref = tmp_path / "ref"
    assert sim_main([*RUN, "--backend", "local", "--num-actors", "1", "--out", str(ref)]) == 0
    assert _accuracy(tmp_path / "node") == _accuracy(ref)
