"""xarray_vhdf5: git-like version history for HDF5 files, native to xarray.

The on-disk format is versioned-hdf5's, so files are interchangeable with the
``versioned-hdf5`` package in both directions.

- ``xr.open_dataset(path, engine="vhdf5", version=...)`` reads any version lazily;
  :func:`open_versions` several at once, stacked along ``version``.
- ``ds.vhdf5.commit(version, path=...)`` commits an xarray Dataset as a version.
- :class:`VersionedHDF5File` is the h5py-level API (versioned-hdf5's);
  :func:`open_file` opens a file for it with every commit journaled.
- :class:`VersionStore` is a version as a zarr-python 3 store
  (``xr.open_zarr(VersionStore(path, version=...))``); imported on first use,
  so that ``import xarray_vhdf5`` does not import zarr.
"""

from . import errors
from .errors import (
    AxisOutOfBoundsError,
    ClosedFileError,
    ConflictError,
    CorruptFileError,
    DatasetMismatchError,
    DatasetNotFoundError,
    FileBusyError,
    HDF5Error,
    IncompatibleDataError,
    NotHDF5Error,
    NotVersionedError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    StaleVersionError,
    UnsupportedError,
    VersionExistsError,
    VersionKeyTypeError,
    VersionNotFoundError,
    VHDF5Error,
)
from .versions import (
    MergeReport,
    VersionedHDF5File,
    cherry_pick,
    create_branch,
    create_tag,
    delete_branch,
    delete_tag,
    delete_version,
    delete_versions,
    expire,
    list_branches,
    list_tags,
    merge,
    modify_metadata,
    repack,
    reset_branch,
)
from .versions.mutation import open_file
from .wrappers import (
    DatasetWrapper,
    InMemoryArrayDataset,
    InMemoryDataset,
    InMemoryGroup,
    InMemorySparseDataset,
    VersionDataset,
    VersionGroup,
)
from .xr import VHDF5BackendEntrypoint, commit_dataset, open_versions

__version__ = "0.1.0"

__all__ = [
    "AxisOutOfBoundsError",
    "ClosedFileError",
    "ConflictError",
    "CorruptFileError",
    "DatasetMismatchError",
    "DatasetNotFoundError",
    "DatasetWrapper",
    "FileBusyError",
    "HDF5Error",
    "InMemoryArrayDataset",
    "InMemoryDataset",
    "InMemoryGroup",
    "InMemorySparseDataset",
    "IncompatibleDataError",
    "MergeReport",
    "NotHDF5Error",
    "NotVersionedError",
    "ReadOnlyError",
    "RefExistsError",
    "RefNotFoundError",
    "StaleVersionError",
    "UnsupportedError",
    "VHDF5BackendEntrypoint",
    "VHDF5Error",
    "VersionDataset",
    "VersionExistsError",
    "VersionGroup",
    "VersionKeyTypeError",
    "VersionNotFoundError",
    "VersionStore",
    "VersionedHDF5File",
    "__version__",
    "cherry_pick",
    "commit_dataset",
    "create_branch",
    "create_tag",
    "delete_branch",
    "delete_tag",
    "delete_version",
    "delete_versions",
    "errors",
    "expire",
    "list_branches",
    "list_tags",
    "merge",
    "modify_metadata",
    "open_file",
    "open_versions",
    "repack",
    "reset_branch",
]


#: Names of the zarr layer (xarray_vhdf5.store), imported on first use.
_STORE_NAMES = frozenset({"VersionStore"})


def __getattr__(name: str):
    if name in _STORE_NAMES:
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module 'xarray_vhdf5' has no attribute {name!r}")
