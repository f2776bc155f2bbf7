"""Staging from xarray: ``ds.vhdf5.stage()``, ``staged.vhdf5.append()``, ``staged.vhdf5.commit()``.

``stage`` turns a Dataset opened with ``engine="vhdf5"`` into an editable,
lazy Dataset: every variable the format stores chunk by chunk gets a
:class:`~xarray_vhdf5.xr._staged_array.StagedVariableArray` over that
version's raw_data, staged by the versions layer
(:func:`~xarray_vhdf5._versions.edit.stage_committed_dataset`: from the
commit's stored chunk map, else the version's virtual dataset), so
item assignments (``staged["sst"][0, :10] = x``, ``.loc[...] = y``) change
only the chunks they touch, in memory. Dimension coordinates (pandas indexes
in xarray), scalars, strings and variables whose CF decoding changes their
shape keep their ordinary values; they are small and commit through the
writer's dedupe by hash. netCDF ``char`` arrays (decoded to ``|S4``/``<U4``)
are held as :class:`~xarray_vhdf5.xr._duck.CharArrayValues`, whose
dtype widens for a longer string where numpy would truncate it.

``commit`` writes a new version whose parent is the staged-from version:
staged variables hand their :class:`~xarray_vhdf5._staging.StagedChangesArray`
to the new version (``InMemoryDataset.replace_array``), so only changed chunks
are hashed and written; every other variable (added, replaced, rebuilt by
``xr.concat`` or arithmetic) goes through :func:`~xarray_vhdf5.xr._writer.write_variable`,
which dedupes by chunk hash. Afterwards the staged Dataset is rebased on the
new version (its arrays have no changes and the new version as parent), so
edit-commit loops need not reopen the file.

``commit(rebase=True)``, when another version was committed since ``stage()``,
merges the staged changes with the changes committed since and commits onto
the file's current version (``stage_version(..., rebase=True)``,
:mod:`~xarray_vhdf5._versions.rebase`; the rules are
:mod:`~xarray_vhdf5._versions.merge`'s): chunks only one side changed are
mapped, chunks both changed are merged point by point, and points both changed
to different values raise :class:`~xarray_vhdf5.errors.ConflictError` with
nothing written. The merge compares stored (CF-encoded) values. The staged
Dataset is then staged again from the new version (its variables replaced in
place by those of a fresh stage, which shows the other writer's changes too;
times decoded as when staged, other CF options xarray's defaults).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import h5py
import numpy as np
import xarray as xr
from h5py import h5o

from .._backend.h5objects import object_info_by_name
from .._backend.hashtable import hash_table_id, table_state
from .._backend.names import DIMENSIONS_ATTR, is_netcdf_dimension_only, names_dimensions
from .._versions.edit import StagedDataset, stage_committed_dataset
from .._versions.file import VersionedHDF5File
from .._versions.mutation import open_for_writing
from .._versions.refs import branch_tip
from .._versions.registry import VersionRegistry
from .._wrappers.chunked import CommittedChunks
from .._wrappers.group import InMemoryGroup
from ..errors import CorruptFileError, IncompatibleDataError, StaleVersionError, UnsupportedError
from . import _reading
from ._cfcodec import CF_ATTRS, CFCodec
from ._commit_checks import check_sorted_index, refuse_empty_commit
from ._duck import CharArrayValues
from ._encoding import cf_encode_variables, inherit_stored_encoding, kept_attrs, prepare_fill_encoding
from ._engine import BRANCH_KEY
from ._staged_array import StagedVariableArray, StageOrigin, same_file
from ._stagefile import RawRows, StageFile
from ._stored import STORED_KEY, StoredValues, encode_appended
from ._streaming import DEFAULT_MAX_BYTES
from ._writer import next_version_name, staged_version, write_variable

__all__ = ["append_staged", "check_appendable", "commit_staged", "is_staged", "stage_dataset"]

#: ``Dataset.encoding`` key marking a staged Dataset; its value is the file's current version at stage().
HEAD_KEY = "vhdf5_staged_head"


def _open_handle(path: str) -> StageFile:
    handle = StageFile(path)
    # registered with the engine's handles, so a commit closes it before opening the file for writing
    _reading.register_read_handle(path, handle)
    return handle


def stage_dataset(ds: xr.Dataset) -> xr.Dataset:
    """The editable, lazy Dataset of ``ds`` (see the module docstring).

    Parameters
    ----------
    ds : xarray.Dataset
        Opened with ``xr.open_dataset(path, engine="vhdf5", ...)`` (its
        ``encoding`` names the file, version and group).

    Returns
    -------
    xarray.Dataset
        Same variables, attrs and encodings as ``ds``; its ``encoding`` also
        holds the file's current version (:data:`HEAD_KEY`).

    Raises
    ------
    ValueError
        ``ds`` was not opened with ``engine="vhdf5"`` from a path.
    VersionNotFoundError
        Its version was deleted since.
    """
    source, version = ds.encoding.get("source"), ds.encoding.get("vhdf5_version")
    if source is None or version is None:
        raise ValueError(
            "ds.vhdf5.stage() needs a Dataset opened with xr.open_dataset(path, engine='vhdf5'); "
            f"got encoding source={source!r}, vhdf5_version={version!r}"
        )
    source = os.path.realpath(source)
    group = (ds.encoding.get("vhdf5_group") or "/").strip("/")
    handle = _open_handle(source)
    with handle.reading():  # no commit of another process half written while staging reads
        return _stage_locked(ds, handle, source, version, group)


def _stage_locked(ds: xr.Dataset, handle: StageFile, source: str, version, group: str) -> xr.Dataset:
    f = handle.acquire()
    registry = VersionRegistry(f)
    # The version the data is: a commit must land on it while it is still current (a
    # Dataset opened from an older version, or before another commit, would undo the
    # versions since; force=True branches, rebase=True merges).
    head = registry.resolve(version)
    root = registry.group[head]
    grp = root[group] if group else root
    variables = {}
    stored: dict[str, StoredValues] = {}
    for name, var in ds.variables.items():
        variables[name] = var
        key = str(name)
        if key not in grp or object_info_by_name(grp.id, key.encode("utf-8", "surrogateescape"))[1] != h5o.TYPE_DATASET:
            continue
        path = f"{group}/{key}" if group else key
        if name in ds.indexes:
            if grp[key].shape == var.shape:  # not a char array (one more dimension)
                record = StoredValues.of(var, version, path)
                if record is not None:
                    stored[key] = record
            continue
        # From the commit's stored chunk map when there is one (versions.edit).
        committed = stage_committed_dataset(f, head, path)
        prepared = prepare_fill_encoding({name: var})[0][name]  # missing_value without a matching _FillValue
        codec = None if committed is None else CFCodec.for_variable(prepared, committed, _cf_attrs(committed.attrs))
        if committed is None or codec is None:
            if _is_char_array(var, committed if committed is not None else grp[key]):
                # in memory, widening rather than truncating
                variables[name] = xr.Variable(var.dims, CharArrayValues(var.values, str(name)), var.attrs, var.encoding)
            continue
        data = StagedVariableArray(
            committed.array,
            codec,
            StageOrigin(source, version, head, path),
            handle,
            committed.raw_path,
            committed.table_state,
        )
        variables[name] = xr.Variable(var.dims, data, var.attrs, var.encoding)
        stored[key] = StoredValues.metadata_of(var, version, path)
    staged = xr.Dataset(variables, attrs=ds.attrs).set_coords([n for n in ds.coords if n in variables])
    staged.encoding = {**ds.encoding, "source": source, HEAD_KEY: head, STORED_KEY: stored}
    staged.set_close(handle.close)
    return staged


#: The stored attributes :meth:`CFCodec.for_variable` looks at.
_CODEC_ATTRS = (*CF_ATTRS, "_Encoding")


def _cf_attrs(attrs) -> dict:
    """The CF attributes among a version dataset's ``attrs`` (those :class:`CFCodec` looks at), others unread.

    Looked up by name: iterating a virtual dataset's attributes through h5py
    copies its creation property list, every mapping of it: a cost that grows
    with every daily version.
    """
    return {key: attrs[key] for key in _CODEC_ATTRS if key in attrs}


def _is_char_array(var: xr.Variable, dset: h5py.Dataset | StagedDataset) -> bool:
    """True for fixed-width strings decoded from a netCDF ``char`` array (``S1``, one more dimension)."""
    return var.dtype.kind in "SU" and dset.dtype == np.dtype("S1") and dset.ndim == var.ndim + 1


def _restage(staged: xr.Dataset, version: str) -> None:
    """Replace, in place, the variables, attrs and encoding of ``staged`` by a fresh stage of ``version``.

    After a rebased commit the new version holds the other writer's changes
    too, which the staged arrays, in-memory variables and attrs do not: it is
    opened again (times decoded as ``staged`` was, other CF options xarray's
    defaults) and staged, and its content moved into ``staged`` (public
    Dataset mutations: ``del``, ``update``), so the caller's object shows the
    committed version. Arrays taken from ``staged`` before keep their old
    content.
    """
    enc = staged.encoding
    group = (enc.get("vhdf5_group") or "/").strip("/")
    handles = {
        id(v.data.handle): v.data.handle for v in staged.variables.values() if isinstance(v.data, StagedVariableArray)
    }
    opened = xr.open_dataset(
        enc["source"],
        engine="vhdf5",
        version=version,
        group=group or None,
        decode_times=enc.get("vhdf5_decode_times", True),
    )
    fresh = stage_dataset(opened)
    for v in fresh.variables.values():
        if isinstance(v.data, StagedVariableArray):
            handles[id(v.data.handle)] = v.data.handle
    for name in list(staged.variables):
        del staged[name]
    staged.update(fresh)
    staged.attrs = dict(fresh.attrs)
    staged.encoding = dict(fresh.encoding)
    staged.set_close(_closer(list(handles.values()), opened))


def _closer(handles: list[StageFile], opened: xr.Dataset):
    def close() -> None:
        for handle in handles:
            handle.close()
        opened.close()

    return close


def is_staged(ds: xr.Dataset) -> bool:
    """True for a Dataset returned by :func:`stage_dataset` (or derived from one keeping its encoding)."""
    return HEAD_KEY in ds.encoding or any(isinstance(v.data, StagedVariableArray) for v in ds.variables.values())


def append_staged(staged: xr.Dataset, other: xr.Dataset, dim: str, *, allow_unsorted: bool = False) -> xr.Dataset:
    """``staged`` grown along ``dim`` by ``other`` (a new Dataset; ``staged`` is unchanged).

    Every variable of ``staged`` with dimension ``dim`` grows by ``other``'s
    values of the same name: staged variables are resized (a copy-on-write
    copy of their :class:`~xarray_vhdf5._staging.StagedChangesArray`; its last
    chunk along ``dim`` is read if partly filled) and the new part assigned,
    so time and memory are proportional to the appended data, not to
    ``staged``. Other variables along ``dim`` (the coordinate itself, small
    in-memory ones) are concatenated in memory. Variables without ``dim``
    are kept.

    Parameters
    ----------
    staged : xarray.Dataset
        From ``ds.vhdf5.stage()``.
    other : xarray.Dataset
        Holds every variable of ``staged`` that has ``dim``, with the same
        other dimensions and sizes, and no data variable ``staged`` lacks.
        Its coordinates are aligned as ``xr.concat(..., join="exact")``
        aligns them: each other dimension indexed in both must have the
        same labels in the same order, and the labels it adds along ``dim``
        must be new.
    dim : str
        The dimension to grow (need not be the first axis).
    allow_unsorted : bool
        Accept labels along ``dim`` that leave its index unsorted (going
        backwards, or past the other end of a decreasing index). Default
        False: refused, as a non-monotonic index makes ``sel`` slices and
        ``resample`` fail or mislead.

    Returns
    -------
    xarray.Dataset
        The grown staged Dataset (same encoding).

    Raises
    ------
    IncompatibleDataError
        ``dim`` is not a dimension of ``staged``; a variable along ``dim`` is
        missing from ``other``, or its other dimensions or sizes differ;
        ``other`` has a data variable ``staged`` lacks (it would be dropped);
        an indexed coordinate of another dimension differs (values or order:
        the appended points would be stored under ``staged``'s labels); a label
        along ``dim`` is already in ``staged`` (an ingest run twice); without
        ``allow_unsorted``, the labels along ``dim`` were sorted (increasing or
        decreasing) and would no longer be. Nothing is staged then.
    """
    if dim not in staged.dims:
        raise IncompatibleDataError(
            f"append(dim={dim!r}): not a dimension of the Dataset; its dims: {list(staged.dims)}"
        )
    dim_indexes = {d: staged.indexes[d] for d in staged.dims if d in staged.indexes}
    check_appendable(staged.variables, dim_indexes, other, dim)
    if not allow_unsorted and dim in staged.indexes and dim in other.indexes:
        before = staged.indexes[dim]
        check_sorted_index(dim, before, before.append(other.indexes[dim]), what=f"append(dim={dim!r})")
    n_new = other.sizes.get(dim, 0) if dim in other.dims else 0
    variables = {}
    for name, var in staged.variables.items():
        if dim not in var.dims:
            variables[name] = var
            continue
        if name not in other.variables:
            raise IncompatibleDataError(
                f"append(dim={dim!r}): {name!r} has dimension {dim!r} but is missing from the appended Dataset"
            )
        new = other.variables[name]
        if set(new.dims) != set(var.dims) or any(new.sizes[d] != var.sizes[d] for d in var.dims if d != dim):
            raise IncompatibleDataError(
                f"append(dim={dim!r}): {name!r} has dims {dict(var.sizes)} "
                f"but the appended values have {dict(new.sizes)}"
            )
        new = new.transpose(*var.dims)
        data = var.data
        if isinstance(data, StagedVariableArray):
            grown = copy.deepcopy(data)
            axis = var.dims.index(dim)
            old = var.shape[axis]
            shape = list(var.shape)
            shape[axis] = old + n_new
            grown.resize(tuple(shape))
            key = tuple(slice(old, None) if i == axis else slice(None) for i in range(var.ndim))
            grown[key] = np.asarray(new.values)
            variables[name] = xr.Variable(var.dims, grown, var.attrs, var.encoding)
        else:
            both = xr.Variable.concat([var.to_base_variable(), new.to_base_variable()], dim=dim)
            variables[name] = xr.Variable(var.dims, both.values, var.attrs, var.encoding)
    out = xr.Dataset(variables, attrs=staged.attrs).set_coords([n for n in staged.coords if n in variables])
    out.encoding = dict(staged.encoding)
    return out


def check_appendable(names, indexes, other: xr.Dataset, dim: str) -> None:
    """Refuse an ``other`` whose points would be stored under the wrong labels, or dropped.

    Parameters
    ----------
    names : container of str
        The variables of the Dataset appended to.
    indexes : mapping of str to pandas.Index
        Its dimension coordinates' indexes, by dimension (at least those
        ``other`` indexes too).
    other : xarray.Dataset
        The Dataset appended.
    dim : str
        The dimension grown.

    Raises
    ------
    IncompatibleDataError
        As :func:`append_staged` describes.
    """
    extra = sorted(str(name) for name in other.data_vars if name not in names)
    if extra:
        raise IncompatibleDataError(
            f"append(dim={dim!r}): the appended Dataset has data variables the staged one lacks: {extra}; "
            "add them to the staged Dataset first (staged[name] = ...) or drop them from the appended one"
        )
    for d in indexes:
        if d == dim or d not in other.indexes:
            continue
        have, got = indexes[d], other.indexes[d]
        if not have.equals(got):
            where = next((i for i, (a, b) in enumerate(zip(have, got)) if a != b), min(len(have), len(got)))
            raise IncompatibleDataError(
                f"append(dim={dim!r}): coordinate {d!r} differs from the staged one (as xr.concat(join='exact') "
                f"would refuse): {len(got)} labels against {len(have)}, first difference at position {where} "
                f"({_label(got, where)} against {_label(have, where)}); its points would be stored under the "
                f"staged labels. Align it first, e.g. other.reindex({d}=staged[{d!r}]) or other.sortby({d!r})"
            )
    if dim in indexes and dim in other.indexes:
        again = _labels_again(indexes[dim], other.indexes[dim])
        if len(again):
            raise IncompatibleDataError(
                f"append(dim={dim!r}): {len(again)} of the appended {dim!r} labels are already in the staged "
                f"Dataset (first: {again[0]!r}); appending would store them twice. Drop them first, e.g. "
                f"other.drop_sel({dim}=staged.indexes[{dim!r}].intersection(other.indexes[{dim!r}]))"
            )


def _labels_again(have, new):
    """The labels of index ``new`` already in index ``have`` (a pandas Index).

    Past the end of an increasing ``have`` (a daily append): none, known
    from two comparisons; else :meth:`pandas.Index.intersection` (which
    hashes all of ``have``: time growing with the axis).
    """
    try:
        if len(have) and len(new) and have.is_monotonic_increasing and new.min() > have[-1]:
            return new[:0]
    except TypeError:  # labels that do not compare
        pass
    return new.intersection(have)


def _label(index, i: int) -> str:
    return repr(index[i]) if i < len(index) else "nothing"


def _encoded_attrs(name: str, var: xr.Variable) -> tuple[dict, np.dtype] | None:
    """CF-encoded attrs and stored dtype of ``var``, from a one-point stand-in (no data read)."""
    placeholder = np.zeros((1,) * var.ndim, dtype=var.dtype)
    stand_in = xr.Variable(var.dims, placeholder, var.attrs, var.encoding)
    try:
        encoded, _ = cf_encode_variables({name: stand_in}, {})
    except (ValueError, TypeError, OverflowError):
        return None
    enc = encoded[name]
    return dict(enc.attrs), enc.dtype


def _write_staged(
    group: InMemoryGroup,
    name: str,
    var: xr.Variable,
    arr: StagedVariableArray,
    f: h5py.File,
    committed: set,
    record: StoredValues | None = None,
) -> bool:
    """Hand ``arr``'s staged changes to ``group[name]``; False if it must be rewritten instead.

    ``name`` is added to ``committed`` when the dataset gets a new mapping
    (changes or a new shape); otherwise the commit carries it unchanged.
    Its attributes are left as stored when ``var``'s dims, attrs and encoding
    are those of ``record`` (:meth:`StoredValues.same_metadata`: unchanged
    since staged or last committed); else set from ``var``'s.
    """
    target = group[name] if name in group else None
    if target is None or not hasattr(type(target), "staged_array"):
        return False
    encoded = _encoded_attrs(name, var)
    prepared = prepare_fill_encoding({name: var})[0][name]
    if encoded is None or encoded[1] != arr.codec.stored_dtype or not arr.codec.same_encoding(prepared):
        return False
    if arr.has_changes or tuple(arr.shape) != tuple(target.shape):
        arr.check_base(f)  # raises StaleVersionError: its chunk rows moved since staging
        target.replace_array(arr.for_commit(f[arr.raw_path]), arr.base_table_state)  # checked again by the commit
        committed.add(name)
    if record is not None and record.same_metadata(var, arr.origin.version, arr.origin.path):
        return True  # stored as they are: not read (a virtual dataset's attributes cost a copy of its mappings)
    attrs = kept_attrs(target.attrs, encoded[0], True)  # unchanged ones stored as they were
    named = names_dimensions(var.dims, DIMENSIONS_ATTR in target.attrs)
    for key in list(target.attrs):
        if key not in attrs:
            del target.attrs[key]
    for key, value in attrs.items():
        target.attrs[key] = value
    if named:
        target.attrs[DIMENSIONS_ATTR] = np.array([str(d) for d in var.dims], dtype=h5py.string_dtype())
    return True


def commit_staged(
    staged: xr.Dataset,
    version: str | None = None,
    *,
    message: str | None = None,
    timestamp=None,
    force: bool = False,
    rebase: bool = False,
    make_current: bool = True,
    progress: bool | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    allow_empty: bool = False,
) -> str:
    """Commit a staged Dataset as a new version of the file it was staged from.

    Parameters
    ----------
    staged : xarray.Dataset
        From :func:`stage_dataset` (or derived from it, e.g. by ``append``,
        ``copy``, ``assign``).
    version : str, optional
        The new version's name; default :func:`~xarray_vhdf5.xr._writer.next_version_name`
        (``r<N>``, N one more than the number of versions, skipping names in use).
    message : str, optional
        Commit message (the version group's ``_vhdf5_message`` attribute).
    timestamp : datetime or numpy.datetime64, optional
        The version's timestamp (UTC), default now.
    force : bool
        Commit even if another version was committed since ``stage()``
        (the parent stays the staged-from version; the result is a branch).
    rebase : bool
        If another version was committed since ``stage()``, merge the staged
        changes with the changes from the staged-from version to the file's
        current version and commit onto the current version, its parent (see
        the module docstring; rules in :mod:`~xarray_vhdf5._versions.merge`).
        The merge runs under the file's write lock. Not with ``force``.
    make_current : bool
        Make the new version current (default True).
    progress, max_bytes
        For dask-backed variables, see :func:`~xarray_vhdf5.xr._writer.commit_dataset`.
    allow_empty : bool
        Commit even if nothing changed since the staged-from version
        (:func:`~xarray_vhdf5.xr._commit_checks.staged_change`). Default False:
        :class:`~xarray_vhdf5.errors.NothingToCommitError`.

    Returns
    -------
    str
        The new version's name. ``staged`` is rebased on it: its staged
        variables have no changes left and the new version as parent (after a
        merge, ``staged`` is staged again from the new version, in place).

    Raises
    ------
    ValueError
        ``staged`` does not come from :func:`stage_dataset`; ``force`` and
        ``rebase`` both given.
    NothingToCommitError
        Nothing changed and ``allow_empty`` is False; nothing is written and
        ``staged`` is unchanged.
    StaleVersionError
        The file's current version is no longer the one it was at ``stage()``
        and neither ``force`` nor ``rebase`` is given; nothing is written.
    ConflictError
        ``rebase=True`` and both sides changed the same points (or attributes)
        to different values: ``points`` maps each dataset path to the
        conflicting points' indices (stored order of axes); nothing is
        written and ``staged`` is unchanged.
    VersionExistsError, IncompatibleDataError
        As :func:`~xarray_vhdf5.xr._writer.commit_dataset`; nothing is committed.
    """
    source, parent = staged.encoding.get("source"), staged.encoding.get("vhdf5_version")
    head = staged.encoding.get(HEAD_KEY)
    if source is None or parent is None or head is None:
        raise ValueError(
            "commit() without path= needs a Dataset from ds.vhdf5.stage() (its encoding names the file "
            f"and the staged-from version); got source={source!r}, vhdf5_version={parent!r}"
        )
    name, merged, plans, make_current = commit_staged_groups(
        [staged],
        source=source,
        parent=parent,
        head=head,
        branch=staged.encoding.get(BRANCH_KEY),
        what="Dataset",
        version=version,
        message=message,
        timestamp=timestamp,
        force=force,
        rebase=rebase,
        make_current=make_current,
        progress=progress,
        max_bytes=max_bytes,
        allow_empty=allow_empty,
    )
    if merged:
        _restage(staged, name)
    else:
        _rebase(staged, plans[0], name, make_current)
    return name


def commit_staged_groups(
    groups: list[xr.Dataset],
    *,
    source: str,
    parent: str,
    head: str,
    branch: str | None,
    what: str,
    version: str | None,
    message: str | None,
    timestamp,
    force: bool,
    rebase: bool,
    make_current: bool,
    progress: bool | None,
    max_bytes: int,
    allow_empty: bool,
) -> tuple[str, bool, list, bool]:
    """Commit staged groups of one file as one new version: the body of :func:`commit_staged` and of
    :func:`~xarray_vhdf5.xr._datatree.commit_staged_tree`.

    Parameters
    ----------
    groups : list of xarray.Dataset
        Staged Datasets of ``source``'s version ``parent``, each naming its group
        (``encoding["vhdf5_group"]``).
    source, parent, head, branch : str
        The file, the staged-from version, the current version at ``stage()``, and the
        branch staged from (None: none).
    what : str
        ``"Dataset"`` or ``"tree"``, for messages.
    version, message, timestamp, force, rebase, make_current, progress, max_bytes, allow_empty
        As :func:`commit_staged`.

    Returns
    -------
    (str, bool, list, bool)
        The new version's name; whether a rebase merged other changes in (the
        groups must then be staged again); each group's rebase plans
        (:func:`_rebase_plans`, empty after a merge); whether the new version
        became current.

    Raises
    ------
    ValueError
        ``force`` and ``rebase`` both given.
    UnsupportedError
        ``rebase`` for groups staged from a branch.
    StaleVersionError, ConflictError, NothingToCommitError, VersionExistsError, IncompatibleDataError
        As :func:`commit_staged`; nothing is written.
    """
    if force and rebase:
        raise ValueError("commit(force=True, rebase=True): choose one (force branches, rebase merges)")
    encoded = [xr.conventions.encode_dataset_coordinates(ds) for ds in groups]
    rebased: list[list[tuple[StagedVariableArray, str, bool]]] = [[] for _ in groups]
    _reading.close_read_handles(source)
    with open_for_writing(source) as f:
        vf = VersionedHDF5File(f)
        if branch is not None:  # staged from a branch: commits on it (versions.refs)
            if rebase:
                raise UnsupportedError(
                    f"commit(rebase=True) merges onto the current version; this {what} "
                    f"was staged from branch {branch!r}: merge the branches instead"
                )
            head, make_current = parent, False
            current = branch_tip(f, branch)
            where = "the branch now points to"
            options = (
                f"Stage again from branch {branch!r}, or commit(force=True) to commit on top of {parent!r} "
                "without moving the branch"
            )
        else:
            current = vf.current_version
            where = "the current version is now"
            options = (
                f"Stage again from {current!r}, commit(rebase=True) to merge onto it, or commit(force=True) "
                f"to commit on top of {parent!r} anyway (a branch)"
            )
        moved = current != head
        if moved and not (force or rebase):
            of_branch = f" of branch {branch!r}" if branch is not None else ""
            raise StaleVersionError(
                f"{source!r}: the {what} was staged from version {parent!r}{of_branch}, but {where} "
                f"{current!r}: committing would undo the versions since. {options}"
            )
        name = version if version is not None else next_version_name(vf)
        for attempt in range(2):  # once more after a torn hash table was written again (file._repair_hash_table)
            rebased = [[] for _ in groups]
            try:
                with staged_version(
                    vf,
                    name,
                    prev_version=parent,
                    make_current=make_current,
                    timestamp=timestamp,
                    message=message,
                    rebase=rebase and moved,
                    branch=branch if branch is not None and not moved else None,
                ) as root:
                    for ds, (variables, attrs), into in zip(groups, encoded, rebased, strict=True):
                        group = (ds.encoding.get("vhdf5_group") or "/").strip("/")
                        target = root.require_group(group) if group else root
                        _fill_group(target, group, ds, variables, attrs, f, into, progress, max_bytes)
                    if not allow_empty:
                        refuse_empty_commit(root, f, parent, name)
            except CorruptFileError as exc:
                if attempt or not exc.repaired:
                    raise
                continue
            break
        merged = vf.last_rebase is not None
        plans = [] if merged else [_rebase_plans(f, vf.last_commit, into) for into in rebased]
    _reading.close_read_handles(source)
    return name, merged, plans, make_current


def _fill_group(target, group, staged, variables, attrs, f, rebased, progress, max_bytes) -> None:
    rest: dict[Any, xr.Variable] = {}
    stored = staged.encoding.get(STORED_KEY) or {}
    parent = staged.encoding["vhdf5_version"]
    committed: set[str] = set()
    for key in list(target):
        if key in variables:
            continue  # not opened: a dataset never opened is carried as it is (versions.commit)
        item = target[key]
        if isinstance(item, InMemoryGroup):
            continue
        # netCDF-4 phony scales are kept (carried unchanged): attach_dimension_scales reuses
        # those of the right length and deletes the others, rather than recreating them all
        if not is_netcdf_dimension_only(item):
            del target[key]
    old_attrs = dict(target.attrs)
    for key in list(target.attrs):
        del target.attrs[key]
    for var_name, var in variables.items():
        name = str(var_name)
        if "/" in name:
            raise IncompatibleDataError(f"variable name {name!r} contains '/'")
        arr = var.data
        path = f"{group}/{name}" if group else name
        if (
            isinstance(arr, StagedVariableArray)
            and same_file(arr.origin.source, staged.encoding["source"])
            and arr.origin.version == staged.encoding["vhdf5_version"]
            and arr.origin.path == path
            and _write_staged(target, name, var, arr, f, committed, stored.get(name))
        ):
            rebased.append((arr, path, name in committed))
        elif not _write_stored(target, name, var, stored.get(name), parent, path):
            rest[var_name] = var
    encoded, enc_attrs = cf_encode_variables(inherit_stored_encoding(target, rest), attrs)
    for key, value in kept_attrs(old_attrs, enc_attrs, True).items():
        target.attrs[key] = value
    for var_name, var in encoded.items():
        write_variable(target, str(var_name), var, progress=progress, max_bytes=max_bytes)


def _write_stored(
    target: InMemoryGroup,
    name: str,
    var: xr.Variable,
    record: StoredValues | None,
    parent: str,
    path: str,
) -> bool:
    """Commit in-memory ``var`` through the parent's dataset it was read from; False: rewrite it instead.

    Unchanged since ``record`` (:mod:`~xarray_vhdf5.xr._stored`): the dataset
    is carried, untouched. Grown along its dimension: the new points alone are
    encoded and written into it (its last chunk and new ones).
    """
    if record is None or name not in target:
        return False
    kept = record.points_kept(var, parent, path)
    if kept is None:
        return False
    if var.shape[0] == kept:
        return True
    dataset = target[name]
    if not hasattr(type(dataset), "staged_array") or dataset.ndim != 1 or dataset.shape != (kept,):
        return False
    values = encode_appended(target, name, var, kept)
    if values is None:
        return False
    dataset.resize((var.shape[0],))
    dataset[kept:] = values
    return True


def _stored_records(staged: xr.Dataset, version: str) -> dict[str, StoredValues]:
    """Records of ``staged`` as just committed as ``version`` (see :mod:`.stored`).

    In-memory index coordinates with their values; staged variables with
    their dims, attrs and encoding only.
    """
    group = (staged.encoding.get("vhdf5_group") or "/").strip("/")
    records = {}
    for name, var in staged.variables.items():
        path = f"{group}/{name}" if group else str(name)
        if isinstance(var.data, StagedVariableArray):
            records[str(name)] = StoredValues.metadata_of(var, version, path)
        elif name in staged.indexes and (record := StoredValues.of(var, version, path)) is not None:
            records[str(name)] = record
    return records


def _rebase_plans(f: h5py.File, report, rebased) -> list:
    """How each committed staged array maps the new version, from the commit's own report.

    For ``(array, path, committed)`` in ``rebased``: an array the commit
    carried unchanged keeps its chunk map (same raw_data rows); a committed
    one gets the map the commit wrote (:func:`~xarray_vhdf5._backend.chunkmap_cache.chunk_map_arrays`
    of the report's chunk rows, exactly what its virtual dataset holds), so
    the new version's mapping is not read back from the file, whose cost
    grows with the number of chunks.

    Returns
    -------
    list of (StagedVariableArray, path, (CommittedChunks, raw_data shape) or None)
        None: keep the array's map. The raw_data shape and its hash table's
        state are read while the file is still open for writing (the new base
        slab is a :class:`~xarray_vhdf5.xr._stagefile.RawRows` of that
        length, read through the stage's handle once it reopens, which checks
        the state again).
    """
    plans: list[tuple[StagedVariableArray, str, tuple | None]] = []
    for arr, path, committed in rebased:
        if not committed:
            plans.append((arr, path, None))
            continue
        staged = arr.staged
        raw = f[arr.raw_path]
        chunk_map = CommittedChunks.from_rows(
            staged.shape, staged.chunk_size, report.datasets[path].chunk_rows, table_state(hash_table_id(raw))
        )
        plans.append((arr, path, (chunk_map, tuple(raw.shape))))
    return plans


def _rebase(staged: xr.Dataset, plans, name: str, make_current: bool) -> None:
    """Point ``staged`` and its committed staged arrays at the new version (see :func:`_rebase_plans`)."""
    for arr, path, plan in plans:
        head = name if make_current else staged.encoding[HEAD_KEY]
        origin = StageOrigin(arr.origin.source, name, head, path)
        if plan is None:
            arr.rebase(arr.staged, origin, arr.base_table_state)
            continue
        chunk_map, raw_shape = plan
        old = arr.staged
        base = RawRows(arr.handle, arr.raw_path, raw_shape, old.dtype, chunk_map.table_state)
        arr.rebase(chunk_map.over(base, old.fill_value, old.dtype), origin, chunk_map.table_state)
    staged.encoding["vhdf5_version"] = name
    staged.encoding[STORED_KEY] = _stored_records(staged, name)
    if make_current:
        staged.encoding[HEAD_KEY] = name
