"""The daily append in one call: ``today.vhdf5.commit(version, path=, append_dim=)`` without staging.

The general path of ``commit(path=, append_dim=)`` opens the file's current
version as a lazy Dataset (``xr.open_dataset``: byte-range manifests of every
variable, under the reader's lock), stages it (``ds.vhdf5.stage()``), grows it
(:func:`~xarray_vhdf5.xr._stage.append_staged`) and commits it
(:func:`~xarray_vhdf5.xr._stage.commit_staged`): three opens of the file and
work for every variable, where a daily append changes the variables along
one dimension.

:func:`commit_appended` does the same in one open of the file, under the
write lock, with the same checks and the same stored result:

1. a version is staged from the current one
   (:func:`~xarray_vhdf5.xr._writer.staged_version`); every dataset's
   dimension names are read by name (``_ARRAY_DIMENSIONS``, nothing opened),
   the datasets along the dimension are opened as the staged datasets the
   commit grows, and only the dimension coordinates ``today`` indexes are
   read; all of them are CF-decoded as ``xr.open_dataset`` decodes them
   (:func:`xarray.conventions.decode_cf_variables` on stand-ins);
2. ``today`` is checked as :func:`~xarray_vhdf5.xr._stage.append_staged`
   checks (:func:`~xarray_vhdf5.xr._stage.check_appendable`: dimensions and
   sizes, no data variable the file lacks, equal labels of the other indexed
   dimensions, new and sorted labels along the appended one);
3. each variable along the dimension grows by ``today``'s values, encoded as
   the staged path encodes them: a dimension coordinate through
   :func:`~xarray_vhdf5.xr._stored.encode_appended` (as a grown in-memory
   coordinate is committed), any other variable through the
   :class:`~xarray_vhdf5.xr._cfcodec.CFCodec` a staged variable would have
   (values cast by numpy's rules, never silently changed);
4. the netCDF-4 dimension scales are attached inside the commit, as for
   every commit from xarray.

The decoded indexes of step 1 are the only part that grows with the
history (the appended dimension's labels, read and CF-decoded whole). After
a commit, this process remembers them, and the new labels as stored (encoded),
and the next append to the same file and group takes them instead of
reading, when its parent is that version: same name, same ``timestamp`` and
the same object addresses of the coordinates' virtual datasets (any rewrite
of them by this package or versioned-hdf5 makes new ones, and a version
deleted and committed again has another timestamp). It CF-decodes those new
labels where it would decode the whole coordinate (one decode a commit either
way), so the checks compare against the same labels a read would give.

Since the current version is read under the write lock, no other writer can
commit between the read and the commit (the general path's
``StaleVersionError`` window).

Whatever the general path does differently (a variable the codec cannot
encode as stored, a coordinate that would be rewritten, strings, dask arrays,
a file without ``_ARRAY_DIMENSIONS``, any check that refuses) aborts the
staged version (:class:`_General`) and makes :func:`commit_appended` return
None with nothing written; the caller takes the general path, which commits
or raises as documented. ``tests/test_append_fastpath.py`` commits the same
days both ways and compares the files.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading

import h5py
import numpy as np
import xarray as xr
from h5py import h5o

from .._backend.h5attrs import read_attr_of, read_attrs_of
from .._backend.h5objects import object_address_by_name, object_info_by_name
from .._backend.layout import VERSION_DATA, version_path
from .._backend.names import (
    DIMENSIONS_ATTR,
    HIDDEN_VARIABLE_ATTRS,
    NETCDF_DIMENSION_ATTRS,
    NETCDF_NOT_A_VARIABLE,
    visible_attrs,
)
from .._versions.file import VersionedHDF5File
from .._versions.mutation import open_for_writing
from .._versions.sharing import version_timestamp
from ..errors import CorruptFileError, NotHDF5Error
from . import _reading
from ._cfcodec import CFCodec
from ._commit_checks import check_sorted_index
from ._encoding import prepare_fill_encoding
from ._stage import _cf_attrs, check_appendable
from ._stored import encode_appended
from ._streaming import is_dask_array
from ._writer import next_version_name, staged_version

__all__ = ["commit_appended"]

#: Attributes of a stored dataset no Dataset shows (:func:`~xarray_vhdf5._backend.names.visible_attrs`): not read.
_NOT_SHOWN = HIDDEN_VARIABLE_ATTRS | NETCDF_DIMENSION_ATTRS


class _General(Exception):
    """Raised inside the staged version: the general path must commit this append (nothing is written)."""


@dataclasses.dataclass
class _Plan:
    """What the append writes: the variables along the dimension, decoded as the staged path sees them."""

    grown: dict  # name -> (decoded stand-in of the stored dataset (placeholder values), axis of the dimension)
    indexes: dict  # dimension -> pandas.Index of its stored coordinate (those today indexes too)
    appended: dict = dataclasses.field(default_factory=dict)  # grown dimension coordinate -> its new values, stored


@dataclasses.dataclass
class _Remembered:
    """The decoded indexes of the version the last append of this process into a file's group committed."""

    version: str
    stamp: tuple  # _stamp() of the version then
    indexes: dict  # dimension -> pandas.Index of its parent's labels
    appended: dict  # dimension it grew -> the values it appended, as stored (encoded)


#: By ``(device, inode, group path, dimension)``, for the last few files appended to.
_REMEMBERED: collections.OrderedDict[tuple, _Remembered] = collections.OrderedDict()
_REMEMBERED_FILES = 8
_REMEMBERED_LOCK = threading.Lock()  # threads may append to different files at once


def _stamp(grp: h5py.Group, version: str, keys) -> tuple | None:
    """``version``'s ``timestamp`` and the object addresses of the datasets ``keys`` of its group ``grp``.

    What tells the version's coordinates from any others: None when one
    cannot be read.
    """
    try:
        addresses = tuple((key, object_address_by_name(grp.id, key.encode("utf-8", "surrogateescape"))) for key in keys)
        return version_timestamp(grp, version), addresses
    except (KeyError, ValueError, RuntimeError, OSError):
        return None


def _remembered(key: tuple, parent: str, grp: h5py.Group) -> _Remembered | None:
    """What was remembered for ``key`` when ``parent`` (its group ``grp``) is the version it describes."""
    with _REMEMBERED_LOCK:
        found = _REMEMBERED.get(key)
    if found is None or found.version != parent or _stamp(grp, parent, sorted(found.indexes)) != found.stamp:
        return None
    return found


def _remember(key: tuple, grp: h5py.Group, version: str, plan: _Plan) -> None:
    """Remember ``plan``'s indexes and new values for the next append onto ``version`` (``grp``: its group)."""
    stamp = _stamp(grp, version, sorted(plan.indexes))
    with _REMEMBERED_LOCK:
        _REMEMBERED.pop(key, None)
        if stamp is not None and all(d in plan.appended for d in plan.indexes if d in plan.grown):
            _REMEMBERED[key] = _Remembered(version, stamp, plan.indexes, plan.appended)
            while len(_REMEMBERED) > _REMEMBERED_FILES:
                _REMEMBERED.popitem(last=False)


def _dims_of(grp: h5py.Group, bkey: bytes) -> tuple[str, ...] | None:
    """A dataset's dimension names (``_ARRAY_DIMENSIONS``), read by name; None for a netCDF-4 phony scale.

    Raises
    ------
    _General
        A dataset without names (versioned-hdf5's files: the reader invents
        them, :func:`~xarray_vhdf5._backend.names.phony_dims`).
    """
    try:
        dims = read_attr_of(grp.id, bkey, DIMENSIONS_ATTR)
    except KeyError:
        try:
            name = read_attr_of(grp.id, bkey, "NAME")
        except KeyError:
            raise _General(bkey) from None
        if isinstance(name, (bytes, np.bytes_)) and bytes(name).startswith(NETCDF_NOT_A_VARIABLE):
            return None
        raise _General(bkey) from None
    return tuple(d.decode() if isinstance(d, bytes) else str(d) for d in np.atleast_1d(dims))


def _stand_in(dims: tuple, shape: tuple, dtype: np.dtype, attrs: dict, values=None) -> xr.Variable:
    """The variable ``xr.open_dataset`` gives a dataset (before CF decoding); without ``values``, zeros
    broadcast to ``shape`` (no memory, nothing read)."""
    if values is None:
        values = np.broadcast_to(np.zeros((), dtype), shape)
    return xr.Variable(dims, values, attrs, _reading.stored_encoding(np.dtype(dtype), attrs))


def _plan(
    grp: h5py.Group, target, today: xr.Dataset, dim: str, allow_unsorted: bool, known: _Remembered | None = None
) -> _Plan:
    """Check ``today`` against the staged group ``target`` as :func:`~xarray_vhdf5.xr._stage.append_staged` does.

    ``grp`` is the parent version's h5py group of ``target``. Only the
    variables along ``dim`` are opened (the staged datasets the commit
    writes) and only the indexed coordinates read; with ``known`` (what
    the commit of the parent left: :func:`_remembered`) none is read, and
    only the labels that commit appended are decoded.

    Raises
    ------
    _General
        A check would refuse (the general path raises its error), or the
        general path would store a variable otherwise.
    """
    if dim not in today.dims or today.sizes[dim] == 0:
        raise _General(dim)
    dims: dict[str, tuple] = {}
    for key in target.keys():
        bkey = key.encode("utf-8", "surrogateescape")
        if object_info_by_name(grp.id, bkey)[1] == h5o.TYPE_DATASET:
            found = _dims_of(grp, bkey)
            if found is not None:
                dims[key] = found
    wanted = {key for key, d in dims.items() if dim in d}
    indexed = {key for key, d in dims.items() if d == (key,) and (key == dim or key in today.indexes)}
    if any(d in dims and d not in indexed for d in (*today.indexes, dim)):
        raise _General(dim)  # a coordinate of another shape (a char array): compared by the general path
    if known is not None and (set(known.indexes) != indexed or set(known.appended) != wanted & indexed):
        known = None
    stand_ins = {}
    for key in sorted(wanted | indexed):
        if key in wanted:  # opened as the staged dataset the commit writes (its attributes loaded once)
            dataset = target[key]
            attrs = visible_attrs(dataset.attrs)
            if known is not None and key in known.appended:  # the parent's new labels: decoded with it
                values = known.appended[key]
                stand_ins[key] = _stand_in(dims[key], values.shape, values.dtype, attrs, values)
                continue
            values = dataset[()] if key in indexed and known is None else None  # a dimension coordinate: read
            stand_ins[key] = _stand_in(dims[key], tuple(dataset.shape), dataset.dtype, attrs, values)
        elif known is None:  # a dimension coordinate the commit carries: read from the parent version
            stored = grp[key]
            attrs = visible_attrs(read_attrs_of(grp.id, key.encode(), skip=_NOT_SHOWN))
            stand_ins[key] = _stand_in(dims[key], stored.shape, stored.dtype, attrs, stored[()])
    decoded, _attrs, _coords = xr.conventions.decode_cf_variables(stand_ins, {})
    if known is None:
        indexes = {key: decoded[key].to_index() for key in indexed}
    else:
        indexes = {
            key: index.append(decoded[key].to_index()) if key in known.appended else index
            for key, index in known.indexes.items()
        }
    try:
        check_appendable(dims, indexes, today, dim)
        if not allow_unsorted and dim in indexes and dim in today.indexes:
            before = indexes[dim]
            check_sorted_index(dim, before, before.append(today.indexes[dim]), what=f"append(dim={dim!r})")
    except ValueError:  # IncompatibleDataError: raised again, as documented, by the general path
        raise _General(dim) from None
    grown = {}
    for key in wanted:
        var, new = decoded[key], today.variables.get(key)
        if new is None or set(new.dims) != set(var.dims):
            raise _General(key)
        if any(new.sizes[d] != var.sizes[d] for d in var.dims if d != dim):
            raise _General(key)
        if is_dask_array(new.data) or new.dtype.kind in "OSUV" or var.dtype.kind in "OSUV":
            raise _General(key)  # streamed, or strings (widened, char arrays): the general path
        grown[key] = (var, var.dims.index(dim))
    return _Plan(grown, indexes)


def _grow(target, plan: _Plan, today: xr.Dataset) -> None:
    """Resize each dataset of ``plan`` in ``target`` (the staged group) and write ``today``'s points into it.

    Raises
    ------
    _General
        A variable would not be stored as the staged path stores it; nothing
        is committed.
    """
    writes = []
    for name, (var, axis) in plan.grown.items():
        values = today.variables[name].transpose(*var.dims).values
        dataset = target[name]
        if not hasattr(type(dataset), "staged_array"):
            raise _General(name)
        if name in plan.indexes:  # a staged Dataset holds it in memory, committed as grown
            tail = xr.Variable(var.dims, values, var.attrs, var.encoding)
            encoded = encode_appended(target, name, tail, 0)
        else:  # a staged variable: its codec encodes the new points
            prepared = prepare_fill_encoding({name: var})[0][name]
            codec = CFCodec.for_variable(prepared, dataset, _cf_attrs(dataset.attrs))
            encoded = None if codec is None else codec.encode(values, name)
        if encoded is None:
            raise _General(name)
        encoded = np.asarray(encoded)
        if name in plan.indexes:  # the new labels as stored, for the next append (_remember)
            plan.appended[name] = encoded
        writes.append((dataset, axis, encoded))
    for dataset, axis, encoded in writes:
        shape = list(dataset.shape)
        old = shape[axis]
        shape[axis] += encoded.shape[axis]
        dataset.resize(tuple(shape))
        dataset[tuple(slice(old, None) if i == axis else slice(None) for i in range(len(shape)))] = encoded


def commit_appended(
    today: xr.Dataset,
    path: str | os.PathLike,
    dim: str,
    *,
    version: str | None,
    group: str | None,
    message: str | None,
    timestamp,
    make_current: bool,
    allow_unsorted: bool,
) -> str | None:
    """Commit ``today`` appended along ``dim`` to the current version of ``path``, in one open of the file.

    Parameters
    ----------
    today : xarray.Dataset
        The points to append (not staged), as for ``commit(path=, append_dim=)``.
    path : str or os.PathLike
        A versioned HDF5 file with a current version.
    dim : str
        The dimension to grow.
    version, group, message, timestamp, make_current, allow_unsorted
        As :meth:`~xarray_vhdf5.xr._accessor.VHDF5DatasetAccessor.commit`.

    Returns
    -------
    str or None
        The new version's name; None when nothing was written and the caller
        must take the general path (see the module docstring): the file has
        no version yet, a check would refuse, or a variable is not stored as
        this path stores it.

    Raises
    ------
    VersionExistsError
        ``version`` exists (nothing written).
    FileBusyError, CorruptFileError, StaleVersionError
        As :func:`~xarray_vhdf5._versions.mutation.open_for_writing` and
        :meth:`~xarray_vhdf5.VersionedHDF5File.stage_version`.
    ValueOverflowError, ValueTypeError, ValueCastError
        A value does not fit the stored dtype once CF-encoded (as a staged
        assignment raises it: :meth:`~xarray_vhdf5.xr._cfcodec.CFCodec.encode`);
        nothing written.
    """
    if not os.path.exists(path):
        return None
    group_path = (group or "").strip("/")
    _reading.close_read_handles(path)
    try:
        name = _commit_locked(today, path, dim, version, group_path, message, timestamp, make_current, allow_unsorted)
    except NotHDF5Error:
        return None  # the general path says what the file is
    _reading.close_read_handles(path)
    return name


def _commit_locked(today, path, dim, version, group_path, message, timestamp, make_current, allow_unsorted):
    """:func:`commit_appended` under the file's write lock."""
    with open_for_writing(path) as f:
        if VERSION_DATA not in f:
            return None  # not a versioned file: nothing written (VersionedHDF5File would set one up)
        vf = VersionedHDF5File(f)
        parent = vf.current_version
        if parent is None or parent not in vf:
            return None
        root = f[version_path(parent)]
        if group_path and (group_path not in root or not isinstance(root[group_path], h5py.Group)):
            return None
        grp = root[group_path] if group_path else root
        name = version if version is not None else next_version_name(vf)
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, group_path, dim)
        known = _remembered(key, parent, grp)
        for attempt in range(2):  # once more after a torn hash table was written again (as commit_staged)
            try:
                with staged_version(
                    vf, name, prev_version=parent, make_current=make_current, timestamp=timestamp, message=message
                ) as staged_root:
                    target = staged_root[group_path] if group_path else staged_root
                    plan = _plan(grp, target, today, dim, allow_unsorted, known)
                    _grow(target, plan, today)
            except _General:
                return None
            except CorruptFileError as exc:
                if attempt or not exc.repaired:
                    raise
                continue
            break
        committed = f[version_path(name)]
        _remember(key, committed[group_path] if group_path else committed, name, plan)
    return name
