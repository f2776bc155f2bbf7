"""``create_dataset`` of a staged group: validate arguments, build the staged dataset."""

from __future__ import annotations

import h5py
import numpy as np

from .._backend.chunks import normalize_chunks
from .._backend.hashing import is_vlen_string_dtype
from .._backend.raw_data import Filters
from .._staging import cast_for_storage
from ..errors import IncompatibleDataError, UnsupportedError
from .chunked import InMemorySparseDataset
from .dataset import InMemoryArrayDataset, StagedDatasetBase

__all__ = ["CHUNKS_REQUIRED", "new_array_dataset"]

#: versioned-hdf5 2.6's message when an n-d dataset has no chunks.
CHUNKS_REQUIRED = "chunks must be specified for multi-dimensional datasets"


def new_array_dataset(
    name: str,
    parent,
    *,
    shape=None,
    dtype=None,
    data=None,
    chunks=None,
    fillvalue=None,
    maxshape=None,
    filters: Filters = Filters(),
    default_chunks=None,
    pinned: tuple[tuple[int, ...], object] | None = None,
    require_nd_chunks: bool = False,
) -> InMemoryArrayDataset | InMemorySparseDataset:
    """Validate ``create_dataset`` arguments and build the staged dataset.

    With ``data``, an :class:`InMemoryArrayDataset` holding a copy of it;
    with only ``shape`` (and ``dtype``, ``fillvalue``), an
    :class:`InMemorySparseDataset` that stores only the chunks written to
    (versioned-hdf5's behaviour). ``pinned``: ``(chunks, fill value)`` of the
    raw_data this path already has in the file (a dataset deleted in an
    earlier version and created again), used where ``chunks``/``fillvalue``
    are not given, as versioned-hdf5 2.6 does, so a ``resize`` before the
    commit pads with the fill value the commit will keep.

    Chunks, as versioned-hdf5 2.6 chooses them: ``create_dataset`` (no
    ``default_chunks``) gives 1-d data ``(4096,)`` without ``chunks`` and
    refuses n-d data without them. ``group[name] = value`` (``default_chunks``
    given) takes a pinned raw_data's chunks, else guesses with
    ``default_chunks`` (1-d data: h5py's guess, as versioned-hdf5's commit).
    With ``require_nd_chunks`` (``value`` an array, not a dataset, whose
    chunks versioned-hdf5 keeps), n-d data with neither is staged with a
    placeholder guess and ``chunks_required = True``: its commit raises
    :class:`~xarray_vhdf5.errors.UnsupportedError` (a ``NotImplementedError``,
    "chunks must be specified for multi-dimensional datasets"), as
    versioned-hdf5's does.

    Raises
    ------
    TypeError
        Neither data nor shape given.
    UnsupportedError
        Scalar datasets, ``h5py.Empty``; without ``default_chunks``, an n-d
        dataset whose ``chunks`` is None or True: "chunks must be specified for
        multi-dimensional datasets" (versioned-hdf5 2.6's ``NotImplementedError``).
    IncompatibleDataError
        ``shape`` does not match ``data``; bad chunks or maxshape.
    ValueOverflowError, ValueTypeError, ValueCastError, StringTooLongError
        ``data`` holds a value ``dtype`` cannot hold (see
        :func:`~xarray_vhdf5._staging.cast_for_storage`).
    """
    if isinstance(data, h5py.Empty) or (data is None and shape is None and dtype is not None):
        raise UnsupportedError("empty (h5py.Empty) datasets are not supported by the versioned format")
    if data is None and shape is None:
        raise TypeError("create_dataset needs data= or shape=")
    if data is not None:
        if isinstance(data, (StagedDatasetBase, h5py.Dataset)):
            data = data[()]
        arr = np.asarray(data)
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if is_vlen_string_dtype(np.dtype(dtype)):
                arr = arr.astype(object)
            else:
                arr = cast_for_storage(arr, dtype, name)  # numpy's astype would wrap / truncate silently
        elif arr.dtype.kind == "U":
            arr = arr.astype(object)
        if shape is not None:
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            if int(np.prod(shape)) != arr.size:
                raise IncompatibleDataError(f"shape {shape} does not match the data's shape {arr.shape}")
            arr = arr.reshape(shape)
        arr = np.array(arr, copy=True)
    else:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise IncompatibleDataError(f"shape {shape} has negative lengths")
        # versioned-hdf5's default (h5py's is float32): the same code makes the same file
        dt = np.dtype(dtype if dtype is not None else "f8")
        if dt.kind == "U":
            dt = h5py.string_dtype()
        # Only the array's metadata: the sparse dataset allocates no points.
        arr = np.broadcast_to(np.zeros((), dtype=object if is_vlen_string_dtype(dt) else dt), shape)
    if arr.ndim == 0:
        raise UnsupportedError(
            "Scalar (0-d) datasets are not supported by the versioned format; store a 1-element array"
        )
    if default_chunks is None and arr.ndim > 1 and (chunks is None or chunks is True):
        raise UnsupportedError(
            f"{CHUNKS_REQUIRED}: {name!r} has shape {arr.shape}; give chunks=, one size per axis "
            "(versioned-hdf5 2.6 chooses them for 1-d datasets only)"
        )
    chunks_given = chunks is not None
    fillvalue_given = fillvalue is not None
    if pinned is not None:
        pinned_chunks, pinned_fill = pinned
        if chunks is None and len(pinned_chunks) == arr.ndim:
            chunks = pinned_chunks
        if fillvalue is None and pinned_fill is not None and not is_vlen_string_dtype(arr.dtype):
            fillvalue = pinned_fill
    # n-d, no chunks given nor pinned: a placeholder the commit refuses (versioned-hdf5 2.6).
    chunks_required = require_nd_chunks and chunks is None and arr.ndim > 1
    if chunks is None and default_chunks is not None:
        chunks = default_chunks(arr.shape, arr.dtype)
    chunks = normalize_chunks(chunks, arr.shape, arr.dtype)
    if maxshape is None:
        # Versioned datasets can always grow (their virtual dataset is rebuilt on
        # every commit); versioned-hdf5 behaves the same.
        maxshape = (None,) * arr.ndim
    maxshape = tuple(maxshape) if not isinstance(maxshape, (int, np.integer)) else (maxshape,)
    if len(maxshape) != arr.ndim or any(m is not None and m < s for m, s in zip(maxshape, arr.shape)):
        raise IncompatibleDataError(f"maxshape {maxshape} is incompatible with shape {arr.shape}")
    if is_vlen_string_dtype(arr.dtype):
        fillvalue = None
    elif fillvalue is None:
        fillvalue = np.zeros((), arr.dtype)[()]
    if arr.dtype.kind == "O":
        given = np.dtype(dtype) if dtype is not None else None
        dt = given if given is not None and h5py.check_string_dtype(given) else h5py.string_dtype()
    else:
        dt = arr.dtype
    if data is None:
        return InMemorySparseDataset(
            name,
            parent,
            arr.shape,
            dt,
            chunks,
            fillvalue,
            filters,
            maxshape,
            chunks_given=chunks_given,
            fillvalue_given=fillvalue_given,
        )
    ds = InMemoryArrayDataset(name, parent, arr, chunks, fillvalue, filters, maxshape, chunks_given)
    ds.fillvalue_given = fillvalue_given
    # Not declared by InMemoryArrayDataset (wrappers/dataset.py) yet: read with getattr by the commit.
    ds.chunks_required = chunks_required  # type: ignore[attr-defined]
    ds._dtype = dt
    return ds
