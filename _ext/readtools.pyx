"""Compiled kernels for basic indices: parsing, and the fused read of in-memory chunks (private).

- :func:`parse_basic`: step 1 of the plans algorithm (versioned-hdf5's ``staged_changes.rst``) for
  the hot path: a tuple of one slice or integer per axis -> the normalised
  slice of every axis.
- :func:`read_basic`: ``__getitem__`` of such an index when every selected
  chunk lies on a plain numpy slab: per chunk, a strided copy from its slab
  straight into the result (the boxes ``plantools.basic_slices`` would list),
  without building index arrays.

Python wrappers and the pure-Python references live in
:mod:`xarray_vhdf5._staging.kernels` and :mod:`xarray_vhdf5._staging.read_basic`;
``tests/test_plantools.py`` and ``tests/test_staging_fastpath.py`` check them
against each other. Units: points for starts, counts and steps; bytes only
for the strides of the copy loop.
"""

from cpython.slice cimport PySlice_AdjustIndices, PySlice_Unpack
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc

cimport numpy as cnp
from stridedcopy cimport copy_box
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


cdef extern from "Python.h":
    # exc=NULL: out-of-range values saturate instead of raising.
    Py_ssize_t PyNumber_AsSsize_t(object o, void *exc) except? -1

__all__ = ["parse_basic", "read_basic"]

# ``parse_basic`` kinds (equal to ``xarray_vhdf5._staging.reference_kernels.KIND_*``).
cdef enum:
    KIND_SLICE = 0
    KIND_REVERSE = 1
    KIND_SCALAR = 2


cdef int _parse(
    object idx, tuple shape, Py_ssize_t *st, Py_ssize_t *sp, Py_ssize_t *cn, int *kd
) except -2:
    """Parse a basic index into ``st, sp, cn, kd`` (see :func:`parse_basic`).

    Returns the number of axes, or -1 when ``idx`` is not basic.
    """
    cdef tuple t
    cdef Py_ssize_t n = len(shape), a, size, start, stop, step, count, v
    if type(idx) is tuple:
        t = <tuple>idx
    else:
        t = (idx,)
    if len(t) != n or n > MAX_NDIM:
        return -1
    for a in range(n):
        elem = t[a]
        size = shape[a]
        if type(elem) is slice:
            if PySlice_Unpack(elem, &start, &stop, &step) < 0:
                raise  # TypeError / ValueError, as slice.indices
            count = PySlice_AdjustIndices(size, &start, &stop, step)
            if step > 0:
                kd[a] = KIND_SLICE
            else:
                if count:
                    start += (count - 1) * step  # the lowest point
                step = -step
                kd[a] = KIND_REVERSE
            st[a] = start if count else 0
            sp[a] = step
            cn[a] = count
        elif type(elem) is int or isinstance(elem, np.integer):
            v = PyNumber_AsSsize_t(elem, NULL)  # saturates: huge values are out of bounds
            if v < -size or v >= size:
                return -1
            st[a] = v + size if v < 0 else v
            sp[a] = 1
            cn[a] = 1
            kd[a] = KIND_SCALAR
        else:
            return -1
    return <int>n


def parse_basic(object idx, tuple shape not None):
    """Step 1 for a basic index: one ``slice`` or ``int`` per axis, nothing else.

    ``idx`` is what the user passed to ``__getitem__``; ``shape`` the array's
    shape.  Returns None unless ``idx`` is exactly one ``slice`` or integer
    (``int`` or ``numpy.integer``, not bool) per axis (a tuple, or a single
    element for 1-d) with every integer in bounds - the general path then handles it, numpy's errors
    included.  Otherwise ``(starts, steps, counts, kinds)``, tuples of ints:
    the selected points of every axis are ``start + step * k`` for
    ``0 <= k < count`` with ``step >= 1`` (a negative step is normalised to
    ascending order and marked :data:`KIND_REVERSE`; an integer is one point
    marked :data:`KIND_SCALAR`).  Slices follow ``slice.indices`` exactly
    (``TypeError`` for non-integer bounds, ``ValueError`` for a zero step).
    """
    cdef Py_ssize_t st[MAX_NDIM]
    cdef Py_ssize_t sp[MAX_NDIM]
    cdef Py_ssize_t cn[MAX_NDIM]
    cdef int kd[MAX_NDIM]
    cdef int a, n = _parse(idx, shape, st, sp, cn, kd)
    if n < 0:
        return None
    return (
        tuple([st[a] for a in range(n)]),
        tuple([sp[a] for a in range(n)]),
        tuple([cn[a] for a in range(n)]),
        tuple([kd[a] for a in range(n)]),
    )


cdef inline bint _plain_memory_dtype(cnp.dtype dtype):
    """Fixed-size dtypes without Python references: copied as bytes."""
    return dtype.type_num < cnp.NPY_NTYPES_LEGACY and dtype.type_num != cnp.NPY_OBJECT \
        and not dtype.hasobject and cnp.PyDataType_ELSIZE(dtype) > 0


def read_basic(
    object idx,
    tuple shape not None,
    tuple chunk_size not None,
    cnp.ndarray slab_indices not None,
    cnp.ndarray slab_offsets not None,
    list slabs not None,
    list lazy not None,
    cnp.dtype dtype not None,
):
    """``__getitem__`` of a basic index whose chunks all lie on plain numpy slabs, fused.

    :func:`parse_basic`, then per selected chunk (the boxes of
    :func:`basic_slices`) a strided copy from its slab straight into the
    result, without building index arrays.  ``slabs`` / ``lazy`` are the
    array's lists (``lazy[s]`` not None: a pending conversion).

    Returns numpy's result (a new array; a numpy scalar when every axis is an
    integer), or None when this kernel does not apply and nothing is
    returned: ``idx`` not basic, 0-d arrays, a dtype holding Python objects,
    a chunk whose slab is not a numpy array of exactly ``dtype`` with no
    pending conversion, or metadata that does not fit (then the general path
    decides, its errors included).  Agreement with the general path:
    ``tests/test_staging_fastpath.py``.
    """
    cdef Py_ssize_t st[MAX_NDIM]
    cdef Py_ssize_t sp[MAX_NDIM]
    cdef Py_ssize_t cn[MAX_NDIM]
    cdef int kd[MAX_NDIM]
    cdef Py_ssize_t cs[MAX_NDIM]
    cdef Py_ssize_t n_sel[MAX_NDIM]
    cdef Py_ssize_t gstride[MAX_NDIM]
    cdef Py_ssize_t dstep[MAX_NDIM]
    cdef Py_ssize_t sstep[MAX_NDIM]
    cdef Py_ssize_t cnt[MAX_NDIM]
    cdef Py_ssize_t pick[MAX_NDIM]
    cdef Py_ssize_t *sel[MAX_NDIM]
    cdef uint64_t *rws[MAX_NDIM]
    cdef Py_ssize_t small_sel[4 * SMALL]
    cdef uint64_t small_rows[4 * SMALL * NCOLS]
    cdef Py_ssize_t *sel_buf = small_sel
    cdef uint64_t *row_buf = small_rows
    cdef int a, ndim = _parse(idx, shape, st, sp, cn, kd)
    cdef Py_ssize_t total_sel = 0, j, f, s, n_slabs = len(slabs), itemsize
    cdef Py_ssize_t origin = 0, ext, last
    cdef const uint64_t *row
    cdef const Py_ssize_t *si
    cdef const uint64_t *so
    cdef char *out_buf
    cdef const char *src_buf
    cdef cnp.ndarray src
    if ndim <= 0 or not _plain_memory_dtype(dtype) or len(lazy) != n_slabs:
        return None
    if len(chunk_size) != ndim or cnp.PyArray_NDIM(slab_indices) != ndim \
            or cnp.PyArray_NDIM(slab_offsets) != ndim:
        return None
    itemsize = cnp.PyDataType_ELSIZE(dtype)
    # The result, C-contiguous: byte steps of the normalised axes (integers
    # are axes of length 1), reversed axes walked backwards.
    out = np.empty(tuple([cn[a] for a in range(ndim) if kd[a] != KIND_SCALAR]), dtype)
    out_buf = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
    f = itemsize
    for a in range(ndim - 1, -1, -1):
        cs[a] = chunk_size[a]
        if cs[a] < 1 or cnp.PyArray_DIM(slab_indices, a) != (<Py_ssize_t>shape[a] + cs[a] - 1) // cs[a]:
            return None
        dstep[a] = f
        if kd[a] == KIND_REVERSE and cn[a]:
            origin += (cn[a] - 1) * f
            dstep[a] = -f
        f *= cn[a]
        n_sel[a] = _slice_nsel(st[a], sp[a], cn[a], cs[a])
        total_sel += n_sel[a]
    if f == 0:  # nothing selected
        return out if cnp.PyArray_NDIM(<cnp.ndarray>out) else out[()]
    if not (cnp.PyArray_IS_C_CONTIGUOUS(slab_indices) and cnp.PyArray_IS_C_CONTIGUOUS(slab_offsets)) \
            or cnp.PyArray_TYPE(slab_indices) != cnp.NPY_INTP \
            or cnp.PyArray_TYPE(slab_offsets) != cnp.NPY_UINT64:
        return None
    if total_sel > 4 * SMALL:
        sel_buf = <Py_ssize_t *>malloc(total_sel * sizeof(Py_ssize_t))
        row_buf = <uint64_t *>malloc(total_sel * NCOLS * sizeof(uint64_t))
        if sel_buf == NULL or row_buf == NULL:
            free(sel_buf)
            free(row_buf)
            raise MemoryError()
    try:
        j = 0
        f = 1
        for a in range(ndim - 1, -1, -1):
            gstride[a] = f
            f *= cnp.PyArray_DIM(slab_indices, a)
        for a in range(ndim):
            sel[a] = sel_buf + j
            rws[a] = row_buf + j * NCOLS
            _slice_fill(st[a], sp[a], cn[a], cs[a], shape[a], sel[a], NULL, rws[a])
            j += n_sel[a]
            pick[a] = 0
        si = <const Py_ssize_t *>cnp.PyArray_DATA(slab_indices)
        so = <const uint64_t *>cnp.PyArray_DATA(slab_offsets)
        # An odometer over the selected chunks, in C order.
        while True:
            f = 0
            for a in range(ndim):
                f += sel[a][pick[a]] * gstride[a]
            s = si[f]
            if s < 0 or s >= n_slabs or lazy[s] is not None:
                return None
            obj = slabs[s]
            if type(obj) is not np.ndarray:
                return None
            src = <cnp.ndarray>obj
            if cnp.PyArray_NDIM(src) != ndim or not (
                <void *>cnp.PyArray_DESCR(src) == <void *>dtype
                or cnp.PyArray_EquivTypes(src.dtype, dtype)
            ):
                return None
            src_buf = <const char *>cnp.PyArray_DATA(src)
            j = origin
            for a in range(ndim):
                row = rws[a] + pick[a] * NCOLS
                last = <Py_ssize_t>row[COL_CHUNK_START] + (<Py_ssize_t>row[COL_COUNT] - 1) * <Py_ssize_t>row[COL_STRIDE]
                ext = <Py_ssize_t>row[COL_CHUNK_START]
                if a == 0:
                    ext += <Py_ssize_t>so[f]
                    last += <Py_ssize_t>so[f]
                if last >= cnp.PyArray_DIM(src, a):
                    return None  # metadata beyond the slab: the general path reports it
                src_buf += ext * cnp.PyArray_STRIDE(src, a)
                sstep[a] = <Py_ssize_t>row[COL_STRIDE] * cnp.PyArray_STRIDE(src, a)
                j += <Py_ssize_t>row[COL_VALUE_START] * dstep[a]
                cnt[a] = <Py_ssize_t>row[COL_COUNT]
            copy_box(src_buf, sstep, out_buf + j, dstep, cnt, ndim, itemsize)
            if not _next_in_product(pick, n_sel, ndim):
                break
    finally:
        if sel_buf != small_sel:
            free(sel_buf)
            free(row_buf)
    return out if cnp.PyArray_NDIM(<cnp.ndarray>out) else out[()]
