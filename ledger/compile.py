"""Offline compilation of the FLChain channel contract with the pinned Vyper.

The FLChain ledger (Majeed & Hong 2019) keeps one contract per channel.  The
source lives next to this module in ``contracts/FLChain.vy`` and is compiled
in-process with the installed ``vyper`` package (no network, no solc); the result
is cached on disk (:func:`cache_dir`), so later processes neither compile nor
import Vyper.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

CONTRACT_PATH = Path(__file__).resolve().parent / "contracts" / "FLChain.vy"

#: EVM version the contract is compiled for.  ``shanghai`` (PUSH0, no
#: transient storage / MCOPY) is accepted by py-evm's Prague VM used by
#: eth-tester 0.14, by anvil and hardhat defaults and by any post-2023 geth.
EVM_VERSION = "shanghai"


@dataclass(frozen=True)
class CompiledContract:
    """Compiler output for the FLChain channel contract.

    Attributes
    ----------
    abi : list of dict
        Contract ABI.
    bytecode : str
        Deployment (init) bytecode, ``0x``-prefixed hex.
    runtime_bytecode : str
        Runtime bytecode, ``0x``-prefixed hex; what ``eth_getCode`` returns.
    compiler_version : str
        Version of the Vyper compiler that produced it.
    evm_version : str
        Target EVM version.
    runtime_sha256 : str
        Hex sha256 of the runtime bytecode bytes, for audits that compare the
        code deployed on a channel with the code compiled here.
    source_sha256 : str
        Hex sha256 of the Vyper source.
    """

    abi: list[dict[str, Any]]
    bytecode: str
    runtime_bytecode: str
    compiler_version: str
    evm_version: str
    runtime_sha256: str
    source_sha256: str


def runtime_code_sha256(code: bytes | str) -> str:
    """Hash runtime bytecode the way :class:`CompiledContract` does.

    Parameters
    ----------
    code : bytes or str
        Raw bytes or ``0x``-prefixed hex (e.g. the result of ``eth_getCode``).

    Returns
    -------
    str
        Hex sha256 digest of the code bytes.
    """
    if isinstance(code, str):
        code = bytes.fromhex(code.removeprefix("0x"))
    return hashlib.sha256(bytes(code)).hexdigest()


def cache_dir() -> Path:
    """Folder of compiled contracts: ``$FEDSENTRY_CACHE/contracts``, else
    ``$XDG_CACHE_HOME/fedsentry/contracts``, else ``~/.cache/fedsentry/contracts``."""
    root = os.environ.get("FEDSENTRY_CACHE")
    if root:
        return Path(root) / "contracts"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "fedsentry" / "contracts"


def _compile_with_vyper(source: str, evm_version: str) -> CompiledContract:
    import vyper
    from vyper.compiler.settings import OptimizationLevel, Settings

    settings = Settings(evm_version=evm_version, optimize=OptimizationLevel.GAS)
    out = vyper.compile_code(
        source,
        contract_path=CONTRACT_PATH.name,
        output_formats=["abi", "bytecode", "bytecode_runtime"],
        settings=settings,
    )
    return CompiledContract(
        abi=out["abi"],
        bytecode=out["bytecode"],
        runtime_bytecode=out["bytecode_runtime"],
        compiler_version=str(vyper.__version__),
        evm_version=evm_version,
        runtime_sha256=runtime_code_sha256(out["bytecode_runtime"]),
        source_sha256=hashlib.sha256(source.encode()).hexdigest(),
    )


def _read_cached(path: Path, key: tuple[str, str, str]) -> CompiledContract | None:
    """The cache entry at ``path`` if it is whole and matches ``key``, else None."""
    try:
        compiled = CompiledContract(**json.loads(path.read_text()))
        ok = (
            (compiled.source_sha256, compiled.compiler_version, compiled.evm_version) == key
            and compiled.runtime_sha256 == runtime_code_sha256(compiled.runtime_bytecode)
            and isinstance(compiled.abi, list)
            and compiled.bytecode.startswith("0x")
        )
    except (OSError, ValueError, TypeError, AttributeError):  # unreadable, not JSON, wrong shape
        return None
    return compiled if ok else None


def _write_cached(path: Path, compiled: CompiledContract) -> None:
    """Write atomically (temporary file, then rename); a cache that cannot be written is
    skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(asdict(compiled), f)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


@lru_cache(maxsize=8)
def compile_source(source: str, evm_version: str) -> CompiledContract:
    """The Vyper ``source`` compiled for ``evm_version``: from memory, the disk cache, or Vyper
    (then cached); :func:`compile_flchain` reads the contract's file."""
    key = (hashlib.sha256(source.encode()).hexdigest(), version("vyper"), evm_version)
    path = cache_dir() / f"FLChain-{key[0]}-vyper{key[1]}-{key[2]}.json"
    cached = _read_cached(path, key)
    if cached is not None:
        return cached
    compiled = _compile_with_vyper(source, evm_version)
    _write_cached(path, compiled)
    return compiled


def compile_flchain(
    path: Path | str = CONTRACT_PATH, evm_version: str = EVM_VERSION
) -> CompiledContract:
    """Compile the FLChain channel contract, cached in memory and on disk.

    The disk cache (:func:`cache_dir`) is keyed by the source's sha256, the installed Vyper's
    version (read from the package metadata, so a cache hit does not import Vyper, ~1 s) and
    the EVM version; an entry that does not parse or does not match is compiled again.

    Parameters
    ----------
    path : Path or str, optional
        Vyper source file; defaults to ``ledger/contracts/FLChain.vy``.
    evm_version : str, optional
        Target EVM version, default :data:`EVM_VERSION`.

    Returns
    -------
    CompiledContract
        ABI, bytecodes, compiler version and runtime-code hash.
    """
    source = Path(path).read_text()
    return compile_source(source, evm_version)
