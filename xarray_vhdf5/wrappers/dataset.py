"""h5py-like datasets of a staged version (editable, held in memory until commit).

- :class:`StagedDatasetBase`: what every staged dataset shares (metadata,
  attrs, the numpy/h5py protocol, validation of writes and resizes).
- :class:`InMemoryArrayDataset`: created in this version from data, its
  points in a numpy array (or, for dask data, a chunk source streamed at commit).

The datasets held chunk by chunk in a ``StagedChangesArray`` (an existing
dataset, a sparse one) are in :mod:`.chunked`.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..backend.raw_data import Filters, reported_fillvalue
from ..errors import IncompatibleDataError
from .attrs import StagedAttrs
from .dataset_api import DatasetAPI

__all__ = ["AsStrView", "AstypeView", "InMemoryArrayDataset", "StagedDatasetBase", "check_resize"]


def check_resize(shape, maxshape, new_shape) -> tuple[int, ...]:
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


class AstypeView:
    """Reads of a staged dataset converted to another dtype (h5py's ``Dataset.astype``).

    ``view[index]`` reads ``dataset[index]`` and converts with numpy's unsafe
    casting, as h5py's ``AstypeWrapper`` converts through libhdf5.
    """

    def __init__(self, dataset: StagedDatasetBase, dtype: Any):
        self.dataset = dataset
        self.dtype = np.dtype(dtype)

    def __getitem__(self, index) -> np.ndarray:
        return np.asarray(self.dataset[index]).astype(self.dtype)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[()]
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return len(self.dataset)


class AsStrView:
    """Reads of a staged string dataset decoded to ``str`` (h5py's ``Dataset.asstr``)."""

    def __init__(self, dataset: StagedDatasetBase, encoding: str = "utf-8", errors: str = "strict"):
        self.dataset = dataset
        self.encoding = encoding
        self.errors = errors

    def __getitem__(self, index):
        raw = self.dataset[index]
        decode = np.frompyfunc(
            lambda v: v.decode(self.encoding, self.errors) if isinstance(v, bytes) else str(v), 1, 1
        )
        return decode(np.asarray(raw, dtype=object))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.asarray(self[()], dtype=object)
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return len(self.dataset)


class StagedDatasetBase(DatasetAPI):
    """What every staged dataset shares: metadata, attrs, numpy-like protocol.

    h5py's further conveniences (``nbytes``, ``file``, ``fields``, ``iter_chunks``,
    ``read_direct``, ``write_direct``) come from :class:`.dataset_api.DatasetAPI`.
    """

    _data: np.ndarray | None

    def __init__(self, name: str, parent, dtype, chunks, fillvalue, filters: Filters, maxshape):
        self.name = name  # path inside the version, "/"-separated
        self.parent = parent
        self._dtype = np.dtype(dtype)
        self.chunks = tuple(int(c) for c in chunks)
        self.storage_fill = fillvalue
        self.filters = filters
        self.maxshape = tuple(maxshape)
        self.attrs: StagedAttrs = StagedAttrs()

    @property
    def dataset(self) -> StagedDatasetBase:
        """The staged dataset itself: versioned-hdf5's ``DatasetWrapper.dataset``.

        versioned-hdf5 hands out a ``DatasetWrapper`` around its in-memory dataset
        (swapped when the dataset is resized or rewritten); here the staged
        dataset is the object (``DatasetWrapper`` names its base class), so code
        reaching for ``.dataset`` gets the same object back.
        """
        return self

    @property
    def fillvalue(self) -> Any:
        """The fill value, as h5py's ``Dataset.fillvalue`` reports it.

        Points never written read as it. ``b""`` for variable-length strings,
        as h5py and versioned-hdf5 2.6 say, though their raw_data stores no
        fill value (``storage_fill`` is None then; FORMAT.md, "raw_data").
        Read-only, as in h5py: a dataset's fill value is fixed by its first
        version (``modify_metadata`` changes it).
        """
        return reported_fillvalue(self.dtype, self.storage_fill)

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

    def len(self) -> int:
        """Length of the first axis (h5py's ``Dataset.len()``, for lengths beyond ``sys.maxsize``)."""
        return int(self.shape[0])

    def asstr(self, encoding: str = "utf-8", errors: str = "strict") -> AsStrView:
        """Reads decoded to ``str`` (h5py's ``Dataset.asstr``): ``ds.asstr()[:]``.

        Raises
        ------
        TypeError
            The dataset does not hold strings (as h5py).
        """
        if h5py.check_string_dtype(self.dtype) is None and self.dtype.kind not in "OST":
            raise TypeError("dset.asstr() can only be used on datasets with an HDF5 string datatype")
        return AsStrView(self, encoding, errors)

    def astype(self, dtype) -> AstypeView:
        """Reads converted to ``dtype`` (h5py's ``Dataset.astype``): ``ds.astype("f4")[:10]``."""
        return AstypeView(self, dtype)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}: shape {self.shape}, type {self.dtype.str!r}>"

    # editing ---------------------------------------------------------------
    def __getitem__(self, index):
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def _set(self, index, value: np.ndarray) -> None:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def _resize_to(self, new_shape: tuple[int, ...]) -> None:
        raise NotImplementedError  # pragma: no cover - defined by subclasses

    def _check_open(self) -> None:
        """Refuse edits once the version was committed (they would be silently lost)."""
        if self.parent is not None:
            self.parent._check_open()

    def __setitem__(self, index, value) -> None:
        """``ds[index] = value`` with h5py's index semantics (numpy's, a superset).

        Raises
        ------
        ReadOnlyError
            The staged version was already committed.
        IndexError, TypeError, ValueError
            Where numpy raises them: a bad index, a value that cannot be cast
            to :attr:`dtype` or broadcast to the selection.
        UnsupportedError
            Valid numpy indices the staging engine does not map (more than
            one array index, ``np.newaxis``).
        """
        self._check_open()
        value = np.asarray(value)
        if value.dtype.kind in "SU" and self.dtype.kind == "O":  # elements as Python bytes / str, as h5py reads them
            value = value.astype(object)
        if value.ndim == 0 and self.dtype.kind == "O":
            # A 0-d array stored into an object array would become the element itself.
            value = value[()]
        self._set(index, value)

    def resize(self, size, axis: int | None = None) -> None:
        """Change the shape (h5py semantics); new points read as the fill value.

        Parameters
        ----------
        size : int or tuple of int
            The new shape, or with ``axis`` the new length of that axis, in points.
        axis : int, optional

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
        self._resize_to(check_resize(self.shape, self.maxshape, size))


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

    def __getitem__(self, index):
        return self._data[index]

    def _set(self, index, value: np.ndarray) -> None:
        self._data[index] = value

    def _resize_to(self, new_shape: tuple[int, ...]) -> None:
        self._data = _resized(self._data, new_shape, self.storage_fill)

    @property
    def data(self) -> np.ndarray:
        """The staged points (numpy array)."""
        return self._data
