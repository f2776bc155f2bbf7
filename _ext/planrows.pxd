"""Shared pieces of the plan kernels (``plantools``) and the fused read (``readtools``).

Row tables, in points: one row per (axis, selected chunk), ``NCOLS`` uint64
columns. Inline functions: compiled into each module that cimports them.
"""

from libc.stdint cimport uint64_t

cdef enum:
    MAX_NDIM = 64  # numpy's NPY_MAXDIMS
    SMALL = 16     # selections up to this many chunks use stack scratch space

# Columns of a per-axis row table, shape (nrows, 4), uint64.
cdef enum:
    COL_CHUNK_START = 0  # first point, relative to the chunk's first point
    COL_VALUE_START = 1  # first point in the (normalised) value / output
    COL_COUNT = 2        # number of points
    COL_STRIDE = 3       # step between points in the chunk (>= 1)
    NCOLS = 4


cdef inline Py_ssize_t _slice_nsel(
    Py_ssize_t start, Py_ssize_t step, Py_ssize_t count, Py_ssize_t chunk_size
) noexcept nogil:
    """Number of chunks touched by ``start + step * k``, ``0 <= k < count``."""
    cdef Py_ssize_t n_sel = 0, k = 0, c
    while k < count:
        c = (start + step * k) // chunk_size
        n_sel += 1
        k = ((c + 1) * chunk_size - 1 - start) // step + 1
    return n_sel


cdef inline void _slice_fill(
    Py_ssize_t start,
    Py_ssize_t step,
    Py_ssize_t count,
    Py_ssize_t chunk_size,
    Py_ssize_t axis_size,
    Py_ssize_t *ci,
    char *wh,
    uint64_t *rw,
) noexcept nogil:
    """Fill ``_slice_nsel`` chunk indices, whole flags and rows (see slice_rows)."""
    cdef Py_ssize_t i = 0, k = 0, k_last, n, c, c0, ext, p
    while k < count:
        p = start + step * k
        c = p // chunk_size
        c0 = c * chunk_size
        k_last = (c0 + chunk_size - 1 - start) // step
        if k_last > count - 1:
            k_last = count - 1
        n = k_last - k + 1
        ext = axis_size - c0
        if ext > chunk_size:
            ext = chunk_size
        ci[i] = c
        if wh != NULL:
            wh[i] = n == ext
        rw[i * NCOLS + COL_CHUNK_START] = <uint64_t>(p - c0)
        rw[i * NCOLS + COL_VALUE_START] = <uint64_t>k
        rw[i * NCOLS + COL_COUNT] = <uint64_t>n
        rw[i * NCOLS + COL_STRIDE] = <uint64_t>(step if n > 1 else 1)
        i += 1
        k = k_last + 1


cdef inline bint _next_in_product(Py_ssize_t *idx, const Py_ssize_t *n, int ndim) noexcept nogil:
    """Advance ``idx`` to the next point of the product of ``range(n[a])`` in C order.

    Returns False (``idx`` back to all zeros) after the last point.
    """
    cdef int a = ndim - 1
    while a >= 0:
        idx[a] += 1
        if idx[a] < n[a]:
            return True
        idx[a] = 0
        a -= 1
    return False
