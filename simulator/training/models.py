"""Models with a feature-extractor / classifier split.

Every model exposes ``features(x) -> h`` and ``classifier(h) -> logits`` so that
representation-based methods (MOON, FedFM) can read ``h``; ``forward`` is their composition.
Models are small on purpose: FedSentry trains many clients as one stacked computation.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from simulator.training.lanes import ChunkConv2d, ChunkLinear


class SplitModel(nn.Module):
    """A model made of a feature extractor and a linear classifier head."""

    def __init__(self, features: nn.Module, classifier: nn.Module) -> None:
        super().__init__()
        self.body = features
        self.head = classifier

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Representation ``h`` that MOON and FedFM compare across clients."""
        return self.body(x)

    def classifier(self, h: torch.Tensor) -> torch.Tensor:
        """Logits from a representation."""
        return self.head(h)

    def forward(
        self, x: torch.Tensor, with_features: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits, or ``(features, logits)`` with ``with_features`` (one pass, for MOON, FedFM)."""
        h = self.body(x)
        out = self.head(h)
        return (h, out) if with_features else out


#: which rows of the current training batch are real (1) or padding (0); set by the trainer
#: around each forward so that batch statistics skip the padded rows of a partial last batch
BATCH_MASK: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar(
    "fedsentry_batch_mask", default=None
)
#: one client's noise draws for the current training step (``[D]`` standard normals from its
#: own seeded stream, :attr:`~simulator.algorithms.base.Algorithm.noise_size`); layers an
#: algorithm inserted (FedFA's feature augmentation) read their slice; None outside training
STEP_NOISE: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar(
    "fedsentry_step_noise", default=None
)
#: the tensors the server sent this round (``Algorithm.sends``), for such layers
STEP_SHARED: contextvars.ContextVar[dict[str, torch.Tensor] | None] = contextvars.ContextVar(
    "fedsentry_step_shared", default=None
)


class MaskedBatchNorm:
    """BatchNorm whose training-mode batch statistics cover only the rows marked valid in
    :data:`BATCH_MASK` (without a mask, or in eval mode, it is ``nn.BatchNorm``).

    A client's partial last batch is padded to the batch size B so that many clients train as
    one stacked computation; plain BatchNorm would fold the padded rows into its mean and
    variance. Here mean and (biased) variance are weighted by the mask, and the running variance
    takes the unbiased estimate over the n valid rows (n / (n - 1), with n - 1 floored at 1 where
    PyTorch would refuse a single-row batch), so a padded step equals PyTorch on the shorter
    batch.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = BATCH_MASK.get()
        if not self.training or m is None:
            return super().forward(x)  # type: ignore[misc]
        shape = (-1,) + (1,) * (x.dim() - 1)
        w = m.to(x.dtype).reshape(shape)
        dims = [0] + list(range(2, x.dim()))
        # a batch that is all padding (a client whose schedule has ended) must stay finite: its
        # loss is masked out and the trainer restores its buffers
        n = torch.clamp(m.to(x.dtype).sum() * (x[0, 0].numel()), min=1.0)
        cshape = (1, -1) + (1,) * (x.dim() - 2)
        mean = (x * w).sum(dims) / n
        var = (((x - mean.reshape(cshape)) ** 2) * w).sum(dims) / n
        y = (x - mean.reshape(cshape)) / torch.sqrt(var.reshape(cshape) + self.eps)
        if self.affine:
            y = y * self.weight.reshape(cshape) + self.bias.reshape(cshape)
        if self.track_running_stats:
            mom = self.momentum if self.momentum is not None else 0.1
            unbiased = var.detach() * n / torch.clamp(n - 1, min=1.0)
            with torch.no_grad():
                self.running_mean.mul_(1 - mom).add_(mom * mean.detach())
                self.running_var.mul_(1 - mom).add_(mom * unbiased)
                self.num_batches_tracked.add_(1)
        return y


class MaskedBatchNorm1d(MaskedBatchNorm, nn.BatchNorm1d):
    """:class:`nn.BatchNorm1d` that skips padded rows (see :class:`MaskedBatchNorm`)."""


class MaskedBatchNorm2d(MaskedBatchNorm, nn.BatchNorm2d):
    """:class:`nn.BatchNorm2d` that skips padded rows (see :class:`MaskedBatchNorm`)."""


def _norm(kind: str, channels: int, dims: int) -> nn.Module:
    if kind == "none":
        return nn.Identity()
    if kind == "batch":
        return MaskedBatchNorm1d(channels) if dims == 1 else MaskedBatchNorm2d(channels)
    raise ValueError(f"model norm: unknown value {kind!r}; valid: ['batch', 'none']")


def logreg(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 0, norm: str = "none"
) -> SplitModel:
    """Multinomial logistic regression (the FedProx synthetic baseline)."""
    del hidden, norm
    return SplitModel(nn.Flatten(), ChunkLinear(math.prod(input_shape), num_classes))


def mlp(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 64, norm: str = "none"
) -> SplitModel:
    """Two-hidden-layer perceptron; ``norm='batch'`` adds BatchNorm after each hidden layer."""
    d = math.prod(input_shape)
    body = nn.Sequential(
        nn.Flatten(),
        ChunkLinear(d, hidden),
        _norm(norm, hidden, 1),
        nn.ReLU(),
        ChunkLinear(hidden, hidden),
        _norm(norm, hidden, 1),
        nn.ReLU(),
    )
    return SplitModel(body, ChunkLinear(hidden, num_classes))


def mlp1(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 64, norm: str = "none"
) -> SplitModel:
    """One-hidden-layer perceptron (784-100-10 in PFNM's and FedMA's one-shot MNIST runs)."""
    body = nn.Sequential(
        nn.Flatten(), ChunkLinear(math.prod(input_shape), hidden), _norm(norm, hidden, 1), nn.ReLU()
    )
    return SplitModel(body, ChunkLinear(hidden, num_classes))


def cnn(
    input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 64, norm: str = "none"
) -> SplitModel:
    """Small CNN for 28x28 (two conv+pool blocks) or 8x8 inputs (one block, padding kept).

    The layout follows the "CNN" of McMahan et al. (2017) scaled down: 5x5 (28x28) or 3x3 (8x8)
    convolutions, max pooling, one hidden fully connected layer as the representation.
    """
    if len(input_shape) != 3:
        raise ValueError(f"model cnn: needs image input (C, H, W); got input_shape {input_shape}")
    c, h, w = input_shape
    if min(h, w) >= 28:
        k, blocks, ch = 5, 2, (16, 32)
    elif min(h, w) >= 8:
        k, blocks, ch = 3, 1, (16, 32)
    else:
        raise ValueError(f"model cnn: input {h}x{w} is smaller than 8x8")
    layers: list[nn.Module] = []
    cin = c
    for b in range(blocks):
        layers += [
            ChunkConv2d(cin, ch[b], k, padding=k // 2),
            _norm(norm, ch[b], 2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        ]
        cin = ch[b]
    if blocks == 1:  # 8x8 -> 4x4 after one pool; add a second conv without pooling
        layers += [ChunkConv2d(cin, ch[1], k, padding=k // 2), _norm(norm, ch[1], 2), nn.ReLU()]
        cin = ch[1]
    side_h, side_w = h // 2**blocks, w // 2**blocks
    layers += [nn.Flatten(), ChunkLinear(cin * side_h * side_w, hidden), nn.ReLU()]
    return SplitModel(nn.Sequential(*layers), ChunkLinear(hidden, num_classes))


MODELS: dict[str, Callable[..., SplitModel]] = {
    "logreg": logreg,
    "mlp": mlp,
    "mlp1": mlp1,
    "cnn": cnn,
}


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to rebuild a model anywhere (actors receive this, not a module)."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    hidden: int = 64
    norm: str = "none"
    #: an object whose ``extend_model(model) -> model`` adds an algorithm's layers (MOON's
    #: projection head, FedFA's augmentation layers); an algorithm, picklable
    extension: Any = None

    def train_flops_per_sample(self) -> int:
        """FLOPs of one training sample (forward + backward), counted by torch."""
        from torch.utils.flop_counter import FlopCounterMode

        m = self.build(seed=0)
        with FlopCounterMode(display=False) as counter:
            m(torch.zeros(2, *self.input_shape)).sum().backward()
        return max(1, counter.get_total_flops() // 2)

    def build(self, seed: int | None = None) -> SplitModel:
        """Instantiate the model; with ``seed`` the initial weights are deterministic."""
        if self.name not in MODELS:
            raise ValueError(f"model name: unknown {self.name!r}; valid: {sorted(MODELS)}")
        if seed is not None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                return self._build()
        return self._build()

    def _build(self) -> SplitModel:
        m = MODELS[self.name](
            self.input_shape, self.num_classes, hidden=self.hidden, norm=self.norm
        )
        if self.extension is not None:
            m = self.extension.extend_model(m, self)
        # the data geometry the model takes, for what a layout of it sizes (condensed images)
        m.input_shape, m.num_classes = tuple(self.input_shape), int(self.num_classes)
        return m
