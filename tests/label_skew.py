"""A label-skew statistic shared by the data tests."""

from __future__ import annotations

import numpy as np


def label_tv(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> float:
    """Mean total-variation distance between each client's label histogram and the global one."""
    glob = np.bincount(labels, minlength=num_classes) / len(labels)
    return float(
        np.mean(
            [
                0.5 * np.abs(np.bincount(labels[p], minlength=num_classes) / len(p) - glob).sum()
                for p in parts
            ]
        )
    )
