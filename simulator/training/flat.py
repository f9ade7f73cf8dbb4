"""The flat model: one vector for a model's float state, and evaluating such vectors."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class FlatLayout:
    """Maps a model's float state (parameters, then float buffers) to one flat vector.

    The flat vector is the unit the whole engine passes around: the global model, and each
    client's update as one row of the ``[K, P]`` update batch.
    """

    def __init__(self, model: nn.Module) -> None:
        self.param_names = [n for n, _ in model.named_parameters()]
        self.buffer_names = [n for n, b in model.named_buffers() if b.is_floating_point()]
        self.int_buffers = {
            n: b.clone() for n, b in model.named_buffers() if not b.is_floating_point()
        }
        state = dict(model.named_parameters()) | dict(model.named_buffers())
        self.names = self.param_names + self.buffer_names
        self.shapes = [tuple(state[n].shape) for n in self.names]
        self.numels = [int(np.prod(s)) if s else 1 for s in self.shapes]
        self.num_params = sum(self.numels[: len(self.param_names)])
        self.size = sum(self.numels)
        #: the input shape and classes of the data the model takes (set by
        #: :meth:`~simulator.training.models.ModelSpec.build`; ``()`` and 0 for other modules)
        self.input_shape: tuple[int, ...] = tuple(getattr(model, "input_shape", ()))
        self.num_classes = int(getattr(model, "num_classes", 0))

    @property
    def slices(self) -> dict[str, slice]:
        """Where each named tensor lies in the flat vector."""
        ends = np.cumsum(self.numels).tolist()
        return {n: slice(e - k, e) for n, k, e in zip(self.names, self.numels, ends, strict=True)}

    def flatten(self, model: nn.Module) -> torch.Tensor:
        state = dict(model.named_parameters()) | dict(model.named_buffers())
        return torch.cat([state[n].detach().reshape(-1).float() for n in self.names])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Split ``[..., P]`` into named tensors of shape ``[..., *shape]`` (views)."""
        lead = flat.shape[:-1]
        parts = torch.split(flat, self.numels, dim=-1)
        return {
            n: p.reshape(*lead, *s) for n, p, s in zip(self.names, parts, self.shapes, strict=True)
        }

    def load(self, model: nn.Module, flat: torch.Tensor) -> nn.Module:
        """Copy a flat vector into a module in place."""
        tensors = self.unflatten(flat)
        with torch.no_grad():
            for n, t in (dict(model.named_parameters()) | dict(model.named_buffers())).items():
                if n in tensors:
                    t.copy_(tensors[n])
        return model


@torch.no_grad()
def evaluate(
    model: nn.Module,
    layout: FlatLayout,
    flat: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    batch: int = 2048,
) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of the model ``flat`` on ``(x, y)``."""
    layout.load(model, flat)
    model.eval()
    correct, loss_sum = 0, 0.0
    for i in range(0, len(y), batch):
        out = model(x[i : i + batch])
        loss_sum += float(F.cross_entropy(out, y[i : i + batch], reduction="sum"))
        correct += int((out.argmax(1) == y[i : i + batch]).sum())
    n = max(len(y), 1)
    return correct / n, loss_sum / n


@torch.no_grad()
def score_models(
    model: nn.Module, layout: FlatLayout, models: torch.Tensor, x: torch.Tensor, y: torch.Tensor
) -> dict[str, np.ndarray]:
    """Accuracy, mean cross-entropy and mean softmax entropy of each row of ``models`` on
    ``(x, y)`` (Sageflow's entropy filter and Siren's root-set screening read these)."""
    acc, loss, ent = [], [], []
    for row in models:
        layout.load(model, row)
        model.eval()
        out = model(x)
        logp = F.log_softmax(out, dim=1)
        acc.append(float((out.argmax(1) == y).float().mean()))
        loss.append(float(F.nll_loss(logp, y)))
        ent.append(float(-(logp.exp() * logp).sum(1).mean()))
    return {"accuracy": np.array(acc), "loss": np.array(loss), "entropy": np.array(ent)}
