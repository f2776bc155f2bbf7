"""h5py-like datasets of a staged version (editable, held in memory until commit).

- :class:`InMemoryArrayDataset`: created in this version, its points in a numpy array.
- :class:`InMemoryDataset`: a dataset of the previous version. Until it is
  written to or resized it is only a reference to the previous version's
  virtual dataset; commit then reuses that mapping as is, reading nothing.
  The first write loads its points into memory (the StagedChangesArray engine,
  which keeps only the touched chunks, replaces this).
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..backend.chunks import normalize_chunks
from ..backend.hashing import is_vlen_string_dtype
from ..backend.raw_data import Filters
from ..errors import IncompatibleDataError, UnsupportedError
from .attrs import RESERVED_ATTRS, StagedAttrs

__all__ = ["InMemoryArrayDataset", "InMemoryDataset", "StagedDatasetBase"]


def _check_resize(shape, maxshape, new_shape) -> tuple[int, ...]:
    new_shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
    if len(new_shape) != len(shape):
        raise IncompatibleDataError(
            f"resize to {new_shape}: the dataset has {len(shape)} axes, got {len(new_shape)}"
        )
    for axis, (n, m) in enumerate(zip(new_shape, maxshape)):
        if n < 0:
            raise IncompatibleDataError(f"resize to {new_shape}: negative length on axis {axis}")
        if m is not None and n > m:
            raise IncompatibleDataError(
                f"resize to {new_shape} exceeds maxshape {tuple(maxshape)} on axis {axis}"
            )
    return tuple(int(n) for n in new_shape)


def _resized(data: np.ndarray, new_shape: tuple[int, ...], fillvalue: Any) -> np.ndarray:
    out = np.empty(new_shape, dtype=data.dtype)
    if data.dtype.kind == "O":
        out[...] = b""
    else:
        out[...] = fillvalue if fillvalue is not None else 0
    common = tuple(slice(0, min(a, b)) for a, b in zip(data.shape, new_shape))
    out[common] = data[common]
    return out


class StagedDatasetBase:
    """What every staged dataset shares: metadata, attrs, numpy-like protocol."""

    _data: np.ndarray | None

    def __init__(self, name: str, parent, dtype, chunks, fillvalue, filters: Filters, maxshape):
        self.name = name  # path inside the version, "/"-separated
        self.parent = parent
        self._dtype = np.dtype(dtype)
        self.chunks = tuple(int(c) for c in chunks)
        self.fillvalue = fillvalue
        self.filters = filters
        self.maxshape = tuple(maxshape)
        self.attrs: StagedAttrs = StagedAttrs()

    # numpy / h5py protocol -------------------------------------------------
    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def compression(self):
        return self.filters.compression

    @property
    def compression_opts(self):
        return self.filters.compression_opts

    @property
    def shuffle(self) -> bool:
        return self.filters.shuffle

    @property
    def fletcher32(self) -> bool:
        return self.filters.fletcher32

    @property
    def scaleoffset(self):
        return self.filters.scaleoffset

    def __array__(self, dtype=None, copy=None):
        arr = self[()]
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: shape {self.shape}, type {self.dtype.str!r}>"

    # editing ---------------------------------------------------------------
    def _loaded(self) -> np.ndarray:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def __getitem__(self, index):
        if self._data is None:
            return self._read(index)
        return self._data[index]

    def _check_open(self) -> None:
        """Refuse edits once the version was committed (they would be silently lost)."""
        if self.parent is not None:
            self.parent._check_open()

    def __setitem__(self, index, value) -> None:
        self._check_open()
        data = self._loaded()
        value = np.asarray(value)
        if value.dtype.kind == "U" and data.dtype.kind == "O":
            value = value.astype(object)
        if value.ndim == 0:
            # A 0-d array stored into an object array would become the element itself.
            value = value[()]
        data[index] = value

    def resize(self, size, axis: int | None = None) -> None:
        """Change the shape (h5py semantics); new points read as the fill value.

        Raises
        ------
        IncompatibleDataError
            Wrong number of axes, a negative length, or beyond ``maxshape``.
        ReadOnlyError
            The staged version was already committed.
        """
        self._check_open()
        if axis is not None:
            shape = list(self.shape)
            shape[axis] = int(size)
            size = tuple(shape)
        new_shape = _check_resize(self.shape, self.maxshape, size)
        self._data = _resized(self._loaded(), new_shape, self.fillvalue)

    def _read(self, index):
        raise NotImplementedError  # pragma: no cover


class InMemoryArrayDataset(StagedDatasetBase):
    """A dataset created in the staged version; its points live in a numpy array.

    Parameters
    ----------
    name : str
        Path of the dataset inside the version.
    data : numpy.ndarray
        Its points (copied).
    chunks : tuple of int
        Chunk shape, in points.
    fillvalue : scalar or None
        Fill value (None: 0 of the dtype; variable-length strings have none).
    filters : Filters
        Compression and other HDF5 filters of its raw_data.
    maxshape : tuple of (int or None)
        Largest shape ``resize`` accepts (None: unlimited on that axis).
    """

    def __init__(self, name, parent, data: np.ndarray, chunks, fillvalue, filters, maxshape,
                 chunks_given: bool = True):
        super().__init__(name, parent, data.dtype, chunks, fillvalue, filters, maxshape)
        self._data = data
        #: False when ``chunks`` was guessed: an existing raw_data's chunks then win.
        self.chunks_given = chunks_given
        #: False when no fill value was given: an existing raw_data's fill value then wins.
        self.fillvalue_given = True

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    def _loaded(self) -> np.ndarray:
        return self._data

    @property
    def data(self) -> np.ndarray:
        """The staged points (numpy array)."""
        return self._data


class InMemoryDataset(StagedDatasetBase):
    """A dataset of the previous version, staged for editing in the new version.

    Parameters
    ----------
    name : str
        Path of the dataset inside the version.
    source : h5py.Dataset
        The previous version's virtual dataset (read lazily).
    """

    def __init__(self, name: str, parent, source: h5py.Dataset):
        raw_chunks = tuple(int(c) for c in source.attrs["chunks"])
        raw = source.file[source.attrs["raw_data"]]
        fill = None if is_vlen_string_dtype(source.dtype) else raw.fillvalue
        super().__init__(name, parent, source.dtype, raw_chunks, fill, Filters.of(raw), (None,) * source.ndim)
        self.source = source
        self.origin_name = name  # where its raw_data lives; differs after group.move()
        self._shape = source.shape
        self._data = None
        self.attrs = StagedAttrs(source.attrs, skip=RESERVED_ATTRS)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape if self._data is None else self._data.shape

    @property
    def has_changes(self) -> bool:
        """True once the points were written to or resized (attrs do not count)."""
        return self._data is not None

    def _read(self, index):
        return self.source[index]

    def _loaded(self) -> np.ndarray:
        if self._data is None:
            self._data = self.source[()]
        return self._data


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
) -> InMemoryArrayDataset:
    """Validate ``create_dataset`` arguments and build the staged dataset.

    Raises
    ------
    TypeError
        Neither data nor shape given.
    UnsupportedError
        Scalar datasets, ``h5py.Empty``.
    IncompatibleDataError
        ``shape`` does not match ``data``; bad chunks or maxshape.
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
                arr = arr.astype(dtype)
        elif arr.dtype.kind == "U":
            arr = arr.astype(object)
        if shape is not None:
            shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
            if int(np.prod(shape)) != arr.size:
                raise IncompatibleDataError(
                    f"shape {shape} does not match the data's shape {arr.shape}"
                )
            arr = arr.reshape(shape)
        arr = np.array(arr, copy=True)
    else:
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        dt = np.dtype(dtype if dtype is not None else "f4")
        if is_vlen_string_dtype(dt):
            arr = np.full(shape, b"", dtype=object)
        else:
            arr = np.full(shape, fillvalue if fillvalue is not None else 0, dtype=dt)
    if arr.ndim == 0:
        raise UnsupportedError(
            "scalar (0-d) datasets are not supported by the versioned format; store a 1-element array"
        )
    chunks_given = chunks is not None
    fillvalue_given = fillvalue is not None
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
    ds = InMemoryArrayDataset(name, parent, arr, chunks, fillvalue, filters, maxshape, chunks_given)
    ds.fillvalue_given = fillvalue_given
    if arr.dtype.kind == "O":
        given = np.dtype(dtype) if dtype is not None else None
        ds._dtype = given if given is not None and h5py.check_string_dtype(given) else h5py.string_dtype()
    return ds
