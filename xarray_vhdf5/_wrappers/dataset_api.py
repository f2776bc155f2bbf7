"""The parts of h5py's ``Dataset`` API a staged dataset adds on top of its own (versioned-hdf5 parity).

versioned-hdf5's staged datasets subclass ``h5py.Dataset`` and so answer
``nbytes``, ``file``, ``iter_chunks``, ``read_direct``, ``fields`` and (it raises
``NotImplementedError`` there) ``write_direct``. :class:`DatasetAPI` gives a
staged dataset the same, with h5py's semantics (h5py's ``Dataset`` documentation),
on top of the dataset's own ``__getitem__`` / ``__setitem__``: reads see the
staged edits, writes are staged like any other edit. One difference:
versioned-hdf5 2.6's ``read_direct`` on a staged dataset returns the previous
version's points, not the staged ones; here it returns what ``ds[...]`` returns.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from .._backend.chunks import chunks_meeting

__all__ = ["DatasetAPI", "FieldsView", "chunk_slices", "empty_selection"]


def empty_selection(shape: tuple[int, ...], dtype: np.dtype, index: Any) -> np.ndarray | None:
    """What h5py returns for ``ds[index]`` when ``index`` selects no point, else None.

    libhdf5 2.0 fails reading an empty selection from a virtual dataset with
    many mappings (``OSError: unable to get selection bounds``; a version's
    dataset has one mapping per chunk), though h5py answers an empty array
    for any other dataset. Called only after such a read failed, so reads
    that work pay nothing: the selection's shape is numpy's, taken on a
    zero-strided stand-in of ``shape`` (no points allocated).

    Parameters
    ----------
    shape : tuple of int
        The dataset's shape, in points.
    dtype : numpy.dtype
        The dataset's dtype (of the array returned).
    index : object
        The index given to ``__getitem__``.

    Returns
    -------
    numpy.ndarray or None
        A new empty array of the selection's shape and ``dtype``, or None when
        ``index`` selects points or is not a numpy index (the caller raises
        the read's own error then).
    """
    if isinstance(index, str) or (isinstance(index, tuple) and any(isinstance(k, str) for k in index)):
        return None  # field names: h5py's own business
    try:
        probe = np.broadcast_to(np.zeros((), dtype=np.uint8), shape)[index]
    except (IndexError, TypeError, ValueError):
        return None
    if probe.size:
        return None
    return np.zeros(probe.shape, dtype=dtype)


class FieldsView:
    """Reads of some fields of a compound staged dataset (h5py's ``Dataset.fields``).

    ``view[index]`` reads ``dataset[index]`` and keeps the fields asked for:
    a compound array of only those fields, or for a single name given as a
    ``str``, that field's array.

    Raises
    ------
    ValueError
        The dataset is not compound, or a name is not one of its fields (as h5py).
    """

    def __init__(self, dataset, names: str | list[str]):
        fields = dataset.dtype.fields
        if fields is None:
            raise ValueError(f"Field names only allowed for compound types, not {dataset.dtype}")
        self.extract = names if isinstance(names, str) else None
        names = [names] if isinstance(names, str) else list(names)
        for name in names:
            if name not in fields:
                raise ValueError(f"Field {name} does not appear in this type: {list(fields)}")
        self.dataset = dataset
        self.names = names
        self.dtype = np.dtype([(name, fields[name][0]) for name in names])  # packed, as h5py reads them

    def __getitem__(self, index) -> np.ndarray:
        data = np.asarray(self.dataset[index])
        if self.extract is not None:
            return data[self.extract].copy()
        out = np.empty(data.shape, self.dtype)
        for name in self.names:
            out[name] = data[name]
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[()]
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return len(self.dataset)


def _selection_slices(sel, shape: tuple[int, ...]) -> tuple[slice, ...]:
    """``sel`` of ``iter_chunks`` as one ``slice(start, stop)`` per axis, checked as h5py checks it."""
    if sel is None:
        return tuple(slice(0, n) for n in shape)
    parts = [sel] if isinstance(sel, (slice, int, np.integer)) else list(sel)
    if len(parts) != len(shape):
        raise ValueError(
            f"Invalid selection - selection region must have same rank as dataset: "
            f"{len(parts)} axes given for shape {shape}"
        )
    out = []
    for axis, (part, n) in enumerate(zip(parts, shape)):
        if isinstance(part, slice):
            if part.step not in (None, 1):
                raise ValueError(f"iter_chunks takes slices of step 1, got {part} on axis {axis}")
            start = 0 if part.start is None else operator.index(part.start)
            stop = n if part.stop is None else operator.index(part.stop)
        elif isinstance(part, (int, np.integer)):
            start = operator.index(part)
            stop = start + 1
        else:
            raise TypeError(f"iter_chunks takes slices and integers, got {part!r} on axis {axis}")
        if start < 0 or stop > n or stop <= start:
            raise ValueError(
                "Invalid selection - selection region must be within dataset space: "
                f"{start}:{stop} on axis {axis} of length {n}"
            )
        out.append(slice(start, stop))
    return tuple(out)


def chunk_slices(shape: tuple[int, ...], chunks: tuple[int, ...], sel=None) -> Iterator[tuple[slice, ...]]:
    """h5py's ``iter_chunks`` over a chunk grid: the slices of each chunk meeting ``sel``, clipped to it.

    ``shape`` and ``chunks`` in points; ``sel`` as :meth:`DatasetAPI.iter_chunks`
    takes it (checked before the first chunk is yielded: the errors are raised
    at the call). The grid is :func:`~xarray_vhdf5._backend.chunks.chunks_meeting`'s.
    """
    return chunks_meeting(_selection_slices(sel, shape), shape, chunks)


class DatasetAPI:
    """Mixin of :class:`~xarray_vhdf5._wrappers.dataset.StagedDatasetBase`: h5py's Dataset conveniences."""

    chunks: tuple[int, ...]
    parent: Any

    if TYPE_CHECKING:  # defined by StagedDatasetBase and its subclasses

        @property
        def shape(self) -> tuple[int, ...]: ...

        @property
        def size(self) -> int: ...

        @property
        def dtype(self) -> np.dtype: ...

        def __getitem__(self, index: Any) -> Any: ...

        def __setitem__(self, index: Any, value: Any) -> None: ...

    @property
    def nbytes(self) -> int:
        """Bytes of the dataset's points in memory (``size * dtype.itemsize``, as h5py)."""
        return self.size * self.dtype.itemsize

    @property
    def file(self) -> h5py.File | None:
        """The h5py file the version is staged in (None outside ``stage_version``)."""
        return None if self.parent is None else self.parent.file

    def fields(self, names: str | list[str]) -> FieldsView:
        """Reads of only some fields of a compound dataset: ``ds.fields(["a", "b"])[:10]``.

        Parameters
        ----------
        names : str or list of str
            One field (the reads return its array) or several (a compound array
            of those fields, packed).

        Raises
        ------
        ValueError
            The dataset is not compound, or a name is not one of its fields.
        """
        return FieldsView(self, names)

    def iter_chunks(self, sel=None) -> Iterator[tuple[slice, ...]]:
        """For each chunk meeting ``sel``, the slices of their intersection (h5py's ``iter_chunks``).

        Parameters
        ----------
        sel : slice, int, or tuple of them, optional
            One per axis, steps of 1, inside the shape; default the whole dataset.

        Yields
        ------
        tuple of slice
            ``slice(start, stop, 1)`` per axis, in points, chunks in C order.

        Raises
        ------
        ValueError
            ``sel`` has another rank, a step other than 1, or leaves the shape
            (the messages are h5py's).
        TypeError
            ``sel`` holds something other than slices and integers.
        """
        return chunk_slices(tuple(self.shape), tuple(self.chunks), sel)

    def read_direct(self, dest: np.ndarray, source_sel=None, dest_sel=None) -> None:
        """``dest[dest_sel] = ds[source_sel]``, staged edits included (h5py's ``read_direct``).

        Raises
        ------
        TypeError
            ``dest`` is not a writeable numpy array (h5py's requirement), or the
            points selected do not broadcast to ``dest[dest_sel]`` (h5py's
            "Can't broadcast" error; numpy's assignment says ``ValueError``).
        IndexError, ValueError
            Where ``ds[source_sel]`` and the selections raise them.
        """
        if not isinstance(dest, np.ndarray) or not dest.flags.writeable:
            raise TypeError(f"dest must be a writeable numpy array, got {type(dest).__name__}")
        data = self[() if source_sel is None else source_sel]
        where = () if dest_sel is None else dest_sel
        try:
            dest[where] = data
        except ValueError as exc:
            if "broadcast" not in str(exc):
                raise
            raise TypeError(f"Can't broadcast {np.shape(data)} -> {dest[where].shape}") from None

    def write_direct(self, source: np.ndarray, source_sel=None, dest_sel=None) -> None:
        """``ds[dest_sel] = source[source_sel]``, staged like any edit (h5py's ``write_direct``).

        Raises
        ------
        TypeError
            ``source`` is not a numpy array (h5py's requirement).
        ReadOnlyError, IndexError, ValueError
            As ``ds[dest_sel] = ...`` raises them.
        """
        if not isinstance(source, np.ndarray):
            raise TypeError(f"source must be a numpy array, got {type(source).__name__}")
        self[() if dest_sel is None else dest_sel] = source[() if source_sel is None else source_sel]
