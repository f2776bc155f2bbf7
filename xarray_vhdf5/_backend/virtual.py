"""Virtual datasets: a version's view of one dataset, mapping chunks to raw_data.

Each stored chunk of the version is one mapping (source file ``"."``, source
``raw_data[start:stop, 0:n1, ...]``, destination the chunk's region); chunks
that are all fill value have no mapping and read as the virtual dataset's fill
value (``docs/format.md``, "Commit rules"; HDF5 "Virtual Dataset" documentation).
The mappings are built with h5py's low-level API (``h5p.PropDCID.set_virtual``
and ``h5d.create``), about 5x cheaper per mapping than ``h5py.VirtualLayout``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import h5py
import numpy as np
from h5py import h5a, h5d, h5o, h5p, h5s, h5t

from ..errors import HDF5Error
from ._kernels import vdstools as _vdstools
from .h5attrs import reference_attribute_names, write_attr
from .hashing import is_vlen_string_dtype
from .transfer import get_kernel_backend

__all__ = [
    "carry_virtual_dataset",
    "copy_virtual_dataset",
    "create_virtual_dataset",
    "create_virtual_dataset_id",
    "mapping_arrays",
    "set_virtual_mappings",
    "write_attrs",
]


_UNSET = object()

#: Per (dtype, fill value): the HDF5 file datatype and a creation property list with the
#: virtual layout and the fill value, copied for each new virtual dataset (building
#: them is a dozen libhdf5 calls a commit; a copy is one).
_TEMPLATES: dict[tuple, tuple[h5t.TypeID, h5p.PropDCID]] = {}


def _mem_space(shape: tuple[int, ...]) -> h5s.SpaceID:
    return h5s.create_simple(shape, shape)


def _template(dtype: np.dtype, fillvalue: Any) -> tuple[h5t.TypeID, h5p.PropDCID]:
    """The cached ``(file datatype, virtual dcpl)`` of ``dtype`` and ``fillvalue`` (copy the dcpl to add mappings)."""
    vlen = is_vlen_string_dtype(dtype)
    fill = None if vlen else _fill_value_array(fillvalue, dtype)
    fill_key: tuple[str, Any] | None
    if fill is None:
        fill_key = None
    elif fill.dtype.kind == "O":  # fixed-length strings go through a vlen string array
        fill_key = ("str", fill[()] if fill.ndim == 0 else repr(fill.tolist()))
    else:
        fill_key = (fill.dtype.str, fill.tobytes())
    # Only plain dtypes are cached: metadata (h5py's vlen, enum and reference types)
    # and compound fields choose other HDF5 types for the same ``dtype.str``.
    plain = dtype.metadata is None and dtype.names is None and dtype.subdtype is None
    key = (dtype.str, fill_key)
    found = _TEMPLATES.get(key) if plain else None
    if found is None:
        dcpl = h5p.create(h5p.DATASET_CREATE)
        # Explicit, so a dataset with no stored chunk (all fill value) is still virtual
        # (with no mapping) as versioned-hdf5 writes it, not a contiguous dataset.
        dcpl.set_layout(h5d.VIRTUAL)
        if fill is not None:
            dcpl.set_fill_value(fill)
        found = (h5t.py_create(dtype, logical=True), dcpl)
        if plain and len(_TEMPLATES) < 256:
            _TEMPLATES[key] = found
    return found


def create_virtual_dataset(
    group: h5py.Group,
    name: str,
    raw_data: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    chunk_rows: Iterable[tuple[tuple[int, ...], int, int]],
    attrs: Mapping[str, Any] | None = None,
    *,
    fillvalue: Any = _UNSET,
) -> h5py.Dataset:
    """Create the virtual dataset ``group[name]`` of a version.

    Parameters
    ----------
    group : h5py.Group
        The version group (or one of its subgroups).
    name : str
        Name of the dataset inside ``group`` (no ``/``).
    raw_data : h5py.Dataset
        The dataset's raw_data; its dtype and fill value are used.
    shape : tuple of int
        Shape of the version's dataset, in points.
    chunks : tuple of int
        Chunk shape, in points.
    chunk_rows : iterable of (chunk_index, start, stop)
        For each stored chunk, its index in the chunk grid and its rows in
        raw_data along axis 0 (``stop - start`` is the trimmed chunk length).
    attrs : mapping, optional
        User attributes to store on the virtual dataset (beside the format's
        ``raw_data`` and ``chunks``).
    fillvalue : scalar, optional
        raw_data's fill value, when the caller knows it (read from raw_data
        otherwise; ignored for variable-length strings, which have none).
    """
    return h5py.Dataset(
        create_virtual_dataset_id(group.id, name, raw_data, shape, chunks, chunk_rows, attrs, fillvalue=fillvalue)
    )


def create_virtual_dataset_id(
    group_id: h5py.h5g.GroupID,
    name: str,
    raw_data: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    chunk_rows: Iterable[tuple[tuple[int, ...], int, int]],
    attrs: Mapping[str, Any] | None = None,
    *,
    fillvalue: Any = _UNSET,
) -> h5d.DatasetID:
    """:func:`create_virtual_dataset` in the group ``group_id``, returning the low-level id.

    Parameters are those of :func:`create_virtual_dataset` (``group_id``: the
    group's ``.id``).

    Returns
    -------
    h5py.h5d.DatasetID
        The new virtual dataset, of ``raw_data``'s dtype and shape ``shape``
        (points). An ``h5py.Dataset`` copies the new dataset's creation property
        list, every mapping included, when it is made: commits, which only
        need the id, skip it.

    Raises
    ------
    IndexError
        A mapping reaches beyond ``shape`` or beyond raw_data
        (:func:`set_virtual_mappings`); nothing is created then.
    ValueError
        ``name`` exists in the group (h5py's error).
    xarray_vhdf5.errors.HDF5Error
        libhdf5 refused a mapping.
    """
    dtype = raw_data.dtype
    if fillvalue is _UNSET and not is_vlen_string_dtype(dtype):
        fillvalue = raw_data.fillvalue
    tid, template = _template(dtype, fillvalue)
    raw_name = raw_data.name
    dst_start, src_start, count = mapping_arrays(shape, chunks, chunk_rows)
    if get_kernel_backend() == "cython":
        dsid = _create_compiled(group_id, name, tid, template, shape, raw_data, raw_name, dst_start, src_start, count)
    else:  # the reference path: h5py's low-level calls
        dcpl = template.copy()
        vspace = _mem_space(shape)
        set_virtual_mappings(dcpl, vspace, raw_data.id.get_space(), raw_name, dst_start, src_start, count)
        vspace.select_all()
        dsid = h5d.create(group_id, name.encode(), tid, vspace, dcpl=dcpl)
    write_attr(dsid, "raw_data", raw_name)
    write_attr(dsid, "chunks", np.asarray(chunks, dtype=np.int64))
    if attrs:
        write_attrs(h5py.Dataset(dsid), attrs)
    return dsid


def _create_compiled(group_id, name, tid, template, shape, raw_data, raw_name, dst_start, src_start, count):
    """``create_virtual_dataset_id``'s HDF5 calls in one kernel call (``_ext/vdstools.pyx``).

    Template copy, dataspaces, mappings and ``H5Dcreate2`` in C, one call from
    Python; most of its time is libhdf5's ``H5Dcreate`` (``docs/benchmarks.md``).
    """
    if _vdstools is None:  # the other kernels built, this one not: a broken build
        raise ImportError("the compiled kernel xarray_vhdf5._ext.vdstools is unavailable; rebuild the package")
    kernel = _vdstools.create_virtual_dataset
    arrays = [np.ascontiguousarray(a, dtype=np.uint64) for a in (dst_start, src_start, count)]
    try:
        result = kernel(
            group_id.id, name.encode(), tid.id, template.id, tuple(shape), raw_data.id.id, raw_name.encode(), *arrays
        )
    except HDF5Error:
        if group_id.links.exists(name.encode()):  # h5py's error for the same case
            raise ValueError(f"Unable to create dataset {name!r}: name already exists") from None
        raise
    if result < 0:  # -1 - 2 * row - side: a hyperslab beyond its dataspace, nothing created
        row, side = divmod(-1 - result, 2)
        dims = tuple(shape) if side == 0 else raw_data.shape
        start = arrays[0] if side == 0 else arrays[1]
        raise _beyond(row, ("virtual", "source")[side], start, arrays[2], dims)
    return h5d.DatasetID(result)


def _beyond(i: int, name: str, start: np.ndarray, count: np.ndarray, dims) -> IndexError:
    return IndexError(
        f"mapping {i} reaches beyond the {name} dataspace {tuple(int(d) for d in dims)}: "
        f"start {start[i].tolist()}, count {count[i].tolist()}"
    )


def mapping_arrays(
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    chunk_rows: Iterable[tuple[tuple[int, ...], int, int]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The hyperslabs of one mapping per stored chunk, as ``(n, ndim)`` uint64 arrays.

    Returns ``(dst_start, src_start, count)``, in points: the chunk's origin in
    the virtual dataset, its first row in raw_data (other axes start at 0), and
    its edge-trimmed extent (``stop - start`` rows along axis 0).
    """
    rows = list(chunk_rows)
    ndim = len(shape)
    if not rows:
        empty = np.empty((0, ndim), np.uint64)
        return empty, empty.copy(), empty.copy()
    index = np.array([r[0] for r in rows], dtype=np.int64).reshape(len(rows), ndim)
    bounds = np.array([(r[1], r[2]) for r in rows], dtype=np.int64)
    c = np.asarray(chunks, dtype=np.int64)
    dst_start = index * c
    count = np.minimum(c, np.asarray(shape, dtype=np.int64) - dst_start)
    count[:, 0] = bounds[:, 1] - bounds[:, 0]
    src_start = np.zeros_like(dst_start)
    src_start[:, 0] = bounds[:, 0]
    return (dst_start.astype(np.uint64), src_start.astype(np.uint64), count.astype(np.uint64))


def set_virtual_mappings(
    dcpl: h5p.PropDCID,
    vspace: h5s.SpaceID,
    src_space: h5s.SpaceID,
    src_dset_name: str,
    dst_start: np.ndarray,
    src_start: np.ndarray,
    count: np.ndarray,
) -> None:
    """Add one mapping per row to ``dcpl``: ``vspace[dst_start:+count] <- "."/src_dset_name[src_start:+count]``.

    The reference path of :func:`create_virtual_dataset_id` (h5py's low-level
    API, one mapping at a time); the compiled path makes the same calls inside
    ``_ext/vdstools.pyx: create_virtual_dataset``, and both give the same
    mappings (``tests/test_virtual_kernel.py``).

    Parameters
    ----------
    dcpl : h5py.h5p.PropDCID
        A dataset creation property list with the virtual layout.
    vspace, src_space : h5py.h5s.SpaceID
        Dataspaces of the virtual dataset and of the source dataset (their
        selections are overwritten).
    src_dset_name : str
        Absolute path of the source dataset in the same file.
    dst_start, src_start, count : numpy.ndarray of uint64, shape (n, ndim)
        Hyperslabs, in points (see :func:`mapping_arrays`).

    Raises
    ------
    IndexError
        A hyperslab reaches beyond its dataspace (checked before any mapping is added).
    ValueError
        Arrays of different shapes or of the wrong number of axes.
    HDF5Error
        libhdf5 refused a selection or mapping.
    """
    arrays = [np.ascontiguousarray(a, dtype=np.uint64) for a in (dst_start, src_start, count)]
    vdims = np.asarray(vspace.shape, dtype=np.uint64)
    sdims = np.asarray(src_space.shape, dtype=np.uint64)
    if any(a.ndim != 2 or a.shape != arrays[0].shape or a.shape[1] != len(vdims) for a in arrays):
        raise ValueError(f"dst_start, src_start and count must all have shape (n, {len(vdims)})")
    if len(sdims) != len(vdims):
        raise ValueError(f"source has {len(sdims)} axes, the virtual dataset {len(vdims)}")
    dst, src, cnt = arrays
    for name, start, dims in (("virtual", dst, vdims), ("source", src, sdims)):
        bad = np.nonzero(((cnt > dims) | (start > dims - np.minimum(cnt, dims))).any(axis=1))[0]  # no wrap
        if bad.size:
            raise _beyond(int(bad[0]), name, start, cnt, dims)
    name_bytes = src_dset_name.encode()
    for d, s, c in zip(dst.tolist(), src.tolist(), cnt.tolist()):
        vspace.select_hyperslab(tuple(d), tuple(c))
        src_space.select_hyperslab(tuple(s), tuple(c))
        dcpl.set_virtual(vspace, b".", name_bytes, src_space)


def _fill_value_array(fillvalue: Any, dtype: np.dtype) -> np.ndarray:
    """The fill value as the array ``PropDCID.set_fill_value`` needs.

    Fixed-length strings (``S`` dtypes) go through a variable-length string array,
    as ``h5py.Group.create_dataset`` does: libhdf5 converts it to the dataset's
    fixed-length type, whereas an ``S`` array is stored as garbage.
    """
    string_info = h5py.check_string_dtype(dtype)
    if string_info is not None:
        return np.array(fillvalue, dtype=h5py.string_dtype(string_info.encoding))
    return np.asarray(fillvalue, dtype=dtype)


def copy_virtual_dataset(
    source: h5py.Dataset, group: h5py.Group, name: str, attrs: Mapping[str, Any] | None
) -> h5py.Dataset:
    """Create ``group[name]`` with exactly the mappings of ``source`` (an unchanged dataset).

    Reuses ``source``'s creation property list, so no mapping is rebuilt in Python.
    """
    dcpl = source.id.get_create_plist()
    dsid = h5d.create(group.id, name.encode(), source.id.get_type(), source.id.get_space(), dcpl=dcpl)
    ds = h5py.Dataset(dsid)
    ds.attrs["raw_data"] = source.attrs["raw_data"]
    ds.attrs["chunks"] = source.attrs["chunks"]
    if attrs:
        write_attrs(ds, attrs)
    return ds


def carry_virtual_dataset(
    source_loc, source_name: bytes, group: h5py.Group, name: str, num_attrs: int | None = None
) -> None:
    """Copy a version's dataset, unchanged, to ``group[name]`` with its attributes.

    One ``H5Ocopy`` in libhdf5: the mappings and every attribute are copied
    without passing through Python (several times faster than
    :func:`copy_virtual_dataset` and rewriting the attributes). Attributes
    holding object or region references (e.g. dimension scales'
    ``DIMENSION_LIST``) are then deleted: they would point into the source's
    version (the xarray writer rebuilds dimension scales after a commit).
    Neither dataset is opened (libhdf5 would decode every mapping): the
    copy's attributes are read by index and told apart by their HDF5 datatype
    (:func:`~xarray_vhdf5._backend.h5attrs.reference_attribute_names`, without
    building a numpy dtype per attribute).

    Parameters
    ----------
    source_loc : h5py ObjectID
        The source dataset's id with ``source_name`` ``b"."``, or its group's.
    source_name : bytes
        The source's name relative to ``source_loc``.
    group : h5py.Group
        Where the copy is linked, as ``name``.
    num_attrs : int, optional
        The source's number of attributes, when known (the copy's are the same).
    """
    bname = name.encode()
    h5o.copy(source_loc, source_name, group.id, bname)
    for attr_name in reference_attribute_names(group.id, bname, num_attrs):
        h5a.delete(group.id, attr_name, obj_name=bname)


def write_attrs(obj: h5py.HLObject, attrs: Mapping[str, Any]) -> None:
    """Write user attributes on ``obj``, preserving h5py's dtype choices."""
    for key, value in attrs.items():
        obj.attrs[key] = value
