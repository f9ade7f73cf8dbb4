"""benchmarks/heterogeneity.py's command line: its errors, the JSON schema of a tiny run, and
the plot's panels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from test_heterogeneity_bench import use_case  # noqa: E402

from benchmarks.heterogeneity_study import cli, plots  # noqa: E402
from benchmarks.heterogeneity_study.cases import (  # noqa: E402
    CASES,
    Case,
)
from benchmarks.heterogeneity_study.main import main  # noqa: E402

# ------------------------------------------------------------------------------ the CLI


def test_unknown_case_exits_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--case", "fedbn", "--case", "nope"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert err == f"error: unknown case 'nope'; valid: {list(CASES)}"
    with pytest.raises(SystemExit) as e:
        main(["--seeds", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--seeds", "17"])
    assert e.value.code == 2
    assert "--seeds must be in 1..16" in capsys.readouterr().err
    assert cli.parse_args(["--quick"]).seeds == 3 and cli.parse_args([]).seeds == 5


def test_json_schema_of_a_tiny_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The fedbn case, 1 seed, 2 rounds, in this process: the JSON has one entry per
    comparison with the required keys, the CSV and the plot exist; ``--no-progress`` leaves
    no progress bar on stderr, one line per finished run instead."""
    case = CASES["fedbn"]
    use_case(
        monkeypatch,
        Case(case.name, case.claim, case.base, case.arms, case.comparisons, quick={"rounds": 2}),
    )
    out, js, cs = tmp_path / "out", tmp_path / "r.json", tmp_path / "r.csv"
    rc = main(
        [
            "--case",
            "fedbn",
            "--quick",
            "--seeds",
            "1",
            "--workers",
            "1",
            "--out",
            str(out),
            "--json",
            str(js),
            "--csv",
            str(cs),
            "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr()
    assert "runs:" not in printed.err
    # instead, one line per finished run (fedbn's quick case: 3 arms x 1 seed)
    lines = [ln for ln in printed.err.splitlines() if ln.startswith("run ")]
    assert [ln.split(" (")[0].split(" ", 2)[1] for ln in lines] == ["1/3", "2/3", "3/3"]
    assert "note: with 1 seed(s) the smallest possible p is 1/2 = 0.500 > 0.05" in printed.out
    assert "paired diff" in printed.out and "1-std" in printed.out
    data = json.loads(js.read_text())
    assert list(data) == ["cases"] and len(data["cases"]) == 3
    required = {
        "case",
        "method",
        "baseline",
        "method_mean",
        "method_std",
        "baseline_mean",
        "baseline_std",
        "reproduced",
        "paired_diff_mean",
        "paired_diff_std",
        "p_value",
        "verdict",
    }
    for row in data["cases"]:
        assert required <= set(row)
        assert row["case"] == "fedbn" and row["error"] is None
        assert isinstance(row["reproduced"], bool)
        assert row["method_std"] == 0.0 and 0.0 <= row["method_mean"] <= 1.0
        assert row["paired_diff_std"] == 0.0 and row["p_value"] in (0.5, 1.0)
        assert row["verdict"] in ("inconclusive", "contradicted")
    assert [(r["method"], r["baseline"]) for r in data["cases"]] == [
        ("fedbn", "fedavg"),
        ("fedbn", "fedprox"),
        ("fedbn", "fedavg"),
    ]
    assert len(cs.read_text().splitlines()) == 4
    assert (out / "fedbn.png").is_file()
    assert (out / "runs" / "fedbn" / "fedbn-s0" / "events.jsonl").is_file()


def test_plot_panels_follow_the_comparisons() -> None:
    """Arms that comparisons connect share a panel: fedfm's three partitions give three panels
    of three; fedufo's arms are all compared with fedavg, one panel; an arm in no comparison
    is a panel of its own."""
    assert plots.panels(CASES["fedfm"], list(CASES["fedfm"].arms)) == [
        ["fedavg-b0.5", "moon-b0.5", "fedfm-b0.5"],
        ["fedavg-miss3", "moon-miss3", "fedfm-miss3"],
        ["fedavg-miss7", "moon-miss7", "fedfm-miss7"],
    ]
    assert plots.panels(CASES["fedufo"], list(CASES["fedufo"].arms)) == [
        ["fedavg", "feduad", "fedufo-nods", "fedufo"]
    ]
    assert plots.panels(CASES["fedufo"], ["lonely", "fedufo", "fedavg"]) == [
        ["lonely"],
        ["fedufo", "fedavg"],
    ]
