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
    in the mutation, each with a CRC-32 of its own bytes: a *copy* record holds
    the range's offset, length and old bytes; a *reference* record holds only
    the offset, the length and where the same bytes lie in the side file (below).
    Bytes written past the old end of the file need no record: rolling back
    truncates the file to its old size.

``<file>.vhdf5-modify`` (the side file, beside the file; at most one a mutation)
    An in-place ``modify_metadata`` copies the old raw_data's chunks there, as
    stored, before freeing them; the new raw_data then overwrites their bytes in
    the file. Copying those bytes again into the journal would cost as much as
    the side copy and more (``docs/benchmarks.md``, "Rechunk"), so
    :meth:`JournaledFile.refer` registers the chunks' extents, and the first
    overwrite of a registered range is journaled by reference. When the copy
    runs beside the mutation (:class:`~xarray_vhdf5._versions.sidecopy.SideCopy`),
    :meth:`JournaledFile.refer_when_copied` defers that registration: the first
    overwrite of any of its extents waits for the whole copy, then registers
    them, so the copy reads the old bytes from the file untouched. The side file is
    stamped (a random id in its first bytes, a user block HDF5 does not read),
    synced with ``durable=True``, and its name, size and id journaled (a *side*
    record) before any reference record; it is deleted after the journal (the
    commit point), so it outlives every journal that refers to it. A reference
    record's CRC covers its fields, not the 2 GB it refers to: hashing them
    would cost what the references save; the side file is written before it is
    registered and never after, and recovery checks that it is the one
    journaled (name, size, id) before it writes anything.

The protocol, per mutation (:meth:`JournaledFile.begin` / :meth:`~JournaledFile.end`):

1. the journal is created with its header;
2. before each first overwrite of a byte range below the old size, its record
   is appended to the journal (a reference record for the parts of it lying in
   registered extents, a copy record for the rest);
3. when the mutation ends, the journal is deleted: that deletion is the commit
   point; then the side file, if any.

Why a reference restores the old bytes: a range journaled by reference was
never written in the mutation before (a first overwrite), so the file held
its old bytes when the side file was written; the extents registered are the
old chunks' stored bytes, copied byte for byte (by ``copy_file_range``,
:meth:`OsIO.copy_range`, or by ``H5Ocopy`` with the same size and filter mask
checked by the caller; ``tests/test_journal_refs.py`` and
``tests/test_sidecopy.py`` check every byte, filtered chunks included).

With ``durable=True`` the ordering is made to survive power loss with
``fsync``: the journal (and its directory entry) before the file is first
overwritten, the side file (and its directory entry) before it is journaled,
each record before its range is overwritten, the file before the journal is
deleted, and the directory after. With ``durable=False`` (the
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

import bisect
import contextlib
import errno
import io
import itertools
import os
import struct
import zlib
from typing import TYPE_CHECKING, Any

from ..errors import CorruptFileError

if TYPE_CHECKING:  # typing only: generation reads the file through h5py, which this module does not need
    from .generation import Counters

__all__ = [
    "JOURNAL_SUFFIX",
    "SIDE_SUFFIX",
    "SIDE_USERBLOCK",
    "JournaledFile",
    "OsIO",
    "SideFile",
    "journal_path",
    "recover",
    "roll_back_interrupted",
]

#: Suffix of the journal beside the file.
JOURNAL_SUFFIX = "-journal"
#: Suffix of the side file beside the file (see the module).
SIDE_SUFFIX = ".vhdf5-modify"
#: Bytes at the start of the side file that HDF5 leaves alone: create it with ``userblock_size=SIDE_USERBLOCK``.
SIDE_USERBLOCK = 512
_MAGIC_V1 = b"VHDF5JNL"  # copy records only; still rolled back
_MAGIC = b"VHDF5JN2"  # a new magic: a reader of version 1 refuses the journal instead of misreading it
_HEADER = struct.Struct("<8sQQ")  # magic, old size, id
_RECORD_V1 = struct.Struct("<QQI")  # offset, length, crc32(offset, length, bytes)
# kind, then a, b, c (per kind), then crc32 of the other fields and of the payload that follows:
# COPY (offset, length, 0) + the old bytes; REF (offset, length, side offset);
# SIDE (side size, payload length, 0) + side id (16 bytes) + side name (utf-8, relative to the file's folder).
_RECORD = struct.Struct("<cQQQI")
_COPY, _REF, _SIDE = b"C", b"R", b"S"
_STAMP = struct.Struct("<8s16s")  # magic, side id: the first bytes of the side file
_SIDE_MAGIC = b"VHDF5SID"


def journal_path(path: str | os.PathLike) -> str:
    """The journal of the file at ``path``."""
    return os.fspath(path) + JOURNAL_SUFFIX


#: errno values of ``copy_file_range`` meaning "not between these files here": copy through the process.
_NO_KERNEL_COPY = frozenset(
    getattr(errno, name) for name in ("EXDEV", "ENOSYS", "EINVAL", "EOPNOTSUPP", "ENOTSUP") if hasattr(errno, name)
)
#: Bytes a piece of :meth:`OsIO.copy_by_pwrite`.
_COPY_PIECE = 8 * 1024 * 1024


class OsIO:
    """The system calls of the journal: one place, so a test can simulate a power cut."""

    def open(self, path: str, create: bool = False) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT | os.O_TRUNC if create else 0)
        return os.open(path, flags, 0o666)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def preadinto(self, fd: int, buffer: memoryview, offset: int) -> int:
        """``pread`` into ``buffer`` (no intermediate bytes: libhdf5's reads of whole chunks)."""
        return os.preadv(fd, [buffer], offset)

    def pwrite(self, fd: int, data, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def copy_range(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """Copy ``length`` bytes from ``src`` at ``src_offset`` to ``dst`` at ``dst_offset`` (descriptors).

        In the kernel (``copy_file_range``: no pass through this process's
        memory) where the system has it, else by :meth:`copy_by_pwrite`.

        Raises
        ------
        OSError
            A read or write fails, or ``src`` ends before ``length`` bytes.
        """
        done = 0
        copy = getattr(os, "copy_file_range", None)
        while copy is not None and done < length:
            try:
                n = copy(src, dst, length - done, src_offset + done, dst_offset + done)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                break  # another file system, or none: copy the rest through this process
            if n == 0:
                raise OSError(errno.EIO, f"the source ends {done} bytes into a copy of {length}")
            done += n
        if done < length:
            self.copy_by_pwrite(src, dst, length - done, src_offset + done, dst_offset + done)

    def copy_by_pwrite(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """:meth:`copy_range` through this process: :meth:`pread` and :meth:`pwrite` of 8 MiB pieces.

        Raises
        ------
        OSError
            A read or write fails, or ``src`` ends before ``length`` bytes.
        """
        done = 0
        while done < length:
            piece = self.pread(src, min(_COPY_PIECE, length - done), src_offset + done)
            if not piece:
                raise OSError(errno.EIO, f"the source ends {done} bytes into a copy of {length}")
            written = 0
            while written < len(piece):
                written += self.pwrite(dst, memoryview(piece)[written:], dst_offset + done + written)
            done += len(piece)

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


def _record_crc_v1(offset: int, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(struct.pack("<QQ", offset, len(data)))) & 0xFFFFFFFF


def _record(kind: bytes, a: int, b: int, c: int, payload: bytes = b"") -> bytes:
    """One journal record: its fields, their CRC-32 (with the payload's), the payload."""
    head = _RECORD.pack(kind, a, b, c, 0)[:-4]
    crc = zlib.crc32(payload, zlib.crc32(head)) & 0xFFFFFFFF
    return head + struct.pack("<I", crc) + payload


class _DescriptorFile(io.RawIOBase):
    """A binary file over a descriptor, every read a ``preadinto`` and every write a ``pwrite``.

    What h5py's ``fileobj`` driver calls (``seek``, ``tell``, ``readinto``,
    ``write``, ``truncate``), through :class:`OsIO` (a test's simulated disk).
    """

    def __init__(self, osio: OsIO, fd: int):
        super().__init__()
        self.io, self._fd, self._pos = osio, fd, 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos}.get(whence)
        self._pos = (self.io.size(self._fd) if base is None else base) + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer) -> int:
        n = self.io.preadinto(self._fd, memoryview(buffer).cast("B"), self._pos)
        self._pos += n
        return n

    def _write_at(self, view: memoryview, start: int) -> None:
        """``pwrite`` all of ``view`` at ``start`` (a ``pwrite`` may write less than asked)."""
        done = 0
        while done < len(view):
            done += self.io.pwrite(self._fd, view[done:], start + done)

    def flush(self) -> None:
        """Nothing buffered (every write is a ``pwrite``)."""

    def fileno(self) -> int:
        return self._fd


class SideFile(_DescriptorFile):
    """The side file open for writing through the journal's system calls, for h5py's ``fileobj`` driver.

    Made by :meth:`JournaledFile.create_side`; ``name`` is its path.
    """

    def __init__(self, osio: OsIO, fd: int, name: str):
        super().__init__(osio, fd)
        self.name = name

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._write_at(view, self._pos)
        self._pos += len(view)
        return len(view)

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        self.io.truncate(self._fd, size)
        return size

    def close(self) -> None:
        if not self.closed:
            try:
                self.io.close(self._fd)
            finally:
                super().close()


class JournaledFile(_DescriptorFile):
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
        self.path = os.fspath(path)
        osio = io or OsIO()
        super().__init__(osio, osio.open(self.path))
        self.durable = durable
        self._journal: int | None = None  # the journal's descriptor during a mutation
        self._journal_end = 0
        self._old_size = 0
        self._saved: list[tuple[int, int]] = []  # sorted, disjoint ranges [start, stop) journaled
        self._synced = True  # every record appended so far is on disk (durable mode)
        self._side: str | None = None  # this mutation's side file (see the module)
        self._refs: list[tuple[int, int, int]] = []  # sorted, disjoint (start, stop, side offset) registered
        self._ref_starts: list[int] = []
        self._pending: Any = None  # a side copy still running: referred at the first overwrite of its extents
        self._pending_spans: list[tuple[int, int]] = []
        self.stale = False  # another process wrote the file: drop writes outside mutations
        #: Keep the file's length when libhdf5 closes it (it shortens it to its end of
        #: allocation): set while an opener looks at a file a killed writer left longer.
        self.keep_length = False
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
        self._side, self._refs, self._ref_starts = None, [], []
        self._pending, self._pending_spans = None, []

    def end(self) -> None:
        """Finish the mutation: the file synced (durable), the journal deleted (the commit point), the side file."""
        if self._journal is None:
            return
        if self._pending is not None:  # never overwritten: nothing refers to the copy, but it must end first
            self._pending, copy = None, self._pending
            copy.join()
        if self.durable:
            self.io.fsync(self._fd)
        fd, self._journal = self._journal, None
        self.io.close(fd)
        jpath = journal_path(self.path)
        self.io.unlink(jpath)
        if self.durable:
            self.io.fsync_dir(jpath)
        self._drop_side()

    def abandon(self) -> None:
        """Stop journaling after a failed mutation: roll back what it wrote (see :func:`recover`)."""
        if self._journal is None:
            return
        fd, self._journal = self._journal, None
        self.io.close(fd)
        if self._pending is not None:  # the side copy reads the file being rolled back: let it end first
            self._pending, copy = None, self._pending
            with contextlib.suppress(Exception):  # its failure is not this rollback's
                copy.join()
        recover(self.path, io=self.io, fd=self._fd)
        self._drop_side()

    def _drop_side(self) -> None:
        side, self._side, self._refs, self._ref_starts = self._side, None, [], []
        if side is not None and self.io.exists(side):
            self.io.unlink(side)

    # -- the side file -----------------------------------------------------------------
    def create_side(self) -> SideFile:
        """Create this mutation's side file, empty (``<file>.vhdf5-modify``), open for writing.

        The caller writes it through the returned file object (``h5py.File(side,
        "w", userblock_size=SIDE_USERBLOCK)``), closes it, then registers extents
        in it with :meth:`refer`. It is deleted when the mutation ends, after the
        journal, or when it is abandoned. A leftover of a dead writer is deleted
        first: the side file is always created, never truncated (on ext4, closing
        a file truncated to 0 then written starts writing it back at once:
        ``auto_da_alloc``, 0.4 s a GB, and its deletion then frees written blocks).

        Raises
        ------
        RuntimeError
            Not in a mutation, or the mutation has a side file already.
        """
        if self._journal is None or self._side is not None:
            raise RuntimeError(f"{self.path!r}: a side file is made once per mutation, inside it")
        side = self.path + SIDE_SUFFIX
        if self.io.exists(side):
            self.io.unlink(side)
        fd = self.io.open(side, create=True)
        self._side = side
        return SideFile(self.io, fd, side)

    def refer(self, extents) -> int:
        """Journal the first overwrites of ``extents`` by reference to the side file.

        The side file (written and closed by now, never written again) is
        stamped with a random id, synced with its folder (``durable``), and its
        name, size and id journaled; from then on the part of a first overwrite
        lying in a registered extent is journaled as (offset, length, side
        offset), not as its bytes.

        Parameters
        ----------
        extents : iterable of (int, int, int)
            ``(offset in the file, length, offset in the side file)`` in bytes:
            ranges whose bytes the side file holds as the file holds them now.
            Disjoint; parts at or past the file's old size are never looked up.

        Returns
        -------
        int
            Bytes registered.

        Raises
        ------
        RuntimeError
            No side file made in this mutation (:meth:`create_side`), extents
            registered already, extents overlapping, or one starting in the side
            file's first bytes (its stamp).
        """
        side, journal = self._side, self._journal
        if side is None or journal is None or self._refs:
            raise RuntimeError(f"{self.path!r}: extents are registered once, after create_side, in a mutation")
        refs = sorted((int(o), int(o) + int(n), int(so)) for o, n, so in extents if int(n) > 0)
        for (_, stop, _), (start, _, _) in itertools.pairwise(refs):
            if start < stop:
                raise RuntimeError(f"{self.path!r}: overlapping extents registered ({start} < {stop})")
        if refs and min(at for _, _, at in refs) < _STAMP.size:
            raise RuntimeError(f"{self.path!r}: an extent starts in the side file's stamp")
        sid = os.urandom(16)
        fd = self.io.open(side)
        try:
            self.io.pwrite(fd, _STAMP.pack(_SIDE_MAGIC, sid), 0)
            size = self.io.size(fd)
            if self.durable:
                self.io.fsync(fd)
        finally:
            self.io.close(fd)
        if self.durable:
            self.io.fsync_dir(side)
        name = os.path.relpath(side, os.path.dirname(os.path.abspath(self.path))).encode()
        payload = sid + name
        record = _record(_SIDE, size, len(payload), 0, payload)
        self.io.pwrite(journal, record, self._journal_end)
        self._journal_end += len(record)
        self._synced = False  # synced with the first record that refers to it, before its range is written
        self._refs, self._ref_starts = refs, [r[0] for r in refs]
        return sum(stop - start for start, stop, _ in refs)

    def refer_when_copied(self, copy) -> None:
        """:meth:`refer` the extents of a side copy still running, once it has ended.

        The copy (:class:`~xarray_vhdf5._versions.sidecopy.SideCopy`, writing
        the side file from :meth:`create_side`) reads the extents' bytes from
        the file while the mutation goes on. The first overwrite of any of them
        waits for it (``copy.join()``), then :meth:`refer` registers them and
        the overwrite is journaled by reference. Writes elsewhere go on
        meanwhile, journaled by copy as usual; :meth:`end` and :meth:`abandon`
        wait for the copy too, so the side file is never deleted under it.

        Parameters
        ----------
        copy : SideCopy
            Its ``extents`` are ``(offset in the file, length, offset in the side
            file)`` as :meth:`refer` takes them; ``join()`` returns them when the
            copy is whole and raises what made it fail (the overwrite then fails:
            the mutation is rolled back).

        Raises
        ------
        RuntimeError
            No side file made in this mutation, or extents registered already.
        """
        if self._side is None or self._journal is None or self._refs or self._pending is not None:
            raise RuntimeError(f"{self.path!r}: extents are registered once, after create_side, in a mutation")
        self._pending_spans = sorted((int(o), int(o) + int(n)) for o, n, _ in copy.extents if int(n) > 0)
        self._pending = copy

    def _overwrites_pending(self, start: int, stop: int) -> bool:
        """Whether ``[start, stop)`` meets an extent of the side copy still running."""
        spans = self._pending_spans
        i = bisect.bisect_right(spans, (start, float("inf"))) - 1
        return (i >= 0 and spans[i][1] > start) or (i + 1 < len(spans) and spans[i + 1][0] < stop)

    def _pieces(self, start: int, stop: int):
        """``[start, stop)`` cut into (start, stop, side offset or None): referenced parts, the rest."""
        refs, cursor = self._refs, start
        i = max(bisect.bisect_right(self._ref_starts, start) - 1, 0)
        while cursor < stop and i < len(refs):
            s, e, at = refs[i]
            if e <= cursor:
                i += 1
                continue
            if s >= stop:
                break
            if s > cursor:
                yield cursor, s, None
                cursor = s
            end = min(e, stop)
            yield cursor, end, at + (cursor - s)
            cursor, i = end, i + 1
        if cursor < stop:
            yield cursor, stop, None

    def _save(self, start: int, stop: int) -> None:
        """Journal the old bytes of ``[start, stop)`` not journaled yet (all below the old size)."""
        if self._pending is not None and self._overwrites_pending(start, stop):
            self._pending, copy = None, self._pending
            self.refer(copy.join())  # the copy is whole: from here on its extents are journaled by reference
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
        for gs, ge in gaps:
            for s, e, at in self._pieces(gs, ge) if self._refs else ((gs, ge, None),):
                if at is None:
                    old = self.io.pread(self._fd, e - s, s)
                    record = _record(_COPY, s, len(old), 0, old)
                else:
                    record = _record(_REF, s, e - s, at)
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

    # -- the file object h5py drives (reads and seeks: _DescriptorFile's) ---------------
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
        self._write_at(view, start)
        self._pos += n
        return n

    def truncate(self, size: int | None = None) -> int:
        size = self._pos if size is None else size
        if self.keep_length:
            return size
        if self._journal is not None:
            size = max(size, self._old_size)  # never cut bytes a rollback needs
        elif self._is_stale():
            return size
        self.io.truncate(self._fd, size)
        return size

    def flush(self) -> None:
        """Nothing buffered here (every write is a ``pwrite``); syncing is :meth:`end`'s."""

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
    not a live writer's) and has no HDF5 handle of the file open. Reference
    records are restored from the side file the journal names; the journal,
    then the side file, are deleted.

    Returns
    -------
    bool
        True when a journal was found (and the file rolled back).

    Raises
    ------
    CorruptFileError
        The journal's header is unreadable although it is complete, or its
        reference records need a side file that is missing or is not the one
        journaled (another size or id); nothing is changed.
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
    if magic not in (_MAGIC, _MAGIC_V1):
        raise CorruptFileError(
            f"{jpath!r} is not a journal of xarray_vhdf5 (it starts with {raw[:8]!r}); move it "
            f"away if it belongs to another program",
            path=path,
        )
    records, side = _records_v1(raw) if magic == _MAGIC_V1 else _records(raw, jpath)
    sfd = None
    if side is not None and any(at is not None for _, _, at in records):
        sfd = _open_side(io, path, jpath, side)
    own = fd is None
    try:
        if fd is None:
            fd = io.open(path)
        for offset, old, at in records:
            if at is not None:
                assert sfd is not None, "a reference record is kept only after its side record"
                old = io.pread(sfd, old, at)
            io.pwrite(fd, old, offset)
        io.truncate(fd, old_size)
        io.fsync(fd)
    finally:
        if sfd is not None:
            io.close(sfd)
        if own and fd is not None:
            io.close(fd)
    io.unlink(jpath)
    io.fsync_dir(jpath)
    leftover = path + SIDE_SUFFIX  # a dead writer's side file, journaled or not yet
    if io.exists(leftover):
        io.unlink(leftover)
    return True


def _records_v1(raw: bytes) -> tuple[list, None]:
    """The whole records of a version-1 journal: (offset, old bytes, None)."""
    out, at = [], _HEADER.size
    while at + _RECORD_V1.size <= len(raw):
        offset, length, crc = _RECORD_V1.unpack_from(raw, at)
        old = raw[at + _RECORD_V1.size : at + _RECORD_V1.size + length]
        if len(old) != length or _record_crc_v1(offset, old) != crc:
            break  # torn at the end: its range was never overwritten (synced first)
        out.append((offset, old, None))
        at += _RECORD_V1.size + length
    return out, None


def _records(raw: bytes, jpath: str) -> tuple[list, tuple[int, bytes, str] | None]:
    """The whole records of a journal: (offset, old bytes or their length, side offset or None),
    and the side file journaled as (size, id, name), or None.

    Reading stops at the first record torn or failing its CRC: records are appended
    in order and each is on disk before its range is overwritten, so the ranges of
    the records after it were never overwritten.
    """
    out: list = []
    side = None
    at, head = _HEADER.size, _RECORD.size
    while at + head <= len(raw):
        kind, a, b, c, crc = _RECORD.unpack_from(raw, at)
        n = b if kind in (_COPY, _SIDE) else 0
        payload = raw[at + head : at + head + n]
        if len(payload) != n or zlib.crc32(payload, zlib.crc32(raw[at : at + head - 4])) & 0xFFFFFFFF != crc:
            break
        if kind == _COPY:
            out.append((a, payload, None))
        elif kind == _REF and side is not None:
            out.append((a, b, c))
        elif kind == _SIDE and side is None and n > 16:
            side = (a, payload[:16], payload[16:].decode("utf-8", "replace"))
        else:  # no writer of this package writes it: a damaged journal, not a torn one
            raise CorruptFileError(
                f"{jpath!r}: its {kind!r} record at byte {at} is whole but out of place (no writer of this "
                "package writes it so): the journal is damaged and the file cannot be rolled back with it",
                path=jpath,
            )
        at += head + n
    return out, side


def _open_side(io: OsIO, path: str, jpath: str, side: tuple[int, bytes, str]) -> int:
    """The side file's descriptor, once it is the one the journal names (size, id); else CorruptFileError."""
    size, sid, name = side
    spath = os.path.join(os.path.dirname(os.path.abspath(path)), name)
    problem = None
    if not io.exists(spath):
        problem = "is missing"
    else:
        sfd = io.open(spath)
        try:
            found, stamp = io.size(sfd), io.pread(sfd, _STAMP.size, 0)
        except BaseException:
            io.close(sfd)
            raise
        if found == size and stamp == _STAMP.pack(_SIDE_MAGIC, sid):
            return sfd
        io.close(sfd)
        same = "matches" if stamp[8:] == sid else "differs"
        problem = f"is not the one journaled ({found} bytes, {size} journaled; its id {same})"
    raise CorruptFileError(
        f"{path!r}: the mutation its journal {jpath!r} records cannot be rolled back: the side file "
        f"{spath!r} holding the old bytes it refers to {problem}. Nothing was changed; put the side file "
        "back (it was beside the file) and open the file again",
        path=path,
    )


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
