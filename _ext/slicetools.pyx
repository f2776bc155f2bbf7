"""Compiled kernels moving data between HDF5 datasets and numpy arrays (private).

The kernels are deliberately dumb: they trust their inputs.  Every bound is
checked, and negative values are rejected, by the Python wrappers in
:mod:`xarray_vhdf5._backend.transfer` and :mod:`xarray_vhdf5._backend.chunkmap`,
which also hold the pure-Python reference implementations.  Only O(1) sanity
checks that protect the kernels' own memory accesses (array shapes, ranks,
item sizes) are done here.

How libhdf5 is reached
----------------------
Through the symbol table ``H5`` that :mod:`xarray_vhdf5._ext._hdf5api`
resolves once, in h5py's own libhdf5 (its docstring says how and why); this
module only cimports it.

Locking: libhdf5 is not (necessarily) thread-safe and h5py serialises every
call behind its global re-entrant lock ``h5py._objects.phil``.  The kernels
acquire ``phil`` (with the GIL held), then release the GIL for the whole C
loop, and take the GIL back before releasing ``phil``.  On a negative return
code the loop stops, the HDF5 error stack is captured (before anything else
can clear it), every id the kernel created is closed, and
:class:`xarray_vhdf5.errors.HDF5Error` is raised naming the failing HDF5
function and the slice pair (or virtual mapping) being processed.

POSIX only (``dlopen``/``dlsym``); on other platforms the extension does not
build and the pure-Python reference paths must be selected.
"""

from libc.stdint cimport int64_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc
from libc.string cimport memset, strcmp

cimport numpy as cnp

from stridedcopy cimport copy_box
from h5failure cimport Failure, failure_detail, record_failure
from hdf5 cimport H5P_DEFAULT, H5S_MAX_RANK, H5S_SELECT_SET, herr_t, hid_t, hsize_t, hssize_t
from xarray_vhdf5._ext._hdf5api cimport H5

import h5py
import numpy as np
from h5py._objects import phil

from xarray_vhdf5.errors import HDF5Error

cnp.import_array()

__all__ = ["read_many_slices", "build_slab_indices_and_offsets"]

cdef enum:
    MAX_NDIM = 64   # numpy's NPY_MAXDIMS (HDF5 dataspaces: H5S_MAX_RANK = 32)
    NAME_LEN = 1024 # captured virtual source names (truncated)

# ---------------------------------------------------------------------------
# Kernel 1: read_many_slices
# ---------------------------------------------------------------------------

cdef int _h5_read_loop(
    hid_t dset_id,
    hid_t mem_type_id,
    void *buf,
    int ndim,
    const hsize_t *dst_shape,
    const hsize_t *src_start,
    const hsize_t *dst_start,
    const hsize_t *count,
    const hsize_t *src_stride,
    const hsize_t *dst_stride,
    Py_ssize_t nslices,
    Failure *fail,
) noexcept nogil:
    """H5Sselect_hyperslab x2 + H5Dread per slice pair; row-major (nslices, ndim)
    index arrays.  Returns 0 or -1 (details in ``fail``)."""
    cdef hid_t file_space = -1, mem_space = -1
    cdef Py_ssize_t i, off
    cdef int d, empty

    file_space = H5.H5Dget_space(dset_id)
    if file_space < 0:
        record_failure(fail, b"H5Dget_space", -1)
        return -1
    mem_space = H5.H5Screate_simple(ndim, dst_shape, NULL)
    if mem_space < 0:
        record_failure(fail, b"H5Screate_simple", -1)
    else:
        for i in range(nslices):
            off = i * ndim
            empty = 0
            for d in range(ndim):
                if count[off + d] == 0:
                    empty = 1
                    break
            if empty:
                continue
            if H5.H5Sselect_hyperslab(
                file_space, H5S_SELECT_SET, src_start + off, src_stride + off,
                count + off, NULL,
            ) < 0:
                record_failure(fail, b"H5Sselect_hyperslab (source)", i)
                break
            if H5.H5Sselect_hyperslab(
                mem_space, H5S_SELECT_SET, dst_start + off, dst_stride + off,
                count + off, NULL,
            ) < 0:
                record_failure(fail, b"H5Sselect_hyperslab (destination)", i)
                break
            if H5.H5Dread(dset_id, mem_type_id, mem_space, file_space, H5P_DEFAULT, buf) < 0:
                record_failure(fail, b"H5Dread", i)
                break
        if H5.H5Sclose(mem_space) < 0:
            record_failure(fail, b"H5Sclose", -1)
    if H5.H5Sclose(file_space) < 0:
        record_failure(fail, b"H5Sclose", -1)
    return -1 if fail.failed else 0


cdef void _np_copy_loop(
    const char *src,
    const Py_ssize_t *src_bstrides,
    char *dst,
    const Py_ssize_t *dst_bstrides,
    Py_ssize_t itemsize,
    int ndim,
    const uint64_t *src_start,
    const uint64_t *dst_start,
    const uint64_t *count,
    const uint64_t *src_stride,
    const uint64_t *dst_stride,
    Py_ssize_t nslices,
) noexcept nogil:
    """Strided n-d copies between two numpy buffers of the same dtype (``stridedcopy.copy_box`` per slice)."""
    cdef Py_ssize_t sstep[MAX_NDIM]
    cdef Py_ssize_t dstep[MAX_NDIM]
    cdef Py_ssize_t cnt[MAX_NDIM]
    cdef Py_ssize_t i, off
    cdef int d, empty
    cdef const char *s
    cdef char *t

    for i in range(nslices):
        off = i * ndim
        empty = 0
        s = src
        t = dst
        for d in range(ndim):
            cnt[d] = <Py_ssize_t>count[off + d]
            if cnt[d] == 0:
                empty = 1
                break
            s += <Py_ssize_t>src_start[off + d] * src_bstrides[d]
            t += <Py_ssize_t>dst_start[off + d] * dst_bstrides[d]
            sstep[d] = <Py_ssize_t>src_stride[off + d] * src_bstrides[d]
            dstep[d] = <Py_ssize_t>dst_stride[off + d] * dst_bstrides[d]
        if empty:
            continue

        copy_box(s, sstep, t, dstep, cnt, ndim, itemsize)


cdef int _check_index_arrays(
    int ndim, Py_ssize_t nslices, tuple arrays
) except -1:
    for a in arrays:
        if a.shape[0] != nslices or a.shape[1] != ndim:
            raise ValueError(
                f"index arrays must all have shape ({nslices}, {ndim}); got {a.shape[:2]}"
            )
    return 0


cdef int _dataset_rank(hid_t dset_id) except? -2:
    """Rank of the dataset's dataspace (-1 when libhdf5 fails: the caller raises HDF5Error)."""
    cdef hid_t space = H5.H5Dget_space(dset_id)
    cdef int rank
    if space < 0:
        return -1
    rank = H5.H5Sget_simple_extent_ndims(space)
    H5.H5Sclose(space)
    return rank


def read_many_slices(
    src,
    cnp.ndarray dst not None,
    const uint64_t[:, ::1] src_start not None,
    const uint64_t[:, ::1] dst_start not None,
    const uint64_t[:, ::1] count not None,
    const uint64_t[:, ::1] src_stride not None,
    const uint64_t[:, ::1] dst_stride not None,
    hid_t mem_type_id=-1,
):
    """Private kernel; see ``xarray_vhdf5._backend.transfer.read_many_slices``.

    No bounds checks: the caller guarantees every selection is in range.
    ``src`` is an ``h5py.Dataset`` (then ``dst`` must be C-contiguous and
    ``mem_type_id`` the HDF5 id of ``dst.dtype``, kept open by the caller) or
    a numpy array of the same item size as ``dst`` and no Python objects.
    Index arrays: C-contiguous uint64, shape ``(nslices, dst.ndim)``, in
    points.  Equivalence with the reference path and numpy indexing is kept by
    ``tests/test_kernels.py``.
    """
    cdef int ndim = cnp.PyArray_NDIM(dst)
    cdef Py_ssize_t nslices = src_start.shape[0]
    cdef Failure fail
    cdef hsize_t dst_shape[H5S_MAX_RANK]
    cdef Py_ssize_t src_bstrides[MAX_NDIM]
    cdef Py_ssize_t dst_bstrides[MAX_NDIM]
    cdef hid_t dset_id
    cdef void *dst_buf = cnp.PyArray_DATA(dst)
    cdef const char *src_buf
    cdef cnp.ndarray src_arr
    cdef Py_ssize_t itemsize = cnp.PyArray_ITEMSIZE(dst)
    cdef int d
    cdef int rc = 0
    cdef int src_ndim

    _check_index_arrays(
        ndim, nslices, (src_start, dst_start, count, src_stride, dst_stride)
    )
    if not cnp.PyArray_ISWRITEABLE(dst):
        raise ValueError("dst must be writeable")
    if ndim == 0:
        raise ValueError("0-dimensional arrays are not supported by the kernel")
    if nslices == 0 or cnp.PyArray_SIZE(dst) == 0:
        return

    memset(&fail, 0, sizeof(fail))
    if isinstance(src, h5py.Dataset):
        if ndim > H5S_MAX_RANK:
            raise ValueError(f"HDF5 supports at most {H5S_MAX_RANK} dimensions")
        if not cnp.PyArray_IS_C_CONTIGUOUS(dst):
            raise ValueError("dst must be C-contiguous when reading from HDF5")
        if mem_type_id < 0:
            raise ValueError("mem_type_id (the HDF5 type id of dst.dtype) is required")
        for d in range(ndim):
            dst_shape[d] = <hsize_t>cnp.PyArray_DIM(dst, d)
        with phil:
            dset_id = src.id.id
            # The rank from libhdf5 directly (h5py's ``src.ndim`` builds a dataspace
            # object and its whole shape, most of the cost of a one-chunk read).
            src_ndim = _dataset_rank(dset_id)
            if src_ndim < 0:
                raise HDF5Error("libhdf5 could not open src's dataspace (a closed or invalid dataset?)")
            if src_ndim != ndim:
                raise ValueError(f"src has {src_ndim} dimensions, dst has {ndim}")
            with nogil:
                rc = _h5_read_loop(
                    dset_id, mem_type_id, dst_buf, ndim, dst_shape,
                    &src_start[0, 0], &dst_start[0, 0], &count[0, 0],
                    &src_stride[0, 0], &dst_stride[0, 0], nslices, &fail,
                )
        if rc < 0:
            raise HDF5Error(_read_failure_message(
                &fail, src_start, dst_start, count, src_stride, dst_stride
            ))
        return

    if not isinstance(src, np.ndarray):
        raise TypeError(f"src must be an h5py.Dataset or a numpy array, not {type(src)}")
    src_arr = <cnp.ndarray>src
    if cnp.PyArray_NDIM(src_arr) != ndim:
        raise ValueError(f"src has {cnp.PyArray_NDIM(src_arr)} dimensions, dst has {ndim}")
    if cnp.PyArray_ITEMSIZE(src_arr) != itemsize:
        raise ValueError("src and dst must have the same item size")
    if src_arr.dtype.hasobject or dst.dtype.hasobject:
        raise TypeError("object dtypes must go through the reference path")
    src_buf = <const char *>cnp.PyArray_DATA(src_arr)
    for d in range(ndim):
        src_bstrides[d] = cnp.PyArray_STRIDE(src_arr, d)
        dst_bstrides[d] = cnp.PyArray_STRIDE(dst, d)
    with nogil:
        _np_copy_loop(
            src_buf, src_bstrides, <char *>dst_buf, dst_bstrides, itemsize, ndim,
            &src_start[0, 0], &dst_start[0, 0], &count[0, 0],
            &src_stride[0, 0], &dst_stride[0, 0], nslices,
        )


def _selection(start, count, stride):
    return "[" + ", ".join(
        f"{a}:{a + n * st}:{st}" for a, n, st in zip(start, count, stride)
    ) + "]"


cdef str _read_failure_message(
    Failure *fail, src_start, dst_start, count, src_stride, dst_stride
):
    cdef Py_ssize_t i = fail.row
    if i < 0:
        where = "while setting up the transfer"
    else:
        c = np.asarray(count[i]).tolist()
        dst_sel = _selection(
            np.asarray(dst_start[i]).tolist(), c, np.asarray(dst_stride[i]).tolist()
        )
        src_sel = _selection(
            np.asarray(src_start[i]).tolist(), c, np.asarray(src_stride[i]).tolist()
        )
        where = f"on slice pair {i}: dst{dst_sel} = src{src_sel}"
    return f"{fail.func.decode()} failed {where}: {failure_detail(fail)}"


# ---------------------------------------------------------------------------
# Kernel 2: build_slab_indices_and_offsets
# ---------------------------------------------------------------------------

# Validation failures (beyond HDF5 call failures) of a virtual mapping.
cdef enum MapError:
    MAP_OK = 0
    MAP_HDF5 = 1            # an HDF5 call failed (see Failure)
    MAP_RANK = 2            # vspace / srcspace rank differs from the dataset's
    MAP_NOT_BLOCK = 3       # a selection is not a single rectangular block
    MAP_BLOCK_SHAPE = 4     # virtual and source blocks differ in shape
    MAP_OUT_OF_BOUNDS = 5   # virtual block beyond the dataset's shape
    MAP_UNALIGNED = 6       # virtual block does not start on a chunk boundary
    MAP_PARTIAL = 7         # virtual block ends inside a chunk (not at the edge)
    MAP_MULTI_AXIS = 8      # spans several chunks along an axis other than 0
    MAP_SRC_LAYOUT = 9      # source block does not start at 0 on axes > 0
    MAP_OVERLAP = 10        # a chunk is mapped twice
    MAP_SOURCE_NAME = 11    # source dataset is not the expected raw_data
    MAP_SOURCE_FILE = 12    # source file is not "." (the same file)

cdef struct MapState:
    int error                     # MapError
    Py_ssize_t mapping            # index of the offending mapping
    int axis                      # offending axis, when relevant
    hsize_t vstart[H5S_MAX_RANK]
    hsize_t vend[H5S_MAX_RANK]
    hsize_t sstart[H5S_MAX_RANK]
    hsize_t send[H5S_MAX_RANK]
    char name[NAME_LEN]           # source file or dataset name read (truncated)


cdef int _block_bounds(
    hid_t space, int ndim, hsize_t *start, hsize_t *end, MapState *st,
    Failure *fail, Py_ssize_t j, const char *which,
) noexcept nogil:
    """Bounds of a single-block selection; closes ``space``.  0 or -1."""
    cdef int rank
    cdef hssize_t npoints
    cdef hsize_t expected = 1
    cdef int d
    cdef int rc = 0
    rank = H5.H5Sget_simple_extent_ndims(space)
    if rank < 0:
        record_failure(fail, b"H5Sget_simple_extent_ndims", j)
        rc = -1
    elif rank != ndim:
        st.error = MAP_RANK
        st.axis = rank
        rc = -1
    elif H5.H5Sget_select_bounds(space, start, end) < 0:
        record_failure(fail, which, j)
        rc = -1
    else:
        npoints = H5.H5Sget_select_npoints(space)
        if npoints < 0:
            record_failure(fail, b"H5Sget_select_npoints", j)
            rc = -1
        else:
            for d in range(ndim):
                expected *= end[d] - start[d] + 1
            if <hsize_t>npoints != expected:
                st.error = MAP_NOT_BLOCK
                rc = -1
    if H5.H5Sclose(space) < 0:
        record_failure(fail, b"H5Sclose", j)
        rc = -1
    if fail.failed:
        st.error = MAP_HDF5
    return rc


cdef int _check_name(
    hid_t dcpl, Py_ssize_t j, int is_file, const char *expected, MapState *st,
    Failure *fail,
) noexcept nogil:
    """Compare the mapping's source file / dataset name with ``expected``."""
    cdef Py_ssize_t n
    cdef char *buf
    cdef int rc = 0
    if is_file:
        n = H5.H5Pget_virtual_filename(dcpl, <size_t>j, NULL, 0)
    else:
        n = H5.H5Pget_virtual_dsetname(dcpl, <size_t>j, NULL, 0)
    if n < 0:
        record_failure(fail, b"H5Pget_virtual_filename" if is_file else b"H5Pget_virtual_dsetname", j)
        st.error = MAP_HDF5
        return -1
    buf = <char *>malloc(n + 1)
    if buf == NULL:
        st.error = MAP_HDF5
        fail.failed = 1
        fail.func = b"malloc"
        fail.row = j
        return -1
    if is_file:
        n = H5.H5Pget_virtual_filename(dcpl, <size_t>j, buf, n + 1)
    else:
        n = H5.H5Pget_virtual_dsetname(dcpl, <size_t>j, buf, n + 1)
    if n < 0:
        record_failure(fail, b"H5Pget_virtual_filename" if is_file else b"H5Pget_virtual_dsetname", j)
        st.error = MAP_HDF5
        rc = -1
    elif strcmp(buf, expected) != 0:
        st.error = MAP_SOURCE_FILE if is_file else MAP_SOURCE_NAME
        snprintf(st.name, NAME_LEN, b"%s", buf)
        rc = -1
    free(buf)
    return rc


cdef int _build_map(
    hid_t dset_id,
    int ndim,
    const hsize_t *shape,
    const hsize_t *chunks,
    const Py_ssize_t *grid_strides,    # C-order element strides of the chunk grid
    Py_ssize_t *slab_indices,
    uint64_t *slab_offsets,
    const char *expected_name,
    MapState *st,
    Failure *fail,
) noexcept nogil:
    cdef hid_t dcpl, space
    cdef size_t nmap = 0
    cdef Py_ssize_t j, k, nk, flat, base
    cdef hsize_t cnt, cstart
    cdef int d

    dcpl = H5.H5Dget_create_plist(dset_id)
    if dcpl < 0:
        record_failure(fail, b"H5Dget_create_plist", -1)
        st.error = MAP_HDF5
        return -1
    if H5.H5Pget_virtual_count(dcpl, &nmap) < 0:
        record_failure(fail, b"H5Pget_virtual_count", -1)
        st.error = MAP_HDF5
        nmap = 0
    for j in range(<Py_ssize_t>nmap):
        st.mapping = j
        if _check_name(dcpl, j, 1, b".", st, fail) < 0:
            break
        if _check_name(dcpl, j, 0, expected_name, st, fail) < 0:
            break
        space = H5.H5Pget_virtual_vspace(dcpl, <size_t>j)
        if space < 0:
            record_failure(fail, b"H5Pget_virtual_vspace", j)
            st.error = MAP_HDF5
            break
        if _block_bounds(space, ndim, st.vstart, st.vend, st, fail, j,
                         b"H5Sget_select_bounds (virtual space)") < 0:
            break
        space = H5.H5Pget_virtual_srcspace(dcpl, <size_t>j)
        if space < 0:
            record_failure(fail, b"H5Pget_virtual_srcspace", j)
            st.error = MAP_HDF5
            break
        if _block_bounds(space, ndim, st.sstart, st.send, st, fail, j,
                         b"H5Sget_select_bounds (source space)") < 0:
            break

        base = 0
        for d in range(ndim):
            st.axis = d
            cnt = st.vend[d] - st.vstart[d] + 1
            if st.send[d] - st.sstart[d] + 1 != cnt:
                st.error = MAP_BLOCK_SHAPE
                break
            if st.vend[d] >= shape[d]:
                st.error = MAP_OUT_OF_BOUNDS
                break
            if st.vstart[d] % chunks[d] != 0:
                st.error = MAP_UNALIGNED
                break
            if d > 0 and cnt > chunks[d]:
                st.error = MAP_MULTI_AXIS
                break
            if cnt % chunks[d] != 0 and st.vend[d] + 1 != shape[d]:
                st.error = MAP_PARTIAL
                break
            if d > 0 and st.sstart[d] != 0:
                st.error = MAP_SRC_LAYOUT
                break
            base += <Py_ssize_t>(st.vstart[d] // chunks[d]) * grid_strides[d]
        if st.error:
            break

        # Decompose along axis 0: chunk k of the block sits k * chunks[0]
        # rows further into raw_data.
        cnt = st.vend[0] - st.vstart[0] + 1
        nk = <Py_ssize_t>((cnt + chunks[0] - 1) // chunks[0])
        for k in range(nk):
            flat = base + k * grid_strides[0]
            if slab_indices[flat] != 0:
                st.error = MAP_OVERLAP
                st.axis = <int>k   # chunk k of the block
                break
            slab_indices[flat] = 1
            slab_offsets[flat] = st.sstart[0] + <hsize_t>k * chunks[0]
        if st.error:
            break

    if H5.H5Pclose(dcpl) < 0:
        record_failure(fail, b"H5Pclose", -1)
        st.error = MAP_HDF5
    return -1 if st.error else 0


def _block(start, end):
    return "[" + ", ".join(f"{a}:{b + 1}" for a, b in zip(start, end)) + "]"


cdef str _map_failure_message(MapState *st, Failure *fail, int ndim, str expected):
    j = st.mapping
    cdef int d
    vblk = _block([st.vstart[d] for d in range(ndim)], [st.vend[d] for d in range(ndim)])
    sblk = _block([st.sstart[d] for d in range(ndim)], [st.send[d] for d in range(ndim)])
    err = st.error
    ax = st.axis
    if err == MAP_RANK:
        return f"virtual mapping {j}: a selection has rank {ax}, the dataset has {ndim}"
    if err == MAP_NOT_BLOCK:
        return f"virtual mapping {j}: a selection is not a single rectangular block"
    prefix = f"virtual mapping {j} (virtual {vblk} <- raw_data{sblk})"
    if err == MAP_BLOCK_SHAPE:
        return f"{prefix}: virtual and source blocks differ in shape along axis {ax}"
    if err == MAP_OUT_OF_BOUNDS:
        return f"{prefix}: extends beyond the dataset's shape along axis {ax}"
    if err == MAP_UNALIGNED:
        return f"{prefix}: does not start on a chunk boundary along axis {ax}"
    if err == MAP_PARTIAL:
        return f"{prefix}: ends inside a chunk along axis {ax} (not at the dataset's edge)"
    if err == MAP_MULTI_AXIS:
        return (
            f"{prefix}: spans several chunks along axis {ax}; raw_data is one chunk "
            f"wide on every axis but 0, so only runs along axis 0 can be expressed"
        )
    if err == MAP_SRC_LAYOUT:
        return f"{prefix}: source block does not start at 0 along axis {ax}"
    if err == MAP_OVERLAP:
        return f"{prefix}: chunk {ax} of the block is already mapped by another mapping"
    name = st.name.decode("utf-8", "replace")
    if err == MAP_SOURCE_NAME:
        return f"virtual mapping {j}: source dataset is {name!r}, expected {expected!r}"
    if err == MAP_SOURCE_FILE:
        return f"virtual mapping {j}: source file is {name!r}, expected '.' (the same file)"
    return f"virtual mapping {j}: unknown error {err}"


def build_slab_indices_and_offsets(dset, shape, chunks, str raw_data_name not None):
    """Private kernel; see ``xarray_vhdf5._backend.chunkmap``.

    ``dset`` is an open virtual ``h5py.Dataset``; ``shape`` and ``chunks``
    tuples of ints of the same length (chunks > 0), ``raw_data_name`` the
    absolute path every mapping must read from.  Returns
    ``(slab_indices, slab_offsets)``.  Equivalence with the reference path is
    kept by ``tests/test_chunkmap.py``.
    """
    cdef int ndim = len(shape)
    cdef int d
    cdef hsize_t c_shape[H5S_MAX_RANK]
    cdef hsize_t c_chunks[H5S_MAX_RANK]
    cdef Py_ssize_t grid_strides[H5S_MAX_RANK]
    cdef Failure fail
    cdef MapState st
    cdef hid_t dset_id
    cdef int rc = 0
    cdef cnp.ndarray slab_indices, slab_offsets
    cdef Py_ssize_t *idx_buf
    cdef uint64_t *off_buf

    if ndim < 1 or ndim > H5S_MAX_RANK or len(chunks) != ndim:
        raise ValueError(f"bad shape {shape!r} / chunks {chunks!r}")
    grid = []
    for d in range(ndim):
        if chunks[d] <= 0 or shape[d] < 0:
            raise ValueError(f"bad shape {shape!r} / chunks {chunks!r}")
        c_shape[d] = shape[d]
        c_chunks[d] = chunks[d]
        grid.append(-(-shape[d] // chunks[d]))
    slab_indices = np.zeros(grid, dtype=np.intp)
    slab_offsets = np.zeros(grid, dtype=np.uint64)
    for d in range(ndim):
        grid_strides[d] = cnp.PyArray_STRIDE(slab_indices, d) // sizeof(Py_ssize_t)
    idx_buf = <Py_ssize_t *>cnp.PyArray_DATA(slab_indices)
    off_buf = <uint64_t *>cnp.PyArray_DATA(slab_offsets)
    expected = raw_data_name.encode("utf-8")
    cdef const char *c_expected = expected

    memset(&fail, 0, sizeof(fail))
    memset(&st, 0, sizeof(st))
    with phil:
        dset_id = dset.id.id
        with nogil:
            rc = _build_map(
                dset_id, ndim, c_shape, c_chunks, grid_strides, idx_buf, off_buf,
                c_expected, &st, &fail,
            )
    if rc < 0:
        if st.error == MAP_HDF5:
            where = f"virtual mapping {fail.row} of " if fail.row >= 0 else ""
            raise HDF5Error(
                f"{fail.func.decode()} failed on {where}{dset.name!r}: {failure_detail(&fail)}"
            )
        raise ValueError(
            f"{dset.name!r} cannot be expressed as raw_data slab offsets: "
            + _map_failure_message(&st, &fail, ndim, raw_data_name)
        )
    return slab_indices, slab_offsets
