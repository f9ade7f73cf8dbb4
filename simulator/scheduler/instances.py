"""Standard scheduling instances: Braun et al.'s expected-time-to-compute (ETC) matrices.

Reference: T. D. Braun, H. J. Siegel, N. Beck et al., "A Comparison of Eleven Static Heuristics
for Mapping a Class of Independent Tasks onto Heterogeneous Distributed Computing Systems",
Journal of Parallel and Distributed Computing 61(6):810-837, 2001.

The range-based method of that paper: each task ``i`` draws a baseline ``tau_i ~ U[1, R_task)``
and each entry is ``e_ij = tau_i * U[1, R_mach)``. Ranges used here are Braun's:
task heterogeneity high ``R_task = 3000`` / low ``100``; machine heterogeneity high
``R_mach = 1000`` / low ``10``. Consistency:

* consistent: every row sorted ascending (machine 0 is fastest for every task);
* inconsistent: the entries as drawn;
* semi-consistent: in every row the even columns (0, 2, 4, ...) are sorted ascending among
  themselves, the odd columns are left as drawn.

Class names follow the usual ``<consistency>_<task het><machine het>`` form, e.g. ``c_hilo``
(consistent, high task / low machine heterogeneity). The standard size is 512 tasks x 16 machines
for the 12 classes; ``large_instance`` gives the 10,000 x 64 case (inconsistent hi-hi by default).
"""

from __future__ import annotations

import numpy as np

TASK_RANGE: dict[str, float] = {"hi": 3000.0, "lo": 100.0}
MACHINE_RANGE: dict[str, float] = {"hi": 1000.0, "lo": 10.0}
CONSISTENCY: dict[str, str] = {"c": "consistent", "s": "semi-consistent", "i": "inconsistent"}


def class_names() -> list[str]:
    """The 12 Braun classes, e.g. ``["c_hihi", "c_hilo", ..., "i_lolo"]``."""
    return [f"{c}_{t}{m}" for c in CONSISTENCY for t in TASK_RANGE for m in MACHINE_RANGE]


def _parse(name: str) -> tuple[str, float, float]:
    parts = name.split("_")
    valid = class_names()
    if len(parts) != 2 or len(parts[1]) != 4 or parts[0] not in CONSISTENCY:
        raise ValueError(f"ETC class: unknown {name!r}; valid: {valid}")
    t, m = parts[1][:2], parts[1][2:]
    if t not in TASK_RANGE or m not in MACHINE_RANGE:
        raise ValueError(f"ETC class: unknown {name!r}; valid: {valid}")
    return parts[0], TASK_RANGE[t], MACHINE_RANGE[m]


def range_based_etc(
    tasks: int, machines: int, task_range: float, machine_range: float, consistency: str, seed: int
) -> np.ndarray:
    """A (tasks, machines) ETC matrix by Braun et al.'s range-based method.

    Parameters
    ----------
    tasks, machines : int
        Matrix shape (both >= 1).
    task_range, machine_range : float
        Upper ends of the uniform ranges ``[1, R)`` (both > 1).
    consistency : str
        ``"c"`` (consistent), ``"s"`` (semi-consistent) or ``"i"`` (inconsistent).
    seed : int
        Seed of the generator; the matrix is a pure function of all arguments.

    Returns
    -------
    np.ndarray
        float64 matrix, entry (i, j) = expected time of task i on machine j.
    """
    if tasks < 1 or machines < 1:
        raise ValueError(f"ETC shape: need tasks, machines >= 1, got {tasks} x {machines}")
    if task_range <= 1 or machine_range <= 1:
        raise ValueError(f"ETC ranges: need > 1, got task {task_range}, machine {machine_range}")
    if consistency not in CONSISTENCY:
        raise ValueError(f"ETC consistency: unknown {consistency!r}; valid: {sorted(CONSISTENCY)}")
    rng = np.random.default_rng(seed)
    tau = rng.uniform(1.0, task_range, size=(tasks, 1))
    etc = tau * rng.uniform(1.0, machine_range, size=(tasks, machines))
    if consistency == "c":
        etc.sort(axis=1)
    elif consistency == "s":
        etc[:, 0::2] = np.sort(etc[:, 0::2], axis=1)
    return etc


def braun_instance(name: str, tasks: int = 512, machines: int = 16, seed: int = 0) -> np.ndarray:
    """The ETC matrix of Braun class ``name`` (see ``class_names``), seeded."""
    consistency, r_task, r_mach = _parse(name)
    return range_based_etc(tasks, machines, r_task, r_mach, consistency, seed)


def standard_instances(seed: int = 0) -> dict[str, np.ndarray]:
    """The 12 classes at 512 x 16, class ``k`` seeded with ``seed + k``."""
    return {name: braun_instance(name, seed=seed + k) for k, name in enumerate(class_names())}


def large_instance(name: str = "i_hihi", seed: int = 0) -> np.ndarray:
    """The 10,000 tasks x 64 machines instance of class ``name``."""
    return braun_instance(name, tasks=10_000, machines=64, seed=seed)
