"""What the version log compares of a dataset between a version and its parent.

A dataset changed in a version when it was added or removed, or its shape,
dtype, chunk mapping (which raw_data row each chunk maps to, or none: all fill
value) or attributes differ from the parent's (:class:`DatasetState`,
:func:`DatasetState.differs`). Attributes are compared value by value, NaN equal
to NaN and arrays element-wise (:func:`same_attr_value`), leaving out the ones
the libraries manage themselves (:func:`compared_attrs`). Used by the version log
(:mod:`.history`), ``vhdf5 diff`` and the xarray layer's commit checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
from h5py import h5o

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.h5attrs import read_attrs_of
from .._backend.h5objects import walk_links
from .._backend.layout import VERSION_DATA, VERSIONS
from .._backend.names import (
    DIMENSIONS_ATTR,
    HIDDEN_VARIABLE_ATTRS,
    NETCDF_DIMENSION_ATTRS,
    NETCDF_REFERENCE_ATTRS,
    is_dimension_scale,
    is_netcdf_dimension_only,
    marks_netcdf_dimension_only,
)
from . import chunkmaps

#: Attributes :func:`compared_attrs` leaves out (``_ARRAY_DIMENSIONS`` is kept).
_NOT_COMPARED = (HIDDEN_VARIABLE_ATTRS | NETCDF_DIMENSION_ATTRS) - {DIMENSIONS_ATTR}

__all__ = ["DatasetState", "changed_attrs", "compared_attrs", "dataset_state", "same_attr_value", "version_states"]


def compared_attrs(dset: h5py.Dataset) -> dict[str, Any]:
    """The attributes that belong to a version's dataset, by name: the ones compared.

    All attributes but the format's own (``raw_data``, ``chunks``) and
    netCDF-4's dimension bookkeeping (``DIMENSION_LIST``, ``REFERENCE_LIST``:
    object references into the version's own group, rewritten by every
    commit; ``_Netcdf4Dimid``, ``_Netcdf4Coordinates``, and ``CLASS``/``NAME``
    of a dimension scale), as :func:`xarray_vhdf5._backend.names.visible_attrs`
    leaves out. The dimension names themselves are compared through
    ``_ARRAY_DIMENSIONS``, which is kept.

    Parameters
    ----------
    dset : h5py.Dataset
        A dataset of a committed version.

    Returns
    -------
    dict
        Attribute values as h5py reads them.
    """
    # By index in name order, through the compiled attribute reader (h5py's ``attrs`` asks
    # for the creation order first, ``get_create_plist``, which on a virtual dataset
    # encodes every mapping); the object references of netCDF-4 and the format's own
    # attributes are not read.
    return _compared(read_attrs_of(dset.id, b".", skip=_NOT_COMPARED))


def _compared(found: dict[str, Any]) -> dict[str, Any]:
    """:func:`compared_attrs` of the attributes ``found`` (read without those it leaves out)."""
    if is_dimension_scale(found):
        found.pop("CLASS", None)
        found.pop("NAME", None)
    if DIMENSIONS_ATTR in found:  # kept, listed last (as before)
        found[DIMENSIONS_ATTR] = found.pop(DIMENSIONS_ATTR)
    return found


def same_attr_value(x: Any, y: Any) -> bool:
    """True when two attribute values are equal: same shape and values, NaN equal to NaN.

    Values of another kind (a string against a number) are unequal.
    """
    x, y = np.asarray(x), np.asarray(y)
    nan_ok = x.dtype.kind in "fc" and y.dtype.kind in "fc"
    try:
        return bool(np.array_equal(x, y, equal_nan=nan_ok))
    except (TypeError, ValueError):
        return False


def changed_attrs(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the attributes added, removed or changed from ``a`` to ``b``, sorted."""
    return sorted(k for k in {*a, *b} if k not in a or k not in b or not same_attr_value(a[k], b[k]))


@dataclass(frozen=True, eq=False)
class DatasetState:
    """What defines one version of a dataset, for comparing it with another version.

    Attributes
    ----------
    shape : tuple of int
        Shape in points.
    dtype : numpy.dtype
    chunks : tuple of int
        Chunk shape in points.
    raw_path : str
        Path of the raw_data its chunks map to.
    mapping : bytes
        Digest of the chunk mapping (per chunk: mapped or not, and its first
        raw_data row).
    attrs : dict
        :func:`compared_attrs`.
    """

    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...]
    raw_path: str
    mapping: bytes
    attrs: dict[str, Any]

    def differs(self, other: DatasetState) -> bool:
        """True when shape, dtype, chunks, raw_data, mapping or attributes differ."""
        return (self.shape, self.dtype, self.chunks, self.raw_path, self.mapping) != (
            other.shape,
            other.dtype,
            other.chunks,
            other.raw_path,
            other.mapping,
        ) or bool(changed_attrs(self.attrs, other.attrs))


def dataset_state(dset: h5py.Dataset) -> tuple[DatasetState, np.ndarray]:
    """The state of a version's dataset and the raw_data rows it maps.

    Reads the virtual mappings and attributes only (no chunk data).

    Parameters
    ----------
    dset : h5py.Dataset
        A dataset of a committed version (a virtual dataset with ``raw_data``
        and ``chunks`` attributes).

    Returns
    -------
    state : DatasetState
    rows : numpy.ndarray of uint64
        The first raw_data row (along axis 0) of each chunk it maps, unique
        and sorted: one per stored chunk it uses.
    """
    chunks, raw_path = version_dataset_layout(dset)
    indices, offsets = build_slab_indices_and_offsets(dset, dset.shape, chunks, raw_path)
    mapped = indices != 0
    state = DatasetState(
        tuple(dset.shape), dset.dtype, chunks, raw_path, _mapping_digest(mapped, offsets[mapped]), compared_attrs(dset)
    )
    return state, np.unique(offsets[mapped]).astype(np.uint64)


def version_states(
    group: h5py.Group, skip: Callable[[h5py.Dataset], bool] = is_netcdf_dimension_only
) -> dict[str, tuple[DatasetState, np.ndarray]]:
    """:func:`dataset_state` of every versioned dataset below a version's group.

    Parameters
    ----------
    group : h5py.Group
        A committed version's group (``_version_data/versions/<name>``).
    skip : callable
        ``skip(dataset) -> bool``: datasets to leave out (default netCDF-4
        dimension scales that are not variables, as ``vhdf5 diff`` does).

    Returns
    -------
    dict
        Path relative to ``group`` -> (state, mapped rows).
    """
    found: dict[str, tuple[DatasetState, np.ndarray]] = {}
    prefix = f"/{VERSION_DATA}/{VERSIONS}/"
    version = group.name[len(prefix) :] if group.name.startswith(prefix) else ""
    maps = skip is is_netcdf_dimension_only and version and "/" not in version  # a version's own group
    for path, kind in walk_links(group.id):
        if kind != h5o.TYPE_DATASET:
            continue
        layout = chunkmaps.load(group.file, version, path, defer=NETCDF_REFERENCE_ATTRS) if maps else None
        if layout is not None:  # the stored map: the virtual dataset is not opened
            if not marks_netcdf_dimension_only(layout.attrs):
                found[path] = _stored_state(layout)
            continue
        obj = group[path]
        if "raw_data" in obj.attrs and obj.is_virtual and not skip(obj):
            found[path] = dataset_state(obj)
    return found


def _mapping_digest(mapped: np.ndarray, offsets: np.ndarray) -> bytes:
    """:class:`DatasetState`'s ``mapping``: per chunk (C order) mapped or not, and the mapped chunks' rows."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.packbits(mapped).tobytes())
    digest.update(np.ascontiguousarray(offsets, dtype=np.uint64).tobytes())
    return digest.digest()


def _stored_state(layout: chunkmaps.StoredLayout) -> tuple[DatasetState, np.ndarray]:
    """:func:`dataset_state` from a dataset's stored chunk map (:func:`~xarray_vhdf5._versions.chunkmaps.load`).

    Its attributes were read by name, its map and shape are the stored map's,
    its dtype raw_data's (the format's: the virtual dataset has raw_data's
    type); the mapping digest is over the same chunks and rows as from the
    mappings.
    """
    starts = layout.starts
    mapped = starts >= 0
    offsets = starts[mapped].astype(np.uint64)
    raw_path = layout.attrs["raw_data"]
    state = DatasetState(
        tuple(int(n) for n in layout.shape),
        layout.raw_data.dtype,
        tuple(int(c) for c in layout.chunks),
        raw_path.decode() if isinstance(raw_path, bytes) else str(raw_path),
        _mapping_digest(mapped, offsets),
        _compared({k: v for k, v in layout.attrs.items() if k not in _NOT_COMPARED}),
    )
    return state, np.unique(offsets)
