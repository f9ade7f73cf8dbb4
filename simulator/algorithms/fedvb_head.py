"""The multi-branch classifier of :mod:`simulator.algorithms.fedvb`: one binary (one-vs-rest)
branch per class on the model's representation, and where each branch lies in the flat model.

Every tensor of the head has the classes as its first dimension, so branch ``c`` is the ``c``-th
block of each of them in the flat layout (:func:`branch_blocks`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

#: the prefix of the head's tensors in the flat layout (the model's ``head`` attribute)
HEAD = "head."
#: the head's buffer of the branches a client holds (1) or lacks (0), kept on the client
ACTIVE = HEAD + "active"


class BranchHead(nn.Module):
    """``C`` binary branches on an ``H``-dimensional representation: ``[N, H] -> [N, C]``, the
    score (logit) of each branch.

    ``hidden == 0``: branch ``c`` is a logistic unit, ``s_c = w_c . h + b_c`` (``weight [C, H]``,
    ``bias [C]``). ``hidden > 0``: branch ``c`` is ``Linear(H, hidden) -> ReLU -> Linear(hidden,
    1)`` (``hidden_weight [C, hidden, H]``, ``hidden_bias [C, hidden]``, ``weight [C,
    hidden]``, ``bias [C]``). Each branch is initialized as ``nn.Linear`` initializes a layer
    (uniform in +-1/sqrt(fan_in)).

    The buffer ``active [C]`` marks the branches the model's holder predicts with: in eval mode
    the score of a branch with ``active == 0`` is -1e9, so the argmax ranges over the active
    branches only (all of them in the global model; a client's own classes in its copy). It
    has no effect in training mode.
    """

    def __init__(self, in_features: int, num_classes: int, hidden: int = 0) -> None:
        super().__init__()
        self.hidden = hidden
        c = num_classes
        if hidden:
            bound = 1.0 / math.sqrt(in_features)
            self.hidden_weight = nn.Parameter(torch.empty(c, hidden, in_features))
            self.hidden_bias = nn.Parameter(torch.empty(c, hidden))
            nn.init.uniform_(self.hidden_weight, -bound, bound)
            nn.init.uniform_(self.hidden_bias, -bound, bound)
            fan_in = hidden
        else:
            fan_in = in_features
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = nn.Parameter(torch.empty(c, fan_in))
        self.bias = nn.Parameter(torch.empty(c))
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)
        self.register_buffer("active", torch.ones(c))

    @classmethod
    def from_linear(cls, head: nn.Linear) -> BranchHead:
        """Logistic branches holding ``head``'s rows (the plain classifier's initial values:
        a run of the plain and the multi-branch classifier start from the same model)."""
        out = cls(head.in_features, head.out_features, 0)
        with torch.no_grad():
            out.weight.copy_(head.weight)
            out.bias.copy_(head.bias)
        return out

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.hidden:
            a = torch.relu(torch.einsum("nh,ckh->nck", h, self.hidden_weight) + self.hidden_bias)
            scores = (a * self.weight).sum(-1) + self.bias
        else:
            scores = h @ self.weight.T + self.bias
        if self.training:
            return scores
        return torch.where(self.active > 0, scores, torch.full_like(scores, -1e9))


def branch_blocks(slices: dict[str, slice], num_classes: int) -> list[tuple[slice, int]]:
    """``(slice, entries per branch)`` of every trained head tensor in the flat layout."""
    out = []
    for name, sl in slices.items():
        if name.startswith(HEAD) and name != ACTIVE:
            n = sl.stop - sl.start
            if n % num_classes:
                raise ValueError(f"head tensor {name!r}: {n} entries, not {num_classes} branches")
            out.append((sl, n // num_classes))
    return out


def num_branches(slices: dict[str, slice]) -> int:
    """The number of branches (classes): the entries of the head's ``bias``."""
    sl = slices.get(HEAD + "bias")
    if sl is None:
        raise ValueError(f"no {HEAD}bias in the flat layout; names: {list(slices)}")
    return sl.stop - sl.start


def sent_branches(rows: torch.Tensor, slices: dict[str, slice]) -> torch.Tensor:
    """``[K, P] -> [K, C]`` bool: which branches each update row carries (any entry non-zero;
    a client leaves the branches it does not train exactly unchanged)."""
    c = num_branches(slices)
    x = rows.numpy()  # a few small blocks: numpy is ~10x faster than torch's dispatch here
    out = np.zeros((rows.shape[0], c), dtype=bool)
    for sl, e in branch_blocks(slices, c):
        out |= (x[:, sl] != 0).reshape(-1, c, e).any(-1)
    return torch.from_numpy(out)
