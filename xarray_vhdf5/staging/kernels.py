"""Plan-building kernels: steps 2-7 of the general plans algorithm (``staged_changes.rst``).

Three dumb, typed functions turn per-axis index selections into the n-d slice
pairs that :func:`xarray_vhdf5.backend.transfer.read_many_slices` consumes::

    axis 0: slice_rows(...) ─┐  chunk_indices, whole, row_ptr, rows (one table per axis)
    axis 1: slice_rows(...) ─┤
                             ├─> gather_chunks(slab_indices, slab_offsets, chunk_indices)
                             │     -> pos, flat, slab, offset, groups   (sorted by slab)
                             └─> expand_slices(pos[group], rows, row_ptrs, sides, offsets)
                                   -> src_start, dst_start, count, src_stride, dst_stride

A *row* is a 1-d slice pair inside one chunk: ``chunk_start`` (first point,
relative to the chunk's first point), ``value_start`` (first point in the
normalised value / output), ``count`` and ``stride`` (step in the chunk; the
value side always has step 1).  Row tables are ``uint64`` arrays of shape
``(nrows, 4)`` with columns in that order (:data:`ROW_COLUMNS`); ``row_ptr[i]
: row_ptr[i + 1]`` are the rows of the ``i``-th selected chunk of the axis.

Two implementations with identical results, selected by the process-wide
kernel backend of :mod:`xarray_vhdf5.backend.transfer` (``set_kernel_backend``,
``kernel_backend``, ``XARRAY_VHDF5_KERNELS``): the compiled one
(``_ext/plantools.pyx``) and the pure-Python references below, which are
also the oracle of ``tests/test_plantools.py``.

Units: points (array elements), never bytes.  All the inputs are produced by
:mod:`xarray_vhdf5.staging.index_mapper` and :mod:`xarray_vhdf5.staging.plans`,
which guarantee the documented invariants; the compiled kernels only check
what protects their own memory accesses.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..backend import transfer

try:
    from .._ext import plantools as _plantools
except ImportError:  # not built: only the reference implementations are usable
    _plantools = None

__all__ = [
    "KIND_REVERSE",
    "KIND_SCALAR",
    "KIND_SLICE",
    "KernelSet",
    "ROW_COLUMNS",
    "SIDE_SLAB",
    "SIDE_VALUE",
    "Gathered",
    "active",
    "basic_slices",
    "basic_slices_reference",
    "expand_slices",
    "expand_slices_reference",
    "gather_chunks",
    "gather_chunks_reference",
    "parse_basic",
    "parse_basic_reference",
    "read_basic_reference",
    "slice_rows",
    "slice_rows_reference",
]

#: Columns of a row table.
ROW_COLUMNS = ("chunk_start", "value_start", "count", "stride")
#: Side of a transfer that is a slab: start ``chunk_start`` (+ the chunk's slab
#: offset on axis 0), step ``stride``.
SIDE_SLAB = 0
#: Side of a transfer that is the value / output: start ``value_start``, step 1.
SIDE_VALUE = 1
#: :func:`parse_basic` kinds: slice with step > 0, slice with step < 0, integer.
KIND_SLICE = 0
KIND_REVERSE = 1
KIND_SCALAR = 2


class Gathered(NamedTuple):
    """Chunks selected by a cartesian product of per-axis chunk lists, sorted by slab.

    One row per chunk, ordered by slab index and then by C order of the
    product (a stable sort).

    Attributes
    ----------
    pos : numpy.ndarray of intp, shape (npoints, ndim)
        Position of the chunk, along each axis, in that axis' list of
        selected chunks (not the chunk index itself).
    flat : numpy.ndarray of intp, shape (npoints,)
        Flat (C order) index of the chunk in the ``slab_indices`` grid.
    slab : numpy.ndarray of intp, shape (npoints,)
        ``slab_indices`` of the chunk.
    offset : numpy.ndarray of uint64, shape (npoints,)
        ``slab_offsets`` of the chunk, in points along axis 0.
    groups : numpy.ndarray of intp, shape (ngroups, 3)
        ``(slab, first, stop)``: rows ``first:stop`` lie on ``slab``;
        ascending slab indices, one row per distinct slab.
    """

    pos: np.ndarray
    flat: np.ndarray
    slab: np.ndarray
    offset: np.ndarray
    groups: np.ndarray


def _compiled() -> bool:
    return _plantools is not None and transfer.get_kernel_backend() == "cython"


class KernelSet(NamedTuple):
    """One implementation of each kernel (see :func:`active`)."""

    slice_rows: Callable[..., tuple[np.ndarray, np.ndarray, np.ndarray]]
    gather_chunks: Callable[..., tuple]
    expand_slices: Callable[..., tuple]
    basic_slices: Callable[..., tuple]
    parse_basic: Callable[..., tuple | None]
    #: The fused ``__getitem__`` of in-memory chunks (:func:`read_basic_reference`);
    #: None for the references: the general path is then the one exercised.
    read_basic: Callable[..., object] | None


def active() -> KernelSet:
    """The implementations selected by the kernel backend right now.

    For hot paths that call the kernels several times: one backend lookup
    instead of one per call.  ``gather_chunks`` may return a plain tuple in
    :class:`Gathered`'s order.
    """
    if _compiled():
        return _COMPILED
    return _REFERENCE


# ---------------------------------------------------------------------------
# slice_rows
# ---------------------------------------------------------------------------


def slice_rows(
    start: int, step: int, count: int, chunk_size: int, axis_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Chunks and per-chunk rows of the points ``start + step * k``, ``0 <= k < count``.

    Parameters
    ----------
    start : int
        First point, ``>= 0``.
    step : int
        Step between points, ``>= 1`` (negative steps are normalised by
        :class:`~xarray_vhdf5.staging.index_mapper.IndexChunkMapper` first).
    count : int
        Number of points, ``>= 0``; the last point must be ``< axis_size``.
    chunk_size, axis_size : int
        In points; ``chunk_size >= 1``.

    Returns
    -------
    chunk_indices : numpy.ndarray of intp, shape (nsel,)
        Ascending indices of the chunks holding at least one point.
    whole : numpy.ndarray of bool, shape (nsel,)
        Whether every point of the chunk (trimmed at ``axis_size``) is selected.
    rows : numpy.ndarray of uint64, shape (nsel, 4)
        :data:`ROW_COLUMNS`, exactly one row per selected chunk (an implicit
        ``row_ptr`` of ``arange(nsel + 1)``); the stride is 1 where the count
        is 1.

    Raises
    ------
    ValueError
        The invariants above do not hold.
    """
    if _compiled():
        return _plantools.slice_rows(start, step, count, chunk_size, axis_size)
    return slice_rows_reference(start, step, count, chunk_size, axis_size)


def slice_rows_reference(
    start: int, step: int, count: int, chunk_size: int, axis_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pure-Python reference of :func:`slice_rows` (a loop over the touched chunks)."""
    if start < 0 or step < 1 or chunk_size < 1 or count < 0:
        raise ValueError("slice_rows: need start >= 0, step >= 1, chunk_size >= 1, count >= 0")
    if count and start + step * (count - 1) >= axis_size:
        raise ValueError("slice_rows: the selection reaches beyond axis_size")
    chunks, whole, rows = [], [], []
    k = 0
    while k < count:
        point = start + step * k
        chunk = point // chunk_size
        first = chunk * chunk_size
        # The last k whose point is still inside this chunk.
        k_last = min(count - 1, (first + chunk_size - 1 - start) // step)
        n = k_last - k + 1
        extent = min(chunk_size, axis_size - first)
        chunks.append(chunk)
        whole.append(n == extent)
        rows.append((point - first, k, n, step if n > 1 else 1))
        k = k_last + 1
    return (
        np.array(chunks, dtype=np.intp),
        np.array(whole, dtype=bool),
        np.array(rows, dtype=np.uint64).reshape(len(rows), 4),
    )


# ---------------------------------------------------------------------------
# gather_chunks
# ---------------------------------------------------------------------------


def gather_chunks(
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    chunk_indices: tuple[np.ndarray, ...],
    n_slabs: int,
) -> Gathered:
    """Steps 2-5: gather the selected chunks' slab points and sort them by slab.

    Parameters
    ----------
    slab_indices : numpy.ndarray of intp
        The chunk grid, C-contiguous, values in ``[0, n_slabs)``.
    slab_offsets : numpy.ndarray of uint64
        Same shape and layout.
    chunk_indices : tuple of numpy.ndarray of intp
        One C-contiguous array per axis: the chunks selected along that axis
        (any order, no bound beyond the grid).  The selection is their
        cartesian product.
    n_slabs : int
        ``len(slabs)``.

    Returns
    -------
    Gathered
    """
    if _compiled():
        return Gathered(
            *_plantools.gather_chunks(slab_indices, slab_offsets, chunk_indices, n_slabs)
        )
    return gather_chunks_reference(slab_indices, slab_offsets, chunk_indices, n_slabs)


def gather_chunks_reference(
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    chunk_indices: tuple[np.ndarray, ...],
    n_slabs: int,
) -> Gathered:
    """Pure-numpy reference of :func:`gather_chunks` (``np.ix_`` + a stable argsort)."""
    ndim = slab_indices.ndim
    if len(chunk_indices) != ndim:
        raise ValueError("gather_chunks: one chunk index array per axis is required")
    counts = [len(c) for c in chunk_indices]
    npoints = int(np.prod(counts, dtype=np.intp))
    pos = np.indices(counts, dtype=np.intp).reshape(ndim, npoints).T
    coords = tuple(np.asarray(c, dtype=np.intp)[pos[:, a]] for a, c in enumerate(chunk_indices))
    flat = (
        np.ravel_multi_index(coords, slab_indices.shape)
        if ndim
        else np.zeros(npoints, dtype=np.intp)
    ).astype(np.intp)
    slab = slab_indices.reshape(-1)[flat]
    if slab.size and (slab.min() < 0 or slab.max() >= n_slabs):
        raise ValueError(f"gather_chunks: slab indices must be in [0, {n_slabs})")
    order = np.argsort(slab, kind="stable")
    slab = slab[order]
    groups = [
        (int(s), int(first), int(first + n))
        for s, first, n in zip(*np.unique(slab, return_index=True, return_counts=True))
    ]
    return Gathered(
        np.ascontiguousarray(pos[order]),
        flat[order],
        slab,
        slab_offsets.reshape(-1)[flat[order]].astype(np.uint64),
        np.array(groups, dtype=np.intp).reshape(len(groups), 3),
    )


# ---------------------------------------------------------------------------
# expand_slices
# ---------------------------------------------------------------------------


def expand_slices(
    pos: np.ndarray,
    rows: tuple[np.ndarray, ...],
    row_ptrs: tuple[np.ndarray, ...],
    src_side: int,
    dst_side: int,
    src_offset: np.ndarray | None = None,
    dst_offset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 6-7: the pseudo-cartesian product of each chunk's per-axis rows.

    Parameters
    ----------
    pos : numpy.ndarray of intp, shape (npoints, ndim), C-contiguous
        Per chunk, its position in each axis' list of selected chunks.
    rows : tuple of numpy.ndarray of uint64, each (nrows_a, 4), C-contiguous
        Row table of each axis (:data:`ROW_COLUMNS`).
    row_ptrs : tuple of (numpy.ndarray of intp, shape (nsel_a + 1,), or None)
        Rows of the ``i``-th selected chunk of axis ``a``:
        ``rows[a][row_ptrs[a][i]:row_ptrs[a][i + 1]]``; None: one row per
        selected chunk (row ``i``), as :func:`slice_rows` returns.
    src_side, dst_side : {SIDE_SLAB, SIDE_VALUE}
        What the source / destination of the transfer is.
    src_offset, dst_offset : numpy.ndarray of uint64, shape (npoints,), optional
        Per chunk, its offset along axis 0 of its slab, in points; required
        for a :data:`SIDE_SLAB` side.

    Returns
    -------
    src_start, dst_start, count, src_stride, dst_stride : numpy.ndarray of uint64
        Each of shape ``(nslices, ndim)``, C-contiguous: chunk by chunk, the
        product of its rows in C order (the last axis varies fastest).
    point_end : numpy.ndarray of intp, shape (npoints,)
        Chunk ``p``'s slice pairs end at row ``point_end[p]`` (and start
        where chunk ``p - 1``'s end).
    """
    if _compiled():
        return _plantools.expand_slices(
            pos, rows, row_ptrs, src_side, dst_side, src_offset, dst_offset
        )
    return expand_slices_reference(pos, rows, row_ptrs, src_side, dst_side, src_offset, dst_offset)


def expand_slices_reference(
    pos: np.ndarray,
    rows: tuple[np.ndarray, ...],
    row_ptrs: tuple[np.ndarray, ...],
    src_side: int,
    dst_side: int,
    src_offset: np.ndarray | None = None,
    dst_offset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pure-Python reference of :func:`expand_slices` (``itertools.product`` per chunk)."""
    npoints, ndim = pos.shape
    for side, off in ((src_side, src_offset), (dst_side, dst_offset)):
        if side not in (SIDE_SLAB, SIDE_VALUE):
            raise ValueError("expand_slices: sides must be SIDE_SLAB or SIDE_VALUE")
        if side == SIDE_SLAB and (off is None or len(off) != npoints):
            raise ValueError("expand_slices: a slab side needs one offset per chunk")

    def side_of(side: int, row: np.ndarray, offset: int, axis: int) -> tuple[int, int]:
        cs, vs, _, stride = (int(x) for x in row)
        if side == SIDE_SLAB:
            return cs + (offset if axis == 0 else 0), stride
        return vs, 1

    out: list[list[tuple[int, int, int, int, int]]] = []
    point_end = np.empty(npoints, dtype=np.intp)
    for p in range(npoints):
        per_axis = []
        for a in range(ndim):
            q = int(pos[p, a])
            ptr = row_ptrs[a]
            if ptr is None:
                if not 0 <= q < len(rows[a]):
                    raise IndexError(f"expand_slices: pos {q} out of range on axis {a}")
                per_axis.append(rows[a][q : q + 1])
            else:
                per_axis.append(rows[a][ptr[q] : ptr[q + 1]])
        s_off = int(src_offset[p]) if src_side == SIDE_SLAB else 0
        d_off = int(dst_offset[p]) if dst_side == SIDE_SLAB else 0
        for combo in itertools.product(*per_axis):
            line = []
            for a, row in enumerate(combo):
                ss, sst = side_of(src_side, row, s_off, a)
                ds, dst = side_of(dst_side, row, d_off, a)
                line.append((ss, ds, int(row[2]), sst, dst))
            out.append(line)
        point_end[p] = len(out)
    arr = np.array(out, dtype=np.uint64).reshape(len(out), ndim, 5)
    columns = tuple(np.ascontiguousarray(arr[:, :, i]) for i in range(5))
    return (*columns, point_end)  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# basic_slices
# ---------------------------------------------------------------------------


def basic_slices(
    starts: tuple[int, ...],
    steps: tuple[int, ...],
    counts: tuple[int, ...],
    chunk_size: tuple[int, ...],
    shape: tuple[int, ...],
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    n_slabs: int,
    src_side: int,
    dst_side: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps 2-7 fused for a basic index (one slice with step >= 1 per axis).

    Equal to :func:`slice_rows` on every axis, :func:`gather_chunks`, then
    :func:`expand_slices` with the chunk offsets on the slab side: a basic
    index selects one box per chunk, so there is exactly one slice pair per
    selected chunk.  The hot path of ``__getitem__`` and of ``__setitem__``
    on staged chunks: one kernel call instead of ``ndim + 2``.

    Parameters
    ----------
    starts, steps, counts : tuple of int
        The normalised slice of each axis (an integer is a slice of one
        point); ``steps >= 1``; all points inside ``shape``.
    chunk_size, shape : tuple of int
        In points.
    slab_indices, slab_offsets : numpy.ndarray
        The C-contiguous chunk grid (intp, uint64).
    n_slabs : int
    src_side, dst_side : {SIDE_SLAB, SIDE_VALUE}

    Returns
    -------
    groups : numpy.ndarray of intp, shape (ngroups, 3)
        ``slab, first, stop`` over the slice pairs, ascending slabs.
    src_start, dst_start, count, src_stride, dst_stride : numpy.ndarray of uint64
        Shape ``(nchunks, ndim)``, sorted by slab index.
    """
    if _compiled():
        return _plantools.basic_slices(
            starts, steps, counts, chunk_size, shape, slab_indices, slab_offsets, n_slabs,
            src_side, dst_side,
        )
    return basic_slices_reference(
        starts, steps, counts, chunk_size, shape, slab_indices, slab_offsets, n_slabs,
        src_side, dst_side,
    )


def basic_slices_reference(
    starts: tuple[int, ...],
    steps: tuple[int, ...],
    counts: tuple[int, ...],
    chunk_size: tuple[int, ...],
    shape: tuple[int, ...],
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    n_slabs: int,
    src_side: int,
    dst_side: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pure-Python reference of :func:`basic_slices`: the three reference kernels composed."""
    tables = [
        slice_rows_reference(a if n else 0, s, n, c, size)
        for a, s, n, c, size in zip(starts, steps, counts, chunk_size, shape)
    ]
    g = gather_chunks_reference(slab_indices, slab_offsets, tuple(t[0] for t in tables), n_slabs)
    expanded = expand_slices_reference(
        g.pos,
        tuple(t[2] for t in tables),
        (None,) * len(tables),
        src_side,
        dst_side,
        g.offset if src_side == SIDE_SLAB else None,
        g.offset if dst_side == SIDE_SLAB else None,
    )
    return (g.groups, *expanded[:5])


# ---------------------------------------------------------------------------
# parse_basic
# ---------------------------------------------------------------------------


def parse_basic(idx: object, shape: tuple[int, ...]) -> tuple | None:
    """Step 1 for a basic index: exactly one ``slice`` or ``int`` per axis.

    Parameters
    ----------
    idx : object
        What the user passed to ``__getitem__`` / ``__setitem__``.
    shape : tuple of int

    Returns
    -------
    tuple or None
        None unless ``idx`` is one ``slice`` or integer (``int`` or
        ``numpy.integer``, not bool) per axis (a tuple, or a single element
        for 1-d arrays) with every integer in
        bounds: the general path of
        :func:`~xarray_vhdf5.staging.index_mapper.map_index` handles the
        rest, numpy's errors included.  Otherwise ``(starts, steps, counts,
        kinds)``, tuples of ints: points ``start + step * k``, ``0 <= k <
        count``, ``step >= 1``; kinds :data:`KIND_SLICE`,
        :data:`KIND_REVERSE` (a negative step, normalised to ascending
        order) or :data:`KIND_SCALAR`.

    Raises
    ------
    TypeError, ValueError
        As ``slice.indices``: non-integer slice bounds, a zero step.
    """
    if _compiled():
        return _plantools.parse_basic(idx, shape)
    return parse_basic_reference(idx, shape)


def parse_basic_reference(idx: object, shape: tuple[int, ...]) -> tuple | None:
    """Pure-Python reference of :func:`parse_basic` (``slice.indices``)."""
    if type(idx) is not tuple:
        idx = (idx,)
    if len(idx) != len(shape):
        return None
    starts, steps, counts, kinds = [], [], [], []
    for elem, size in zip(idx, shape):
        if type(elem) is slice:
            start, stop, step = elem.indices(size)
            count = len(range(start, stop, step))
            if step > 0:
                kinds.append(KIND_SLICE)
            else:
                start += (count - 1) * step if count else 0
                step = -step
                kinds.append(KIND_REVERSE)
            starts.append(start if count else 0)
            steps.append(step)
            counts.append(count)
        elif type(elem) is int or isinstance(elem, np.integer):
            elem = int(elem)
            if not -size <= elem < size:
                return None
            starts.append(elem + size if elem < 0 else elem)
            steps.append(1)
            counts.append(1)
            kinds.append(KIND_SCALAR)
        else:
            return None
    return tuple(starts), tuple(steps), tuple(counts), tuple(kinds)


# ---------------------------------------------------------------------------
# read_basic
# ---------------------------------------------------------------------------


def read_basic_reference(
    idx: object,
    shape: tuple[int, ...],
    chunk_size: tuple[int, ...],
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    slabs: list,
    lazy: list,
    dtype: np.dtype,
) -> object:
    """Pure-Python reference of the compiled ``read_basic``: ``__getitem__`` fused.

    For a basic index (:func:`parse_basic`) whose selected chunks all lie on
    numpy arrays of exactly ``dtype`` (``type(slab) is numpy.ndarray``) with
    no pending conversion (``lazy[slab] is None``): numpy's result of
    ``arr[idx]`` (a new array, or a numpy scalar when every axis is an
    integer), copied chunk by chunk from the boxes of :func:`basic_slices`.
    None when it does not apply - not a basic index, a 0-d array, a dtype
    holding Python objects or of no fixed size, a chunk elsewhere, metadata
    reaching beyond a slab - and the general path
    (:class:`~xarray_vhdf5.staging.plans.GetItemPlan`) must answer instead.

    ``tests/test_plantools.py`` checks the compiled kernel against this
    function, ``tests/test_staging_fastpath.py`` both against the general path.
    """
    dtype = np.dtype(dtype)
    parsed = parse_basic_reference(idx, shape)
    if parsed is None or not shape or dtype.hasobject or dtype.num >= _NTYPES_LEGACY:
        return None
    if dtype.itemsize == 0 or len(lazy) != len(slabs):
        return None
    starts, steps, counts, kinds = parsed
    try:
        groups, src_start, dst_start, count, src_stride, _ = basic_slices_reference(
            starts, steps, counts, tuple(chunk_size), tuple(shape),
            slab_indices, slab_offsets, len(slabs), SIDE_SLAB, SIDE_VALUE,
        )
    except (ValueError, IndexError):
        return None
    out = np.empty(counts, dtype=dtype)
    for s, a, b in groups.tolist():
        src = slabs[s]
        if lazy[s] is not None or type(src) is not np.ndarray:
            return None
        if src.ndim != len(shape) or src.dtype != dtype:
            return None
        for k in range(a, b):
            c = count[k].tolist()
            if not all(c):
                continue
            first = src_start[k].tolist()
            stride = src_stride[k].tolist()
            lasts = [f + (n - 1) * st for f, n, st in zip(first, c, stride)]
            if any(last >= size for last, size in zip(lasts, src.shape)):
                return None
            src_box = tuple(slice(f, last + 1, st) for f, last, st in zip(first, lasts, stride))
            dst_box = tuple(slice(f, f + n) for f, n in zip(dst_start[k].tolist(), c))
            out[dst_box] = src[src_box]
    if KIND_REVERSE in kinds:
        out = out[tuple(slice(None, None, -1) if k == KIND_REVERSE else slice(None) for k in kinds)]
    result_shape = tuple(n for n, k in zip(counts, kinds) if k != KIND_SCALAR)
    out = np.ascontiguousarray(out).reshape(result_shape)
    return out if result_shape else out[()]


#: numpy's built-in dtype numbers are below this (``NPY_NTYPES_LEGACY``).
_NTYPES_LEGACY = 24


_REFERENCE = KernelSet(
    slice_rows_reference,
    gather_chunks_reference,
    expand_slices_reference,
    basic_slices_reference,
    parse_basic_reference,
    None,
)
_COMPILED = (
    KernelSet(
        _plantools.slice_rows,
        _plantools.gather_chunks,
        _plantools.expand_slices,
        _plantools.basic_slices,
        _plantools.parse_basic,
        _plantools.read_basic,
    )
    if _plantools is not None
    else _REFERENCE
)
