"""Chunk maps for versions committed by another writer: what this package's own commits store.

A commit of this package stores each dataset's chunk map beside the version
(:mod:`~xarray_vhdf5._versions.chunkmaps`: a stored map from
:data:`~xarray_vhdf5._versions.chunkmaps.MIN_CHUNKS` chunks on, a row of the
dataset's map log, :mod:`~xarray_vhdf5._versions.maplog`, or of the file's,
:mod:`~xarray_vhdf5._versions.smallmaps`), so that opening the version and
:func:`~xarray_vhdf5._versions.reader_history.read_versions` do not make
libhdf5 decode every mapping of its virtual dataset (about 9 us a mapping on
open: ``benchmarks/bench_stored_maps.py``). A version committed by
versioned-hdf5, or by this package before it stored maps, has none; its
reads decode. :func:`fill_chunk_maps` stores them once, for every version
that lacks them, as its commit would have.

Each map is taken from the version's virtual dataset as libhdf5 decodes it
(:func:`~xarray_vhdf5._backend.chunkmap.build_slab_indices_and_offsets`) and
written by the commit's own functions, so what is stored holds the checks
every reader of a map makes (the virtual dataset's and raw_data's object
addresses, the version's ``timestamp``, the hash table's). Versions are taken
oldest first, each logged on the version it was committed on, so a linear
history logs its maps as changes. Nothing else in the file changes: no
version, chunk, mapping or attribute; versioned-hdf5 reads and writes the
file as before, and its later deletions or ``modify_metadata`` make the maps
unused as they do for this package's own (the checks above).

Each batch of versions is one mutation (:func:`~xarray_vhdf5._versions.mutation.mutating`):
under the file's ``WRITE`` lock, journaled; a process killed inside it leaves
the file as the batch before left it.
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h5py
from h5py import h5o

from .._backend.chunkmap import build_slab_indices_and_offsets, version_dataset_layout
from .._backend.h5objects import walk_links
from .._backend.hashtable import committed_chunks
from .._backend.layout import FIRST_VERSION, VERSION_DATA, VERSIONS
from ..errors import IncompatibleDataError, NotVersionedError
from . import bookkeeping, chunkmaps, smallmaps
from .maplog import name_digest
from .mutation import file_name, mutating, open_for_writing
from .registry import VersionRegistry

__all__ = ["BATCH_SECONDS", "FillReport", "fill_chunk_maps"]

#: About how long one batch of versions holds the file's ``WRITE`` lock (seconds).
BATCH_SECONDS = 0.25


@dataclass
class FillReport:
    """What :func:`fill_chunk_maps` did.

    Attributes
    ----------
    path : str
        The file.
    versions : int
        Committed versions looked at (``__first_version__`` left out).
    stored : int
        Maps written: stored maps (with their map-log rows) and rows of the
        file's map log.
    present : int
        Datasets that already had their map (committed by this package).
    skipped : dict
        ``"version/path" -> reason`` for datasets no map is made for (variable-length
        data, not a virtual dataset, mappings raw_data's chunks cannot express).
    """

    path: str
    versions: int = 0
    stored: int = 0
    present: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def _small_rows(f: h5py.File) -> set[tuple[int, int, int, int, int]]:
    """:meth:`~xarray_vhdf5._versions.smallmaps.SmallMaps.logged` of the file's map log (empty without one)."""
    log = smallmaps.SmallMaps.load(bookkeeping.open_group(f))
    return set() if log is None else log.logged()


def fill_chunk_maps(
    path: str | os.PathLike | h5py.File,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> FillReport:
    """Store the chunk maps of every version of ``path`` that lacks them (see the module docstring).

    Given a path, the versions are filled in batches of about
    :data:`BATCH_SECONDS`, each one mutation of a handle opened for it:
    between batches the ``WRITE`` lock is free, so readers resolving a
    version wait for one batch at most, and commits of other processes go in
    between (their versions are then looked at too). Given an open file, all
    of them are filled in one mutation of it.

    Parameters
    ----------
    path : str, os.PathLike or h5py.File
        A versioned file (versioned-hdf5's format), written by any writer; or
        one open for writing (:func:`~xarray_vhdf5.open_file`).
    progress : callable, optional
        ``progress(done, total)`` in versions, after each.

    Returns
    -------
    FillReport
        Counts of maps stored and already present, and the datasets skipped
        with why. Run again, it stores nothing.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    NotVersionedError
        The file holds no version history.
    FileBusyError
        Another writer held the file past the lock timeout.
    StaleVersionError
        An open file another process wrote since it was opened (as for a commit).
    CorruptFileError
        The file is damaged (``vhdf5 check`` says where).
    """
    done: set[str] = set()
    if isinstance(path, h5py.File):
        report = FillReport(file_name(path))
        with mutating(path, what="chunk maps"):
            _fill_batch(path, report, done, None, progress)
        return report
    path = os.fspath(path)
    report = FillReport(path)
    finished = False
    while not finished:
        with open_for_writing(path) as f, mutating(f, what="chunk maps"):
            finished = _fill_batch(f, report, done, time.monotonic() + BATCH_SECONDS, progress)
    return report


def _fill_batch(
    f: h5py.File,
    report: FillReport,
    done: set[str],
    deadline: float | None,
    progress: Callable[[int, int], None] | None,
) -> bool:
    """Fill the versions not ``done`` yet, oldest first, until ``deadline`` (``time.monotonic``; None:
    all); returns whether every version is done. Inside the caller's mutation of ``f``."""
    if VERSION_DATA not in f or VERSIONS not in f[VERSION_DATA]:
        raise NotVersionedError(
            f"{file_name(f)!r} is not a versioned file (no /{VERSION_DATA}/{VERSIONS} group): no versions to map"
        )
    registry = VersionRegistry(f)
    names = [n for n in registry if n != FIRST_VERSION and registry.info(n).committed]
    names.sort(key=lambda n: registry.timestamp_micros(n) or 0)  # oldest first: bases logged first
    todo = [n for n in names if n not in done]
    small = _small_rows(f)
    versions = f[f"{VERSION_DATA}/{VERSIONS}"]
    total = len(done) + len(todo)
    for name in todo:
        _fill_version(f, versions[name], name, registry.parent(name), small, report)
        done.add(name)
        report.versions += 1
        if progress is not None:
            progress(len(done), total)
        if deadline is not None and time.monotonic() > deadline:
            return done.issuperset(todo)
    return True


def _fill_version(f: h5py.File, group: h5py.Group, name: str, parent: str, small: set, report: FillReport) -> None:
    """The maps of one version's datasets that lack them; its rows of the file's map log in one append."""
    stamp = chunkmaps.timestamp_micros(f, name)
    batch = smallmaps.Batch(name, stamp)
    base = parent if parent != FIRST_VERSION and parent in group.parent else None  # logged on its parent
    for path, kind in walk_links(group.id):
        if kind != h5o.TYPE_DATASET:
            continue
        where = f"{name}/{path}"
        raw_path = f"/{VERSION_DATA}/{path}/raw_data"
        raw = f.get(raw_path)
        try:
            owner = chunkmaps.table_owner(raw) if isinstance(raw, h5py.Dataset) else None
        except KeyError:  # no hash table beside raw_data
            owner = None
        logged = owner is not None and (name_digest(path), name_digest(name), stamp, *owner) in small
        if logged or chunkmaps.load(f, name, path) is not None:
            report.present += 1  # (found by name: the virtual dataset is not opened)
            continue
        vds = group[path]
        if owner is None or not vds.is_virtual or not isinstance(raw, h5py.Dataset) or raw.chunks is None:
            report.skipped[where] = "not a virtual dataset over a chunked raw_data with a hash table"
            continue
        if raw.dtype.hasobject:
            report.skipped[where] = "variable-length data (decoded by readers, as committed)"
            continue
        try:
            chunks, named = version_dataset_layout(vds)
        except IncompatibleDataError as err:  # a dataset of the version group not in the format
            report.skipped[where] = str(err)
            continue
        if posixpath.normpath("/" + named.lstrip("/")) != raw_path or tuple(chunks) != tuple(raw.chunks):
            report.skipped[where] = f"maps {named!r} in chunks {tuple(chunks)}, not {raw_path} in {raw.chunks}"
            continue
        shape = tuple(int(n) for n in vds.shape)
        try:
            indices, offsets = build_slab_indices_and_offsets(vds, shape, chunks, raw)
        except ValueError as err:
            report.skipped[where] = str(err)
            continue
        stored = chunkmaps.record(
            f,
            name,
            path,
            vds.id,
            raw,
            shape,
            tuple(int(c) for c in chunks),
            indices,
            offsets,
            committed_before=committed_chunks(raw),
            base_version=base,
            small=batch,
        )
        if stored or len(shape) <= smallmaps.MAX_NDIM:
            report.stored += 1
        else:
            report.skipped[where] = f"{len(shape)} dimensions: the file's map log holds {smallmaps.MAX_NDIM} at most"
    batch.write(f)
