"""Strided n-d copy between two memory buffers of one fixed-size dtype (shared, inline).

Used by ``slicetools`` (numpy-to-numpy slice lists) and ``readtools`` (the fused
read of in-memory chunks). Byte steps are signed (numpy strides may be negative
or 0); trailing axes contiguous on both sides are merged into one ``memcpy``.
"""

from libc.string cimport memcpy


cdef enum:
    COPY_MAX_NDIM = 64  # numpy's NPY_MAXDIMS


cdef inline void copy_item(char *dst, const char *src, Py_ssize_t itemsize) noexcept nogil:
    # Constant sizes let the compiler inline the copy (unaligned-safe).
    if itemsize == 8:
        memcpy(dst, src, 8)
    elif itemsize == 4:
        memcpy(dst, src, 4)
    elif itemsize == 1:
        dst[0] = src[0]
    elif itemsize == 2:
        memcpy(dst, src, 2)
    elif itemsize == 16:
        memcpy(dst, src, 16)
    else:
        memcpy(dst, src, itemsize)


cdef inline void copy_box(
    const char *src, const Py_ssize_t *sstep, char *dst, const Py_ssize_t *dstep,
    const Py_ssize_t *cnt, int ndim, Py_ssize_t itemsize,
) noexcept nogil:
    """Copy ``cnt`` points (an n-d box, every count >= 1) with byte steps ``sstep`` / ``dstep`` per axis."""
    cdef Py_ssize_t idx[COPY_MAX_NDIM]
    cdef Py_ssize_t n_inner = cnt[ndim - 1], run, j
    cdef Py_ssize_t s_inner = sstep[ndim - 1], d_inner = dstep[ndim - 1]
    cdef bint contiguous = s_inner == itemsize and d_inner == itemsize
    cdef int d, nd = ndim
    if contiguous:  # merge outer axes whose step equals the run length on both sides
        run = n_inner * itemsize
        while nd > 1 and sstep[nd - 2] == run and dstep[nd - 2] == run:
            n_inner *= cnt[nd - 2]
            run = n_inner * itemsize
            nd -= 1
    for d in range(nd - 1):
        idx[d] = 0
    while True:
        if contiguous:
            memcpy(dst, src, n_inner * itemsize)
        else:
            for j in range(n_inner):
                copy_item(dst + j * d_inner, src + j * s_inner, itemsize)
        # Odometer over the outer axes nd-2 .. 0.
        d = nd - 2
        while d >= 0:
            idx[d] += 1
            src += sstep[d]
            dst += dstep[d]
            if idx[d] < cnt[d]:
                break
            src -= sstep[d] * cnt[d]
            dst -= dstep[d] * cnt[d]
            idx[d] = 0
            d -= 1
        if d < 0:
            return
