"""Compiled hyperslab reads and writes of whole rows (private).

A commit writes a few rows to small datasets: the new chunks to ``raw_data``,
their rows to the ``hash_table``, a row and a name to the version index; and
reads back the last row of a hash table to check it. Through h5py's low-level
API each is mostly h5py making and registering an object for each dataspace
(``get_space``, ``create_simple``); libhdf5's own ``H5Sselect_hyperslab`` +
``H5Dwrite``/``H5Dread`` cost a fraction of that when the chunk is in the chunk
cache (``docs/benchmarks.md``, "Costs of single operations"; HDF5 User Guide, "Data
Transfer": the selection is the whole cost a small transfer adds to the copy).

The functions are dumb: the rows are ``[start, start + shape[0])`` along
axis 0 and all points from the origin to ``shape[a]`` on the other axes; the
memory type and the C-contiguous buffer come from the caller
(``xarray_vhdf5._backend.rows``, which checks them and keeps h5py's low-level
calls as the reference path). They only check the selection against the
dataset's extent, on the dataspace they open anyway, and return a code when
it does not fit. The calls run under
h5py's ``phil`` lock and without the GIL, through the symbol table ``H5``
cimported from ``_hdf5api``. A libhdf5 failure raises :class:`xarray_vhdf5.errors.HDF5Error`
naming the call and quoting libhdf5's error stack (``h5failure.pxd``).
"""

from h5failure cimport Failure, failure_detail, record_failure
from hyperslab cimport hyperslab_outside
from hdf5 cimport H5P_DEFAULT, H5S_MAX_RANK, H5S_SELECT_SET, herr_t, hid_t, hsize_t
from xarray_vhdf5._ext._hdf5api cimport H5

from h5py._objects import phil

from xarray_vhdf5.errors import HDF5Error

__all__ = ["extent", "read_rows", "write_rows"]


cdef int _fill_dims(tuple shape, hsize_t start, hsize_t *offset, hsize_t *count) except -1:
    cdef int rank = len(shape)
    cdef int a
    if rank < 1 or rank > H5S_MAX_RANK:
        raise ValueError(f"rows of rank {rank}: expected 1 to {H5S_MAX_RANK}")
    for a in range(rank):
        offset[a] = 0
        count[a] = <hsize_t>shape[a]
    offset[0] = start
    return rank


cdef int _transfer_nogil(
    hid_t dset_id, int rank, const hsize_t *offset, const hsize_t *count, hid_t mem_type,
    void *buf, bint write, Failure *fail,
) noexcept nogil:
    """0 done; 1 the dataset's rank differs from ``rank``; 2 the rows reach beyond
    its extent; -1 a libhdf5 call failed (recorded in ``fail``)."""
    cdef hsize_t have[H5S_MAX_RANK]
    cdef hid_t file_space, mem_space
    cdef herr_t status
    cdef int outcome = 0
    file_space = H5.H5Dget_space(dset_id)
    if file_space < 0:
        record_failure(fail, b"H5Dget_space", -1)
        return -1
    # The extent is checked here, on the dataspace this call needs anyway
    # (asking h5py for ``shape`` costs more than the whole transfer).
    if H5.H5Sget_simple_extent_dims(file_space, have, NULL) != rank:
        outcome = 1
    elif hyperslab_outside(rank, have, offset, count):
        outcome = 2
    if outcome:
        H5.H5Sclose(file_space)
        return outcome
    mem_space = H5.H5Screate_simple(rank, count, NULL)
    if mem_space < 0:
        record_failure(fail, b"H5Screate_simple", -1)
        H5.H5Sclose(file_space)
        return -1
    if H5.H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, NULL, count, NULL) < 0:
        record_failure(fail, b"H5Sselect_hyperslab", -1)
        outcome = -1
    else:
        if write:
            status = H5.H5Dwrite(dset_id, mem_type, mem_space, file_space, H5P_DEFAULT, buf)
        else:
            status = H5.H5Dread(dset_id, mem_type, mem_space, file_space, H5P_DEFAULT, buf)
        if status < 0:
            record_failure(fail, b"H5Dwrite" if write else b"H5Dread", -1)
            outcome = -1
    H5.H5Sclose(mem_space)
    H5.H5Sclose(file_space)
    return outcome


cdef int _transfer(hid_t dset_id, hsize_t start, tuple shape, hid_t mem_type, void *buf, bint write) except -9:
    """0 done; 1 the dataset's rank differs from ``len(shape)``; 2 the rows reach beyond its extent.

    The libhdf5 calls run without the GIL (a large raw_data write leaves other
    threads, e.g. dask's, running) and under h5py's ``phil`` lock.
    """
    cdef hsize_t offset[H5S_MAX_RANK]
    cdef hsize_t count[H5S_MAX_RANK]
    cdef int rank = _fill_dims(shape, start, offset, count)
    cdef int outcome
    cdef Failure fail
    fail.failed = 0
    with phil:
        with nogil:
            outcome = _transfer_nogil(dset_id, rank, offset, count, mem_type, buf, write, &fail)
    if outcome < 0:
        raise HDF5Error(
            f"{fail.func.decode()} failed for rows {start} to {start + count[0]} of shape {shape}: "
            f"{failure_detail(&fail)}"
        )
    return outcome


cdef void *_buffer(const unsigned char[::1] data, tuple shape, hid_t mem_type, Py_ssize_t itemsize) except NULL:
    """The address of ``data``, checked to hold exactly ``prod(shape)`` points of
    ``itemsize`` bytes, the size of ``mem_type`` (``H5Tget_size``)."""
    cdef Py_ssize_t points = 1
    cdef size_t type_size
    cdef object n
    with phil:
        type_size = H5.H5Tget_size(mem_type)
    if type_size == 0:
        raise HDF5Error(f"H5Tget_size failed: {mem_type} is not a valid memory type")
    if <size_t>itemsize != type_size:
        raise ValueError(f"points of {itemsize} bytes for a memory type of {type_size} bytes")
    for n in shape:
        points *= <Py_ssize_t>n
    if itemsize <= 0 or data.shape[0] != points * itemsize:
        raise ValueError(
            f"buffer of {data.shape[0]} bytes for {points} points of {itemsize} bytes (shape {shape})"
        )
    if data.shape[0] == 0:
        return <void *>&_EMPTY
    return <void *>&data[0]


cdef unsigned char _EMPTY = 0


def write_rows(hid_t dset_id, hsize_t start, tuple shape not None, hid_t mem_type, Py_ssize_t itemsize, buffer):
    """Write the C-contiguous ``buffer`` (shape ``shape``, points of ``mem_type``) at row ``start``.

    ``itemsize``: bytes per point, which must be ``mem_type``'s size; the buffer
    must hold exactly ``prod(shape) * itemsize`` bytes (ValueError otherwise,
    nothing written; HDF5Error for an invalid ``mem_type``).
    Returns 0 when done, 1 (ranks differ) or 2 (beyond the extent) when nothing was written.
    """
    cdef const unsigned char[::1] data = memoryview(buffer).cast("B")
    return _transfer(dset_id, start, shape, mem_type, _buffer(data, shape, mem_type, itemsize), True)


def read_rows(hid_t dset_id, hsize_t start, tuple shape not None, hid_t mem_type, Py_ssize_t itemsize, out):
    """Read rows ``start`` on into the writable C-contiguous ``out``; arguments and returns as :func:`write_rows`."""
    cdef unsigned char[::1] data = memoryview(out).cast("B")
    return _transfer(dset_id, start, shape, mem_type, _buffer(data, shape, mem_type, itemsize), False)


def extent(hid_t dset_id):
    """The current shape of the dataset (a tuple of points per axis), from its dataspace."""
    cdef hsize_t dims[H5S_MAX_RANK]
    cdef hid_t space
    cdef int rank, a
    with phil:
        space = H5.H5Dget_space(dset_id)
        if space < 0:
            raise HDF5Error("H5Dget_space failed")
        rank = H5.H5Sget_simple_extent_dims(space, dims, NULL)
        H5.H5Sclose(space)
    if rank < 0:
        raise HDF5Error("H5Sget_simple_extent_dims failed")
    return tuple([<object>dims[a] for a in range(rank)])
