"""From a user's index to per-axis chunk selections: step 1 of the plans (``staged_changes.rst``).

:func:`map_index` normalises anything numpy accepts on an ``h5py.Dataset``
into one :class:`IndexChunkMapper` per axis plus the views that turn the
*normalised* selection into numpy's result::

    index (numpy semantics)           normalised, per axis              view applied to the result
    ------------------------------    ------------------------------    --------------------------
    integer i                         the single point i                drop the axis
    slice with step > 0               the same slice                    -
    slice with step < 0               the same points, ascending        reverse the axis
    integer array (any order, dups)   the sorted unique points          take(inverse)
    boolean array (1-d)               its nonzero points                -

The normalised selection is a cartesian product of ascending point sets, one
per axis; the transfers fill a C-contiguous array of its shape (``value`` /
``out`` in the printed plans), and ``getitem_view`` / ``setitem_view`` map it to
numpy's result or from numpy's value.  For ``__setitem__`` with duplicate
integers the *last* occurrence wins, as in numpy.  Integers next to an
integer array follow numpy's rule for advanced indices: when they are not
adjacent (e.g. ``a[0, :, [1, 2]]``) the array's axis moves first.

Supported: integers (Python, numpy, 0-d integer arrays), slices with any step,
one Ellipsis, at most one integer or 1-d boolean array index.  Everything else
numpy accepts raises :class:`~xarray_vhdf5.errors.UnsupportedError` (numpy's
newaxis, a second array index, n-d arrays, boolean scalars); what numpy
rejects raises numpy's ``IndexError`` / ``TypeError`` / ``ValueError`` with
numpy's message.  Integer and boolean arrays are validated and normalised with
ndindex; integers and slices, the hot path, with Python's own ``slice.indices``.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import ndindex
import numpy as np

from ..errors import UnsupportedError
from . import kernels

__all__ = ["IndexChunkMapper", "IndexMapping", "map_index"]

_VALID_INDICES = (
    "only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
    "boolean arrays are valid indices"
)


class IndexChunkMapper:
    """The selection along one axis, broken down by chunk.

    Every selection is normalised to ascending, distinct points (see the
    module docstring).  Along the axis, a chunk is *selected* when it holds at
    least one of the points, *whole* when it holds nothing else (edge chunks
    are trimmed at ``axis_size``).  For each selected chunk, *rows* are its
    1-d slice pairs: points ``chunk_start + stride * j`` of the chunk (relative
    to the chunk's first point) go to points ``value_start + j`` of the
    normalised value, ``0 <= j < count``.

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
        "kind",
        "axis_size",
        "chunk_size",
        "n_chunks",
        "count",
        "length",
        "chunk_indices",
        "whole",
        "ptr",
        "rows",
        "getitem_view",
        "setitem_view",
        "_whole_rows",
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
    def from_points(
        cls, points: np.ndarray, axis_size: int, chunk_size: int
    ) -> IndexChunkMapper:
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


class IndexMapping:
    """A user's index, normalised: one mapper per axis and the way to numpy's result.

    From the normalised result ``out`` (shape :attr:`norm_shape`) to numpy's
    result: ``out[getitem_view]`` (reversed axes, integer-array permutations),
    reshaped to drop the integer-indexed axes, then the array's axis moved
    first if :attr:`array_first`.  ``__setitem__`` runs the inverse on the
    value broadcast to :attr:`shape` (with ``setitem_view`` keeping the last
    of duplicate integers).

    Attributes
    ----------
    mappers : tuple of IndexChunkMapper
        One per axis of the array.
    norm_shape : tuple of int
        Shape of the normalised selection (``mapper.count`` per axis; 1 for
        integer indices).
    shape : tuple of int
        Shape of numpy's result, ``arr[index].shape``.
    getitem_view, setitem_view : tuple or None
        Per axis a slice (``:`` or ``::-1``) or an integer array; None when
        every element is ``:``.
    array_first : bool
        numpy moves the array's axis to the front: the integers and the
        array index are not adjacent in the index (an Ellipsis or slice
        between them, even one spanning no axis).
    array_axis : int or None
        Position of the array index's axis among the result's axes before
        ``array_first`` moves it.
    scalar : bool
        numpy returns a scalar (every axis indexed by an integer, no Ellipsis).
    expanded_shape : tuple of int
        numpy's result with the integer-indexed axes kept (length 1) and no
        axis moved: the value's shape right before ``setitem_view``.
    basic : tuple or None
        For a *basic* index (one slice or integer per axis, the hot path):
        ``(starts, steps, counts, kinds)``, the normalised slice of every
        axis (``steps >= 1``) and its :data:`~xarray_vhdf5.staging.kernels.KIND_SLICE`,
        ``KIND_REVERSE`` or ``KIND_SCALAR``;
        the plans then fuse steps 2-7 in one kernel call
        (:func:`~xarray_vhdf5.staging.kernels.basic_slices`).  None otherwise.
    chunking : tuple or None
        ``(shape, chunk_size)`` of the array, for basic indices.
    """

    __slots__ = (
        "_mappers",
        "basic",
        "norm_shape",
        "shape",
        "expanded_shape",
        "getitem_view",
        "setitem_view",
        "array_first",
        "array_axis",
        "scalar",
        "chunking",
    )

    def __init__(
        self,
        mappers: tuple[IndexChunkMapper, ...] | None,
        norm_shape: tuple[int, ...],
        shape: tuple[int, ...],
        getitem_view: tuple | None = None,
        setitem_view: tuple | None = None,
        array_first: bool = False,
        array_axis: int | None = None,
        scalar: bool = False,
        *,
        expanded_shape: tuple[int, ...] | None = None,
        basic: tuple | None = None,
        chunking: tuple | None = None,
    ):
        self._mappers = mappers
        self.basic = basic
        self.norm_shape = norm_shape
        self.shape = shape
        self.expanded_shape = norm_shape if expanded_shape is None else expanded_shape
        self.getitem_view = getitem_view
        self.setitem_view = setitem_view
        self.array_first = array_first
        self.array_axis = array_axis
        self.scalar = scalar
        self.chunking = chunking

    @property
    def mappers(self) -> tuple[IndexChunkMapper, ...]:
        """One :class:`IndexChunkMapper` per axis (built on first use for basic indices)."""
        if self._mappers is None:
            starts, steps, counts, kinds = self.basic
            shape, chunk_size = self.chunking
            self._mappers = tuple(
                IndexChunkMapper.from_slice(
                    a, s, n, size, c,
                    kind="scalar" if k == kernels.KIND_SCALAR else "slice",
                    reverse=k == kernels.KIND_REVERSE,
                )
                for a, s, n, k, size, c in zip(starts, steps, counts, kinds, shape, chunk_size)
            )
        return self._mappers

    def __repr__(self) -> str:
        return (
            f"IndexMapping<shape={self.shape}, norm_shape={self.norm_shape}, "
            f"view={self.format_view()}>"
        )

    def to_result(self, out: np.ndarray) -> Any:
        """numpy's result from the normalised one (a view of ``out`` when possible)."""
        if self.getitem_view is not None:
            out = out[self.getitem_view]
        if self.array_first:
            out = out.reshape(_unmoved(self.shape, self.array_axis))
            return np.moveaxis(out, self.array_axis, 0)
        if out.shape != self.shape:
            out = out.reshape(self.shape)
        return out[()] if self.scalar else out

    def to_normalised(self, value: np.ndarray) -> np.ndarray:
        """The normalised value (:attr:`norm_shape`) from numpy's value (:attr:`shape`)."""
        if self.array_first:
            value = np.moveaxis(value, 0, self.array_axis)
        value = value.reshape(self.expanded_shape)
        if self.setitem_view is not None:
            value = value[self.setitem_view]
        return value

    def format_view(self, which: str = "getitem") -> str:
        """The view as it would be written in Python, e.g. ``[:, ::-1]`` (``0``: axis dropped)."""
        if not self.mappers:
            return "[()]"
        parts = []
        for m in self.mappers:
            if m.kind == "scalar" and which == "getitem":
                parts.append("0")
                continue
            parts.append(_format_elem(m.getitem_view if which == "getitem" else m.setitem_view))
        text = "[" + ", ".join(parts) + "]"
        if self.array_first and which == "getitem":
            text += f".moveaxis({self.array_axis}, 0)"
        return text


def _unmoved(shape: tuple[int, ...], array_axis: int) -> tuple[int, ...]:
    out = list(shape[1:])
    out.insert(array_axis, shape[0])
    return tuple(out)


def _format_elem(v: Any) -> str:
    if isinstance(v, slice):
        return (
            ("" if v.start is None else str(v.start))
            + ":"
            + ("" if v.stop is None else str(v.stop))
            + ("" if v.step is None else f":{v.step}")
        )
    if isinstance(v, np.ndarray):
        return f"array({v.tolist()})" if v.size <= 8 else f"array(<{v.size} points>)"
    return str(v)


def _axis_error(i: int, axis: int, size: int) -> IndexError:
    return IndexError(f"index {i} is out of bounds for axis {axis} with size {size}")


def _expand(idx: Any, ndim: int) -> tuple[list[Any], list[int], bool]:
    """The index as one element per axis (Ellipsis expanded).

    Also returns, per axis, the position of its element in the user's tuple
    (numpy decides where the axis of an array index goes from those
    positions: an Ellipsis separates advanced indices even when it expands
    to no axis), and whether there was an Ellipsis.
    """
    if not isinstance(idx, tuple):
        idx = (idx,)
    n_ellipsis = 0
    n_real = 0
    for elem in idx:
        if elem is Ellipsis:
            n_ellipsis += 1
        elif elem is None:
            raise UnsupportedError(
                "numpy.newaxis (None) in an index is valid for numpy but not supported by "
                "staged arrays (nor by h5py); add the axis to the result instead "
                "(e.g. np.expand_dims(arr[...], axis))"
            )
        else:
            n_real += 1
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > ndim:
        raise IndexError(
            f"too many indices for array: array is {ndim}-dimensional, but {n_real} were indexed"
        )
    out: list[Any] = []
    where: list[int] = []
    for k, elem in enumerate(idx):
        if elem is Ellipsis:
            out.extend([slice(None)] * (ndim - n_real))
            where.extend([k] * (ndim - n_real))
        else:
            out.append(elem)
            where.append(k)
    while len(out) < ndim:
        where.append(len(idx) + len(out))
        out.append(slice(None))
    return out, where, n_ellipsis > 0


def _as_array_index(elem: Any, axis: int, shape: Sequence[int]) -> np.ndarray | int:
    """Validate an array-like index with ndindex: an int (0-d) or 1-d ascending-or-not points."""
    try:
        idx = ndindex.ndindex(elem)
    except IndexError:
        raise
    except (TypeError, ValueError) as exc:
        raise IndexError(f"{_VALID_INDICES} (got {type(elem).__name__}: {exc})") from None
    if isinstance(idx, ndindex.BooleanArray):
        if idx.ndim == 0:
            raise UnsupportedError(
                "a boolean scalar index adds an axis in numpy; not supported by staged arrays"
            )
        if idx.ndim > 1:
            raise UnsupportedError(
                f"a {idx.ndim}-d boolean index spans several axes; staged arrays (like h5py) "
                "only support 1-d boolean arrays, one per index"
            )
        idx = idx.reduce(tuple(shape), axis=axis)
        return np.flatnonzero(idx.raw).astype(np.intp)
    if isinstance(idx, ndindex.IntegerArray):
        if idx.ndim == 0:
            return int(idx.raw)
        if idx.ndim > 1:
            raise UnsupportedError(
                f"a {idx.ndim}-d integer array index reshapes the result; staged arrays "
                "(like h5py) only support 1-d integer arrays"
            )
        return idx.reduce(tuple(shape), axis=axis).raw.astype(np.intp, copy=False)
    if isinstance(idx, ndindex.Integer):
        return int(idx.raw)
    raise IndexError(_VALID_INDICES)


_REVERSE = slice(None, None, -1)
_ALL = slice(None)


def _map_basic(
    idx: Any, shape: tuple[int, ...], chunk_size: tuple[int, ...]
) -> IndexMapping | None:
    """The hot path of :func:`map_index`: one ``slice`` or ``int`` per axis.

    Parsed by :func:`~xarray_vhdf5.staging.kernels.parse_basic`; no mapper
    is built (:attr:`IndexMapping.mappers` builds them on demand), the plans
    use :attr:`IndexMapping.basic`.  Returns None for anything else (the
    general path handles it, numpy's errors included).
    """
    parsed = kernels.active().parse_basic(idx, shape)
    if parsed is None:
        return None
    counts, kinds = parsed[2], parsed[3]
    reverse = kernels.KIND_REVERSE in kinds
    if kinds and not reverse and kernels.KIND_SCALAR not in kinds:
        # Only slices with step > 0 (the commonest case): no view at all.
        return IndexMapping(None, counts, counts, basic=parsed, chunking=(shape, chunk_size))
    out_shape = tuple([n for n, k in zip(counts, kinds) if k != kernels.KIND_SCALAR])
    view = None
    if reverse:
        view = tuple([_REVERSE if k == kernels.KIND_REVERSE else _ALL for k in kinds])
    return IndexMapping(
        None,
        counts,
        out_shape,
        view,
        view,
        scalar=not out_shape,
        basic=parsed,
        chunking=(shape, chunk_size),
    )


def map_index(idx: Any, shape: Sequence[int], chunk_size: Sequence[int]) -> IndexMapping:
    """Normalise a numpy index on an array of ``shape`` chunked by ``chunk_size``.

    Parameters
    ----------
    idx : Any
        What the user passed to ``__getitem__`` / ``__setitem__``.
    shape, chunk_size : sequence of int
        In points.

    Returns
    -------
    IndexMapping

    Raises
    ------
    IndexError
        numpy would raise it: an integer or array value out of bounds, too
        many indices, several Ellipsis, a boolean array of the wrong length,
        an index of an invalid type (float, str, ...).
    TypeError
        A slice bound that is not an integer (numpy's message).
    ValueError
        A slice step of zero.
    xarray_vhdf5.errors.UnsupportedError
        Valid for numpy but not supported (``staged_changes.rst``: a plan maps
        every axis independently): ``None`` / newaxis, more than one array
        index, n-d integer or boolean arrays, boolean scalars.
    """
    ndim = len(shape)
    fast = _map_basic(idx, tuple(shape), tuple(chunk_size))
    if fast is not None:
        return fast
    elems, where, has_ellipsis = _expand(idx, ndim)
    mappers: list[IndexChunkMapper] = []
    array_pos: list[int] = []  # positions of the array index (at most one)
    int_pos: list[int] = []
    needs_view = False
    for axis, elem in enumerate(elems):
        size = shape[axis]
        cs = chunk_size[axis]
        if isinstance(elem, slice):
            start, stop, step = elem.indices(size)
            count = len(range(start, stop, step))
            if step < 0:
                if count:
                    last = start + (count - 1) * step
                    mappers.append(
                        IndexChunkMapper.from_slice(last, -step, count, size, cs, reverse=True)
                    )
                    needs_view = True
                else:
                    mappers.append(IndexChunkMapper.from_slice(0, 1, 0, size, cs))
            else:
                mappers.append(IndexChunkMapper.from_slice(start, step, count, size, cs))
            continue
        if isinstance(elem, (bool, np.bool_)):
            raise UnsupportedError(
                "a boolean scalar index adds an axis in numpy; not supported by staged arrays"
            )
        if isinstance(elem, (int, np.integer)):
            i = operator.index(elem)
        else:
            converted = _as_array_index(elem, axis, shape)
            if isinstance(converted, np.ndarray):
                if array_pos:
                    raise UnsupportedError(
                        "more than one array index is valid for numpy (the arrays are broadcast "
                        "together) but not supported by staged arrays; index one axis at a time"
                    )
                array_pos.append(axis)
                m = IndexChunkMapper.from_points(converted, size, cs)
                mappers.append(m)
                if not isinstance(m.getitem_view, slice):
                    needs_view = True
                continue
            i = converted
        if i < -size or i >= size:
            raise _axis_error(i, axis, size)
        if i < 0:
            i += size
        int_pos.append(axis)
        mappers.append(IndexChunkMapper.from_slice(i, 1, 1, size, cs, kind="scalar"))

    norm_shape = tuple(m.count for m in mappers)
    result_shape = [m.length for m in mappers if m.kind != "scalar"]
    array_first = False
    array_axis = None
    if array_pos:
        advanced = sorted(where[p] for p in array_pos + int_pos)
        array_first = advanced[-1] - advanced[0] + 1 != len(advanced)
        # The array's axis in the result once the integer axes are dropped.
        array_axis = array_pos[0] - sum(1 for p in int_pos if p < array_pos[0])
        if array_first:
            result_shape.insert(0, result_shape.pop(array_axis))
            needs_view = True
    shape_out = tuple(result_shape)

    getitem_view = setitem_view = None
    if needs_view:
        getitem_view = tuple(m.getitem_view for m in mappers)
        setitem_view = tuple(m.setitem_view for m in mappers)
        if all(isinstance(v, slice) and v == slice(None) for v in getitem_view):
            getitem_view = None
        if all(isinstance(v, slice) and v == slice(None) for v in setitem_view):
            setitem_view = None
    scalar = not has_ellipsis and not array_pos and len(int_pos) == ndim
    return IndexMapping(
        expanded_shape=tuple(1 if m.kind == "scalar" else m.length for m in mappers),
        mappers=tuple(mappers),
        norm_shape=norm_shape,
        shape=shape_out,
        getitem_view=getitem_view,
        setitem_view=setitem_view,
        array_first=array_first,
        array_axis=array_axis,
        scalar=scalar,
    )
