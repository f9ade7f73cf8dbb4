"""The MLP FedMA matches: its Linear layers in the flat layout (:class:`Net`), the width cap
(:func:`widen`), and the per-client tensor code of FedMA's starts (vmap-safe): which neurons
are active, a client's own initialisation, and a client's next layer put in the global order.

A hidden neuron ``i`` of layer ``n`` is *active* when its incoming weights, its bias or its
outgoing weights (column ``i`` of layer ``n + 1``) hold a non-zero entry. An inactive one is
exactly zero both ways, so under ReLU its activation is 0, every gradient it sees is 0 (ReLU's
derivative at 0 is 0 in torch) and weight decay and momentum keep it at 0: it stays inactive
through any local training. The model is built ``growth`` times wider than ``--hidden`` with
the extra neurons inactive, so the global layer can grow without changing the flat layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from simulator.algorithms.fedma_match import label_weights
from simulator.config.fields import ConfigError

#: modules an MLP's body may hold
MLP_MODULES = (nn.Flatten, nn.Linear, nn.ReLU, nn.Identity)


@dataclass(frozen=True)
class Net:
    """The model's Linear layers as ``(weight name, bias name, out, in)`` in layout order
    (the last one the classifier) and where each tensor lies in the flat vector."""

    layers: tuple[tuple[str, str, int, int], ...]
    slices: dict[str, slice]

    @classmethod
    def of(cls, slices: dict[str, slice]) -> Net:
        """The layers of a flat layout's ``slices`` (each module a ``weight`` and a ``bias``)."""
        names = list(slices)
        layers = []
        for i in range(0, len(names), 2):
            w, b = names[i], names[i + 1] if i + 1 < len(names) else ""
            mod = w.rpartition(".")[0]
            if w != mod + ".weight" or b != mod + ".bias":
                raise ConfigError(
                    f"algorithm fedma: the model must be Linear layers (weight, bias); got "
                    f"{names[i : i + 2]}"
                )
            out = slices[b].stop - slices[b].start
            layers.append((w, b, out, (slices[w].stop - slices[w].start) // out))
        return cls(tuple(layers), dict(slices))

    @classmethod
    def of_parts(cls, parts: dict[str, torch.Tensor]) -> Net:
        """The layers of named tensors in layout order (``Start.split`` of a flat vector)."""
        out, at = {}, 0
        for name, t in parts.items():
            out[name] = slice(at, at + t.numel())
            at += t.numel()
        return cls.of(out)

    @property
    def hidden(self) -> list[int]:
        """The widths (caps) of the hidden layers."""
        return [layer[2] for layer in self.layers[:-1]]

    def weight(self, flat: np.ndarray, n: int) -> np.ndarray:
        """``[out, in]`` layer ``n``'s weight in ``flat`` (a view)."""
        w, _, out, inp = self.layers[n]
        return flat[self.slices[w]].reshape(out, inp)

    def bias(self, flat: np.ndarray, n: int) -> np.ndarray:
        """``[out]`` layer ``n``'s bias in ``flat`` (a view)."""
        return flat[self.slices[self.layers[n][1]]]

    def span(self, first: int) -> slice:
        """The flat entries of layers ``first`` and above."""
        return slice(self.slices[self.layers[first][0]].start, self.slices[self.layers[-1][1]].stop)


def active_rows(w: np.ndarray, b: np.ndarray, nxt: np.ndarray) -> np.ndarray:
    """Indices of the active neurons of a layer (``w`` ``[out, in]``, ``b`` ``[out]``, the next
    layer's weight ``nxt`` ``[out', out]``)."""
    return np.flatnonzero((w != 0).any(1) | (b != 0) | (nxt != 0).any(0))


def widen(model: nn.Module, growth: float) -> nn.Module:
    """The MLP with each hidden layer ``ceil(width * growth)`` wide, the added neurons inactive
    (zero in and out); the existing weights keep their values (no random draw). Refuses any
    other model in one line."""
    body, head = getattr(model, "body", None), getattr(model, "head", None)
    mods = list(body) if isinstance(body, nn.Sequential) else [body]
    bad = [type(m).__name__ for m in [*mods, head] if not isinstance(m, MLP_MODULES)]
    lins = [m for m in mods if isinstance(m, nn.Linear)]
    relus = sum(isinstance(m, nn.ReLU) for m in mods)
    if bad or not isinstance(head, nn.Linear) or len(lins) != relus:
        raise ConfigError(
            "algorithm fedma: matches the neurons of an MLP (model 'mlp' or 'mlp1', norm "
            f"'none'); got a model with {bad or ['a hidden layer without ReLU']}"
        )
    if not lins:
        raise ConfigError("algorithm fedma: the model has no hidden layer to match")
    chain = [*lins, head]
    caps = [math.ceil(m.out_features * growth) for m in lins] + [head.out_features]
    with torch.no_grad():
        for k, m in enumerate(chain):
            inp = m.in_features if k == 0 else caps[k - 1]
            w = torch.zeros(caps[k], inp)
            w[: m.out_features, : m.in_features] = m.weight
            b = torch.zeros(caps[k])
            b[: m.out_features] = m.bias
            m.weight, m.bias = nn.Parameter(w), nn.Parameter(b)
            m.in_features, m.out_features = inp, caps[k]
    return model


def to_global(w: np.ndarray, active: np.ndarray, assign: np.ndarray, cap: int) -> np.ndarray:
    """``[out, cap]``: a client's next-layer weight ``w`` with the column of its neuron
    ``active[l]`` moved to global slot ``assign[l]`` (the other columns zero)."""
    out = np.zeros((w.shape[0], cap))
    out[:, assign] = w[:, active]
    return out


def label_weighted(
    net: Net, new: np.ndarray, weights: list[np.ndarray], biases: list[np.ndarray], counts
) -> None:
    """Write the classifier of ``new``: ``W[k] = sum_j p_jk W_j[k]``, ``b[k] = sum_j p_jk
    b_j[k]`` (``p``: :func:`~simulator.algorithms.fedma_match.label_weights` of the clients'
    class ``counts`` ``[J, C]``; their weights with the inputs in the global order)."""
    p = label_weights(counts)
    last = len(net.layers) - 1
    net.weight(new, last)[:] = np.einsum("jk,jki->ki", p, np.stack(weights))
    net.bias(new, last)[:] = (p * np.stack(biases)).sum(0)


# -- per client, vmap-safe --------------------------------------------------------------------
def activity(parts: dict[str, torch.Tensor], net: Net, n: int) -> torch.Tensor:
    """``[out]`` 1.0 where hidden layer ``n``'s neuron is active in ``parts``, else 0.0."""
    w, b = parts[net.layers[n][0]], parts[net.layers[n][1]]
    nxt = parts[net.layers[n + 1][0]]
    on = (w != 0).any(-1) | (b != 0) | (nxt != 0).any(-2)
    return on.to(w.dtype)


def own_init(flat: torch.Tensor, noise: torch.Tensor, split, net: Net) -> torch.Tensor:
    """A client's own initialisation of the neurons active in ``flat`` (``[P]``), from its
    draws ``noise`` (``[P]`` standard normals): torch's default for a Linear layer, weight and
    bias ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with ``fan_in`` the active inputs, the uniform
    being ``erf(z / sqrt(2))`` of a normal ``z``; inactive neurons stay exactly zero."""
    parts, draws = split(flat), split(torch.special.erf(noise * (0.5**0.5)))
    out: dict[str, torch.Tensor] = {}
    on_in = torch.ones(net.layers[0][3], dtype=flat.dtype, device=flat.device)
    for n, (w, b, _, _) in enumerate(net.layers):
        last = n == len(net.layers) - 1
        on = torch.ones_like(parts[b]) if last else activity(parts, net, n)
        scale = on_in.sum().rsqrt()
        out[w] = draws[w] * scale * on.unsqueeze(-1) * on_in
        out[b] = draws[b] * scale * on
        on_in = on
    return torch.cat([out[k].reshape(-1) for k in parts])


def permute_inputs(flat: torch.Tensor, perm: torch.Tensor, split, net: Net) -> torch.Tensor:
    """``flat`` with the columns of each layer above a hidden layer gathered by that layer's
    block of ``perm`` (global slot ``i`` takes the client's column ``perm[i]``; the blocks
    follow the hidden layers, each as wide as its layer; an identity block changes nothing)."""
    parts = dict(split(flat))
    at = 0
    for n, width in enumerate(net.hidden):
        name = net.layers[n + 1][0]
        w = parts[name]
        idx = perm[at : at + width].long()
        parts[name] = torch.gather(w, -1, idx.unsqueeze(-2).expand(*w.shape[:-1], width))
        at += width
    return torch.cat([t.reshape(-1) for t in parts.values()])
