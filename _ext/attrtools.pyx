"""Compiled reads and writes of the format's small attributes (private).

A commit writes about ten attributes and reads about five (``docs/format.md``: a
version's ``prev_version``, ``committed`` and ``timestamp``, a virtual
dataset's ``raw_data`` and ``chunks``, ``largest_index``, ``current_version``).
Through ``h5py.h5a`` each is mostly h5py making and registering an object
per HDF5 id (attribute, type, dataspace); the libhdf5 calls themselves take a
fraction of that (``docs/benchmarks.md``, "Costs of single operations"). These
functions make the same calls
(``H5Aexists``, ``H5Aopen``/``H5Acreate2``, ``H5Awrite``/``H5Aread``,
``H5Aclose``) directly, under h5py's ``phil`` lock, through the symbol table
``H5`` cimported from ``_hdf5api`` (the one place libhdf5's symbols are resolved).

They are dumb: the datatypes come from the caller, who also decides which
values come here (``xarray_vhdf5._backend.h5attrs``, which keeps the h5py path
as the reference; ``tests/test_h5attrs.py`` checks both write the same
attributes and read the same values). Return codes: 0 done, 1 no such
attribute, 2 an attribute this module does not read (another class or shape:
the caller uses h5py); a libhdf5 failure raises
:class:`xarray_vhdf5.errors.HDF5Error` naming the call.
"""

from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport int64_t

from hdf5 cimport (
    H5_INDEX_NAME,
    H5_ITER_INC,
    H5P_DEFAULT,
    H5S_MAX_RANK,
    H5S_SCALAR,
    H5S_SIMPLE,
    H5T_ARRAY,
    H5T_COMPOUND,
    H5T_INTEGER,
    H5T_REFERENCE,
    H5T_STRING,
    H5T_VLEN,
    hid_t,
    hsize_t,
    htri_t,
)
from h5failure cimport Failure, failure_detail, record_failure
from xarray_vhdf5._ext._hdf5api cimport H5

import numpy as np
from h5py._objects import phil

from xarray_vhdf5.errors import HDF5Error

__all__ = ["read_by_index", "read_by_name", "read_int64", "read_vlen_str", "reference_attr_names", "write_buffer", "write_vlen_str"]


cdef int _fail(const char *call, bytes name) except -1:
    raise HDF5Error(f"{call.decode()} failed on attribute {name.decode('utf-8', 'replace')!r}")


cdef int _fail_read(bytes name, Failure *fail) except -1:
    """An attribute that opened but cannot be read: libhdf5's error stack says why (a damaged heap, ...)."""
    raise HDF5Error(f"H5Aread failed on attribute {name.decode('utf-8', 'replace')!r}: {failure_detail(fail)}")


cdef int _same_extent(hid_t attr, int rank, const hsize_t *dims) noexcept:
    """1 when the attribute's dataspace is ``rank`` / ``dims`` (rank 0: scalar), 0 if not, -1 on failure."""
    cdef hid_t space = H5.H5Aget_space(attr)
    cdef hsize_t have[H5S_MAX_RANK]
    cdef int kind, n, i
    cdef int same = 0
    if space < 0:
        return -1
    kind = H5.H5Sget_simple_extent_type(space)
    if rank == 0:
        same = kind == H5S_SCALAR
    elif kind == H5S_SIMPLE:
        n = H5.H5Sget_simple_extent_dims(space, have, NULL)
        if n == rank:
            same = 1
            for i in range(rank):
                if have[i] != dims[i]:
                    same = 0
    H5.H5Sclose(space)
    return same


cdef hid_t _open_typed(hid_t obj, const char *name, hid_t *atype) noexcept:
    """Open attribute ``name`` and its datatype (``atype``; close both); -1 on failure."""
    cdef hid_t attr = H5.H5Aopen(obj, name, H5P_DEFAULT)
    if attr < 0:
        return -1
    atype[0] = H5.H5Aget_type(attr)
    if atype[0] < 0:
        H5.H5Aclose(attr)
        return -1
    return attr


cdef hid_t _open_for_write(hid_t obj, const char *name, hid_t file_type, int rank, const hsize_t *dims) except? -1:
    """The attribute ``name`` ready to take a value of ``file_type`` and extent ``rank``/``dims``.

    An existing one of the same type and extent is reused (written in place);
    another one is deleted and created again, as h5py does.
    """
    cdef htri_t exists = H5.H5Aexists(obj, name)
    cdef hid_t attr, atype, space
    cdef htri_t same_type
    cdef int same_extent
    if exists < 0:
        return -1
    if exists:
        attr = _open_typed(obj, name, &atype)
        if attr < 0:
            return -1
        same_type = H5.H5Tequal(atype, file_type)
        H5.H5Tclose(atype)
        same_extent = _same_extent(attr, rank, dims)
        if same_type > 0 and same_extent > 0:
            return attr
        H5.H5Aclose(attr)
        if H5.H5Adelete(obj, name) < 0:
            return -1
    if rank == 0:
        space = H5.H5Screate(H5S_SCALAR)
    else:
        space = H5.H5Screate_simple(rank, dims, NULL)
    if space < 0:
        return -1
    attr = H5.H5Acreate2(obj, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT)
    H5.H5Sclose(space)
    return attr


def write_buffer(hid_t obj_id, bytes name not None, hid_t file_type, hid_t mem_type, tuple shape, buffer):
    """Create or overwrite attribute ``name`` of ``obj_id`` with the points of ``buffer``.

    ``buffer``: a C-contiguous array of fixed-size points whose memory layout
    is ``mem_type``; ``shape`` its shape (``()``: a scalar attribute). Returns 0.
    """
    cdef const unsigned char[::1] data = memoryview(buffer).cast("B")
    cdef hsize_t dims[H5S_MAX_RANK]
    cdef int rank = len(shape)
    cdef int i
    cdef hid_t attr
    cdef const char *cname = name
    cdef unsigned char empty = 0  # libhdf5 refuses a NULL buffer, even for no point
    if rank > H5S_MAX_RANK:
        raise ValueError(f"attribute {name!r}: {rank} dimensions")
    for i in range(rank):
        dims[i] = <hsize_t>shape[i]
    with phil:
        attr = _open_for_write(obj_id, cname, file_type, rank, dims)
        if attr < 0:
            _fail(b"H5Aopen/H5Acreate2", name)
        if H5.H5Awrite(attr, mem_type, &data[0] if data.shape[0] else &empty) < 0:
            H5.H5Aclose(attr)
            _fail(b"H5Awrite", name)
        H5.H5Aclose(attr)
    return 0


def write_vlen_str(hid_t obj_id, bytes name not None, hid_t file_type, bytes value not None):
    """Create or overwrite the scalar variable-length string attribute ``name`` (``value``: encoded). Returns 0.

    ``file_type``: a variable-length string type, also the memory type (a
    ``char *``; h5py's own memory type for strings holds Python objects).
    """
    cdef const char *text = value
    cdef const char *cname = name
    cdef hid_t attr
    with phil:
        attr = _open_for_write(obj_id, cname, file_type, 0, NULL)
        if attr < 0:
            _fail(b"H5Aopen/H5Acreate2", name)
        if H5.H5Awrite(attr, file_type, &text) < 0:
            H5.H5Aclose(attr)
            _fail(b"H5Awrite", name)
        H5.H5Aclose(attr)
    return 0


cdef hid_t _open_for_read(hid_t obj, const char *name, int want_class, int *code, hid_t *keep_type) except? -1:
    """The attribute, if it exists and its type is of class ``want_class``; else sets ``code``.

    ``keep_type``: if not NULL, receives the attribute's datatype (to close).
    """
    cdef htri_t exists = H5.H5Aexists(obj, name)
    cdef hid_t attr, atype
    if exists < 0:
        return -1
    if not exists:
        code[0] = 1
        return 0
    attr = _open_typed(obj, name, &atype)
    if attr < 0:
        return -1
    if H5.H5Tget_class(atype) != want_class:
        H5.H5Tclose(atype)
        H5.H5Aclose(attr)
        code[0] = 2
        return 0
    if keep_type != NULL:
        keep_type[0] = atype
    else:
        H5.H5Tclose(atype)
    code[0] = 0
    return attr


def read_vlen_str(hid_t obj_id, bytes name not None):
    """``(code, bytes)``: the scalar variable-length string attribute ``name`` (code 0), else code 1 or 2.

    Read with the attribute's own datatype as memory type (a ``char *`` per
    string, whatever its character set), then freed with ``H5free_memory``.
    """
    cdef int code = 0
    cdef char *text = NULL
    cdef hid_t attr, atype = -1
    cdef int ok
    cdef bytes out
    cdef Failure fail
    fail.failed = 0
    with phil:
        attr = _open_for_read(obj_id, name, H5T_STRING, &code, &atype)
        if attr < 0:
            _fail(b"H5Aopen", name)
        if code:
            return code, None
        ok = H5.H5Tis_variable_str(atype) > 0 and _same_extent(attr, 0, NULL) > 0
        if ok and H5.H5Aread(attr, atype, &text) < 0:
            record_failure(&fail, b"H5Aread", -1)  # before any other call clears the error stack
            H5.H5Tclose(atype)
            H5.H5Aclose(attr)
            _fail_read(name, &fail)
        H5.H5Tclose(atype)
        H5.H5Aclose(attr)
        if not ok:
            return 2, None
        if text == NULL:
            return 0, b""
        try:
            out = text
        finally:
            H5.H5free_memory(text)
    return 0, out


def read_int64(hid_t obj_id, bytes name not None, hid_t mem_type):
    """``(code, array)``: the integer attribute ``name`` as int64 (``mem_type``), shape kept; else code 1 or 2."""
    cdef int code = 0
    cdef hid_t attr, space
    cdef int kind, rank, i
    cdef hsize_t dims[H5S_MAX_RANK]
    cdef int64_t[::1] flat
    cdef int64_t empty = 0  # libhdf5 refuses a NULL buffer, even for no point
    cdef Failure fail
    fail.failed = 0
    with phil:
        attr = _open_for_read(obj_id, name, H5T_INTEGER, &code, NULL)
        if attr < 0:
            _fail(b"H5Aopen", name)
        if code:
            return code, None
        space = H5.H5Aget_space(attr)
        if space < 0:
            H5.H5Aclose(attr)
            _fail(b"H5Aget_space", name)
        kind = H5.H5Sget_simple_extent_type(space)
        rank = H5.H5Sget_simple_extent_dims(space, dims, NULL) if kind == H5S_SIMPLE else 0
        H5.H5Sclose(space)
        if kind not in (H5S_SCALAR, H5S_SIMPLE) or rank < 0:
            H5.H5Aclose(attr)
            return 2, None
        shape = tuple(int(dims[i]) for i in range(rank))
        out = np.empty(shape, dtype=np.int64)
        flat = out.reshape(-1)
        if H5.H5Aread(attr, mem_type, &flat[0] if flat.shape[0] else &empty) < 0:
            record_failure(&fail, b"H5Aread", -1)
            H5.H5Aclose(attr)
            _fail_read(name, &fail)
        H5.H5Aclose(attr)
    return 0, out


cdef int _holds_references(hid_t tid) noexcept nogil:
    """1 if datatype ``tid`` is or holds object/region references (compound members,
    vlen and array bases), 0 if not, -1 if a libhdf5 call failed."""
    cdef int cls = H5.H5Tget_class(tid)
    cdef int n, i
    cdef int found = 0
    cdef hid_t sub
    if cls < 0:
        return -1
    if cls == H5T_REFERENCE:
        return 1
    if cls == H5T_VLEN or cls == H5T_ARRAY:
        sub = H5.H5Tget_super(tid)
        if sub < 0:
            return -1
        found = _holds_references(sub)
        H5.H5Tclose(sub)
        return found
    if cls == H5T_COMPOUND:
        n = H5.H5Tget_nmembers(tid)
        if n < 0:
            return -1
        for i in range(n):
            sub = H5.H5Tget_member_type(tid, <unsigned>i)
            if sub < 0:
                return -1
            found = _holds_references(sub)
            H5.H5Tclose(sub)
            if found != 0:
                return found
    return 0


cdef hid_t _open_by_idx(hid_t loc_id, bytes obj_name, int index_type, Py_ssize_t i) except -1:
    """Attribute ``i`` of ``obj_name`` in ``index_type`` order (increasing); HDF5Error if it cannot be opened."""
    cdef hid_t attr = H5.H5Aopen_by_idx(loc_id, obj_name, index_type, H5_ITER_INC, <hsize_t>i, H5P_DEFAULT, H5P_DEFAULT)
    if attr < 0:
        raise HDF5Error(f"H5Aopen_by_idx failed: attribute {i} of object {obj_name.decode('utf-8', 'replace')!r}")
    return attr


def reference_attr_names(hid_t loc_id, bytes obj_name not None, Py_ssize_t count):
    """Names of the attributes of ``obj_name`` (relative to ``loc_id``) whose datatype holds references.

    ``count``: the object's number of attributes (``H5Oget_info``); each is
    opened by index (``H5Aopen_by_idx``, name order) and its datatype walked.
    Returns a list of bytes. Raises HDF5Error when a libhdf5 call fails (e.g.
    no object ``obj_name``).
    """
    cdef list found = []
    cdef Py_ssize_t i, size
    cdef hid_t attr, atype
    cdef int holds
    cdef bytearray buf
    with phil:
        for i in range(count):
            attr = _open_by_idx(loc_id, obj_name, H5_INDEX_NAME, i)
            atype = H5.H5Aget_type(attr)
            holds = _holds_references(atype) if atype >= 0 else -1
            if atype >= 0:
                H5.H5Tclose(atype)
            size = H5.H5Aget_name(attr, 0, NULL) if holds == 1 else 0
            if holds == 1 and size >= 0:
                buf = bytearray(size + 1)
                size = H5.H5Aget_name(attr, size + 1, buf)
                found.append(bytes(buf[:size]))
            H5.H5Aclose(attr)
            if holds < 0 or size < 0:
                raise HDF5Error(
                    f"{'H5Aget_name' if holds == 1 else 'H5Aget_type'} failed: attribute {i} of object "
                    f"{obj_name.decode('utf-8', 'replace')!r}"
                )
    return found


cdef int _matching(hid_t atype, tuple type_ids) except -2:
    """The index in ``type_ids`` of a datatype equal to ``atype`` (``H5Tequal``, and the same
    character set for strings), -1 if none."""
    cdef Py_ssize_t k
    cdef htri_t same
    for k in range(len(type_ids)):
        same = H5.H5Tequal(atype, <hid_t>type_ids[k])
        if same < 0:
            raise HDF5Error("H5Tequal failed")
        if same and H5.H5Tget_class(atype) == H5T_STRING:  # H5Tequal does not tell UTF-8 from ASCII
            same = H5.H5Tget_cset(atype) == H5.H5Tget_cset(<hid_t>type_ids[k])
        if same:
            return <int>k
    return -1


cdef object _read_strings(hid_t attr, hid_t atype, tuple shape, Py_ssize_t n, bytes name):
    """An array of variable-length strings: ``(shape, [bytes, ...])`` in C order (NULL read as b"")."""
    cdef char **texts = <char **>PyMem_Calloc(n if n else 1, sizeof(char *))
    cdef Py_ssize_t i
    cdef list out = []
    cdef Failure fail
    fail.failed = 0
    if texts == NULL:
        raise MemoryError()
    try:
        if n and H5.H5Aread(attr, atype, texts) < 0:
            record_failure(&fail, b"H5Aread", -1)
            _fail_read(name, &fail)
        for i in range(n):
            out.append(b"" if texts[i] == NULL else <bytes>texts[i])
    finally:
        for i in range(n):
            if texts[i] != NULL:
                H5.H5free_memory(texts[i])
        PyMem_Free(texts)
    return shape, out


cdef object _read_value(hid_t attr, hid_t atype, object dtype, bytes name):
    """The attribute's value: bytes for a scalar variable-length string, ``(shape, [bytes])`` for an
    array of them, else a numpy array of ``dtype`` (the attribute's shape); None when its dataspace
    is not one read here (null)."""
    cdef hid_t space = H5.H5Aget_space(attr)
    cdef hsize_t dims[H5S_MAX_RANK]
    cdef int kind, rank, i, is_vlen
    cdef Py_ssize_t n = 1
    cdef char *text = NULL
    cdef unsigned char[::1] flat
    cdef unsigned char empty = 0  # libhdf5 refuses a NULL buffer, even for no point
    cdef Failure fail
    fail.failed = 0
    if space < 0:
        _fail(b"H5Aget_space", name)
    kind = H5.H5Sget_simple_extent_type(space)
    rank = H5.H5Sget_simple_extent_dims(space, dims, NULL) if kind == H5S_SIMPLE else 0
    H5.H5Sclose(space)
    if kind not in (H5S_SCALAR, H5S_SIMPLE) or rank < 0:
        return None  # a null dataspace (h5py.Empty): the reference path
    shape = tuple(int(dims[i]) for i in range(rank))
    is_vlen = H5.H5Tget_class(atype) == H5T_STRING and H5.H5Tis_variable_str(atype) > 0
    if is_vlen:
        if kind != H5S_SCALAR:
            for i in range(rank):
                n *= <Py_ssize_t>dims[i]
            return _read_strings(attr, atype, shape, n, name)
        if H5.H5Aread(attr, atype, &text) < 0:
            record_failure(&fail, b"H5Aread", -1)
            _fail_read(name, &fail)
        if text == NULL:
            return b""
        try:
            return <bytes>text
        finally:
            H5.H5free_memory(text)
    out = np.empty(shape, dtype=dtype)
    flat = out.reshape(-1).view(np.uint8)
    if H5.H5Aread(attr, atype, &flat[0] if flat.shape[0] else &empty) < 0:
        record_failure(&fail, b"H5Aread", -1)
        _fail_read(name, &fail)
    return out


cdef tuple _typed_value(hid_t attr, tuple type_ids, tuple dtypes, bytes name):
    """``(k, value)`` of an open attribute: its datatype's index in ``type_ids`` and its value
    (:func:`_read_value`), or ``(-1, None)`` when it is not one read here."""
    cdef hid_t atype = H5.H5Aget_type(attr)
    cdef int k
    if atype < 0:
        _fail(b"H5Aget_type", name)
    try:
        k = _matching(atype, type_ids)
        value = None if k < 0 else _read_value(attr, atype, dtypes[k], name)
    finally:
        H5.H5Tclose(atype)
    return (-1, None) if value is None else (k, value)


def read_by_index(
    hid_t loc_id,
    bytes obj_name not None,
    Py_ssize_t count,
    int index_type,
    tuple type_ids not None,
    tuple dtypes not None,
    frozenset unread not None,
):
    """``[(name, k, value)]`` of the ``count`` attributes of ``obj_name`` (relative to ``loc_id``).

    Each is opened by index (``H5Aopen_by_idx``, ``index_type`` order,
    increasing). When its datatype equals ``type_ids[k]`` (``H5Tequal``; the
    caller lists fixed-size numbers and variable-length strings) it is read
    with that datatype as memory type, so its bytes are the stored ones: the
    value is ``bytes`` for a scalar variable-length string, ``(shape, [bytes,
    ...])`` for an array of them, else a numpy array of ``dtypes[k]`` with the
    attribute's shape. ``k`` is -1 and the value None when it is not read:
    another datatype, a null dataspace, or a name in ``unread`` (bytes); the
    caller reads those through h5py. Raises HDF5Error when a libhdf5 call fails.
    """
    cdef list found = []
    cdef Py_ssize_t i, size
    cdef hid_t attr
    cdef bytearray buf
    cdef bytes name
    with phil:
        for i in range(count):
            attr = _open_by_idx(loc_id, obj_name, index_type, i)
            try:
                size = H5.H5Aget_name(attr, 0, NULL)
                if size < 0:
                    raise HDF5Error(f"H5Aget_name failed: attribute {i} of object {obj_name.decode('utf-8', 'replace')!r}")
                buf = bytearray(size + 1)
                H5.H5Aget_name(attr, size + 1, buf)
                name = bytes(buf[:size])
                if name in unread:
                    found.append((name, -1, None))
                    continue
                found.append((name, *_typed_value(attr, type_ids, dtypes, name)))
            finally:
                H5.H5Aclose(attr)
    return found


def read_by_name(hid_t loc_id, bytes obj_name not None, bytes name not None, tuple type_ids not None, tuple dtypes not None):
    """``(k, value)`` of attribute ``name`` of ``obj_name`` (relative to ``loc_id``), as :func:`read_by_index`
    gives each; ``(-2, None)`` when the object has no such attribute. Raises HDF5Error when a libhdf5
    call fails (e.g. no object ``obj_name``)."""
    cdef htri_t exists
    cdef hid_t attr
    with phil:
        exists = H5.H5Aexists_by_name(loc_id, obj_name, name, H5P_DEFAULT)
        if exists < 0:
            raise HDF5Error(f"H5Aexists_by_name failed: object {obj_name.decode('utf-8', 'replace')!r}")
        if not exists:
            return -2, None
        attr = H5.H5Aopen_by_name(loc_id, obj_name, name, H5P_DEFAULT, H5P_DEFAULT)
        if attr < 0:
            _fail(b"H5Aopen_by_name", name)
        try:
            return _typed_value(attr, type_ids, dtypes, name)
        finally:
            H5.H5Aclose(attr)
