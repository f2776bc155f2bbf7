"""A committed version as Zarr v3 nodes: the arrays and groups a store presents, and their ``zarr.json``.

Built once per store from the version's group tree, as the ``vhdf5`` engine
reads it (:mod:`xarray_vhdf5.xr._engine`), so that ``xr.open_zarr(store)``
gives the Dataset ``xr.open_dataset(path, engine="vhdf5")`` gives:

- an array per dataset of the version, at its path below the store's group;
  netCDF-4's dimension-only scales (:func:`~xarray_vhdf5._backend.names.is_netcdf_dimension_only`)
  are not arrays;
- ``dimension_names`` from ``_ARRAY_DIMENSIONS``, else ``phony_dim_<n>`` as
  the engine names them (:func:`~xarray_vhdf5._backend.names.phony_dims`);
  scalars (stored as one point with ``_ARRAY_DIMENSIONS == []``) are 0-d;
- ``attributes``: the dataset's user attributes
  (:func:`~xarray_vhdf5._backend.names.visible_attrs`) as JSON, ``_FillValue``
  encoded as xarray's zarr backend reads it for Zarr v3
  (``xarray.backends.zarr.FillValueCoder``); a group's attributes, without the
  version's own (``timestamp``, ``prev_version``, ...) at the root. The
  ``_FillValue`` of a string array (fixed-length bytes, ``char`` arrays,
  variable-length strings) is left out: xarray's Zarr v3 reader has no rule
  to decode one (``FillValueCoder.decode`` raises ``ValueError`` for those
  dtypes, failing the whole ``open_zarr``), so such a variable reads unmasked,
  as ``engine="vhdf5", mask_and_scale=False`` reads it; for fixed-length bytes
  the value is still the array's ``fill_value``;
- ``fill_value``: what the version's unmapped chunks read as (the virtual
  dataset's fill value);
- ``codecs``: ``bytes`` (the dataset's byte order), then the filters that pass
  through (:mod:`._codecs`); chunks with other filters are served decoded;
- the chunk grid: the dataset's chunk shape (one chunk for a scalar), keys
  ``c/i/j`` (Zarr v3's default chunk key encoding); for arrays the store
  decodes anyway, a read-only store may serve ``k`` stored chunks along the
  first axis as one Zarr chunk (``coalesce_bytes``: up to that many bytes),
  so that zarr and dask make one request, and one task, per ``k`` chunks.

The root group's ``zarr.json`` carries every node's metadata inline
(zarr-python's consolidated metadata), so opening reads one key.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np

from .._backend.chunks import chunk_grid_shape
from .._backend.names import DIMENSIONS_ATTR, HIDDEN_GROUP_ATTRS, is_netcdf_dimension_only, phony_dims, visible_attrs
from ..errors import UnsupportedError
from ._codecs import zarr_v3_codecs

__all__ = ["ArrayNode", "GroupNode", "json_value", "version_nodes", "zarr_json_documents"]


@dataclasses.dataclass
class ArrayNode:
    """One array of the store: a dataset of the version.

    Attributes
    ----------
    key : str
        Its path in the store (``"sst"``, ``"grp/sst"``).
    source : str
        Its path in the version, relative to the version's group.
    shape, chunks : tuple of int
        As Zarr presents them (points); ``()`` and ``()`` for a scalar.
    dtype : numpy.dtype
        The points' dtype (``object`` for variable-length strings).
    fill_value : scalar
        Zarr's ``fill_value``.
    attributes : dict
        JSON-ready attributes.
    dimension_names : tuple of str
    codecs : list of dict
        Bytes-to-bytes codecs after ``bytes`` when chunks pass through; None when decoded.
    why_decoded : str or None
        Why the store decodes the chunks (None when they pass through).
    """

    key: str
    source: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    stored_chunks: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any
    attributes: dict
    dimension_names: tuple[str, ...]
    codecs: list[dict] | None
    why_decoded: str | None

    @property
    def scalar(self) -> bool:
        """Stored as one point, presented 0-d."""
        return self.shape == () and self.stored_chunks != ()

    @property
    def grid(self) -> tuple[int, ...]:
        """Chunks per axis."""
        return chunk_grid_shape(self.shape, self.chunks)


@dataclasses.dataclass
class GroupNode:
    """One group of the store: the version's group (``key == ""``) or a subgroup."""

    key: str
    attributes: dict


def json_value(value: Any) -> Any:
    """An HDF5 attribute value (numpy scalar or array, bytes, str) as a JSON value.

    Arrays become lists (a 1-element array stays a list), byte strings are
    decoded as UTF-8 (invalid bytes escaped, ``surrogateescape``), numpy
    scalars become Python scalars; NaN and infinities are kept (zarr-python
    writes them as ``NaN`` / ``Infinity``).

    Raises
    ------
    UnsupportedError
        A value JSON cannot hold (an object reference, a compound value).
    """
    if isinstance(value, np.ndarray):
        if value.dtype.names is not None or value.dtype.kind == "V":
            raise UnsupportedError(f"attribute value of dtype {value.dtype} has no JSON form")
        return [json_value(v) for v in value.tolist()] if value.ndim else json_value(value[()])
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("utf-8", "surrogateescape")
    if isinstance(value, np.generic):
        return json_value(value.item())
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, complex):
        return [value.real, value.imag]
    raise UnsupportedError(f"attribute value {value!r} ({type(value).__name__}) has no JSON form")


def _attributes(attrs, dtype: np.dtype | None) -> dict:
    from xarray.backends.zarr import FillValueCoder  # xarray's Zarr v3 rule for _FillValue

    out = {}
    for name, value in attrs.items():
        if name == "_FillValue" and dtype is not None and dtype.kind not in "biufc":
            continue  # strings: xarray's Zarr v3 reader cannot decode it (see the module docstring)
        if name == "_FillValue" and dtype is not None:
            value = np.asarray(value).reshape(-1)[0] if np.ndim(value) else value
            out[name] = FillValueCoder.encode(value.item() if isinstance(value, np.generic) else value, dtype)
            continue
        out[name] = json_value(value)
    return out


def _zarr_dtype(dtype: np.dtype) -> np.dtype | str:
    if dtype.kind == "O":
        return "str"  # HDF5 variable-length strings: Zarr's variable-length UTF-8
    return dtype


def version_nodes(
    group,
    *,
    numcodecs: bool = False,
    verify: bool = False,
    coalesce_bytes: int | None = None,
    datasets: dict | None = None,
) -> dict[str, ArrayNode | GroupNode]:
    """The nodes of a version's group, by key (``""`` is the group itself).

    Parameters
    ----------
    group : SharedVersionGroup
        The version's group or a subgroup of it
        (:class:`~xarray_vhdf5._versions.reader.SharedVersionedFile`).
    numcodecs : bool
        Pass deflate, shuffle and Fletcher-32 through as numcodecs codecs (see :mod:`._codecs`).
    verify : bool
        Chunks are checked against the hash table's digests: served decoded.
    coalesce_bytes : int, optional
        For arrays whose chunks are served decoded (not scalars, not strings):
        Zarr chunks of ``k`` stored chunks along the first axis, ``k`` the most
        whose bytes (uncompressed) fit (at least 1, at most the grid's length).
        None: Zarr's chunks are the stored ones.
    datasets : dict, optional
        Filled with each array's resolved dataset by key, for reading its chunks later.
    """
    nodes: dict[str, ArrayNode | GroupNode] = {}
    pending = [("", group)]
    root_attrs = set(HIDDEN_GROUP_ATTRS) if group.name == group.versioned_root.name else set()
    while pending:
        key, grp = pending.pop(0)
        hidden = root_attrs if key == "" else set()
        nodes[key] = GroupNode(key, _attributes({k: v for k, v in grp.attrs.items() if k not in hidden}, None))
        dims_by_size: dict = {}
        for name, member in grp.items():  # the group's datasets resolved through one handle
            child = f"{key}/{name}" if key else name
            if hasattr(member, "keys"):
                pending.append((child, member))
                continue
            if is_netcdf_dimension_only(member):
                continue
            nodes[child] = _array_node(child, member, dims_by_size, numcodecs, verify, coalesce_bytes)
            if datasets is not None:
                datasets[child] = member
    return nodes


def _array_node(
    key: str, ds, dims_by_size: dict, numcodecs: bool, verify: bool, coalesce_bytes: int | None = None
) -> ArrayNode:
    dims = ds.attrs.get(DIMENSIONS_ATTR)
    if dims is None:
        dims = phony_dims(ds.shape, dims_by_size)
    else:
        dims = tuple(d.decode() if isinstance(d, bytes) else str(d) for d in np.atleast_1d(dims))
    shape, chunks = tuple(ds.shape), tuple(int(c) for c in ds.chunks)
    scalar = not dims and shape == (1,)
    manifest = ds.manifest
    why: str | None
    if manifest is None:
        codecs, why = None, "read through libhdf5 (variable-length strings or a filter without a decoder)"
        fill = ds.fillvalue
    else:
        codecs, why = zarr_v3_codecs(manifest.filters, ds.dtype, numcodecs=numcodecs)
        fill = manifest.fillvalue
        if verify and codecs is not None:
            codecs, why = None, "verified against the hash table's digests (verify=True)"
    if scalar and codecs is not None:
        codecs, why = None, "a scalar: its one point is served"
    dtype = np.dtype(object) if ds.dtype.kind == "O" else ds.dtype
    if dtype.kind == "O":
        fill = ""
    elif np.ndim(fill):
        fill = np.asarray(fill, dtype)[()]
    attrs = _attributes(visible_attrs(ds.attrs), dtype)
    zarr_chunks = chunks
    if coalesce_bytes and codecs is None and not scalar and shape and dtype.kind != "O":
        per_chunk = int(np.prod(chunks)) * dtype.itemsize
        k = max(1, min(chunk_grid_shape(shape, chunks)[0], coalesce_bytes // max(per_chunk, 1)))
        zarr_chunks = (chunks[0] * k, *chunks[1:])
    return ArrayNode(
        key=key,
        source=ds.name[len(ds.parent.versioned_root.name) :].strip("/"),
        shape=() if scalar else shape,
        chunks=() if scalar else zarr_chunks,
        stored_chunks=chunks,
        dtype=dtype,
        fill_value=np.asarray(fill, dtype)[()] if dtype.kind != "O" else fill,
        attributes=attrs,
        dimension_names=tuple(dims),
        codecs=codecs,
        why_decoded=why,
    )


def _array_metadata(node: ArrayNode):
    from zarr.core.dtype import parse_data_type
    from zarr.core.metadata.v3 import ArrayV3Metadata

    dtype = node.dtype
    endian = "big" if dtype.byteorder == ">" else "little"
    serializer: dict[str, Any]  # zarr's codec JSON
    if dtype.kind == "O":
        serializer = {"name": "vlen-utf8", "configuration": {}}
    elif dtype.itemsize == 1 or dtype.kind in "SV":  # no byte order to state
        serializer = {"name": "bytes", "configuration": {}}
    else:
        serializer = {"name": "bytes", "configuration": {"endian": endian}}
    with warnings.catch_warnings():  # zarr's notes that fixed-length strings are not in the v3 spec
        warnings.simplefilter("ignore")
        zdtype = parse_data_type(_zarr_dtype(dtype), zarr_format=3)
        return ArrayV3Metadata(
            shape=node.shape,
            data_type=zdtype,
            chunk_grid={"name": "regular", "configuration": {"chunk_shape": node.chunks or ()}},
            chunk_key_encoding={"name": "default", "configuration": {"separator": "/"}},
            fill_value=node.fill_value,
            codecs=[serializer, *(node.codecs or [])],
            attributes=node.attributes,
            dimension_names=node.dimension_names or None,
            storage_transformers=(),
        )


def zarr_json_documents(nodes: dict[str, ArrayNode | GroupNode]) -> dict[str, bytes]:
    """``zarr.json`` of every node, by store key (``"zarr.json"``, ``"sst/zarr.json"``).

    The root group's document holds every other node's metadata inline
    (``consolidated_metadata``), as ``zarr.consolidate_metadata`` writes it.
    """
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.group import ConsolidatedMetadata, GroupMetadata

    prototype = default_buffer_prototype()
    metadata = {}
    for key, node in nodes.items():
        if isinstance(node, GroupNode):
            metadata[key] = GroupMetadata(attributes=node.attributes, zarr_format=3)
        else:
            metadata[key] = _array_metadata(node)
    docs = {}
    for key, meta in metadata.items():
        if key == "":
            meta = GroupMetadata(
                attributes=meta.attributes,
                zarr_format=3,
                consolidated_metadata=ConsolidatedMetadata(metadata={k: m for k, m in metadata.items() if k}),
            )
        docs[f"{key}/zarr.json" if key else "zarr.json"] = meta.to_buffer_dict(prototype)["zarr.json"].to_bytes()
    return docs
