"""The ``.vhdf5`` accessor on xarray Datasets.

Registered through xarray's public extension API
(:func:`xarray.register_dataset_accessor`) when ``xarray_vhdf5`` is imported,
and when the ``vhdf5`` engine opens a file.
"""

from __future__ import annotations

import os

import xarray as xr

from .writer import commit_dataset

__all__ = ["VHDF5DatasetAccessor"]


@xr.register_dataset_accessor("vhdf5")
class VHDF5DatasetAccessor:
    """Versioning operations on a Dataset: ``ds.vhdf5.commit(...)``, ``ds.vhdf5.version``."""

    def __init__(self, dataset: xr.Dataset):
        self._ds = dataset

    @property
    def version(self) -> str | None:
        """The version this Dataset was opened from (None if not opened with engine="vhdf5")."""
        return self._ds.encoding.get("vhdf5_version")

    @property
    def source(self) -> str | None:
        """Path of the file this Dataset was opened from, if any."""
        return self._ds.encoding.get("source")

    def commit(
        self,
        version: str | None = None,
        path: str | os.PathLike | None = None,
        *,
        group: str | None = None,
        prev_version: str | None = None,
        message: str | None = None,
        timestamp=None,
        make_current: bool = True,
    ) -> str:
        """Commit this Dataset as a new version of the file at ``path``.

        Parameters
        ----------
        version : str, optional
            Name of the new version (default ``r<N>``, see
            :func:`~xarray_vhdf5.xr.writer.next_version_name`).
        path : str or os.PathLike
            The versioned HDF5 file (created if missing).
        group, prev_version, message, timestamp, make_current
            See :func:`~xarray_vhdf5.xr.writer.commit_dataset`.

        Returns
        -------
        str
            The new version's name.

        Raises
        ------
        TypeError
            No ``path`` given.
        VersionExistsError, IncompatibleDataError, NotVersionedError
            See :func:`~xarray_vhdf5.xr.writer.commit_dataset`.
        """
        if path is None:
            raise TypeError("commit() needs path=: the versioned HDF5 file to commit into")
        return commit_dataset(
            self._ds, path, version, group=group, prev_version=prev_version,
            message=message, timestamp=timestamp, make_current=make_current,
        )
