"""Datasets, federated partitioning, client data sources and per-client feature shift.

Dataset loaders (:mod:`.datasets`) and partition schemes (:mod:`.partitions`) are plugins, one
file each, registered by name; client data sources (:mod:`.clients`, :mod:`.virtual`,
:mod:`.generated`) give a selected client's rows on demand.
"""

from .clients import ClientData, NaturalData, PartitionData, with_local_test
from .datasets import DATASETS, DataError, Dataset, dataset_path, load_dataset
from .generated import SyntheticDevices, synthetic_test_set
from .holdout import split_public, stratified_split
from .partitions import PARTITIONS, partition
from .rows import ClientRows
from .synthetic import feature_shift
from .virtual import VirtualData

__all__ = [
    "DATASETS",
    "PARTITIONS",
    "ClientData",
    "ClientRows",
    "DataError",
    "Dataset",
    "NaturalData",
    "PartitionData",
    "SyntheticDevices",
    "VirtualData",
    "dataset_path",
    "feature_shift",
    "load_dataset",
    "partition",
    "split_public",
    "stratified_split",
    "synthetic_test_set",
    "with_local_test",
]
