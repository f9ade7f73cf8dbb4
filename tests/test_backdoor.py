"""Backdoor (BadNets) data attack and model replacement: hand-checked triggers, poisoning,
boosting, validation, the registry and config loading."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np
import pytest
import torch
from conftest import run_records

from attacks import ATTACKS, AttackContext, make_attack
from attacks.backdoor import Backdoor, attack_success_rate, patch_size
from attacks.model_replacement import ModelReplacement
from simulator.config.fields import ConfigError
from simulator.config.sections import Config, build_config
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def ctx(malicious: torch.Tensor, n: int) -> AttackContext:
    p = malicious.shape[1]
    return AttackContext(
        round=0,
        global_flat=torch.zeros(p),
        benign=torch.zeros(0, p),
        num_byzantine=malicious.shape[0],
        num_total=n,
        rng=np.random.default_rng(0),
    )


def test_stamp_image_sets_exactly_bottom_right_3x3() -> None:
    x = torch.zeros(1, 1, 8, 8)
    out = make_attack("backdoor").stamp(x)
    expected = torch.zeros(1, 1, 8, 8)
    expected[0, 0, 5:, 5:] = 1.0
    assert torch.equal(out, expected)
    assert int(out.sum()) == 9
    assert torch.equal(x, torch.zeros(1, 1, 8, 8))  # input untouched


def test_stamp_every_channel_and_trigger_value() -> None:
    out = make_attack("backdoor", trigger_value=0.5).stamp(torch.zeros(2, 3, 10, 12))
    assert torch.equal(out[:, :, -3:, -3:], torch.full((2, 3, 3, 3), 0.5))
    assert float(out.sum()) == 2 * 3 * 9 * 0.5


def test_stamp_flat_sets_last_three_features() -> None:
    out = make_attack("backdoor").stamp(torch.zeros(2, 5))
    assert torch.equal(out, torch.tensor([[0.0, 0.0, 1.0, 1.0, 1.0]] * 2))
    assert torch.equal(make_attack("backdoor").stamp(torch.zeros(1, 2)), torch.ones(1, 2))


def test_patch_size_small_images() -> None:
    assert patch_size(28, 28) == 3 and patch_size(8, 8) == 3
    assert patch_size(4, 4) == 1 and patch_size(7, 9) == 1 and patch_size(2, 2) == 1
    out = make_attack("backdoor").stamp(torch.zeros(1, 1, 4, 4))
    assert int(out.sum()) == 1 and out[0, 0, 3, 3] == 1.0


def test_poison_fraction_one_stamps_and_relabels_all() -> None:
    x = torch.zeros(2, 4, 1, 8, 8)
    y = torch.arange(8).reshape(2, 4) % 5
    xp, yp = make_attack("backdoor", target=3, poison_fraction=1.0).poison(
        x, y, num_classes=5, seed=0
    )
    assert torch.equal(yp, torch.full((2, 4), 3))
    assert yp.dtype == torch.int64 and xp.shape == x.shape and xp.dtype == x.dtype
    assert torch.equal(xp[..., 5:, 5:], torch.ones(2, 4, 1, 3, 3))
    assert float(xp.sum()) == 8 * 9


def test_poison_half_is_seeded_and_consistent() -> None:
    atk = make_attack("backdoor", target=2)
    x = torch.zeros(4, 8, 6)  # [S, B, D] flat inputs
    y = torch.zeros(4, 8, dtype=torch.int64)
    xp, yp = atk.poison(x, y, num_classes=3, seed=42)
    hit = yp == 2
    assert int(hit.sum()) == 16  # 16 of 32 for seed 42
    # a stamped sample is exactly a relabelled one
    assert torch.equal(xp[..., -3:].sum(-1) == 3, hit)
    assert float(xp[..., :3].abs().sum()) == 0.0
    xq, yq = atk.poison(x, y, num_classes=3, seed=42)
    assert torch.equal(xp, xq) and torch.equal(yp, yq)
    assert not torch.equal(atk.poison(x, y, num_classes=3, seed=1)[1], yp)
    assert torch.equal(x, torch.zeros(4, 8, 6)) and torch.equal(y, torch.zeros(4, 8).long())


def test_poison_rejects_target_out_of_range() -> None:
    with pytest.raises(ValueError, match="target 5 out of range"):
        make_attack("backdoor", target=5).poison(
            torch.zeros(1, 2, 3), torch.zeros(1, 2).long(), num_classes=5, seed=0
        )


def test_attack_success_rate() -> None:
    y = torch.tensor([0, 1, 2, 0, 3])
    pred = torch.tensor([0, 0, 2, 1, 0])
    assert attack_success_rate(pred, y, 0) == pytest.approx(2 / 3)  # over labels 1, 2, 3
    assert np.isnan(attack_success_rate(pred, torch.zeros(5).long(), 0))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"target": -1}, "'target'"),
        ({"target": 1.5}, "'target'"),
        ({"poison_fraction": 0.0}, "'poison_fraction'"),
        ({"poison_fraction": 1.5}, "'poison_fraction'"),
        ({"poison_fraction": "half"}, "'poison_fraction'"),
        ({"pattern": "star"}, "'pattern'"),
        ({"trigger_value": float("inf")}, "'trigger_value'"),
        ({"size": 3}, "unknown parameter 'size'"),
    ],
)
def test_backdoor_invalid_params(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_attack("backdoor", **params)


def test_model_replacement_default_boost_is_n() -> None:
    mal = torch.tensor([[1.0, -2.0, 0.5]])
    out = make_attack("model_replacement").apply(mal, ctx(mal, n=10))
    assert out.dtype == torch.float32 and torch.equal(out, 10 * mal)


def test_model_replacement_explicit_boost() -> None:
    mal = torch.tensor([[1.0, -2.0], [0.0, 4.0]])
    out = make_attack("model_replacement", boost=2.5).apply(mal, ctx(mal, n=10))
    assert torch.equal(out, 2.5 * mal)


def test_model_replacement_data_attribute() -> None:
    atk = make_attack("model_replacement")
    assert atk.kind == "model" and atk.data is None
    atk = make_attack("model_replacement", target=3, poison_fraction=1.0)
    assert isinstance(atk.data, Backdoor) and atk.data.kind == "data"
    assert atk.data.params["target"] == 3 and atk.data.params["poison_fraction"] == 1.0
    assert atk.params["target"] == 3
    _, yp = atk.data.poison(torch.zeros(1, 2, 4), torch.zeros(1, 2).long(), num_classes=4, seed=0)
    assert torch.equal(yp, torch.full((1, 2), 3))
    again = pickle.loads(pickle.dumps(atk))
    assert isinstance(again, ModelReplacement) and again.data.params == atk.data.params


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"boost": 0}, "'boost'"),
        ({"boost": -1.0}, "'boost'"),
        ({"target": -2}, r"attack 'model_replacement': parameter 'target'"),
        ({"poison_fraction": 2}, "'poison_fraction'"),
        ({"scale": 2}, "unknown parameter 'scale'"),
    ],
)
def test_model_replacement_invalid_params(params: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_attack("model_replacement", **params)


def test_registry_has_both() -> None:
    assert ATTACKS["backdoor"] is Backdoor and Backdoor.kind == "data"
    assert ATTACKS["model_replacement"] is ModelReplacement and ModelReplacement.kind == "model"
    assert make_attack("backdoor").name == "backdoor"


def test_config_validation() -> None:
    cfg = build_config(flat={"attack": "backdoor", "attack_params": {"target": 3}})
    assert cfg.attack.attack == "backdoor" and cfg.attack.attack_params == {"target": 3}
    build_config(flat={"attack": "model_replacement", "attack_params": {"boost": 5}})
    with pytest.raises(ConfigError, match=r"^attack\.attack_params: .*'poison_fraction'"):
        build_config(flat={"attack": "backdoor", "attack_params": {"poison_fraction": 0}})
    with pytest.raises(ConfigError, match=r"^attack\.attack_params: .*'boost'"):
        build_config(flat={"attack": "model_replacement", "attack_params": {"boost": -1}})


def test_training_with_full_backdoor_equals_training_on_stamped_target_data() -> None:
    torch.manual_seed(0)
    x = torch.randn(30, 1, 8, 8)
    y = torch.randint(0, 3, (30,))
    model = ModelSpec("logreg", (1, 8, 8), 3).build(seed=0)
    lay = FlatLayout(model)
    g = lay.flatten(model)
    idx = [np.arange(0, 15), np.arange(15, 30)]
    atk = make_attack("backdoor", target=1, poison_fraction=1.0)
    spec = LocalSpec(0.1, 5, data_attack=atk, num_classes=3)
    out = train_clients(model, lay, g, x, y, idx, [2, 2], [11, 12], spec, poisoned=[True, False])
    # with poison_fraction 1 every sample is stamped and labelled target, whatever the batching
    ref = train_clients(
        model, lay, g, atk.stamp(x), torch.full_like(y, 1), idx[:1], [2], [11], LocalSpec(0.1, 5)
    )
    hon = train_clients(model, lay, g, x, y, idx[1:], [2], [12], LocalSpec(0.1, 5))
    torch.testing.assert_close(out.updates[0], ref.updates[0], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out.updates[1], hon.updates[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["backdoor", "model_replacement"])
def test_simulation_runs(make_config: Callable[..., Config], name: str) -> None:
    cfg = make_config(
        num_clients=6,
        clients_per_round=3,
        rounds=2,
        attack=name,
        attack_fraction=0.5,
        attack_params={"target": 1},
    )
    recs = run_records(cfg)
    assert len(recs) == 2
