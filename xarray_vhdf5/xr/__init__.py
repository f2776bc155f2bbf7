"""xarray integration: the ``vhdf5`` read engine, the writer and the ``.vhdf5`` accessor."""

from . import accessor  # registers the .vhdf5 accessor (xarray's extension API)
from .accessor import VHDF5DatasetAccessor
from .array import VersionedBackendArray
from .engine import VHDF5BackendEntrypoint, open_version_group
from .writer import commit_dataset, next_version_name

__all__ = [
    "VHDF5BackendEntrypoint",
    "VHDF5DatasetAccessor",
    "VersionedBackendArray",
    "accessor",
    "commit_dataset",
    "next_version_name",
    "open_version_group",
]
