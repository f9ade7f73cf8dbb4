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


def features(chunks: Sequence[Mapping[str, Any]], flops: float = 0.0, kind: int = 0) -> np.ndarray:
    """``[n, len(FEATURES)]`` float64 features of ``chunks`` (dicts with clients, max_steps,
    steps, samples; ``flops`` and ``kind`` apply to all of them unless a chunk has its own)."""
    rows = [
        [
            float(c["clients"]),
            float(c["max_steps"]),
            float(c["steps"]),
            float(c["samples"]),
            float(c.get("flops", flops)),
            float(c.get("kind", kind)),
        ]
        for c in chunks
    ]
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
        from threadpoolctl import threadpool_limits

        if not len(self.y):
            raise ValueError(f"{type(self).__name__}: nothing observed yet")
        # one thread: the driver shares its cores with the actors, and OpenMP's per-tree
        # parallel regions then wait on busy cores (measured here: a fit of 1,200 chunks took
        # 4-20 s on all threads, 0.13 s on one; a placement 0.4-3 s against 0.06 s)
        with threadpool_limits(1):
            if not self._fitted:
                self._fit()
                self._fitted = True
            return self._predict(np.asarray(x, np.float64).reshape(-1, len(FEATURES)))

    def _fit(self) -> None:
        raise NotImplementedError

    def _predict(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _design(x: np.ndarray) -> np.ndarray:
    """Terms of the structural model: a chunk's fixed cost, its per-client set-up (gathering
    rows, building schedules), and per step a dispatch and a per-client part:
    ``[1, clients, max_steps, max_steps * clients]``."""
    c, s = x[:, 0], np.maximum(x[:, 1], 1.0)
    return np.stack([np.ones_like(c), c, s, s * c], axis=1)


def _step_base(x: np.ndarray, y: np.ndarray) -> dict[int, np.ndarray]:
    """Per actor kind, non-negative least squares of the seconds on :func:`_design`'s terms,
    weighted for relative error; key -1 for all kinds (used for kinds seen fewer than 8
    times)."""
    from scipy.optimize import nnls

    out = {}
    kinds = x[:, FEATURES.index("kind")].astype(np.int64)
    for k in [-1, *np.unique(kinds).tolist()]:
        sel = np.ones(len(y), bool) if k == -1 else kinds == k
        if sel.sum() < 8 and k != -1:
            continue
        coef = nnls(_design(x[sel]) / y[sel, None], np.ones(int(sel.sum())))[0]
        out[k] = coef if coef.sum() > 0 else np.array([y[sel].mean(), 0.0, 0.0, 0.0])
    return out


def _base_seconds(coefs: dict[int, np.ndarray], x: np.ndarray) -> np.ndarray:
    kinds = x[:, FEATURES.index("kind")].astype(np.int64)
    c = np.stack([coefs.get(int(k), coefs[-1]) for k in kinds]).reshape(-1, 4)
    return np.maximum((_design(x) * c).sum(axis=1), 1e-9)


class GBDTPredictor(_Observed):
    """Gradient-boosted trees correcting a structural base model (see the module docstring).

    Trees cannot extrapolate: fitted on chunks of at most 24 clients, they predict a chunk of
    100 as if it held 24. So the trees learn the log ratio of the measured seconds to a base
    model that extrapolates the way a stacked chunk does, ``c0 + c1 * clients + max_steps * (a +
    b * clients)`` per actor kind (fitted by non-negative least squares on relative error), and
    the prediction is the base times the trees' correction.

    Parameters
    ----------
    seed : random_state of the regressor (its fits are deterministic for a seed).
    max_iter, learning_rate, max_leaf_nodes : the regressor's capacity; the defaults fit a few
        thousand chunks in well under a second on one core.
    """

    def __init__(
        self,
        seed: int = 0,
        max_iter: int = 60,
        learning_rate: float = 0.15,
        max_leaf_nodes: int = 15,
    ) -> None:
        super().__init__()
        self.params = {
            "random_state": seed,
            "max_iter": max_iter,
            "learning_rate": learning_rate,
            "max_leaf_nodes": max_leaf_nodes,
            "min_samples_leaf": 5,
            "early_stopping": False,
        }
        self._model: Any = None

    def _trees(self, x: np.ndarray, y: np.ndarray) -> tuple[dict[int, np.ndarray], Any]:
        from sklearn.ensemble import HistGradientBoostingRegressor

        base = _step_base(x, y)
        target = np.log(y) - np.log(_base_seconds(base, x))
        return base, HistGradientBoostingRegressor(**self.params).fit(x, target)

    def _fit(self) -> None:
        """Fit the base and the trees; keep the trees only if they beat the base alone on the
        latest quarter of the observations when fitted on the earlier three quarters (model
        selection on training data: on a few noisy chunks the trees can fit noise)."""
        n = len(self.y)
        self.use_trees = True
        if n >= 40:
            cut = (3 * n) // 4
            base, trees = self._trees(self.x[:cut], self.y[:cut])
            xv, yv = self.x[cut:], self.y[cut:]
            plain = _base_seconds(base, xv)
            self.use_trees = mape(plain * np.exp(trees.predict(xv)), yv) < mape(plain, yv)
        self._base, self._model = self._trees(self.x, self.y)

    def _predict(self, x: np.ndarray) -> np.ndarray:
        base = _base_seconds(self._base, x)
        return base * np.exp(self._model.predict(x)) if self.use_trees else base


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
