"""Label flipping: a data attack that trains malicious clients on relabelled data.

References
----------
Biggio et al., "Poisoning Attacks against Support Vector Machines", ICML 2012; Tolpegin et al.,
"Data Poisoning Attacks Against Federated Learning Systems", ESORICS 2020. ``shift`` is the
y -> (y + 1) mod C flip of Park et al., "Sageflow", NeurIPS 2021; ``reverse`` (y -> C - 1 - y) is
the default of Siren (Guo et al., SoCC 2021).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from attacks.base import ATTACKS, DataAttack

MODES = ("reverse", "shift", "targeted")


@ATTACKS.register
class LabelFlip(DataAttack):
    """Relabel every sample of a malicious client.

    Parameters
    ----------
    mode : {"reverse", "shift", "targeted"}, default "reverse"
        ``reverse``: y -> C - 1 - y; ``shift``: y -> (y + 1) mod C; ``targeted``: only class
        ``source`` is relabelled, as ``target``.
    source, target : int
        Classes of the targeted flip (defaults 1 -> 7).
    """

    name: ClassVar[str] = "labelflip"
    defaults: ClassVar[dict[str, Any]] = {"mode": "reverse", "source": 1, "target": 7}

    def check(self) -> None:
        if self.params["mode"] not in MODES:
            raise ValueError(
                f"attack 'labelflip': parameter 'mode' must be one of "
                f"{list(MODES)}, got {self.params['mode']!r}"
            )
        for key in ("source", "target"):
            v = self.number(key, low=0)
            if v is None or not float(v).is_integer():
                raise ValueError(
                    f"attack 'labelflip': parameter {key!r} must be a class "
                    f"index >= 0, got {self.params[key]!r}"
                )
            self.params[key] = int(v)

    def poison(
        self, x: torch.Tensor, y: torch.Tensor, *, num_classes: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        mode = self.params["mode"]
        if mode == "reverse":
            return x, num_classes - 1 - y
        if mode == "shift":
            return x, (y + 1) % num_classes
        src, dst = self.params["source"], self.params["target"]
        if max(src, dst) >= num_classes:
            raise ValueError(
                f"attack 'labelflip': source/target {src}/{dst} out of range for "
                f"{num_classes} classes"
            )
        return x, torch.where(y == src, torch.full_like(y, dst), y)
