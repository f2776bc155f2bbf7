# The bounds check of a hyperslab, shared by the kernels (rowtools, vdstools):
# does the block of ``count`` points from ``start`` leave an extent of ``dims``?
# Written so that no sum can wrap around in hsize_t (uint64): a start or count
# near 2**64 must not pass by overflowing.

from hdf5 cimport hsize_t


cdef inline bint hyperslab_outside(
    int rank, const hsize_t *dims, const hsize_t *start, const hsize_t *count,
) noexcept nogil:
    """True if ``[start, start + count)`` leaves ``[0, dims)`` on any of the ``rank`` axes."""
    cdef int a
    for a in range(rank):
        if count[a] > dims[a] or start[a] > dims[a] - count[a]:
            return True
    return False
