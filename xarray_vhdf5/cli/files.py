"""Opening the FILE argument of ``vhdf5 log`` / ``vhdf5 diff``, with a clear error for non-HDF5 files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import h5py

from ..backend.signature import not_hdf5_error

__all__ = ["NOT_VERSIONED_HINT", "open_read_only"]

#: Appended to the message for a file that is not HDF5.
NOT_VERSIONED_HINT = (
    "hence not a versioned HDF5 file; to version its data, open it with xarray and commit it "
    "(ds.vhdf5.commit(version, path=...))"
)


@contextmanager
def open_read_only(path: str | os.PathLike) -> Iterator[h5py.File]:
    """Open ``path`` read-only with h5py; the file is closed on exit.

    Parameters
    ----------
    path : str or os.PathLike
        The file to open.

    Yields
    ------
    h5py.File

    Raises
    ------
    NotHDF5Error
        The file is readable but not an HDF5 file (e.g. netCDF-3), so not a
        versioned file either; the message names the file and what it is.
    OSError
        Any other failure to open it (h5py's error, unchanged).
    """
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        error = not_hdf5_error(path, hint=NOT_VERSIONED_HINT)
        if error is None:
            raise
        raise error from err
    with f:
        yield f
