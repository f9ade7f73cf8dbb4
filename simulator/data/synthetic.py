"""Synthetic heterogeneity: FedProx synthetic(alpha, beta) data and per-client feature shift.

Implements the generator of Li et al., "Federated Optimization in Heterogeneous Networks",
MLSys 2020 (FedProx), Section 5.1, itself adapted from Shamir et al. (2014).  For device k:

* ``u_k ~ N(0, alpha)``, ``W_k ~ N(u_k, 1)`` of shape ``[C, d]``, ``b_k ~ N(u_k, 1)`` of shape
  ``[C]`` (the local model);
* ``B_k ~ N(0, beta)``, ``v_k`` with elements ``~ N(B_k, 1)`` (the local feature mean);
* ``x ~ N(v_k, Sigma)`` with diagonal ``Sigma_jj = j^-1.2``;
* ``y = argmax(softmax(W_k x + b_k))``.

As in the authors' released generator, ``alpha`` and ``beta`` are used as standard deviations
and the number of samples per device is ``lognormal(4, 2) + 50`` (a power law); here it is
additionally clipped to ``max_samples`` to keep totals bounded.  The ``iid`` variant shares one
``(W, b) ~ N(0, 1)`` across devices and draws every ``x ~ N(0, Sigma)``.

Note that shifting every entry of ``W_k`` and ``b_k`` by the same ``u_k`` adds the same amount
to every logit, so ``alpha`` leaves the labelling rule's distribution unchanged; the label and
feature skew between devices comes from ``beta`` and the per-device draws of ``W_k, b_k, v_k``.

:func:`feature_shift` gives each client a fixed input transform (contrast, brightness, noise,
translation), the "feature shift" non-IID setting of FedBN.

References
----------
.. [FedBN] X. Li et al., "FedBN: Federated Learning on Non-IID Features via Local Batch
   Normalization", ICLR 2021.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticSplit", "make_fedprox_synthetic", "feature_shift"]


@dataclass(frozen=True, eq=False)
class SyntheticSplit:
    """Arrays produced by :func:`make_fedprox_synthetic`; ``*_groups`` hold device ids."""

    x_train: np.ndarray
    y_train: np.ndarray
    train_groups: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    test_groups: np.ndarray


def check_synthetic(
    *,
    alpha: float,
    beta: float,
    num_devices: int,
    dim: int,
    num_classes: int,
    min_samples: int,
    max_samples: int,
    test_fraction: float,
) -> None:
    """ValueError naming the first invalid FedProx synthetic argument."""
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    if num_devices < 1 or dim < 1 or num_classes < 2:
        raise ValueError("need num_devices >= 1, dim >= 1 and num_classes >= 2")
    if not 1 <= min_samples <= max_samples:
        raise ValueError(f"need 1 <= min_samples <= max_samples, got {min_samples}, {max_samples}")
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")


def make_fedprox_synthetic(
    *,
    seed: int,
    alpha: float = 1.0,
    beta: float = 1.0,
    iid: bool = False,
    num_devices: int = 30,
    dim: int = 60,
    num_classes: int = 10,
    min_samples: int = 50,
    max_samples: int = 1000,
    test_fraction: float = 0.2,
) -> SyntheticSplit:
    """Generate FedProx synthetic(alpha, beta) data, split into train/test per device.

    Parameters
    ----------
    seed : int
        Seed for ``np.random.default_rng``; the output is a pure function of all arguments.
    alpha, beta : float
        Model and feature heterogeneity (standard deviations of ``u_k`` and ``B_k``).
    iid : bool
        Use the FedProx "synthetic IID" variant (shared model, zero feature mean).
    num_devices, dim, num_classes : int
        Number of devices, feature dimension (60 in the paper) and classes (10).
    min_samples, max_samples : int
        Samples per device are ``clip(floor(lognormal(4, 2)) + min_samples, .., max_samples)``.
    test_fraction : float
        Fraction of each device's samples held out for testing (at least one stays in train).

    Returns
    -------
    SyntheticSplit
        float32 features, int64 labels and int64 device ids for train and test.
    """
    check_synthetic(
        alpha=alpha,
        beta=beta,
        num_devices=num_devices,
        dim=dim,
        num_classes=num_classes,
        min_samples=min_samples,
        max_samples=max_samples,
        test_fraction=test_fraction,
    )
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4.0, 2.0, num_devices).astype(np.int64) + min_samples
    sizes = np.minimum(sizes, max_samples)
    u = rng.normal(0.0, alpha, num_devices)
    big_b = rng.normal(0.0, beta, num_devices)
    sigma_std = np.arange(1, dim + 1, dtype=np.float64) ** (-1.2 / 2.0)
    if iid:
        w_global = rng.normal(0.0, 1.0, (num_classes, dim))
        b_global = rng.normal(0.0, 1.0, num_classes)

    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("xtr", "ytr", "gtr", "xte", "yte", "gte")}
    for k in range(num_devices):
        if iid:
            w, b, v = w_global, b_global, np.zeros(dim)
        else:
            w = rng.normal(u[k], 1.0, (num_classes, dim))
            b = rng.normal(u[k], 1.0, num_classes)
            v = rng.normal(big_b[k], 1.0, dim)
        n = int(sizes[k])
        x = v + rng.standard_normal((n, dim)) * sigma_std
        # softmax is monotone, so argmax of the logits is the FedProx label
        y = np.argmax(x @ w.T + b, axis=1)
        n_test = min(int(round(test_fraction * n)), n - 1)
        order = rng.permutation(n)
        te, tr = order[:n_test], order[n_test:]
        for tag, idx in (("tr", tr), ("te", te)):
            parts["x" + tag].append(x[idx])
            parts["y" + tag].append(y[idx])
            parts["g" + tag].append(np.full(len(idx), k, dtype=np.int64))

    def cat(key: str, dtype: type) -> np.ndarray:
        return np.concatenate(parts[key]).astype(dtype)

    return SyntheticSplit(
        x_train=cat("xtr", np.float32),
        y_train=cat("ytr", np.int64),
        train_groups=cat("gtr", np.int64),
        x_test=cat("xte", np.float32).reshape(-1, dim),
        y_test=cat("yte", np.int64),
        test_groups=cat("gte", np.int64),
    )


# --------------------------------------------------------------------------- feature shift


def feature_shift(x: np.ndarray, client_id: int, *, seed: int, strength: float = 1.0) -> np.ndarray:
    """Apply a fixed per-client input transform, giving feature-shift non-IID data [FedBN]_.

    The client's transform is drawn from ``default_rng([seed, client_id])``: ``x * a + b`` with
    a contrast scale ``a = exp(0.3 * strength * z)`` and a brightness offset
    ``b = 0.2 * strength * z'`` (per channel for ``[N, C, H, W]`` input), plus Gaussian noise
    of std ``0.1 * strength * u``, ``u ~ U(0, 1)``.  Image input (``ndim >= 3``) is also
    translated by up to ``round(2 * strength)`` pixels with zero fill.  The affine part and
    shift do not depend on the data, so a client's train and test arrays get the same
    transform; magnitudes assume inputs of order 1 (as all registered datasets are).

    Parameters
    ----------
    x : ndarray
        Client inputs ``[N, ...]``.
    client_id : int
        Non-negative client id; different ids get different transforms.
    seed : int
        Experiment seed.
    strength : float
        0 returns ``x`` unchanged (as float32); larger values shift more.

    Returns
    -------
    ndarray
        float32 array of the same shape.
    """
    if strength < 0:
        raise ValueError(f"strength must be >= 0, got {strength}")
    x = np.asarray(x, dtype=np.float32)
    if strength == 0 or x.size == 0:
        return x.copy()
    rng = np.random.default_rng([int(seed), int(client_id)])
    channels = x.shape[1] if x.ndim == 4 else 1
    bshape = (1, channels) + (1,) * (x.ndim - 2) if x.ndim == 4 else (1,) * x.ndim
    scale = np.exp(0.3 * strength * rng.standard_normal(channels)).reshape(bshape)
    offset = (0.2 * strength * rng.standard_normal(channels)).reshape(bshape)
    noise_std = 0.1 * strength * rng.uniform()
    max_shift = int(round(2 * strength))
    dy, dx = (int(v) for v in rng.integers(-max_shift, max_shift + 1, size=2))
    out = x * scale + offset
    if x.ndim >= 3:
        out = _translate(out, dy, dx)
    out = out + noise_std * rng.standard_normal(x.shape)
    return out.astype(np.float32)


def _translate(x: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Shift the last two axes by ``(dy, dx)`` pixels, filling with zeros."""
    out = np.zeros_like(x)
    h, w = x.shape[-2:]
    if abs(dy) >= h or abs(dx) >= w:
        return out
    src = x[..., max(0, -dy) : h - max(0, dy), max(0, -dx) : w - max(0, dx)]
    out[..., max(0, dy) : max(0, dy) + src.shape[-2], max(0, dx) : max(0, dx) + src.shape[-1]] = src
    return out
