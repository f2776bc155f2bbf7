"""Committing an xarray Dataset as a version (``ds.vhdf5.commit(version, path=...)``).

The Dataset is CF-encoded by xarray itself (:func:`xarray.conventions.encode_dataset_coordinates`
and :func:`xarray.conventions.cf_encoder`, as xarray's own writers do), then each
variable becomes a dataset of the version's group:

- dimension names in the ``_ARRAY_DIMENSIONS`` attribute (scalars are stored as
  one point with an empty list there);
- ``encoding["chunks"]`` (or netCDF4's ``chunksizes``) gives the chunk shape,
  else records of at least 8 KiB a chunk for n-d variables (see ``guess_chunks_record``;
  several records when a record is small: ``encoding["unlimited_dims"]`` says which
  dimensions grow);
- ``encoding`` compression (``compression``/``compression_opts``, or netCDF4's
  ``zlib``/``complevel``), ``shuffle`` and ``fletcher32`` become HDF5 filters;
- ``_FillValue`` becomes the HDF5 fill value too, so chunks entirely missing
  (land in an ocean field) are not stored at all.

The new version replaces the group's content: variables absent from the
Dataset are absent from the version. Unchanged chunks are deduplicated by hash
against every earlier version, so re-committing a mostly unchanged Dataset
writes only the chunks that differ.

dask-backed variables are not computed here: they are staged lazily and the
commit streams them chunk by chunk in bounded memory, computing and hashing
chunks on the dask workers (:mod:`~xarray_vhdf5.xr._streaming`).

After the commit, the writer makes the version readable by netCDF tools
(:func:`~xarray_vhdf5.xr._dimscales.attach_dimension_scales`).
:func:`commit_datatree` commits a whole ``xr.DataTree`` as one version.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
import xarray as xr

from .._backend.chunks import guess_chunks_record
from .._backend.names import (
    DIMENSIONS_ATTR,
    MESSAGE_ATTR,
    names_dimensions,
)
from .._versions.file import VersionedHDF5File
from .._versions.mutation import open_for_writing
from .._versions.registry import is_versioned
from .._versions.timestamps import to_utc_datetime
from .._wrappers.group import InMemoryGroup
from ..errors import IncompatibleDataError, NotVersionedError, StaleVersionError
from ._commit_checks import check_appended_indexes, refuse_empty_commit
from ._dimscales import attach_dimension_scales
from ._encoding import cf_encode_variables, filters_of, inherit_stored_encoding, kept_attrs, stored_values
from ._reading import close_read_handles
from ._streaming import DEFAULT_MAX_BYTES, is_dask_array, stage_lazy_dataset

if TYPE_CHECKING:
    from ._resplit_source import ResplitBudget

__all__ = [
    "commit_dataset",
    "commit_datatree",
    "next_version_name",
    "staged_version",
    "variable_chunks",
    "write_variable",
    "write_variables",
]


def next_version_name(vf: VersionedHDF5File) -> str:
    """Auto-generated version name: ``"r<N>"`` with N one more than the versions in the file.

    If that name exists (versions deleted or named so by hand), N grows until free.
    """
    n = len(vf) + 1
    while f"r{n}" in vf:
        n += 1
    return f"r{n}"


@contextlib.contextmanager
def staged_version(
    vf: VersionedHDF5File, name: str, *, timestamp, message: str | None, **kwargs: Any
) -> Iterator[InMemoryGroup]:
    """:meth:`VersionedHDF5File.stage_version` for a commit from xarray.

    The netCDF-4 dimension scales are attached inside the commit (they
    reference the version's own datasets: :func:`~xarray_vhdf5.xr._dimscales.attach_dimension_scales`),
    and once the block's body ran the version's message is set (the
    parent's is not carried over).

    Parameters
    ----------
    vf : VersionedHDF5File
        The file, open writable.
    name : str
        The new version's name.
    timestamp : datetime, numpy.datetime64 or None
        As :func:`~xarray_vhdf5._versions.timestamps.to_utc_datetime` takes
        it; None for the time of the commit.
    message : str or None
        The commit message (``_vhdf5_message``); None for none.
    **kwargs
        ``prev_version``, ``make_current``, ``rebase``, ``branch``, as
        ``stage_version`` takes them.

    Yields
    ------
    InMemoryGroup
        The staged version's root group.

    Raises
    ------
    VersionExistsError, VersionNotFoundError, StaleVersionError, ConflictError
        As :meth:`VersionedHDF5File.stage_version`; nothing is committed.
    """
    with vf.stage_version(
        name,
        timestamp=None if timestamp is None else to_utc_datetime(timestamp),
        finish=attach_dimension_scales,
        **kwargs,
    ) as root:
        yield root
        root.attrs.pop(MESSAGE_ATTR, None)
        if message is not None:
            root.attrs[MESSAGE_ATTR] = message


def variable_chunks(name: str, var: xr.Variable, growing: frozenset = frozenset()) -> tuple[int, ...]:
    """Chunk shape of an encoded variable, in points (see the module docstring).

    ``growing``: the dimensions that will grow (the Dataset's
    ``encoding["unlimited_dims"]``, as for netCDF): a small record along one
    of them gets a chunk of several records before it has them
    (:func:`~xarray_vhdf5._backend.chunks.guess_chunks_record`).

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
    itemsize = var.dtype.itemsize if var.dtype.kind != "O" else 8
    return guess_chunks_record(shape, itemsize, growing=bool(var.dims) and var.dims[0] in growing)


def _streamable(var: xr.Variable) -> bool:
    """True for a dask-backed variable the commit can stream (fixed-size dtype, not scalar)."""
    return is_dask_array(var.data) and var.ndim > 0 and var.size > 0 and var.dtype.kind in "biufcSV"


def write_variables(
    group: InMemoryGroup,
    dataset: xr.Dataset,
    *,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allow_unsorted: bool = True,
    max_mem: int | str | ResplitBudget | None = None,
) -> None:
    """Replace the content of staged ``group`` by the CF-encoded ``dataset``.

    Parameters
    ----------
    group : InMemoryGroup
        A group of a staged version; its subgroups are kept.
    dataset : xarray.Dataset
        numpy- or dask-backed; dask variables are staged lazily (streamed at commit).
    progress : bool or None
        Progress bars while streaming dask variables; None: when stderr is a terminal.
    max_bytes : int
        Bytes computed per batch when streaming dask variables (see
        :class:`~xarray_vhdf5.xr._streaming.DaskChunkSource`).
    allow_unsorted : bool
        False: refuse a dimension coordinate that grows (an append) and is
        no longer sorted as ``group``'s dataset was (:func:`check_sorted_index`).
    max_mem : int or str, optional
        Stream dask variables on the resplit engine within this many bytes, each
        block computed once, one at a time
        (:class:`~xarray_vhdf5.xr._resplit_source.ResplitChunkSource`), instead of
        in parallel batches of ``max_bytes``.

    Raises
    ------
    IncompatibleDataError
        A variable name with ``/``, objects other than str/bytes, or a dtype HDF5
        cannot store; with ``allow_unsorted=False``, appended labels out of order.
    """
    if not allow_unsorted:
        check_appended_indexes(group, dataset)
    variables, attrs = xr.conventions.encode_dataset_coordinates(dataset)
    variables, attrs = cf_encode_variables(inherit_stored_encoding(group, variables), attrs)
    for name in list(group):
        if name not in variables and not isinstance(group[name], InMemoryGroup):
            del group[name]
    attrs = kept_attrs(dict(group.attrs), attrs, True)
    for key in list(group.attrs):
        del group.attrs[key]
    for key, value in attrs.items():
        group.attrs[key] = value
    growing = frozenset(dataset.encoding.get("unlimited_dims") or ())
    for name, var in variables.items():
        write_variable(group, str(name), var, progress=progress, max_bytes=max_bytes, growing=growing, max_mem=max_mem)


def write_variable(
    group: InMemoryGroup,
    name: str,
    var: xr.Variable,
    *,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    growing: frozenset = frozenset(),
    max_mem: int | str | ResplitBudget | None = None,
) -> None:
    """Write one CF-encoded variable as dataset ``name`` of staged ``group`` (replacing it).

    Parameters
    ----------
    group : InMemoryGroup
        A group of a staged version.
    name : str
        The variable's name (no ``/``).
    var : xarray.Variable
        Already CF-encoded (:func:`xarray.conventions.cf_encoder`); numpy- or
        dask-backed (dask: staged lazily, streamed at commit).
    progress, max_bytes
        See :func:`write_variables`.
    growing : frozenset of str
        Dimensions that will grow (:func:`variable_chunks`).

    Raises
    ------
    IncompatibleDataError
        A name with ``/``, objects other than str/bytes, or a dtype HDF5 cannot store.
    """
    if "/" in name:
        raise IncompatibleDataError(f"variable name {name!r} contains '/'")
    var_attrs = dict(var.attrs)
    fill = var_attrs.get("_FillValue")
    replaced = group[name] if name in group else None
    if replaced is not None and isinstance(replaced, InMemoryGroup):
        replaced = None
    named = names_dimensions(var.dims, replaced is not None and DIMENSIONS_ATTR in replaced.attrs)
    if replaced is not None:
        stored_dtype = np.dtype(replaced.dtype)
        new_dtype = np.dtype(var.dtype) if var.dtype.kind not in "OU" else np.dtype(object)
        var_attrs = kept_attrs(replaced.attrs, var_attrs, stored_dtype == new_dtype)
    if name in group:
        del group[name]
    filters, defaulted = filters_of(var)
    if _streamable(var):
        values = var.data  # dask: computed chunk by chunk at commit
        ds = stage_lazy_dataset(
            group,
            name,
            values,
            max_bytes=max_bytes,
            max_mem=max_mem,
            progress=progress,
            chunks=variable_chunks(name, var, growing),
            fillvalue=None if fill is None else np.asarray(fill, values.dtype)[()],
            **filters,
        )
    else:
        values = stored_values(name, var)
        ds = group.create_dataset(
            name,
            data=values,
            chunks=variable_chunks(name, var, growing),
            fillvalue=None if (fill is None or values.dtype.kind == "O") else np.asarray(fill, values.dtype)[()],
            **filters,
        )
    # chunks from encoding are user choices; without them, an existing raw_data's win.
    ds.chunks_given = bool(var.encoding.get("chunks") or var.encoding.get("chunksizes"))
    # so are filters: the default yields to those of an existing raw_data
    ds.filters_given = not defaulted
    if values.dtype.kind == "O" and all(isinstance(v, str) for v in np.asarray(values).flat):
        ds._dtype = h5py.string_dtype("utf-8")
    for key, value in var_attrs.items():
        ds.attrs[key] = value
    if named:
        ds.attrs[DIMENSIONS_ATTR] = np.array(list(map(str, var.dims)), dtype=h5py.string_dtype())


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
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    expected_current: str | None = None,
    durable: bool = False,
    allow_empty: bool = False,
    allow_unsorted: bool = False,
    max_mem: int | str | ResplitBudget | None = None,
) -> str:
    """Commit ``dataset`` as a new version of the file at ``path`` (created if missing).

    Parameters
    ----------
    dataset : xarray.Dataset
        numpy- or dask-backed. dask variables are streamed: rechunked to the
        HDF5 chunk grid and computed a batch of at most ``max_bytes`` at a
        time; with a ``dask.distributed`` client, chunks are computed and
        hashed on the workers and only this process writes the file.
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
    progress : bool or None
        Progress bars while streaming dask variables; default: only when
        stderr is a terminal.
    max_bytes : int
        Bytes of dask data computed per batch (default 64 MiB).
    durable : bool
        Make the commit survive a power cut, not only a killed process: the
        journal is ``fsync``'d in order (:mod:`~xarray_vhdf5._versions.journal`).
        Default False.
    expected_current : str, optional
        Refuse to commit unless the file's current version is this one (checked
        under the file's write lock). ``ds.vhdf5.commit(path=...)`` passes the
        version a Dataset was opened from, so that committing it does not undo
        versions committed since.
    allow_empty : bool
        Commit even if the new version would equal its parent (no dataset,
        point or attribute changed: :func:`staged_change`); default False:
        :class:`~xarray_vhdf5.errors.NothingToCommitError` (icechunk's rule).
        ``VersionedHDF5File.stage_version`` itself, like versioned-hdf5,
        commits an empty version.
    allow_unsorted : bool
        Store a dimension coordinate that grows (an append) and is no longer
        sorted as the parent's was; default False:
        :class:`~xarray_vhdf5.errors.IncompatibleDataError`.
    max_mem : int or str, optional
        Stream dask variables on the resplit engine instead (each dask block
        computed once, one at a time, within this many bytes; see
        :mod:`xarray_vhdf5.xr._resplit_source`): for blocks that are files to read.

    Returns
    -------
    str
        The new version's name.

    Raises
    ------
    NothingToCommitError
        Nothing changed from the parent version and ``allow_empty`` is False;
        nothing is written (a ``ValueError``).
    StaleVersionError
        ``expected_current`` is not the file's current version; nothing is written.
    FileBusyError
        Another writer kept the file past the lock timeout
        (:mod:`~xarray_vhdf5._versions.locking`); nothing is written.
    NotVersionedError
        ``path`` is an HDF5 file without version history that holds other data;
        :class:`~xarray_vhdf5.errors.NotHDF5Error` (also an ``OSError``): it is
        not an HDF5 file (e.g. netCDF-3). Nothing is written to it.
    VersionExistsError
        ``version`` exists.
    IncompatibleDataError
        A variable's dtype, chunks or fill value cannot be stored or differ from
        those fixed by its first version; labels appended out of order (without
        ``allow_unsorted``). Nothing is committed.
    """

    def write(target: InMemoryGroup) -> None:
        write_variables(
            target, dataset, progress=progress, max_bytes=max_bytes, allow_unsorted=allow_unsorted, max_mem=max_mem
        )

    return _commit(
        path,
        version,
        group,
        write,
        prev_version=prev_version,
        message=message,
        timestamp=timestamp,
        make_current=make_current,
        expected_current=expected_current,
        durable=durable,
        allow_empty=allow_empty,
    )


def commit_datatree(
    tree: xr.DataTree,
    path: str | os.PathLike,
    version: str | None = None,
    *,
    group: str | None = None,
    prev_version: str | None = None,
    message: str | None = None,
    timestamp: _dt.datetime | np.datetime64 | None = None,
    make_current: bool = True,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> str:
    """Commit a whole ``xr.DataTree`` as one new version of the file at ``path``.

    Each node becomes a group of the version (the tree's root: the version's
    root, or ``group``), holding the node's own variables and attrs
    (``node.to_dataset(inherit=False)``: coordinates inherited from a parent
    are stored once, in the parent's group, as netCDF-4 does). The tree
    replaces everything below ``group``: groups absent from the tree are absent
    from the version. Chunks are deduplicated against every earlier version, as
    :func:`commit_dataset` does.

    Parameters
    ----------
    tree : xarray.DataTree
        numpy- or dask-backed nodes.
    path, version, prev_version, message, timestamp, make_current, progress, max_bytes
        See :func:`commit_dataset`.
    group : str, optional
        Group of the version that receives the tree's root (default the
        version's root); other groups of the previous version are kept.

    Returns
    -------
    str
        The new version's name.

    Raises
    ------
    NotVersionedError, VersionExistsError, IncompatibleDataError
        See :func:`commit_dataset`; nothing is committed.
    """

    def write(target: InMemoryGroup) -> None:
        keep = set()
        for rel, node in tree.subtree_with_keys:
            node_group = target if rel == "." else target.require_group(rel)
            keep.add(rel)
            write_variables(node_group, node.to_dataset(inherit=False), progress=progress, max_bytes=max_bytes)
        stale: list[str] = []
        target.visititems(lambda p, obj: stale.append(p) if isinstance(obj, InMemoryGroup) and p not in keep else None)
        for rel in stale:
            if rel in target:  # a parent may have gone already
                del target[rel]

    return _commit(
        path,
        version,
        group,
        write,
        prev_version=prev_version,
        message=message,
        timestamp=timestamp,
        make_current=make_current,
    )


def _commit(
    path,
    version,
    group,
    write,
    *,
    prev_version,
    message,
    timestamp,
    make_current,
    expected_current=None,
    durable=False,
    allow_empty=True,
) -> str:
    """Stage a version, let ``write(target group)`` fill it, and commit it with its dimension scales.

    The scales are attached inside the commit (``finish=``), before the version is marked
    committed: a failure there commits nothing (``tests/test_commit_dimscales_atomic.py``).
    """
    path = os.fspath(path)
    # Lazily opened Datasets of this file (the data being committed, maybe) hold it
    # read-only, which would keep libhdf5 from opening it for writing; they reopen it.
    close_read_handles(path)
    hint = "commit into a new file (or an HDF5 file holding versions) instead; nothing was written"
    with open_for_writing(path, hint=hint, durable=durable) as f:
        if len(f) and not is_versioned(f):
            raise NotVersionedError(f"{path!r} is an HDF5 file without version history; commit into a new file instead")
        vf = VersionedHDF5File(f)
        if expected_current is not None and vf.current_version != expected_current:
            raise StaleVersionError(
                f"{path!r}: the Dataset was opened from version {expected_current!r}, but the current "
                f"version is now {vf.current_version!r}: committing it would undo the versions since. "
                f"Open the current version and redo the change, or commit(force=True) to commit on top "
                f"of {expected_current!r} anyway (a branch); nothing was written"
            )
        name = version if version is not None else next_version_name(vf)
        with staged_version(
            vf, name, prev_version=prev_version, make_current=make_current, timestamp=timestamp, message=message
        ) as root:
            target = root if group in (None, "", "/") else root.require_group(group.strip("/"))
            write(target)
            if not allow_empty:
                parent = vf.current_version if prev_version is None else vf.resolve(prev_version)
                refuse_empty_commit(root, f, parent, name)
        close_read_handles(path)  # opened during the commit, they would not survive its close
    return name
