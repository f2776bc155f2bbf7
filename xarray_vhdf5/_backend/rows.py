"""Whole-row reads and writes of the format's datasets, for a commit's small transfers.

A commit writes a few rows at the end of datasets: new chunks to ``raw_data``,
their digests to the ``hash_table``, one row and one name to the version index;
and it reads the last row of a hash table back to check it
(:func:`~xarray_vhdf5._backend.hashtable.table_state`). Through h5py's
low-level API (``get_space``, ``select_hyperslab``, ``create_simple``,
``write``) each transfer is mostly h5py making and registering a Python object
for every dataspace; the compiled kernel ``_ext/rowtools.pyx``
makes the same libhdf5 calls (``H5Sselect_hyperslab`` + ``H5Dwrite`` /
``H5Dread``, HDF5 User Guide, "Data Transfer") without them, several times
faster (``docs/benchmarks.md``, "Costs of single operations").

The functions here check the rows against the dataset, then use the kernel,
or h5py's low-level calls, the reference path, when the kernels are not built
or the pure-Python ones are selected (``XARRAY_VHDF5_KERNELS=python``).
``tests/test_rows.py`` checks that both transfer the same points.
"""

from __future__ import annotations

import numpy as np
from h5py import h5d, h5s

from ._kernels import rowtools as _rowtools  # None if not built: every use checks
from .h5objects import memory_type
from .transfer import get_kernel_backend

__all__ = ["dataset_shape", "read_rows", "write_rows"]


def _kernel():
    """The compiled row kernel, or None (not built, or the Python kernels selected)."""
    return _rowtools if _rowtools is not None and get_kernel_backend() == "cython" else None


def _memory_type(dtype: np.dtype, verb: str):
    mtype = memory_type(dtype) if not dtype.hasobject else None
    if mtype is None:
        raise TypeError(f"cannot {verb} rows of dtype {dtype}: fixed-size numbers, bools, bytes or records only")
    return mtype


def _check(dsid: h5d.DatasetID, start: int, shape: tuple[int, ...], verb: str) -> None:
    """Raise if the rows do not fit the dataset (the kernel checks it itself)."""
    have = dsid.shape
    if len(shape) != len(have):
        raise ValueError(f"cannot {verb} rows of shape {shape} in a dataset of shape {have}: rank differs")
    if start < 0 or start + shape[0] > have[0] or any(s > h for s, h in zip(shape[1:], have[1:])):
        raise IndexError(
            f"cannot {verb} rows {start} to {start + shape[0]} of shape {shape} in a dataset of shape {have}"
        )


def _transfer(dsid: h5d.DatasetID, start: int, array: np.ndarray, write: bool) -> None:
    verb = "write" if write else "read"
    shape = array.shape
    mtype = _memory_type(array.dtype, verb)
    kernel = _kernel()
    if kernel is not None and start >= 0:
        call = kernel.write_rows if write else kernel.read_rows
        if call(dsid.id, start, shape, mtype.id, array.dtype.itemsize, array.reshape(-1).view(np.uint8)) == 0:
            return
    _check(dsid, start, shape, verb)  # raises where the kernel refused
    fspace = dsid.get_space()
    fspace.select_hyperslab((start,) + (0,) * (len(shape) - 1), shape)
    if write:
        dsid.write(h5s.create_simple(shape), fspace, array, mtype=mtype)
    else:
        dsid.read(h5s.create_simple(shape), fspace, array, mtype=mtype)


def write_rows(dsid: h5d.DatasetID, start: int, data: np.ndarray) -> None:
    """``dataset[start : start + len(data), :n1, ...] = data``, for a dataset of ``data``'s dtype.

    Parameters
    ----------
    dsid : h5py.h5d.DatasetID
        The dataset, of the same rank as ``data``; long enough (``set_extent``
        first when growing it).
    start : int
        First row (points along axis 0).
    data : numpy.ndarray
        Fixed-size points (numbers, bools, fixed-length bytes, records) of the
        dataset's own dtype:
        they are stored as they are, without conversion.

    Raises
    ------
    TypeError
        ``data`` has no fixed-size HDF5 memory type (objects such as
        variable-length strings, StringDType: write those through h5py).
    ValueError
        Ranks differ.
    IndexError
        The rows reach beyond the dataset's extent.
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed (the compiled path; h5py raises its own errors).
    """
    _transfer(dsid, start, np.ascontiguousarray(data), True)


def read_rows(dsid: h5d.DatasetID, start: int, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` with ``dataset[start : start + len(out), :n1, ...]``; return it.

    Parameters
    ----------
    dsid : h5py.h5d.DatasetID
        The dataset, of the same rank as ``out``.
    start : int
        First row (points along axis 0).
    out : numpy.ndarray
        Writeable and C-contiguous, of fixed-size points of the dtype to read
        as (libhdf5 converts from the stored type when they differ, as h5py's
        ``read_direct`` does).

    Returns
    -------
    numpy.ndarray
        ``out``.

    Raises
    ------
    ValueError
        ``out`` is not writeable and C-contiguous, or ranks differ.
    TypeError
        ``out``'s dtype has no fixed-size HDF5 memory type.
    IndexError
        The rows reach beyond the dataset's extent.
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed (the compiled path).
    """
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writeable C-contiguous array")
    _transfer(dsid, start, out, False)
    return out


def dataset_shape(dsid: h5d.DatasetID) -> tuple[int, ...]:
    """The dataset's current shape (``dsid.shape``), in points.

    h5py makes and registers a dataspace object for it; the kernel asks
    libhdf5 directly (``H5Dget_space`` + ``H5Sget_simple_extent_dims``).

    Parameters
    ----------
    dsid : h5py.h5d.DatasetID
        An open dataset.

    Returns
    -------
    tuple of int
        One length per axis, in points (``()`` for a scalar dataset).

    Raises
    ------
    xarray_vhdf5.errors.HDF5Error
        libhdf5 failed (the compiled path; e.g. a closed dataset).
    """
    kernel = _kernel()
    return kernel.extent(dsid.id) if kernel is not None else dsid.shape
