"""Pure-Python reference implementations of the plan-building kernels, and their conventions.

The oracle of the compiled kernels (``_ext/plantools.pyx``, checked against
these in ``tests/test_plantools.py``) and the implementations the dispatchers
of :mod:`xarray_vhdf5._staging.kernels` run when the kernel backend is
``"python"``.  Also home of the constants and the result type the two share:
the columns of a row table (:data:`ROW_COLUMNS`), the sides of a transfer
(:data:`SIDE_SLAB`, :data:`SIDE_VALUE`), the kinds of a basic index's axes
(:data:`KIND_SLICE`, :data:`KIND_REVERSE`, :data:`KIND_SCALAR`) and
:class:`Gathered`.

Units: points (array elements), never bytes.  The row tables and the steps
they implement are described in :mod:`xarray_vhdf5._staging.kernels`.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

__all__ = [
    "KIND_REVERSE",
    "KIND_SCALAR",
    "KIND_SLICE",
    "ROW_COLUMNS",
    "SIDE_SLAB",
    "SIDE_VALUE",
    "Gathered",
    "basic_slices_reference",
    "expand_slices_reference",
    "gather_chunks_reference",
    "parse_basic_reference",
    "slice_rows_reference",
]

#: Columns of a row table.
ROW_COLUMNS = ("chunk_start", "value_start", "count", "stride")
#: Side of a transfer that is a slab: start ``chunk_start`` (+ the chunk's slab
#: offset on axis 0), step ``stride``.
SIDE_SLAB = 0
#: Side of a transfer that is the value / output: start ``value_start``, step 1.
SIDE_VALUE = 1
#: :func:`~xarray_vhdf5._staging.kernels.parse_basic` kinds: slice with step > 0,
#: slice with step < 0, integer.
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


# ---------------------------------------------------------------------------
# slice_rows
# ---------------------------------------------------------------------------


def slice_rows_reference(
    start: int, step: int, count: int, chunk_size: int, axis_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pure-Python reference of :func:`~xarray_vhdf5._staging.kernels.slice_rows`.

    A loop over the touched chunks.
    """
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


def gather_chunks_reference(
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    chunk_indices: tuple[np.ndarray, ...],
    n_slabs: int,
) -> Gathered:
    """Pure-numpy reference of :func:`~xarray_vhdf5._staging.kernels.gather_chunks`.

    ``np.ix_`` + a stable argsort.
    """
    ndim = slab_indices.ndim
    if len(chunk_indices) != ndim:
        raise ValueError("gather_chunks: one chunk index array per axis is required")
    counts = [len(c) for c in chunk_indices]
    npoints = int(np.prod(counts, dtype=np.intp))
    pos = np.indices(counts, dtype=np.intp).reshape(ndim, npoints).T
    coords = tuple(np.asarray(c, dtype=np.intp)[pos[:, a]] for a, c in enumerate(chunk_indices))
    flat = (np.ravel_multi_index(coords, slab_indices.shape) if ndim else np.zeros(npoints, dtype=np.intp)).astype(
        np.intp
    )
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


def expand_slices_reference(
    pos: np.ndarray,
    rows: tuple[np.ndarray, ...],
    row_ptrs: tuple[np.ndarray | None, ...],
    src_side: int,
    dst_side: int,
    src_offset: np.ndarray | None = None,
    dst_offset: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pure-Python reference of :func:`~xarray_vhdf5._staging.kernels.expand_slices`.

    ``itertools.product`` per chunk.
    """
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
        s_off = int(src_offset[p]) if src_offset is not None and src_side == SIDE_SLAB else 0
        d_off = int(dst_offset[p]) if dst_offset is not None and dst_side == SIDE_SLAB else 0
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
    """Pure-Python reference of :func:`~xarray_vhdf5._staging.kernels.basic_slices`.

    The three reference kernels above, composed.
    """
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


def parse_basic_reference(idx: object, shape: tuple[int, ...]) -> tuple | None:
    """Pure-Python reference of :func:`~xarray_vhdf5._staging.kernels.parse_basic`.

    ``slice.indices`` per axis.
    """
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
