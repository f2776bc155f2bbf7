"""Compiled kernel building the mappings of a virtual dataset (private).

Creating a version's virtual dataset costs one ``H5Pset_virtual`` per stored
chunk (FORMAT.md, "What the format costs"); from Python each mapping also pays
two ``select_hyperslab`` calls through h5py, about 30 us in all. This kernel
runs the same three libhdf5 calls per mapping in a C loop without the GIL,
under h5py's ``phil`` lock, on the symbols resolved once by ``slicetools``
(shared through the ``slicetools._HDF5_API`` capsule). Every return code is
checked; a failure raises :class:`xarray_vhdf5.errors.HDF5Error` naming the
call and the mapping. Inputs are validated by the Python wrapper
(:func:`xarray_vhdf5.backend.virtual.set_virtual_mappings`), which also holds
the pure-Python reference path; ``tests/test_virtual_kernel.py`` keeps both equal.
"""

from libc.stdint cimport uint64_t
from cpython.pycapsule cimport PyCapsule_GetPointer

from hdf5 cimport H5S_SELECT_SET, HDF5API, HDF5_API_CAPSULE_NAME, hid_t, hsize_t

from h5py._objects import phil

from xarray_vhdf5._ext.slicetools import _HDF5_API
from xarray_vhdf5.errors import HDF5Error

__all__ = ["set_virtual_mappings"]

cdef HDF5API *H5 = <HDF5API *>PyCapsule_GetPointer(_HDF5_API, HDF5_API_CAPSULE_NAME)


cdef Py_ssize_t _mapping_loop(
    hid_t dcpl_id,
    hid_t vspace_id,
    hid_t src_space_id,
    const char *src_dset_name,
    int ndim,
    const hsize_t *dst_start,
    const hsize_t *src_start,
    const hsize_t *count,
    Py_ssize_t n,
    int *which,
) noexcept nogil:
    """Return -1 on success, else the failing row (``which``: 0 vspace, 1 source, 2 set_virtual)."""
    cdef Py_ssize_t i, off
    for i in range(n):
        off = i * ndim
        if H5.H5Sselect_hyperslab(vspace_id, H5S_SELECT_SET, dst_start + off, NULL, count + off, NULL) < 0:
            which[0] = 0
            return i
        if H5.H5Sselect_hyperslab(src_space_id, H5S_SELECT_SET, src_start + off, NULL, count + off, NULL) < 0:
            which[0] = 1
            return i
        if H5.H5Pset_virtual(dcpl_id, vspace_id, b".", src_dset_name, src_space_id) < 0:
            which[0] = 2
            return i
    return -1


def set_virtual_mappings(
    hid_t dcpl_id,
    hid_t vspace_id,
    hid_t src_space_id,
    bytes src_dset_name not None,
    const uint64_t[:, ::1] dst_start not None,
    const uint64_t[:, ::1] src_start not None,
    const uint64_t[:, ::1] count not None,
):
    """Private kernel; see ``xarray_vhdf5.backend.virtual.set_virtual_mappings``.

    Adds one mapping per row to the dataset creation property list
    ``dcpl_id``: ``vspace[dst_start : dst_start + count]`` <- ``"."`` /
    ``src_dset_name`` ``[src_start : src_start + count]``. Arrays: C-contiguous
    uint64 (hsize_t) of shape (n, ndim), in points. No bounds checks here.
    """
    cdef Py_ssize_t n = dst_start.shape[0]
    cdef int ndim = dst_start.shape[1]
    cdef int which = -1
    cdef Py_ssize_t failed
    cdef const char *name = src_dset_name
    if src_start.shape[0] != n or count.shape[0] != n or src_start.shape[1] != ndim or count.shape[1] != ndim:
        raise ValueError("dst_start, src_start and count must have the same shape (n, ndim)")
    if n == 0:
        return
    with phil:
        with nogil:
            failed = _mapping_loop(
                dcpl_id, vspace_id, src_space_id, name, ndim,
                &dst_start[0, 0], &src_start[0, 0], &count[0, 0], n, &which,
            )
    if failed >= 0:
        call = ("H5Sselect_hyperslab (virtual space)", "H5Sselect_hyperslab (source space)", "H5Pset_virtual")[which]
        raise HDF5Error(
            f"{call} failed on mapping {failed}: virtual start {list(dst_start[failed])}, "
            f"source start {list(src_start[failed])}, count {list(count[failed])}"
        )
