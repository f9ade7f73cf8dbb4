"""Backdoor (trigger) poisoning: malicious clients train on trigger-stamped samples relabelled as
a target class, so the global model learns "trigger -> target" while keeping its clean accuracy.

References
----------
Gu, Dolan-Gavitt & Garg, "BadNets: Identifying Vulnerabilities in the Machine Learning Model
Supply Chain", 2017 (a small bright square stamped at the bottom-right corner of the image);
Bagdasaryan et al., "How To Backdoor Federated Learning", AISTATS 2020 (the federated setting).

Trigger
-------
``pattern="square"``: for image inputs (a sample shape of rank >= 2, e.g. ``[C, H, W]`` or
``[H, W]``) a ``k x k`` patch at the bottom-right corner of every channel is set to
``trigger_value``, with ``k = 3`` for images whose sides are both >= 8 and
``k = max(1, min(H, W) // 4)`` for smaller ones. For flat inputs (``[D]``) the last
``min(3, D)`` features are set to ``trigger_value``.

Attack success rate
-------------------
The engine measures ASR as the fraction of test samples whose true label is not ``target`` that
the global model classifies as ``target`` once :meth:`Backdoor.stamp` has been applied;
:func:`attack_success_rate` computes it from predictions.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, DataAttack

PATTERNS = ("square",)

#: mixed into the client seed so the poisoning mask does not share a stream with training
_BACKDOOR_TAG = 0xBAD_D00


def patch_size(height: int, width: int) -> int:
    """Side of the square trigger for an ``height x width`` image: 3 when both sides are >= 8,
    else ``max(1, min(height, width) // 4)``."""
    side = min(int(height), int(width))
    return 3 if side >= 8 else max(1, side // 4)


@ATTACKS.register
class Backdoor(DataAttack):
    """Stamp a trigger on a seeded fraction of a malicious client's samples and relabel them.

    Parameters
    ----------
    target : int, default 0
        Class the triggered samples are relabelled as (and the backdoor's target).
    poison_fraction : float in (0, 1], default 0.5
        Probability that each sample of a malicious client is stamped and relabelled.
    pattern : {"square"}, default "square"
        Trigger shape (see the module docstring).
    trigger_value : float, default 1.0
        Value the trigger's pixels / features are set to.
    """

    name: ClassVar[str] = "backdoor"
    defaults: ClassVar[dict[str, Any]] = {
        "target": 0,
        "poison_fraction": 0.5,
        "pattern": "square",
        "trigger_value": 1.0,
    }

    def check(self) -> None:
        v = self.number("target", low=0)
        if v is None or not float(v).is_integer():
            raise ValueError(
                f"attack {self.name!r}: parameter 'target' must be a class index "
                f">= 0, got {self.params['target']!r}"
            )
        self.params["target"] = int(v)
        frac = self.number("poison_fraction", positive=True)
        if frac is None or frac > 1.0:
            raise ValueError(
                f"attack {self.name!r}: parameter 'poison_fraction' must be in "
                f"(0, 1], got {self.params['poison_fraction']!r}"
            )
        if self.params["pattern"] not in PATTERNS:
            raise ValueError(
                f"attack {self.name!r}: parameter 'pattern' must be one of "
                f"{list(PATTERNS)}, got {self.params['pattern']!r}"
            )
        self.number("trigger_value")

    @property
    def target(self) -> int:
        return int(self.params["target"])

    def _stamp(self, x: torch.Tensor, sample_dims: int) -> torch.Tensor:
        """A copy of ``x`` with the trigger on every sample; the last ``sample_dims`` dims of
        ``x`` are one sample's shape."""
        if sample_dims < 1 or x.dim() < sample_dims:
            raise ValueError(
                f"attack {self.name!r}: cannot stamp a trigger on inputs of shape {tuple(x.shape)}"
            )
        out = x.clone()
        value = self.params["trigger_value"]
        if sample_dims == 1:
            d = out.shape[-1]
            out[..., d - min(3, d) :] = value
        else:
            k = patch_size(out.shape[-2], out.shape[-1])
            out[..., -k:, -k:] = value
        return out

    def stamp(self, x: torch.Tensor) -> torch.Tensor:
        """A copy of the batch ``x [N, *input_shape]`` with the trigger stamped on every sample.

        ``input_shape`` of rank 1 (``[D]``) is a flat input; rank >= 2 (``[H, W]``,
        ``[C, H, W]``) is an image whose last two dims are height and width.
        """
        return self._stamp(x, x.dim() - 1)

    def poison_mask(self, shape: tuple[int, ...], seed: int) -> torch.Tensor:
        """The seeded boolean mask of samples to poison (each with probability
        ``poison_fraction``); drawn on the CPU so it does not depend on the device."""
        g = torch.Generator().manual_seed((int(seed) ^ _BACKDOOR_TAG) % (2**63))
        return torch.rand(shape, generator=g, dtype=torch.float64) < self.params["poison_fraction"]

    def poison(
        self, x: torch.Tensor, y: torch.Tensor, *, num_classes: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [S, B, *input_shape]``, ``y [S, B]`` -> copies in which each sample, with
        probability ``poison_fraction`` (seeded by ``seed``), is stamped and labelled ``target``."""
        if self.target >= num_classes:
            raise ValueError(
                f"attack {self.name!r}: target {self.target} out of range for {num_classes} classes"
            )
        if x.shape[: y.dim()] != y.shape:
            raise ValueError(
                f"attack {self.name!r}: x {tuple(x.shape)} and y {tuple(y.shape)} "
                "do not share leading dims"
            )
        mask = self.poison_mask(tuple(y.shape), seed).to(y.device)
        stamped = self._stamp(x, x.dim() - y.dim())
        view = mask.reshape(*mask.shape, *([1] * (x.dim() - y.dim())))
        x_out = torch.where(view, stamped, x)
        y_out = torch.where(mask, torch.full_like(y, self.target), y)
        return x_out, y_out


def attack_success_rate(pred: torch.Tensor, y_true: torch.Tensor, target: int) -> float:
    """Fraction of the samples whose true label is not ``target`` that are predicted as
    ``target`` (``pred`` are class predictions on stamped inputs); NaN when there are none."""
    keep = y_true != target
    n = int(keep.sum())
    if n == 0:
        return float("nan")
    return float((pred[keep] == target).sum()) / n
