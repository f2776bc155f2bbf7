"""h5py-like datasets of a staged version (editable, held in memory until commit).

- :class:`StagedDatasetBase`: what every staged dataset shares (metadata,
  attrs, the numpy/h5py protocol, validation of writes and resizes).
- :class:`InMemoryArrayDataset`: created in this version from data, its
  points in a numpy array (or, for dask data, a chunk source streamed at commit).

The datasets held chunk by chunk in a ``StagedChangesArray`` (an existing
dataset, a sparse one) are in :mod:`.chunked`.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from .._backend.raw_data import Filters, reported_fillvalue
from .._staging import cast_for_storage
from ..errors import AxisOutOfBoundsError, IncompatibleDataError, ReadOnlyError
from .attrs import StagedAttrs
from .dataset_api import DatasetAPI

__all__ = ["AsStrView", "AstypeView", "InMemoryArrayDataset", "StagedDatasetBase", "check_resize", "resize_shape"]


def _length(n, size) -> int:
    """One axis length of a ``resize`` argument, as ``int()`` takes it (versioned-hdf5 2.6)."""
    if isinstance(n, (str, bytes)) or (isinstance(n, np.ndarray) and n.ndim > 0):
        raise TypeError(f"resize: lengths must be integers, got {n!r} in {size!r}")
    try:
        return int(n)
    except TypeError:
        raise TypeError(f"resize: lengths must be integers, got {n!r} in {size!r}") from None


def resize_shape(shape: tuple[int, ...], size, axis=None) -> tuple[int, ...]:
    """The shape ``ds.resize(size, axis)`` asks for, from h5py's and versioned-hdf5's arguments.

    Parameters
    ----------
    shape : tuple of int
        The dataset's current shape.
    size : int, sequence of int or numpy array
        The new shape (a sequence or a 1-d array), or the new length of the first
        axis of a 1-d dataset, or with ``axis`` the new length of that axis. A
        length is anything ``int()`` takes but a string: a numpy integer, a 0-d
        array, a float (truncated, as versioned-hdf5 2.6 does).
    axis : int, optional
        The axis to resize; negative counts from the last.

    Returns
    -------
    tuple of int
        The new shape, Python ints. Not checked against the number of axes,
        ``maxshape`` or negative lengths: :func:`check_resize` does.

    Raises
    ------
    AxisOutOfBoundsError
        ``axis`` is not in ``[-ndim, ndim)`` (numpy's ``AxisError``: a ``ValueError``
        and an ``IndexError``, as versioned-hdf5 2.6 raises).
    TypeError
        ``axis`` is not an integer; with ``axis``, ``size`` is not one length;
        a length is not a number.
    """
    if axis is not None:
        try:
            axis = operator.index(axis)
        except TypeError:
            raise TypeError(f"resize: axis must be an integer, got {axis!r}") from None
        if not -len(shape) <= axis < len(shape):
            raise AxisOutOfBoundsError(axis, len(shape), "resize")
        if not (np.isscalar(size) or (isinstance(size, np.ndarray) and size.ndim == 0)):
            raise TypeError(f"resize: size must be an integer when axis is given, got {size!r}")
        new_shape = list(shape)
        new_shape[axis] = _length(size, size)
        return tuple(new_shape)
    if np.isscalar(size) or (isinstance(size, np.ndarray) and size.ndim == 0):
        return (_length(size, size),)
    try:
        lengths = list(size)
    except TypeError:
        raise TypeError(f"resize: size must be an integer or a sequence of integers, got {size!r}") from None
    return tuple(_length(n, size) for n in lengths)


def check_resize(shape, maxshape, new_shape) -> tuple[int, ...]:
    """``new_shape`` (from :func:`resize_shape`) as Python ints, checked against the dataset.

    Raises
    ------
    IncompatibleDataError
        Another number of axes than ``shape``, a negative length, or a length
        beyond ``maxshape``.
    """
    new_shape = (new_shape,) if isinstance(new_shape, (int, np.integer)) else tuple(new_shape)
    if len(new_shape) != len(shape):
        raise IncompatibleDataError(f"resize to {new_shape}: the dataset has {len(shape)} axes, got {len(new_shape)}")
    for axis, (n, m) in enumerate(zip(new_shape, maxshape)):
        if n < 0:
            raise IncompatibleDataError(f"resize to {new_shape}: negative length on axis {axis}")
        if m is not None and n > m:
            raise IncompatibleDataError(f"resize to {new_shape} exceeds maxshape {tuple(maxshape)} on axis {axis}")
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


class _ReadView:
    """What h5py's views of a dataset (``AbstractView``) share: the dataset's shape, read-only.

    ``shape``, ``ndim``, ``size`` and ``len()`` are the dataset's at the time
    they are asked (views read the dataset lazily, as h5py's do); iterating
    reads the rows of the first axis one at a time. Writing raises
    :class:`~xarray_vhdf5.errors.ReadOnlyError`.
    """

    dataset: StagedDatasetBase

    if TYPE_CHECKING:  # each view defines its reads

        def __getitem__(self, index: Any) -> Any: ...

    @property
    def shape(self) -> tuple[int, ...]:
        return self.dataset.shape

    @property
    def ndim(self) -> int:
        return self.dataset.ndim

    @property
    def size(self) -> int:
        return self.dataset.size

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator:
        """The rows of the first axis, read one at a time, as iterating over a numpy array."""
        for i in range(len(self)):
            yield self[i]

    def __setitem__(self, index, value) -> None:
        """Refused: the view is read-only (versioned-hdf5 2.6's views too).

        Raises
        ------
        ReadOnlyError
            Always (a ``ValueError`` and a ``PermissionError``); write to the dataset.
        """
        raise ReadOnlyError(f"{type(self).__name__} of {self.dataset.name!r} is read-only; write to the dataset itself")


class AstypeView(_ReadView):
    """Reads of a staged dataset converted to another dtype (h5py's ``Dataset.astype``).

    ``view[index]`` reads ``dataset[index]`` and converts with numpy's unsafe
    casting, as h5py's ``AstypeWrapper`` converts through libhdf5: an array,
    or a numpy scalar where the selection is one point. ``dtype`` is the
    target dtype; ``shape``, ``ndim``, ``size``, ``len()`` and iteration are
    the dataset's (see :class:`_ReadView`); ``np.asarray(view)`` reads it all.
    The view is read-only: ``view[i] = x`` raises
    :class:`~xarray_vhdf5.errors.ReadOnlyError` (a ``ValueError``).
    """

    def __init__(self, dataset: StagedDatasetBase, dtype: Any):
        self.dataset = dataset
        self.dtype = np.dtype(dtype)

    def __getitem__(self, index):
        out = np.asarray(self.dataset[index]).astype(self.dtype)  # a copy, never a view of staged points
        return out[()] if out.ndim == 0 else out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.asarray(self[()])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"<AstypeView of {self.dataset!r} as {self.dtype.str!r}>"


class AsStrView(_ReadView):
    """Reads of a staged string dataset decoded to ``str`` (h5py's ``Dataset.asstr``).

    ``shape``, ``ndim``, ``size``, ``len()`` and iteration are the dataset's
    (see :class:`_ReadView`); the view is read-only.
    """

    dtype = np.dtype(object)

    def __init__(self, dataset: StagedDatasetBase, encoding: str = "utf-8", errors: str = "strict"):
        self.dataset = dataset
        self.encoding = encoding
        self.errors = errors

    def __getitem__(self, index):
        raw = self.dataset[index]
        decode = np.frompyfunc(lambda v: v.decode(self.encoding, self.errors) if isinstance(v, bytes) else str(v), 1, 1)
        return decode(np.asarray(raw, dtype=object))

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.asarray(self[()], dtype=object)
        return out if dtype is None else out.astype(dtype)


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
        and swaps the dataset inside when a write covers every point (for an
        ``InMemoryArrayDataset``); here the staged dataset is the object
        (``DatasetWrapper`` names its base class), so code reaching for
        ``.dataset`` gets the same object back, and an ``InMemoryDataset`` whose
        every point is written becomes an ``InMemoryArrayDataset`` itself
        (:meth:`~xarray_vhdf5._wrappers.chunked.InMemoryDataset._become_array`).
        """
        return self

    @property
    def fillvalue(self) -> Any:
        """The fill value, as h5py's ``Dataset.fillvalue`` reports it.

        Points never written read as it. ``b""`` for variable-length strings,
        as h5py and versioned-hdf5 2.6 say, though their raw_data stores no
        fill value (``storage_fill`` is None then; ``docs/format.md``, "Layout").
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
            Where numpy raises them: a bad index, a value that cannot be
            broadcast to the selection.
        ValueOverflowError, ValueTypeError, ValueCastError
            A value :attr:`dtype` cannot hold, where numpy raises
            ``OverflowError`` / ``TypeError`` / ``ValueError`` for such a scalar
            (``2**40`` or ``inf`` into int32, complex into a real dtype, NaN into
            integers), also given as an array of another dtype (which numpy
            would cast silently); see :func:`~xarray_vhdf5._staging.casting.cast_for_storage`.
            Nothing is written.
        StringTooLongError
            A string longer than a fixed-width string dtype holds (numpy
            truncates it); nothing is written.
        UnsupportedError
            Valid numpy indices the staging engine does not map (more than
            one array index, ``np.newaxis``).
        """
        self._check_open()
        if self.dtype.kind != "O":
            value = cast_for_storage(value, self.dtype, self.name)  # one check per assignment
        else:
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
        size : int, sequence of int or numpy array
            The new shape, or with ``axis`` the new length of that axis, in points
            (numpy integers, 0-d and 1-d arrays too; see :func:`resize_shape`).
        axis : int, optional
            The axis to resize; negative counts from the last.

        Raises
        ------
        AxisOutOfBoundsError
            ``axis`` is not one of the dataset's axes (numpy's ``AxisError``, a
            ``ValueError`` and an ``IndexError``, as in versioned-hdf5 2.6).
        IncompatibleDataError
            Wrong number of axes, a negative length, or beyond ``maxshape``.
        ReadOnlyError
            The staged version was already committed.
        TypeError
            ``size`` is not one or more numbers (one with ``axis``); ``axis`` is not
            an integer.
        """
        self._check_open()
        self._resize_to(check_resize(self.shape, self.maxshape, resize_shape(self.shape, size, axis)))


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

    _data: np.ndarray  # never None here

    def __init__(self, name, parent, data: np.ndarray, chunks, fillvalue, filters, maxshape, chunks_given: bool = True):
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
