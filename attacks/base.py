"""The model-attack interface, and how the malicious clients are chosen.

A model attack is a pure, seeded function of the round's update matrix: it takes the malicious
clients' honest updates (``[f, P]``) and an :class:`AttackContext` (round, global model, the
round's benign updates for omniscient attacks, ``f`` and ``n``, a seeded generator) and returns the
``[f, P]`` float32 updates the malicious clients send. It keeps no state between rounds.

Which clients are malicious is fixed by :func:`pick_malicious` (one seeded set for the whole run,
the usual setting, e.g. Siren) or re-drawn each round among the selected clients by
:func:`redraw_malicious` (Sageflow's setting).

Every attack is one module of this package whose class is decorated with ``@ATTACKS.register``
(its ``name``); the package discovers its modules, so adding an attack touches no other file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from simulator.registry import Registry, check_params

#: mixed into the run seed so the malicious set does not share a stream with sampling or data
_PICK_TAG = 0xA77AC4


@dataclass(frozen=True)
class AttackContext:
    """What a model attack may read besides the malicious rows."""

    round: int
    global_flat: torch.Tensor  # [P] current global model
    benign: torch.Tensor  # [B, P] the round's benign updates (omniscient attacks)
    num_byzantine: int  # f: malicious rows this round
    num_total: int  # n: all rows this round
    rng: np.random.Generator


class Attack:
    """Parameters shared by every attack: subclasses set ``name`` and ``defaults``.

    Parameters are keyword arguments; an unknown name raises ``ValueError`` listing the valid ones,
    and :meth:`check` rejects bad values with a message that names the parameter.
    """

    name: ClassVar[str] = "base"
    kind: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **params: Any) -> None:
        check_params(f"attack {self.name!r}", params, self.defaults)
        self.params: dict[str, Any] = {**self.defaults, **params}
        self.check()

    def check(self) -> None:
        """Validate ``self.params``; raise ``ValueError`` naming the bad parameter."""

    def number(
        self,
        key: str,
        *,
        low: float | None = None,
        positive: bool = False,
        allow_none: bool = False,
    ) -> float | None:
        """``self.params[key]`` as a finite float (optionally > 0, >= low, or None); a numeric
        string such as ``"1e-5"`` is accepted."""
        value = self.params[key]
        if value is None and allow_none:
            return None
        if isinstance(value, str):  # YAML reads "1e-5" (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ValueError(
                f"attack {self.name!r}: parameter {key!r} must be a number, got {value!r}"
            )
        v = float(value)
        if not np.isfinite(v) or (positive and v <= 0) or (low is not None and v < low):
            need = " and > 0" if positive else f" and >= {low}" if low is not None else ""
            raise ValueError(
                f"attack {self.name!r}: parameter {key!r} must be finite{need}, got {value!r}"
            )
        self.params[key] = v
        return v

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.params.items())})"


class ModelAttack(Attack):
    """A model attack: implement :meth:`attack` (malicious rows and context -> sent rows)."""

    kind: ClassVar[str] = "model"

    def attack(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        """``[f, P]`` honest updates of the malicious clients -> ``[f, P]`` float32 they send."""
        if malicious.dim() != 2:
            raise ValueError(
                f"attack {self.name!r}: malicious must be [f, P], "
                f"got shape {tuple(malicious.shape)}"
            )
        f, p = malicious.shape
        if f != ctx.num_byzantine or ctx.num_total < f:
            raise ValueError(
                f"attack {self.name!r}: {f} malicious rows but num_byzantine="
                f"{ctx.num_byzantine}, num_total={ctx.num_total}"
            )
        if ctx.benign.dim() != 2 or ctx.benign.shape[1] != p or ctx.global_flat.numel() != p:
            raise ValueError(
                f"attack {self.name!r}: benign {tuple(ctx.benign.shape)} / global "
                f"{tuple(ctx.global_flat.shape)} do not match P={p}"
            )
        if f == 0:
            return torch.zeros(0, p, dtype=torch.float32)
        out = self.attack(malicious, ctx)
        return out.to(torch.float32).expand(f, p).contiguous()

    def __call__(self, malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
        return self.apply(malicious, ctx)


class DataAttack(Attack):
    """A data attack acts inside a malicious client's training: it rewrites the client's
    gathered batches ``x [S, B, ...]``, ``y [S, B]`` before its local steps. Must be picklable
    (it travels to the actors) and deterministic in ``seed``."""

    kind: ClassVar[str] = "data"

    def poison(
        self, x: torch.Tensor, y: torch.Tensor, *, num_classes: int, seed: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


#: every attack the config accepts, by name; an attack's module registers its class with
#: ``@ATTACKS.register`` (its ``name``). ``"none"`` is None: no attack
ATTACKS: Registry[type[Attack] | None] = Registry("attack")
ATTACKS.register("none")(None)


def reference_rows(malicious: torch.Tensor, ctx: AttackContext) -> torch.Tensor:
    """The rows an omniscient attack estimates benign statistics from, as float64.

    The round's benign updates when there are any; otherwise (every arriving row is malicious)
    the malicious clients' own honest updates, which is the partial-knowledge setting of
    Baruch et al. (2019) and Shejwalkar & Houmansadr (2021).
    """
    rows = ctx.benign if ctx.benign.shape[0] > 0 else malicious
    return rows.to(torch.float64)


def column_std(rows: torch.Tensor) -> torch.Tensor:
    """Per-coordinate sample standard deviation (ddof=1, as the reference code's ``torch.std``);
    zero for a single row."""
    if rows.shape[0] < 2:
        return torch.zeros(rows.shape[1], dtype=rows.dtype)
    return rows.std(dim=0, correction=1)


def malicious_count(n: int, fraction: float) -> int:
    """How many of ``n`` clients a malicious ``fraction`` makes: ``fraction * n`` rounded half
    up (0.25 of 10 is 3, 0.45 of 10 is 5; Python's ``round`` took halves to the even count, so
    0.15 and 0.25 of 10 both made 2 until stop 57)."""
    if not 0.0 <= float(fraction) <= 1.0:
        raise ValueError(f"attack_fraction must be in [0, 1], got {fraction!r}")
    # the 1e-9 keeps a product that float arithmetic puts just under a half (0.35 * 10) on it
    return min(n, math.floor(float(fraction) * n + 0.5 + 1e-9))


def pick_malicious(num_clients: int, fraction: float, seed: int) -> np.ndarray:
    """A fixed seeded malicious set: :func:`malicious_count` sorted client ids (int64)."""
    if num_clients < 0:
        raise ValueError(f"num_clients must be >= 0, got {num_clients!r}")
    k = malicious_count(num_clients, fraction)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), _PICK_TAG]))
    return np.sort(rng.choice(num_clients, size=k, replace=False)).astype(np.int64)


def redraw_malicious(
    selected: np.ndarray, fraction: float, rng: np.random.Generator, independent: bool = False
) -> np.ndarray:
    """Sageflow's setting: :func:`malicious_count` of this round's selected clients, re-drawn
    every round from ``rng``; sorted ids (int64). ``independent``: each selected client is
    malicious with probability ``fraction`` on its own (an asynchronous policy's step selects one
    or a few clients, of which a count would round to none)."""
    sel = np.asarray(selected, dtype=np.int64).ravel()
    if independent:
        malicious_count(sel.size, fraction)  # the range check
        return np.sort(sel[rng.random(sel.size) < fraction]).astype(np.int64)
    k = malicious_count(sel.size, fraction)
    return np.sort(rng.choice(sel, size=k, replace=False)).astype(np.int64)
