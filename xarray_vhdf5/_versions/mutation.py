"""Every mutation of a file runs inside :func:`mutating`: locked, checked, counted, flushed.

A mutation (a commit, a deletion, ``modify_metadata``, a hash-table rebuild):

1. takes the ``WRITE`` lock (:mod:`~xarray_vhdf5._versions.locking`), waiting for the
   writer before it and for readers resolving a version;
2. refuses to go on through a handle whose libhdf5 caches are stale: the file's
   ``writes`` counter (:mod:`~xarray_vhdf5._versions.generation`), read from disk,
   must be what this process last saw through the same libhdf5 file (h5py's
   ``FileID.fileno``). Another process that wrote meanwhile (possible only when
   both opened the file with libhdf5's locking off) would otherwise have its
   metadata overwritten;
3. for a mutation that moves chunks, takes the ``MOVE`` lock and increments and
   flushes ``moves`` before the body runs, so that readers resolve again;
4. moves this package's bookkeeping group of a file written before it moved to
   the root (``/_version_data/__vhdf5_version_index__`` -> ``/__vhdf5__``,
   :func:`~xarray_vhdf5._versions.bookkeeping.migrate`; a link move, journaled with
   the mutation, which leaves the counters' byte offset as it was), once per
   libhdf5 file;
5. runs the body and flushes the file, so that what the mutation wrote is on
   disk when it returns (a process killed afterwards loses nothing of it) and
   readers opening the file see it whole; then increments ``writes``.

The counters are written as bytes at their fixed offset (``pwrite``), never
through libhdf5 (see :func:`~xarray_vhdf5._versions.generation.create`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import weakref
from collections.abc import Iterator

import h5py

from .._backend.signature import not_hdf5_error, open_h5file
from ..errors import CorruptFileError, FileBusyError, StaleVersionError
from . import bookkeeping, chunkmaps, generation
from .journal import JournaledFile, OsIO, journal_path, recover
from .locking import WRITE_TIMEOUT, file_locks, lock_timeout, path_names

__all__ = [
    "check_fresh",
    "disk_path",
    "flock_holder",
    "mutating",
    "note_opened",
    "open_file",
    "open_for_writing",
    "refuse_interrupted",
]

#: Counters last seen or written through each libhdf5 file of this process, by ``FileID.fileno``.
_SEEN: dict[int, generation.Counters] = {}


#: The journaled file object under each libhdf5 file opened by :func:`open_for_writing` / :func:`open_file`.
_JOURNALED: weakref.WeakValueDictionary[int, JournaledFile] = weakref.WeakValueDictionary()


#: The path on disk of each libhdf5 file (None for in-memory and file-object files), by
#: ``fileno``: libhdf5 numbers the files it opens serially and never reuses a number.
_PATHS: dict[int, str | None] = {}


def _disk_path(f: h5py.File | h5py.Group) -> str | None:
    """The path of a file opened by path (``sec2``, ``stdio``, ``direct`` drivers), else None; cached."""
    key = f.id.fileno
    try:
        return _PATHS[key]
    except KeyError:
        pass
    jf = _JOURNALED.get(key)
    path: str | None
    if jf is not None:
        path = jf.path
    else:
        f = f.file
        path = f.filename if f.driver in ("sec2", "stdio", "direct") else None
    _PATHS[key] = path
    return path


def disk_path(f: h5py.File) -> str | None:
    """The path of the file on disk under ``f``: opened by path, or through a :class:`JournaledFile`; else None."""
    return _disk_path(f)


def file_name(obj: h5py.File | h5py.Group) -> str:
    """How messages name ``obj``'s file: its path on disk (a journaled handle's too), else libhdf5's name for it.

    ``h5py.File.filename`` of a journaled handle is its file object's repr
    (h5py's ``fileobj`` driver); :func:`disk_path` knows the path.
    """
    return _disk_path(obj) or obj.file.filename


#: The byte offset of the counters in each libhdf5 file (it never changes once allocated).
_OFFSETS: dict[int, int] = {}

#: libhdf5 files (``fileno``) whose bookkeeping group a mutation found at its place or moved there.
_MIGRATED: set[int] = set()


def _migrate(f: h5py.File) -> None:
    """Move the bookkeeping group of a file written before to its place; once per libhdf5 file."""
    key = f.id.fileno
    if key in _MIGRATED:
        return
    bookkeeping.migrate(f)
    _MIGRATED.add(key)


def _on_disk(h5file: h5py.File, locks) -> generation.Counters:
    key = h5file.id.fileno
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


def check_fresh(h5file: h5py.File) -> None:
    """Raise if another process wrote the file since this process last saw it through ``h5file``.

    One ``pread`` of the file's counters (nothing when this process never saw
    them, e.g. a file opened read-only that no writer of this package touched).

    Raises
    ------
    StaleVersionError
        The handle's cached metadata is stale: reading through it may give
        wrong values, committing through it would damage the file.
    """
    key = h5file.id.fileno
    seen = _SEEN.get(key)
    if seen is None or key not in _OFFSETS:
        return
    path = _disk_path(h5file)
    if path is None:
        return
    locks = file_locks(path)
    now = _on_disk(h5file, locks)
    if now != seen and not locks.holds_write():
        jf = _JOURNALED.get(key)
        if jf is not None:
            jf.stale = True
        raise StaleVersionError(
            f"{h5file.file.filename!r} was changed by another process since this h5py file last read it "
            f"(write counter {now.writes}, this handle saw {seen.writes}): its cached metadata is "
            "stale; close the file and open it again"
        )


def refuse_interrupted(h5file: h5py.File) -> None:
    """Raise if a dead writer left a journal beside the file (an h5py handle may show its commit half written).

    Called before anything is read through the handle. A journal of a live
    writer (one holding the ``WRITE`` lock) is not a reason: it goes with its
    commit. Handles of this package's openers roll journals back themselves.

    Raises
    ------
    CorruptFileError
        The journal of an interrupted commit is there.
    """
    f = h5file.file
    if _JOURNALED.get(f.id.fileno) is not None:
        return
    path = _disk_path(f)
    if path is None or not os.path.exists(journal_path(path)):
        return
    if _no_live_writer(file_locks(path)):
        raise CorruptFileError(
            f"{path!r}: a commit was interrupted and left its journal {journal_path(path)!r}: this h5py "
            "file may show it half written. Close it and open the file through xarray_vhdf5 "
            "(xr.open_dataset(..., engine='vhdf5'), VersionedHDF5File.open, or "
            "VersionedHDF5File(xarray_vhdf5.open_file(path))), which rolls the commit back",
            path=path,
        )


def _no_live_writer(locks) -> bool:
    """True when no process holds the file's ``WRITE`` lock (a journal there is then a dead writer's)."""
    try:
        with locks.resolving(timeout=0):
            return True
    except FileBusyError:
        return False


def _bump(h5file: h5py.File, locks, jf, now: generation.Counters, *, moved: bool) -> generation.Counters:
    """Write ``now`` + 1 (``moves`` + 1 too when ``moved``) as bytes; create the counters first if absent.

    Through the journaled file when there is one (the old bytes are journaled
    with the rest of the mutation), else with the lock's descriptor.
    """
    key = h5file.id.fileno
    offset = _OFFSETS.get(key)
    if offset is None:
        offset = generation.locate(h5file)
        if offset is None:
            offset = generation.create(h5file)
        _OFFSETS[key] = offset
    new = generation.Counters(now.writes + 1, now.moves + int(moved))
    if jf is not None:
        jf.seek(offset)
        jf.write(generation.encode(new))
        jf.counters_offset = offset
    else:
        locks.pwrite(generation.encode(new), offset)
    return new


def note_opened(h5file: h5py.File) -> None:
    """Record the counters of a newly opened (or newly adopted) handle, if not yet known."""
    key = h5file.id.fileno
    jf = _JOURNALED.get(key)
    path = _disk_path(h5file)
    if path is None or key in _SEEN:
        return
    locks = file_locks(path)
    refuse_interrupted(h5file)
    _SEEN[key] = _on_disk(h5file, locks)
    if jf is not None:
        jf.seen = _SEEN[key]
        jf.counters_offset = _OFFSETS.get(key)


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
    key = h5file.id.fileno
    jf = _JOURNALED.get(key)
    path = _disk_path(h5file)
    f = h5file if isinstance(h5file, h5py.File) else h5file.file  # .file makes a new File: about 7 us
    if path is None:  # an in-memory or file-object file: nobody else can see it
        _migrate(f)
        yield
        f.flush()
        return
    locks = file_locks(path)
    with locks.writing():
        fd = _handle_fd(f, jf)
        if fd is not None and not _same_file(fd, path):
            if jf is not None:
                jf.stale = True
            raise StaleVersionError(
                f"{f.filename!r} was replaced since this h5py file opened it (by vhdf5 repack, or a copy "
                f"moved over it): a {what} through this handle would go to the old, unlinked file and be "
                "lost. Close the file and open it again (xarray_vhdf5.open_file)"
            )
        seen = _SEEN.get(key)
        now = _on_disk(f, locks)
        if seen is not None and now != seen:
            if jf is not None:
                jf.stale = True  # and it may not write when it closes either
            raise StaleVersionError(
                f"{f.filename!r} was changed by another process since this h5py file last read it "
                f"(write counter {now.writes}, this handle saw {seen.writes}): its cached metadata is "
                f"stale and a {what} through it could damage the file. Close the file and open it "
                "again (xarray_vhdf5.open_file, or h5py.File with libhdf5's locking on, which lets "
                "one process at a time open a file for writing)"
            )
        if jf is not None:
            jf.begin()
        try:
            _migrate(f)
            if moves:
                with locks.moving():
                    _SEEN[key] = now = _bump(f, locks, jf, now, moved=True)
                    chunkmaps.forget(f)  # their rows and addresses are about to change
                    f.flush()
                    yield
            else:
                yield
        except BaseException:
            # What a failed mutation wrote (a half-made version it removed) must not stay in
            # libhdf5's cache, to be flushed later over another process's writes. No
            # version changed: the counters stay (a refused commit leaves the file as it was).
            _end_after_failure(f, jf)
            raise
        try:
            f.flush()  # the mutation on disk before the counter says so
            _SEEN[key] = _bump(f, locks, jf, now, moved=False)
        except BaseException:
            if jf is not None:
                jf.stale = True  # the journal stays: the next opener rolls the mutation back
            raise
        if jf is not None:
            jf.end()  # the commit point
            jf.seen = _SEEN[key]


def _end_after_failure(f: h5py.File, jf: JournaledFile | None) -> None:
    if not f.id.valid:
        if jf is not None:
            jf.abandon()
        return
    try:
        f.flush()
    except Exception:  # noqa: BLE001 any flush failure leaves the journal for the next opener
        if jf is not None:
            jf.stale = True  # cache and file disagree: leave the journal for the next opener
        return
    if jf is not None:
        jf.end()  # a consistent state with the same versions (the half-made one removed)


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


def _flocked_file(path: str, durable: bool, deadline: float, timeout: float, io=None) -> JournaledFile:
    """A :class:`JournaledFile` of ``path`` holding libhdf5's whole-file lock (``flock``).

    The ``fileobj`` driver takes no lock of libhdf5's, so the same ``flock`` is
    taken here: programs that rely on libhdf5's locking (plain h5py,
    versioned-hdf5, netCDF tools) keep the file to themselves while they have
    it open. Taken *before* the ``WRITE`` lock, in the order a plain
    ``h5py.File(path, "a")`` writer takes them (its ``flock`` at open, ``WRITE``
    at each commit), so that the two never wait for each other in a circle.
    """
    jf = JournaledFile(path, durable=durable, io=io)
    try:
        delay = 0.001
        while True:
            try:
                fcntl.flock(jf.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(jf.fileno(), path):
                    return jf
                # Replaced while we waited (``vhdf5 repack`` swaps in a new file): what we hold
                # is the old, unlinked file, whose commits nobody would see. Open the new one.
                jf.close()
                jf = JournaledFile(path, durable=durable, io=io)
                continue
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = flock_holder(path)
                    holder = f"process {pid}" if pid is not None else "another program"
                    raise FileBusyError(
                        f"{path!r} is busy: {holder} has it open with libhdf5's file lock (plain h5py, "
                        f"versioned-hdf5 or a netCDF tool) and kept it for more than {timeout:g} s; close "
                        "it there, or open it there with h5py.File(..., locking=False) for reading",
                        path=path,
                        holder_pid=pid,
                    ) from None
                time.sleep(delay)
                delay = min(2 * delay, 0.05)
    except BaseException:
        jf.close()
        raise


def _same_file(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (:func:`~.locking.path_names`)."""
    here = os.fstat(fd)
    return path_names(path, (here.st_dev, here.st_ino))


#: libhdf5's descriptor of each file opened by path with the sec2 driver (None: another
#: driver), by ``fileno``: it does not change while the file is open, and asking h5py for
#: the driver and the handle costs about 10 us a mutation.
_FDS: dict[int, int | None] = {}


def _handle_fd(h5file: h5py.File, jf: JournaledFile | None) -> int | None:
    """The descriptor ``h5file`` writes through: its journaled file's, or libhdf5's (sec2), else None."""
    if jf is not None:
        return jf.fileno()
    key = h5file.id.fileno
    try:
        return _FDS[key]
    except KeyError:
        pass
    fd = None
    if h5file.driver == "sec2":  # the core driver's handle is a pointer, not a descriptor
        handle = h5file.id.get_vfd_handle()
        fd = handle if isinstance(handle, int) and handle >= 0 else None
    _FDS[key] = fd
    return fd


class _JournaledH5File(h5py.File):
    """An ``h5py.File`` over a :class:`JournaledFile` that closes it too (its ``flock`` with it).

    Without this, closing the ``h5py.File`` left the journaled file, and
    libhdf5's lock on it, open until the garbage collector freed the last
    reference (a ``VersionedHDF5File`` kept around is one): the next opener
    waited for it.
    """

    def close(self) -> None:
        jf = _JOURNALED.pop(self.id.fileno, None) if self.id.valid else None
        try:
            if jf is not None and self.mode == "r+" and not jf.stale and _writes_at_close(self):
                _journaled_close(jf, lambda: h5py.File.close(self))
            else:
                super().close()
        finally:
            if jf is not None:
                jf.close()


def _writes_at_close(f: h5py.File) -> bool:
    """Whether libhdf5 writes file metadata when ``f`` closes: the free-space managers of a file
    created with persistent free-space tracking (``fs_persist``), written after the last flush."""
    try:
        return bool(f.id.get_create_plist().get_file_space_strategy()[1])
    except (AttributeError, RuntimeError, ValueError):  # an h5py or libhdf5 without the call
        return False


def _journaled_close(jf: JournaledFile, close) -> None:
    """``close()`` as a journaled mutation of its own, under ``WRITE``.

    libhdf5 writes a file's persistent free-space managers when it closes it,
    after the last mutation's flush: unjournaled, a process killed in the
    middle left such files unopenable (5 of 59 kill points,
    ``benchmarks/kill_fs_persist.py``). Journaled, a killed close is rolled
    back to the state the last mutation committed.
    """
    with file_locks(jf.path).writing():
        jf.begin()
        try:
            close()
        except BaseException:
            jf.abandon()
            raise
        jf.end()


def _open_journaled(jf: JournaledFile, path: str, hint: str) -> h5py.File:
    """``h5py.File(jf, "a")``, registered for :func:`mutating`; the caller holds ``WRITE``, journal rolled back.

    What a writer killed inside libhdf5's flush left past the end of
    allocation is moved under it first (:mod:`~xarray_vhdf5._versions.openrepair`):
    libhdf5 cannot move that end through this driver, and would place this
    handle's objects over those chunks. Looked for when the file is longer than
    its superblock says, and when the versions show an interrupted commit
    (a chunk whose bytes never reached the file can start at its very end).
    """
    from .openrepair import interrupted_damage, move_end_past_chunks, past_allocation, warn_moved

    looked = past_allocation(path)
    if looked:
        warn_moved(path, move_end_past_chunks(path, flocked=True))
    try:
        f = _JournaledH5File(jf, "a")
        if not looked and interrupted_damage(f) is not None:
            jf.keep_length = True  # libhdf5's close would cut what lies past its end of allocation
            try:
                h5py.File.close(f)
            finally:
                jf.keep_length = False
            warn_moved(path, move_end_past_chunks(path, flocked=True))
            f = _JournaledH5File(jf, "a")
    except OSError as exc:
        jf.close()
        error = not_hdf5_error(path, hint=hint)
        if error is None:
            raise
        raise error from exc
    except BaseException:
        jf.close()
        raise
    _JOURNALED[f.id.fileno] = jf
    _PATHS[f.id.fileno] = jf.path
    note_opened(f)
    return f


@contextlib.contextmanager
def open_for_writing(
    path: str | os.PathLike, *, hint: str = "", timeout: float | None = None, durable: bool = False
) -> Iterator[h5py.File]:
    """Open ``path`` for writing (created if missing) under its ``WRITE`` lock; close it at the end.

    The lock is taken first, so writers of this package queue there; a commit
    interrupted by a crash is rolled back (:func:`~xarray_vhdf5._versions.journal.recover`);
    then the file is opened through a :class:`~xarray_vhdf5._versions.journal.JournaledFile`,
    so every mutation through it is whole or absent after a crash, and with
    libhdf5's lock (``flock``) on it, which other programs hold while they
    have the file open (plain h5py, versioned-hdf5, netCDF tools): it is
    retried until ``timeout`` (readers of this package never hold it).

    Parameters
    ----------
    durable : bool
        ``fsync`` so that a committed mutation survives a power cut (see
        :mod:`~xarray_vhdf5._versions.journal`). Default False: safe against a
        killed process, not against a power cut.

    Raises
    ------
    FileBusyError
        Another writer held the ``WRITE`` lock, or another program libhdf5's
        lock, past ``timeout`` seconds (default :data:`~xarray_vhdf5._versions.locking.WRITE_TIMEOUT`).
    NotHDF5Error
        ``path`` exists and is not an HDF5 file.
    """
    path = os.fspath(path)
    timeout = lock_timeout(WRITE_TIMEOUT) if timeout is None else timeout
    deadline = time.monotonic() + timeout
    if not os.path.exists(path):
        with contextlib.suppress(BlockingIOError):
            open_h5file(path, "a", hint=hint).close()  # a new file (another writer may race us)
    jf = _flocked_file(path, durable, deadline, timeout)
    try:
        with file_locks(path).writing(timeout=max(0.0, deadline - time.monotonic())):
            recover(path)
            f = _open_journaled(jf, path, hint)
            try:
                yield f
            finally:
                f.close()  # _JournaledH5File.close: the journaled file too
    finally:
        jf.close()


def open_file(
    path: str | os.PathLike,
    mode: str = "a",
    *,
    durable: bool = False,
    timeout: float | None = None,
    io: OsIO | None = None,
) -> h5py.File:
    """Open a versioned file for writing, so that every commit through it survives a crash.

    ``VersionedHDF5File(open_file(path))`` commits, deletes and modifies as
    through ``h5py.File(path, "a")``, and in addition:

    - each mutation is journaled (:mod:`~xarray_vhdf5._versions.journal`): a
      process killed at any instant leaves the file with every earlier version
      unchanged and the interrupted one absent, rolled back by the next opener
      of this package; with ``durable=True``, a power cut too;
    - it holds libhdf5's lock (``flock``) while it is open, as
      ``h5py.File(path, "a")`` does: another writer waits for it (the
      timeout, then :class:`~xarray_vhdf5.errors.FileBusyError` naming this
      process), readers of this package do not;
    - should a writer that bypasses that lock (``locking=False``) commit
      meanwhile, this handle refuses to commit
      (:class:`~xarray_vhdf5.errors.StaleVersionError`) and writes nothing,
      not even when it is closed.

    Parameters
    ----------
    path : str or os.PathLike
        The file; created if missing.
    mode : {"a", "r+"}
        ``"a"``: create if missing; ``"r+"``: it must exist. For reading, use
        :meth:`~xarray_vhdf5.VersionedHDF5File.open` or ``xr.open_dataset``.
    durable : bool
        ``fsync`` in the journal's order (costs a few syncs a commit).
    timeout : float, optional
        Seconds to wait for libhdf5's lock held by another program.
    io : OsIO, optional
        The system calls the journal makes (:class:`~xarray_vhdf5._versions.journal.OsIO`);
        the crash tests pass one that kills the process or drops writes not
        yet synced (:mod:`xarray_vhdf5.testing._powercut`).

    Returns
    -------
    h5py.File
        Close it as any h5py file.

    Raises
    ------
    FileBusyError
        Another program kept libhdf5's lock on the file past ``timeout``.
    FileNotFoundError
        ``mode="r+"`` and the file does not exist.
    NotHDF5Error
        The file is not HDF5.
    ValueError
        Another ``mode``.
    """
    if mode not in ("a", "r+"):
        raise ValueError(f"open_file opens for writing (mode 'a' or 'r+'), got {mode!r}")
    path = os.fspath(path)
    if mode == "r+" and not os.path.exists(path):
        raise FileNotFoundError(f"{path!r} does not exist (mode 'r+'; 'a' creates it)")
    timeout = lock_timeout(WRITE_TIMEOUT) if timeout is None else timeout
    deadline = time.monotonic() + timeout
    if not os.path.exists(path):
        with contextlib.suppress(BlockingIOError):
            open_h5file(path, "a").close()
    jf = _flocked_file(path, durable, deadline, timeout, io)
    try:
        with file_locks(path).writing(timeout=max(0.0, deadline - time.monotonic())):
            recover(path)
            f = _open_journaled(jf, path, "")
    except BaseException:
        jf.close()
        raise
    weakref.finalize(f, _JOURNALED.pop, f.id.fileno, None)
    return f
