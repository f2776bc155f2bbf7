"""xarray_vhdf5: git-like version history for HDF5 files, native to xarray.

The on-disk format is versioned-hdf5's, so files are interchangeable with the
``versioned-hdf5`` package in both directions.

- ``xr.open_dataset(path, engine="vhdf5", version=...)`` reads any version lazily;
  :func:`open_versions` several at once, stacked along ``version``.
- ``ds.vhdf5.commit(version, path=...)`` commits an xarray Dataset as a version.
- :class:`VersionedHDF5File` is the h5py-level API (versioned-hdf5's);
  :func:`open_file` opens a file for it with every commit journaled.
- :class:`VersionStore` is a version as a zarr-python 3 store
  (``xr.open_zarr(VersionStore(path, version=...))``).

The names are imported from their modules on first use (PEP 562): xarray
imports this package whenever it lists its engines (the ``vhdf5`` entry point
lives in it), and that must not load h5py, the version history, zarr or the
compiled kernels. ``import xarray_vhdf5`` registers the ``.vhdf5`` accessors,
which load on first use, without importing xarray: if xarray is not imported
yet, they are registered right after its import (:mod:`xarray_vhdf5._accessors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _accessors, errors
from ._lazy import lazy_attribute
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
    MemoryBudgetError,
    NotHDF5Error,
    NotVersionedError,
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    RepairedFileWarning,
    StaleVersionError,
    UnsupportedError,
    VersionExistsError,
    VersionKeyTypeError,
    VersionNotFoundError,
    VHDF5Error,
)

if TYPE_CHECKING:
    from ._versions import (
        MergeReport,
        RechunkReport,
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
        modify_metadata,
        reset_branch,
    )
    from ._versions.branchmerge import merge
    from ._versions.mapfill import fill_chunk_maps
    from ._versions.mutation import open_file
    from ._versions.rechunk import rechunk
    from ._versions.repack import repack
    from ._wrappers import (
        DatasetWrapper,
        InMemoryArrayDataset,
        InMemoryDataset,
        InMemoryGroup,
        InMemorySparseDataset,
        VersionDataset,
        VersionGroup,
    )
    from .store import VersionStore
    from .xr import commit_dataset, open_versions
    from .xr._engine import VHDF5BackendEntrypoint
    from .xr._export import export_netcdf, export_zarr, merge_files, split_version

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
    "MemoryBudgetError",
    "MergeReport",
    "NotHDF5Error",
    "NotVersionedError",
    "ReadOnlyError",
    "RechunkReport",
    "RefExistsError",
    "RefNotFoundError",
    "RepairedFileWarning",
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
    "export_netcdf",
    "export_zarr",
    "fill_chunk_maps",
    "list_branches",
    "list_tags",
    "merge",
    "merge_files",
    "modify_metadata",
    "open_file",
    "open_versions",
    "rechunk",
    "repack",
    "reset_branch",
    "split_version",
]


#: The modules the lazily imported names come from.
_HOMES = {
    **dict.fromkeys(
        (
            "MergeReport",
            "VersionedHDF5File",
            "cherry_pick",
            "create_branch",
            "create_tag",
            "delete_branch",
            "delete_tag",
            "delete_version",
            "delete_versions",
            "expire",
            "list_branches",
            "list_tags",
            "modify_metadata",
            "RechunkReport",
            "reset_branch",
        ),
        "_versions",
    ),
    **dict.fromkeys(("export_netcdf", "export_zarr", "merge_files", "split_version"), "xr._export"),
    "open_file": "_versions.mutation",
    "fill_chunk_maps": "_versions.mapfill",
    "merge": "_versions.branchmerge",
    "rechunk": "_versions.rechunk",
    "repack": "_versions.repack",
    **dict.fromkeys(
        (
            "DatasetWrapper",
            "InMemoryArrayDataset",
            "InMemoryDataset",
            "InMemoryGroup",
            "InMemorySparseDataset",
            "VersionDataset",
            "VersionGroup",
        ),
        "_wrappers",
    ),
    "VHDF5BackendEntrypoint": "xr._engine",
    "commit_dataset": "xr._writer",
    "open_versions": "xr._stacked",
    "VersionStore": "store",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, from meson.build (read on first use)
        from importlib.metadata import version

        return version("xarray_vhdf5")
    return lazy_attribute(__name__, _HOMES, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_accessors.install_when_imported()
