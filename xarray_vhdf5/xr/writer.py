"""Committing an xarray Dataset as a version (``ds.vhdf5.commit(version, path=...)``).

The Dataset is CF-encoded by xarray itself (:func:`xarray.conventions.encode_dataset_coordinates`
and :func:`xarray.conventions.cf_encoder`, as xarray's own writers do), then each
variable becomes a dataset of the version's group:

- dimension names in the ``_ARRAY_DIMENSIONS`` attribute (scalars are stored as
  one point with an empty list there);
- ``encoding["chunks"]`` (or netCDF4's ``chunksizes``) gives the chunk shape,
  else one record per chunk for n-d variables (see ``guess_chunks_record``);
- ``encoding`` compression (``compression``/``compression_opts``, or netCDF4's
  ``zlib``/``complevel``), ``shuffle`` and ``fletcher32`` become HDF5 filters;
- ``_FillValue`` becomes the HDF5 fill value too, so chunks entirely missing
  (land in an ocean field) are not stored at all.

The new version replaces the group's content: variables absent from the
Dataset are absent from the version. Unchanged chunks are deduplicated by hash
against every earlier version, so re-committing a mostly unchanged Dataset
writes only the chunks that differ.
"""

from __future__ import annotations

import datetime as _dt
import os
from typing import Any

import h5py
import numpy as np
import xarray as xr

from ..backend.chunks import guess_chunks_record
from ..errors import IncompatibleDataError
from ..versions.file import VersionedHDF5File
from ..versions.registry import is_versioned
from ..wrappers.group import InMemoryGroup
from .names import DIMENSIONS_ATTR, MESSAGE_ATTR

__all__ = ["commit_dataset", "next_version_name", "variable_chunks"]

_COMPRESSION_KEYS = ("compression", "compression_opts", "zlib", "complevel", "shuffle", "fletcher32")


def next_version_name(vf: VersionedHDF5File) -> str:
    """Auto-generated version name: ``"r<N>"`` with N one more than the versions in the file.

    If that name exists (versions deleted or named so by hand), N grows until free.
    """
    n = len(vf) + 1
    while f"r{n}" in vf:
        n += 1
    return f"r{n}"


def variable_chunks(name: str, var: xr.Variable) -> tuple[int, ...]:
    """Chunk shape of an encoded variable, in points (see the module docstring).

    Raises
    ------
    IncompatibleDataError
        ``encoding["chunks"]`` does not have one positive int per dimension.
    """
    chunks = var.encoding.get("chunks") or var.encoding.get("chunksizes")
    shape = var.shape if var.ndim else (1,)
    if chunks:
        chunks = tuple(int(c) for c in chunks)
        if len(chunks) != len(shape) or any(c <= 0 for c in chunks):
            raise IncompatibleDataError(
                f"variable {name!r}: encoding['chunks'] {chunks} does not fit its shape {var.shape}"
            )
        return chunks
    if len(shape) == 1:
        return (min(4096, max(512, shape[0])),)
    return guess_chunks_record(shape, var.dtype.itemsize if var.dtype.kind != "O" else 8)


def _filters(var: xr.Variable) -> dict[str, Any]:
    enc = var.encoding
    kw: dict[str, Any] = {}
    if enc.get("compression") is not None:
        kw["compression"] = enc["compression"]
        if enc.get("compression_opts") is not None:
            kw["compression_opts"] = enc["compression_opts"]
    elif enc.get("zlib"):
        kw["compression"] = "gzip"
        kw["compression_opts"] = enc.get("complevel", 4)
    if enc.get("shuffle") and kw:
        kw["shuffle"] = True
    if enc.get("fletcher32"):
        kw["fletcher32"] = True
    return kw


def _stored_values(name: str, var: xr.Variable) -> np.ndarray:
    values = np.asarray(var.values)
    if values.dtype.kind == "U":
        values = values.astype(object)
    if values.dtype.kind == "O":
        bad = next((v for v in values.flat if not isinstance(v, (str, bytes))), None)
        if bad is not None:
            raise IncompatibleDataError(
                f"variable {name!r} holds {type(bad).__name__} objects; only str/bytes objects can be stored"
            )
    if values.dtype.kind not in "biufcSOV":
        raise IncompatibleDataError(
            f"variable {name!r}: dtype {values.dtype} cannot be stored in HDF5 after CF encoding"
        )
    return values if var.ndim else values.reshape(1)


def write_variables(group: InMemoryGroup, dataset: xr.Dataset) -> None:
    """Replace the content of staged ``group`` by the CF-encoded ``dataset``."""
    variables, attrs = xr.conventions.encode_dataset_coordinates(dataset)
    variables, attrs = xr.conventions.cf_encoder(variables, attrs)
    for name in list(group):
        if name not in variables and not isinstance(group[name], InMemoryGroup):
            del group[name]
    for key in list(group.attrs):
        del group.attrs[key]
    for key, value in attrs.items():
        group.attrs[key] = value
    for name, var in variables.items():
        name = str(name)
        if "/" in name:
            raise IncompatibleDataError(f"variable name {name!r} contains '/'")
        values = _stored_values(name, var)
        var_attrs = dict(var.attrs)
        fill = var_attrs.get("_FillValue")
        if name in group:
            del group[name]
        ds = group.create_dataset(
            name,
            data=values,
            chunks=variable_chunks(name, var),
            fillvalue=None if (fill is None or values.dtype.kind == "O") else np.asarray(fill, values.dtype)[()],
            **_filters(var),
        )
        # chunks from encoding are user choices; without them, an existing raw_data's win.
        ds.chunks_given = bool(var.encoding.get("chunks") or var.encoding.get("chunksizes"))
        if values.dtype.kind == "O" and all(isinstance(v, str) for v in values.flat):
            ds._dtype = h5py.string_dtype("utf-8")
        for key, value in var_attrs.items():
            ds.attrs[key] = value
        dims = list(map(str, var.dims))
        ds.attrs[DIMENSIONS_ATTR] = np.array(dims, dtype=h5py.string_dtype()) if dims else np.array([], dtype=h5py.string_dtype())


def commit_dataset(
    dataset: xr.Dataset,
    path: str | os.PathLike,
    version: str | None = None,
    *,
    group: str | None = None,
    prev_version: str | None = None,
    message: str | None = None,
    timestamp: _dt.datetime | np.datetime64 | None = None,
    make_current: bool = True,
) -> str:
    """Commit ``dataset`` as a new version of the file at ``path`` (created if missing).

    Parameters
    ----------
    dataset : xarray.Dataset
        numpy- or dask-backed (dask variables are computed one at a time).
    path : str or os.PathLike
        The versioned HDF5 file; created if it does not exist.
    version : str, optional
        Name of the new version; default :func:`next_version_name` (``r1``, ``r2``, ...).
    group : str, optional
        Group inside the version that receives the Dataset (default the root);
        other groups of the previous version are kept.
    prev_version : str, optional
        Parent version (default the current one).
    message : str, optional
        Stored as the version group's ``_vhdf5_message`` attribute.
    timestamp : datetime or numpy.datetime64, optional
        The version's timestamp (UTC), default now.
    make_current : bool
        Make it the current version (default True).

    Returns
    -------
    str
        The new version's name.

    Raises
    ------
    NotVersionedError
        ``path`` is an HDF5 file without version history that holds other data.
    VersionExistsError
        ``version`` exists.
    IncompatibleDataError
        A variable's dtype, chunks or fill value cannot be stored or differ from
        those fixed by its first version; nothing is committed.
    """
    path = os.fspath(path)
    with h5py.File(path, "a") as f:
        if len(f) and not is_versioned(f):
            from ..errors import NotVersionedError

            raise NotVersionedError(
                f"{path!r} is an HDF5 file without version history; commit into a new file instead"
            )
        vf = VersionedHDF5File(f)
        name = version if version is not None else next_version_name(vf)
        with vf.stage_version(name, prev_version=prev_version, make_current=make_current, timestamp=timestamp) as root:
            target = root if group in (None, "", "/") else root.require_group(group.strip("/"))
            write_variables(target, dataset)
            root.attrs.pop(MESSAGE_ATTR, None)
            if message is not None:
                root.attrs[MESSAGE_ATTR] = message
    return name
