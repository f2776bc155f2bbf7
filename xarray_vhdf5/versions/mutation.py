"""Every mutation of a file runs inside :func:`mutating`: locked, checked, counted, flushed.

A mutation (a commit, a deletion, ``modify_metadata``, a hash-table rebuild):

1. takes the ``WRITE`` lock (:mod:`~xarray_vhdf5.versions.locking`), waiting for the
   writer before it and for readers resolving a version;
2. refuses to go on through a handle whose libhdf5 caches are stale: the file's
   ``writes`` counter (:mod:`~xarray_vhdf5.versions.generation`), read from disk,
   must be what this process last saw through the same libhdf5 file (h5py's
   ``FileID.fileno``). Another process that wrote meanwhile (possible only when
   both opened the file with libhdf5's locking off) would otherwise have its
   metadata overwritten;
3. for a mutation that moves chunks, takes the ``MOVE`` lock and increments and
   flushes ``moves`` before the body runs, so that readers resolve again;
4. runs the body and flushes the file, so that what the mutation wrote is on
   disk when it returns (a process killed afterwards loses nothing of it) and
   readers opening the file see it whole; then increments ``writes``.

The counters are written as bytes at their fixed offset (``pwrite``), never
through libhdf5 (see :func:`~xarray_vhdf5.versions.generation.create`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import h5py

from ..backend.signature import open_h5file
from ..errors import FileBusyError, StaleVersionError
from . import generation
from .locking import WRITE_TIMEOUT, file_locks, lock_timeout, locks_of

__all__ = ["flock_holder", "mutating", "note_opened", "open_for_writing"]

#: Counters last seen or written through each libhdf5 file of this process, by ``FileID.fileno``.
_SEEN: dict[int, generation.Counters] = {}


#: The byte offset of the counters in each libhdf5 file (it never changes once allocated).
_OFFSETS: dict[int, int] = {}


def _on_disk(h5file: h5py.File, locks) -> generation.Counters:
    key = h5file.file.id.fileno
    offset = _OFFSETS.get(key)
    if offset is None:
        offset = generation.locate(h5file)
        if offset is not None:
            _OFFSETS[key] = offset
    if offset is None:
        return generation.Counters(0, 0)
    raw = locks.pread(16, offset)
    if len(raw) != 16:
        return generation.Counters(-1, -1)
    return generation.read_at_bytes(raw)


def _bump(h5file: h5py.File, locks, now: generation.Counters, *, moved: bool) -> generation.Counters:
    """Write ``now`` + 1 (``moves`` + 1 too when ``moved``) as bytes; create the counters first if absent."""
    key = h5file.file.id.fileno
    offset = _OFFSETS.get(key)
    if offset is None:
        offset = generation.locate(h5file)
        if offset is None:
            offset = generation.create(h5file)
        _OFFSETS[key] = offset
    new = generation.Counters(now.writes + 1, now.moves + int(moved))
    locks.pwrite(generation.encode(new), offset)
    return new


def note_opened(h5file: h5py.File) -> None:
    """Record the counters of a newly opened (or newly adopted) handle, if not yet known."""
    locks = locks_of(h5file)
    if locks is None:
        return
    key = h5file.file.id.fileno
    if key not in _SEEN:
        _SEEN[key] = _on_disk(h5file, locks)


@contextlib.contextmanager
def mutating(h5file: h5py.File, *, moves: bool = False, what: str = "commit") -> Iterator[None]:
    """Run a mutation of ``h5file`` locked, checked, counted and flushed (see the module).

    Parameters
    ----------
    h5file : h5py.File or h5py.Group
        The file, open writable.
    moves : bool
        The mutation moves or frees chunks of raw_data.
    what : str
        What the mutation is, for messages.

    Raises
    ------
    FileBusyError
        The locks were held by others past their timeouts; nothing was done.
    StaleVersionError
        Another process wrote the file since this process last saw it through
        this h5py file: close the file and open it again; nothing was done.
    """
    locks = locks_of(h5file)
    if locks is None:  # an in-memory or file-object file: nobody else can see it
        yield
        h5file.file.flush()
        return
    f = h5file.file
    key = f.id.fileno
    with locks.writing():
        seen = _SEEN.get(key)
        now = _on_disk(f, locks)
        if seen is not None and now != seen:
            raise StaleVersionError(
                f"{f.filename!r} was changed by another process since this h5py file last read it "
                f"(write counter {now.writes}, this handle saw {seen.writes}): its cached metadata is "
                f"stale and a {what} through it could damage the file. Close the file and open it "
                "again (xarray_vhdf5 opens files with libhdf5's locking off; a file opened with "
                "h5py's default locking cannot be written by two processes at once)"
            )
        try:
            if moves:
                with locks.moving():
                    _SEEN[key] = now = _bump(f, locks, now, moved=True)
                    f.flush()
                    yield
            else:
                yield
        except BaseException:
            # What a failed mutation wrote (a half-made version it removed) must not stay in
            # libhdf5's cache, to be flushed later over another process's writes. No
            # version changed: the counters stay (a refused commit leaves the file as it was).
            if f.id.valid:
                with contextlib.suppress(Exception):
                    f.flush()
            raise
        f.flush()  # the mutation on disk before the counter says so
        _SEEN[key] = _bump(f, locks, now, moved=False)


def flock_holder(path: str | os.PathLike) -> int | None:
    """The pid of a process holding libhdf5's lock (``flock``) on ``path``, from ``/proc/locks``, or None."""
    try:
        inode = os.stat(path).st_ino
        with open("/proc/locks") as fh:
            lines = fh.readlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2e:5678 0 EOF" (a blocked waiter adds "->")
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


@contextlib.contextmanager
def open_for_writing(path: str | os.PathLike, *, hint: str = "", timeout: float | None = None) -> Iterator[h5py.File]:
    """Open ``path`` for writing (created if missing) under its ``WRITE`` lock; close it at the end.

    The lock is taken first, so writers of this package queue there. The file is
    then opened with libhdf5's own lock on, which other programs hold while they
    have the file open (plain h5py, versioned-hdf5, netCDF tools): the open is
    retried until ``timeout`` (readers of this package never hold it).

    Raises
    ------
    FileBusyError
        Another writer held the ``WRITE`` lock, or another program libhdf5's
        lock, past ``timeout`` seconds (default :data:`~xarray_vhdf5.versions.locking.WRITE_TIMEOUT`).
    NotHDF5Error
        ``path`` exists and is not an HDF5 file.
    """
    path = os.fspath(path)
    timeout = lock_timeout(WRITE_TIMEOUT) if timeout is None else timeout
    deadline = time.monotonic() + timeout
    if not os.path.exists(path):
        with contextlib.suppress(BlockingIOError):
            open_h5file(path, "a", hint=hint).close()  # a new file (another writer may race us)
    with file_locks(path).writing(timeout=timeout):
        delay = 0.001
        while True:
            try:
                f = open_h5file(path, "a", hint=hint)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = flock_holder(path)
                    holder = f"process {pid}" if pid is not None else "another program"
                    raise FileBusyError(
                        f"{path!r} is busy: {holder} has it open with libhdf5's file lock (plain h5py, "
                        f"versioned-hdf5 or a netCDF tool) and kept it for more than {timeout:g} s; close "
                        "it there, or open it there with h5py.File(..., locking=False) for reading",
                        path=path, holder_pid=pid,
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, 0.05)
        try:
            note_opened(f)
            yield f
        finally:
            f.close()
