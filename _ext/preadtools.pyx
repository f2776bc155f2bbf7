"""Compiled reads of whole stored chunks straight into a result array (private).

A version's chunks stored without filters need no decoding: each is a C-order
block of ``chunks`` points at a known byte offset of the file. libhdf5 reads
such a chunk into a chunk buffer and copies the selected part out; the
manifest's Python reference (``ChunkManifest._read_unfiltered``,
:mod:`xarray_vhdf5._backend.manifest`) does the same through one reused
buffer. :func:`read_chunks_into` reads each chunk with ``preadv`` whose
vectors point into the result itself: every run of selected points (along
the last axis) lands where it belongs, the rest of the chunk in a scratch
buffer, so that each byte is copied once, by the kernel.

The function is dumb: the boxes (one per chunk: where the selection starts in
the chunk and in the result, how many points along each axis) come from the
caller, which checks them against the chunk and the result; the result is
writable, its last axis contiguous and its strides non-negative (a view into a
larger array will do: a rechunk's buffer). It runs without the GIL. Units: points for the
boxes, bytes for offsets and the item size. ``tests/test_preadtools.py``
checks it against the reference.
"""

from libc.errno cimport errno
from libc.stdint cimport uint64_t
from libc.stdlib cimport free, malloc

cimport numpy as cnp

import os

cnp.import_array()

__all__ = ["read_chunks_into"]


cdef extern from "<sys/uio.h>" nogil:
    cdef struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t preadv(int fd, const iovec *iov, int iovcnt, long long offset)


cdef enum:
    MAX_NDIM = 32
    # POSIX guarantees at least 16 (_XOPEN_IOV_MAX); Linux and macOS take 1024.
    VECTORS = 1024


cdef struct Reader:
    int fd
    iovec *iov
    int n               # vectors pending
    long long at        # file offset of the first pending byte
    size_t pending      # bytes pending
    char *scratch
    size_t scratch_size


cdef int _flush(Reader *r) noexcept nogil:
    """Read the pending vectors; 0: done, 1: short (the file ends), -1: errno set."""
    cdef ssize_t got
    cdef int first = 0
    cdef int i
    cdef size_t want
    while first < r.n:
        want = 0
        for i in range(first, r.n):
            want += r.iov[i].iov_len
        got = preadv(r.fd, r.iov + first, r.n - first, r.at)
        if got < 0:
            return -1
        if got == 0:
            return 1
        r.at += got
        if <size_t>got == want:
            break
        # a short read that is not the end of the file: go on after the bytes read
        while first < r.n and <size_t>got >= r.iov[first].iov_len:
            got -= r.iov[first].iov_len
            first += 1
        if first < r.n:
            r.iov[first].iov_base = <char *>r.iov[first].iov_base + got
            r.iov[first].iov_len -= got
    r.n = 0
    r.pending = 0
    return 0


cdef int _add(Reader *r, char *base, size_t length, bint scratch) noexcept nogil:
    """Append a vector (merged with the last when adjacent); flush when the vectors are full.

    0: done; 1: the file ended; -1: ``preadv`` failed (errno); -2: no memory
    for the scratch buffer (allocated at its first use: a read with no gap,
    the common case of whole chunks, allocates none).
    """
    cdef int status
    cdef iovec *last
    if length == 0:
        return 0
    if scratch and r.scratch == NULL:
        r.scratch = <char *>malloc(r.scratch_size)
        if r.scratch == NULL:
            return -2
    if r.n:
        last = &r.iov[r.n - 1]
        if scratch and last.iov_base == <void *>r.scratch and last.iov_len + length <= r.scratch_size:
            last.iov_len += length
            r.pending += length
            return 0
        if not scratch and <char *>last.iov_base + last.iov_len == base and last.iov_base != <void *>r.scratch:
            last.iov_len += length
            r.pending += length
            return 0
    if r.n == VECTORS:
        status = _flush(r)
        if status:
            return status
    while scratch and length > r.scratch_size:  # a gap larger than the scratch: in pieces
        r.iov[r.n].iov_base = r.scratch
        r.iov[r.n].iov_len = r.scratch_size
        r.n += 1
        r.pending += r.scratch_size
        length -= r.scratch_size
        if r.n == VECTORS:
            status = _flush(r)
            if status:
                return status
    r.iov[r.n].iov_base = <void *>(r.scratch if scratch else base)
    r.iov[r.n].iov_len = length
    r.n += 1
    r.pending += length
    return 0


def read_chunks_into(
    int fd,
    cnp.ndarray out,
    tuple chunks,
    const uint64_t[:] offsets,
    const Py_ssize_t[:, :] in_start,
    const Py_ssize_t[:, :] out_start,
    const Py_ssize_t[:, :] counts,
):
    """Read the stored chunks at ``offsets`` and put the boxes they hold into ``out``.

    Parameters
    ----------
    fd : int
        A descriptor of the file, open for reading.
    out : numpy.ndarray
        The result, of the chunks' dtype, writable, its last axis contiguous
        (stride ``itemsize``) and no stride negative.
    chunks : tuple of int
        The chunk shape (points); every chunk is stored whole, C order,
        ``prod(chunks) * out.itemsize`` bytes.
    offsets : uint64 array, shape (n,)
        Each chunk's byte offset in the file.
    in_start, out_start, counts : intp arrays, shape (n, out.ndim)
        Per chunk, where its box starts in the chunk and in ``out``, and its
        extent (points; at least 1 along every axis).

    Returns
    -------
    int
        -1 when every chunk was read whole; else the index of the first chunk
        the file ended inside (``out`` is then partly written).

    Raises
    ------
    OSError
        ``preadv`` failed (its errno).
    """
    cdef int ndim = out.ndim
    cdef Py_ssize_t n = offsets.shape[0]
    cdef Py_ssize_t itemsize = out.itemsize
    cdef Py_ssize_t cshape[MAX_NDIM]
    cdef Py_ssize_t ostride[MAX_NDIM]
    cdef Py_ssize_t idx[MAX_NDIM]
    cdef Py_ssize_t k, a, row, rows, row_bytes, chunk_bytes, before, inside, after
    cdef char *dst
    cdef char *base = <char *>cnp.PyArray_DATA(out)
    cdef bint selected
    cdef int status = 0
    cdef Py_ssize_t failed = -1
    cdef Reader r
    if ndim < 1 or ndim > MAX_NDIM or len(chunks) != ndim:
        raise ValueError(f"chunks {chunks} for a result of {ndim} axes")
    if not cnp.PyArray_ISWRITEABLE(out) or (out.shape[ndim - 1] > 1 and out.strides[ndim - 1] != itemsize):
        raise ValueError("the result must be writable, its last axis contiguous")
    if in_start.shape[0] != n or out_start.shape[0] != n or counts.shape[0] != n:
        raise ValueError("offsets and boxes of different lengths")
    if n and (in_start.shape[1] != ndim or out_start.shape[1] != ndim or counts.shape[1] != ndim):
        raise ValueError("boxes of another number of axes than the result")
    rows = 1
    for a in range(ndim):
        cshape[a] = chunks[a]
        ostride[a] = out.strides[a]
        if ostride[a] < 0:
            raise ValueError("the result must have no negative stride")
        if a < ndim - 1:
            rows *= cshape[a]
    row_bytes = cshape[ndim - 1] * itemsize
    chunk_bytes = rows * row_bytes
    r.fd = fd
    r.n = 0
    r.pending = 0
    r.scratch_size = <size_t>(chunk_bytes if chunk_bytes < (1 << 20) else (1 << 20))
    r.iov = <iovec *>malloc(VECTORS * sizeof(iovec))
    r.scratch = NULL
    if r.iov == NULL:
        raise MemoryError()
    try:
        with nogil:
            for k in range(n):
                r.at = <long long>offsets[k]
                before = in_start[k, ndim - 1] * itemsize
                inside = counts[k, ndim - 1] * itemsize
                after = row_bytes - before - inside
                for a in range(ndim - 1):
                    idx[a] = 0
                for row in range(rows):
                    selected = True
                    for a in range(ndim - 1):
                        if idx[a] < in_start[k, a] or idx[a] >= in_start[k, a] + counts[k, a]:
                            selected = False
                            break
                    if selected:
                        dst = base + out_start[k, ndim - 1] * itemsize
                        for a in range(ndim - 1):
                            dst += (out_start[k, a] + idx[a] - in_start[k, a]) * ostride[a]
                        status = _add(&r, NULL, before, True)
                        if status == 0:
                            status = _add(&r, dst, inside, False)
                        if status == 0:
                            status = _add(&r, NULL, after, True)
                    else:
                        status = _add(&r, NULL, row_bytes, True)
                    if status:
                        break
                    a = ndim - 2  # the next row, C order
                    while a >= 0:
                        idx[a] += 1
                        if idx[a] < cshape[a]:
                            break
                        idx[a] = 0
                        a -= 1
                if status == 0:
                    status = _flush(&r)
                if status:
                    failed = k
                    break
        if status == -2:
            raise MemoryError()
        if status < 0:
            raise OSError(errno, os.strerror(errno))
        return failed
    finally:
        free(r.iov)
        free(r.scratch)
