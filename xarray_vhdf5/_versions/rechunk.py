"""Rechunking a dataset's history on the resplit engine: each stored chunk of a version read once.

A versioned dataset has one chunk shape in every version: all versions map
chunks of one raw_data, ``_version_data/<name>/raw_data``, which is the
only raw_data versioned-hdf5 2.6 reads and writes for the dataset (see
``docs/format.md``). New chunks therefore mean a new raw_data for the whole
history, which is what ``modify_metadata(chunks=)`` builds (every version
rewritten, deduplicated, crash-safe: see :mod:`.metadata`). Through a handle
of :func:`~xarray_vhdf5._versions.mutation.open_file` (journaled, as the CLI
and the ``.vhdf5`` accessor open it) the new raw_data takes the old one's
bytes and the file keeps its size; through a plain ``h5py.File`` the old
raw_data stays until the new one is complete, so the file grows by the new
raw_data (its old bytes are free inside the file for later commits, and
``vhdf5 repack`` gives them back). :func:`rechunk` is that operation with a memory budget and
a report; versioned-hdf5 then sees an ordinary file whose dataset has the new
chunks in every version, as its own ``modify_metadata`` would leave it.

How each version is rewritten when the chunk shape changes
(:func:`resplit_version`): its new chunks are content-keyed first (position,
edge shape and the raw_data rows of the old chunks under them): a key seen in
an earlier version is that version's chunk, reused without a read. The
remaining new chunks are produced by a :class:`~xarray_vhdf5.resplit.ResplitPlan`
over the version's old chunk grid (``needed``: the unseen keys), reading each
old chunk they overlap exactly once, straight from raw_data by its rows (one
chunk-sized hyperslab; cast by HDF5's conversion when the dtype changes, as
``modify_metadata`` casts), within ``max_mem`` bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from .._backend.chunks import chunk_grid_shape
from .._backend.encode import encoder_pool
from .._backend.hashing import chunk_hash
from .._backend.manifest import ChunkManifest
from .._backend.raw_data import is_fill_chunk
from ..errors import DatasetNotFoundError, IncompatibleDataError
from ..resplit import (
    ResplitCounters,
    ResplitPlan,
    default_budget,
    iter_resplit,
    parse_bytes,
    plan_resplit,
)

__all__ = ["RechunkReport", "dimension_names", "rechunk", "rechunk_plan", "resplit_version"]


@dataclass
class RechunkReport:
    """What :func:`rechunk` (or ``modify_metadata(chunks=)``) did to one dataset.

    Attributes
    ----------
    dataset : str
        The dataset's path.
    chunks_before, chunks_after : tuple of int
        Its chunk shape, points.
    versions : list of str
        The versions rewritten.
    stored_before, stored_after : int
        Stored chunks of raw_data (hash table rows) before and after.
    counters : ResplitCounters
        Summed over the versions: input chunk reads, bytes, writes; the peak is the
        largest of any version's run.
    plans : list of ResplitPlan
        The plan of each version that read chunks, in order.
    """

    dataset: str
    chunks_before: tuple[int, ...]
    chunks_after: tuple[int, ...]
    versions: list[str] = field(default_factory=list)
    stored_before: int = 0
    stored_after: int = 0
    counters: ResplitCounters = field(default_factory=ResplitCounters)
    plans: list[ResplitPlan] = field(default_factory=list)

    @property
    def reads_per_input_chunk(self) -> float:
        """Reads of old chunks per old chunk the plans needed (1.0: each read once)."""
        needed = sum(p.input_reads for p in self.plans)
        return self.counters.input_reads / needed if needed else 0.0


def merge_counters(total: ResplitCounters, run: ResplitCounters) -> None:
    """Add ``run`` into ``total`` (peaks: the larger)."""
    for f in dataclasses.fields(ResplitCounters):
        a, b = getattr(total, f.name), getattr(run, f.name)
        setattr(total, f.name, max(a, b) if f.name.startswith("peak_") else a + b)


def content_keys(src_name: str, shape, src_chunks, chunks, row_of: np.ndarray) -> list[tuple]:
    """Per new chunk (flat C order): what fixes its content, comparable across versions.

    The old chunks' raw_data rows under it (-1: unmapped), with its index and
    edge shape, and the raw_data they come from.
    """
    grid = chunk_grid_shape(shape, chunks)
    rows = row_of.reshape(chunk_grid_shape(shape, src_chunks))
    keys = []
    for index in np.ndindex(*grid):
        lo = [i * c for i, c in zip(index, chunks, strict=True)]
        hi = [min((i + 1) * c, s) for i, c, s in zip(index, chunks, shape, strict=True)]
        under = rows[tuple(slice(a // c, -(-b // c)) for a, b, c in zip(lo, hi, src_chunks, strict=True))]
        extent = tuple(b - a for a, b in zip(lo, hi, strict=True))
        keys.append((src_name, index, extent, under.tobytes()))
    return keys


def raw_rows_reader(
    src: h5py.Dataset | ChunkManifest, shape, src_chunks, row_of: np.ndarray, dtype: np.dtype, fill_cast: Any
) -> Callable[[tuple[int, ...]], np.ndarray]:
    """``read_chunk`` reading old chunk ``index`` of a version from its raw_data rows.

    An unmapped chunk is ``fill_cast`` (no read). A stored one is its rows, the
    chunk's trimmed extent: from an ``h5py.Dataset``, one hyperslab converted by
    HDF5 to ``dtype``; from a manifest of raw_data's chunks copied aside
    (:func:`~.sidecopy.side_manifest`, of dtype ``dtype``), the raw_data chunk
    decoded without libhdf5. With a manifest, ``read_chunk.read_into(index,
    out)`` reads a whole unfiltered chunk straight into ``out``
    (:func:`~xarray_vhdf5.resplit.iter_resplit`'s protocol; False: not done).
    """
    grid = chunk_grid_shape(shape, src_chunks)
    read_rows: Callable[[int, list[int]], np.ndarray]
    if isinstance(src, ChunkManifest):
        per_chunk = src.chunks[0]

        def read_rows(row: int, extent: list[int]) -> np.ndarray:
            trim = tuple(slice(0, e) for e in extent)
            if row % per_chunk == 0 and extent[0] <= per_chunk:  # one raw_data chunk: decoded, not copied
                return src.decoded_chunk((row // per_chunk,) + (0,) * (len(extent) - 1))[trim]
            return src.read((slice(row, row + extent[0]), *trim[1:]))
    else:
        reader = src if src.dtype == dtype else src.astype(dtype)

        def read_rows(row: int, extent: list[int]) -> np.ndarray:
            return np.asarray(reader[(slice(row, row + extent[0]), *(slice(0, e) for e in extent[1:]))])

    def read_chunk(index: tuple[int, ...]) -> np.ndarray:
        extent = [min(c, s - i * c) for i, c, s in zip(index, src_chunks, shape, strict=True)]
        row = int(row_of[np.ravel_multi_index(index, grid)])
        if row < 0:
            return np.full(extent, fill_cast, dtype=dtype)
        return read_rows(row, extent)

    if isinstance(src, ChunkManifest):
        manifest = src

        def read_into(index: tuple[int, ...], out: np.ndarray) -> bool:
            row = int(row_of[np.ravel_multi_index(index, grid)])
            if row < 0 or row % manifest.chunks[0]:
                return False
            return manifest.read_chunk_into((row // manifest.chunks[0],) + (0,) * (len(index) - 1), out)

        read_chunk.read_into = read_into  # type: ignore[attr-defined]
    return read_chunk


def resplit_version(
    *,
    src: h5py.Dataset,
    shape: tuple[int, ...],
    src_chunks: tuple[int, ...],
    row_of: np.ndarray,
    chunks: tuple[int, ...],
    dtype: np.dtype,
    fill_cast: Any,
    replace: tuple[Any, Any] | None,
    memo: dict,
    add: Callable[..., tuple[int, int] | None],
    fillvalue: Any,
    max_mem: int | str | None,
    counters: ResplitCounters,
    plans: list,
    progress: bool = False,
    desc: str | None = None,
) -> dict[int, tuple[int, int]]:
    """Write one version's new chunks; return ``{flat new chunk index: raw_data rows}`` of its stored ones.

    Parameters
    ----------
    src : h5py.Dataset
        The raw_data (or its copy) whose rows ``row_of`` names.
    shape, src_chunks, chunks : tuple of int
        The version's shape, its old and new chunk shapes (points).
    row_of : numpy.ndarray of int64
        Per old chunk (flat C order), its first raw_data row, -1 if unmapped.
    dtype : numpy.dtype
        The new dtype (old chunks are converted to it by HDF5).
    fill_cast : scalar
        What an unmapped old chunk holds in the new dtype.
    replace : (old fill, new fill) or None
        Points equal to the old fill value become the new one (``modify_metadata``).
    memo : dict
        Content key -> rows (or None: all fill), shared across versions.
    add : callable
        ``add(index, chunk[, digest])`` stores a new chunk (a ``ChunkWriter.add``), returning its rows or None.
    fillvalue : scalar or None
        The fill value ``add`` leaves chunks of unstored (the writer's ``fillvalue``).
    max_mem : int, str or None
        The budget of the plan (default :data:`~xarray_vhdf5.resplit.DEFAULT_MAX_MEM`, at least the plan's minimum).
    counters : ResplitCounters
        Summed into.
    plans : list
        The plan is appended to it when chunks are read.
    progress, desc
        A progress bar over the buffers, and its label.

    Raises
    ------
    MemoryBudgetError
        ``max_mem`` given and below the plan's minimum.
    """
    dtype = np.dtype(dtype)
    keys = content_keys(src.name, shape, src_chunks, chunks, row_of)
    grid = chunk_grid_shape(shape, chunks)
    needed = np.zeros(math.prod(grid), dtype=bool)
    out: dict[int, tuple[int, int]] = {}
    for flat, key in enumerate(keys):
        if key in memo:
            if memo[key] is not None:
                out[flat] = memo[key]
        else:
            needed[flat] = True
    if not needed.any():
        return out
    itemsize = max(dtype.itemsize, 1)
    if max_mem is None:
        max_mem = default_budget(src_chunks, chunks, itemsize)
    plan = plan_resplit(shape, src_chunks, chunks, itemsize, max_mem, needed=needed.reshape(grid))
    plans.append(plan)
    read_chunk = raw_rows_reader(src, shape, src_chunks, row_of, dtype, fill_cast)
    run = ResplitCounters()
    # Each output chunk is copied out of the reused buffer and hashed in the encoding threads
    # (numpy's copy and hashlib release the GIL), in order, while the next ones are cut; the
    # buffer is reused only once every copy of it is made (before_reuse).
    pool = encoder_pool()
    pending: collections.deque = collections.deque()

    def store_next() -> None:
        index, future = pending.popleft()
        chunk, digest = future.result()
        flat = int(np.ravel_multi_index(index, grid))
        # a chunk of fill values is tested again by add, which counts it and stores nothing
        rows = memo[keys[flat]] = add(index, chunk) if digest is None else add(index, chunk, digest)
        if rows is not None:
            out[flat] = rows

    def drain() -> None:
        while pending:
            store_next()

    window = 8  # chunks in flight: a few per encoding thread
    for w in iter_resplit(plan, read_chunk, dtype, counters=run, progress=progress, desc=desc, before_reuse=drain):
        pending.append((w.chunk, pool.submit(_prepared, w.data, dtype, replace, fillvalue)))
        if len(pending) > window:
            store_next()
    drain()
    merge_counters(counters, run)
    return out


def _prepared(data: np.ndarray, dtype: np.dtype, replace, fillvalue) -> tuple[np.ndarray, bytes | None]:
    """A new chunk copied out of the buffer (the writer queues it), its fill replaced; its digest, None if all fill."""
    chunk = np.array(data, dtype=dtype)
    if replace is not None:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            chunk[chunk == replace[0]] = replace[1]
    return chunk, None if is_fill_chunk(chunk, fillvalue) else chunk_hash(chunk)


def _chunks_argument(chunks, shape: tuple[int, ...], dims: tuple[str, ...] | None, current: tuple[int, ...]):
    """A chunk shape from a tuple (None or -1 entries: keep / whole axis) or a ``{dim: size}`` dict."""
    if isinstance(chunks, dict):
        if dims is None:
            raise IncompatibleDataError("chunks given by dimension name need the dataset's dimension names")
        unknown = set(chunks) - set(dims)
        if unknown:
            raise IncompatibleDataError(
                f"chunks name dimensions {sorted(unknown)} the dataset does not have; its dimensions: {list(dims)}"
            )
        chunks = tuple(chunks.get(d) for d in dims)
    if isinstance(chunks, (int, np.integer)) and len(shape) == 1:
        chunks = (int(chunks),)
    if not isinstance(chunks, (tuple, list)) or len(chunks) != len(shape):
        raise IncompatibleDataError(
            f"chunks must give one size per axis of the dataset's {len(shape)} axes "
            f"(shape {shape}) or a {{dimension: size}} dict, got {chunks!r}"
        )
    out = []
    for c, s, old in zip(chunks, shape, current, strict=True):
        if c is None:
            out.append(old)
        elif int(c) == -1:
            out.append(max(int(s), 1))
        elif int(c) < 1:
            raise IncompatibleDataError(f"chunk sizes must be positive (or -1: the whole axis), got {tuple(chunks)}")
        else:
            out.append(int(c))
    return tuple(out)


def rechunk(
    f,
    name: str,
    chunks,
    *,
    max_mem: int | str | None = None,
    progress: bool = False,
    in_place: bool = True,
) -> RechunkReport:
    """Give dataset ``name`` new chunks in every version, reading each stored chunk once per version.

    ``modify_metadata(f, name, chunks=...)`` with a memory budget (see the module
    docs for why the whole history gets the new chunks). Content is unchanged:
    every version reads the same points before and after.

    Parameters
    ----------
    f : VersionedHDF5File or h5py.File
        The file, open writable; open it with
        :func:`~xarray_vhdf5._versions.mutation.open_file` for the rewrite to
        reuse the old chunks' space (see the module docs).
    name : str
        The dataset's path in the versions.
    chunks : tuple or dict
        New chunk shape in points: one entry per axis (None keeps an axis' size,
        -1 takes the whole axis), or ``{dimension name: size}`` for a dataset
        with netCDF dimensions (axes not named keep their size).
    max_mem : int or str, optional
        Bytes the resplit may hold at once (``"512MB"``); default
        :data:`~xarray_vhdf5.resplit.DEFAULT_MAX_MEM`. The chunk writer's queue (1 MiB) and HDF5's
        caches come on top.
    progress : bool
        Progress bars (tqdm) over each version's buffers.
    in_place : bool
        Through a journaled handle, True (the default) writes the new raw_data into
        the old one's bytes: the file keeps its size, and the old chunks are first
        copied to the journal's side file so that a crash can roll back, so the
        data is written twice (the copy, then the new chunks). False writes the
        new raw_data once, after the end of the file, as a plain ``h5py.File``
        always does: the file grows by the new raw_data, and the old one's bytes
        are free inside the file (libhdf5 reuses them for the rest of the
        session, and in later sessions when the file tracks free space
        persistently; ``vhdf5 repack`` gives them back). ``docs/benchmarks.md``,
        "Rechunk", measures both.

    Returns
    -------
    RechunkReport

    Raises
    ------
    DatasetNotFoundError
        No versioned dataset ``name``.
    IncompatibleDataError
        Chunks of the wrong length, non-positive, or by dimension names the dataset lacks.
    MemoryBudgetError
        ``max_mem`` below the resplit's minimum, two old chunks and one new one (the
        message says it; :func:`~xarray_vhdf5.resplit.minimum_memory`).
    ReadOnlyError, ClosedFileError, TypeError
        As :func:`~xarray_vhdf5._versions.metadata.modify_metadata` raises them.
    """
    from .metadata import UNCHANGED, run_modify_metadata
    from .objects import _open, dataset_paths

    if max_mem is not None:
        parse_bytes(max_mem)  # a bad budget fails before anything is opened
    h5file, _ = _open(f, "rechunk")
    key = str(name).strip("/")
    if key not in dataset_paths(h5file):
        shown = ", ".join(map(repr, dataset_paths(h5file))) or "none"
        raise DatasetNotFoundError(f"no versioned dataset {name!r} in this file; datasets: {shown}")
    raw = h5file["_version_data"][key]["raw_data"]
    current = tuple(int(c) for c in raw.attrs["chunks"])
    latest = _largest_shape(h5file, key) or tuple(raw.shape)
    del raw  # an open raw_data is not freed when modify_metadata unlinks it: its bytes could not be reused
    new = _chunks_argument(chunks, latest, dimension_names(h5file, key), current)
    report = RechunkReport(key, current, new)
    kept = dict.fromkeys(("compression", "compression_opts", "shuffle", "fletcher32", "scaleoffset"), UNCHANGED)
    result = run_modify_metadata(
        f, key, chunks=new, dtype=None, fillvalue=None, resplit=(max_mem, progress, report), in_place=in_place, **kept
    )
    report.versions = list(result.versions)
    report.stored_before, report.stored_after = result.chunks_before, result.chunks_after
    return report


def rechunk_plan(f, name: str, chunks, *, max_mem: int | str | None = None) -> ResplitPlan:
    """The plan :func:`rechunk` would make for the largest version of ``name``, nothing written.

    The largest version reads all its chunks (chunks an earlier version already
    produced are skipped in a real run, so a run reads at most this much per
    version). For ``vhdf5 rechunk --dry-run``.

    Parameters
    ----------
    f : VersionedHDF5File or h5py.File
        The file (read-only is enough).
    name, chunks, max_mem
        As for :func:`rechunk`.

    Raises
    ------
    DatasetNotFoundError, IncompatibleDataError, MemoryBudgetError
        As :func:`rechunk` raises them.
    """
    from .objects import dataset_paths

    h5file = f if isinstance(f, (h5py.File, h5py.Group)) else f.f  # a VersionedHDF5File's h5py file
    key = str(name).strip("/")
    if key not in dataset_paths(h5file):
        shown = ", ".join(map(repr, dataset_paths(h5file))) or "none"
        raise DatasetNotFoundError(f"no versioned dataset {name!r} in this file; datasets: {shown}")
    raw = h5file["_version_data"][key]["raw_data"]
    current = tuple(int(c) for c in raw.attrs["chunks"])
    shape = _largest_shape(h5file, key) or tuple(raw.shape)
    new = _chunks_argument(chunks, shape, dimension_names(h5file, key), current)
    itemsize = max(raw.dtype.itemsize, 1)
    budget = max_mem if max_mem is not None else default_budget(current, new, itemsize)
    return plan_resplit(shape, current, new, itemsize, budget)


def _largest_shape(h5file, name: str) -> tuple[int, ...] | None:
    from .objects import version_dataset

    versions = h5file["_version_data"]["versions"]
    best = None
    for v in versions:
        ds = version_dataset(versions, v, name) if v != "__first_version__" else None
        if ds is not None and (best is None or math.prod(ds.shape) > math.prod(best)):
            best = tuple(ds.shape)
    return best


def dimension_names(h5file, name: str) -> tuple[str, ...] | None:
    """netCDF dimension names of the current version's dataset, from its dimension scales."""
    versions = h5file["_version_data"]["versions"]
    current = versions.attrs.get("current_version")
    if isinstance(current, bytes):
        current = current.decode()
    try:
        ds = versions[current][name]
    except (KeyError, TypeError):
        return None
    names = []
    for dim in ds.dims:
        scales = list(dim.values())
        if not scales:
            return None
        names.append(scales[0].name.rpartition("/")[2])
    return tuple(names)
