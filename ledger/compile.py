"""Offline compilation of the FLChain channel contract with the pinned Vyper.

The FLChain ledger (Majeed & Hong 2019) keeps one contract per channel.  The
source lives next to this module in ``contracts/FLChain.vy`` and is compiled
in-process with the installed ``vyper`` package (no network, no solc).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
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


@lru_cache(maxsize=8)
def _compile(source: str, evm_version: str) -> CompiledContract:
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


def compile_flchain(
    path: Path | str = CONTRACT_PATH, evm_version: str = EVM_VERSION
) -> CompiledContract:
    """Compile the FLChain channel contract (cached on source text and EVM version).

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
    return _compile(source, evm_version)
