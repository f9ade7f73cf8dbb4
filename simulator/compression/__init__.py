"""Compression of what travels between the clients and the server, one file per compressor,
registered by name (``--compression``, parameters ``--compression-params KEY=VALUE``).

==========  ==================================================================================
``none``    every transfer dense (default)
``mask``    top-``rate`` masks of the uploads and/or the downloads, by magnitude or ``|g * w|``
            importance (the lab deck's upload/download masks)
==========  ==================================================================================

A compressor (:class:`~simulator.compression.base.Compressor`) masks the clients' update rows
(the round's collect step, before the model attack's rows reach the defense and the ledger), the
change of the global model (the server step, replayed as is by the ledger's audit) and prices
both transfers for the virtual clock and the events. Adding one is one new file here with a
``@register("name")`` frozen dataclass; no engine file changes.
"""

from __future__ import annotations

from typing import Any

from simulator.compression.base import Compressor
from simulator.registry import Registry

__all__ = [
    "COMPRESSORS",
    "Compressor",
    "compression_parameters",
    "make_compressor",
    "register",
]

COMPRESSORS: Registry[type[Compressor]] = Registry("compression")
register = COMPRESSORS.register


def compression_parameters(name: str) -> dict[str, Any]:
    """Parameter name -> default of compressor ``name``; an unknown name raises
    :class:`~simulator.registry.UnknownName` listing the valid ones."""
    return COMPRESSORS.parameters(name)


def make_compressor(name: str, **params: Any) -> Compressor:
    """Build the compressor registered as ``name`` with ``params``.

    Raises
    ------
    ValueError
        Unknown name (lists the valid ones), unknown parameter (lists the compressor's
        parameters) or an invalid value (names the parameter and the rule).
    """
    return COMPRESSORS.build(name, **params)


COMPRESSORS.discover(__name__)
