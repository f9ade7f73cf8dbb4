"""Runtime predictors of a stacked training chunk: a gradient-boosted tree model and Parrot's
linear fit, both learned online from the chunks the workers report (``chunks`` in every event).

A chunk is what one worker trains as one vmapped computation; its cost depends on how many
clients it holds and on its longest schedule (shorter clients are padded), not only on the total
samples. Features (:data:`FEATURES`): clients, longest local steps, total steps, samples, the
model's training FLOPs per sample, and the actor kind (an integer code).

* :class:`GBDTPredictor` uses scikit-learn's ``HistGradientBoostingRegressor`` on the log of the
  seconds (so that the loss is a relative error, which MAPE measures), as a correction of a
  structural base model that extrapolates beyond the chunk sizes seen. Chosen over LightGBM
  because scikit-learn is already a dependency, is deterministic for a ``random_state`` and fits
  a few thousand chunks in well under a second; nothing here needs LightGBM's scale.
* :class:`LinearPredictor` is the baseline of FedML's Parrot (Tang et al., 2023): seconds as an
  affine function of the samples only, fitted by least squares.

Both keep every observation (a round adds one row per worker) and refit on demand; their state
is plain arrays (``state_dict``), for checkpoints. The lab deck's GBDT-vs-SVR claim is not
reproduced here: the benchmark measures MAPE on held-out rounds against the linear fit instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

FEATURES = ("clients", "max_steps", "steps", "samples", "flops", "kind")


def features(chunks: Sequence[Mapping[str, Any]], flops: float = 0.0, kind: int = 0
             ) -> np.ndarray:
    """``[n, len(FEATURES)]`` float64 features of ``chunks`` (dicts with clients, max_steps,
    steps, samples; ``flops`` and ``kind`` apply to all of them unless a chunk has its own)."""
    rows = [[float(c["clients"]), float(c["max_steps"]), float(c["steps"]),
             float(c["samples"]), float(c.get("flops", flops)), float(c.get("kind", kind))]
            for c in chunks]
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))


def mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute percentage error ``mean(|p - m| / m)`` (measured > 0)."""
    p, m = np.asarray(predicted, np.float64), np.asarray(measured, np.float64)
    if p.shape != m.shape or not len(m) or (m <= 0).any():
        raise ValueError("mape: needs equally long, non-empty arrays with measured > 0")
    return float(np.mean(np.abs(p - m) / m))


class _Observed:
    """Observations kept as arrays; subclasses fit on them."""

    def __init__(self) -> None:
        self.x = np.zeros((0, len(FEATURES)), np.float64)
        self.y = np.zeros(0, np.float64)
        self._fitted = False

    def observe(self, x: np.ndarray, seconds: np.ndarray) -> None:
        """Add observed chunks (``x`` from :func:`features`) and their measured seconds."""
        x = np.asarray(x, np.float64).reshape(-1, len(FEATURES))
        s = np.asarray(seconds, np.float64).reshape(-1)
        if len(x) != len(s) or not np.isfinite(x).all() or not (s > 0).all():
            raise ValueError("observe: one finite feature row and one positive time per chunk")
        self.x, self.y = np.concatenate([self.x, x]), np.concatenate([self.y, s])
        self._fitted = False

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"x": self.x.copy(), "y": self.y.copy()}

    def load_state_dict(self, st: Mapping[str, np.ndarray]) -> None:
        self.x, self.y = np.asarray(st["x"], np.float64), np.asarray(st["y"], np.float64)
        self._fitted = False

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Predicted seconds of chunks ``x``; fits first if observations were added."""
        if not len(self.y):
            raise ValueError(f"{type(self).__name__}: nothing observed yet")
        if not self._fitted:
            self._fit()
            self._fitted = True
        return self._predict(np.asarray(x, np.float64).reshape(-1, len(FEATURES)))

    def _fit(self) -> None:
        raise NotImplementedError

    def _predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _step_base(x: np.ndarray, y: np.ndarray) -> dict[int, np.ndarray]:
    """Per actor kind, non-negative least squares of ``seconds / max_steps`` on
    ``[1, clients]`` (a stacked step's dispatch and per-client cost); key -1 for all kinds."""
    from scipy.optimize import nnls

    out = {}
    per_step = y / np.maximum(x[:, 1], 1.0)
    kinds = x[:, FEATURES.index("kind")].astype(np.int64)
    for k in [-1, *np.unique(kinds).tolist()]:
        sel = np.ones(len(y), bool) if k == -1 else kinds == k
        if sel.sum() < 3 and k != -1:
            continue
        a = np.stack([np.ones(int(sel.sum())), x[sel, 0]], axis=1)
        coef = nnls(a / per_step[sel, None], np.ones(int(sel.sum())))[0]   # relative error
        out[k] = coef if coef.sum() > 0 else np.array([per_step[sel].mean(), 0.0])
    return out


def _base_seconds(coefs: dict[int, np.ndarray], x: np.ndarray) -> np.ndarray:
    kinds = x[:, FEATURES.index("kind")].astype(np.int64)
    c = np.stack([coefs.get(int(k), coefs[-1]) for k in kinds]).reshape(-1, 2)
    return np.maximum(x[:, 1], 1.0) * np.maximum(c[:, 0] + c[:, 1] * x[:, 0], 1e-9)


class GBDTPredictor(_Observed):
    """Gradient-boosted trees correcting a structural base model (see the module docstring).

    Trees cannot extrapolate: fitted on chunks of at most 24 clients, they predict a chunk of
    100 as if it held 24. So the trees learn the log ratio of the measured seconds to a base
    model that extrapolates the way a stacked step does, ``max_steps * (a_kind + b_kind *
    clients)`` (fitted by non-negative least squares on relative error), and the prediction is
    the base times the trees' correction.

    Parameters
    ----------
    seed : random_state of the regressor (its fits are deterministic for a seed).
    max_iter, learning_rate, max_leaf_nodes : the regressor's capacity; the defaults fit a few
        thousand chunks in well under a second on one core.
    """

    def __init__(self, seed: int = 0, max_iter: int = 60, learning_rate: float = 0.15,
                 max_leaf_nodes: int = 15) -> None:
        super().__init__()
        self.params = {"random_state": seed, "max_iter": max_iter,
                       "learning_rate": learning_rate, "max_leaf_nodes": max_leaf_nodes,
                       "min_samples_leaf": 5, "early_stopping": False}
        self._model: Any = None

    def _fit(self) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self._base = _step_base(self.x, self.y)
        target = np.log(self.y) - np.log(_base_seconds(self._base, self.x))
        self._model = HistGradientBoostingRegressor(**self.params).fit(self.x, target)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        return _base_seconds(self._base, x) * np.exp(self._model.predict(x))


class LinearPredictor(_Observed):
    """Parrot's baseline: ``seconds = a + b * samples`` by least squares (floored at the smallest
    observed time, so that a prediction is never <= 0)."""

    def _fit(self) -> None:
        s = self.x[:, FEATURES.index("samples")]
        a = np.stack([np.ones_like(s), s], axis=1)
        self.coef = np.linalg.lstsq(a, self.y, rcond=None)[0]

    def _predict(self, x: np.ndarray) -> np.ndarray:
        s = x[:, FEATURES.index("samples")]
        return np.maximum(self.coef[0] + self.coef[1] * s, self.y.min())


PREDICTORS = {"gbdt": GBDTPredictor, "linear": LinearPredictor}
