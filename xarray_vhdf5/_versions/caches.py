"""What commits keep from one to the next, and its sharing between handles to one file.

A commit needs the dataset's hash table (every digest stored so far: loading it
reads all its rows, O(history)) and, to stage the next version, where the last
version's chunks live (decoding a virtual dataset's mappings costs libhdf5
time per mapping: ``docs/benchmarks.md``). :class:`CommitCaches` keeps both after a commit.

Pipelines often open the file for each commit (a daily job, xarray's
``commit(path=...)``). So that they too pay O(1) per commit, the caches of a
file are kept in this process after its :class:`~xarray_vhdf5.VersionedHDF5File`
is gone (the last :data:`SHARED_FILES` files, by device and inode) and taken
up by the next handle to the same file, on one condition: the file still
carries the random *commit token* written with them (by the first commit
through them) on this package's bookkeeping group (``/__vhdf5__``, or where a
file written before keeps it: :mod:`~xarray_vhdf5._versions.bookkeeping`;
versioned-hdf5's objects are left as it writes them). A file replaced by another
one at the same path (or reusing the inode)
has another token, or none, and gets fresh caches.

Every entry is still checked before use, as within one handle: hash tables
against their ``largest_index`` and last digest, chunk maps against the
version's timestamp and the hash table
(:mod:`xarray_vhdf5._backend.hashtable`, :mod:`xarray_vhdf5._backend.chunkmap_cache`),
so changes made in between by another library (versioned-hdf5 adding or
deleting versions) are seen.
"""

from __future__ import annotations

import os
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field

import h5py
import numpy as np
from h5py import h5o

from .._backend.chunkmap_cache import ChunkMapCache
from .._backend.h5attrs import read_attr, write_attr
from .._backend.hashtable import HashTableCache
from .._backend.held import OpenDatasets
from . import bookkeeping

__all__ = ["COMMIT_TOKEN", "SHARED_FILES", "CommitCaches", "caches_for", "forget_shared_caches"]

#: How many files' caches this process keeps after their handles are gone.
SHARED_FILES = 4

#: Attribute of the bookkeeping group holding the token of the last commit made here.
COMMIT_TOKEN = "commit_token"


@dataclass
class _Kept:
    """What this process keeps of one file between handles (no h5py object: they would hold it open)."""

    hash_tables: HashTableCache = field(default_factory=HashTableCache)
    chunk_map_cache: ChunkMapCache = field(default_factory=ChunkMapCache)
    token: int | None = None


class CommitCaches:
    """What a :class:`~xarray_vhdf5.VersionedHDF5File` keeps from one commit to the next.

    ``hash_tables``: loaded hash tables (:class:`~xarray_vhdf5._backend.hashtable.HashTableCache`);
    ``chunk_map_cache``: where the last version's chunks live
    (:class:`~xarray_vhdf5._backend.chunkmap_cache.ChunkMapCache`). Together they keep
    the cost of a commit independent of the history's length; they may be
    shared with earlier handles to the same file (:func:`caches_for`).
    ``open_datasets``: this handle's open ``hash_table`` and ``raw_data``
    datasets (:class:`~xarray_vhdf5._backend.held.OpenDatasets`), never shared.
    """

    def __init__(self, kept: _Kept | None = None) -> None:
        self._kept = kept if kept is not None else _Kept()
        self.open_datasets = OpenDatasets()

    @property
    def hash_tables(self) -> HashTableCache:
        return self._kept.hash_tables

    @property
    def chunk_map_cache(self) -> ChunkMapCache:
        return self._kept.chunk_map_cache

    @property
    def token(self) -> int | None:
        """The commit token written with these caches' content (None: not shareable)."""
        return self._kept.token

    def clear(self) -> None:
        """Forget everything (versions deleted or rewritten, or a commit failed)."""
        self.hash_tables.clear()
        self.chunk_map_cache.clear()
        self.open_datasets.clear()
        self._kept.token = None

    def committed(self, vdata: h5py.Group, index_rewritten: bool = True) -> None:
        """Stamp the file with a commit token after a commit that filled these caches.

        A fresh token is written by the first commit of these caches (and the
        first after :meth:`clear`); later commits through them keep it, since
        the file then still holds what the caches describe, plus what they
        were told of. Without a version index (a file open where it cannot be
        written), no token: these caches are then not shared.

        ``index_rewritten``: False when the commit appended to the version
        index (the registry found it valid) rather than writing it again. The
        token these caches wrote is then still on it, and it is not read back:
        another writer's token comes with another writer's commit or deletion,
        which clears these caches (``VersionedHDF5File`` syncs before each
        operation), and with them the token.
        """
        self.hash_tables.release()  # kept tables hold no h5py handle (it would keep the file open)
        if self._kept.token is not None and not index_rewritten:
            return
        index = _index_group(vdata)
        if index is None:
            self._kept.token = None
            return
        if self._kept.token is not None and self._kept.token == _token_of(index):
            return
        token = secrets.randbits(63)
        write_attr(index, COMMIT_TOKEN, np.int64(token))
        self._kept.token = token


_SHARED: OrderedDict[tuple[int, int], _Kept] = OrderedDict()


def _file_key(f: h5py.File) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file on disk, or None (in-memory file, file object).

    A file opened through a journaled file object (:func:`~xarray_vhdf5._versions.mutation.open_file`)
    is the file on disk it journals.
    """
    from .mutation import disk_path

    path = disk_path(f)
    if path is None:  # not a plain file on disk
        return None
    try:
        st = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _index_group(vdata: h5py.Group):
    """The bookkeeping group's low-level id (its place, else the legacy one), or None."""
    for path in bookkeeping.SEARCH:
        try:
            return h5o.open(vdata.id, path)
        except KeyError:
            continue
    return None


def _token(vdata: h5py.Group) -> int | None:
    index = _index_group(vdata)
    return None if index is None else _token_of(index)


def _token_of(index) -> int | None:
    try:
        return int(read_attr(index, COMMIT_TOKEN, expect="int"))
    except (KeyError, TypeError, ValueError):
        return None


def caches_for(f: h5py.File, vdata: h5py.Group) -> CommitCaches:
    """The commit caches for a new handle to the file ``f`` (``vdata``: its ``_version_data``).

    Those this process kept for the same file, when it still carries their
    commit token; otherwise new, empty ones (registered for the file when it
    is on disk and writable).
    """
    key = _file_key(f)
    if key is None or f.mode == "r":
        return CommitCaches()
    kept = _SHARED.pop(key, None)
    if kept is None or kept.token is None or kept.token != _token(vdata):
        kept = _Kept()
    _SHARED[key] = kept
    while len(_SHARED) > SHARED_FILES:
        _SHARED.popitem(last=False)
    return CommitCaches(kept)


def forget_shared_caches() -> None:
    """Drop every file's kept caches (frees their memory; the next commits reload)."""
    _SHARED.clear()
