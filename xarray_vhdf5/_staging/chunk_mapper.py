"""The selection along one axis, broken down by chunk: :class:`IndexChunkMapper`.

Built by :func:`~xarray_vhdf5._staging._map_index.map_index` (one per axis)
from a normalised slice (:meth:`IndexChunkMapper.from_slice`, rows by the
``slice_rows`` kernel) or from integer points
(:meth:`IndexChunkMapper.from_points`, rows by the vectorised
:func:`_point_rows`).  The normalisation rules are in the docstring of
:mod:`xarray_vhdf5._staging._map_index`; the row tables in
:mod:`xarray_vhdf5._staging.kernels`.  Units: points.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import kernels

__all__ = ["IndexChunkMapper"]


class IndexChunkMapper:
    """The selection along one axis, broken down by chunk.

    Every selection is normalised to ascending, distinct points (see
    :mod:`xarray_vhdf5._staging._map_index`).  Along the axis, a chunk is
    *selected* when it holds at least one of the points, *whole* when it
    holds nothing else (edge chunks are trimmed at ``axis_size``).  For each
    selected chunk, *rows* are its 1-d slice pairs: points ``chunk_start +
    stride * j`` of the chunk (relative to the chunk's first point) go to
    points ``value_start + j`` of the normalised value, ``0 <= j < count``.

    Attributes
    ----------
    kind : {"scalar", "slice", "array"}
        What the user passed (a boolean array is an ``"array"``).
    axis_size, chunk_size : int
        In points.
    n_chunks : int
        Chunks along the axis, ``ceil(axis_size / chunk_size)``.
    count : int
        Number of normalised points (the axis' length in the normalised value).
    length : int
        The axis' length in numpy's result (``count``, except for integer
        arrays with duplicates, where it is the array's length).
    chunk_indices : numpy.ndarray of intp, shape (nsel,)
        Selected chunks, ascending.
    whole : numpy.ndarray of bool, shape (nsel,)
        Whether each selected chunk is wholly selected.
    row_ptr : numpy.ndarray of intp, shape (nsel + 1,)
        Rows of the ``i``-th selected chunk: ``rows[row_ptr[i]:row_ptr[i + 1]]``.
    ptr : numpy.ndarray of intp or None
        ``row_ptr`` as the kernels take it: None when every selected chunk has
        exactly one row (slices and integers).
    rows : numpy.ndarray of uint64, shape (nrows, 4)
        ``chunk_start, value_start, count, stride`` (:data:`kernels.ROW_COLUMNS`).
    getitem_view, setitem_view : int, slice or numpy.ndarray of intp
        This axis' element of :attr:`IndexMapping.getitem_view` /
        :attr:`IndexMapping.setitem_view`.
    """

    __slots__ = (
        "_whole_rows",
        "axis_size",
        "chunk_indices",
        "chunk_size",
        "count",
        "getitem_view",
        "kind",
        "length",
        "n_chunks",
        "ptr",
        "rows",
        "setitem_view",
        "whole",
    )

    def __init__(
        self,
        kind: str,
        axis_size: int,
        chunk_size: int,
        count: int,
        tables: tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray],
        getitem_view: Any = slice(None),
        setitem_view: Any = slice(None),
    ):
        self.kind = kind
        self.axis_size = axis_size
        self.chunk_size = chunk_size
        self.n_chunks = -(-axis_size // chunk_size)
        self.count = count
        self.length = count
        self.chunk_indices, self.whole, self.ptr, self.rows = tables
        self.getitem_view = getitem_view
        self.setitem_view = setitem_view
        self._whole_rows: np.ndarray | None = None

    # -- constructors ------------------------------------------------------

    @classmethod
    def from_slice(
        cls,
        start: int,
        step: int,
        count: int,
        axis_size: int,
        chunk_size: int,
        *,
        kind: str = "slice",
        reverse: bool = False,
    ) -> IndexChunkMapper:
        """Points ``start + step * k`` for ``0 <= k < count``.

        ``step >= 1``, all points in ``[0, axis_size)``; ``reverse`` records
        that the user's slice had a negative step (numpy's result is reversed
        along this axis).
        """
        chunk_indices, whole, rows = kernels.slice_rows(start, step, count, chunk_size, axis_size)
        tables = (chunk_indices, whole, None, rows)
        if kind == "scalar":
            return cls(kind, axis_size, chunk_size, count, tables)
        if reverse:
            rev = slice(None, None, -1)
            return cls(kind, axis_size, chunk_size, count, tables, rev, rev)
        return cls(kind, axis_size, chunk_size, count, tables)

    @classmethod
    def from_points(cls, points: np.ndarray, axis_size: int, chunk_size: int) -> IndexChunkMapper:
        """A 1-d integer array of points in ``[0, axis_size)``, any order, duplicates allowed."""
        points = np.asarray(points, dtype=np.intp).reshape(-1)
        if points.size and np.all(points[1:] > points[:-1]):
            uniq = points
            getitem_view: Any = slice(None)
            setitem_view: Any = slice(None)
        else:
            uniq, inverse = np.unique(points, return_inverse=True)
            getitem_view = inverse.astype(np.intp).reshape(-1)
            # Last occurrence of each unique value: numpy's __setitem__ keeps the last write.
            _, first_in_reversed = np.unique(points[::-1], return_index=True)
            setitem_view = (len(points) - 1 - first_in_reversed).astype(np.intp)
        tables = _point_rows(uniq, axis_size, chunk_size)
        out = cls("array", axis_size, chunk_size, len(uniq), tables, getitem_view, setitem_view)
        out.length = len(points)
        return out

    # -- queries -----------------------------------------------------------

    @property
    def row_ptr(self) -> np.ndarray:
        """See the class docstring (an ``arange`` when ``ptr`` is None)."""
        if self.ptr is None:
            return np.arange(len(self.chunk_indices) + 1, dtype=np.intp)
        return self.ptr

    @property
    def whole_chunks(self) -> np.ndarray:
        """Indices of the wholly selected chunks (intp, ascending)."""
        return self.chunk_indices[self.whole]

    def chunk_extents(self) -> np.ndarray:
        """Points of each selected chunk along the axis (intp; trimmed at the edge)."""
        return np.minimum(self.chunk_size, self.axis_size - self.chunk_indices * self.chunk_size)

    def whole_chunk_rows(self) -> tuple[None, np.ndarray]:
        """``(ptr, rows)`` selecting every point of each selected chunk (``ptr`` None).

        One row per selected chunk: ``chunk_start`` 0, ``value_start`` the
        chunk's first point on the axis, ``count`` its extent, stride 1.  Used
        to move whole chunks between slabs.
        """
        if self._whole_rows is None:
            n = len(self.chunk_indices)
            rows = np.zeros((n, 4), dtype=np.uint64)
            rows[:, 1] = self.chunk_indices * self.chunk_size
            rows[:, 2] = self.chunk_extents()
            rows[:, 3] = 1
            self._whole_rows = rows
        return None, self._whole_rows

    def chunk_slices(self, i: int) -> list[tuple[slice, slice]]:
        """The 1-d slice pairs of the ``i``-th selected chunk.

        Returns
        -------
        list of (slice, slice)
            ``(in_chunk, in_value)`` per row: points ``in_chunk`` of the chunk
            (relative to its first point) are points ``in_value`` of the
            normalised value.
        """
        pairs = []
        ptr = self.row_ptr
        for cs, vs, n, stride in self.rows[ptr[i] : ptr[i + 1]].tolist():
            pairs.append((slice(cs, cs + (n - 1) * stride + 1, stride), slice(vs, vs + n, 1)))
        return pairs

    def __repr__(self) -> str:
        return (
            f"IndexChunkMapper<{self.kind}, axis_size={self.axis_size}, "
            f"chunk_size={self.chunk_size}, count={self.count}, "
            f"chunks={self.chunk_indices.tolist()}, whole={self.whole_chunks.tolist()}>"
        )


def _point_rows(
    points: np.ndarray, axis_size: int, chunk_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Row tables of ascending distinct points (vectorised).

    Inside a chunk, points that form one arithmetic progression become one
    row; otherwise every run of consecutive points is a row.
    """
    n = len(points)
    if n == 0:
        return (
            np.empty(0, np.intp),
            np.empty(0, bool),
            np.zeros(1, np.intp),
            np.empty((0, 4), np.uint64),
        )
    chunk_of = points // chunk_size
    new_chunk = np.empty(n, dtype=bool)
    new_chunk[0] = True
    np.not_equal(chunk_of[1:], chunk_of[:-1], out=new_chunk[1:])
    chunk_first = np.flatnonzero(new_chunk)
    chunk_indices = chunk_of[chunk_first]
    per_chunk = np.diff(np.append(chunk_first, n))

    diffs = np.diff(points)
    # Per chunk: is it one arithmetic progression (min == max of its internal
    # diffs)?  Cross-chunk diffs are neutralised before the segmented reductions.
    internal = ~new_chunk[1:]
    single = per_chunk == 1
    multi = ~single
    if multi.any():
        starts = chunk_first[multi]
        big = np.iinfo(np.intp).max
        lo = np.minimum.reduceat(np.where(internal, diffs, big), starts)
        hi = np.maximum.reduceat(np.where(internal, diffs, -1), starts)
        single[multi] = lo == hi
    # Row starts: the first point of every chunk; inside non-progression
    # chunks, also every point that does not follow its predecessor.
    row_start = new_chunk.copy()
    chunk_id = np.cumsum(new_chunk) - 1
    broken = np.ones(n, dtype=bool)
    broken[1:] = diffs != 1
    row_start |= broken & ~single[chunk_id]
    starts_idx = np.flatnonzero(row_start)
    counts = np.diff(np.append(starts_idx, n))
    stride = np.ones(len(starts_idx), dtype=np.intp)
    ap_rows = single[chunk_id[starts_idx]] & (counts > 1)
    stride[ap_rows] = points[starts_idx[ap_rows] + 1] - points[starts_idx[ap_rows]]
    rows = np.empty((len(starts_idx), 4), dtype=np.uint64)
    rows[:, 0] = points[starts_idx] - chunk_of[starts_idx] * chunk_size
    rows[:, 1] = starts_idx
    rows[:, 2] = counts
    rows[:, 3] = stride
    row_ptr = np.searchsorted(starts_idx, chunk_first).astype(np.intp)
    row_ptr = np.append(row_ptr, len(starts_idx)).astype(np.intp)
    extents = np.minimum(chunk_size, axis_size - chunk_indices * chunk_size)
    whole = per_chunk == extents
    return chunk_indices.astype(np.intp), whole, row_ptr, rows
