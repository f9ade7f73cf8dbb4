"""LEAF json shards (Caldas et al. 2018): ``{"users": [...], "num_samples": [...],
"user_data": {user: {"x": [[...], ...], "y": [...]}}}`` as LEAF's preprocessing writes them.

Each shard is checked as it is read and every error names the file and the user: features that
are not numbers or not ``width`` values a sample, labels that are not whole numbers in the
classes (``1.7`` is refused, never truncated), ``num_samples`` that disagree with the data, and a
split whose files hold no samples.

References
----------
.. [1] S. Caldas et al., "LEAF: A Benchmark for Federated Settings", arXiv:1812.01097, 2018.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from simulator.data.formats import DataError, whole_labels

__all__ = ["read_leaf_dir", "rows_bound"]

# ``"num_samples": [20, 5, ...]``, read from a shard's first bytes by :func:`rows_bound`
_NUM_SAMPLES = re.compile(rb'"num_samples"\s*:\s*\[([0-9,\s]*)\]')
_HEAD_BYTES = 1 << 20


def _features(values: Any, where: str, width: int) -> np.ndarray:
    """One user's ``x`` as float32 ``[n, width]``; DataError starting with ``where`` otherwise."""
    try:
        x = np.asarray(values)
    except ValueError as exc:
        raise DataError(
            f"{where}: x is not a list of samples of {width} numbers (ragged or null rows)"
        ) from exc
    if x.ndim >= 1 and len(x) == 0:
        return np.empty((0, width), dtype=np.float32)
    if x.dtype.kind not in "iuf":
        bad = [v for v in x.ravel().tolist() if not _number(v)][:1]
        raise DataError(f"{where}: x holds {(bad or [x.dtype])[0]!r}, not a number")
    if x.ndim != 2:
        raise DataError(f"{where}: x has shape {x.shape}, expected [samples, {width}]")
    if x.shape[1] != width:
        raise DataError(f"{where}: samples have {x.shape[1]} values, expected {width}")
    if x.dtype.kind == "f" and not np.isfinite(x).all():
        raise DataError(f"{where}: x holds NaN or infinite values")
    return x.astype(np.float32)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _read_shard(f: Path, width: int, num_classes: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each listed user's (id, x, y) from one shard, checked."""
    try:
        doc = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DataError(f"{f}: invalid JSON ({exc})") from exc
    except OSError as exc:
        raise DataError(f"{f}: cannot read file ({exc})") from exc
    if not isinstance(doc, dict):
        raise DataError(f"{f}: not a LEAF file, the top level is a {type(doc).__name__}")
    for key, kind in (("users", list), ("user_data", dict)):
        if not isinstance(doc.get(key), kind):
            got = "missing" if key not in doc else f"a {type(doc[key]).__name__}"
            raise DataError(f"{f}: not a LEAF file, field {key!r} is {got}")
    users, user_data = doc["users"], doc["user_data"]
    out = []
    for user in users:
        entry = user_data.get(str(user))
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise DataError(f"{f}: user {user!r} has no user_data entry with 'x' and 'y'")
        where = f"{f}: user {user!r}"
        x = _features(entry["x"], where, width)
        y = whole_labels(entry["y"], where, num_classes)
        if len(x) != len(y):
            raise DataError(f"{where} has {len(x)} x but {len(y)} y")
        out.append((str(user), x, y))
    declared = doc.get("num_samples")
    if declared is not None:
        if not isinstance(declared, list):
            raise DataError(f"{f}: num_samples is a {type(declared).__name__}, expected a list")
        if len(declared) != len(users):
            raise DataError(f"{f}: num_samples has {len(declared)} entries for {len(users)} users")
        for (user, _, y), n in zip(out, declared, strict=True):
            if n != len(y):
                raise DataError(
                    f"{f}: num_samples gives {n!r} for user {user!r}, who has {len(y)} samples"
                )
    return out


def read_leaf_dir(
    directory: Path, *, width: int, num_classes: int
) -> tuple[list[str], list[np.ndarray], list[np.ndarray]]:
    """Read all LEAF ``*.json`` shards of one split directory, merging users across files.

    Parameters
    ----------
    directory : Path
        The split's directory (``train`` or ``test``).
    width : int
        Values a sample must have (784 for FEMNIST's 28x28 images).
    num_classes : int
        Labels must be whole numbers in ``0..num_classes-1``.

    Returns
    -------
    users, xs, ys : list
        User ids with samples, sorted lexicographically, and each user's ``float32``
        ``[n, width]`` features and ``int64`` labels.

    Raises
    ------
    DataError
        Naming the file (and user) at fault, or the directory when it has no shards or its
        shards hold no samples.
    """
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        raise DataError(f"{directory}: no LEAF *.json files found")
    per_user: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for f in files:
        for user, x, y in _read_shard(f, width, num_classes):
            xs, ys = per_user.setdefault(user, ([], []))
            xs.append(x)
            ys.append(y)
    users = sorted(u for u, (_, ys) in per_user.items() if sum(len(y) for y in ys))
    if not users:
        names = ", ".join(f.name for f in files)
        raise DataError(f"{directory}: no samples: its LEAF files ({names}) list no user with data")
    return (
        users,
        [np.concatenate(per_user[u][0]) for u in users],
        [np.concatenate(per_user[u][1]) for u in users],
    )


def rows_bound(directory: Path, width: int) -> int:
    """At most how many samples the shards of ``directory`` hold, reading only their first bytes.

    A shard's count is the sum of its ``num_samples`` (which :func:`read_leaf_dir` checks
    against the data) when that list comes before ``user_data`` in its first MiB, as LEAF writes
    it; otherwise its size over the fewest bytes a sample takes in JSON (``width`` one-digit
    numbers and their commas, ``2 * width + 1``: 1,569 bytes for FEMNIST).
    """
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    total = 0
    for f in files:
        try:
            bound = f.stat().st_size // (2 * width + 1)
            with f.open("rb") as fh:
                head = fh.read(_HEAD_BYTES)
        except OSError:
            continue  # the loader reports it
        m = _NUM_SAMPLES.search(head)
        data_at = head.find(b'"user_data"')
        if m and (data_at < 0 or m.start() < data_at):
            counts = [int(c) for c in m.group(1).split(b",") if c.strip()]
            bound = min(bound, sum(counts))
        total += bound
    return total
