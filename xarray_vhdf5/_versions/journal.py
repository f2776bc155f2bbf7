"""A rollback journal, so that a commit is whole or absent after a crash or a power cut.

libhdf5 has no transactions: a flush rewrites B-tree nodes, heaps, object
headers and the superblock in place, and a process killed (or a machine
losing power) in the middle leaves a mix of old and new metadata that can take
every version with it. As SQLite's rollback journal does, a writer of this
package therefore saves the bytes a mutation (a commit, a deletion,
``modify_metadata``) overwrites before overwriting them, and a later opener
puts them back if the mutation did not finish:

``<file>-journal`` (beside the file)
    A header (magic, the file's size when the mutation began, a random id),
    then one record per byte range of the file overwritten for the first time
    in the mutation: offset, length, the old bytes and a CRC-32 of the record.
    Bytes written past the old end of the file need no record: rolling back
    truncates the file to its old size.

The protocol, per mutation (:meth:`JournaledFile.begin` / :meth:`~JournaledFile.end`):

1. the journal is created with its header;
2. before each first overwrite of a byte range below the old size, its record
   is appended to the journal;
3. when the mutation ends, the journal is deleted: that deletion is the commit
   point.

With ``durable=True`` the ordering is made to survive power loss with
``fsync``: the journal (and its directory entry) before the file is first
overwritten, each record before its range is overwritten, the file before the
journal is deleted, and the directory after. With ``durable=False`` (the
default) nothing is synced: every ``write`` reaches the operating system's
page cache in order, which a killed process cannot undo, so a SIGKILL at any
instant is safe, a power cut is not. :func:`recover` rolls back a journal left
by a writer that died (found by every opener of this package, under the
file's exclusive lock, so never the journal of a live writer).

:class:`JournaledFile` is the file object through which libhdf5 writes (h5py's
``fileobj`` driver); its ``io`` (:class:`OsIO`) does the system calls, which a
test replaces to simulate power cuts (:mod:`xarray_vhdf5.testing._powercut`).
A handle that another process's writes made stale cannot write the file at
all: its writes and truncations outside a mutation are dropped (libhdf5 would
otherwise write its stale superblock when the handle closes).
"""

from __future__ import annotations

import io
import os
import struct
import zlib
from typing import TYPE_CHECKING

from ..errors import CorruptFileError

if TYPE_CHECKING:  # typing only: generation reads the file through h5py, which this module does not need
    from .generation import Counters

__all__ = ["JOURNAL_SUFFIX", "JournaledFile", "OsIO", "journal_path", "recover", "roll_back_interrupted"]

#: Suffix of the journal beside the file.
JOURNAL_SUFFIX = "-journal"
_MAGIC = b"VHDF5JNL"
_HEADER = struct.Struct("<8sQQ")  # magic, old size, id
_RECORD = struct.Struct("<QQI")  # offset, length, crc32(offset, length, bytes)


def journal_path(path: str | os.PathLike) -> str:
    """The journal of the file at ``path``."""
    return os.fspath(path) + JOURNAL_SUFFIX


class OsIO:
    """The system calls of the journal: one place, so a test can simulate a power cut."""

    def open(self, path: str, create: bool = False) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_TRUNC if create else 0)
        return os.open(path, flags, 0o666)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def pwrite(self, fd: int, data, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _record_crc(offset: int, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(struct.pack("<QQ", offset, len(data)))) & 0xFFFFFFFF


class JournaledFile(io.RawIOBase):
    """A binary file for h5py's ``fileobj`` driver that journals what a mutation overwrites.

    Parameters
    ----------
    path : str
        The HDF5 file (opened read-write; it must exist).
    durable : bool
        ``fsync`` in the journal's order (see the module), so that a power cut
        loses at most the mutation it interrupts. Default False.
    io : OsIO, optional
        The system calls (a test's simulated disk).

    Notes
    -----
    ``h5py.File(JournaledFile(path), "a")`` gives a handle whose writes go
    through :meth:`write`; :func:`~xarray_vhdf5._versions.mutation.open_for_writing`
    and :func:`~xarray_vhdf5._versions.mutation.open_file` make them. Outside a
    mutation writes pass straight through, unless :attr:`stale` is set.
    """

    def __init__(self, path: str, *, durable: bool = False, io: OsIO | None = None):
        super().__init__()
        self.path = os.fspath(path)
        self.durable = durable
        self.io = io or OsIO()
        self._fd = self.io.open(self.path)
        self._pos = 0
        self._journal: int | None = None  # the journal's descriptor during a mutation
        self._journal_end = 0
        self._old_size = 0
        self._saved: list[tuple[int, int]] = []  # sorted, disjoint ranges [start, stop) journaled
        self._synced = True  # every record appended so far is on disk (durable mode)
        self.stale = False  # another process wrote the file: drop writes outside mutations
        #: The file's write counters as this handle last saw them, and their offset
        #: (set by :mod:`~xarray_vhdf5._versions.mutation`), to notice staleness at close.
        self.seen: Counters | None = None
        self.counters_offset: int | None = None

    # -- the mutation ------------------------------------------------------------------
    @property
    def in_mutation(self) -> bool:
        return self._journal is not None

    def begin(self) -> None:
        """Start journaling: the file's current size is the size a rollback restores."""
        if self._journal is not None:
            raise RuntimeError(f"{self.path!r}: a mutation is already being journaled")
        self._old_size = self.io.size(self._fd)
        jpath = journal_path(self.path)
        fd = self.io.open(jpath, create=True)
        header = _HEADER.pack(_MAGIC, self._old_size, int.from_bytes(os.urandom(8), "little"))
        self.io.pwrite(fd, header, 0)
        if self.durable:
            self.io.fsync(fd)
            self.io.fsync_dir(jpath)
        self._journal, self._journal_end = fd, len(header)
        self._saved = []
        self._synced = True

    def end(self) -> None:
        """Finish the mutation: the file synced (durable), then the journal deleted (the commit point)."""
        if self._journal is None:
            return
        if self.durable:
            self.io.fsync(self._fd)
        fd, self._journal = self._journal, None
        self.io.close(fd)
        jpath = journal_path(self.path)
        self.io.unlink(jpath)
        if self.durable:
            self.io.fsync_dir(jpath)

    def abandon(self) -> None:
        """Stop journaling after a failed mutation: roll back what it wrote (see :func:`recover`)."""
        if self._journal is None:
            return
        fd, self._journal = self._journal, None
        self.io.close(fd)
        recover(self.path, io=self.io, fd=self._fd)

    def _save(self, start: int, stop: int) -> None:
        """Journal the old bytes of ``[start, stop)`` not journaled yet (all below the old size)."""
        gaps, cursor = [], start
        for s, e in self._saved:
            if e <= cursor:
                continue
            if s >= stop:
                break
            if s > cursor:
                gaps.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < stop:
            gaps.append((cursor, stop))
        journal = self._journal
        assert journal is not None, "saved only during a mutation"
        for s, e in gaps:
            old = self.io.pread(self._fd, e - s, s)
            record = _RECORD.pack(s, len(old), _record_crc(s, old)) + old
            self.io.pwrite(journal, record, self._journal_end)
            self._journal_end += len(record)
            self._synced = False
        if gaps:
            merged = sorted(self._saved + gaps)
            self._saved = []
            for s, e in merged:
                if self._saved and s <= self._saved[-1][1]:
                    self._saved[-1] = (self._saved[-1][0], max(e, self._saved[-1][1]))
                else:
                    self._saved.append((s, e))

    def _is_stale(self) -> bool:
        """True once another process has written the file since this handle's last mutation."""
        if not self.stale and self.seen is not None and self.counters_offset is not None:
            raw = self.io.pread(self._fd, 16, self.counters_offset)
            self.stale = raw != struct.pack("<qq", *self.seen)
        return self.stale

    # -- the file object h5py drives -----------------------------------------------------
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            self._pos = offset
        elif whence == os.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self.io.size(self._fd) + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self.io.pread(self._fd, len(view), self._pos)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n, start = len(view), self._pos
        if self._journal is not None:
            if start < self._old_size:
                self._save(start, min(start + n, self._old_size))
                if self.durable and not self._synced:
                    self.io.fsync(self._journal)
                    self._synced = True
        elif self._is_stale():
            self._pos += n
            return n  # a stale handle's write would damage what another process wrote
        done = 0
        while done < n:
            done += self.io.pwrite(self._fd, view[done:], start + done)
        self._pos += n
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if self._journal is not None:
            size = max(size, self._old_size)  # never cut bytes a rollback needs
        elif self._is_stale():
            return size
        self.io.truncate(self._fd, size)
        return size

    def flush(self) -> None:
        """Nothing buffered here (every write is a ``pwrite``); syncing is :meth:`end`'s."""

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._journal is not None:
                self.abandon()
            self.io.close(self._fd)
        finally:
            super().close()


def recover(path: str | os.PathLike, *, io: OsIO | None = None, fd: int | None = None) -> bool:
    """Roll back the mutation a journal beside ``path`` records, if there is one.

    The caller holds the file's ``WRITE`` lock exclusively (so the journal is
    not a live writer's) and has no HDF5 handle of the file open.

    Returns
    -------
    bool
        True when a journal was found (and the file rolled back).

    Raises
    ------
    CorruptFileError
        The journal's header is unreadable although it is complete; nothing is changed.
    PermissionError
        The file cannot be written (a reader without write permission cannot
        roll a crashed commit back: a writer must open the file first).
    """
    io = io or OsIO()
    path = os.fspath(path)
    jpath = journal_path(path)
    if not io.exists(jpath):
        return False
    jfd = io.open(jpath)
    try:
        size = io.size(jfd)
        raw = io.pread(jfd, size, 0)
    finally:
        io.close(jfd)
    if len(raw) < _HEADER.size:
        # Created, header not yet written (or not synced): the file was not touched yet.
        io.unlink(jpath)
        io.fsync_dir(jpath)
        return True
    magic, old_size, _ = _HEADER.unpack_from(raw, 0)
    if magic != _MAGIC:
        raise CorruptFileError(
            f"{jpath!r} is not a journal of xarray_vhdf5 (it starts with {raw[:8]!r}); move it "
            f"away if it belongs to another program",
            path=path,
        )
    own = fd is None
    if fd is None:
        fd = io.open(path)
    try:
        at = _HEADER.size
        while at + _RECORD.size <= len(raw):
            offset, length, crc = _RECORD.unpack_from(raw, at)
            old = raw[at + _RECORD.size : at + _RECORD.size + length]
            if len(old) != length or _record_crc(offset, old) != crc:
                break  # torn at the end: its range was never overwritten (synced first)
            io.pwrite(fd, old, offset)
            at += _RECORD.size + length
        io.truncate(fd, old_size)
        io.fsync(fd)
    finally:
        if own:
            io.close(fd)
    io.unlink(jpath)
    io.fsync_dir(jpath)
    return True


def roll_back_interrupted(path: str, locks) -> bool:
    """Roll back a journal left by a writer that died, if any (takes the ``WRITE`` lock).

    For readers that found the journal while holding ``WRITE`` shared (so its
    writer is dead: a live one holds ``WRITE`` exclusively while its journal
    exists): ``WRITE`` is taken exclusively, then :func:`recover` runs (a
    writer that came first has rolled it back already).

    Raises
    ------
    CorruptFileError
        The journal must be rolled back but this process cannot write the file.
    FileBusyError
        A writer held the file past the timeout.
    """
    try:
        with locks.writing():
            return recover(path)
    except PermissionError as exc:
        raise CorruptFileError(
            f"{path!r}: a commit was interrupted (its journal {journal_path(path)!r} is there) and this "
            "process may not write the file to roll it back; open it once with write permission "
            "(any xarray_vhdf5 reader or writer does it)",
            path=path,
        ) from exc
