"""h5py-like objects: staged (editable) versions and committed (read-only) ones."""

from .attrs import ReadOnlyAttrs, StagedAttrs
from .chunked import InMemoryDataset, InMemorySparseDataset
from .dataset import InMemoryArrayDataset
from .group import InMemoryGroup
from .readonly import VersionDataset, VersionGroup

__all__ = [
    "InMemoryArrayDataset",
    "InMemoryDataset",
    "InMemoryGroup",
    "InMemorySparseDataset",
    "ReadOnlyAttrs",
    "StagedAttrs",
    "VersionDataset",
    "VersionGroup",
]
