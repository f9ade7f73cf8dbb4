"""Where every random draw of a run comes from: one ``--seed``.

* :func:`mix64`, the splitmix64 mixing step behind every pure, vectorized draw (device profiles,
  virtual clients' data, per-client noise): a draw is a hash of (seed, tag, id), so it needs no
  generator state and costs the same for any population size;
* :class:`Stream`, the purposes of a round's independent generators, and :func:`stream`, the
  generator of one purpose in one round: a pure function of (seed, round, purpose);
* :func:`client_seeds`, each client's training seed in a round.

Nothing here depends on the number of actors or nodes, so results are the same on any pool.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import numpy as np


class Stream(IntEnum):
    """The purpose of a round's random stream (the third key of :func:`stream`). The values are
    part of every result: changing one changes every run."""

    SELECT = 1  #: who trains (selection among the devices online and idle)
    EPOCHS = 2  #: per-client local epochs (stragglers doing partial work)
    CLIENT = 3  #: the tag of :func:`client_seeds`
    DEFENSE = 4  #: the defense's draws (bucketing, Sageflow's tie-breaks, ...)
    ATTACK = 5  #: who is malicious this round
    MODEL_ATTACK = 105  #: the draws of a model attack rewriting the malicious rows


class _LazyGenerator:
    """A numpy Generator built on first use: most rounds never draw from most of their streams
    (no straggler epochs, no attack), and seeding one costs ~50 us."""

    __slots__ = ("_g", "_seed")

    def __init__(self, seed: list[int]) -> None:
        self._seed, self._g = seed, None

    def __getattr__(self, name: str) -> Any:
        if self._g is None:
            self._g = np.random.default_rng(self._seed)
        return getattr(self._g, name)


def stream(seed: int, rnd: int, which: Stream) -> np.random.Generator:
    """The generator of one purpose in one round: a pure function of (seed, round, purpose)
    (created when first drawn from)."""
    return _LazyGenerator([seed, rnd, int(which)])  # type: ignore[return-value]


def client_seeds(seed: int, rnd: int, clients: np.ndarray) -> np.ndarray:
    """Per-client training seeds of one round: a splitmix64 hash of (seed, round, client)."""
    with np.errstate(over="ignore"):
        z = (
            np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
            + np.uint64(rnd) * np.uint64(0xBF58476D1CE4E5B9)
            + np.asarray(clients, dtype=np.uint64) * np.uint64(0x94D049BB133111EB)
            + np.uint64(int(Stream.CLIENT))
        )
        for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            z = (z ^ (z >> np.uint64(shift))) * np.uint64(mult)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(1)).astype(np.int64)


def mix64(z: np.ndarray) -> np.ndarray:
    """One splitmix64 step on uint64 values (add the golden gamma, then the finalizer;
    wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
