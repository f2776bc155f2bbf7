"""Attributes of the format, read and written through h5py's low-level API.

A commit writes a handful of attributes (a version's ``prev_version``,
``committed`` and ``timestamp``, a virtual dataset's ``raw_data`` and
``chunks``, a hash table's ``largest_index``, the file's ``current_version``)
and reads a few back. Through ``h5py.AttributeManager`` each is mostly Python
(dtype guessing, a temporary ``AttributeManager`` per ``.attrs``); the same
H5Acreate/H5Awrite/H5Aread calls through ``h5py.h5a`` cost about half that, and
a tenth made directly by the compiled kernel ``_ext/attrtools.pyx``
(``docs/benchmarks.md``, "Costs of single operations"; h5py makes and registers an
object for every HDF5 id it returns). Strings, bools and numbers go through the kernel;
other values, and everything when the pure-Python kernels are selected
(``XARRAY_VHDF5_KERNELS=python``), through ``h5py.h5a``, the reference path.
The values are stored exactly as h5py's ``attrs[name] = value`` stores them
(same HDF5 datatype and dataspace: ``str`` as a variable-length UTF-8 string,
``bool`` as h5py's enum, numpy scalars and arrays as their dtype), so files do
not change.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
from h5py import h5, h5a, h5p, h5s, h5t
from h5py._hl.base import Empty

from ..errors import HDF5Error
from ._kernels import attrtools as _attrtools  # None if not built: every use checks
from .h5objects import memory_type, object_info_by_name
from .transfer import get_kernel_backend

__all__ = [
    "UNREAD",
    "attrs_by_index",
    "object_attrs",
    "read_attr",
    "read_attr_of",
    "read_attrs_of",
    "reference_attribute_names",
    "simple_attrs",
    "type_holds_references",
    "write_attr",
]

_VLEN_STR = h5py.string_dtype()
_VLEN_STR_TYPE = h5t.py_create(_VLEN_STR)
_I8_TYPE = h5t.py_create(np.dtype("<i8"))
_VLEN_STR_UTF8 = h5t.py_create(_VLEN_STR, logical=True)  # what _h5type gives a str value
_BOOL_TYPE = h5t.py_create(np.dtype(bool), logical=True)  # h5py's enum (FALSE, TRUE)
_BOOL_MEMORY = h5t.py_create(np.dtype(bool))


def _kernel():
    """The compiled attribute kernel, or None (not built, or the Python kernels selected)."""
    return _attrtools if _attrtools is not None and get_kernel_backend() == "cython" else None


_TYPES: dict[tuple, h5t.TypeID] = {}


def _h5type(dtype: np.dtype, logical: bool) -> h5t.TypeID:
    """``h5t.py_create(dtype, logical)``, cached (each call builds a new type).

    Cached by ``dtype.str`` for plain dtypes and by h5py's ``vlen`` metadata
    (``str``: UTF-8, ``bytes``: ASCII) for variable-length strings; dtypes with
    other metadata (h5py's enums and references) or fields are converted at
    each call, since the same ``dtype.str`` stands for other HDF5 types there.
    """
    if not logical and dtype.kind in "biuf":
        return memory_type(dtype)
    meta = dtype.metadata
    if dtype.kind == "O" and meta and "vlen" in meta and len(meta) == 1:
        key: tuple[Any, ...] = ("vlen", meta["vlen"], logical)
    elif meta is None and dtype.names is None and dtype.subdtype is None and dtype.kind != "O":
        key = (dtype.str, logical)
    else:
        return h5t.py_create(dtype, logical=logical)
    tid = _TYPES.get(key)
    if tid is None:
        tid = _TYPES[key] = h5t.py_create(dtype, logical=logical)
    return tid


def _as_array(value: Any) -> np.ndarray:
    if isinstance(value, str):
        return np.array(value, dtype=_VLEN_STR)
    arr = np.asarray(value)
    if arr.dtype.kind == "U":
        return arr.astype(_VLEN_STR)
    return arr


def write_attr(obj_id, name: str, value: Any) -> None:
    """Create (or replace) attribute ``name`` of the HDF5 object ``obj_id``.

    Parameters
    ----------
    obj_id : h5py ObjectID
        A group's or dataset's ``.id``.
    name : str
        The attribute's name.
    value : str, bool, int, numpy scalar or array
        Stored with the HDF5 datatype and dataspace h5py's high-level
        ``attrs[name] = value`` would choose. Object arrays other than
        strings are not handled here: use ``h5py.AttributeManager``.

    Raises
    ------
    TypeError
        ``value`` is an object array that is not of strings.

    Notes
    -----
    An existing attribute of the same datatype and shape is overwritten in
    place; another one is deleted and created again (as h5py does).
    """
    bname = name.encode()
    kernel = _kernel()
    if kernel is not None and _write_plain(kernel, obj_id, bname, value):
        return
    data = _as_array(value)
    if data.dtype.kind == "O" and h5t.check_string_dtype(data.dtype) is None:
        raise TypeError(f"attribute {name!r}: write_attr takes str, numbers and numeric arrays")
    ftype = _h5type(data.dtype, logical=True)
    if kernel is not None and _write_compiled(kernel, obj_id, bname, data, ftype):
        return
    if h5a.exists(obj_id, bname):
        attr = h5a.open(obj_id, bname)
        if attr.shape == data.shape and attr.get_type() == ftype:
            attr.write(data, mtype=_h5type(data.dtype, logical=False))  # same type and shape: in place
            return
        attr.close()
        h5a.delete(obj_id, bname)
    attr = h5a.create(obj_id, bname, ftype, h5s.create_simple(data.shape))
    attr.write(data, mtype=_h5type(data.dtype, logical=False))


_BOOLS = {True: np.array(True), False: np.array(False)}


def _write_plain(kernel, obj_id, bname: bytes, value: Any) -> bool:
    """A ``str`` or ``bool`` value (most of the format's attributes) written without numpy; False for others.

    The same datatypes as :func:`_write_compiled` gives them (a scalar UTF-8
    variable-length string; h5py's bool enum), without building an array.
    """
    if type(value) is str:
        return _write_vlen_str(kernel, obj_id, bname, value, _VLEN_STR_UTF8)
    if type(value) is bool:
        kernel.write_buffer(obj_id.id, bname, _BOOL_TYPE.id, _BOOL_MEMORY.id, (), _BOOLS[value])
        return True
    return False


def _write_vlen_str(kernel, obj_id, bname: bytes, value: Any, ftype) -> bool:
    """A scalar ``str`` (as UTF-8) or ``bytes`` written as variable-length string type ``ftype``.

    False, nothing written, for another value, a ``str`` that does not encode
    (lone surrogates) or one holding a NUL byte (C strings end there; h5py
    refuses them too): the caller's slower path then decides.
    """
    if isinstance(value, str):
        try:
            value = value.encode("utf-8")
        except UnicodeEncodeError:
            return False
    if not isinstance(value, bytes) or b"\0" in value:
        return False
    kernel.write_vlen_str(obj_id.id, bname, ftype.id, value)
    return True


def _write_compiled(kernel, obj_id, bname: bytes, data: np.ndarray, ftype) -> bool:
    """Write through the compiled kernel; False for a value it does not take."""
    if data.dtype.kind == "O":  # a variable-length string (checked by the caller)
        return _write_vlen_str(kernel, obj_id, bname, data[()] if data.shape == () else None, ftype)
    if data.dtype.kind not in "biuf":
        return False
    mtype = _h5type(data.dtype, logical=False)
    kernel.write_buffer(obj_id.id, bname, ftype.id, mtype.id, data.shape, np.ascontiguousarray(data))
    return True


def read_attr(obj_id, name: str, expect: str | None = None) -> Any:
    """The value of attribute ``name`` of ``obj_id`` as h5py's high-level API returns it.

    Parameters
    ----------
    obj_id, name
        As for :func:`write_attr`.
    expect : {None, "str", "int"}
        What the caller expects: ``"str"`` a scalar variable-length string,
        ``"int"`` an integer scalar or array. Such a value is read by the
        compiled kernel; an attribute of another kind is still read, through
        h5py.

    Returns
    -------
    str, numpy scalar or numpy.ndarray
        A scalar variable-length string as ``str``; other scalars as numpy
        scalars (fixed-length strings as ``numpy.bytes_``); arrays as numpy
        arrays of the attribute's dtype. With ``expect="int"``, integers come
        back as int64 (scalar or array of the attribute's shape).

    Raises
    ------
    KeyError
        The attribute does not exist.
    """
    bname = name.encode()
    kernel = _kernel() if expect is not None else None
    if kernel is not None:
        if expect == "str":
            code, value = kernel.read_vlen_str(obj_id.id, bname)
            if code == 0:
                return value.decode("utf-8", "surrogateescape")
        else:
            code, value = kernel.read_int64(obj_id.id, bname, _I8_TYPE.id)
            if code == 0:
                return value[()] if value.shape == () else value
        if code == 1:
            raise KeyError(f"no attribute {name!r}")
    value = _read_h5py(obj_id, name)
    if expect == "int" and isinstance(value, (np.ndarray, np.integer)) and np.asarray(value).dtype.kind in "iu":
        value = np.asarray(value, dtype=np.int64)
        value = value[()] if value.shape == () else value
    return value


def _read_h5py(obj_id, name: str) -> Any:
    """:func:`read_attr` through ``h5py.h5a`` (the reference path)."""
    try:
        attr = h5a.open(obj_id, name.encode())
    except KeyError:
        raise KeyError(f"no attribute {name!r}") from None
    ftype = attr.get_type()
    if isinstance(ftype, h5t.TypeStringID) and ftype.is_variable_str():
        out = np.empty(attr.shape, dtype=_VLEN_STR)
        attr.read(out, mtype=_VLEN_STR_TYPE)
        value = out[()] if out.shape == () else out
        return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value
    dtype = ftype.dtype
    out = np.empty(attr.shape, dtype=dtype)
    attr.read(out, mtype=_h5type(dtype, logical=False) if dtype.kind in "biuf" else None)
    return out[()] if out.shape == () else out


def reference_attribute_names(loc_id, obj_name: bytes, count: int | None = None) -> list[bytes]:
    """Names of the attributes of object ``obj_name`` whose datatype holds references.

    Object and region references, alone or inside compounds (netCDF's
    ``REFERENCE_LIST``), variable-length sequences (``DIMENSION_LIST``) and
    arrays. The object is not opened (a virtual dataset's would decode every
    mapping): its attributes are opened by index (``H5Aopen_by_idx``, name
    order) and their HDF5 datatypes walked, by the compiled attribute kernel
    (one C call an attribute), or through ``h5py.h5a`` / ``h5t`` on the
    reference path (:func:`type_holds_references`).

    Parameters
    ----------
    loc_id : h5py ObjectID
        The group holding the object (or any object, with an absolute ``obj_name``).
    obj_name : bytes
        The object's name from ``loc_id``.
    count : int, optional
        Its number of attributes, when the caller knows it (asked of libhdf5 otherwise).

    Returns
    -------
    list of bytes
        In name order.

    Raises
    ------
    KeyError
        No object ``obj_name``.
    HDF5Error
        The compiled path: a libhdf5 call failed on one of its attributes.
    """
    if count is None:
        count = object_info_by_name(loc_id, obj_name)[2]
    kernel = _kernel()
    if kernel is not None:
        return kernel.reference_attr_names(loc_id.id, obj_name, count)
    found = []
    for i in range(count):
        attr = h5a.open(loc_id, index=i, obj_name=obj_name)
        if type_holds_references(attr.get_type()):
            found.append(attr.name)
    return found


def type_holds_references(tid: h5t.TypeID) -> bool:
    """True for an HDF5 datatype of object or region references, or one holding them.

    References inside compounds (``REFERENCE_LIST``), variable-length
    sequences (``DIMENSION_LIST``) and arrays count; variable-length strings
    are strings (class ``H5T_STRING``), not sequences.
    """
    cls = tid.get_class()
    if cls == h5t.REFERENCE:
        return True
    if cls in (h5t.VLEN, h5t.ARRAY):
        return type_holds_references(tid.get_super())
    if cls == h5t.COMPOUND:
        return any(type_holds_references(tid.get_member_type(i)) for i in range(tid.get_nmembers()))
    return False


def read_attrs_of(
    loc_id,
    obj_name: bytes,
    skip: frozenset[str] = frozenset(),
    index_type: int = h5.INDEX_NAME,
    defer: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Every attribute of the object ``obj_name`` in group ``loc_id``, without opening the object.

    The values are those of ``dict(obj.attrs)`` in h5py, in name order (h5py's
    order unless the object tracks the creation order of its attributes,
    which this package's and versioned-hdf5's datasets do not; h5py's
    conversions: ``str`` for variable-length strings, ``numpy.bytes_`` for
    fixed-length ones, ``h5py.Empty`` for a null dataspace, numpy scalars and
    arrays otherwise). Attributes are opened by index through
    ``H5Aopen_by_idx`` on the group: for a virtual dataset, h5py's
    ``obj.attrs`` first opens the dataset (``H5Dopen``) and copies its
    creation property list, both of which decode every mapping (tens of ms
    for a version of 10,000 chunks: ``docs/benchmarks.md``); opening by index decodes none.

    Parameters
    ----------
    loc_id : h5py.h5g.GroupID
        The group holding the object.
    obj_name : bytes
        The object's name in that group (one link, no ``/``).
    skip : frozenset of str
        Attributes left out, their values unread (netCDF-4's ``DIMENSION_LIST``
        and ``REFERENCE_LIST`` hold object references, slow to read).
    index_type : int
        ``h5py.h5.INDEX_NAME`` (default) or ``INDEX_CRT_ORDER``: the order of
        the result (h5py's ``obj.attrs`` follows creation order when the
        object tracks it).
    defer : frozenset of str
        Attributes listed with the value :data:`UNREAD`, their values unread
        (for a caller that reads them, with :func:`read_attr_of`, only if asked).

    Returns
    -------
    dict
        Attribute name -> value.

    Raises
    ------
    KeyError
        ``obj_name`` is not in the group.
    """
    _, _, count = object_info_by_name(loc_id, obj_name)  # KeyError when absent
    return {
        name: value for name, value, _ in attrs_by_index(loc_id, count, obj_name, skip, defer, index_type=index_type)
    }


def object_attrs(obj: h5py.Dataset | h5py.Group, defer: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``dict(obj.attrs)`` of an open object, read by index (:func:`attrs_by_index`), in h5py's order.

    h5py lists attributes in creation order when the object tracks it, else by
    name; this asks the creation property list h5py keeps for a dataset
    (``_dcpl``, copied when the ``h5py.Dataset`` was made) instead of copying it
    again as iterating ``obj.attrs`` does (for a virtual dataset, a copy of every
    mapping). ``defer``: names listed with the value :data:`UNREAD`, unread.
    """
    plist = getattr(obj, "_dcpl", None) or obj.id.get_create_plist()
    order = h5.INDEX_CRT_ORDER if plist.get_attr_creation_order() & h5p.CRT_ORDER_TRACKED else h5.INDEX_NAME
    found = attrs_by_index(obj.id, h5a.get_num_attrs(obj.id), defer=defer, index_type=order)
    return {name: value for name, value, _ in found}


def read_attr_of(loc_id, obj_name: bytes, name: str) -> Any:
    """Attribute ``name`` of the object ``obj_name`` in group ``loc_id``, without opening the object.

    As :func:`read_attrs_of` for one attribute (``H5Aopen_by_name``).

    Parameters
    ----------
    loc_id : h5py ObjectID
        The group holding the object, or the object itself with ``obj_name`` ``b"."``.
    obj_name : bytes
        The object's name in that group (one link, no ``/``).
    name : str
        The attribute.

    Returns
    -------
    object
        The value as h5py's ``AttributeManager`` converts it (``str`` for a
        variable-length string, numpy scalars and arrays otherwise).

    Raises
    ------
    KeyError
        No object ``obj_name``, or it has no attribute ``name``.
    """
    bname = name.encode("utf-8", "surrogateescape")
    kernel = _kernel()
    if kernel is not None:
        ids, dtypes, _ = _READ_TYPES
        try:
            k, value = kernel.read_by_name(loc_id.id, obj_name, bname, ids, dtypes)
        except HDF5Error:  # no object obj_name, or damage: h5py's open below says which, as before
            k, value = -1, None
        if k == -2:
            raise KeyError(f"no attribute {name!r} on {obj_name.decode('utf-8', 'surrogateescape')!r}")
        if k >= 0:
            return _converted(value, dtypes[k])
    try:
        attr = h5a.open(loc_id, bname, obj_name=obj_name)
    except KeyError:
        raise KeyError(f"no attribute {name!r} on {obj_name.decode('utf-8', 'surrogateescape')!r}") from None
    return _attr_value(attr)


class _Unread:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNREAD"


#: The value :func:`attrs_by_index` gives an attribute named in its ``defer``: not read.
UNREAD: Any = _Unread()


def attrs_by_index(
    loc_id,
    count: int,
    obj_name: bytes = b".",
    skip: frozenset[str] = frozenset(),
    defer: frozenset[str] = frozenset(),
    index_type: int = h5.INDEX_NAME,
) -> list[tuple[str, Any, np.dtype]]:
    """``(name, value, stored dtype)`` of the ``count`` attributes of an object, in name order.

    ``obj_name`` ``b"."``: the object ``loc_id`` itself (an open dataset or
    group), else its member of that name. Opened by index (``H5Aopen_by_idx``),
    never through h5py's ``obj.attrs`` iteration, which copies a virtual
    dataset's creation property list, every mapping, first (see
    :func:`read_attrs_of`). Values as h5py's ``AttributeManager`` converts them;
    attributes named in ``skip`` are left out, those named in ``defer`` listed
    with the value :data:`UNREAD` (netCDF-4's object references, slow to
    read, for a caller that may drop them unread). ``index_type``
    ``h5py.h5.INDEX_CRT_ORDER`` lists them in creation order instead (which
    h5py's ``obj.attrs`` follows when the object tracks it).
    """
    kernel = _kernel()
    if kernel is not None and count:
        return _attrs_compiled(kernel, loc_id, count, obj_name, skip, defer, index_type)
    out = []
    for i in range(count):
        attr = h5a.open(loc_id, index=i, obj_name=obj_name, index_type=index_type)
        name = attr.name.decode("utf-8", "surrogateescape")
        if name in skip:
            continue
        out.append((name, UNREAD if name in defer else _attr_value(attr), attr.dtype))
    return out


def simple_attrs(loc_id, count: int) -> dict[str, Any]:
    """Name -> value of the ``count`` attributes of the open object ``loc_id``, in name order.

    One call of the compiled reader: the attributes it reads (integers, IEEE
    floats, booleans, variable-length strings; :func:`_read_types`) converted
    as :func:`attrs_by_index` converts them; every other one (fixed-length
    strings, compounds, object references) as :data:`UNREAD`, not even opened.
    For callers that need a few attributes by name and must know which
    others exist. Without the compiled kernels, the Python twin reads the
    same ones through h5py.
    """
    if not count:
        return {}
    kernel = _kernel()
    if kernel is None:
        found = {}
        for i in range(count):
            attr = h5a.open(loc_id, index=i, index_type=h5.INDEX_NAME)
            tid = attr.get_type()
            readable = attr.shape is not None and any(tid == t for t in _READ_TYPES[2])
            found[attr.name.decode("utf-8", "surrogateescape")] = _attr_value(attr) if readable else UNREAD
        return found
    ids, dtypes, _ = _READ_TYPES
    rows = kernel.read_by_index(loc_id.id, b".", count, h5.INDEX_NAME, ids, dtypes, frozenset())
    return {
        bname.decode("utf-8", "surrogateescape"): _converted(value, dtypes[k]) if k >= 0 else UNREAD
        for bname, k, value in rows
    }


def _read_types() -> tuple[tuple[int, ...], tuple[np.dtype, ...], tuple[h5t.TypeID, ...]]:
    """The datatypes the compiled reader reads (:func:`attrs_by_index`), with h5py's dtype of each.

    Integers and IEEE floats of either byte order, h5py's booleans, and scalar
    variable-length strings (UTF-8 and ASCII): what attributes of this format,
    netCDF-4 and CF hold. Returned with the TypeIDs, which must stay alive while their ids are used.
    """
    named = [f"STD_{s}{bits}{order}" for s in "IU" for bits in (8, 16, 32, 64) for order in ("LE", "BE")]
    named += [f"IEEE_F{bits}{order}" for bits in (16, 32, 64) for order in ("LE", "BE")]
    types = [getattr(h5t, n) for n in named if hasattr(h5t, n)]
    types += [h5t.py_create(h5py.string_dtype(e), logical=True) for e in ("utf-8", "ascii")]
    types.append(_BOOL_TYPE)  # h5py's enum (FALSE, TRUE) of int8: numpy bools
    return tuple(t.id for t in types), tuple(t.dtype for t in types), tuple(types)


_READ_TYPES = _read_types()


def _converted(value, dtype: np.dtype) -> Any:
    """A value of the compiled reader as :func:`_attr_value` gives it: strings decoded (UTF-8,
    surrogateescape), a 0-d array as its numpy scalar."""
    if isinstance(value, bytes):  # a scalar variable-length string
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, tuple):  # an array of them: an object array of str, as h5py's
        shape, texts = value
        return np.array([t.decode("utf-8", "surrogateescape") for t in texts], dtype=dtype).reshape(shape)
    return value[()] if value.ndim == 0 else value


def _attrs_compiled(
    kernel, loc_id, count: int, obj_name: bytes, skip, defer, index_type: int
) -> list[tuple[str, Any, np.dtype]]:
    """:func:`attrs_by_index` through the compiled reader; what it does not read goes through h5py."""
    ids, dtypes, _ = _READ_TYPES
    unread = frozenset(n.encode("utf-8", "surrogateescape") for n in (*skip, *defer))
    out = []
    rows = kernel.read_by_index(loc_id.id, obj_name, count, index_type, ids, dtypes, unread)
    for i, (bname, k, value) in enumerate(rows):
        name = bname.decode("utf-8", "surrogateescape")
        if name in skip:
            continue
        if k >= 0:
            out.append((name, _converted(value, dtypes[k]), dtypes[k]))
            continue
        attr = h5a.open(loc_id, index=i, obj_name=obj_name, index_type=index_type)
        out.append((name, UNREAD if name in defer else _attr_value(attr), attr.dtype))
    return out


def _attr_value(attr: h5a.AttrID) -> Any:
    """An open attribute's value, converted as h5py's ``AttributeManager.__getitem__`` converts it."""
    shape = attr.shape
    if shape is None:  # null dataspace
        return Empty(attr.dtype)
    dtype = attr.dtype
    htype = h5t.py_create(dtype)
    if dtype.subdtype is not None:  # top-level array type: numpy has none, the array gets its axes
        dtype, subshape = dtype.subdtype
        shape = attr.shape + subshape
    arr = np.zeros(shape, dtype=dtype, order="C")
    attr.read(arr, mtype=htype)
    info = h5t.check_string_dtype(dtype)
    if info is not None and info.length is None:
        arr = np.array([b.decode("utf-8", "surrogateescape") for b in arr.flat], dtype=dtype).reshape(arr.shape)
    return arr[()] if arr.ndim == 0 else arr
