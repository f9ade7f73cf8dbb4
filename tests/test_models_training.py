"""Tests for simulator.training.models and simulator.training.stacked (schedule, vmap vs
sequential, SGD)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from simulator.algorithms import make_algorithm
from simulator.algorithms.fedprox import proximal_term
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.config.sections import build_config
from simulator.training.flat import FlatLayout, evaluate
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec, make_schedule
from simulator.training.stacked import train_clients

# ---------------------------------------------------------------------------------- models


@pytest.mark.parametrize(
    "name, shape, norm, feat_dim",
    [
        ("logreg", (1, 8, 8), "none", 64),
        ("logreg", (60,), "none", 60),
        ("mlp", (1, 8, 8), "none", 16),
        ("mlp", (1, 8, 8), "batch", 16),
        ("mlp", (60,), "none", 16),
        ("mlp", (1, 28, 28), "batch", 16),
        ("cnn", (1, 8, 8), "none", 16),
        ("cnn", (1, 8, 8), "batch", 16),
        ("cnn", (1, 28, 28), "none", 16),
        ("cnn", (1, 28, 28), "batch", 16),
        ("cnn", (3, 32, 32), "batch", 16),
    ],
)
def test_forward_shapes_and_split(
    name: str, shape: tuple[int, ...], norm: str, feat_dim: int
) -> None:
    model = ModelSpec(name, shape, 10, hidden=16, norm=norm).build(seed=0)
    x = torch.rand(5, *shape)
    model.eval()
    out = model(x)
    assert out.shape == (5, 10)
    h = model.features(x)
    assert h.shape == (5, feat_dim)
    torch.testing.assert_close(model.classifier(h), out, rtol=0, atol=0)
    has_bn = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert has_bn == (norm == "batch" and name != "logreg")


@pytest.mark.parametrize(
    "name, shape, norm, params, size",
    [
        # 64*10 + 10
        ("logreg", (1, 8, 8), "none", 650, 650),
        # (64*16+16) + (16*16+16) + (16*10+10)
        ("mlp", (1, 8, 8), "none", 1482, 1482),
        # + 2 BatchNorm1d(16): 32 affine params each; running mean/var are 32 float buffers each
        ("mlp", (1, 8, 8), "batch", 1546, 1610),
        # conv 1->16 3x3 (160) + conv 16->32 3x3 (4640) + fc 512->16 (8208) + head 16->10 (170)
        ("cnn", (1, 8, 8), "none", 13178, 13178),
        # conv 1->16 5x5 (416) + conv 16->32 5x5 (12832) + fc 1568->16 (25104) + head (170)
        ("cnn", (1, 28, 28), "none", 38522, 38522),
    ],
)
def test_parameter_counts(
    name: str, shape: tuple[int, ...], norm: str, params: int, size: int
) -> None:
    layout = FlatLayout(ModelSpec(name, shape, 10, hidden=16, norm=norm).build(seed=0))
    assert layout.num_params == params
    assert layout.size == size


def test_cnn_needs_image_input() -> None:
    with pytest.raises(ValueError, match="needs image input"):
        ModelSpec("cnn", (60,), 10).build()
    with pytest.raises(ValueError, match="smaller than 8x8"):
        ModelSpec("cnn", (1, 4, 4), 10).build()
    with pytest.raises(ValueError, match=r"valid: \['cnn', 'logreg', 'mlp', 'mlp1'\]"):
        ModelSpec("resnet", (1, 8, 8), 10).build()


def test_cnn_on_tabular_dataset_is_config_error() -> None:
    from simulator.run.federation import build_federation

    cfg = build_config(
        flat={
            "dataset": "synthetic",
            "model": "cnn",
            "num_clients": 5,
            "clients_per_round": 5,
            "partition": "iid",
        }
    )
    with pytest.raises(ConfigError, match="model.model: 'cnn' needs image data"):
        build_federation(cfg)


def test_build_seed_is_deterministic_and_isolated() -> None:
    spec = ModelSpec("cnn", (1, 8, 8), 10, hidden=16, norm="batch")
    state = torch.get_rng_state()
    a, b, c = spec.build(seed=3), spec.build(seed=3), spec.build(seed=4)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is not consumed
    la = FlatLayout(a)
    assert torch.equal(la.flatten(a), la.flatten(b))
    assert not torch.equal(la.flatten(a), la.flatten(c))


# ------------------------------------------------------------------------------- FlatLayout


def test_flat_layout_roundtrip() -> None:
    spec = ModelSpec("mlp", (1, 8, 8), 10, hidden=16, norm="batch")
    a, b = spec.build(seed=0), spec.build(seed=1)
    layout = FlatLayout(a)
    assert layout.names[: len(layout.param_names)] == layout.param_names
    assert all(n.endswith(("running_mean", "running_var")) for n in layout.buffer_names)
    assert set(layout.int_buffers) == {"body.2.num_batches_tracked", "body.5.num_batches_tracked"}
    with torch.no_grad():
        for buf in a.buffers():
            if buf.is_floating_point():
                buf.add_(torch.rand_like(buf))
    fa = layout.flatten(a)
    assert fa.shape == (1610,) and fa.dtype == torch.float32
    layout.load(b, fa)
    assert torch.equal(layout.flatten(b), fa)
    a.eval()
    b.eval()
    x = torch.rand(3, 1, 8, 8)
    torch.testing.assert_close(a(x), b(x), rtol=0, atol=0)
    stacked = torch.stack([fa, 2 * fa])
    parts = layout.unflatten(stacked)
    assert parts["body.1.weight"].shape == (2, 16, 64)
    assert torch.equal(parts["head.bias"][1], 2 * dict(a.named_parameters())["head.bias"])
    assert torch.equal(torch.cat([parts[n].reshape(2, -1) for n in layout.names], 1), stacked)


# --------------------------------------------------------------------------------- schedule


def test_make_schedule_exact_steps() -> None:
    idx, mask = make_schedule([5, 12, 20], [1, 2, 1], [0, 1, 2], batch_size=10)
    assert idx.shape == mask.shape == (3, 4, 10)
    steps = (mask.sum(axis=2) > 0).sum(axis=1)
    assert steps.tolist() == [1, 4, 2]
    assert mask.sum(axis=(1, 2)).tolist() == [5.0, 24.0, 20.0]
    assert mask[1].sum(axis=1).tolist() == [10.0, 2.0, 10.0, 2.0]
    assert mask[0].sum(axis=1).tolist() == [5.0, 0.0, 0.0, 0.0]
    # every epoch visits each local sample exactly once
    for k, n, e, nb in ((0, 5, 1, 1), (1, 12, 2, 2), (2, 20, 1, 2)):
        for ep in range(e):
            blk = slice(ep * nb, (ep + 1) * nb)
            seen = idx[k, blk][mask[k, blk] > 0]
            assert sorted(seen.tolist()) == list(range(n))
    again = make_schedule([5, 12, 20], [1, 2, 1], [0, 1, 2], batch_size=10)
    assert np.array_equal(again[0], idx) and np.array_equal(again[1], mask)
    other = make_schedule([5, 12, 20], [1, 2, 1], [9, 1, 2], batch_size=10)
    assert np.array_equal(other[0][1:], idx[1:]) and not np.array_equal(other[0][0], idx[0])


def test_make_schedule_zero_epochs_and_exact_multiple() -> None:
    idx, mask = make_schedule([7, 20], [0, 3], [0, 1], batch_size=10)
    assert mask.shape == (2, 6, 10)
    assert mask[0].sum() == 0
    assert mask[1].sum(axis=1).tolist() == [10.0] * 6
    _, m0 = make_schedule([7], [0], [0], batch_size=10)
    assert m0.shape == (1, 1, 10) and m0.sum() == 0


# --------------------------------------------------------------------------------- training


def _setup(
    name: str, norm: str, n: int = 60, seed: int = 0
) -> tuple[torch.nn.Module, FlatLayout, torch.Tensor, torch.Tensor, torch.Tensor]:
    model = ModelSpec(name, (1, 8, 8), 10, hidden=16, norm=norm).build(seed=seed)
    layout = FlatLayout(model)
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 8, 8, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    return model, layout, layout.flatten(model), x, y


def prox(mu: float) -> object:
    """FedProx's client step with coefficient ``mu`` (the algorithm object)."""
    return make_algorithm(AlgorithmConfig(algorithm="fedprox", algorithm_params={"mu": mu}))


PROX = prox(0.5)


@pytest.mark.parametrize(
    "name, norm, reg, wd",
    [
        ("logreg", "none", None, 0.0),
        ("mlp", "none", None, 0.0),
        ("mlp", "none", PROX, 0.01),
        ("mlp", "batch", None, 0.0),
        ("cnn", "batch", None, 0.0),
        ("cnn", "batch", PROX, 0.0),
    ],
)
def test_vectorized_equals_sequential(name: str, norm: str, reg: object, wd: float) -> None:
    model, layout, g, x, y = _setup(name, norm)
    # different sizes, different epochs (FedProx partial work), one client doing no work
    idx = [np.arange(0, 5), np.arange(5, 17), np.arange(17, 37), np.arange(37, 45)]
    epochs, seeds = [1, 2, 1, 0], [11, 12, 13, 14]
    spec = LocalSpec(lr=0.1, batch_size=10, weight_decay=wd, step=reg)
    vec = train_clients(model, layout, g, x, y, idx, epochs, seeds, spec, vectorize=True)
    seq = train_clients(model, layout, g, x, y, idx, epochs, seeds, spec, vectorize=False)
    assert vec.updates.shape == seq.updates.shape == (4, layout.size)
    torch.testing.assert_close(vec.updates, seq.updates, rtol=0, atol=1e-5)
    np.testing.assert_allclose(vec.losses, seq.losses, rtol=0, atol=1e-5)
    assert vec.steps.tolist() == seq.steps.tolist() == [1, 4, 2, 0]
    assert torch.count_nonzero(vec.updates[3]) == 0 and vec.losses[3] == 0.0
    assert torch.count_nonzero(seq.updates[3]) == 0
    assert torch.count_nonzero(vec.updates[:3].abs().sum(1)) == 3


@pytest.mark.parametrize("norm", ["none", "batch"])
def test_masked_steps_leave_client_unchanged(norm: str) -> None:
    """A client whose schedule ended early gets the same update as when trained alone."""
    model, layout, g, x, y = _setup("mlp", norm)
    spec = LocalSpec(lr=0.1, batch_size=10)
    idx = [np.arange(0, 5), np.arange(5, 25)]
    both = train_clients(model, layout, g, x, y, idx, [1, 3], [1, 2], spec, vectorize=True)
    alone = train_clients(model, layout, g, x, y, idx[:1], [1], [1], spec, vectorize=True)
    assert both.steps.tolist() == [1, 6]
    torch.testing.assert_close(both.updates[0], alone.updates[0], rtol=0, atol=1e-6)
    np.testing.assert_allclose(both.losses[0], alone.losses[0], rtol=0, atol=1e-6)


def test_one_sgd_step_by_hand() -> None:
    """logreg on 2x2 inputs, 3 classes, W = 0, b = 0, one sample (x, y=1), lr = 0.5.

    p = softmax(0) = (1/3, 1/3, 1/3); dL/dz = p - e_1 = (1/3, -2/3, 1/3);
    dW = dz x^T, db = dz; update = -lr * grad.  The loss is ln 3.  The batch (B=4) holds the
    sample plus 3 masked padding rows, which must not count.
    """
    model = ModelSpec("logreg", (1, 2, 2), 3).build(seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    layout = FlatLayout(model)
    g = layout.flatten(model)
    assert layout.names == ["head.weight", "head.bias"]
    x = torch.tensor([[[[1.0, 2.0], [0.0, -1.0]]]])
    y = torch.tensor([1])
    out = train_clients(
        model,
        layout,
        g,
        x,
        y,
        [np.array([0])],
        [1],
        [0],
        LocalSpec(lr=0.5, batch_size=4),
        vectorize=True,
    )
    dz = np.array([1 / 3, -2 / 3, 1 / 3])
    xv = np.array([1.0, 2.0, 0.0, -1.0])
    expected = np.concatenate([(-0.5 * np.outer(dz, xv)).ravel(), -0.5 * dz])
    np.testing.assert_allclose(out.updates[0].numpy(), expected, rtol=0, atol=1e-6)
    # e.g. the first weight row: -0.5 * (1/3) * x = (-1/6, -1/3, 0, 1/6)
    np.testing.assert_allclose(out.updates[0, :4].numpy(), [-1 / 6, -1 / 3, 0, 1 / 6], atol=1e-6)
    assert out.losses[0] == pytest.approx(math.log(3), abs=1e-6)
    assert out.steps.tolist() == [1]


def test_weight_decay_and_proximal_term_by_hand() -> None:
    """W = 0 except b = (1, 0, 0); x = 0 so dL/dz = softmax(b) - e_0 only moves b.

    Step 1 (params == global): grad_b = softmax(b) - e_0 + wd * b.  The proximal term
    (mu/2)||w - w_g||^2 has zero gradient at w = w_g, so FedProx's first step equals FedAvg's.
    """
    model = ModelSpec("logreg", (1, 2, 2), 3).build(seed=0)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([1.0, 0.0, 0.0]))
    layout = FlatLayout(model)
    g = layout.flatten(model)
    x, y = torch.zeros(1, 1, 2, 2), torch.tensor([0])
    b = np.array([1.0, 0.0, 0.0])
    p = np.exp(b) / np.exp(b).sum()
    grad = p - np.array([1.0, 0.0, 0.0]) + 0.1 * b
    for reg in (None, prox(3.0)):
        out = train_clients(
            model,
            layout,
            g,
            x,
            y,
            [np.array([0])],
            [1],
            [0],
            LocalSpec(lr=0.5, batch_size=1, weight_decay=0.1, step=reg),
            vectorize=False,
        )
        np.testing.assert_allclose(out.updates[0, 12:].numpy(), -0.5 * grad, atol=1e-6)
        assert torch.count_nonzero(out.updates[0, :12]) == 0
    # proximal term itself: (mu / 2) * ||w - w_g||^2 = 0.25 * (1 + 4) = 1.25
    val = proximal_term(torch.tensor([1.0, 2.0]), torch.zeros(2), mu=0.5)
    assert float(val) == 1.25


def _reference_sgd(
    name: str, norm: str, n: int, epochs: int, bs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain PyTorch SGD over the same schedule (variable-size last batch) vs train_clients."""
    model, layout, g, x, y = _setup(name, norm, n=n)
    out = train_clients(
        model,
        layout,
        g,
        x,
        y,
        [np.arange(n)],
        [epochs],
        [7],
        LocalSpec(lr=0.1, batch_size=bs),
        vectorize=True,
    )
    idx, mask = make_schedule([n], [epochs], [7], bs)
    ref = ModelSpec(name, (1, 8, 8), 10, hidden=16, norm=norm).build(seed=0)
    ref.train()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for s in range(idx.shape[1]):
        rows = idx[0, s][mask[0, s] > 0]
        opt.zero_grad()
        F.cross_entropy(ref(x[rows]), y[rows]).backward()
        opt.step()
    return out.updates[0], layout.flatten(ref) - g


def test_matches_plain_pytorch_sgd() -> None:
    got, want = _reference_sgd("mlp", "none", n=12, epochs=2, bs=10)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name, n, epochs", [("mlp", 12, 1), ("mlp", 23, 2), ("cnn", 13, 1)])
def test_matches_plain_pytorch_sgd_batchnorm(name: str, n: int, epochs: int) -> None:
    """BatchNorm under padding: a partial last batch is padded to B rows for the stacked
    computation; the padded rows are masked out of BatchNorm's batch statistics and running
    stats, so training equals plain PyTorch on the shorter batch (parameters and buffers)."""
    got, want = _reference_sgd(name, "batch", n=n, epochs=epochs, bs=10)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_evaluate_by_hand() -> None:
    """All-zero logreg: equal logits, argmax picks class 0, loss is ln(num_classes)."""
    model = ModelSpec("logreg", (1, 2, 2), 4).build(seed=0)
    layout = FlatLayout(model)
    zero = torch.zeros(layout.size)
    y = torch.tensor([0, 1, 0, 3, 2, 0, 1, 1])
    acc, loss = evaluate(model, layout, zero, torch.rand(8, 1, 2, 2), y, batch=3)
    assert acc == 3 / 8
    assert loss == pytest.approx(math.log(4), abs=1e-6)
