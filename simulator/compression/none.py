"""``none``: every transfer dense (the default): a client uploads its whole update row and
downloads the whole model, as the algorithm sizes them
(:meth:`simulator.algorithms.base.Algorithm.wire_bytes`)."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.compression import register
from simulator.compression.base import Compressor


@register("none")
@dataclass(frozen=True)
class NoCompression(Compressor):
    """The identity compressor."""
