"""Device profiles: heterogeneous client hardware (the generator of FedScale-style populations
is :mod:`simulator.population.generate`).

Small populations are lists of :class:`DeviceProfile`; large ones (millions of devices)
are a struct of arrays, :class:`Population`.  Deterministic in the seed; virtual time only.
The trace loader (``load_trace``, ``TraceError``) lives in :mod:`simulator.population.traces`;
availability models (diurnal, traced online intervals) live in
:mod:`simulator.population.availability`.

A device may declare its sustained training speed in GFLOP/s (``gflops``, 0 = not declared);
:meth:`Population.compute_seconds` then derives its compute time from the model's training FLOPs,
so a bigger model is slower on the same device, and from ``compute_ms_per_sample`` otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from simulator.population.checks import check_number, check_seed, problem
from simulator.rng import mix64

FIELDS = ("compute_ms_per_sample", "up_kbps", "down_kbps", "latency_ms", "availability")
#: optional per-device fields (default 0 = not declared)
OPTIONAL_FIELDS = ("gflops",)


@dataclass(frozen=True)
class DeviceProfile:
    """One client device; construction raises ValueError naming an out-of-range field."""

    device_id: int  # >= 0
    compute_ms_per_sample: float  # > 0, ms per sample for one forward pass
    up_kbps: float  # > 0, upload bandwidth in kilobit/s
    down_kbps: float  # > 0, download bandwidth in kilobit/s
    latency_ms: float  # >= 0, one-way latency added to every transfer
    availability: float  # in (0, 1], long-run fraction of time online
    gflops: float = 0.0  # >= 0, sustained training GFLOP/s; 0 = not declared

    def __post_init__(self) -> None:
        i = self.device_id
        if type(i) is not int and (isinstance(i, bool) or not isinstance(i, Integral)) or i < 0:
            raise ValueError(f"device_id must be an int >= 0, got {self.device_id!r}")
        for name in FIELDS:
            value = getattr(self, name)
            if type(value) is not float or problem(name, value):  # fast path: valid float
                check_number(
                    name,
                    value,
                    strict=name != "latency_ms",
                    high=1.0 if name == "availability" else math.inf,
                )
        if type(self.gflops) is not float or problem("gflops", self.gflops):
            check_number("gflops", self.gflops, strict=False)


def frozen(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only: a fresh array handed over this way is kept by
    :class:`Population` as it is (see :func:`_kept`)."""
    arr.flags.writeable = False
    return arr


def _kept(x: object) -> np.ndarray:
    """``x`` as a float64 array of its own: ``x`` itself when it is a read-only float64 array
    that owns its memory (no view of another array: nothing writes to it), else a copy. A
    population of 3*10^8 devices held two copies of every field while it was built, ~80 bytes
    a device at the peak against 48 once built, and the OOM killer ended it (stop 49)."""
    if (
        isinstance(x, np.ndarray)
        and x.dtype == np.float64
        and x.base is None
        and not x.flags.writeable
    ):
        return x
    return np.array(x, dtype=np.float64)


@dataclass(frozen=True, eq=False)
class Population:
    """Struct of read-only float64 arrays (copied, validated like :class:`DeviceProfile`).

    All arrays have the same length; device ``i`` has ``device_id == i``.  ``gflops`` is
    optional: None means no device declares its speed (a read-only all-zero view that takes no
    memory).
    """

    compute_ms_per_sample: np.ndarray
    up_kbps: np.ndarray
    down_kbps: np.ndarray
    latency_ms: np.ndarray
    availability: np.ndarray
    gflops: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = np.shape(self.availability)
        for name in FIELDS:
            arr = _kept(getattr(self, name))
            if arr.ndim != 1 or arr.shape != n or not n[0]:
                raise ValueError(f"{name} must be 1-D, non-empty, as long as the other fields")
            ok = np.isfinite(arr) & (arr >= 0 if name == "latency_ms" else arr > 0)
            if name == "availability":
                ok &= arr <= 1.0
            if not ok.all():
                bad = int(np.argmin(ok))
                raise ValueError(f"{name}[{bad}] {problem(name, arr[bad])}, got {arr[bad]!r}")
            arr.flags.writeable = False
            object.__setattr__(self, name, arr)
        if self.gflops is None:
            object.__setattr__(self, "gflops", np.broadcast_to(np.float64(0.0), n))
            return
        arr = _kept(self.gflops)
        if arr.shape != n:
            raise ValueError("gflops must be 1-D and as long as the other fields")
        ok = np.isfinite(arr) & (arr >= 0)
        if not ok.all():
            bad = int(np.argmin(ok))
            raise ValueError(f"gflops[{bad}] {problem('gflops', arr[bad])}, got {arr[bad]!r}")
        arr.flags.writeable = False
        object.__setattr__(self, "gflops", arr)

    def __len__(self) -> int:
        return int(self.availability.shape[0])

    def profile(self, i: int) -> DeviceProfile:
        """Return device ``i`` (0 <= i < len) as a :class:`DeviceProfile`."""
        if not 0 <= i < len(self):
            raise IndexError(f"device {i} out of range for population of {len(self)}")
        return DeviceProfile(
            int(i), *(float(getattr(self, f)[i]) for f in FIELDS), gflops=float(self.gflops[i])
        )

    def to_profiles(self) -> list[DeviceProfile]:
        """Return all devices as a list of :class:`DeviceProfile`."""
        cols = [getattr(self, f).tolist() for f in (*FIELDS, "gflops")]
        return [DeviceProfile(i, *vals) for i, vals in enumerate(zip(*cols, strict=True))]

    @classmethod
    def from_profiles(cls, profiles: Sequence[DeviceProfile]) -> Population:
        """Build a population from profiles whose ids are ``0 .. n-1`` in order."""
        for i, p in enumerate(profiles):
            if p.device_id != i:
                raise ValueError(f"profiles[{i}] has device_id {p.device_id}, expected {i}")
        gflops = np.array([p.gflops for p in profiles], dtype=np.float64)
        return cls(
            *(np.array([getattr(p, f) for p in profiles], dtype=np.float64) for f in FIELDS),
            gflops=gflops if gflops.any() else None,
        )

    def phases(self, *, seed: int, period_s: float = 3600.0) -> np.ndarray:
        """Per-device phase in ``[0, period_s)``: a hash of ``(seed, device_id)`` only.

        Computed once per ``(seed, period_s)`` and kept (read-only), so rounds do not rehash
        the population."""
        cache = self.__dict__.setdefault("_phase_cache", {})
        key = (seed, period_s)
        if key not in cache:
            check_seed(seed)
            check_number("period_s", period_s)
            cache.clear()
            cache[key] = phases_of(np.arange(len(self), dtype=np.uint64), seed, period_s)
            cache[key].flags.writeable = False
        return cache[key]

    def available(self, t: float, *, seed: int, period_s: float = 3600.0) -> np.ndarray:
        """Boolean mask of the devices online at virtual time ``t`` (seconds).

        Availability model: the day is a cycle of ``period_s`` seconds.  Device ``i``
        is online during one window of length ``availability[i] * period_s`` that
        starts at its phase (see :meth:`phases`) and wraps around the cycle.  Over
        a whole period each device is online exactly its ``availability`` fraction
        of the time.  The result is deterministic in ``(seed, device_id, t)``.
        """
        if not math.isfinite(t):
            raise ValueError(f"t must be finite, got {t!r}")
        offset = np.mod(t - self.phases(seed=seed, period_s=period_s), period_s)
        return (self.availability >= 1.0) | (offset < self.availability * period_s)

    def available_ids(
        self, t: float, ids: np.ndarray, *, seed: int, period_s: float = 3600.0
    ) -> np.ndarray:
        """:meth:`available` for the devices ``ids`` only: O(len(ids)), same answer."""
        ids = np.asarray(ids, dtype=np.int64)
        avail = self.availability[ids]
        phase = phases_of(ids.astype(np.uint64), seed, period_s)
        offset = np.mod(t - phase, period_s)
        return (avail >= 1.0) | (offset < avail * period_s)

    def prefix(self, n: int) -> Population:
        """The first ``n`` devices (a trace longer than the population)."""
        return Population(*(getattr(self, f)[:n] for f in FIELDS), gflops=self.gflops[:n])

    def compute_seconds(
        self,
        ids: np.ndarray,
        samples: np.ndarray,
        epochs: np.ndarray,
        factor: float,
        train_flops_per_sample: float | np.ndarray,
    ) -> np.ndarray:
        """Local training time in seconds of devices ``ids`` (aligned with ``samples``, ``epochs``).

        A device that declares ``gflops > 0`` takes
        ``train_flops_per_sample * samples * epochs / (gflops * 1e9)``: a bigger model is
        slower on the same device.  Any other takes
        ``factor * samples * epochs * compute_ms_per_sample / 1000``, bitwise the same as
        :func:`simulator.population.clock.compute_seconds_unchecked`.

        Parameters
        ----------
        ids : array of int
            Device ids (0 <= id < len).
        samples, epochs : array of float or int
            Counts (>= 0, not checked: the engine's per-round path).
        factor : float
            Training cost of a sample in forward passes (> 0).
        train_flops_per_sample : float or array of float
            FLOPs of one training sample, forward and backward (> 0): one for every device,
            or one per device of ``ids`` (clients of several model groups).
        """
        from simulator.population.clock import compute_seconds_unchecked

        check_number("factor", factor)
        if isinstance(train_flops_per_sample, np.ndarray):
            f = train_flops_per_sample
            if f.shape != np.shape(ids) or not (np.isfinite(f) & (f > 0)).all():
                raise ValueError(
                    "train_flops_per_sample: one finite value > 0 per device id expected"
                )
        else:
            check_number("train_flops_per_sample", train_flops_per_sample)
        ids = np.asarray(ids, dtype=np.int64)
        samples = np.asarray(samples, dtype=np.float64)
        epochs = np.asarray(epochs, dtype=np.float64)
        base = compute_seconds_unchecked(samples, epochs, self.compute_ms_per_sample[ids], factor)
        speed = self.gflops[ids]
        declared = speed > 0
        if not declared.any():
            return base
        model = train_flops_per_sample * samples * epochs / (np.where(declared, speed, 1.0) * 1e9)
        return np.where(declared, model, base)


def phases_of(ids: np.ndarray, seed: int, period_s: float) -> np.ndarray:
    """Phase in ``[0, period_s)`` of each device of ``ids``: a hash of ``(seed, device_id)``
    only (unchecked: the per-round path; :meth:`Population.phases` checks and caches)."""
    key = mix64(np.array([seed], dtype=np.uint64))
    h = mix64(np.asarray(ids, dtype=np.uint64) ^ key)
    return (h >> np.uint64(11)).astype(np.float64) * (2.0**-53) * period_s
