"""The ``compression`` section: what the transfers between clients and server carry
(:mod:`simulator.compression`; the bytes on the wire price the virtual clock's transfers).

Its field names are unique across the sections (see :mod:`.sections`); :func:`compressor_of`
builds the configured compressor with a one-line ConfigError naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.compression import COMPRESSORS, Compressor, make_compressor
from simulator.config.fields import ConfigError, check_choice, field_of


@dataclass(frozen=True)
class CompressionConfig:
    compression: str = field_of(
        "none",
        "what travels between clients and server (one file each in simulator/compression/): "
        "none (dense), or mask (the top-rate share of each update and/or of the global "
        "model's change; the clock's transfer times and the events' byte counts use the "
        "compressed sizes)",
        COMPRESSORS,
    )
    compression_params: dict[str, Any] = field_of(
        {},
        "compression parameters, KEY=VALUE (repeatable), e.g. rate=0.25 "
        "importance=magnitude|gw direction=up|down|both (mask); an unknown key lists the "
        "valid ones",
    )

    def __post_init__(self) -> None:
        check_choice("compression", self)


def compressor_of(cfg: CompressionConfig) -> Compressor:
    """The configured compressor; ConfigError naming ``compression.compression_params`` on a
    bad parameter."""
    try:
        return make_compressor(cfg.compression, **cfg.compression_params)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"compression.compression_params: {e}") from None
