"""FedProx synthetic(alpha, beta) devices generated on demand, one device per client id.

Device ``k`` follows the recipe of :func:`.synthetic.make_fedprox_synthetic` (Li et al.,
MLSys 2020), but with its own generator ``np.random.default_rng([seed, TAG, k])``, so any
device of a population of any size can be generated alone, in any order:

* ``u_k ~ N(0, alpha)``, ``B_k ~ N(0, beta)``, ``W_k ~ N(u_k, 1)`` ``[C, d]``,
  ``b_k ~ N(u_k, 1)`` ``[C]``, ``v_k ~ N(B_k, 1)`` ``[d]`` (drawn in this order; the ``iid``
  variant uses one ``(W, b) ~ N(0, 1)`` from ``default_rng([seed, TAG])`` and ``v_k = 0``);
* ``n_k = min(floor(exp(4 + 2 z_k)) + min_samples, max_samples)`` samples, ``z_k`` from
  :func:`.rows.hash_normal` (so sizes are vectorized and need no generation);
* ``x ~ N(v_k, diag(j^-1.2))``, ``y = argmax(W_k x + b_k)``;
* ``n_test = min(round(test_fraction * n_k), n_k - 1)`` samples of a permutation held out
  for testing, the rest (in permutation order) for training.

The numbers differ from ``make_fedprox_synthetic`` (different generator streams), the
distribution is the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .clients import ClientData
from .rows import ClientRows, check_seed, hash_normal
from .synthetic import check_synthetic

__all__ = ["SyntheticDevices", "synthetic_test_set"]

SYNTH_TAG = 0x5E7D  # device generators (and the shared iid model)
_SIZE_TAG = 0x5E7E  # hash stream of the device sizes


class SyntheticDevices(ClientData):
    """``num_clients`` FedProx synthetic devices, generated on demand.

    :meth:`rows` returns generated samples (``ClientRows.x``/``y`` set) of the training part
    of each device; :meth:`sizes` counts that part; :meth:`local_test` gives the held-out part.

    Parameters
    ----------
    num_clients : int
        Number of devices (any size).
    seed : int
        Non-negative seed.
    alpha, beta : float
        Model and feature heterogeneity (standard deviations of ``u_k`` and ``B_k``).
    iid : bool
        FedProx "synthetic IID": shared model, zero feature mean.
    dim, num_classes : int
        Feature dimension (60 in the paper) and number of classes (10).
    min_samples, max_samples : int
        Bounds of the device size, see the module docstring.
    test_fraction : float
        Fraction of each device's samples held out for testing, in [0, 1).
    """

    local_test_pool = "test"

    def __init__(
        self,
        num_clients: int,
        *,
        seed: int,
        alpha: float,
        beta: float,
        iid: bool = False,
        dim: int = 60,
        num_classes: int = 10,
        min_samples: int = 50,
        max_samples: int = 1000,
        test_fraction: float = 0.2,
    ) -> None:
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
        check_seed("seed", seed)
        check_synthetic(
            alpha=alpha,
            beta=beta,
            num_devices=1,
            dim=dim,
            num_classes=num_classes,
            min_samples=min_samples,
            max_samples=max_samples,
            test_fraction=test_fraction,
        )
        self.num_clients = int(num_clients)
        self.seed, self.alpha, self.beta, self.iid = int(seed), float(alpha), float(beta), iid
        self.dim, self.num_classes = int(dim), int(num_classes)
        self.min_samples, self.max_samples = int(min_samples), int(max_samples)
        self.test_fraction = float(test_fraction)
        self._sigma_std = np.arange(1, dim + 1, dtype=np.float64) ** (-1.2 / 2.0)
        self._shared: tuple[np.ndarray, np.ndarray] | None = None
        if iid:
            rng = np.random.default_rng([self.seed, SYNTH_TAG])
            self._shared = (
                rng.normal(0.0, 1.0, (num_classes, dim)),
                rng.normal(0.0, 1.0, num_classes),
            )

    def total_sizes(self, ids: np.ndarray) -> np.ndarray:
        """All samples of each device (train + test): ``min(floor(exp(4 + 2z)) + min, max)``."""
        z = hash_normal(self.seed, self._ids(ids), _SIZE_TAG)
        n = np.floor(np.exp(4.0 + 2.0 * z)).astype(np.int64) + self.min_samples
        return np.minimum(n, self.max_samples)

    def test_sizes(self, ids: np.ndarray) -> np.ndarray:
        """Held-out samples of each device: ``min(round(test_fraction * n), n - 1)``."""
        n = self.total_sizes(ids)
        return np.minimum(np.rint(self.test_fraction * n).astype(np.int64), n - 1)

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Training samples of each device (total minus held-out)."""
        n = self.total_sizes(ids)
        return n - np.minimum(np.rint(self.test_fraction * n).astype(np.int64), n - 1)

    def device(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Generate device ``k``: ``(x_train, y_train, x_test, y_test)`` (float32 / int64)."""
        k = int(self._ids([k])[0])
        n = int(self.total_sizes(np.array([k]))[0])
        rng = np.random.default_rng([self.seed, SYNTH_TAG, k])
        if self._shared is not None:
            w, b = self._shared
            v = np.zeros(self.dim)
        else:
            u = rng.normal(0.0, self.alpha)
            big_b = rng.normal(0.0, self.beta)
            w = rng.normal(u, 1.0, (self.num_classes, self.dim))
            b = rng.normal(u, 1.0, self.num_classes)
            v = rng.normal(big_b, 1.0, self.dim)
        x = v + rng.standard_normal((n, self.dim)) * self._sigma_std
        y = np.argmax(x @ w.T + b, axis=1).astype(np.int64)  # softmax is monotone
        n_test = min(int(round(self.test_fraction * n)), n - 1)
        order = rng.permutation(n)
        te, tr = order[:n_test], order[n_test:]
        x = x.astype(np.float32)
        return x[tr], y[tr], x[te], y[te]

    def generated_rows(self, ids: Sequence[int] | np.ndarray, test: bool) -> ClientRows:
        """Generated samples of the devices, concatenated in request order: their
        held-out part if ``test``, else their training part."""
        xs = [np.zeros((0, self.dim), np.float32)]
        ys = [np.zeros(0, np.int64)]
        index, start = [], 0
        for k in self._ids(ids).tolist():
            x_tr, y_tr, x_te, y_te = self.device(k)
            x, y = (x_te, y_te) if test else (x_tr, y_tr)
            xs.append(x)
            ys.append(y)
            index.append(np.arange(start, start + len(y), dtype=np.int64))
            start += len(y)
        return ClientRows(np.concatenate(xs), np.concatenate(ys), index)

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        """Generated training samples of the devices, concatenated in request order."""
        return self.generated_rows(ids, test=False)

    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        """Each device's own held-out samples (``test_fraction`` of them, fixed at
        construction so that a device's data never depends on the caller; ``fraction`` and
        ``seed`` are not used)."""
        return _SyntheticTest(self)

    def nbytes(self) -> int:
        return int(self._sigma_std.nbytes + sum(a.nbytes for a in self._shared or ()))


class _SyntheticTest(ClientData):
    """The held-out (test) part of each device of a :class:`SyntheticDevices`."""

    def __init__(self, parent: SyntheticDevices) -> None:
        self.parent = parent
        self.num_clients = parent.num_clients

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        return self.parent.test_sizes(self._ids(ids))

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        return self.parent.generated_rows(ids, test=True)

    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        raise ValueError("this is already a local-test source")

    def nbytes(self) -> int:
        return self.parent.nbytes()


def synthetic_test_set(
    devices: SyntheticDevices, count: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """Global test set of an on-demand synthetic run: the held-out samples of devices
    ``0..min(num_clients, count) - 1``, concatenated in device order.

    Returns
    -------
    (x, y) : tuple of ndarray
        float32 ``[M, dim]`` and int64 ``[M]``.
    """
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    r = devices.generated_rows(np.arange(min(devices.num_clients, int(count))), test=True)
    assert r.x is not None and r.y is not None
    return r.x, r.y
