"""The clients' secp256k1 keys of an FLChain run (ledger v2).

Client keys are derived from the run's account seed (``sha256("flchain-client:{seed}:{id}")``),
so the same seed gives the same ledger (the simulator plays every client: see
:mod:`ledger.records` for what the clients' signatures do and do not prove). Deriving a public
key is one EC multiplication (~22 us), so a run keeps them in an LRU cache (:class:`ClientKeys`),
fills it while a round trains (:meth:`ClientKeys.prefetch`) and derives a round's new keys on
several threads (:meth:`ClientKeys.get_many`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import coincurve
import coincurve.context


def client_secret(seed: int | str, client_id: int) -> bytes:
    """Client ``client_id``'s secp256k1 secret key: sha256(``"flchain-client:{seed}:{id}"``)."""
    return hashlib.sha256(f"flchain-client:{seed}:{client_id}".encode()).digest()


def derive_key(seed: int | str, client_id: int) -> tuple[coincurve.PrivateKey, bytes]:
    """Client ``client_id``'s ``(private key, 33-byte compressed public key)``
    (:func:`client_secret`); thread-safe."""
    secret = client_secret(seed, client_id)
    # a PrivateKey without its eagerly derived public keys (coincurve computes two, one EC
    # multiplication each): signing needs only the secret; the public key is derived once
    key = object.__new__(coincurve.PrivateKey)
    key.secret, key.context = secret, coincurve.context.GLOBAL_CONTEXT
    return key, coincurve.PublicKey.from_valid_secret(secret).format(compressed=True)


class ClientKeys:
    """Client keys of one run, cached (a round's clients are often seen again: deriving a public
    key costs ~30 us, a 1,000-client round of new clients ~30 ms).

    Parameters
    ----------
    seed : int or str
        The run's account seed (``manifest["account_seed"]``).
    capacity : int
        Clients kept; the least recently used are dropped beyond it.
    """

    def __init__(self, seed: int | str, capacity: int = 100_000) -> None:
        self.seed, self.capacity = seed, capacity
        self._keys: OrderedDict[int, tuple[coincurve.PrivateKey, bytes]] = OrderedDict()

    def get(self, client_id: int) -> tuple[coincurve.PrivateKey, bytes]:
        """``(private key, 33-byte compressed public key)`` of a client."""
        hit = self._keys.get(client_id)
        if hit is not None:
            self._keys.move_to_end(client_id)
            return hit
        out = derive_key(self.seed, client_id)
        self._add(client_id, out)
        return out

    def _add(self, client_id: int, key: tuple[coincurve.PrivateKey, bytes]) -> None:
        self._keys[client_id] = key
        if len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def get_many(
        self, client_ids: list[int], run: Callable[[int, Callable[[int, int], None]], None]
    ) -> list[tuple[coincurve.PrivateKey, bytes]]:
        """The keys of ``client_ids``, in order; the missing ones derived by
        ``run(n, work)``, which calls ``work(lo, hi)`` over spans of ``range(n)`` (on several
        threads: the derivation releases the GIL; the cache is only touched here)."""
        missing = [c for c in dict.fromkeys(client_ids) if c not in self._keys]
        if missing:
            got: list[Any] = [None] * len(missing)

            def work(lo: int, hi: int) -> None:
                for j in range(lo, hi):
                    got[j] = derive_key(self.seed, missing[j])

            run(len(missing), work)
            for c, k in zip(missing, got, strict=True):
                self._add(c, k)
        return [self.get(c) for c in client_ids]

    def prefetch(self, client_ids: Any) -> int:
        """Derive the keys of ``client_ids`` now (at most ``capacity`` of them, the last ones);
        returns how many were new."""
        ids = [int(c) for c in client_ids][-self.capacity :]
        new = sum(c not in self._keys for c in ids)
        for c in ids:
            self.get(c)
        return new
