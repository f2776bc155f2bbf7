"""What the ``vhdf5`` engine reads with: files, version groups and lazy variables.

The machinery behind :class:`~xarray_vhdf5.xr._engine.VHDF5BackendEntrypoint`,
shared with :mod:`~xarray_vhdf5.xr._datatree` (a version's group tree) and
:mod:`~xarray_vhdf5.xr._stacked` (many versions at once). Kept apart from the
entry point so that xarray, which imports every installed engine whenever it
lists them, imports only that small module (h5py, the version history and the
compiled kernels load on the first open).

Uses xarray's public backend API (``BackendArray``, ``CachingFileManager``)
and leaves CF decoding to :func:`xarray.conventions.decode_cf_variables`, so
``decode_times``, ``mask_and_scale`` etc. behave as with every other engine.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import h5py
import numpy as np
import xarray as xr
from h5py import h5a, h5g, h5o
from xarray.backends import BackendArray, CachingFileManager
from xarray.core import indexing

from .._backend.h5attrs import object_attrs
from .._backend.h5objects import object_info_by_name, open_object
from .._backend.layout import FIRST_VERSION, versions_path
from .._backend.layout import version_path as root_path
from .._backend.manifest_resolve import resolve_manifest
from .._backend.names import (
    DIMENSIONS_ATTR,
    HIDDEN_GROUP_ATTRS,
    NETCDF_REFERENCE_ATTRS,
    is_netcdf_dimension_only,
    phony_dims,
    visible_attrs,
)
from .._backend.signature import not_hdf5_error
from .._versions import chunkmaps, refs
from .._versions.lookup import lookup_as_of, lookup_version
from .._versions.openrepair import committed_flag
from .._versions.registry import VersionKey, VersionRegistry
from .._versions.sharing import SharedFile, version_timestamp
from ._array import HandleBackendArray, ManifestBackendArray, VersionedBackendArray

__all__ = [
    "NOT_HDF5_HINT",
    "acquire_file",
    "close_read_handles",
    "dataset_members",
    "file_source",
    "group_dataset",
    "lazy_variable",
    "open_version_group",
    "opened",
    "opened_branch",
    "register_read_handle",
    "source_path",
    "stored_encoding",
]

#: The managers this process opened, by real path (see :func:`close_read_handles`).
_MANAGERS: dict[str, weakref.WeakSet] = {}


NOT_HDF5_HINT = (
    "engine='vhdf5' reads versioned HDF5 files; open this file with another engine "
    "(engine='scipy' or 'netcdf4' for netCDF-3), and commit it as a version with "
    "ds.vhdf5.commit(version, path=...) to start a version history"
)


def file_source(filename_or_obj, verify: bool = False) -> SharedFile | CachingFileManager:
    """A :class:`SharedFile` for a path (nothing held open), a ``CachingFileManager`` for a file object."""
    if isinstance(filename_or_obj, (str, os.PathLike)):
        return SharedFile(os.path.abspath(os.fspath(filename_or_obj)), verify=verify)
    if hasattr(filename_or_obj, "read") and hasattr(filename_or_obj, "seek"):
        # File-like objects (h5py's fileobj driver); not picklable for dask workers.
        return CachingFileManager(h5py.File, filename_or_obj, mode="r")
    raise TypeError(f"engine='vhdf5' opens a path or a binary file object, got {type(filename_or_obj).__name__}")


def acquire_file(manager: CachingFileManager, filename_or_obj) -> h5py.File:
    """Open the file of ``manager`` (made by ``file_source(filename_or_obj)``).

    Raises
    ------
    NotHDF5Error
        ``filename_or_obj`` is not an HDF5 file (e.g. netCDF-3): an ``OSError``
        that names the file and what it is, instead of libhdf5's "file
        signature not found".
    OSError
        libhdf5's, for any other failure (a missing, unreadable or damaged file).
    """
    try:
        return manager.acquire()
    except OSError as exc:
        error = not_hdf5_error(filename_or_obj, hint=NOT_HDF5_HINT)
        if error is None:
            raise
        raise error from exc


@contextlib.contextmanager
def opened(source: SharedFile | CachingFileManager, filename_or_obj) -> Iterator[h5py.File]:
    """The file of ``source`` while a version is resolved (see :func:`file_source`).

    A :class:`SharedFile` gives a fresh read-only handle under the file's lock,
    closed at the end; a ``CachingFileManager`` its cached handle, left open
    for the arrays (closed with the Dataset). Raises as :func:`acquire_file`,
    and :class:`~xarray_vhdf5.errors.FileBusyError` when a writer held the file
    past the reader's timeout.
    """
    if isinstance(source, SharedFile):
        with source.open(hint=NOT_HDF5_HINT) as f:
            yield f
    else:
        yield acquire_file(source, filename_or_obj)


def register_read_handle(path: str | os.PathLike, handle) -> None:
    """Have :func:`close_read_handles` close ``handle`` (anything with ``close()``; kept weakly)."""
    _MANAGERS.setdefault(os.path.realpath(os.fspath(path)), weakref.WeakSet()).add(handle)


def close_read_handles(path: str | os.PathLike) -> None:
    """Close the read-only handles this engine holds on ``path`` in this process.

    libhdf5 cannot open a file for writing while the same process has it open
    read-only, so the writer calls this before committing into a file that
    lazily opened Datasets read from. Their arrays stay usable: the
    ``CachingFileManager`` reopens the file on the next read (read-only
    opens are allowed while the writer has it open). Handles held by other
    processes (dask workers) are not affected: libhdf5's file locking then
    refuses the writer.
    """
    for manager in list(_MANAGERS.get(os.path.realpath(os.fspath(path)), ())):
        manager.close()


def open_version_group(f: h5py.File, version: VersionKey, group: str | None, as_of=None) -> tuple[str, h5py.Group]:
    """Resolve ``version`` and return ``(version name, the HDF5 group to read)``.

    ``version`` as :func:`~xarray_vhdf5._versions.lookup.lookup_version` takes it;
    with ``as_of``, the version its line (a branch) had then
    (:func:`~xarray_vhdf5._versions.lookup.lookup_as_of`).

    Raises
    ------
    NotVersionedError
        ``f`` has no version history.
    VersionNotFoundError
        No such version (the message says what was given and what exists).
    VersionKeyTypeError
        ``version`` of another type (a ``TypeError``).
    KeyError
        ``group`` does not exist in that version.
    """
    root = _named_version(f, version) if as_of is None else None
    if root is not None:  # what lookup_version answers first: a committed version of that name
        name = str(version)
    else:
        registry = VersionRegistry(f)
        name = lookup_version(registry, version) if as_of is None else lookup_as_of(registry, version, as_of)
        root = registry.group[name]
    if group in (None, "", "/"):
        return name, root
    path = group.strip("/")
    if path not in root or not isinstance(root[path], h5py.Group):
        raise KeyError(f"no group {group!r} in version {name!r}; groups: {sorted(_groups(root))}")
    return name, root[path]


def _named_version(f: h5py.File, version: VersionKey) -> h5py.Group | None:
    """The group of the committed version named ``version``, opened without the version registry; else None.

    A name is the first thing :func:`~xarray_vhdf5._versions.lookup.lookup_version`
    looks for, among committed versions: groups of the versions group with a
    ``timestamp`` whose ``committed`` attribute is not False
    (:func:`~xarray_vhdf5._versions.index.read_group_entry`). Asking the group
    directly answers that in three libhdf5 calls, where loading the registry
    reads the version index; anything else (a branch, a time, a position, an
    uncommitted group) is left to the registry.
    """
    if not isinstance(version, str) or not version or version == FIRST_VERSION or "/" in version:
        return None
    try:
        gid = h5g.open(f.id, f"{versions_path()}/{version}".encode("utf-8", "surrogateescape"))
    except (KeyError, ValueError, UnicodeEncodeError):
        return None
    if not h5a.exists(gid, b"timestamp") or committed_flag(gid) is False:
        return None
    return h5py.Group(gid)


def opened_branch(f: h5py.File, version: VersionKey, name: str) -> str | None:
    """The branch ``version`` named, other than ``main``, when it named one and no version; else None."""
    if not isinstance(version, str) or version == refs.MAIN or version == name:
        return None
    return version if refs.snapshot(f)[1].get(version) == name else None


def _groups(root: h5py.Group) -> list[str]:
    found: list[str] = []
    root.visititems(lambda p, o: found.append(p) if isinstance(o, h5py.Group) else None)
    return found


class _StoredView:
    """What :func:`lazy_variable` reads of a version's dataset, from its stored chunk map.

    Stands for the ``h5py.Dataset`` (``name``, ``attrs``, ``shape``, ``dtype``,
    ``file``), which is never opened: libhdf5 would decode every mapping of
    the virtual dataset (:mod:`~xarray_vhdf5._versions.chunkmaps`).
    """

    def __init__(self, name: str, stored: chunkmaps.StoredLayout, timestamp):
        self.name, self.stored, self.timestamp = name, stored, timestamp
        self.attrs, self.shape, self.dtype = stored.attrs, stored.shape, stored.raw_data.dtype
        self.file, self.raw = stored.raw_data.file, stored.raw_data


class _DatasetView:
    """What :func:`lazy_variable` reads of a version's dataset without a stored map, read once.

    The dataset (``dataset``, its mappings decoded when a manifest is made), its
    attributes (:func:`~xarray_vhdf5._backend.h5attrs.object_attrs`, in h5py's
    order; object references left unread, as ``lazy_variable`` shows none), its
    raw_data (``raw``, None for a dataset that names none) and the version's
    ``timestamp`` attribute (read once per group by :func:`dataset_members`).

    Raises
    ------
    KeyError
        The raw_data the dataset names is missing (h5py's error).
    """

    def __init__(self, ds: h5py.Dataset, timestamp):
        self.dataset, self.timestamp = ds, timestamp
        self.name, self.shape, self.dtype, self.file = ds.name, ds.shape, ds.dtype, ds.file
        self.attrs = object_attrs(ds, defer=NETCDF_REFERENCE_ATTRS)
        raw_path = self.attrs.get("raw_data")
        self.raw = None
        if isinstance(raw_path, str):
            self.raw = open_object(self.file, raw_path, h5py.Dataset)
            if self.raw is None:
                self.raw = self.file[raw_path]  # KeyError, as h5py says it


def dataset_members(manager, version: str, grp: h5py.Group) -> Iterator[tuple[str, Any]]:
    """``(name, _StoredView or _DatasetView)`` of the datasets in ``grp``, in ``grp.keys()`` order."""
    prefix = grp.name[len(root_path(version)) :].strip("/")
    timestamp = version_timestamp(grp, version)  # what each variable's reads check, read once
    for key in grp.keys():
        bkey = key.encode("utf-8", "surrogateescape")
        if object_info_by_name(grp.id, bkey)[1] != h5o.TYPE_DATASET:
            continue
        # object references left unread: lazy_variable shows neither (visible_attrs)
        stored = chunkmaps.load(grp.file, version, f"{prefix}/{key}" if prefix else key, defer=NETCDF_REFERENCE_ATTRS)
        if stored is not None:
            yield key, _StoredView(f"{grp.name}/{key}", stored, timestamp)
        else:
            yield key, _DatasetView(grp[key], timestamp)


def _raw_data(ds) -> h5py.Dataset | None:
    """The raw_data of ``ds`` (a view, or an ``h5py.Dataset`` of a version); None if it names none."""
    if isinstance(ds, (_StoredView, _DatasetView)):
        return ds.raw
    return ds.file[ds.attrs["raw_data"]] if "raw_data" in ds.attrs else None


def _backend_array(manager, version: str, ds, shape, dtype, as_str: bool) -> BackendArray:
    if not isinstance(manager, SharedFile):
        return VersionedBackendArray(manager, ds.name, shape, dtype, as_str)
    timestamp = getattr(ds, "timestamp", None) or version_timestamp(ds.file, version)
    raw = _raw_data(ds)
    if ds.dtype.kind != "O" and raw is not None:  # a versioned dataset: its chunks as bytes
        # Resolved now, under the lock the open holds: a read while this process
        # commits (a dask variable of this file streamed into it) needs no lock then.
        if isinstance(ds, _StoredView):
            manifest = ds.stored.manifest(ds.name, verify=manager.verify)
        else:
            dataset = ds.dataset if isinstance(ds, _DatasetView) else ds
            lookup = chunkmaps.address_lookup(ds.file, ds.name[len(root_path(version)) :].strip("/"), raw)
            chunks = ds.attrs.get("chunks")
            layout = None if chunks is None else (tuple(int(c) for c in np.atleast_1d(chunks)), raw)
            manifest = resolve_manifest(dataset, verify=manager.verify, addresses=lookup, layout=layout)
        if manifest.supported:
            return ManifestBackendArray(manager, version, ds.name, shape, dtype, timestamp, manifest)
    return HandleBackendArray(manager, version, ds.name, shape, dtype, as_str, timestamp)


def stored_encoding(dtype: np.dtype, attrs) -> dict[str, Any]:
    """The ``encoding`` a version's dataset opens with, before CF decoding (xarray's ``Variable.encoding``).

    Parameters
    ----------
    dtype : numpy.dtype
        The dataset's stored dtype.
    attrs : mapping
        Its visible attributes (:func:`~xarray_vhdf5._backend.names.visible_attrs`).

    Returns
    -------
    dict
        ``dtype`` (``str`` for variable-length strings); for floats stored
        without ``_FillValue`` (e.g. by versioned-hdf5), ``_FillValue=None``:
        so written back, not with the NaN xarray's encoder adds to floats
        whose encoding is silent.
    """
    encoding: dict[str, Any] = {"dtype": dtype if dtype.kind != "O" else str}
    if dtype.kind in "fc" and "_FillValue" not in attrs:
        encoding["_FillValue"] = None
    return encoding


def lazy_variable(manager, version: str, ds, dims_by_size: dict) -> xr.Variable:
    """The lazy variable of ``ds``: an ``h5py.Dataset`` of a version, or a :class:`_StoredView` of one."""
    attrs = visible_attrs(ds.attrs)
    dims = ds.attrs.get(DIMENSIONS_ATTR)
    if dims is None:
        dims = phony_dims(ds.shape, dims_by_size)
    else:
        dims = tuple(d.decode() if isinstance(d, bytes) else str(d) for d in np.atleast_1d(dims))
    string_info = h5py.check_string_dtype(ds.dtype)
    as_str = string_info is not None and string_info.encoding == "utf-8" and ds.dtype.kind == "O"
    dtype = np.dtype(object) if ds.dtype.kind == "O" else ds.dtype
    shape = ds.shape if dims or ds.shape != (1,) else ()  # scalars are stored as one point
    array = _backend_array(manager, version, ds, shape, dtype, as_str)
    data = indexing.LazilyIndexedArray(array)
    chunks = tuple(int(c) for c in ds.attrs["chunks"]) if "chunks" in ds.attrs else None
    encoding = stored_encoding(ds.dtype, attrs)
    if chunks is not None and shape:
        encoding["chunks"] = chunks
        encoding["preferred_chunks"] = dict(zip(dims, chunks))
    raw = _raw_data(ds)
    if raw is not None and raw.compression is not None:
        encoding["compression"] = raw.compression
        encoding["compression_opts"] = raw.compression_opts
    if raw is not None and raw.shuffle:
        encoding["shuffle"] = True
    return xr.Variable(dims, data, attrs, encoding)


def source_path(filename_or_obj) -> str | None:
    """The path ``filename_or_obj`` names, for ``encoding["source"]``; None for a file object."""
    return os.fspath(filename_or_obj) if isinstance(filename_or_obj, (str, os.PathLike)) else None


def group_dataset(
    manager,
    version: str,
    grp: h5py.Group,
    source: str | None,
    drop_variables: str | Iterable[str] | None,
    decoders: dict[str, Any],
) -> xr.Dataset:
    """The lazy, CF-decoded Dataset of one group of a version (no close callback set).

    Parameters
    ----------
    manager : SharedFile or xarray.backends.CachingFileManager
        Opens the file; the variables keep it (they pickle with it).
    version : str
        The resolved version name.
    grp : h5py.Group
        The version group or one of its subgroups.
    source : str or None
        Path of the file, stored in ``encoding["source"]``.
    drop_variables : str or iterable of str, optional
        Variables not to open.
    decoders : dict
        ``mask_and_scale``, ``decode_times``, ... for
        :func:`xarray.conventions.decode_cf_variables`.

    Notes
    -----
    netCDF-4 phony dimension scales (see :mod:`~xarray_vhdf5.xr._dimscales`) are
    not variables and are skipped; dimensions come from ``_ARRAY_DIMENSIONS``.
    """
    dims_by_size: dict = {}
    variables = {
        key: lazy_variable(manager, version, item, dims_by_size)
        for key, item in dataset_members(manager, version, grp)
        if not is_netcdf_dimension_only(item)
    }
    at_root = grp.name == root_path(version)
    stored_attrs = {k: v for k, v in object_attrs(grp).items() if not (at_root and k in HIDDEN_GROUP_ATTRS)}
    if drop_variables is not None:
        drop = {drop_variables} if isinstance(drop_variables, str) else set(drop_variables)
        variables = {k: v for k, v in variables.items() if k not in drop}
    decoded, attrs, coord_names = xr.conventions.decode_cf_variables(variables, stored_attrs, **decoders)
    ds = xr.Dataset(decoded, attrs=attrs)
    ds = ds.set_coords(coord_names.intersection(decoded))
    ds.encoding.update(
        source=source,
        vhdf5_version=version,
        vhdf5_group=grp.name[len(root_path(version)) :] or "/",
        # how its times were decoded: ds.vhdf5.diff decodes the other version alike
        vhdf5_decode_times=decoders.get("decode_times", True),
    )
    return ds
