"""One selection of a dataset read from many versions through one handle (``read_versions``).

Reading ``reader[v]["x"][key]`` for each of many versions pays, per version,
two fresh HDF5 opens under the reader's lock, the version's tree and the
dataset's manifest (``docs/benchmarks.md``, "Reading versions"). Yet every
version of a dataset maps chunks of the same raw_data, and a commit of this
package logs each version's chunk map (:mod:`~xarray_vhdf5._versions.maplog`).
:func:`read_versions` therefore opens the file once per :data:`HOLD` seconds
(under the reader's shared lock, released in between), reads the dataset's
map log whole, builds one manifest over all of raw_data's stored chunks
(:meth:`~xarray_vhdf5._backend.manifest.ChunkManifest.remapped` gives each
version its own grid over it), and reads each distinct set of chunks once:
versions that map the same raw_data chunks where the selection lies get the
same values without a read. A version the log has no row for is looked up in
the file's map log of small datasets (:mod:`~xarray_vhdf5._versions.smallmaps`:
fewer than :data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS` chunks), then
in its stored map, after the same checks as any reader of the map
(:class:`~xarray_vhdf5._versions.chunkmaps.MapReader`); one without a map
to trust (committed by versioned-hdf5) has its
mappings decoded through the same handle, and a dataset without a manifest
(variable-length strings, a filter without a decoder here) is read by libhdf5.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from h5py import h5d
from h5py._hl import selections as _selections

from .._backend.chunkmap import mapped_starts, version_dataset_layout
from .._backend.chunks import chunk_grid_shape
from .._backend.h5objects import open_object
from .._backend.hashtable import committed_chunks
from .._backend.layout import VERSION_DATA, version_path
from .._backend.manifest import ChunkManifest
from .._backend.manifest_resolve import manifest_from_starts, resolve_manifest
from ..errors import IncompatibleDataError
from . import bookkeeping, chunkmaps, maplog, smallmaps
from .reader_dataset import outer_key

if TYPE_CHECKING:
    from .reader import SharedVersionedFile

__all__ = ["HOLD", "read_versions"]

#: Seconds one handle reads versions for, under one hold of the reader's shared lock
#: (a writer waits at most about this long); at least one version is read per hold.
HOLD = 0.05


def read_versions(
    reader: SharedVersionedFile, path: str, key: Any = (), versions: Iterable | None = None
) -> np.ndarray:
    """``numpy.stack([reader[v][path][key] for v in versions])``, read through one handle per :data:`HOLD` seconds.

    See :meth:`~xarray_vhdf5._versions.reader.SharedVersionedFile.read_versions`.
    """
    listing = reader._versions()  # one look at the file's counters, not one per version
    names = listing.names() if versions is None else [listing.resolve(v) for v in versions]
    path = path.strip("/")
    args = key if isinstance(key, tuple) else (key,)
    if any(a is None for a in args):
        raise TypeError("Indexing with None (or np.newaxis) is not supported")
    if any(isinstance(a, str) for a in args):
        raise TypeError("read_versions takes no field names: read the fields from its result")
    plans: dict[tuple[int, ...], tuple] = {}  # per shape: h5py's checks passed, the manifest's key
    parts: list[np.ndarray] = []
    bases: dict[Any, ChunkManifest | None] = {}  # raw_data's manifest, by the file's token
    try:
        while len(parts) < len(names):
            with reader._handle() as f:
                listing = reader._read_listing  # the file as this handle sees it
                rest = names[len(parts) :]
                stamps = {n: t for n in set(rest) if (t := listing.timestamp_micros(n)) is not None}
                token = reader._token()  # unchanged: no writer since, the manifest of raw_data holds
                if token not in bases:
                    _close_bases(bases)
                until = time.monotonic() + HOLD
                _read_batch(f, path, args, rest, stamps, reader.verify, plans, parts, until, bases, token)
    finally:
        _close_bases(bases)
    if not parts:
        raise ValueError("no versions to read")
    shapes = {p.shape for p in parts}
    if len(shapes) > 1:
        first: dict[tuple[int, ...], str] = {}
        for v, p in zip(names, parts, strict=True):
            first.setdefault(p.shape, v)
        shown = ", ".join(f"{s} in {v!r}" for s, v in list(first.items())[:4])
        more = f" and {len(first) - 4} more" if len(first) > 4 else ""
        raise ValueError(
            f"{path!r}: the selection has different shapes in different versions "
            f"({shown}{more}): select a region every version has"
        )
    return np.stack(parts)


def _close_bases(bases: dict) -> None:
    for base in bases.values():
        if base is not None:
            base.close()
    bases.clear()


def _whole(raw: h5py.Dataset, lookup, verify: bool) -> ChunkManifest | None:
    """A manifest whose stored chunk ``k`` is raw_data's chunk ``k`` (rows ``k * chunks[0]`` on), or None."""
    chunks = tuple(int(c) for c in raw.chunks)
    grid = chunk_grid_shape(raw.shape, chunks)
    if any(g != 1 for g in grid[1:]) or raw.dtype.hasobject:  # not the format's raw_data, or strings
        return None
    try:  # the chunks commits finished writing (rows past them may be a crashed commit's)
        n = min(grid[0], committed_chunks(raw))
    except (KeyError, ValueError, RuntimeError, OSError):
        return None
    starts = (np.arange(n, dtype=np.int64) * chunks[0]).reshape((n, *grid[1:]))
    manifest = manifest_from_starts(
        raw.name,
        raw,
        raw.shape,
        chunks,
        raw.dtype,
        np.asarray(raw.fillvalue, raw.dtype),
        starts,
        addresses=lookup,
        verify=verify,
    )
    return manifest if manifest.supported else None


def _plan(shape: tuple[int, ...], args: tuple, plans: dict, name: str, chunks: tuple[int, ...] | None = None) -> tuple:
    """``(result shape, manifest key or None for a whole-shape mask, chunks touched)`` of ``args`` on ``shape``.

    h5py's rules. The chunks touched (of a dataset with chunk shape ``chunks``)
    are an index of the chunk grid (``numpy.ix_`` of the chunks each axis
    touches; ``...`` without ``chunks``): versions that map the same raw_data
    chunks there read the same values.

    Raises h5py's errors for ``args`` invalid on ``shape`` (``IndexError`` out of
    bounds, ``TypeError`` for an unsorted list, ...), naming version ``name``.
    """
    plan = plans.get(shape)
    if plan is None:
        try:
            selection = _selections.select(shape, args)
        except (IndexError, TypeError, ValueError) as exc:
            raise type(exc)(f"version {name!r}: {exc}") from exc
        mask = isinstance(selection, _selections.PointSelection)  # a boolean mask of the whole shape
        key = None if mask else outer_key(args, shape)
        plan = plans[shape] = (selection.array_shape, key, _touched(shape, chunks, key))
    return plan


def _touched(shape: tuple[int, ...], chunks: tuple[int, ...] | None, key: tuple | None) -> Any:
    """The chunks the outer ``key`` reads on ``shape`` as an index of the chunk grid (``...``: all)."""
    if chunks is None or key is None:
        return Ellipsis
    per_axis = []
    for axis, n in enumerate(shape):
        a = key[axis] if axis < len(key) else slice(None)
        if isinstance(a, slice):
            points = np.arange(*a.indices(n))
        else:
            points = np.atleast_1d(np.asarray(a, np.intp))
            points = np.where(points < 0, points + n, points)
        per_axis.append(np.unique(points // chunks[axis]))
    return np.ix_(*per_axis)


def _through_manifest(manifest: ChunkManifest, args: tuple, plan: tuple) -> np.ndarray:
    shape, key = plan[0], plan[1]
    out = manifest.read(())[args[0]] if key is None else manifest.read(key)
    return out.reshape(shape)


def _read_batch(
    f: h5py.File,
    path: str,
    args: tuple,
    names: Sequence[str],
    stamps: dict[str, int],
    verify: bool,
    plans: dict,
    out: list[np.ndarray],
    until: float,
    bases: dict,
    token: Any,
) -> None:
    """Append to ``out`` the selection ``args`` of dataset ``path`` in the versions ``names``, in order,
    until the clock passes ``until`` (at least one). ``stamps``: their timestamps (us), for the map log.
    ``bases``: raw_data's manifest (None: none) under the file's ``token``, made by the first batch
    that needs it and kept for the next while no writer changed the file."""
    raw = f.get(f"/{VERSION_DATA}/{path}/raw_data")
    maps = lookup = chunks = None
    logged: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
    if isinstance(raw, h5py.Dataset) and raw.chunks is not None:
        chunks = tuple(int(c) for c in raw.chunks)
        bk = bookkeeping.open_group(f)
        maps = chunkmaps.MapReader(f, path, raw, chunks, bk)
        lookup = chunkmaps.address_lookup(f, path, raw)
        owner = chunkmaps.table_owner(raw)
        log = maplog.MapLog.load(bk, path, raw, owner)
        if log is not None:
            logged = log.maps(stamps.items())
        if len(logged) < len(stamps) and (small := smallmaps.SmallMaps.load(bk)) is not None:
            rest = ((n, t) for n, t in stamps.items() if n not in logged)
            logged.update(small.maps(path, chunks, owner, rest))
    raw_fill = None if chunks is None else np.asarray(raw.fillvalue, raw.dtype).tobytes()
    base: ChunkManifest | None = bases.get(token)  # made at the first version with a map
    tried = token in bases
    read: dict[tuple, np.ndarray] = {}  # (shape, chunk numbers the selection touches) -> the values
    for k, name in enumerate(names):
        if k and time.monotonic() > until:
            break
        vds_path = f"{version_path(name)}/{path}"
        found = logged.get(name)
        if found is None and maps is not None:
            found = maps.numbers(name)
        vds = None
        if found is None and chunks is not None:  # no map: the mappings decoded, onto the same manifest
            vds = open_object(f, vds_path, h5py.Dataset)
            if vds is None:
                raise KeyError(f"no dataset {path!r} in version {name!r}")
            found = _decoded(vds, raw, chunks, raw_fill)
        if found is not None and not tried:
            assert raw is not None
            base, tried = _whole(raw, lookup, verify), True
            bases[token] = base
        manifest: ChunkManifest | None = None
        if found is not None and base is not None and not (found[1].size and int(found[1].max()) >= len(base.rows)):
            shape = found[0]
            plan = _plan(shape, args, plans, name, chunks)
            same = (shape, np.ascontiguousarray(found[1][plan[2]], np.int64).tobytes())
            if same in read:  # the chunks this selection reads are those of a version read before
                out.append(read[same])
                continue
            manifest = base.remapped(vds_path, *found)
        else:  # mappings another manifest must describe, or naming a chunk past the committed ones
            same = None
            manifest, vds = _resolved(f, name, path, vds_path, verify, lookup, vds)
            plan = _plan(vds.shape, args, plans, name)
            if manifest is None:  # no manifest can read it: libhdf5 does
                out.append(np.asarray(vds[args]).reshape(plan[0]))
                continue
        try:
            out.append(_through_manifest(manifest, args, plan))
        finally:
            manifest.close()  # a remapped manifest's close leaves its parent's descriptor
        if same is not None:
            read[same] = out[-1]


def _decoded(
    vds: h5py.Dataset, raw: h5py.Dataset, chunks: tuple[int, ...], raw_fill: bytes | None
) -> tuple[tuple[int, ...], np.ndarray] | None:
    """``(shape, chunk numbers)`` of a version's dataset from its mappings, where raw_data's manifest reads it.

    That is: a virtual dataset of raw_data's dtype and fill value (``raw_fill``,
    its bytes) and chunks, mapping whole raw_data chunks (``docs/format.md``).
    Else None: :func:`resolve_manifest` then makes the dataset its own manifest.
    """
    dcpl = getattr(vds, "_dcpl", None) or vds.id.get_create_plist()  # the copy h5py made opening vds
    dtype = vds.dtype
    if dcpl.get_layout() != h5d.VIRTUAL or dtype.hasobject or dtype != raw.dtype:
        return None
    if dcpl.fill_value_defined() == h5d.FILL_VALUE_UNDEFINED:
        return None
    fill = np.zeros((), dtype)
    dcpl.get_fill_value(fill)
    if fill.tobytes() != raw_fill:
        return None
    try:
        vchunks, raw_path = version_dataset_layout(vds)
    except IncompatibleDataError:
        return None
    shape = vds.shape
    if tuple(vchunks) != chunks or raw_path != raw.name:
        return None
    try:
        starts = mapped_starts(vds, shape, chunks, raw)
    except ValueError:  # mappings raw_data's chunks cannot express
        return None
    if np.any(starts[starts >= 0] % chunks[0]):
        return None
    return shape, chunkmaps.chunk_numbers(starts, chunks[0])


def _resolved(f: h5py.File, name: str, path: str, vds_path: str, verify: bool, lookup, vds=None):
    """``(manifest or None, the version's dataset)``: its mappings decoded through this handle
    (``vds``: the dataset, when already got)."""
    if vds is None:
        vds = open_object(f, vds_path, h5py.Dataset)
    if vds is None:
        raise KeyError(f"no dataset {path!r} in version {name!r}")
    if vds.dtype.kind == "O" or not vds.is_virtual:
        return None, vds
    manifest = resolve_manifest(vds, verify=verify, addresses=lookup)
    return (manifest if manifest.supported else None), vds
