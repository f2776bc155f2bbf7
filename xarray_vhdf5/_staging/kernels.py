"""Plan-building kernels: steps 2-7 of the general plans algorithm (versioned-hdf5's ``staged_changes.rst``).

Three dumb, typed functions turn per-axis index selections into the n-d slice
pairs that :func:`xarray_vhdf5._backend.transfer.read_many_slices` consumes::

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
kernel backend of :mod:`xarray_vhdf5._backend.transfer` (``set_kernel_backend``,
``kernel_backend``, ``XARRAY_VHDF5_KERNELS``): the compiled one
(``_ext/plantools.pyx``, ``_ext/readtools.pyx``) and the pure-Python references of
:mod:`xarray_vhdf5._staging.reference_kernels`, which are also the oracle of
``tests/test_plantools.py``.  This module holds the dispatchers and
:func:`active`; it re-exports the references, their constants and
:class:`Gathered`, and :func:`~xarray_vhdf5._staging.read_basic.read_basic_reference`.

Units: points (array elements), never bytes.  All the inputs are produced by
the index mappers (:mod:`xarray_vhdf5._staging.chunk_mapper`,
:mod:`xarray_vhdf5._staging._map_index`) and the plans
(:mod:`xarray_vhdf5._staging.transfer_plan`, :mod:`xarray_vhdf5._staging.item_plans`,
:mod:`xarray_vhdf5._staging.shape_plans`), which guarantee the documented
invariants; the compiled kernels only check what protects their own memory
accesses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from .._backend import transfer
from .._backend._kernels import plantools as _plantools  # None if not built (both or neither):
from .._backend._kernels import readtools as _readtools  # every use is behind _compiled()
from .read_basic import read_basic_reference
from .reference_kernels import (
    KIND_REVERSE,
    KIND_SCALAR,
    KIND_SLICE,
    ROW_COLUMNS,
    SIDE_SLAB,
    SIDE_VALUE,
    Gathered,
    basic_slices_reference,
    expand_slices_reference,
    gather_chunks_reference,
    parse_basic_reference,
    slice_rows_reference,
)

__all__ = [
    "KIND_REVERSE",
    "KIND_SCALAR",
    "KIND_SLICE",
    "ROW_COLUMNS",
    "SIDE_SLAB",
    "SIDE_VALUE",
    "Gathered",
    "KernelSet",
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
        :class:`~xarray_vhdf5._staging.chunk_mapper.IndexChunkMapper` first).
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
        return Gathered(*_plantools.gather_chunks(slab_indices, slab_offsets, chunk_indices, n_slabs))
    return gather_chunks_reference(slab_indices, slab_offsets, chunk_indices, n_slabs)


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
        return _plantools.expand_slices(pos, rows, row_ptrs, src_side, dst_side, src_offset, dst_offset)
    return expand_slices_reference(pos, rows, row_ptrs, src_side, dst_side, src_offset, dst_offset)


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
            starts,
            steps,
            counts,
            chunk_size,
            shape,
            slab_indices,
            slab_offsets,
            n_slabs,
            src_side,
            dst_side,
        )
    return basic_slices_reference(
        starts,
        steps,
        counts,
        chunk_size,
        shape,
        slab_indices,
        slab_offsets,
        n_slabs,
        src_side,
        dst_side,
    )


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
        :func:`~xarray_vhdf5._staging._map_index.map_index` handles the
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
        return _readtools.parse_basic(idx, shape)
    return parse_basic_reference(idx, shape)


# ---------------------------------------------------------------------------
# The two kernel sets of active()
# ---------------------------------------------------------------------------


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
        _readtools.parse_basic,
        _readtools.read_basic,
    )
    if _plantools is not None
    else _REFERENCE
)
