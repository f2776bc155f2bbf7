"""Small helpers on HDF5 objects that h5py's API makes slow: addresses and memory types.

- :func:`object_address`, :func:`object_address_by_name`: ``h5py.h5o.get_info``
  asks libhdf5 for every field of an object's info, header statistics and
  attribute count included. For a virtual dataset just created, that makes
  libhdf5 encode its whole layout message again on each call, every mapping
  included. The address alone (``H5O_INFO_BASIC``: ``H5Oget_info3``'s token,
  whose first 8 bytes are the address with the native file format) costs no
  more for a virtual dataset than for any other. The functions are resolved in
  the libhdf5 h5py loaded, through ctypes (``_backend/_libhdf5.py``, which
  declares their structs); without them, the h5py call is used.
- :func:`link_counters`: a group's number of links and creation-order counter
  from one ``H5Gget_info`` call, which h5py does not wrap.
- :func:`member_names`: iterating an ``h5py.h5g.GroupID`` first reads the group's
  creation property list to choose the order; asking for creation order and
  falling back to name order gives the same list without it (``docs/benchmarks.md``).
- :func:`memory_type`: h5py builds the HDF5 memory datatype of a numpy dtype on
  every read or write it is not given one (the most work for compound dtypes);
  the low-level paths take it from here, built once per dtype.
"""

from __future__ import annotations

import ctypes

import h5py
import numpy as np
from h5py import h5d, h5g, h5o, h5p, h5t

from ._libhdf5 import (
    H5O_INFO_BASIC,
    H5O_INFO_NUM_ATTRS,
    H5Fget_eoa,
    H5Fincrement_filesize,
    H5G_info_t,
    H5Gget_info,
    H5O_info2_t,
    H5O_token_t,
    H5Oget_info3,
    H5Oget_info_by_name3,
    H5Oincr_refcount,
    H5Oopen_by_token,
)

__all__ = [
    "allocate_through",
    "count_one_more_link",
    "create_ordered_group",
    "end_of_allocation",
    "link_counters",
    "member_names",
    "memory_type",
    "object_address",
    "object_address_by_name",
    "object_info_by_name",
    "open_by_address",
    "open_object",
    "readable",
    "readable_tree",
    "relinked",
    "walk_links",
]


def object_address(obj_id) -> int:
    """The file address of the object ``obj_id`` (an h5py ObjectID), as ``h5o.get_info(obj_id).addr``."""
    if H5Oget_info3 is not None:
        info = H5O_info2_t()
        with h5py._objects.phil:
            if H5Oget_info3(obj_id.id, ctypes.byref(info), H5O_INFO_BASIC) >= 0:
                return int.from_bytes(bytes(info.token)[:8], "little")
    return int(h5o.get_info(obj_id).addr)


def count_one_more_link(obj_id) -> None:
    """Count one more hard link in the object's header (``H5Oincr_refcount``).

    For a link a torn flush left on disk without its count: the header says
    one link where two name the object, and removing either would free the
    object under the other. Counted first, the removal leaves it whole.

    Parameters
    ----------
    obj_id : h5py ObjectID
        The object, open in a writable file.

    Raises
    ------
    NotImplementedError
        The libhdf5 h5py uses lacks ``H5Oincr_refcount``.
    RuntimeError
        libhdf5 refused (the file is read-only).
    """
    if H5Oincr_refcount is None:
        raise NotImplementedError("counting a link needs H5Oincr_refcount")
    with h5py._objects.phil:
        if H5Oincr_refcount(obj_id.id) < 0:
            raise RuntimeError("H5Oincr_refcount failed")


def end_of_allocation(file_id) -> int:
    """The file's end of allocation, where libhdf5 places what it allocates next (``H5Fget_eoa``).

    Parameters
    ----------
    file_id : h5py.h5f.FileID
        The open file.

    Returns
    -------
    int
        The end of allocation, in bytes from the start of the file.

    Raises
    ------
    NotImplementedError
        The libhdf5 h5py uses lacks ``H5Fget_eoa``.
    RuntimeError
        libhdf5 refused (a driver that does not support it: h5py's ``fileobj``).
    """
    if H5Fget_eoa is None:
        raise NotImplementedError("reading the end of allocation needs H5Fget_eoa")
    eoa = ctypes.c_uint64()
    with h5py._objects.phil:
        if H5Fget_eoa(file_id.id, ctypes.byref(eoa)) < 0:
            raise RuntimeError("H5Fget_eoa failed (a driver that does not support it?)")
    return int(eoa.value)


def allocate_through(file_id, end: int) -> int:
    """Make libhdf5 allocate nothing new below the file's last byte or byte ``end``: move its end of allocation.

    libhdf5 allocates new objects from the end of allocation the superblock
    records. A writer killed inside libhdf5's flush leaves objects and
    chunks past it: the file is longer than that, and chunk-index entries
    can even name bytes past the file's end. libhdf5 would then allocate new
    objects over them while the index still names them. With the end of
    allocation moved past the file's last byte and past ``end``
    (``H5Fincrement_filesize``), they are ordinary allocated space: nothing
    else is placed there, and a chunk written there again stays whole.
    Nothing is freed (freeing space past the end of allocation lets libhdf5
    hand it out twice: measured).

    Parameters
    ----------
    file_id : h5py.h5f.FileID
        The file, open writable through libhdf5's default driver.
    end : int
        Byte offset the end of allocation must reach at least.

    Returns
    -------
    int
        Bytes the end of allocation moved (0: it was there already).

    Raises
    ------
    NotImplementedError
        The libhdf5 h5py uses lacks ``H5Fget_eoa`` or ``H5Fincrement_filesize``.
    RuntimeError
        libhdf5 refused: the file is read-only, or open through a driver these
        calls do not support (they need a SWMR-compatible one: not h5py's
        ``fileobj``).
    """
    if H5Fincrement_filesize is None:
        raise NotImplementedError("moving the end of allocation needs H5Fincrement_filesize")
    with h5py._objects.phil:
        before = end_of_allocation(file_id)
        eof = int(file_id.get_filesize())
        if before >= max(eof, end):
            return 0
        base = max(before, eof)  # where H5Fincrement_filesize counts from
        if H5Fincrement_filesize(file_id.id, max(0, end - base)) < 0:
            raise RuntimeError("H5Fincrement_filesize failed")
        return end_of_allocation(file_id) - before


def open_by_address(loc_id, address: int):
    """Open the object at file ``address`` in ``loc_id``'s file, without any link to it.

    ``H5Oopen_by_token`` with the native file format's token (the address,
    little-endian): the way to an object whose parent group cannot be read.
    Nothing checks that an object starts there: libhdf5 reads its header and
    fails if none does (pass addresses an object had, and check what opens).

    Parameters
    ----------
    loc_id : h5py ObjectID
        Any open object of the file.
    address : int
        The object's address (bytes from the start of the HDF5 file, as
        :func:`object_address` returns it).

    Returns
    -------
    h5py.h5g.GroupID, h5py.h5d.DatasetID or h5py.h5t.TypeID
        The opened object (closed when the last reference goes).

    Raises
    ------
    KeyError
        No object header can be read at ``address`` (libhdf5's error message).
    NotImplementedError
        The libhdf5 h5py uses has no ``H5Oopen_by_token`` (before HDF5 1.12).
    """
    if H5Oopen_by_token is None:
        raise NotImplementedError("opening an object by its address needs HDF5 >= 1.12 (H5Oopen_by_token)")
    token = H5O_token_t()
    token.data[:8] = list(int(address).to_bytes(8, "little"))
    with h5py._objects.phil:
        hid = H5Oopen_by_token(loc_id.id, token)
    if hid < 0:
        raise KeyError(f"no object can be opened at address {address}")
    return h5py.h5i.wrap_identifier(hid)


def open_object(loc, path: str, kind: type):
    """The object at ``path`` from ``loc`` if it is a ``kind``, else None: one ``H5Oopen``.

    h5py's ``loc.get(path)`` and ``loc[path]`` ask libhdf5 for the link and the
    object's type before opening it; this opens it once and looks at what opened.

    Parameters
    ----------
    loc : h5py.File or h5py.Group
        Where ``path`` starts (an absolute ``path`` starts at the file's root).
    path : str
        The object's path (UTF-8; undecodable bytes as surrogate escapes).
    kind : type
        ``h5py.Dataset`` or ``h5py.Group``.

    Returns
    -------
    h5py.Dataset, h5py.Group or None
        None when nothing is at ``path`` or it is of another kind.
    """
    try:
        oid = h5o.open(loc.id, path.encode("utf-8", "surrogateescape"))
    except (KeyError, ValueError):
        return None
    if kind is h5py.Dataset and isinstance(oid, h5d.DatasetID):
        return h5py.Dataset(oid)
    if kind is h5py.Group and isinstance(oid, h5g.GroupID):
        return h5py.Group(oid)
    return None


def readable(file_id, path: bytes) -> bool:
    """Whether an object is at ``path`` and libhdf5 reads its header (``H5Oget_info_by_name``).

    A header torn by a crash fails here: libhdf5 then refuses to move or
    unlink the object too (it reads the header to change its link count).
    """
    try:
        h5o.get_info(file_id, path)
    except (KeyError, RuntimeError, OSError, ValueError):
        return False
    return True


def readable_tree(group_id) -> bool:
    """Whether libhdf5 reads every link below the group ``group_id`` and the header of every object they name.

    ``H5Lvisit``, then :func:`object_info_by_name` per member (not h5py's
    ``h5o.get_info``, which makes libhdf5 encode every virtual dataset's
    layout again: a version's mappings). Unlinking a group whose
    members libhdf5 cannot read fails halfway, and libhdf5's cache of the
    handle then refuses to unlink or move it too (measured): callers move such
    a group aside whole instead.
    """
    names: list[bytes] = []
    try:
        group_id.links.visit(names.append)
        for name in names:
            object_info_by_name(group_id, name)  # the header read whole (its attribute count)
    except (KeyError, RuntimeError, OSError, ValueError):
        return False
    return True


def link_counters(group_id) -> tuple[int, int] | None:
    """``(nlinks, max_corder)`` of the group ``group_id`` (an h5py GroupID) from one ``H5Gget_info`` call.

    ``max_corder`` is libhdf5's creation-order counter: meaningful only for a
    group that tracks creation order (it stays 0 otherwise).

    Returns
    -------
    tuple of (int, int), or None
        None when libhdf5 does not export ``H5Gget_info`` or the call fails.
    """
    if H5Gget_info is None:
        return None
    info = H5G_info_t()
    with h5py._objects.phil:
        if H5Gget_info(group_id.id, ctypes.byref(info)) < 0:
            return None
    return int(info.nlinks), int(info.max_corder)


def object_address_by_name(loc_id, path: bytes) -> int:
    """The file address of the object at ``path`` from ``loc_id``, as ``h5o.get_info(loc_id, name=path).addr``.

    Parameters
    ----------
    loc_id : h5py ObjectID
        Any object of the file (``path`` absolute) or the group ``path`` is relative to.
    path : bytes
        The object's path.

    Raises
    ------
    KeyError
        Nothing at ``path``.
    """
    return _info_by_name(loc_id, path, H5O_INFO_BASIC)[0]


def object_info_by_name(loc_id, path: bytes) -> tuple[int, int, int]:
    """``(address, type, number of attributes)`` of the object at ``path`` from ``loc_id``.

    ``type`` is ``h5py.h5o.TYPE_GROUP``, ``TYPE_DATASET`` or
    ``TYPE_NAMED_DATATYPE``. Asks libhdf5 for those fields only
    (``H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS``): h5py's ``h5o.get_info`` asks
    for all, which makes libhdf5 encode a virtual dataset's layout again.
    Arguments and errors as :func:`object_address_by_name`.
    """
    return _info_by_name(loc_id, path, H5O_INFO_BASIC | H5O_INFO_NUM_ATTRS)


def relinked(loc_id, path: bytes, address: int) -> str | None:
    """Whether the object at ``path`` is no longer the one at ``address``: None if it still is.

    Used to tell that another handle deleted or rebuilt an object staged from
    (an object is told by its address: one replaced by another that libhdf5
    places at the freed address is not told apart).

    Returns
    -------
    str or None
        ``"was deleted"`` (nothing at ``path``), ``"was replaced"`` (another
        address), or None.
    """
    try:
        now = object_address_by_name(loc_id, path)
    except KeyError:
        return "was deleted"
    return None if now == address else "was replaced"


def _info_by_name(loc_id, path: bytes, fields: int) -> tuple[int, int, int]:
    """``H5Oget_info_by_name3`` asking for ``fields`` (the attribute count is 0 unless asked)."""
    if H5Oget_info_by_name3 is not None:
        info = H5O_info2_t()
        with h5py._objects.phil:
            status = H5Oget_info_by_name3(loc_id.id, path, ctypes.byref(info), fields, 0)
        if status >= 0:
            return int.from_bytes(bytes(info.token)[:8], "little"), int(info.type), int(info.num_attrs)
    try:  # libhdf5's answer through h5py, whose error says why
        full = h5o.get_info(loc_id, name=path)
    except (KeyError, RuntimeError) as exc:  # h5py raises RuntimeError for a missing name
        raise KeyError(f"no object at {path.decode('utf-8', 'replace')!r}: {exc}") from None
    return int(full.addr), int(full.type), int(full.num_attrs)


_MEMORY_TYPES: dict[tuple[np.dtype, str], h5t.TypeID] = {}


def memory_type(dtype: np.dtype) -> h5t.TypeID | None:
    """The HDF5 memory datatype of ``dtype`` (``h5py.h5t.py_create(dtype)``), built once per dtype.

    Parameters
    ----------
    dtype : numpy.dtype
        Numbers, bools, fixed-length bytes or compounds of them.

    Returns
    -------
    h5py.h5t.TypeID or None
        None for the dtypes the low-level read and write paths leave to h5py:
        object (variable-length strings), numpy's StringDType, zero-size, and
        those with no HDF5 equivalent (e.g. datetime64). The types are kept,
        hence open, for the process's life.
    """
    dtype = np.dtype(dtype)
    key = (dtype, repr(dtype.metadata))  # h5py's enum dtypes differ from their base only there
    tid = _MEMORY_TYPES.get(key)
    if tid is not None:
        return tid
    if dtype.hasobject or dtype.kind == "T" or dtype.itemsize == 0:
        return None
    try:
        tid = h5t.py_create(dtype)
    except TypeError:
        return None
    _MEMORY_TYPES[key] = tid
    return tid


def _group_plists() -> tuple[h5p.PropGCID, dict[int, h5p.PropLCID]]:
    gcpl = h5p.create(h5p.GROUP_CREATE)
    order = h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED
    gcpl.set_link_creation_order(order)
    gcpl.set_attr_creation_order(order)
    gcpl.set_obj_track_times(False)
    lcpls = {}
    for coding in (h5t.CSET_ASCII, h5t.CSET_UTF8):
        lcpl = h5p.create(h5p.LINK_CREATE)
        lcpl.set_create_intermediate_group(True)
        lcpl.set_char_encoding(coding)
        lcpls[coding] = lcpl
    return gcpl, lcpls


_GCPL_ORDERED, _LCPLS = _group_plists()


def create_ordered_group(parent: h5py.Group, name: str) -> h5py.Group:
    """``parent.create_group(name, track_order=True)``, with property lists made once.

    The group is created as h5py creates it (links and attributes tracked and
    indexed in creation order, no object times, intermediate groups created,
    the name's character set ASCII when it is ASCII, else UTF-8); h5py builds
    the property lists again on every call (about half of the call's time).

    Raises
    ------
    ValueError
        ``name`` exists in ``parent`` (h5py's error).
    """
    try:
        bname, coding = name.encode("ascii"), h5t.CSET_ASCII
    except UnicodeEncodeError:
        bname, coding = name.encode("utf-8"), h5t.CSET_UTF8
    return h5py.Group(h5g.create(parent.id, bname, lcpl=_LCPLS[coding], gcpl=_GCPL_ORDERED))


def member_names(gid: h5g.GroupID) -> list[bytes]:
    """The names of the links in the group ``gid``, in h5py's iteration order.

    h5py lists a group's members in creation order when the group tracks it
    (``track_order=True``), else in name order (``h5py.h5g.GroupID.__iter__``).
    The group's creation property list says whether it tracks the order; only
    then is creation order asked for, and libhdf5's refusal (a tracked order
    without its index) falls back to name order. Groups that do not track it
    (versioned-hdf5's) are never asked: libhdf5's refusal was seen to carry a
    message h5py could not decode (``UnicodeDecodeError`` instead of its
    ``RuntimeError``, in 3 of about 10 full test runs).

    Parameters
    ----------
    gid : h5py.h5g.GroupID
        An open group.

    Returns
    -------
    list of bytes
        The link names, as libhdf5 stores them.
    """
    names: list[bytes] = []
    if gid.get_create_plist().get_link_creation_order() & h5p.CRT_ORDER_TRACKED:
        try:
            gid.links.iterate(names.append, idx_type=h5py.h5.INDEX_CRT_ORDER)
            return names
        except (RuntimeError, UnicodeDecodeError):  # tracked without an index: h5py lists by name
            names.clear()
    gid.links.iterate(names.append, idx_type=h5py.h5.INDEX_NAME)
    return names


def walk_links(gid: h5g.GroupID) -> list[tuple[str, int]]:
    """``(path, object type)`` of every object below the group ``gid``, in h5py's ``visit`` order.

    Depth first, each group's members by name (as libhdf5 sorts them: by
    their bytes); ``path`` relative to the group, ``/``-separated; the type is
    ``h5py.h5o.TYPE_GROUP``, ``TYPE_DATASET`` or ``TYPE_NAMED_DATATYPE``.
    Found by link name and object header only (:func:`object_info_by_name`):
    nothing is opened but the subgroups, where h5py's ``visit``/``visititems``
    ask for every field of each object, which makes libhdf5 decode a virtual
    dataset's mappings, all of them.
    """
    found: list[tuple[str, int]] = []

    def walk(group: h5g.GroupID, prefix: str) -> None:
        names: list[bytes] = []
        group.links.iterate(names.append, idx_type=h5py.h5.INDEX_NAME)
        for bname in sorted(names):
            path = prefix + bname.decode("utf-8", "surrogateescape")
            kind = object_info_by_name(group, bname)[1]
            found.append((path, kind))
            if kind == h5o.TYPE_GROUP:
                walk(h5g.open(group, bname), path + "/")

    walk(gid, "")
    return found
