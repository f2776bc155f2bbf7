"""Reading a versioned file that other processes write: :class:`SharedFile`.

A reader resolves a version once under the file's ``WRITE`` lock, held
shared, through a fresh read-only handle (libhdf5's locking off), then reads
chunk bytes with no HDF5 handle open (:mod:`~xarray_vhdf5._backend.manifest`),
checking the file's moves counter (:mod:`~xarray_vhdf5._versions.generation`)
under the ``MOVE`` lock before each read and resolving again when chunks
moved. See :mod:`~xarray_vhdf5._versions.locking` for the locks.

Caveat (libhdf5): a process opens a file once; a second ``h5py.File`` of a
file the process already holds open shares the first's metadata cache. A
handle this process holds elsewhere that went stale (opened read-only with
locking off before another process committed) makes the "fresh" handle stale
too; the engine and :class:`SharedFile` hold none between reads.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import h5py
import numpy as np
from h5py import h5o

from .._backend.h5attrs import read_attr_of
from .._backend.layout import versions_path
from .._backend.manifest_resolve import resolve_manifest
from .._backend.signature import open_for_reading
from ..errors import HDF5Error, VersionNotFoundError, VHDF5Error
from . import generation
from .journal import journal_path, roll_back_interrupted
from .locking import file_locks
from .openrepair import interrupted_damage, repair_at

__all__ = ["SharedFile", "version_dataset", "version_timestamp"]


class SharedFile:
    """A versioned file read by path: fresh read-only handles under the ``WRITE`` lock, shared.

    The engine holds no HDF5 handle between reads. It resolves a version once,
    under the file's lock (:meth:`open`), into one
    :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` per variable, and reads
    chunk bytes afterwards without libhdf5, so a writer updating the file's
    metadata in place never breaks a reader and a reader never blocks a
    commit (:mod:`~xarray_vhdf5._versions.locking`). Pickles by value: dask
    workers read the same way.

    Parameters
    ----------
    path : str
        The file.
    verify : bool
        Re-hash every chunk read and compare with the hash table (``open_dataset(verify=True)``).
    """

    def __init__(self, path: str, verify: bool = False):
        self.path = path
        self.verify = verify
        self.offset: int | None = None  # of the file's counters (versions.generation)
        self.moves = 0  # the moves counter when the version was resolved
        self.stat: tuple[int, int] | None = None  # (mtime_ns, size) when resolved without counters
        #: :meth:`stamp` of the first :meth:`open`: what holders made then, without a
        #: ``resolved`` stamp of their own, were resolved at (see :meth:`read`).
        self.resolved: tuple | None = None

    @contextlib.contextmanager
    def open(self, hint: str = "") -> Iterator[h5py.File]:
        """A fresh read-only handle (holding no ``flock``) while the ``WRITE`` lock is held shared.

        Raises
        ------
        FileBusyError
            A writer held the file past the reader's timeout.
        CorruptFileError
            libhdf5 found the file damaged (truncated, a failed checksum, ...),
            opening it or inside the ``with`` block.
        NotHDF5Error, OSError
            As :func:`~xarray_vhdf5._backend.signature.open_h5file`.
        """
        locks = file_locks(self.path)
        jpath = journal_path(self.path)
        # The first open looks for what a writer killed inside libhdf5's flush leaves
        # (versions.openrepair) and has it repaired, once, under WRITE held exclusively.
        look = self.resolved is None
        while True:
            # A journal exists only while a writer holds WRITE exclusively, or after it died.
            # The shared lock waits for a live one (its journal goes with its commit); a
            # journal still there under it is a dead writer's, rolled back under WRITE held
            # exclusively. So a reader never competes as a writer with a live one.
            if os.path.exists(jpath):
                with locks.resolving():
                    dead = os.path.exists(jpath)
                if dead:
                    roll_back_interrupted(self.path, locks)
            damage = None
            with locks.resolving(), _damage_as_corrupt_file(self.path):
                if os.path.exists(jpath):
                    continue  # a writer died since the check above: roll it back first
                f = open_for_reading(self.path, hint=hint)
                if look:
                    look, damage = False, interrupted_damage(f)
                if damage is None:
                    try:
                        self.offset = generation.locate(f)
                        self.moves = self._moves(locks)
                        if self.offset is None:
                            st = os.stat(self.path)
                            self.stat = (st.st_mtime_ns, st.st_size)
                        if self.resolved is None:
                            self.resolved = self.stamp()
                        yield f
                    finally:
                        f.close()
                    return
                f.close()
            repair_at(self.path, damage)  # takes WRITE exclusively: outside the shared hold

    def _moves(self, locks) -> int:
        if self.offset is None:
            return 0
        return generation.read_at_bytes(locks.pread(16, self.offset).ljust(16, b"\0")).moves

    def stamp(self) -> tuple:
        """What chunk addresses resolved through the last :meth:`open` depend on.

        ``(offset of the counters or None, moves, (mtime_ns, size) or None)``: pass it to
        :meth:`current` later. Call it inside the :meth:`open` block that resolved them.
        """
        return (self.offset, self.moves, self.stat)

    def current(self, locks, stamp: tuple | None = None) -> bool:
        """True while chunk addresses resolved at ``stamp`` are still valid (no chunk moved since).

        ``stamp``: from :meth:`stamp`; default that of the last :meth:`open`.
        """
        offset, moves, stat = self.stamp() if stamp is None else stamp
        if offset is None:
            st = os.stat(self.path)  # counters created since? (a file we never wrote)
            return (st.st_mtime_ns, st.st_size) == stat
        return generation.read_at_bytes(locks.pread(16, offset).ljust(16, b"\0")).moves == moves

    def close(self) -> None:
        """Nothing is held between reads: nothing to close."""

    def read(self, holder, key: tuple) -> np.ndarray:
        """``holder.manifest.read(key)``, resolved again first if chunks moved since (see :meth:`apply`)."""
        return self.apply(holder, lambda manifest: manifest.read(key), lambda vds: holder.read_through(vds, key))

    def apply(self, holder, use, through=None):
        """``use(holder.manifest)``, resolved again first if chunks moved since.

        ``holder`` has ``manifest`` (a :class:`~xarray_vhdf5._backend.manifest.ChunkManifest`,
        or None: resolved on the first read; when it cannot be read without
        libhdf5, ``through(vds)`` reads it through the handle, if given),
        ``version`` and ``path`` (of its virtual dataset) and ``_lock`` (a
        ``threading.Lock``); its manifest is replaced when resolved again, and
        ``holder.resolved`` set to the :meth:`stamp` it was resolved at (a holder
        without one was resolved in the first :meth:`open`: each holder is
        checked against its own resolution, so that one resolved again does
        not make the others look current). The
        ``MOVE`` lock is held shared while bytes are read and released before
        resolving (which takes ``WRITE`` shared: a mover holds ``WRITE`` then
        takes ``MOVE``, so a reader never holds ``MOVE`` while it waits for
        ``WRITE``).

        Raises
        ------
        VersionNotFoundError
            The version was deleted since ``holder`` was made.
        CorruptFileError
            A chunk does not decode (or, verifying, its hash differs).
        FileBusyError
            A writer held the file past the reader's timeout.
        """
        locks = file_locks(self.path)
        while True:
            with holder._lock:
                manifest, stamp = holder.manifest, getattr(holder, "resolved", None) or self.resolved
            if manifest is not None:
                with locks.reading_bytes():
                    if self.current(locks, stamp):
                        return use(manifest)
            with holder._lock:
                with self.open() as f:
                    vds = version_dataset(f, holder.version, holder.path, getattr(holder, "timestamp", None))
                    manifest = resolve_manifest(vds, verify=self.verify)
                    if not manifest.supported and through is not None and hasattr(holder, "read_through"):
                        return through(vds)  # no decoder here: libhdf5, this handle
                    holder.manifest = manifest
                    holder.resolved = self.stamp()

    def __getstate__(self) -> dict:
        return dict(self.__dict__)


@contextlib.contextmanager
def _damage_as_corrupt_file(path: str) -> Iterator[None]:
    """libhdf5's errors that say the file is damaged (truncated, bad checksum, ...) as CorruptFileError."""
    from .check import corrupt_file_error

    try:
        yield
    except VHDF5Error as exc:
        # Our kernels' HDF5Error carries libhdf5's error stack: it may say damage too.
        error = corrupt_file_error(path, exc) if isinstance(exc, HDF5Error) else None
        if error is None:
            raise
        raise error from exc
    except (OSError, RuntimeError, KeyError) as exc:  # h5py's (not xarray's ValueErrors)
        error = corrupt_file_error(path, exc)
        if error is None or error is exc:
            raise
        raise error from exc


def version_timestamp(f: h5py.Group, version: str):
    """The ``timestamp`` attribute of ``version``'s group: what tells a version from a later one of the same name.

    ``f``: the file or any group of it (the version is found from the root).
    None when the group has no ``timestamp``; ``KeyError`` when there is no
    such version. Read with libhdf5's calls (``H5Oopen``, ``H5Aopen``), as
    h5py's ``attrs.get`` would convert it.
    """
    group = h5o.open(f.id, f"{versions_path()}/{version}".encode("utf-8", "surrogateescape"))
    try:
        return read_attr_of(group, b".", "timestamp")
    except KeyError:
        return None


def version_dataset(f: h5py.File, version: str, path: str, timestamp=None) -> h5py.Dataset:
    """The dataset at ``path`` of ``f``, which must still be in ``version``.

    ``timestamp``: the version's ``timestamp`` attribute when it was opened
    (:func:`version_timestamp`); a version of the same name with another one
    was committed after the first was deleted.

    Raises
    ------
    VersionNotFoundError
        The version was deleted since the Dataset was opened (and perhaps
        committed again under the same name).
    """
    versions = f.get(versions_path())
    if (
        versions is None
        or version not in versions
        or path not in f
        or (timestamp is not None and version_timestamp(f, version) != timestamp)
    ):
        raise VersionNotFoundError(
            f"{f.filename!r}: version {version!r} was deleted while a Dataset read from it was open; "
            "open another version"
        )
    return f[path]
