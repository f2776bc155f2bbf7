"""h5py-like objects: staged (editable) versions and committed (read-only) ones."""

from .attrs import ReadOnlyAttrs, StagedAttrs
from .dataset import InMemoryArrayDataset, InMemoryDataset
from .group import InMemoryGroup
from .readonly import VersionDataset, VersionGroup

__all__ = [
    "InMemoryArrayDataset",
    "InMemoryDataset",
    "InMemoryGroup",
    "ReadOnlyAttrs",
    "StagedAttrs",
    "VersionDataset",
    "VersionGroup",
]
