"""Partition schemes, one file each, registered by name (``--partition``, parameters
``--partition-params KEY=VALUE``).

=============  ===================================================================================
``iid``        shuffle and split into near-equal parts
``dirichlet``  label skew: each class spread over clients by ``Dir(alpha)`` (Hsu et al. 2019)
``shards``     pathological non-IID: single-class shards, ``classes_per_client`` each (McMahan)
``missing``    each client lacks ``missing_classes`` classes (FedFM's "Missing k")
``quantity``   IID labels, client sizes by ``Dir(alpha)`` or a power law (Li et al., ICDE 2022)
``natural``    the data's own clients (LEAF writers, FedProx devices)
``virtual``    seeded draws from the pool: log-normal size, ``Dir(alpha)`` label mix
=============  ===================================================================================

A scheme is a function ``scheme(labels, num_clients, *, seed, groups, **params)`` returning one
array of training-row numbers per client; its keyword parameters after ``seed`` and ``groups``
(with their defaults) are its ``--partition-params``. Every scheme is a pure function of its
arguments: equal seeds give identical index arrays. Adding a scheme is one new file in this
folder whose function is decorated with ``@PARTITIONS.register("name")``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.registry import Registry, check_params

__all__ = ["PARTITIONS", "Partitioner", "partition", "scheme_keywords"]

Partitioner = Callable[..., list[np.ndarray]]

PARTITIONS: Registry[Partitioner] = Registry("partition")


def scheme_keywords(fn: Partitioner) -> dict[str, Any]:
    """Parameter name -> default of a scheme function (its keyword-only arguments other than
    ``seed`` and ``groups``)."""
    return {
        p.name: p.default
        for p in inspect.signature(fn).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ("seed", "groups")
    }


def partition(
    labels: np.ndarray,
    num_clients: int,
    scheme: str,
    *,
    seed: int,
    groups: np.ndarray | None = None,
    **params: object,
) -> list[np.ndarray]:
    """Split training indices ``0..N-1`` across ``num_clients`` clients.

    Parameters
    ----------
    labels : ndarray
        Integer training labels, shape ``[N]``.
    num_clients : int
        Number of clients (>= 1, at most ``N``).
    scheme : str
        A name of ``PARTITIONS``: ``iid``, ``dirichlet`` (alpha, min_size, max_retries,
        balance), ``shards`` (classes_per_client), ``missing`` (missing_classes,
        max_retries), ``quantity`` (method, alpha, exponent, min_size), ``natural`` (assign;
        needs ``groups``), ``virtual`` (alpha, size_median, size_sigma, size_min, size_max).
    seed : int
        Seed of the scheme's ``np.random.default_rng``.
    groups : ndarray, optional
        Natural client id per sample, for ``natural``.
    **params
        Scheme parameters, see above.

    Returns
    -------
    list of ndarray
        One sorted int64 index array per client, non-empty.  The arrays of every scheme but
        ``virtual`` (draws, possibly repeated) are disjoint; all but ``natural`` with
        ``assign="sample"`` and ``virtual`` cover every index.

    Raises
    ------
    ValueError
        Unknown scheme or parameter (the message lists the valid ones), or an impossible
        request such as more clients than samples.
    """
    if scheme not in PARTITIONS:
        raise ValueError(
            f"unknown partition scheme {scheme!r}; valid schemes: {', '.join(PARTITIONS.names())}"
        )
    fn = PARTITIONS.get(scheme)
    check_params(f"partition {scheme!r}", params, scheme_keywords(fn))
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    if int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
    if len(labels) < num_clients:
        raise ValueError(
            f"cannot give {num_clients} clients a sample each from {len(labels)} samples"
        )
    parts = fn(labels, int(num_clients), seed=seed, groups=groups, **params)
    out = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    if any(len(p) == 0 for p in out):  # defensive: every scheme here guarantees this
        raise ValueError(f"scheme {scheme!r} left a client without samples")
    return out


PARTITIONS.discover(__name__)
