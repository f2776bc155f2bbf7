"""netCDF-4 dimension scales in a version group, so netCDF tools can read a version.

A version written by the xarray writer is readable without this package::

    xr.open_dataset(path, engine="h5netcdf", group="/_version_data/versions/<version>[/<group>]")

netCDF-4 stores dimensions as HDF5 dimension scales (HDF5 "Dimension Scales"
specification; netCDF-4 "HDF5 format" notes; what ``h5netcdf`` writes):

- a dimension with a coordinate variable: that variable is the scale
  (``CLASS = "DIMENSION_SCALE"``, ``NAME = <its name>``);
- a dimension without one: a "phony" scale dataset named like the dimension,
  of shape ``(length,)``, whose ``NAME`` starts with
  ``"This is a netCDF dimension but not a netCDF variable."``;
- each variable's axes are attached to the scales (``DIMENSION_LIST`` on the
  variable, ``REFERENCE_LIST`` on the scale: object references);
- no ``_Netcdf4Dimid``: netCDF-C takes that attribute as the dimension's id in
  the whole file (``libhdf5/hdf5open.c``, ``read_scale``; ``nc4_find_dim``
  looks ids up in one file-wide list), so the same ids in two version groups
  made every version show the dimension lengths of the last one read. Without
  it netCDF-C numbers the scales in the order it reads them, unique in the
  file; h5netcdf numbers them itself too. Files written before (ids from 0 in
  each version group) lose the attribute in all their versions on the next
  commit from xarray (:func:`forget_dimension_ids`).

Here the phony scales are versioned datasets like every other (virtual datasets
with ``raw_data`` and ``chunks`` attributes, so versioned-hdf5 reads and stages
versions holding them), with no mapping at all: they read as their fill value
and store nothing. Their ``raw_data`` attribute names one shared, empty
``/_version_data/__netcdf_dimensions__/raw_data`` rather than
``/_version_data/<name>/raw_data``, so that a later version may add a
coordinate variable of that name with any dtype.

Scalar variables are stored as one point (shape ``(1,)``, ``_ARRAY_DIMENSIONS``
empty): netCDF tools see them along the length-1 dimension
:data:`~xarray_vhdf5._backend.names.SCALAR_DIM`.

Object references address objects of one version group, so a commit never
carries them over from the previous version (``versions.commit`` drops them);
the xarray writer calls :func:`attach_dimension_scales` on every version it
commits, rebuilding them from ``_ARRAY_DIMENSIONS``. The engine ignores all of
this: dimension names come from ``_ARRAY_DIMENSIONS`` and the bookkeeping
attributes and phony datasets are hidden
(:func:`~xarray_vhdf5._backend.names.visible_attrs`,
:func:`~xarray_vhdf5._backend.names.is_netcdf_dimension_only`).
"""

from __future__ import annotations

import itertools
from collections import ChainMap
from typing import Any

import h5py
import numpy as np

from .._backend.h5attrs import UNREAD, read_attr, simple_attrs
from .._backend.hashtable import HashTable
from .._backend.layout import NETCDF_DIMENSIONS, VERSION_DATA, VERSIONS
from .._backend.names import (
    DIMENSIONS_ATTR,
    HIDDEN_GROUP_ATTRS,
    HIDDEN_VARIABLE_ATTRS,
    NETCDF_NOT_A_VARIABLE,
    SCALAR_DIM,
)
from .._backend.raw_data import Filters, create_raw_data
from .._backend.virtual import create_virtual_dataset_id
from .._versions.rootview import enable_root_view, root_view_enabled

__all__ = [
    "DIMENSIONS_DATA",
    "attach_dimension_scales",
    "forget_dimension_ids",
    "netcdf_only_attrs",
]

#: Group of ``_version_data`` holding the (always empty) raw_data of every phony scale.
DIMENSIONS_DATA = NETCDF_DIMENSIONS
#: dtype of phony scales (netCDF-C and h5netcdf write big-endian float32).
_PHONY_DTYPE = np.dtype(">f4")
#: Chunk shape recorded for phony scales, in points (nothing is ever stored).
_PHONY_CHUNKS = (1024,)
#: netCDF-4's dimension-id attribute, never written here (module docstring).
DIMID_ATTR = b"_Netcdf4Dimid"
#: netCDF-4's attributes of object references, deleted from a version's datasets before attaching.
_REFERENCES = frozenset({"DIMENSION_LIST", "REFERENCE_LIST"})
#: Attributes :func:`_attributes` reads one by one when the compiled reader could not.
_READ_BY_NAME = frozenset({"CLASS", "NAME", DIMENSIONS_ATTR})
#: Attribute of the ``__netcdf_dimensions__`` group: every version's ``_Netcdf4Dimid`` is gone.
_NO_DIMIDS = "netcdf_dimids_forgotten"


def netcdf_only_attrs() -> dict[str, frozenset[str]]:
    """Attributes netCDF tools show that the ``vhdf5`` engine does not.

    Returns
    -------
    dict
        ``{"variable": ..., "group": ...}``: on variables ``_ARRAY_DIMENSIONS``,
        ``raw_data`` and ``chunks``; on a version's root group
        ``committed``, ``prev_version``, ``timestamp`` and ``_vhdf5_message``
        (listed in ``docs/format.md``, "What xarray_vhdf5 adds").
    """
    return {"variable": HIDDEN_VARIABLE_ATTRS, "group": HIDDEN_GROUP_ATTRS}


def _attr(oid, name: bytes):
    """Attribute ``name`` of the object ``oid`` (low-level id), or None if absent.

    Read through h5py's low-level ``h5a`` calls (the high-level
    ``AttributeManager`` costs several times the read itself). None also for
    an empty (null dataspace) or array-typed attribute: none of those read here.
    """
    if not h5py.h5a.exists(oid, name):
        return None
    attr = h5py.h5a.open(oid, name)
    shape = attr.shape
    if shape is None:  # an empty (null dataspace) attribute
        return None
    tid = attr.get_type()
    if tid.get_class() == h5py.h5t.STRING and not tid.is_variable_str():  # as the Dimension Scales API writes
        value = np.empty(shape, dtype=f"S{tid.get_size()}")  # them: read as stored (h5py's dtype costs more)
        attr.read(value, mtype=tid)
        return value
    dtype = attr.dtype
    if dtype.subdtype is not None:  # an array-typed attribute
        return None
    value = np.empty(attr.shape, dtype=dtype)
    attr.read(value, mtype=h5py.h5t.py_create(dtype))
    return value


def _attributes(oid) -> dict[str, Any]:
    """Every attribute of the object ``oid`` (low-level id) by name; the values this module reads.

    This runs on every dataset of every version committed from xarray. One
    call of the compiled reader (:func:`~xarray_vhdf5._backend.h5attrs.simple_attrs`)
    lists the names and reads the numbers and variable-length strings;
    ``CLASS``, ``NAME`` and ``_ARRAY_DIMENSIONS`` when it could not (the
    Dimension Scales API writes fixed-length strings) are read one by one
    (:func:`_attr`). A value is a numpy array (0-d for a scalar), None for an
    empty or array-typed attribute, or :data:`~xarray_vhdf5._backend.h5attrs.UNREAD`
    for one this module never reads (netCDF-4's object references among them).
    """
    found: dict[str, Any] = {}
    for name, value in simple_attrs(oid, h5py.h5a.get_num_attrs(oid)).items():
        if value is UNREAD:
            found[name] = _attr(oid, name.encode()) if name in _READ_BY_NAME else UNREAD
        else:
            found[name] = np.asarray(value)
    return found


def _as_bytes(value) -> bytes | None:
    if value is None or value.size != 1:
        return None
    value = value.reshape(())[()]
    if isinstance(value, str):
        return value.encode()
    return bytes(value) if isinstance(value, bytes) else None


def _is_scale_class(attrs: dict) -> bool:
    """``CLASS == "DIMENSION_SCALE"``, with any string padding (``attrs``: :func:`_attributes`).

    See :func:`~xarray_vhdf5._backend.names.is_dimension_scale`.
    """
    return _as_bytes(_value(attrs, "CLASS")) == b"DIMENSION_SCALE"


def _is_phony(attrs: dict) -> bool:
    """A netCDF-4 dimension-only scale (:func:`~xarray_vhdf5._backend.names.is_netcdf_dimension_only`)."""
    if not _is_scale_class(attrs):
        return False
    name = _as_bytes(_value(attrs, "NAME"))
    return name is not None and name.startswith(NETCDF_NOT_A_VARIABLE)


def _is_scale_named(attrs: dict, name: bytes) -> bool:
    """Whether ``H5DSset_scale(name)`` would leave the attributes as they are: fixed-length
    ``CLASS`` and ``NAME`` strings (as it writes them) of those values."""
    cls, got = _value(attrs, "CLASS"), _value(attrs, "NAME")
    return (
        cls is not None
        and got is not None
        and cls.dtype.kind == "S"
        and got.dtype.kind == "S"
        and _as_bytes(cls) == b"DIMENSION_SCALE"
        and _as_bytes(got) == name
    )


def _value(attrs: dict, name: str) -> np.ndarray | None:
    """The value of attribute ``name`` in ``attrs`` (:func:`_attributes`), None when absent or unread."""
    value = attrs.get(name)
    return None if value is UNREAD else value


def _dims_of(attrs: dict, shape: tuple[int, ...]) -> list[str] | None:
    """Dimension names of a variable written by the xarray writer (None: not one)."""
    value = _value(attrs, DIMENSIONS_ATTR)
    if value is None:
        return None
    dims = [d.decode() if isinstance(d, bytes) else str(d) for d in np.atleast_1d(value)]
    if not dims and shape == (1,):
        return [SCALAR_DIM]
    if len(dims) != len(shape):
        return None
    return dims


def _phony_source(f: h5py.File) -> h5py.Dataset:
    """The shared, empty raw_data of phony scales (created on first use)."""
    path = f"/{VERSION_DATA}/{DIMENSIONS_DATA}"
    if path in f and "raw_data" in f[path]:
        return f[path]["raw_data"]
    group = f.require_group(path)
    raw = create_raw_data(group, _PHONY_DTYPE, _PHONY_CHUNKS, _PHONY_DTYPE.type(0), Filters())
    if "hash_table" not in group:
        HashTable.create(group)
    return raw


def _create_phony(group: h5py.Group, name: str, length: int):
    raw = _phony_source(group.file)
    return create_virtual_dataset_id(group.id, name, raw, (length,), _PHONY_CHUNKS, [])


def _user_scale_attrs(attrs: dict) -> set[str]:
    """User attributes of a variable that the Dimension Scales API would misread or overwrite.

    ``H5DSset_scale`` overwrites ``CLASS`` and ``NAME``; ``H5DSattach_scale``
    calls ``H5DSis_scale``, which reads a ``CLASS`` attribute into a fixed-size
    buffer and so misreads a variable-length string (h5py's default for
    ``str``), sometimes taking the variable for a scale and failing.
    netCDF-C reserves both names for this reason. ``attrs``: :func:`_attributes`.
    """
    present = {key for key in ("CLASS", "NAME") if key in attrs}
    if "CLASS" in present and _is_scale_class(attrs):
        return set()
    return present


def _drop_references(oid, attrs: dict) -> None:
    for key in _REFERENCES:
        if key in attrs:
            h5py.h5a.delete(oid, key.encode())


def _drop_dimid(oid, attrs: dict) -> None:
    if DIMID_ATTR.decode() in attrs:
        h5py.h5a.delete(oid, DIMID_ATTR)


def _dimids_forgotten(f: h5py.File) -> bool:
    try:  # low-level calls: this runs in every commit from xarray
        gid = h5py.h5g.open(f.id, f"/{VERSION_DATA}/{DIMENSIONS_DATA}".encode())
    except (KeyError, ValueError):
        return False
    return h5py.h5a.exists(gid, _NO_DIMIDS.encode()) and bool(read_attr(gid, _NO_DIMIDS))


def forget_dimension_ids(f: h5py.File) -> int:
    """Delete ``_Netcdf4Dimid`` from every dataset of every version, once per file.

    Versions written before this package stopped writing the attribute number
    their scales from 0 in each version group; netCDF-C takes those numbers as
    file-wide dimension ids, so every version but one read with the wrong
    lengths. Marks the file (attribute ``netcdf_dimids_forgotten`` of
    ``/_version_data/__netcdf_dimensions__``) so that later calls return at once.

    Parameters
    ----------
    f : h5py.File
        A versioned file open for writing (inside a mutation).

    Returns
    -------
    int
        The number of attributes deleted (0 when the file was marked already).

    Raises
    ------
    ValueError
        ``f`` is open read-only.
    """
    if _dimids_forgotten(f):
        return 0
    if f.file.mode == "r":
        raise ValueError(f"{f.file.filename!r} is open read-only; forgetting dimension ids needs mode 'a'")
    deleted = 0
    versions = f[f"/{VERSION_DATA}/{VERSIONS}"]

    def visit(group_id) -> None:
        nonlocal deleted
        for i in range(group_id.get_num_objs()):
            name = group_id.get_objname_by_idx(i)
            if group_id.get_objtype_by_idx(i) == h5py.h5g.DATASET:
                oid = h5py.h5o.open(group_id, name)
                if h5py.h5a.exists(oid, DIMID_ATTR):
                    h5py.h5a.delete(oid, DIMID_ATTR)
                    deleted += 1
            elif group_id.get_objtype_by_idx(i) == h5py.h5g.GROUP:
                visit(h5py.h5g.open(group_id, name))

    visit(versions.id)
    f.require_group(f"/{VERSION_DATA}/{DIMENSIONS_DATA}").attrs[_NO_DIMIDS] = True
    return deleted


def attach_dimension_scales(version_group: h5py.Group) -> int:
    """Make every group of a version readable as netCDF-4: create and attach dimension scales.

    Walks the version's group tree from its root: in each group, the datasets
    with an ``_ARRAY_DIMENSIONS`` attribute are the variables. A dimension is
    scaled by its coordinate variable in the group, else by a scale of an
    ancestor group with the same length (netCDF-4 scoping, as DataTree
    inheritance), else by a phony scale of the group (an existing one of the
    right length is kept, e.g. carried over unchanged from the previous
    version; else one is created). Existing ``DIMENSION_LIST``/``REFERENCE_LIST``
    attributes are rebuilt, unused phony scales deleted, ``_Netcdf4Dimid``
    deleted (here, and once in every version of a file written before:
    :func:`forget_dimension_ids`). Datasets without ``_ARRAY_DIMENSIONS`` (written by
    versioned-hdf5 alone) are left as they are.

    Parameters
    ----------
    version_group : h5py.Group
        ``/_version_data/versions/<version>`` of a file open for writing.

    Returns
    -------
    int
        The number of dimension scales in the version.

    Raises
    ------
    ValueError
        ``version_group``'s file is open read-only.

    Notes
    -----
    Works on h5py's low-level identifiers (``h5a``, ``h5o``, ``h5ds``): it
    runs after every commit from xarray, where the high-level wrappers cost
    more than the Dimension Scales calls themselves.
    """
    if version_group.file.mode == "r":
        raise ValueError(f"{version_group.file.filename!r} is open read-only; dimension scales need mode 'a'")
    f = version_group.file
    forget_dimension_ids(f)
    counter = itertools.count()
    _attach_group(version_group, {}, counter)
    if not root_view_enabled(f):
        enable_root_view(f)  # the first commit from xarray: on from now on
    return next(counter)


def _attach_group(group: h5py.Group, inherited: dict, counter) -> None:
    datasets: dict[str, h5py.h5d.DatasetID] = {}
    subgroups: list[str] = []
    for key in group:
        oid = h5py.h5o.open(group.id, key.encode())
        if isinstance(oid, h5py.h5d.DatasetID):
            datasets[key] = oid
        elif isinstance(oid, h5py.h5g.GroupID):
            subgroups.append(key)
    attrs = {key: _attributes(oid) for key, oid in datasets.items()}
    for key, oid in datasets.items():
        _drop_references(oid, attrs[key])
    phony = {k: oid for k, oid in datasets.items() if _is_phony(attrs[k])}
    variables: dict[str, tuple[h5py.h5d.DatasetID, list[str]]] = {}
    for key, oid in datasets.items():
        dims = None if key in phony else _dims_of(attrs[key], oid.shape)
        if dims is not None:
            variables[key] = (oid, dims)

    scales: dict[str, h5py.h5d.DatasetID] = {}
    coordinates: set[str] = set()
    reserved = {key: _user_scale_attrs(attrs[key]) for key in variables}
    for key, (oid, dims) in variables.items():
        if dims == [key] and not reserved[key]:
            scales[key] = oid
            coordinates.add(key)
    lengths: dict[str, int] = {}
    for oid, dims in variables.values():
        shape = oid.shape
        for axis, dim in enumerate(dims):
            lengths.setdefault(dim, shape[axis])
    for dim, length in lengths.items():
        if dim in scales:
            continue
        above = inherited.get(dim)
        if above is not None and above.shape == (length,):
            continue
        if dim in datasets and dim not in phony:
            continue  # a variable of that name that is not its coordinate: no scale possible
        old = phony.pop(dim, None)
        if old is not None and old.shape == (length,):
            scales[dim] = old
            continue
        if old is not None:
            del group[dim]
        scales[dim] = _create_phony(group, dim, length)
    for dim in phony:
        if dim not in scales:
            del group[dim]

    for dim, oid in scales.items():
        name = dim.encode() if dim in coordinates else NETCDF_NOT_A_VARIABLE + b"%10d" % oid.shape[0]
        found = attrs.get(dim, {})  # a scale created just now has none
        if not _is_scale_named(found, name):
            h5py.h5ds.set_scale(oid, name)
        _drop_dimid(oid, found)
        next(counter)

    visible = ChainMap(scales, inherited)
    for key, (oid, dims) in variables.items():
        if "CLASS" in reserved[key]:
            continue  # left without DIMENSION_LIST; its dimensions are in _ARRAY_DIMENSIONS
        shape = oid.shape
        for axis, dim in enumerate(dims):
            scale = visible.get(dim)
            if scale is None or scale is oid or scale.shape != (shape[axis],):
                continue
            h5py.h5ds.attach_scale(oid, scale, axis)
    for sub in subgroups:
        _attach_group(group[sub], dict(visible), counter)
