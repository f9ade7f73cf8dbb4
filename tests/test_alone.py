"""A client alone in its chunk computes the bits it computes beside others.

The placement's chunks follow the number of actors, and a chunk of one trains unmapped (~4x
faster for small models), so a client's bits must not depend on the clients trained beside it:
its convolutions (``ChunkConv2d``), linear layers (``ChunkLinear``, ``chunk_linear``), the global
model it is given (mapped per client) and FedALA's head step. Checked by hand and on four
clients trained as one chunk, alone (mapped and unmapped) and in smaller chunks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pytest
import torch

from simulator.algorithms import make_algorithm
from simulator.config.learning import AlgorithmConfig
from simulator.training.flat import FlatLayout
from simulator.training.lanes import ALONE, ChunkConv2d, alone, chunk_linear, plain_is_grouped
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from tests.chunk_helper import train_some


def test_chunk_conv_alone_by_hand() -> None:
    """A 3x3 all-ones kernel (bias 0.5) over a 3x3 image of ones, zero padding: 4.5 at the
    corners, 6.5 at the edges, 9.5 at the centre, alone (beside a zero twin) as in a chunk;
    the weight's gradient of the sum is the count of products each tap takes part in (4 at
    the corners, 6 at the edges, 9 at the centre) and the bias's 9, alone too."""
    conv = ChunkConv2d(1, 1, 3, padding=1)
    with torch.no_grad():
        conv.weight.fill_(1.0)
        conv.bias.fill_(0.5)
    x = torch.ones(1, 1, 3, 3)
    want = [[4.5, 6.5, 4.5], [6.5, 9.5, 6.5], [4.5, 6.5, 4.5]]
    assert conv(x)[0, 0].tolist() == want
    with alone():
        assert ALONE.get()
        y = conv(x)
        assert y.shape == (1, 1, 3, 3) and y[0, 0].tolist() == want
        y.sum().backward()
    assert not ALONE.get()
    assert conv.weight.grad[0, 0].tolist() == [[4.0, 6.0, 4.0], [6.0, 9.0, 6.0], [4.0, 6.0, 4.0]]
    assert conv.bias.grad.tolist() == [9.0]


def test_chunk_linear_alone_by_hand() -> None:
    """x = [[1, 2], [3, 4]], w = [[1, 0], [0, 1], [1, 1]], b = [0.5, 0, -1]: x w^T + b =
    [[1.5, 2, 2], [3.5, 4, 6]], alone (a batch of one product) as in a chunk, and for rows with
    a leading batch dimension; the weight's gradient of the sum is the column sums of x, [4, 6]
    in each row, the bias's the row count, 2."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], requires_grad=True)
    b = torch.tensor([0.5, 0.0, -1.0], requires_grad=True)
    want = [[1.5, 2.0, 2.0], [3.5, 4.0, 6.0]]
    assert chunk_linear(x, w, b).tolist() == want
    with alone():
        out = chunk_linear(x, w, b)
        assert out.tolist() == want
        assert chunk_linear(x[None], w, b).tolist() == [want]
        out.sum().backward()
    assert w.grad.tolist() == [[4.0, 6.0]] * 3
    assert b.grad.tolist() == [2.0, 2.0, 2.0]


def alone_and_in_a_chunk(
    name: str,
    params: dict,
    model_name: str,
    shape: tuple,
    batch: int,
    state_of: Callable[[torch.Tensor, int], dict] | None = None,
    groups: tuple[list[int], ...] = (),
    norm: str = "none",
) -> None:
    """Four clients of ``name`` trained as one chunk, each alone (mapped as a chunk of one,
    first, so that the kernel check runs inside vmap, then unmapped, as the actors train a lone
    client) and in ``groups``: the same updates, losses and outputs, bit for bit."""
    a = make_algorithm(AlgorithmConfig(algorithm=name, algorithm_params=params))
    model = ModelSpec(model_name, shape, 10, hidden=16, norm=norm, extension=a).build(seed=0)
    layout = FlatLayout(model)
    g = layout.flatten(model)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(160, *shape, generator=gen)
    y = torch.randint(0, 10, (160,), generator=gen)
    idx = [np.arange(40 * i, 40 * i + 13 + 5 * i) for i in range(4)]
    spec = LocalSpec(lr=0.1, batch_size=batch, step=a)
    state = state_of(g[: layout.num_params], layout.num_params) if state_of else None
    train = functools.partial(train_some, model, layout, g, x, y, idx, spec, state=state)

    whole = train([0, 1, 2, 3])
    plain_is_grouped.cache_clear()
    for vectorize in (True, False):
        parts = [train([i], vectorize) for i in range(4)]
        assert torch.equal(torch.cat([p[0] for p in parts]), whole[0])
        assert np.array_equal(np.concatenate([p[1] for p in parts]), whole[1])
    for group in groups:
        assert torch.equal(train(group)[0], whole[0][group])


@pytest.mark.parametrize(
    "model_name, shape, batch",
    [("cnn", (1, 8, 8), 10), ("cnn", (1, 28, 28), 10), ("mlp", (1, 28, 28), 24)],
    ids=["cnn-8x8", "cnn-28x28", "mlp-784-batch24"],
)
def test_client_alone_the_same_bits_as_in_a_chunk(
    model_name: str, shape: tuple, batch: int, one_thread: object
) -> None:
    """FedAvg: four clients as one chunk and each alone give the same bits. Alone, the CNN's
    one-channel first convolution took oneDNN's plain kernels, and a product of 24 rows by the
    MLP's 784x16 layer MKL's plain one; both rounded otherwise (up to 3e-8 after two epochs on
    this project's AVX-512 machine)."""
    alone_and_in_a_chunk("fedavg", {}, model_name, shape, batch)


def moon_state(g: torch.Tensor, n: int) -> dict:
    """Previous models for four clients, the second one's never trained."""
    gen = torch.Generator().manual_seed(1)
    trained = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    return {"prev": g + 0.1 * torch.randn(4, n, generator=gen), "trained": trained}


@pytest.mark.parametrize("norm", ["none", "batch"])
def test_moon_on_the_cnn_the_same_bits_alone_and_in_a_chunk(norm: str, one_thread: object) -> None:
    """MOON on the CNN (clients with previous models, with and without batch norm): alone and
    in a chunk, the same bits. The global model's forward was one product over every mapped
    client's rows, whose kernel follows the chunk's size (it is mapped per client now)."""
    params = {"mu": 5.0, "out_dim": 8}
    alone_and_in_a_chunk("moon", params, "cnn", (1, 8, 8), 10, moon_state, norm=norm)


def ala_state(g: torch.Tensor, n: int) -> dict:
    """FedALA's rows for four clients: phases 1, 2, 0 and 2, local models and weights."""
    gen = torch.Generator().manual_seed(1)
    return {
        "local": g + 0.05 * torch.randn(4, n, generator=gen),
        "ala_w": torch.rand(4, 170, generator=gen),
        "ala_phase": torch.tensor([[1.0], [2.0], [0.0], [2.0]]),
    }


def test_fedala_the_same_bits_alone_and_in_any_chunk(one_thread: object) -> None:
    """FedALA (MLP on 28x28 inputs): alone, in the whole chunk and in a chunk of the two
    clients in their later phase, the same bits. That chunk learns W for one epoch, the whole
    one for ``cap``; the loss was then tracked in one and not the other, and the head's
    probabilities came from ``softmax`` in one and from ``exp(log_softmax)`` in the other."""
    alone_and_in_a_chunk("fedala", {}, "mlp", (1, 28, 28), 10, ala_state, ([1, 3], [0, 2]))
