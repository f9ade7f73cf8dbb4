"""``--partition-params KEY=VALUE``: each scheme's parameters, the shorthand fields as their
defaults, type checks, and the parameters reaching the split."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from simulator.cli import main
from simulator.config.fields import ConfigError
from simulator.config.learning import DataConfig
from simulator.config.sections import build_config
from simulator.data.scheme_params import (
    SHORTHAND,
    parameters_help,
    resolve_partition_params,
    scheme_parameters,
)
from simulator.run.federation import build_federation


def test_each_schemes_parameters_and_defaults() -> None:
    assert scheme_parameters("iid") == {}
    assert scheme_parameters("natural") == {}
    assert scheme_parameters("dirichlet") == {
        "alpha": 0.5,
        "min_size": 1,
        "max_retries": 100,
        "balance": True,
    }
    assert scheme_parameters("shards") == {"classes_per_client": 2}
    assert scheme_parameters("missing") == {"missing_classes": 1, "max_retries": 100}
    assert scheme_parameters("quantity") == {
        "method": "dirichlet",
        "alpha": 1.0,
        "exponent": 1.0,
        "min_size": 1,
    }
    assert scheme_parameters("virtual") == {
        "alpha": 0.5,
        "size_median": 32.0,
        "size_sigma": 0.6,
        "size_min": 4,
        "size_max": 512,
    }
    with pytest.raises(ValueError, match="unknown partition 'rows'; valid: dirichlet, iid"):
        scheme_parameters("rows")


def test_shorthand_fields_are_defaults_and_the_map_overrides_them() -> None:
    short = {
        "dirichlet_alpha": 0.3,
        "classes_per_client": 4,
        "missing_classes": 2,
        "virtual_size_median": 20.0,
        "virtual_size_sigma": 1.0,
        "virtual_size_min": 2,
        "virtual_size_max": 64,
    }
    assert resolve_partition_params("iid", short, {}) == {}
    assert resolve_partition_params("dirichlet", short, {}) == {"alpha": 0.3}
    assert resolve_partition_params("quantity", short, {"alpha": 2}) == {"alpha": 2.0}
    assert resolve_partition_params("shards", short, {}) == {"classes_per_client": 4}
    assert resolve_partition_params("missing", short, {"max_retries": 7}) == {
        "missing_classes": 2,
        "max_retries": 7,
    }
    assert resolve_partition_params("virtual", short, {"size_max": 32.0}) == {
        "alpha": 0.3,
        "size_median": 20.0,
        "size_sigma": 1.0,
        "size_min": 2,
        "size_max": 32,
    }
    # every shorthand field names a parameter of each scheme it applies to; virtual's defaults
    # are the shorthand fields' defaults
    for field, (schemes, param) in SHORTHAND.items():
        assert field in DataConfig.__dataclass_fields__
        assert all(param in scheme_parameters(s) for s in schemes)
        if "virtual" in schemes:
            default = DataConfig.__dataclass_fields__[field].default
            assert scheme_parameters("virtual")[param] == default


@pytest.mark.parametrize(
    ("scheme", "given", "message"),
    [
        (
            "dirichlet",
            {"alfa": 0.1},
            "partition 'dirichlet': unknown parameter 'alfa'; "
            "valid: ['alpha', 'balance', 'max_retries', 'min_size']",
        ),
        ("iid", {"alpha": 1.0}, "partition 'iid': unknown parameter 'alpha'; valid: []"),
        (
            "shards",
            {"classes_per_client": 1.5},
            "partition 'shards' parameter 'classes_per_client' must be int, got 1.5",
        ),
        ("dirichlet", {"balance": 1}, "partition 'dirichlet' parameter 'balance' must be bool"),
        ("dirichlet", {"min_size": True}, "parameter 'min_size' must be int, got True"),
        ("quantity", {"method": 3}, "parameter 'method' must be str, got 3"),
    ],
)
def test_bad_parameters_name_the_key_and_the_valid_ones(
    scheme: str, given: dict, message: str
) -> None:
    with pytest.raises(ValueError) as e:
        resolve_partition_params(scheme, {}, given)
    assert message in str(e.value)


def test_config_validates_the_map_and_the_help_lists_every_schemes_parameters() -> None:
    cfg = build_config(
        flat={"partition": "quantity", "partition_params": {"method": "powerlaw", "exponent": 2}}
    )
    assert cfg.data.partition_kwargs() == {"alpha": 0.5, "method": "powerlaw", "exponent": 2.0}
    with pytest.raises(
        ConfigError, match="^data.partition_params: partition 'virtual': unknown parameter 'size'"
    ):
        build_config(flat={"partition": "virtual", "partition_params": {"size": 3}})
    help_ = DataConfig.__dataclass_fields__["partition_params"].metadata["help"]
    for part in parameters_help().split("; "):
        assert part in help_


def test_cli_bad_partition_parameter_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--partition", "shards", "--partition-params", "classes=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: data.partition_params: partition 'shards': unknown parameter 'classes'; "
        "valid: ['classes_per_client']"
    )


def test_parameters_reach_the_split() -> None:
    """shards with classes_per_client=1 from the map: each of 10 digits clients holds exactly
    one class; virtual with size_min=size_max=5: every client holds exactly 5 samples."""
    base = build_config(
        flat={
            "num_clients": 10,
            "partition": "shards",
            "partition_params": {"classes_per_client": 1},
        }
    )
    fed = build_federation(base)
    ids = np.arange(10)
    classes = [len(np.unique(fed.y_train[r])) for r in fed.clients.rows(ids).index]
    assert classes == [1] * 10
    virt = dataclasses.replace(
        base,
        data=dataclasses.replace(
            base.data,
            partition="virtual",
            num_clients=1000,
            partition_params={"size_min": 5, "size_max": 5},
        ),
    )
    assert build_federation(virt).clients.sizes(np.arange(1000)).tolist() == [5] * 1000


def test_memory_estimate_uses_the_resolved_virtual_size_max() -> None:
    """The per-round estimate sizes a virtual client by its largest size: set by the map or by
    the shorthand field, the same value gives the same estimate, and a larger one a larger
    round."""
    from simulator.run.budget import estimate

    flat = {"partition": "virtual", "num_clients": 10_000, "backend": "local"}
    by_map = estimate(build_config(flat={**flat, "partition_params": {"size_max": 64}}))
    by_field = estimate(build_config(flat={**flat, "virtual_size_max": 64}))
    larger = estimate(build_config(flat={**flat, "partition_params": {"size_max": 256}}))
    assert by_map == by_field
    assert larger.round > by_map.round
