"""Compiled kernels building the slice pairs of the staging plans (private).

These are steps 2-7 of the general plans algorithm of versioned-hdf5's ``staged_changes.rst``
for the hot paths of :mod:`xarray_vhdf5._staging`:

- :func:`slice_rows`: one axis, a slice with a positive step -> the selected
  chunks and, per chunk, its 1-d slice pair ("row"): first point in the
  chunk, first point in the value, number of points, step in the chunk.
- :func:`gather_chunks`: the cartesian product of the selected chunks of every
  axis -> their ``slab_indices`` / ``slab_offsets`` points, stably sorted by
  slab index (a counting sort), with the boundaries of each slab's group.
- :func:`expand_slices`: the pseudo-cartesian product of the per-axis rows of
  each gathered chunk -> the n-d ``start`` / ``count`` / ``stride`` arrays fed
  to ``read_many_slices``.
- :func:`basic_slices`: the three above fused, for the hot path of a basic
  index (one slice or integer per axis, parsed by ``readtools.parse_basic``):
  one call instead of ``ndim + 2``.

The kernels are deliberately dumb: no policy, no masks, no knowledge of
slabs beyond their indices.  The Python wrappers and pure-Python reference
implementations live in :mod:`xarray_vhdf5._staging.kernels`; the two are
checked against each other by ``tests/test_plantools.py``.  Only the checks
that protect the kernels' own memory accesses (ranks, lengths, indices into
the arrays they read) are done here; they are O(input), never O(output).

Units: every start, count and stride is in points (array elements), never in
bytes.  Output index arrays are C-contiguous ``uint64`` (``hsize_t``).
"""

from libc.stdint cimport uint64_t
from libc.stdlib cimport calloc, free, malloc, qsort

cimport numpy as cnp
from planrows cimport (
    COL_CHUNK_START,
    COL_COUNT,
    COL_STRIDE,
    COL_VALUE_START,
    MAX_NDIM,
    NCOLS,
    SMALL,
    _next_in_product,
    _slice_fill,
    _slice_nsel,
)

import numpy as np

cnp.import_array()

__all__ = [
    "SIDE_SLAB",
    "SIDE_VALUE",
    "basic_slices",
    "expand_slices",
    "gather_chunks",
    "slice_rows",
]

cdef inline cnp.ndarray _empty1(Py_ssize_t n, int typenum):
    cdef cnp.npy_intp dims[1]
    dims[0] = n
    return cnp.PyArray_EMPTY(1, dims, typenum, 0)


cdef inline cnp.ndarray _empty2(Py_ssize_t n, Py_ssize_t m, int typenum):
    cdef cnp.npy_intp dims[2]
    dims[0] = n
    dims[1] = m
    return cnp.PyArray_EMPTY(2, dims, typenum, 0)

cdef enum:
    _SLAB = 0
    _VALUE = 1

#: ``expand_slices`` side: a slab (``chunk_start + offset`` on axis 0, step ``chunk_stride``).
SIDE_SLAB = 0
#: ``expand_slices`` side: the value / output (``value_start``, step 1).
SIDE_VALUE = 1

cdef int _check_slice(
    Py_ssize_t start, Py_ssize_t step, Py_ssize_t count, Py_ssize_t chunk_size, Py_ssize_t axis_size
) except -1:
    if start < 0 or step < 1 or chunk_size < 1 or count < 0:
        raise ValueError("slice_rows: need start >= 0, step >= 1, chunk_size >= 1, count >= 0")
    if count > 0 and start + step * (count - 1) >= axis_size:
        raise ValueError("slice_rows: the selection reaches beyond axis_size")
    return 0


def slice_rows(
    Py_ssize_t start,
    Py_ssize_t step,
    Py_ssize_t count,
    Py_ssize_t chunk_size,
    Py_ssize_t axis_size,
):
    """Per-chunk rows of the points ``start + step * k`` for ``0 <= k < count``.

    The caller guarantees ``0 <= start``, ``step >= 1``, ``chunk_size >= 1``
    and that every point is ``< axis_size`` (checked: O(1)).

    Returns ``(chunk_indices, whole, rows)``: ``chunk_indices`` (intp,
    ascending) are the chunks holding at least one point; ``whole`` (bool)
    whether every point of the chunk (trimmed at ``axis_size``) is selected;
    ``rows`` (uint64, shape ``(nchunks, 4)``) holds ``chunk_start,
    value_start, count, stride`` (the stride is 1 where the count is 1).  A
    slice has exactly one row per selected chunk (an implicit ``row_ptr`` of
    ``arange(nchunks + 1)``).
    """
    _check_slice(start, step, count, chunk_size, axis_size)
    cdef Py_ssize_t n_sel = _slice_nsel(start, step, count, chunk_size)
    cdef cnp.ndarray chunk_indices = _empty1(n_sel, cnp.NPY_INTP)
    cdef cnp.ndarray whole = _empty1(n_sel, cnp.NPY_BOOL)
    cdef cnp.ndarray rows = _empty2(n_sel, NCOLS, cnp.NPY_UINT64)
    _slice_fill(
        start, step, count, chunk_size, axis_size,
        <Py_ssize_t *>cnp.PyArray_DATA(chunk_indices),
        <char *>cnp.PyArray_DATA(whole),
        <uint64_t *>cnp.PyArray_DATA(rows),
    )
    return chunk_indices, whole, rows


cdef int _check_vector(cnp.ndarray arr, int typenum, str name) except -1:
    if cnp.PyArray_NDIM(arr) != 1 or cnp.PyArray_TYPE(arr) != typenum:
        raise TypeError(f"{name} must be a 1-d array of {np.dtype(cnp.PyArray_DescrFromType(typenum))}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(arr):
        raise ValueError(f"{name} must be C-contiguous")
    return 0


cdef int _check_offsets(cnp.ndarray arr, Py_ssize_t npoints, str name) except -1:
    if arr is None:
        raise ValueError(f"expand_slices: {name} is required for a slab side")
    _check_vector(arr, cnp.NPY_UINT64, name)
    if cnp.PyArray_DIM(arr, 0) != npoints:
        raise ValueError(f"expand_slices: {name} must have one point per chunk")
    return 0



# ---------------------------------------------------------------------------
# Shared: walk a cartesian product of chunk lists, stably sort it by slab
# ---------------------------------------------------------------------------

cdef struct SlabKey:
    Py_ssize_t slab
    Py_ssize_t point


cdef int _cmp_slab_key(const void *a, const void *b) noexcept nogil:
    cdef const SlabKey *x = <const SlabKey *>a
    cdef const SlabKey *y = <const SlabKey *>b
    if x.slab != y.slab:
        return -1 if x.slab < y.slab else 1
    return -1 if x.point < y.point else (1 if x.point > y.point else 0)


cdef int _walk_product(
    int ndim,
    const Py_ssize_t *n_sel,
    const Py_ssize_t * const *sel,
    const Py_ssize_t *gstride,
    const Py_ssize_t *si,
    Py_ssize_t n_slabs,
    Py_ssize_t npoints,
    Py_ssize_t *flat_out,
    Py_ssize_t *slab_out,
) except -1:
    """Flat index and slab of every point of the product, in C order."""
    cdef Py_ssize_t idx[MAX_NDIM]
    cdef Py_ssize_t p, f, s
    cdef int a
    for a in range(ndim):
        idx[a] = 0
    for p in range(npoints):
        f = 0
        for a in range(ndim):
            f += sel[a][idx[a]] * gstride[a]
        s = si[f]
        if s < 0 or s >= n_slabs:
            raise ValueError(f"slab index {s} of chunk {f} is not in [0, {n_slabs})")
        flat_out[p] = f
        slab_out[p] = s
        _next_in_product(idx, n_sel, ndim)
    return 0


cdef Py_ssize_t _stable_order_by_slab(
    const Py_ssize_t *slab, Py_ssize_t npoints, Py_ssize_t n_slabs, Py_ssize_t *order
) except -1:
    """``order``: the points stably sorted by slab; returns the number of distinct slabs.

    A counting sort when the slab range is small next to the number of
    points, a comparison sort on (slab, point) otherwise: never O(n_slabs)
    for a handful of points on an array with thousands of slabs.
    """
    cdef Py_ssize_t p, s, j, ngroups = 0
    cdef Py_ssize_t *cursor
    cdef SlabKey *keys
    if npoints == 0:
        return 0
    if n_slabs <= 4 * npoints + 16:
        cursor = <Py_ssize_t *>calloc(n_slabs + 1, sizeof(Py_ssize_t))
        if cursor == NULL:
            raise MemoryError()
        for p in range(npoints):
            cursor[slab[p] + 1] += 1
        for s in range(n_slabs):
            if cursor[s + 1]:
                ngroups += 1
            cursor[s + 1] += cursor[s]
        for p in range(npoints):
            j = cursor[slab[p]]
            cursor[slab[p]] += 1
            order[j] = p
        free(cursor)
        return ngroups
    keys = <SlabKey *>malloc(npoints * sizeof(SlabKey))
    if keys == NULL:
        raise MemoryError()
    for p in range(npoints):
        keys[p].slab = slab[p]
        keys[p].point = p
    qsort(keys, npoints, sizeof(SlabKey), _cmp_slab_key)
    for j in range(npoints):
        order[j] = keys[j].point
        if j == 0 or keys[j].slab != keys[j - 1].slab:
            ngroups += 1
    free(keys)
    return ngroups


cdef cnp.ndarray _groups(const Py_ssize_t *slab, const Py_ssize_t *order, Py_ssize_t npoints, Py_ssize_t ngroups):
    """``(slab, first, stop)`` rows over points already sorted by slab through ``order``."""
    cdef cnp.ndarray groups = _empty2(ngroups, 3, cnp.NPY_INTP)
    cdef Py_ssize_t *g = <Py_ssize_t *>cnp.PyArray_DATA(groups)
    cdef Py_ssize_t j, k = -1, s
    for j in range(npoints):
        s = slab[order[j]]
        if k < 0 or g[3 * k] != s:
            if k >= 0:
                g[3 * k + 2] = j
            k += 1
            g[3 * k] = s
            g[3 * k + 1] = j
    if k >= 0:
        g[3 * k + 2] = npoints
    return groups


cdef inline void _unravel(Py_ssize_t p, int ndim, const Py_ssize_t *n_sel, Py_ssize_t *idx) noexcept nogil:
    """Position along each axis of point ``p`` of the C-order product."""
    cdef int a
    for a in range(ndim - 1, -1, -1):
        idx[a] = p % n_sel[a]
        p //= n_sel[a]


def gather_chunks(
    cnp.ndarray slab_indices not None,
    cnp.ndarray slab_offsets not None,
    tuple chunk_indices not None,
    Py_ssize_t n_slabs,
):
    """Gather the chunks of a cartesian product, stably sorted by slab index.

    ``slab_indices`` (intp) and ``slab_offsets`` (uint64) are the C-contiguous
    n-d chunk grids; ``chunk_indices[a]`` (intp, C-contiguous) the chunks
    selected along axis ``a``.  Every slab index must be in ``[0, n_slabs)``.

    Returns ``(pos, flat, slab, offset, groups)``, one row per selected chunk
    in (slab index, C order of the product) order: ``pos`` (intp,
    ``(npoints, ndim)``) the position along each axis within
    ``chunk_indices[a]``; ``flat`` (intp) the chunk's flat index in the grid;
    ``slab`` (intp) and ``offset`` (uint64) its slab index and offset;
    ``groups`` (intp, ``(ngroups, 3)``) ``slab, first, stop`` rows per
    distinct slab index, ascending.
    """
    cdef int ndim = cnp.PyArray_NDIM(slab_indices)
    cdef int a
    cdef Py_ssize_t n_sel[MAX_NDIM]
    cdef Py_ssize_t gstride[MAX_NDIM]
    cdef Py_ssize_t idx[MAX_NDIM]
    cdef const Py_ssize_t *sel[MAX_NDIM]
    cdef Py_ssize_t npoints = 1, p, j, ngroups, gsize
    _check_grid(slab_indices, slab_offsets, n_slabs)
    if ndim > MAX_NDIM or len(chunk_indices) != ndim:
        raise ValueError("gather_chunks: one chunk index array per axis is required")
    gsize = 1
    for a in range(ndim - 1, -1, -1):
        gstride[a] = gsize
        gsize *= cnp.PyArray_DIM(slab_indices, a)
    for a in range(ndim):
        arr = chunk_indices[a]
        _check_vector(arr, cnp.NPY_INTP, "chunk_indices[a]")
        n_sel[a] = cnp.PyArray_DIM(arr, 0)
        sel[a] = <const Py_ssize_t *>cnp.PyArray_DATA(arr)
        for j in range(n_sel[a]):
            if sel[a][j] < 0 or sel[a][j] >= cnp.PyArray_DIM(slab_indices, a):
                raise IndexError(f"gather_chunks: chunk index {sel[a][j]} out of the grid on axis {a}")
        npoints *= n_sel[a]

    cdef const uint64_t *so = <const uint64_t *>cnp.PyArray_DATA(slab_offsets)
    cdef cnp.ndarray tmp_flat = _empty1(npoints, cnp.NPY_INTP)
    cdef cnp.ndarray tmp_slab = _empty1(npoints, cnp.NPY_INTP)
    cdef cnp.ndarray order = _empty1(npoints, cnp.NPY_INTP)
    cdef Py_ssize_t *tf = <Py_ssize_t *>cnp.PyArray_DATA(tmp_flat)
    cdef Py_ssize_t *ts = <Py_ssize_t *>cnp.PyArray_DATA(tmp_slab)
    cdef Py_ssize_t *od = <Py_ssize_t *>cnp.PyArray_DATA(order)
    _walk_product(
        ndim, n_sel, <const Py_ssize_t * const *>sel, gstride,
        <const Py_ssize_t *>cnp.PyArray_DATA(slab_indices), n_slabs, npoints, tf, ts,
    )
    ngroups = _stable_order_by_slab(ts, npoints, n_slabs, od)
    groups = _groups(ts, od, npoints, ngroups)

    cdef cnp.ndarray pos = _empty2(npoints, ndim, cnp.NPY_INTP)
    cdef cnp.ndarray flat = _empty1(npoints, cnp.NPY_INTP)
    cdef cnp.ndarray slab = _empty1(npoints, cnp.NPY_INTP)
    cdef cnp.ndarray offset = _empty1(npoints, cnp.NPY_UINT64)
    cdef Py_ssize_t *pos_p = <Py_ssize_t *>cnp.PyArray_DATA(pos)
    cdef Py_ssize_t *flat_p = <Py_ssize_t *>cnp.PyArray_DATA(flat)
    cdef Py_ssize_t *slab_p = <Py_ssize_t *>cnp.PyArray_DATA(slab)
    cdef uint64_t *off_p = <uint64_t *>cnp.PyArray_DATA(offset)
    for j in range(npoints):
        p = od[j]
        flat_p[j] = tf[p]
        slab_p[j] = ts[p]
        off_p[j] = so[tf[p]]
        _unravel(p, ndim, n_sel, idx)
        for a in range(ndim):
            pos_p[j * ndim + a] = idx[a]
    return pos, flat, slab, offset, groups


cdef int _check_grid(cnp.ndarray slab_indices, cnp.ndarray slab_offsets, Py_ssize_t n_slabs) except -1:
    cdef int a, ndim = cnp.PyArray_NDIM(slab_indices)
    if cnp.PyArray_TYPE(slab_indices) != cnp.NPY_INTP or cnp.PyArray_TYPE(slab_offsets) != cnp.NPY_UINT64:
        raise TypeError("slab_indices must be intp and slab_offsets uint64")
    if not (cnp.PyArray_IS_C_CONTIGUOUS(slab_indices) and cnp.PyArray_IS_C_CONTIGUOUS(slab_offsets)):
        raise ValueError("slab_indices and slab_offsets must be C-contiguous")
    if cnp.PyArray_NDIM(slab_offsets) != ndim:
        raise ValueError("slab_indices and slab_offsets differ in shape")
    for a in range(ndim):
        if cnp.PyArray_DIM(slab_offsets, a) != cnp.PyArray_DIM(slab_indices, a):
            raise ValueError("slab_indices and slab_offsets differ in shape")
    if n_slabs < 1:
        raise ValueError("n_slabs must be >= 1")
    return 0


def expand_slices(
    cnp.ndarray pos not None,
    tuple rows not None,
    tuple row_ptrs not None,
    int src_side,
    int dst_side,
    cnp.ndarray src_offset=None,
    cnp.ndarray dst_offset=None,
):
    """Expand the per-axis rows of each chunk into n-d slice pairs.

    ``pos`` (intp, ``(npoints, ndim)``, C-contiguous): for each chunk its
    position along each axis in the selected-chunk list of that axis.
    ``rows[a]`` (uint64, ``(nrows_a, 4)``, C-contiguous) and ``row_ptrs[a]``
    (intp, ``nsel_a + 1``, non-decreasing, ``row_ptrs[a][-1] <= nrows_a``):
    the rows of axis ``a``; ``row_ptrs[a]`` None means one row per selected
    chunk (:func:`slice_rows`).  ``src_side`` /
    ``dst_side``: :data:`SIDE_SLAB` (start ``chunk_start``, plus the chunk's
    ``*_offset`` on axis 0, step ``stride``) or :data:`SIDE_VALUE` (start
    ``value_start``, step 1).  ``src_offset`` / ``dst_offset`` (uint64,
    ``npoints``) are required for a slab side, ignored otherwise.

    Returns ``(src_start, dst_start, count, src_stride, dst_stride,
    point_end)``: uint64 arrays of shape ``(nslices, ndim)``, chunk by chunk
    the product of its rows along every axis in C order; ``point_end`` (intp,
    ``npoints``) the end of each chunk's slice pairs (cumulative counts).
    """
    cdef int ndim
    cdef Py_ssize_t npoints
    cdef int a, d
    cdef const Py_ssize_t *rp[MAX_NDIM]
    cdef bint implicit[MAX_NDIM]
    cdef const uint64_t *rw[MAX_NDIM]
    cdef Py_ssize_t nptr[MAX_NDIM]
    cdef Py_ssize_t lo[MAX_NDIM]
    cdef Py_ssize_t hi[MAX_NDIM]
    cdef Py_ssize_t cur[MAX_NDIM]
    cdef Py_ssize_t p, q, total, n, j, r
    cdef const uint64_t *soff = NULL
    cdef const uint64_t *doff = NULL
    cdef const uint64_t *row
    cdef uint64_t extra

    if cnp.PyArray_NDIM(pos) != 2 or cnp.PyArray_TYPE(pos) != cnp.NPY_INTP:
        raise TypeError("expand_slices: pos must be a 2-d intp array")
    if not cnp.PyArray_IS_C_CONTIGUOUS(pos):
        raise ValueError("expand_slices: pos must be C-contiguous")
    ndim = cnp.PyArray_DIM(pos, 1)
    npoints = cnp.PyArray_DIM(pos, 0)
    if ndim > MAX_NDIM or len(rows) != ndim or len(row_ptrs) != ndim:
        raise ValueError("expand_slices: one row table and one row_ptr per axis are required")
    if (src_side != _SLAB and src_side != _VALUE) or (dst_side != _SLAB and dst_side != _VALUE):
        raise ValueError("expand_slices: sides must be SIDE_SLAB or SIDE_VALUE")
    if src_side == _SLAB:
        _check_offsets(src_offset, npoints, "src_offset")
        soff = <const uint64_t *>cnp.PyArray_DATA(src_offset)
    if dst_side == _SLAB:
        _check_offsets(dst_offset, npoints, "dst_offset")
        doff = <const uint64_t *>cnp.PyArray_DATA(dst_offset)
    for a in range(ndim):
        ptr = row_ptrs[a]
        tab = rows[a]
        if (
            not isinstance(tab, cnp.ndarray)
            or cnp.PyArray_NDIM(tab) != 2 or cnp.PyArray_TYPE(tab) != cnp.NPY_UINT64
            or cnp.PyArray_DIM(tab, 1) != NCOLS or not cnp.PyArray_IS_C_CONTIGUOUS(tab)
        ):
            raise TypeError("expand_slices: rows[a] must be a C-contiguous (nrows, 4) uint64 array")
        rw[a] = <const uint64_t *>cnp.PyArray_DATA(tab)
        implicit[a] = ptr is None
        if implicit[a]:
            nptr[a] = cnp.PyArray_DIM(tab, 0) + 1
            rp[a] = NULL
            continue
        _check_vector(ptr, cnp.NPY_INTP, "row_ptrs[a]")
        nptr[a] = cnp.PyArray_DIM(ptr, 0)
        rp[a] = <const Py_ssize_t *>cnp.PyArray_DATA(ptr)
        if nptr[a] < 1 or rp[a][0] < 0 or rp[a][nptr[a] - 1] > cnp.PyArray_DIM(tab, 0):
            raise ValueError("expand_slices: row_ptrs[a] does not fit rows[a]")
        for j in range(nptr[a] - 1):
            if rp[a][j + 1] < rp[a][j]:
                raise ValueError("expand_slices: row_ptrs[a] must be non-decreasing")

    cdef const Py_ssize_t *pp = <const Py_ssize_t *>cnp.PyArray_DATA(pos)
    cdef cnp.ndarray point_end = _empty1(npoints, cnp.NPY_INTP)
    cdef Py_ssize_t *pe = <Py_ssize_t *>cnp.PyArray_DATA(point_end)
    # Pass 1: count the slice pairs.
    total = 0
    for p in range(npoints):
        n = 1
        for a in range(ndim):
            q = pp[p * ndim + a]
            if q < 0 or q >= nptr[a] - 1:
                raise IndexError(f"expand_slices: pos {q} out of range on axis {a}")
            if not implicit[a]:
                n *= rp[a][q + 1] - rp[a][q]
        total += n
        pe[p] = total

    cdef cnp.ndarray src_start = _empty2(total, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray dst_start = _empty2(total, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray count = _empty2(total, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray src_stride = _empty2(total, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray dst_stride = _empty2(total, ndim, cnp.NPY_UINT64)
    cdef uint64_t *o_ss = <uint64_t *>cnp.PyArray_DATA(src_start)
    cdef uint64_t *o_ds = <uint64_t *>cnp.PyArray_DATA(dst_start)
    cdef uint64_t *o_c = <uint64_t *>cnp.PyArray_DATA(count)
    cdef uint64_t *o_sst = <uint64_t *>cnp.PyArray_DATA(src_stride)
    cdef uint64_t *o_dst = <uint64_t *>cnp.PyArray_DATA(dst_stride)

    # Pass 2: per chunk, an odometer over its rows along every axis.
    j = 0
    for p in range(npoints):
        n = 1
        for a in range(ndim):
            q = pp[p * ndim + a]
            if implicit[a]:
                lo[a] = q
                hi[a] = q + 1
            else:
                lo[a] = rp[a][q]
                hi[a] = rp[a][q + 1]
            cur[a] = lo[a]
            if hi[a] == lo[a]:
                n = 0
        if n == 0:
            continue
        while True:
            for a in range(ndim):
                row = rw[a] + cur[a] * NCOLS
                o_c[j * ndim + a] = row[COL_COUNT]
                if src_side == _SLAB:
                    extra = soff[p] if a == 0 else 0
                    o_ss[j * ndim + a] = row[COL_CHUNK_START] + extra
                    o_sst[j * ndim + a] = row[COL_STRIDE]
                else:
                    o_ss[j * ndim + a] = row[COL_VALUE_START]
                    o_sst[j * ndim + a] = 1
                if dst_side == _SLAB:
                    extra = doff[p] if a == 0 else 0
                    o_ds[j * ndim + a] = row[COL_CHUNK_START] + extra
                    o_dst[j * ndim + a] = row[COL_STRIDE]
                else:
                    o_ds[j * ndim + a] = row[COL_VALUE_START]
                    o_dst[j * ndim + a] = 1
            j += 1
            a = ndim - 1
            while a >= 0:
                cur[a] += 1
                if cur[a] < hi[a]:
                    break
                cur[a] = lo[a]
                a -= 1
            if a < 0:
                break
    return src_start, dst_start, count, src_stride, dst_stride, point_end


def basic_slices(
    tuple starts not None,
    tuple steps not None,
    tuple counts not None,
    tuple chunk_size not None,
    tuple shape not None,
    cnp.ndarray slab_indices not None,
    cnp.ndarray slab_offsets not None,
    Py_ssize_t n_slabs,
    int src_side,
    int dst_side,
):
    """Steps 2-7 fused for a basic index: one slice (step >= 1) per axis.

    Exactly ``expand_slices(gather_chunks(slice_rows(...) per axis))`` with
    implicit row pointers - the composition the pure-Python reference
    computes - in one call, for the hot path of ``__getitem__`` /
    ``__setitem__``: per axis ``start, step, count`` (integers are slices of
    one point), ``chunk_size`` and ``shape`` as tuples of ints; the slab
    side gets each chunk's offset on axis 0.

    Returns ``(groups, src_start, dst_start, count, src_stride,
    dst_stride)``: one slice pair per selected chunk (a basic index selects
    one box per chunk), sorted by slab index like :func:`gather_chunks`;
    ``groups`` (intp, ``(ngroups, 3)``) rows ``slab, first, stop`` over them.
    """
    cdef int ndim = cnp.PyArray_NDIM(slab_indices)
    cdef int a
    cdef Py_ssize_t st[MAX_NDIM]
    cdef Py_ssize_t sp[MAX_NDIM]
    cdef Py_ssize_t cn[MAX_NDIM]
    cdef Py_ssize_t cs[MAX_NDIM]
    cdef Py_ssize_t sz[MAX_NDIM]
    cdef Py_ssize_t n_sel[MAX_NDIM]
    cdef Py_ssize_t gstride[MAX_NDIM]
    cdef Py_ssize_t idx[MAX_NDIM]
    cdef Py_ssize_t *sel[MAX_NDIM]
    cdef uint64_t *rws[MAX_NDIM]
    cdef Py_ssize_t npoints = 1, total_sel = 0, p, f, s, j, ngroups, gsize
    cdef const uint64_t *row
    cdef uint64_t extra

    if ndim > MAX_NDIM or len(starts) != ndim or len(steps) != ndim or len(counts) != ndim \
            or len(chunk_size) != ndim or len(shape) != ndim:
        raise ValueError("basic_slices: one start, step, count, chunk size and length per axis")
    if (src_side != _SLAB and src_side != _VALUE) or (dst_side != _SLAB and dst_side != _VALUE):
        raise ValueError("basic_slices: sides must be SIDE_SLAB or SIDE_VALUE")
    _check_grid(slab_indices, slab_offsets, n_slabs)
    gsize = 1
    for a in range(ndim - 1, -1, -1):
        st[a] = starts[a]
        sp[a] = steps[a]
        cn[a] = counts[a]
        cs[a] = chunk_size[a]
        sz[a] = shape[a]
        _check_slice(st[a] if cn[a] else 0, sp[a], cn[a], cs[a], sz[a])
        if cnp.PyArray_DIM(slab_indices, a) != (sz[a] + cs[a] - 1) // cs[a] \
                or cnp.PyArray_DIM(slab_offsets, a) != cnp.PyArray_DIM(slab_indices, a):
            raise ValueError("basic_slices: slab_indices / slab_offsets do not match shape / chunk_size")
        gstride[a] = gsize
        gsize *= cnp.PyArray_DIM(slab_indices, a)
        n_sel[a] = _slice_nsel(st[a], sp[a], cn[a], cs[a])
        total_sel += n_sel[a]
        npoints *= n_sel[a]

    # Per-axis chunk lists and rows, in one scratch block (kept alive below).
    cdef cnp.ndarray sel_buf = _empty1(total_sel + 1, cnp.NPY_INTP)
    cdef cnp.ndarray row_buf = _empty2(total_sel + 1, NCOLS, cnp.NPY_UINT64)
    j = 0
    for a in range(ndim):
        sel[a] = <Py_ssize_t *>cnp.PyArray_DATA(sel_buf) + j
        rws[a] = <uint64_t *>cnp.PyArray_DATA(row_buf) + j * NCOLS
        _slice_fill(st[a], sp[a], cn[a], cs[a], sz[a], sel[a], NULL, rws[a])
        j += n_sel[a]

    cdef const uint64_t *so = <const uint64_t *>cnp.PyArray_DATA(slab_offsets)
    # Scratch: on the stack for the usual handful of chunks, else numpy-owned.
    cdef Py_ssize_t small[3 * SMALL]
    cdef cnp.ndarray scratch
    cdef Py_ssize_t *tf
    if npoints <= SMALL:
        tf = small
    else:
        scratch = _empty1(3 * npoints, cnp.NPY_INTP)
        tf = <Py_ssize_t *>cnp.PyArray_DATA(scratch)
    cdef Py_ssize_t *ts = tf + npoints
    cdef Py_ssize_t *od = ts + npoints
    _walk_product(
        ndim, n_sel, <const Py_ssize_t * const *>sel, gstride,
        <const Py_ssize_t *>cnp.PyArray_DATA(slab_indices), n_slabs, npoints, tf, ts,
    )
    ngroups = _stable_order_by_slab(ts, npoints, n_slabs, od)
    groups = _groups(ts, od, npoints, ngroups)

    cdef cnp.ndarray src_start = _empty2(npoints, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray dst_start = _empty2(npoints, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray count = _empty2(npoints, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray src_stride = _empty2(npoints, ndim, cnp.NPY_UINT64)
    cdef cnp.ndarray dst_stride = _empty2(npoints, ndim, cnp.NPY_UINT64)
    cdef uint64_t *o_ss = <uint64_t *>cnp.PyArray_DATA(src_start)
    cdef uint64_t *o_ds = <uint64_t *>cnp.PyArray_DATA(dst_start)
    cdef uint64_t *o_c = <uint64_t *>cnp.PyArray_DATA(count)
    cdef uint64_t *o_sst = <uint64_t *>cnp.PyArray_DATA(src_stride)
    cdef uint64_t *o_dst = <uint64_t *>cnp.PyArray_DATA(dst_stride)
    # Each chunk's single slice pair, in slab order.
    for j in range(npoints):
        p = od[j]
        f = tf[p]
        _unravel(p, ndim, n_sel, idx)
        for a in range(ndim):
            row = rws[a] + idx[a] * NCOLS
            o_c[j * ndim + a] = row[COL_COUNT]
            extra = so[f] if a == 0 else 0
            if src_side == _SLAB:
                o_ss[j * ndim + a] = row[COL_CHUNK_START] + extra
                o_sst[j * ndim + a] = row[COL_STRIDE]
            else:
                o_ss[j * ndim + a] = row[COL_VALUE_START]
                o_sst[j * ndim + a] = 1
            if dst_side == _SLAB:
                o_ds[j * ndim + a] = row[COL_CHUNK_START] + extra
                o_dst[j * ndim + a] = row[COL_STRIDE]
            else:
                o_ds[j * ndim + a] = row[COL_VALUE_START]
                o_dst[j * ndim + a] = 1
    return groups, src_start, dst_start, count, src_stride, dst_stride
