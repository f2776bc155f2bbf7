"""Many versions at once: ``open_versions(path, versions=[...])``, one Dataset stacked along ``version``.

Each variable becomes one lazy array of shape ``(n versions, *padded shape)``
(:class:`StackedBackendArray`). A read of it resolves which stored chunk each
version maps at each chunk position touched, reads and decodes each distinct
stored chunk (a raw_data row) once for all the versions that map it, then
CF-decodes each version's points with that version's own attributes::

    version  chunk (0,)      chunk (1,)      chunk (2,)
    v1       row 0           row 10          unmapped (fill)
    v2       row 0 (shared)  row 30          row 40
    v3       row 0 (shared)  row 30 (shared) row 50      -> 5 chunks read, not 8

Padding, for appends and for variables some versions lack (a version's
points are at the start of each axis, as in that version; the rest of the
padded shape holds the *missing value*):

- floats and complex: NaN; ``datetime64``/``timedelta64``: NaT;
- integers and bools are promoted to ``float64`` (NaN), strings and other
  objects to ``object`` (NaN), as ``xarray.concat`` promotes on missing values,
  but only when some version needs padding: a variable every version holds
  whole keeps its dtype.

Dimension coordinates (indexes) are read when the Dataset is opened: when
every version's labels are a prefix of the longest one's (appends), the
index is that longest one, 1-d; otherwise the dimension has no index and a
2-d coordinate ``version_<dim>`` holds each version's labels (padded).
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from .._backend.layout import version_path as root_path
from .._backend.names import HIDDEN_GROUP_ATTRS, is_netcdf_dimension_only
from .._versions.locking import file_locks
from .._versions.registry import VersionKey
from .._versions.sharing import SharedFile, version_timestamp
from .._versions.timestamps import parse_timestamp
from ..errors import IncompatibleDataError
from ._array import ManifestBackendArray
from ._reading import dataset_members, lazy_variable, open_version_group, opened

__all__ = ["VERSION_DIM", "StackedBackendArray", "open_versions"]

#: The new leading dimension of :func:`open_versions`.
VERSION_DIM = "version"


def missing_value(dtype: np.dtype) -> tuple[np.dtype, Any]:
    """The dtype a padded variable of ``dtype`` takes, and the value of its missing points.

    Returns
    -------
    (numpy.dtype, scalar)
        ``(dtype, NaN)`` for floats and complex, ``(dtype, NaT)`` for
        datetime64/timedelta64, ``(float64, NaN)`` for integers and bools,
        ``(object, NaN)`` for anything else (strings).
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "fc":
        return dtype, np.nan
    if dtype.kind in "mM":
        return dtype, np.array("NaT", dtype)[()]
    if dtype.kind in "iub":
        return np.dtype("f8"), np.nan
    return np.dtype(object), np.nan


class _Member:
    """One version's part of a stacked variable.

    ``raw``: the version's stored (undecoded) lazy variable; ``decoded``: its
    CF-decoded lazy variable (shape, dtype); ``holder``: the
    :class:`ManifestBackendArray` when the stored chunks can be read and shared
    (then decoded here, in memory, with ``raw``'s attributes), else None (read
    through ``decoded``, nothing shared).
    """

    __slots__ = ("decoded", "holder", "identity", "raw", "shape")

    def __init__(self, raw: xr.Variable, decoded: xr.Variable, dtype: np.dtype):
        self.raw, self.decoded, self.shape = raw, decoded, decoded.shape
        array = getattr(raw._data, "array", None)  # the engine's LazilyIndexedArray(BackendArray)
        shareable = (
            isinstance(array, ManifestBackendArray)
            and array.manifest is not None
            and array.manifest.supported
            and raw.shape == decoded.shape
        )
        self.holder = array if shareable else None
        #: decoding leaves the stored points as they are (stored straight into the output)
        self.identity = (
            raw.dtype == decoded.dtype == dtype
            and raw.ndim > 0
            and all(
                k in ("_FillValue", "missing_value") and _nan_fill(raw.attrs[k], raw.dtype)
                for k in _MASK_SCALE_ATTRS
                if k in raw.attrs
            )
        )


def _nan_fill(value, dtype: np.dtype) -> bool:
    """True for a NaN ``_FillValue``/``missing_value`` of a float variable: masking it changes no point."""
    try:
        return dtype.kind in "fc" and bool(np.all(np.isnan(np.asarray(value, dtype=dtype))))
    except (TypeError, ValueError):
        return False


#: Attributes with which CF decoding changes stored values without changing their dtype.
_MASK_SCALE_ATTRS = (
    "_FillValue",
    "missing_value",
    "scale_factor",
    "add_offset",
    "_Unsigned",
    "valid_min",
    "valid_max",
    "valid_range",
    "dtype",
    "_Encoding",
)


class StackedBackendArray(BackendArray):
    """A variable of several versions, ``(n versions, *padded shape)``, reading each stored chunk once.

    Parameters
    ----------
    name : str
        The variable's name (for CF decoding).
    source : SharedFile
        The file, shared by every version's arrays.
    members : list of _Member or None
        Per version, its part (None: the version lacks the variable).
    shape : tuple of int
        ``(len(members), *padded)``, in points.
    dtype : numpy.dtype
        Of the returned (decoded) values.
    fill : scalar or None
        The missing value of padded points (:func:`missing_value`); None when
        every version holds the variable whole (nothing padded).
    decoders : dict
        CF decoding options, as given to :func:`open_versions`.

    Notes
    -----
    ``IndexingSupport.OUTER``: per axis an int, a slice or a 1-d integer array,
    each axis on its own. A read counts, over the versions selected, the uses
    of each stored chunk (raw_data and row) and keeps a decoded chunk only
    until its last use in that read; chunks are read under the file's
    ``MOVE`` lock, after checking that no version's chunks moved since they
    were resolved (else they are resolved again).
    """

    def __init__(
        self, name: str, source: SharedFile, members: list, shape: tuple[int, ...], dtype, fill, decoders: dict
    ):
        self.name, self.source, self.members = name, source, members
        self.shape, self.dtype, self.fill = tuple(shape), np.dtype(dtype), fill
        self.decoders = decoders

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._getitem)

    def _getitem(self, key: tuple) -> np.ndarray:
        axes = _normalize(key, self.shape)
        shape = tuple(idx.size for idx, _ in axes)
        # fill None: no version needs padding, every point is written below
        out = np.empty(shape, self.dtype) if self.fill is None else np.full(shape, self.fill, self.dtype)
        if out.size:
            shared: list[tuple[int, _Member, tuple, tuple]] = []  # (j, member, points per axis, target)
            for j, i in enumerate(axes[0][0].tolist()):
                member = self.members[i]
                if member is None:
                    continue
                inside = [idx < n for (idx, _), n in zip(axes[1:], member.shape)]
                picked = tuple(idx[m] for (idx, _), m in zip(axes[1:], inside))
                if any(p.size == 0 for p in picked):
                    continue
                target = (j, *_outer([np.flatnonzero(m) for m in inside]))
                if member.holder is None:
                    out[target] = np.asarray(member.decoded[picked].values, dtype=self.dtype)
                else:
                    shared.append((j, member, picked, target))
            if shared:
                self._read_shared(shared, out)
        return out.reshape(tuple(idx.size for idx, kept in axes if kept))

    def _read_shared(self, reads: list[tuple[int, _Member, tuple, tuple]], out: np.ndarray) -> None:
        """Fill ``out[target]`` for each read ``(j, member, points per axis, target)``: chunks read once.

        Stored points whose decoding changes nothing (same dtype, no mask or
        scale attribute) are written straight into ``out`` when ``target``
        is a view (slices); others go through a buffer and are decoded.
        """
        holders = [member.holder for _, member, _, _ in reads if member.holder is not None]
        assert len(holders) == len(reads)  # only members with a holder are read here
        dests = [
            out[target] if member.identity and all(isinstance(k, slice) for k in target[1:]) else None
            for _, member, _, target in reads
        ]
        locks = file_locks(self.source.path)
        while True:
            stamps = [getattr(h, "resolved", None) or self.source.resolved for h in holders]
            with locks.reading_bytes():
                if all(self.source.current(locks, s) for s in stamps):
                    raw = _read_chunks_once(
                        [(h.manifest, picked, dest) for h, (_, _, picked, _), dest in zip(holders, reads, dests)]
                    )
                    break
            for h in holders:  # chunks moved (a deletion, modify_metadata): resolve again
                self.source.apply(h, lambda manifest: None)
        for (_, member, _, target), values, dest in zip(reads, raw, dests):
            if dest is None:
                assert values is not None  # without a dest, _read_chunks_once returns the points
                out[target] = self._decode(member, values)

    def _decode(self, member: _Member, values: np.ndarray) -> np.ndarray:
        """CF-decode stored ``values`` of ``member`` with its version's attributes."""
        if member.raw.ndim == 0:
            values = values.reshape(())
        var = xr.Variable(member.raw.dims, values, member.raw.attrs, member.raw.encoding)
        decoded = xr.conventions.decode_cf_variable(
            self.name, var, stack_char_dim=False, **_variable_decoders(self.decoders)
        )
        return np.asarray(decoded.values, dtype=self.dtype)


def _variable_decoders(decoders: dict) -> dict:
    """The options of ``decode_cf_variables`` that ``decode_cf_variable`` also takes."""
    keys = ("concat_characters", "mask_and_scale", "decode_times", "use_cftime", "decode_timedelta")
    return {k: decoders[k] for k in keys if k in decoders}


def _normalize(key: tuple, shape: tuple[int, ...]) -> list[tuple[np.ndarray, bool]]:
    """Per axis the points an outer ``key`` selects (intp, non-negative, output order) and whether it is kept."""
    key = tuple(key) + (slice(None),) * (len(shape) - len(key))
    out = []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            out.append((np.arange(*k.indices(n), dtype=np.intp), True))
        else:
            arr = np.asarray(k, dtype=np.intp)
            out.append((np.where(arr < 0, arr + n, arr).reshape(-1), arr.ndim == 1))
    return out


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """``idx`` (1-d, intp) as the slice that selects the same points when it is a progression of step > 0."""
    if idx.size == 1:
        return slice(int(idx[0]), int(idx[0]) + 1)
    step = int(idx[1] - idx[0])
    if step <= 0 or np.any(np.diff(idx) != step):
        return idx
    return slice(int(idx[0]), int(idx[-1]) + 1, step)


def _outer(indices: Sequence[np.ndarray]) -> tuple:
    """A key selecting the outer product of ``indices`` (one 1-d array per axis): slices when all can be.

    Basic indexing (slices) copies blocks; ``numpy.ix_`` gathers point by point, many times slower.
    """
    slices = tuple(_as_slice(i) for i in indices)
    if all(isinstance(k, slice) for k in slices):
        return slices
    return np.ix_(*indices)


def _axis_groups(idx: np.ndarray, chunk: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """``(chunk number, positions in idx, points within the chunk)`` for each chunk ``idx`` touches."""
    number = idx // chunk
    order = np.argsort(number, kind="stable")
    cuts = np.flatnonzero(np.diff(number[order])) + 1
    return (
        [(int(number[pos[0]]), pos, idx[pos] - int(number[pos[0]]) * chunk) for pos in np.split(order, cuts)]
        if idx.size
        else []
    )


def _read_chunks_once(reads: list) -> list[np.ndarray | None]:
    """Per ``(manifest, points per axis, dest)``, the stored points selected; each stored chunk decoded once.

    A stored chunk is known by its raw_data and first row: versions that map
    the same row hold the same bytes. Reads are served in order; the chunks a
    read needs that are not held yet are decoded together (by threads when
    they are 4 or more and filtered), and a decoded chunk is kept until its
    last use among ``reads``, then dropped: memory holds the chunks still to
    be used and one read's new ones. ``dest`` (an array of the read's shape,
    or None) receives the points; None: a new array is returned.
    """
    plans = []
    uses: Counter = Counter()
    for manifest, picked, dest in reads:
        scalar = manifest.ndim == 1 and len(picked) == 0  # a scalar, stored as one point
        picked = (np.zeros(1, np.intp),) if scalar else picked
        plan = []
        for parts in itertools.product(*[_axis_groups(p, c) for p, c in zip(picked, manifest.chunks)]):
            where = tuple(k for k, _, _ in parts)
            slot = int(manifest.slots[where])
            ident = None if slot < 0 else (manifest.raw_data, int(manifest.rows[slot]))
            uses[ident] += ident is not None
            plan.append((where, ident, _outer([pos for _, pos, _ in parts]), _outer([w for _, _, w in parts])))
        plans.append((manifest, tuple(p.size for p in picked), plan, dest))
    cache: dict = {}
    out = []
    for manifest, shape, plan, dest in plans:
        values = np.empty(shape, manifest.dtype) if dest is None else dest.reshape(shape)
        new = {ident: where for where, ident, _, _ in plan if ident is not None and ident not in cache}
        pool = _pool(len(new)) if manifest.filters else None
        decoded = (
            pool.map(manifest.decoded_chunk, new.values())
            if pool is not None
            else map(manifest.decoded_chunk, new.values())
        )
        cache.update(zip(new, decoded))
        for _where, ident, target, within in plan:
            if ident is None:
                values[target] = manifest.fillvalue
                continue
            values[target] = cache[ident][within]
            uses[ident] -= 1
            if not uses[ident]:
                del cache[ident]
        out.append(values if dest is None else None)
    return out


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads: it makes its own."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_in_child)


def _pool(chunks: int) -> ThreadPoolExecutor | None:
    """Threads decoding ``chunks`` chunks: as many as the machine has cores (at most 8), from 4 chunks on.

    The codecs (zlib through imagecodecs, ...) and ``os.pread`` release the GIL.
    """
    n = min(os.cpu_count() or 1, 8)
    if n <= 1 or chunks < 4:
        return None
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vhdf5-stacked")
        return _POOL


def _open_members(manager: SharedFile, f, version: VersionKey, group: str | None, drop: set, decoders: dict):
    """``(name, timestamp, {var: (raw, decoded)}, coordinate names, attrs)`` of one version's group."""
    name, grp = open_version_group(f, version, group)
    dims_by_size: dict = {}
    raw = {
        key: lazy_variable(manager, name, item, dims_by_size)
        for key, item in dataset_members(manager, name, grp)
        if not is_netcdf_dimension_only(item) and key not in drop
    }
    at_root = grp.name == root_path(name)
    stored_attrs = {k: v for k, v in grp.attrs.items() if not (at_root and k in HIDDEN_GROUP_ATTRS)}
    decoded, attrs, coord_names = xr.conventions.decode_cf_variables(dict(raw), stored_attrs, **decoders)
    members = {k: (raw[k], decoded[k]) for k in decoded}
    stamp = version_timestamp(f, name)
    when = parse_timestamp(stamp).replace(tzinfo=None) if stamp is not None else None
    return name, when, members, set(coord_names) & set(decoded), attrs


def open_versions(
    path: str | os.PathLike,
    versions: Sequence[VersionKey],
    *,
    group: str | None = None,
    chunks: int | str | dict | None = None,
    drop_variables: str | Iterable[str] | None = None,
    mask_and_scale: bool = True,
    decode_times: bool = True,
    concat_characters: bool = True,
    decode_coords: bool = True,
    use_cftime: bool | None = None,
    decode_timedelta: bool | None = None,
    verify: bool = False,
) -> xr.Dataset:
    """Open several versions of one group as one lazy Dataset, stacked along a leading ``version`` dimension.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file.
    versions : sequence of str, int, datetime or numpy.datetime64
        The versions, in the order of the ``version`` dimension; each as
        ``xr.open_dataset(..., engine="vhdf5", version=...)`` takes it (a
        version name, a branch or tag name, a position, ``-n``, a time).
    group : str, optional
        The group to open in each version (default their roots).
    chunks : int, str, dict or None
        None (default): lazy, read on access (numpy). Else dask arrays:
        ``{}`` or ``"auto"`` take each variable's HDF5 chunks (and every
        version in one block, so that versions share chunk reads); a dict
        ``{dim: size}`` as ``Dataset.chunk`` takes it (dimensions not named
        are whole).
    drop_variables, mask_and_scale, decode_times, concat_characters, decode_coords, use_cftime, decode_timedelta
        As for ``xr.open_dataset``; every version is decoded with its own
        attributes (a ``scale_factor`` changed between versions applies to its
        versions only).
    verify : bool
        As ``open_dataset(..., verify=True)``: check each chunk read against
        the hash table's digest.

    Returns
    -------
    xarray.Dataset
        Dimensions ``version`` (length ``len(versions)``) then each
        variable's own; coordinates ``version`` (each key as given when it is
        a str, else the version's name), ``version_name`` (the version each
        key resolved to, str) and ``version_time`` (its commit time, UTC,
        ``datetime64[ns]``). Every other variable is stacked along
        ``version``, its attributes and encoding from the last version that
        holds it; the Dataset's attributes are the last version's.
        ``ds.isel(version=i)``, with padding removed, equals
        ``xr.open_dataset(path, engine="vhdf5", version=versions[i])``. Points
        a version lacks (a variable it does not hold, points past its shape
        along an axis that grew) hold the missing value: NaN or NaT, with
        integers and bools promoted to float64 and strings to object when
        padding is needed (module docstring). ``ds.encoding`` holds
        ``source``, ``vhdf5_versions`` (the names) and ``vhdf5_group``.

    Raises
    ------
    ValueError
        ``versions`` is empty, a str, or names the same label twice; a
        variable or dimension of the group is itself called ``version``.
    IncompatibleDataError
        A variable has other dimensions in one version than in another (a
        ``ValueError``).
    NotVersionedError, NotHDF5Error, VersionNotFoundError, VersionKeyTypeError, FileBusyError
        As ``xr.open_dataset(path, engine="vhdf5", version=...)``, for any of ``versions``.
    KeyError
        ``group`` is missing in one of the versions.

    Notes
    -----
    Reads are shared: a stored chunk that several selected versions map is
    read and decoded once per read of the variable (one ``.load()``, or one
    dask block: keep the versions in one block to share). Variables that
    cannot be read from their chunk bytes (variable-length strings, filters
    without a decoder here) are read per version.
    """
    if isinstance(versions, (str, bytes)) or not isinstance(versions, Sequence) or not len(versions):
        raise ValueError(f"versions must be a non-empty list of version keys, got {versions!r}")
    decoders = dict(
        mask_and_scale=mask_and_scale,
        decode_times=decode_times,
        concat_characters=concat_characters,
        decode_coords=decode_coords,
        use_cftime=use_cftime,
        decode_timedelta=decode_timedelta,
    )
    drop = (
        set()
        if drop_variables is None
        else ({drop_variables} if isinstance(drop_variables, str) else set(drop_variables))
    )
    source = os.path.abspath(os.fspath(path))
    manager = SharedFile(source, verify=verify)
    opened_versions = []
    with opened(manager, path) as f:
        for key in versions:
            opened_versions.append(_open_members(manager, f, key, group, drop, decoders))
    names = [v[0] for v in opened_versions]
    labels = [key if isinstance(key, str) else name for key, name in zip(versions, names)]
    if len(set(labels)) != len(labels):
        raise ValueError(
            f"versions {list(versions)!r} name the same label twice: each needs its own "
            "place along the version dimension"
        )
    ds = _stack(manager, opened_versions, decoders)
    ds = ds.assign_coords(
        {
            VERSION_DIM: (VERSION_DIM, np.array(labels, dtype=object)),
            "version_name": (VERSION_DIM, np.array(names, dtype=object)),
            "version_time": (
                VERSION_DIM,
                np.array(
                    [np.datetime64(w, "ns") if w else np.datetime64("NaT", "ns") for _, w, *_ in opened_versions],
                    dtype="M8[ns]",
                ),
            ),
        }
    )
    ds.encoding.update(
        source=os.fspath(path), vhdf5_versions=names, vhdf5_group=group or "/", vhdf5_decode_times=decode_times
    )
    if chunks is not None:
        ds = _chunk(ds, chunks)
    return ds


def _stack(manager: SharedFile, opened_versions: list, decoders: dict) -> xr.Dataset:
    """The stacked Dataset of ``_open_members`` results (no version coordinates yet)."""
    order: dict[str, None] = {}
    coord_names: set = set()
    for _, _, members, coords, _ in opened_versions:
        order.update(dict.fromkeys(members))
        coord_names |= coords
    if VERSION_DIM in order or any(VERSION_DIM in m[1].dims for _, _, ms, _, _ in opened_versions for m in ms.values()):
        raise ValueError(
            f"the group holds a variable or dimension named {VERSION_DIM!r}: open_versions "
            "stacks along a new dimension of that name"
        )
    sizes: dict[str, int] = {}
    for _, _, members, _, _ in opened_versions:
        for _raw, dec in members.values():
            for d, s in zip(dec.dims, dec.shape):
                sizes[d] = max(sizes.get(d, 0), s)
    variables: dict[str, xr.Variable] = {}
    indexes = {}
    for var in order:
        per = [ms[var] if var in ms else None for _, _, ms, _, _ in opened_versions]
        present = [p for p in per if p is not None]
        dims = present[-1][1].dims
        for p in present:
            if p[1].dims != dims:
                raise IncompatibleDataError(
                    f"variable {var!r} has dimensions {p[1].dims} in one version and {dims} in another: "
                    "open_versions stacks a variable with the same dimensions in every version"
                )
        if dims == (var,):
            index = _index(var, per, sizes[var])
            if index is not None:
                indexes[var] = index
                continue
            var_name = f"{VERSION_DIM}_{var}"  # labels that differ between versions: a 2-d coordinate
            coord_names.add(var_name)
        else:
            var_name = var
        variables[var_name] = _stacked_variable(var, manager, per, dims, sizes, decoders)
    out = xr.Dataset(variables, coords=indexes, attrs=opened_versions[-1][4])
    return out.set_coords([k for k in coord_names if k in out.data_vars])


def _index(var: str, per: list, size: int) -> xr.Variable | None:
    """The 1-d index of dimension ``var`` when every version's labels are a prefix of the longest's, else None."""
    loaded = [None if p is None else p[1].load() for p in per]
    longest = max((v for v in loaded if v is not None), key=lambda v: v.size)
    for v in loaded:
        if v is not None and not v.equals(longest[: v.size]):
            return None
    present = [v for v in loaded if v is not None]
    return (
        xr.Variable((var,), longest.values, present[-1].attrs, present[-1].encoding) if longest.size == size else None
    )


def _stacked_variable(
    var: str, manager: SharedFile, per: list, dims: tuple, sizes: dict, decoders: dict
) -> xr.Variable:
    present = [p for p in per if p is not None]
    padded = tuple(sizes[d] for d in dims)
    dtype = (
        np.result_type(*[p[1].dtype for p in present])
        if all(p[1].dtype.kind not in "OSU" for p in present)
        else np.dtype(object)
    )
    needs_padding = any(p is None or p[1].shape != padded for p in per)
    fill = None
    if needs_padding:
        dtype, fill = missing_value(dtype)
    members = [None if p is None else _Member(p[0], p[1], dtype) for p in per]  # p: (raw, decoded)
    array = StackedBackendArray(var, manager, members, (len(per), *padded), dtype, fill, decoders)
    last = present[-1][1]
    encoding = dict(last.encoding)
    if "preferred_chunks" in encoding:
        encoding["preferred_chunks"] = {VERSION_DIM: len(per), **encoding["preferred_chunks"]}
    return xr.Variable((VERSION_DIM, *dims), indexing.LazilyIndexedArray(array), last.attrs, encoding)


def _chunk(ds: xr.Dataset, chunks) -> xr.Dataset:
    """``ds`` as dask arrays: ``{}``/"auto": each variable's HDF5 chunks, every version in one block."""
    if isinstance(chunks, (int, dict)) and chunks != {}:
        return ds.chunk(chunks)
    if chunks not in ({}, "auto"):
        raise ValueError(f"chunks must be None, {{}}, 'auto', an int or a dict of dimension sizes, got {chunks!r}")
    out = ds.copy()
    for name, var in ds.variables.items():
        if name not in ds.indexes:
            preferred = var.encoding.get("preferred_chunks") or {}
            out[name] = var.chunk({d: preferred.get(d, -1) for d in var.dims})
    return out
