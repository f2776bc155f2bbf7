"""Virtual datasets: a version's view of one dataset, mapping chunks to raw_data.

Each stored chunk of the version is one mapping (source file ``"."``, source
``raw_data[start:stop, 0:n1, ...]``, destination the chunk's region); chunks
that are all fill value have no mapping and read as the virtual dataset's fill
value (FORMAT.md, "Commit and dedup"; HDF5 "Virtual Dataset" documentation).
The mappings are built with h5py's low-level API (``h5p.PropDCID.set_virtual``
and ``h5d.create``), about 5x cheaper per mapping than ``h5py.VirtualLayout``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import h5py
import numpy as np
from h5py import h5d, h5p, h5s, h5t

from .hashing import is_vlen_string_dtype

__all__ = ["create_virtual_dataset", "copy_virtual_dataset", "write_attrs"]


def _mem_space(shape: tuple[int, ...]) -> h5s.SpaceID:
    return h5s.create_simple(shape, shape)


def create_virtual_dataset(
    group: h5py.Group,
    name: str,
    raw_data: h5py.Dataset,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    chunk_rows: Iterable[tuple[tuple[int, ...], int, int]],
    attrs: Mapping[str, Any] | None = None,
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
    """
    dtype = raw_data.dtype
    dcpl = h5p.create(h5p.DATASET_CREATE)
    # Explicit, so a dataset with no stored chunk (all fill value) is still virtual
    # (with no mapping) as versioned-hdf5 writes it, not a contiguous dataset.
    dcpl.set_layout(h5d.VIRTUAL)
    if not is_vlen_string_dtype(dtype):
        dcpl.set_fill_value(_fill_value_array(raw_data.fillvalue, dtype))
    vspace = _mem_space(shape)
    src_space = raw_data.id.get_space()
    src_name = raw_data.name.encode()
    ndim = len(shape)
    for index, start, stop in chunk_rows:
        origin = tuple(i * c for i, c in zip(index, chunks))
        count = (stop - start,) + tuple(
            min(c, s - o) for c, s, o in zip(chunks[1:], shape[1:], origin[1:])
        )
        vspace.select_hyperslab(origin, count)
        src_space.select_hyperslab((start,) + (0,) * (ndim - 1), count)
        dcpl.set_virtual(vspace, b".", src_name, src_space)
    vspace.select_all()
    tid = h5t.py_create(dtype, logical=True)
    dsid = h5d.create(group.id, name.encode(), tid, vspace, dcpl=dcpl)
    ds = h5py.Dataset(dsid)
    ds.attrs["raw_data"] = raw_data.name
    ds.attrs["chunks"] = np.asarray(chunks, dtype=np.int64)
    if attrs:
        write_attrs(ds, attrs)
    return ds


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


def write_attrs(obj: h5py.HLObject, attrs: Mapping[str, Any]) -> None:
    """Write user attributes on ``obj``, preserving h5py's dtype choices."""
    for key, value in attrs.items():
        obj.attrs[key] = value
