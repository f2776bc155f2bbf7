"""One selection of a dataset read from many versions through one handle (``read_versions``).

Reading ``reader[v]["x"][key]`` for each of many versions pays, per version,
two fresh HDF5 opens under the reader's lock, the version's tree and the
dataset's manifest (``docs/benchmarks.md``, "Reading versions"). Yet every
version of a dataset maps chunks of the same raw_data, and a commit of this
package stores each version's chunk map (:mod:`~xarray_vhdf5._versions.chunkmaps`).
:func:`read_versions` therefore opens the file once for a batch of versions
(:data:`BATCH`, under the reader's shared lock, released between batches),
builds one manifest over all of raw_data's stored chunks
(:meth:`~xarray_vhdf5._backend.manifest.ChunkManifest.remapped` gives each
version its own grid over it), and for each version reads only its stored
map, after the same checks as any reader of the map
(:class:`~xarray_vhdf5._versions.chunkmaps.MapReader`). A version without a map
to trust (committed by versioned-hdf5, a dataset of fewer than
:data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS` chunks) has its
mappings decoded through the same handle, and a dataset without a manifest
(variable-length strings, a filter without a decoder here) is read by libhdf5.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np
from h5py._hl import selections as _selections

from .._backend.chunks import chunk_grid_shape
from .._backend.hashtable import committed_chunks
from .._backend.layout import VERSION_DATA, version_path
from .._backend.manifest import ChunkManifest
from .._backend.manifest_resolve import manifest_from_starts, resolve_manifest
from . import chunkmaps
from .reader_dataset import outer_key

if TYPE_CHECKING:
    from .reader import SharedVersionedFile

__all__ = ["BATCH", "read_versions"]

#: Versions read through one handle, under one hold of the reader's shared lock.
BATCH = 256


def read_versions(
    reader: SharedVersionedFile, path: str, key: Any = (), versions: Iterable | None = None
) -> np.ndarray:
    """``numpy.stack([reader[v][path][key] for v in versions])``, read through one handle per batch.

    See :meth:`~xarray_vhdf5._versions.reader.SharedVersionedFile.read_versions`.
    """
    names = reader.versions if versions is None else [reader.resolve(v) for v in versions]
    path = path.strip("/")
    args = key if isinstance(key, tuple) else (key,)
    if any(a is None for a in args):
        raise TypeError("Indexing with None (or np.newaxis) is not supported")
    if any(isinstance(a, str) for a in args):
        raise TypeError("read_versions takes no field names: read the fields from its result")
    plans: dict[tuple[int, ...], tuple] = {}  # per shape: h5py's checks passed, the manifest's key
    parts: list[np.ndarray] = []
    for start in range(0, len(names), BATCH):
        with reader._handle() as f:
            parts.extend(_read_batch(f, path, args, names[start : start + BATCH], reader.verify, plans))
    if not parts:
        raise ValueError("no versions to read")
    shapes = {p.shape for p in parts}
    if len(shapes) > 1:
        first = {p.shape: v for v, p in zip(names, parts, strict=True)}
        raise ValueError(
            f"{path!r}: the selection has different shapes in different versions "
            f"({', '.join(f'{s} in {v!r}' for s, v in first.items())}): select a region every version has"
        )
    return np.stack(parts)


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


def _plan(shape: tuple[int, ...], args: tuple, plans: dict, name: str) -> tuple:
    """``(result shape, manifest key or None for a whole-shape mask)`` of ``args`` on ``shape``: h5py's rules.

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
        plan = plans[shape] = (selection.array_shape, None if mask else outer_key(args, shape))
    return plan


def _through_manifest(manifest: ChunkManifest, args: tuple, plan: tuple) -> np.ndarray:
    shape, key = plan
    out = manifest.read(())[args[0]] if key is None else manifest.read(key)
    return out.reshape(shape)


def _read_batch(
    f: h5py.File, path: str, args: tuple, names: Sequence[str], verify: bool, plans: dict
) -> list[np.ndarray]:
    raw = f.get(f"/{VERSION_DATA}/{path}/raw_data")
    maps = lookup = None
    if isinstance(raw, h5py.Dataset) and raw.chunks is not None:
        maps = chunkmaps.MapReader(f, path, raw, raw.chunks)
        lookup = chunkmaps.address_lookup(f, path, raw)
    base: ChunkManifest | None = None  # made at the first version with a map (small datasets have none)
    tried = False
    out = []
    for name in names:
        vds_path = f"{version_path(name)}/{path}"
        found = maps.numbers(name) if maps is not None else None
        if found is not None and not tried:
            assert raw is not None
            base, tried = _whole(raw, lookup, verify), True
        manifest: ChunkManifest | None = None
        if found is not None and base is not None and not (found[1].size and int(found[1].max()) >= len(base.rows)):
            manifest, shape = base.remapped(vds_path, *found), found[0]
        else:  # no map, or one naming a chunk past the committed ones: the mappings decoded
            manifest, vds = _resolved(f, name, path, vds_path, verify, lookup)
            shape = vds.shape
        plan = _plan(shape, args, plans, name)
        if manifest is None:
            out.append(np.asarray(vds[args]).reshape(plan[0]))
            continue
        try:
            out.append(_through_manifest(manifest, args, plan))
        finally:
            manifest.close()  # a remapped manifest's close leaves its parent's descriptor
    if base is not None:
        base.close()
    return out


def _resolved(f: h5py.File, name: str, path: str, vds_path: str, verify: bool, lookup):
    """``(manifest or None, the version's dataset)``: its mappings decoded through this handle."""
    vds = f.get(vds_path)
    if not isinstance(vds, h5py.Dataset):
        raise KeyError(f"no dataset {path!r} in version {name!r}")
    if vds.dtype.kind == "O" or not vds.is_virtual:
        return None, vds
    manifest = resolve_manifest(vds, verify=verify, addresses=lookup)
    return (manifest if manifest.supported else None), vds
