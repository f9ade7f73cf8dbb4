"""Command-line flags that would do nothing are refused in one line: a partition's shorthand
with a partition that does not take it, a policy's with a policy that has no such parameter, the
device model's with a trace, Ray's with ``--backend local`` (``simulator/config/inert.py``,
``simulator/config/system.py``)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (
            ["--classes-per-client", "3"],
            "data.classes_per_client: --classes-per-client applies to partition shards, not "
            "'dirichlet'; drop it or give --partition",
        ),
        (
            ["--partition", "shards", "--dirichlet-alpha", "0.1"],
            "data.dirichlet_alpha: --dirichlet-alpha applies to partition dirichlet / quantity / "
            "virtual, not 'shards'; drop it or give --partition",
        ),
        (
            ["--partition", "iid", "--virtual-size-max", "64"],
            "data.virtual_size_max: --virtual-size-max applies to partition virtual, not 'iid'; "
            "drop it or give --partition",
        ),
        (["--missing-classes", "2"], "data.missing_classes: --missing-classes applies to"),
        (
            ["--deadline-s", "30"],
            "clock.deadline_s: --deadline-s applies to round policies with a deadline_s, not "
            "'wait_for_all'; drop it or give --round-policy",
        ),
        (
            ["--round-policy", "deadline", "--max-staleness", "2"],
            "clock.max_staleness: --max-staleness applies to round policies with a "
            "max_staleness, not 'deadline'; drop it or give --round-policy",
        ),
        (
            ["--round-policy", "fedbuff", "--first-k", "3"],
            "clock.first_k: --first-k applies to round policy first_k, not 'fedbuff'; drop it "
            "or give --round-policy",
        ),
        (
            ["--availability-period-s", "100"],
            "devices.availability_period_s: --availability-period-s applies to an availability "
            "trace, none is given; drop it or give --availability-trace",
        ),
        (
            ["--availability-trace", "t.csv", "--availability-low", "0.5"],
            "devices.availability_low: --availability-low applies to the diurnal model, not a "
            "trace; drop it or the trace",
        ),
        (
            ["--gflops-sigma", "1"],
            "devices.gflops_sigma: --gflops-sigma applies to devices that declare GFLOP/s; drop "
            "it or give --gflops-median",
        ),
        (  # found at stop 57: taken without a word by a run that records nothing
            ["--committee", "7"],
            "ledger.committee: --committee applies to runs recorded on FLChain; drop it or give "
            "--ledger",
        ),
    ],
)
def test_a_flag_its_setting_does_not_use_is_refused(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    assert main([*flags, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {says}") and err.count("\n") == 1


def test_a_flag_its_setting_uses_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cli import main

    for flags in (
        ["--round-policy", "deadline_carryover", "--deadline-s", "5", "--max-staleness", "2"],
        ["--round-policy", "first_k", "--first-k", "3"],
        ["--gflops-median", "2", "--gflops-sigma", "1"],
        ["--availability-low", "0.5"],
        ["--ledger", "--committee", "7"],
        ["--ledger-url", "http://127.0.0.1:1", "--committee", "0"],
    ):
        assert main([*flags, "--print-config"]) == 0, capsys.readouterr().err
        capsys.readouterr()
    assert main(["--partition", "shards", "--classes-per-client", "3", "--print-config"]) == 0
    assert "  classes_per_client: 3\n" in capsys.readouterr().out
    assert main(["--partition", "virtual", "--dirichlet-alpha", "0.2", "--print-config"]) == 0


@pytest.mark.parametrize(
    ("flags", "field"),
    [
        (["--gpus-per-actor", "1"], "gpus_per_actor"),
        (["--gpus-per-actor", "0.5"], "gpus_per_actor"),
        (["--ray-address", "127.0.0.1:1"], "ray_address"),
    ],
)
def test_ray_settings_are_refused_with_the_local_backend(
    flags: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulator.cli import main

    assert main(["--backend", "local", *flags, "--print-config"]) == 2
    assert capsys.readouterr().err == (
        f"error: execution.{field}: applies to the Ray backend, not to --backend local (which "
        "trains in this process, on its CPUs); drop one\n"
    )
    assert main(["--backend", "local", "--gpus-per-actor", "0", "--print-config"]) == 0
