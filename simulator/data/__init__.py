"""Datasets, federated partitioning and per-client feature shift for FedSentry."""

from .datasets import DATASETS, DataError, Dataset, load_dataset
from .partition import PARTITIONERS, partition, split_public
from .synthetic import feature_shift

__all__ = [
    "Dataset",
    "DataError",
    "DATASETS",
    "load_dataset",
    "PARTITIONERS",
    "partition",
    "split_public",
    "feature_shift",
]
