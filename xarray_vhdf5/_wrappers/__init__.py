"""h5py-like objects: staged (editable) versions and committed (read-only) ones."""

from .attrs import ReadOnlyAttrs, StagedAttrs
from .chunked import InMemoryDataset, InMemorySparseDataset
from .dataset import InMemoryArrayDataset, StagedDatasetBase
from .group import InMemoryGroup
from .readonly import VersionDataset, VersionGroup

#: versioned-hdf5's name for what ``staged_group[name]`` returns: here the base class of
#: every staged dataset, so ``isinstance(obj, DatasetWrapper)`` holds for all of them.
DatasetWrapper = StagedDatasetBase

__all__ = [
    "DatasetWrapper",
    "InMemoryArrayDataset",
    "InMemoryDataset",
    "InMemoryGroup",
    "InMemorySparseDataset",
    "ReadOnlyAttrs",
    "StagedAttrs",
    "StagedDatasetBase",
    "VersionDataset",
    "VersionGroup",
]
