"""Reading versions at the h5py level while other processes write the file.

``VersionedHDF5File(h5py.File(path, "r"))`` holds an HDF5 handle: libhdf5
caches the file's metadata, which goes stale once another process commits
(raw_data's chunk index is rewritten in place), and with libhdf5's default
locking the handle blocks every writer. :class:`SharedVersionedFile`
(``VersionedHDF5File.open(path)``) holds none between calls:

- the version list is read through a fresh read-only handle under the file's
  ``WRITE`` lock held shared (:meth:`~xarray_vhdf5._versions.sharing.SharedFile.open`),
  then the handle is closed; every call that needs it first reads the file's
  ``writes`` counter (16 bytes, :mod:`~xarray_vhdf5._versions.generation`) and
  reads the list again when another process wrote since;
- a version's group (:class:`SharedVersionGroup`) is a snapshot of the
  version's tree: member names and kinds, the groups' attributes;
- a dataset (:class:`SharedVersionDataset`) is a snapshot of its metadata
  (shape, dtype, chunks, filters, attributes) and of its chunk manifest
  (:class:`~xarray_vhdf5._backend.manifest.ChunkManifest`: the file offsets of
  its chunks); its points are read and decoded without libhdf5, through
  :meth:`~xarray_vhdf5._versions.sharing.SharedFile.read`, which resolves the
  version again when chunks moved (a deletion, ``modify_metadata``) and raises
  :class:`~xarray_vhdf5.errors.VersionNotFoundError` once the version was
  deleted. Datasets whose chunks cannot be decoded here (variable-length
  strings, filters without a decoder) are read through a fresh handle per
  read, under the same lock.

A commit waits for a reader only while the reader resolves something
(milliseconds), never while it holds objects; a reader arriving while a
writer waits waits for it (:mod:`~xarray_vhdf5._versions.locking`, the
gates). A dataset whose version was deleted, or deleted and committed again
under the same name, raises ``VersionNotFoundError``. Caveat (libhdf5): a process
opens a file once, so an ``h5py.File`` of the same file kept open elsewhere in
the process shares its (possibly stale) metadata cache with the "fresh"
handles; close it first.

Modules: this one holds the file (:class:`SharedVersionedFile`: the version list,
the fresh handles, the cache of versions got before);
:mod:`~xarray_vhdf5._versions.reader_tree` a version's group tree and
:mod:`~xarray_vhdf5._versions.reader_dataset` its datasets.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

import h5py
import numpy as np

from .._backend.layout import DATA_VERSION, FIRST_VERSION, version_path
from ..errors import ClosedFileError, IncompatibleDataError, ReadOnlyError, VersionNotFoundError, VHDF5Error
from . import generation
from .chunkcheck import DAMAGE_ERRORS
from .locking import file_locks
from .reader_dataset import SharedVersionDataset
from .reader_tree import _HINT, _READ_ONLY, SharedAttrs, SharedVersionGroup, _Tree
from .rebuild import chunk_diff
from .registry import VersionInfo, VersionKey, VersionRegistry
from .sharing import SharedFile

__all__ = ["SharedAttrs", "SharedVersionDataset", "SharedVersionGroup", "SharedVersionedFile"]


class _Registry(VersionRegistry):
    """A :class:`VersionRegistry` read through a handle that is closed afterwards.

    The two attributes the registry reads from the file on each use
    (``current_version``, ``data_version``) are read once here, so lookups
    (``resolve``, ``at_time``, ``info``) need no file.
    """

    def __init__(self, f: h5py.File, token: tuple):
        super().__init__(f)
        self._current = super().current_version
        self._data_version = super().data_version
        from . import refs

        self._refs = refs.snapshot(f)  # branches and tags, read with the list
        self.token = token  # the file's state it was read at (SharedVersionedFile._token)

    current_version = property(lambda self: self._current)
    data_version = property(lambda self: self._data_version)

    def ref(self, name: str) -> str | None:
        """:meth:`VersionRegistry.ref`, from the refs read with the list."""
        from . import refs

        current = None if self._current == FIRST_VERSION else self._current
        return refs.resolve_in(self._refs, name, current, self.__contains__, "the file")


#: Bytes of version trees and dataset manifests a reader keeps for reuse (an estimate).
CACHE_BYTES = 64 * 1024 * 1024
#: A version of at most this many datasets has them resolved in the open that reads its tree.
PREFETCH = 4


class _Lru:
    """A least-recently-used cache bounded by the sizes its entries are given (bytes)."""

    def __init__(self, budget: int):
        self._entries: dict = {}
        self._budget, self._used = budget, 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            item = self._entries.pop(key, None)
            if item is None:
                return None
            self._entries[key] = item  # most recent last
            return item[0]

    def put(self, key, value, size: int) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._used -= old[1]
            self._entries[key] = (value, size)
            self._used += size
            while self._used > self._budget and len(self._entries) > 1:
                oldest = next(iter(self._entries))
                self._used -= self._entries.pop(oldest)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._used = 0


class SharedVersionedFile:
    """The committed versions of a file, read while other processes write it.

    Made by :meth:`VersionedHDF5File.open <xarray_vhdf5._versions.file.VersionedHDF5File.open>`;
    see the module for what is held and what is read when. Answers
    ``VersionedHDF5File``'s read API; every call that needs the version list
    reads the file's ``writes`` counter first (16 bytes) and lists the
    versions again, under the file's lock through a fresh handle, when
    another process wrote the file since.

    Parameters
    ----------
    path : str or os.PathLike
        The versioned HDF5 file.
    verify : bool, keyword-only
        Datasets check each chunk they read against the hash table's SHA-256
        digest (:class:`~xarray_vhdf5.errors.CorruptFileError` on a mismatch).
        Not for datasets read through libhdf5 (variable-length strings, filters
        without a decoder here).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    NotHDF5Error
        ``path`` is not an HDF5 file.
    NotVersionedError
        The file has no version history.
    IncompatibleDataError
        The file was written by a newer format (``data_version`` > 4).
    FileBusyError
        A writer held the file past the reader's timeout (``VHDF5_LOCK_TIMEOUT``).
    TypeError
        ``path`` is not a path (an open ``h5py.File``: use ``VersionedHDF5File(f)``).
    """

    def __init__(self, path: str | os.PathLike, *, verify: bool = False):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(
                f"VersionedHDF5File.open takes a path, got {type(path).__name__}; wrap an open h5py "
                "file with VersionedHDF5File(f) instead"
            )
        self.path = os.path.abspath(os.fspath(path))
        self.verify = bool(verify)
        self._shared = SharedFile(self.path, verify=self.verify)
        self._closed = False
        self._listing: _Registry | None = None
        self._datasets: weakref.WeakSet = weakref.WeakSet()  # their manifests' descriptors, closed by close()
        # Version trees and datasets got before, by (name, timestamp): a committed version
        # never changes (moved chunks are resolved again at read, SharedFile.read).
        self._cache = _Lru(CACHE_BYTES)
        with self._handle():  # the first listing: fails here on a file that is not versioned
            pass

    # -- the file's state --------------------------------------------------------------
    def _token(self) -> tuple:
        """The file's ``writes`` counter, or for a file without counters its inode, mtime and size."""
        return self._counters()[0]

    def _counters(self) -> tuple[tuple, tuple]:
        """``(_token(), moves)``: the ``moves`` counter (chunks moved: datasets got before are stale)."""
        offset = self._shared.offset
        if offset is not None:
            raw = file_locks(self.path).pread(16, offset)
            if len(raw) == 16:
                counters = generation.read_at_bytes(raw)
                return ("writes", counters.writes), ("moves", counters.moves)
        st = os.stat(self.path)
        token = ("stat", st.st_ino, st.st_mtime_ns, st.st_size)
        return token, token

    @contextlib.contextmanager
    def _handle(self) -> Iterator[h5py.File]:
        """A fresh read-only handle under the ``WRITE`` lock (shared); the version list brought up to date."""
        self._check_open()
        with self._shared.open(hint=_HINT) as f:
            token = self._token()  # under the lock: no writer changes it meanwhile
            if self._listing is None or self._listing.token != token:
                listing = _Registry(f, token)
                if listing.data_version > DATA_VERSION:
                    raise IncompatibleDataError(
                        f"{self.path!r} has data_version {listing.data_version}; this package reads "
                        f"up to {DATA_VERSION}: upgrade xarray_vhdf5"
                    )
                self._listing = listing
            yield f

    @property
    def _read_listing(self) -> _Registry:
        """The version list as last read (``__init__`` reads it first)."""
        assert self._listing is not None, "read by __init__"
        return self._listing

    def _versions(self) -> _Registry:
        """The version list, read again first if another process wrote the file since."""
        self._check_open()
        if self._token() != self._read_listing.token:
            with self._handle():
                pass
        return self._read_listing

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedFileError(f"the reader of {self.path!r} is closed; open it again with VersionedHDF5File.open()")

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    def close(self) -> None:
        """Stop reading: later calls, and reads of the objects it returned, raise ``ClosedFileError``.

        Closes the file descriptors its datasets' manifests opened (no HDF5
        handle is held between calls).
        """
        self._closed = True
        for ds in list(self._datasets):
            if ds.manifest is not None:
                ds.manifest.close()
        # The cached trees and datasets refer back to this reader: dropped now, the
        # reader and what it made are freed by reference counting when the caller
        # lets them go, not by a later pass of Python's cycle collector.
        self._cache.clear()

    def __enter__(self) -> SharedVersionedFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return "<Closed SharedVersionedFile>"
        return f'<SharedVersionedFile "{self.path}" (read-only, shared), {len(self._read_listing)} versions>'

    # -- the history ---------------------------------------------------------------------
    @property
    def versions(self) -> list[str]:
        """Names of the committed versions, oldest first (as ``VersionedHDF5File.versions``)."""
        return self._versions().names()

    @property
    def current_version(self) -> str:
        """Name of the current version (``"__first_version__"`` before any commit)."""
        return self._versions().current_version

    @current_version.setter
    def current_version(self, name: str) -> None:
        raise ReadOnlyError(f"cannot set the current version of {self.path!r}: {_READ_ONLY}")

    @property
    def data_version_identifier(self) -> int:
        """The format's ``data_version`` attribute (4 for files this package writes)."""
        return self._versions().data_version

    def __iter__(self) -> Iterator[str]:
        return iter(self.versions)

    def __len__(self) -> int:
        return len(self._versions())

    def __contains__(self, name: object) -> bool:
        return name in self._versions()

    def resolve(self, key: VersionKey) -> str:
        """Name of the version ``key`` designates (see :meth:`__getitem__`).

        Raises
        ------
        VersionNotFoundError
            No such version; ``IndexError`` for a positive int, ``VersionKeyTypeError``
            for a key of another type, as ``VersionedHDF5File.resolve``.
        ClosedFileError
            The reader is closed.
        """
        return self._versions().resolve(key)

    def lookup(self, key: VersionKey) -> str:
        """The version ``key`` designates as ``xr.open_dataset(..., version=key)`` reads it.

        pandas-style positions (``0`` the first version) and ISO 8601 times, by
        :func:`~xarray_vhdf5._versions.lookup.lookup_version`; :meth:`resolve`
        keeps versioned-hdf5's rules (``0`` the current version). Raises as
        ``lookup_version``.
        """
        from .lookup import lookup_version

        return lookup_version(self._versions(), key)

    def list_branches(self) -> dict[str, str]:
        """Branch name -> version, ``main`` (the current version) first (:mod:`~xarray_vhdf5._versions.refs`)."""
        listing = self._versions()
        current = listing.current_version
        out = {} if current == FIRST_VERSION else {"main": current}
        out.update(sorted(listing._refs[1].items()))
        return out

    def list_tags(self) -> dict[str, str]:
        """Tag name -> version (:mod:`~xarray_vhdf5._versions.refs`)."""
        return dict(sorted(self._versions()._refs[0].items()))

    def version_info(self, key: VersionKey) -> VersionInfo:
        """Metadata (name, prev_version, timestamp) of a version; raises as :meth:`resolve`."""
        listing = self._versions()
        return listing.info(listing.resolve(key))

    def __getitem__(self, key: VersionKey) -> SharedVersionGroup:
        """The committed version ``key``: a snapshot of its group tree, read-only.

        Parameters
        ----------
        key : str, int, datetime, numpy.datetime64 or None
            A name; ``None`` or ``0`` for the current version; ``-n`` for the
            n-th ancestor of the current version; a timestamp for the version
            at that time or the latest before it.

        Raises
        ------
        VersionNotFoundError
            No such version (``KeyError``; the message lists existing ones).
        ClosedFileError
            The reader is closed.
        FileBusyError
            A writer held the file past the reader's timeout.
        """
        listing = self._versions()
        name = listing.resolve(key)
        ident = (name, listing.info(name).timestamp)
        tree = self._cache.get(("tree", ident))
        if tree is None:
            with self._handle() as f:
                name = self._read_listing.resolve(key)  # the listing may have been read again
                ident = (name, self._read_listing.info(name).timestamp)
                tree = _Tree(f, name)
                paths = [p for p in tree.order if tree.kinds[p] == "dataset"]
                if len(paths) <= PREFETCH:  # resolved in this open: their first use opens nothing
                    moves = self._counters()[1]
                    for path in paths:
                        try:
                            self._make_datasets(f, tree, [path], moves)
                        except (VHDF5Error, *DAMAGE_ERRORS):  # said when the dataset is asked for
                            pass
            self._cache.put(("tree", ident), tree, 1024)
        return SharedVersionGroup(self, tree)

    def read_versions(self, path: str, key: Any = (), versions: Iterable | None = None) -> np.ndarray:
        """One selection of dataset ``path`` read from many versions, stacked: a value's history.

        The same values as ``numpy.stack([reader[v][path][key] for v in versions])``,
        read through one HDF5 handle per :data:`~xarray_vhdf5._versions.reader_history.HOLD`
        seconds instead of two per version, each version's chunks located from
        the map log its commit appended to (the dataset's own from 64 chunks on,
        :mod:`~xarray_vhdf5._versions.maplog`; the file's for smaller ones,
        :mod:`~xarray_vhdf5._versions.smallmaps`), and each distinct set of
        chunks the selection touches read once
        (:mod:`~xarray_vhdf5._versions.reader_history`). Versions no log serves
        (committed by versioned-hdf5, or whose rows no longer hold) have their
        mappings decoded, with the same result.

        Parameters
        ----------
        path : str
            The dataset's path in the versions (``"x"``, ``"group/x"``).
        key : optional
            As ``reader[v][path][key]`` takes it, with h5py's rules: ints,
            slices of positive step, ``...``, one increasing 1-d integer
            list or array, a boolean mask; default everything.
        versions : iterable, optional
            Version keys as :meth:`resolve` takes them; default every committed
            version, oldest first (:attr:`versions`).

        Returns
        -------
        numpy.ndarray
            Shape ``(len(versions), *selection)``, the dataset's dtype (bytes
            objects for variable-length strings, as h5py reads them).

        Raises
        ------
        VersionNotFoundError
            A version key names no version.
        KeyError
            ``path`` is not a dataset of one of the versions (the message names it).
        IndexError
            ``key`` is out of bounds in one of the versions (the message names it).
        TypeError
            ``key`` holds ``None``, a field name or an unsorted list (h5py's
            rules; the message names the version).
        ValueError
            The selection has different shapes in different versions (a slice
            running past the end of an axis that grew), or ``versions`` is empty.
        CorruptFileError, FileBusyError, ClosedFileError
            As for reading a dataset.
        """
        from .reader_history import read_versions

        self._check_open()
        return read_versions(self, path, key, versions)

    def get_version_by_name(self, version: str) -> SharedVersionGroup:
        """The committed version named ``version`` (``""`` or None: the current one)."""
        return self[version or None]

    def get_version_by_timestamp(self, timestamp, exact: bool = False) -> SharedVersionGroup:
        """The version committed at ``timestamp``, else (``exact=False``) the latest before.

        Raises
        ------
        VersionNotFoundError
            Every version is newer (or, ``exact``, none has that timestamp).
        """
        with self._handle() as f:
            return SharedVersionGroup(self, _Tree(f, self._read_listing.at_time(timestamp, exact=exact)))

    def get_diff(self, name: str, version1: VersionKey, version2: VersionKey) -> dict:
        """The chunks of dataset ``name`` that differ between two versions, with their data.

        As ``VersionedHDF5File.get_diff`` (:func:`~xarray_vhdf5._versions.rebuild.chunk_diff`),
        read through one fresh handle under the file's lock.

        Returns
        -------
        dict of ndindex.Tuple to (numpy.ndarray or None, numpy.ndarray or None)
            Per differing stored region (points), its data in each version.

        Raises
        ------
        VersionNotFoundError
            No such version.
        KeyError
            ``name`` is not a dataset of one of the versions.
        IncompatibleDataError
            ``name`` is not a versioned (chunk-mapped) dataset.
        """
        with self._handle() as f:
            datasets = []
            for key in (version1, version2):
                version = self._read_listing.resolve(key)
                obj = f[version_path(version)].get(name)
                if not isinstance(obj, h5py.Dataset):
                    raise KeyError(f"no dataset {name!r} in version {version!r}")
                datasets.append(obj)
            return chunk_diff(*datasets)

    def _refuse(self, *args, **kwargs):
        raise ReadOnlyError(f"{self.path!r} is {_READ_ONLY}")

    stage_version = delete_versions = __delitem__ = rebuild_hashtables = _refuse
    rebuild_object_dtype_hashtables = _refuse

    # -- datasets --------------------------------------------------------------------------
    def _datasets_of(self, tree: _Tree, paths: list[str]) -> list[SharedVersionDataset]:
        """The datasets at ``paths`` of ``tree``, resolved through one fresh handle."""
        if not paths:
            return []
        self._check_open()
        token, moves = self._counters()  # one read of the counters for both uses
        if token != self._read_listing.token:
            with self._handle():  # the version list read again
                pass
        listing = self._read_listing
        try:  # metadata are a snapshot: got again after chunks moved (modify_metadata, deletions)
            ident = (tree.version, listing.info(tree.version).timestamp, moves)
        except VersionNotFoundError:
            ident = None
        found = {path: self._cache.get(("dataset", ident, path)) for path in paths} if ident else {}
        missing = [path for path in paths if found.get(path) is None]
        if missing:
            with self._handle() as f:
                found.update(self._make_datasets(f, tree, missing, moves))
        return [found[path] for path in paths]

    def _make_datasets(self, f: h5py.File, tree: _Tree, paths: list[str], moves: tuple) -> dict:
        """The datasets at ``paths`` of ``tree`` resolved through the open handle ``f``, cached for reuse."""
        listing = self._read_listing
        try:
            ident = (tree.version, listing.info(tree.version).timestamp, moves)
        except VersionNotFoundError:
            ident = None
        made_now = {}
        for path in paths:
            made_now[path] = made = SharedVersionDataset(self, tree, path, f)
            self._datasets.add(made)
            if ident is not None:  # chunks that move later are resolved again at read
                size = made.manifest.slots.nbytes + 32 * made.manifest.rows.size if made.manifest else 0
                self._cache.put(("dataset", ident, path), made, 1024 + size)
        return made_now
