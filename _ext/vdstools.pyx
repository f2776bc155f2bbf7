"""Compiled kernel building the mappings of a virtual dataset (private).

Creating a version's virtual dataset costs one ``H5Pset_virtual`` per stored
chunk (``docs/format.md``, "Stored chunk maps"); from Python each mapping also pays
two ``select_hyperslab`` calls through h5py, each a Python object. This kernel
runs the same three libhdf5 calls per mapping in a C loop without the GIL,
under h5py's ``phil`` lock, through the symbol table ``H5`` resolved once by
``_hdf5api`` (cimported from it). Every return code is
checked; a failure raises :class:`xarray_vhdf5.errors.HDF5Error` naming the
call and the mapping. The Python wrapper
(:func:`xarray_vhdf5._backend.virtual.create_virtual_dataset_id`) holds the
pure-Python reference path (h5py's low-level calls,
``backend.virtual.set_virtual_mappings``); ``tests/test_virtual_kernel.py``
keeps both equal.
"""

from libc.stdint cimport uint64_t
from h5failure cimport Failure, failure_detail, record_failure
from hyperslab cimport hyperslab_outside
from hdf5 cimport H5P_DEFAULT, H5S_MAX_RANK, H5S_SELECT_SET, hid_t, hsize_t
from xarray_vhdf5._ext._hdf5api cimport H5

from h5py._objects import phil

from xarray_vhdf5.errors import HDF5Error

__all__ = ["create_virtual_dataset"]


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


cdef Py_ssize_t _out_of_bounds(
    int ndim, const hsize_t *dims, const hsize_t *start, const hsize_t *count, Py_ssize_t n,
) noexcept nogil:
    """The first row whose hyperslab leaves ``dims`` (``hyperslab.pxd``), or -1."""
    cdef Py_ssize_t i
    for i in range(n):
        if hyperslab_outside(ndim, dims, start + i * ndim, count + i * ndim):
            return i
    return -1


cdef hid_t _create_loop(
    hid_t loc_id, const char *name, hid_t type_id, hid_t dcpl_template, int ndim, const hsize_t *vdims,
    hid_t raw_id, const char *src_dset_name, const hsize_t *dst_start, const hsize_t *src_start,
    const hsize_t *count, Py_ssize_t n, Failure *fail, Py_ssize_t *bad, int *bad_side,
) noexcept nogil:
    """The new dataset's id; -1 with ``fail`` (a libhdf5 call) or ``bad`` (a mapping out of bounds) set."""
    cdef hsize_t sdims[H5S_MAX_RANK]
    cdef hid_t src_space = -1, vspace = -1, dcpl = -1, dset = -1
    cdef int which = -1
    cdef Py_ssize_t failed
    src_space = H5.H5Dget_space(raw_id)
    if src_space < 0:
        record_failure(fail, b"H5Dget_space (raw_data)", -1)
        return -1
    bad_side[0] = H5.H5Sget_simple_extent_dims(src_space, sdims, NULL)
    if bad_side[0] != ndim:  # raw_data's rank (or -1: unreadable): bad = -2
        if bad_side[0] < 0:
            record_failure(fail, b"H5Sget_simple_extent_dims (raw_data)", -1)
        else:
            bad[0] = -2
        H5.H5Sclose(src_space)
        return -1
    bad[0] = _out_of_bounds(ndim, vdims, dst_start, count, n)
    bad_side[0] = 0
    if bad[0] < 0:
        bad[0] = _out_of_bounds(ndim, sdims, src_start, count, n)
        bad_side[0] = 1
    if bad[0] >= 0:
        H5.H5Sclose(src_space)
        return -1
    dcpl = H5.H5Pcopy(dcpl_template)
    if dcpl < 0:
        record_failure(fail, b"H5Pcopy", -1)
    else:
        vspace = H5.H5Screate_simple(ndim, vdims, NULL)
        if vspace < 0:
            record_failure(fail, b"H5Screate_simple", -1)
        else:
            failed = _mapping_loop(dcpl, vspace, src_space, src_dset_name, ndim, dst_start, src_start, count, n, &which)
            if failed >= 0:
                if which == 0:
                    record_failure(fail, b"H5Sselect_hyperslab (virtual space)", failed)
                elif which == 1:
                    record_failure(fail, b"H5Sselect_hyperslab (source space)", failed)
                else:
                    record_failure(fail, b"H5Pset_virtual", failed)
            elif H5.H5Sselect_all(vspace) < 0:
                record_failure(fail, b"H5Sselect_all", -1)
            else:
                dset = H5.H5Dcreate2(loc_id, name, type_id, vspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)
                if dset < 0:
                    record_failure(fail, b"H5Dcreate2", -1)
            H5.H5Sclose(vspace)
        H5.H5Pclose(dcpl)
    H5.H5Sclose(src_space)
    return dset


def create_virtual_dataset(
    hid_t loc_id,
    bytes name not None,
    hid_t type_id,
    hid_t dcpl_template,
    tuple shape not None,
    hid_t raw_id,
    bytes src_dset_name not None,
    const uint64_t[:, ::1] dst_start not None,
    const uint64_t[:, ::1] src_start not None,
    const uint64_t[:, ::1] count not None,
):
    """Private kernel; see ``xarray_vhdf5._backend.virtual.create_virtual_dataset_id``.

    Copies the virtual-layout creation property list ``dcpl_template``, adds one
    mapping per row (``shape[dst_start : dst_start + count]`` <- ``"."`` /
    ``src_dset_name`` ``[src_start : src_start + count]``, all in points) and
    creates the dataset ``name`` of file datatype ``type_id`` and shape
    ``shape`` in ``loc_id``, in one call under ``phil`` without the GIL.

    Returns
    -------
    int
        The new dataset's HDF5 id (the caller owns it), or, when a hyperslab
        leaves its dataspace (nothing created), ``-1 - 2 * row - side``
        (``side`` 0: the virtual dataset's, 1: raw_data's).

    ``dst_start``, ``src_start``, ``count``: C-contiguous uint64 (hsize_t)
    arrays of shape (n, len(shape)), in points.

    Raises
    ------
    ValueError
        The arrays' shapes differ from (n, len(shape)), a rank outside 1-32,
        or raw_data of another rank than ``shape``.
    HDF5Error
        A libhdf5 call failed, quoting its error stack; nothing is left created.
    """
    cdef Py_ssize_t n = dst_start.shape[0]
    cdef int ndim = len(shape)
    cdef hsize_t vdims[H5S_MAX_RANK]
    cdef int a, bad_side = 0
    cdef Py_ssize_t bad = -1
    cdef hid_t dset
    cdef Failure fail
    cdef const char *cname = name
    cdef const char *src = src_dset_name
    cdef const hsize_t *d0
    cdef const hsize_t *s0
    cdef const hsize_t *c0
    if ndim < 1 or ndim > H5S_MAX_RANK:
        raise ValueError(f"rank {ndim}: expected 1 to {H5S_MAX_RANK}")
    if (src_start.shape[0] != n or count.shape[0] != n or dst_start.shape[1] != ndim
            or src_start.shape[1] != ndim or count.shape[1] != ndim):
        raise ValueError(f"dst_start, src_start and count must have shape (n, {ndim})")
    for a in range(ndim):
        vdims[a] = <hsize_t>shape[a]
    d0 = &dst_start[0, 0] if n else NULL
    s0 = &src_start[0, 0] if n else NULL
    c0 = &count[0, 0] if n else NULL
    fail.failed = 0
    with phil:
        with nogil:
            dset = _create_loop(loc_id, cname, type_id, dcpl_template, ndim, vdims, raw_id, src, d0, s0, c0, n,
                                &fail, &bad, &bad_side)
    if dset >= 0:
        return dset
    if bad == -2:
        raise ValueError(f"source has {bad_side} axes, the virtual dataset {ndim}")
    if bad >= 0:
        return -1 - 2 * bad - bad_side
    where = f" on mapping {fail.row}" if fail.row >= 0 else ""
    raise HDF5Error(f"{fail.func.decode()} failed{where} creating {name.decode()!r}: {failure_detail(&fail)}")
