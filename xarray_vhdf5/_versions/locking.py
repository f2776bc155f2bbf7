"""Locks that let readers and writers of one versioned file share it.

libhdf5's own file lock (``flock`` on the whole file, taken at open) lets one
process write only while no other process has the file open: a notebook
reading the file made every daily commit fail. This module replaces it for the
handles this package opens (``h5py.File(..., locking=False)``) with
advisory byte-range locks, as SQLite locks bytes of its database file:

``WRITE`` (one byte)
    Held exclusively by a writer for the whole of a mutation of the file: a
    commit, ``delete_versions``, ``modify_metadata``, a hash-table rebuild.
    Held shared by a reader while it resolves a version through libhdf5
    (reads the version group, its virtual datasets and the chunk addresses of
    raw_data: see :mod:`xarray_vhdf5._backend.manifest`), which takes
    milliseconds. Writers queue behind each other and behind resolvers; a
    reader waits for a commit to finish writing metadata.
``MOVE`` (one byte)
    Held exclusively while chunks of raw_data move or are freed (delete,
    ``modify_metadata``); held shared by a reader for each read of chunk
    bytes. Committed chunks never change in place otherwise, so reads need no
    other lock: a commit never waits for them.
``WRITE gate``, ``MOVE gate`` (one byte each)
    Writers first: a writer waiting for ``WRITE`` (or a mover for ``MOVE``)
    holds the byte's gate exclusively, and a reader takes the gate shared,
    for an instant, before it takes the byte shared (SQLite's ``PENDING``
    lock). Readers arriving while a writer waits wait for it instead of
    holding the byte in turn, so a reader resolving in a loop does not keep a
    writer out until its timeout; the readers already in finish first.
    Readers are not starved either: a reader that has waited
    :data:`QUEUE_AFTER` seconds queues as a writer does (holds the gate
    exclusively until it has the byte shared), so that a writer committing
    back to back lets it in after its current mutation.
    Inside the process, reader threads wait while a writer thread waits, and
    a thread already holding a lock shared takes it again at once.
``PIDS`` (one byte per process id)
    A writer also locks the byte ``PIDS + pid``, so that a process that waited
    too long can say which process holds the file (:class:`FileBusyError`).

The locks are Linux open-file-description locks (``F_OFD_SETLK``): unlike
POSIX ``fcntl`` locks they are not dropped when libhdf5 closes another
descriptor of the same file in the process, and they do not interact with
libhdf5's ``flock``. They lie far beyond the end of any file (offset 2**62),
where no byte is ever written. Inside one process, every thread shares one
descriptor per file and this module orders them (a threading condition per
lock), re-entrantly for the thread that holds a lock exclusively.

Waiting: a lock is polled (1 ms doubling to 50 ms) until ``timeout`` seconds
have passed, then :class:`~xarray_vhdf5.errors.FileBusyError` is raised.
Defaults: :data:`WRITE_TIMEOUT` for writers, :data:`READ_TIMEOUT` for
readers (a reader of a file whose versions are being deleted waits for the
deletion); the environment variable ``VHDF5_LOCK_TIMEOUT`` (seconds) sets
both.

Other programs (versioned-hdf5, plain h5py, netCDF tools) know nothing of
these locks: they rely on libhdf5's lock, which a writer of this package
still respects when it opens a file for writing (see :func:`open_for_writing`).

On platforms without OFD locks (not Linux) locking is a no-op and a warning
is documented in the README.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
from collections.abc import Iterator

from ..errors import FileBusyError

__all__ = [
    "QUEUE_AFTER",
    "READ_TIMEOUT",
    "WRITE_TIMEOUT",
    "FileLocks",
    "file_locks",
    "holder_pid",
    "lock_timeout",
    "path_names",
]

#: Seconds a writer waits for the writer before it (or for readers resolving a version).
WRITE_TIMEOUT = 10.0
#: Seconds a reader waits for a commit's metadata writes or a deletion to finish.
READ_TIMEOUT = 60.0
#: Seconds a reader waits before it queues at a lock's gate as writers do (see the module).
QUEUE_AFTER = 0.05

_BASE = 1 << 62
_WRITE = _BASE
_MOVE = _BASE + 1
_GATE = {_WRITE: _BASE + 2, _MOVE: _BASE + 3}  # held by a writer waiting for the byte
_PIDS = _BASE + 4096
_PID_SPAN = 1 << 23  # Linux pid_max is at most 2**22

_HAVE_OFD = hasattr(fcntl, "F_OFD_SETLK")
# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi"
_FLOCK_SIZE = struct.calcsize(_FLOCK + "0q")  # padded to 8 bytes, as the kernel's


def lock_timeout(default: float) -> float:
    """``VHDF5_LOCK_TIMEOUT`` (seconds) if set, else ``default``.

    Raises
    ------
    ValueError
        The variable is set but is not a non-negative number.
    """
    value = os.environ.get("VHDF5_LOCK_TIMEOUT")
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"VHDF5_LOCK_TIMEOUT must be a number of seconds, got {value!r}") from None
    if seconds < 0:
        raise ValueError(f"VHDF5_LOCK_TIMEOUT must be >= 0 seconds, got {value!r}")
    return seconds


def _flock(kind: int, start: int, length: int = 1) -> bytes:
    return struct.pack(_FLOCK, kind, os.SEEK_SET, start, length, 0).ljust(_FLOCK_SIZE, b"\0")


def _try(fd: int, kind: int, start: int, length: int = 1) -> bool:
    """Set an OFD lock without waiting; False if another descriptor holds a conflicting one."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock(kind, start, length))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def holder_pid(fd: int) -> int | None:
    """The process id of a writer holding the file of ``fd`` (its ``PIDS`` byte), or None."""
    if not _HAVE_OFD:
        return None
    probe = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock(fcntl.F_WRLCK, _PIDS, _PID_SPAN))
    kind, _, start, _, _ = struct.unpack(_FLOCK, probe[: struct.calcsize(_FLOCK)])
    if kind == fcntl.F_UNLCK:
        return None
    return int(start - _PIDS)


class _RWState:
    """One lock byte inside the process: shared holders (any thread) or one exclusive thread."""

    def __init__(self) -> None:
        self.shared = 0
        self.owner: int | None = None  # thread id holding it exclusively
        self.depth = 0  # re-entrant exclusive (and shared-under-exclusive) acquisitions
        self.os_kind = fcntl.F_UNLCK
        self.readers: dict[int, int] = {}  # thread id -> shared acquisitions it holds
        self.waiting = 0  # threads waiting to hold it exclusively
        self.gate = False  # this process holds the byte's gate (a writer of it waits)


class FileLocks:
    """The locks of one file (by device and inode), shared by every thread of the process.

    Use :func:`file_locks` to get the instance of a path. Methods are context
    managers: :meth:`writing`, :meth:`resolving`, :meth:`moving`,
    :meth:`reading_bytes`.

    Parameters
    ----------
    path : str
        The file (must exist).
    """

    def __init__(self, path: str):
        self.path = path
        self._cond = threading.Condition()
        self._states = {_WRITE: _RWState(), _MOVE: _RWState()}
        self._fd: int | None = None
        self._writable = False
        self._pid_locked = False

    # -- the descriptor ----------------------------------------------------------------
    def _descriptor(self, need_write: bool) -> int:
        if self._fd is not None and (self._writable or not need_write):
            return self._fd
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            writable = True
        except PermissionError:
            if need_write:
                raise
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            writable = False
        if self._fd is not None:
            # A read-only descriptor is replaced only while it holds no lock (see _acquire).
            os.close(self._fd)
        self._fd, self._writable = fd, writable
        return fd

    def _fork_reset(self) -> None:
        # After fork the child shares the parent's open file description: its locks are
        # the parent's. Start afresh with a descriptor of its own.
        self._fd = None
        self._writable = False
        self._pid_locked = False
        for state in self._states.values():
            state.shared, state.owner, state.depth, state.os_kind = 0, None, 0, fcntl.F_UNLCK
            state.readers, state.waiting, state.gate = {}, 0, False

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes of the file at ``offset`` (fewer at its end)."""
        with self._cond:
            if self._fd is not None:
                return os.pread(self._fd, size, offset)
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)

    def holds_write(self) -> bool:
        """True when this thread holds the ``WRITE`` lock exclusively."""
        with self._cond:
            return self._states[_WRITE].owner == threading.get_ident()

    def pwrite(self, data: bytes, offset: int) -> None:
        """Write ``data`` at ``offset`` through the descriptor of the held ``WRITE`` lock.

        Raises
        ------
        RuntimeError
            This thread does not hold the ``WRITE`` lock.
        OSError
            The write failed or was short.
        """
        with self._cond:
            if self._states[_WRITE].owner != threading.get_ident() or self._fd is None:
                raise RuntimeError(f"pwrite into {self.path!r} without holding its WRITE lock")
            if os.pwrite(self._fd, data, offset) != len(data):
                raise OSError(f"short write into {self.path!r} at byte {offset}")

    def _idle(self) -> bool:
        return all(state.owner is None and state.shared == 0 and not state.gate for state in self._states.values())

    def _close_if_idle(self) -> None:
        # No lock held: the descriptor is closed, so that a process touching many files
        # keeps none open, and a file replaced at the same path is locked afresh.
        if self._fd is not None and self._idle():
            os.close(self._fd)
            self._fd, self._writable = None, False

    # -- acquiring ----------------------------------------------------------------------
    def _acquire(self, byte: int, exclusive: bool, timeout: float, what: str) -> None:
        me = threading.get_ident()
        started = time.monotonic()
        deadline = started + timeout
        delay = 0.001
        with self._cond:
            state = self._states[byte]
            if state.owner == me:  # re-entrant, or shared under one's own exclusive lock
                state.depth += 1
                return
            if not exclusive and me in state.readers:  # shared again: never behind a waiting writer
                state.readers[me] += 1
                state.shared += 1
                return
            state.waiting += exclusive
            try:
                while True:
                    # Inside the process: wait for other threads (readers also for waiting writers).
                    if exclusive:
                        free = state.owner is None and state.shared == 0
                    else:
                        free = state.owner is None and not state.waiting
                    queue = not exclusive and time.monotonic() - started >= QUEUE_AFTER
                    if free and (not _HAVE_OFD or self._os_lock(state, byte, exclusive, queue)):
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._busy(what, timeout)
                    if free:  # another process: poll
                        self._cond.wait(min(delay, remaining))
                        delay = min(delay * 2, 0.05)
                    else:
                        self._cond.wait(min(0.05, remaining))
            except BaseException:  # timed out (or interrupted): open the gate unless another writer here waits
                state.waiting -= exclusive
                if state.gate and not state.waiting and self._fd is not None:
                    _try(self._fd, fcntl.F_UNLCK, _GATE[byte])
                    state.gate = False
                self._close_if_idle()
                raise
            state.waiting -= exclusive
            if exclusive:
                state.owner, state.depth = me, 1
            else:
                state.shared += 1
                state.readers[me] = 1

    def _os_lock(self, state: _RWState, byte: int, exclusive: bool, queue: bool = False) -> bool:
        """Take ``byte`` from other processes (under ``self._cond``); False while one holds it.

        A writer takes the byte's gate first and keeps it until it has the byte;
        a reader passes only through a free gate (see the module), or, with
        ``queue`` (it waited long), takes the gate as a writer does.
        """
        gate = _GATE[byte]
        if exclusive:
            fd = self._descriptor(need_write=True)
            if not state.gate:
                state.gate = _try(fd, fcntl.F_WRLCK, gate)
            if not state.gate or not _try(fd, fcntl.F_WRLCK, byte):
                return False
            _try(fd, fcntl.F_UNLCK, gate)
            state.gate = False
            state.os_kind = fcntl.F_WRLCK
            return True
        fd = self._descriptor(need_write=False)
        if queue and self._writable and state.os_kind != fcntl.F_RDLCK:
            # Hold the gate (the next writer waits for this reader) until the byte is ours.
            if not state.gate:
                state.gate = _try(fd, fcntl.F_WRLCK, gate)
            if not state.gate or not _try(fd, fcntl.F_RDLCK, byte):
                return False
            _try(fd, fcntl.F_UNLCK, gate)  # (no writer thread of this process waits: see free)
            state.gate = False
            state.os_kind = fcntl.F_RDLCK
            return True
        if not _try(fd, fcntl.F_RDLCK, gate):  # a writer of another process waits
            return False
        try:
            if state.os_kind != fcntl.F_RDLCK and not _try(fd, fcntl.F_RDLCK, byte):
                return False
        finally:
            _try(fd, fcntl.F_UNLCK, gate)
        state.os_kind = fcntl.F_RDLCK
        return True

    def _release(self, byte: int, exclusive: bool) -> None:
        me = threading.get_ident()
        with self._cond:
            state = self._states[byte]
            if state.owner == me:
                state.depth -= 1
                if state.depth:
                    return
                state.owner = None
            else:
                state.shared -= 1
                depth = state.readers.get(me, 0)
                if depth > 1:
                    state.readers[me] = depth - 1
                else:
                    state.readers.pop(me, None)
            if state.owner is None and state.shared == 0 and _HAVE_OFD and self._fd is not None:
                _try(self._fd, fcntl.F_UNLCK, byte)
                state.os_kind = fcntl.F_UNLCK
                self._close_if_idle()
            self._cond.notify_all()

    def _busy(self, what: str, timeout: float) -> FileBusyError:
        pid = holder_pid(self._fd) if self._fd is not None else None
        holder = f"process {pid}" if pid is not None else "another process or thread"
        return FileBusyError(
            f"{self.path!r} is busy: {holder} held it for more than {timeout:g} s while this one "
            f"waited to {what}; try again later, or raise the timeout (timeout=, or the "
            "VHDF5_LOCK_TIMEOUT environment variable, in seconds)",
            path=self.path,
            holder_pid=pid,
        )

    @contextlib.contextmanager
    def _held(self, byte: int, exclusive: bool, timeout: float, what: str) -> Iterator[None]:
        self._acquire(byte, exclusive, timeout, what)
        try:
            yield
        finally:
            self._release(byte, exclusive)

    # -- the locks ----------------------------------------------------------------------
    @contextlib.contextmanager
    def writing(self, timeout: float | None = None) -> Iterator[None]:
        """Hold ``WRITE`` exclusively (and this process's ``PIDS`` byte) for a mutation.

        Re-entrant in the thread that holds it.

        Raises
        ------
        FileBusyError
            Another writer, or a reader resolving a version, held it past ``timeout``
            seconds (default :data:`WRITE_TIMEOUT`).
        PermissionError
            The file cannot be opened for writing.
        """
        timeout = lock_timeout(WRITE_TIMEOUT) if timeout is None else timeout
        self._acquire(_WRITE, True, timeout, "write")
        try:
            with self._cond:
                outermost = self._states[_WRITE].depth == 1
                if outermost and _HAVE_OFD and not self._pid_locked and self._fd is not None:
                    self._pid_locked = _try(self._fd, fcntl.F_WRLCK, _PIDS + os.getpid())
            yield
        finally:
            with self._cond:
                if self._states[_WRITE].depth == 1 and self._pid_locked and self._fd is not None:
                    _try(self._fd, fcntl.F_UNLCK, _PIDS + os.getpid())
                    self._pid_locked = False
            self._release(_WRITE, True)

    def resolving(self, timeout: float | None = None):
        """Hold ``WRITE`` shared while reading the file's metadata through libhdf5.

        Raises
        ------
        FileBusyError
            A writer held the file past ``timeout`` seconds (default :data:`READ_TIMEOUT`).
        """
        timeout = lock_timeout(READ_TIMEOUT) if timeout is None else timeout
        return self._held(_WRITE, False, timeout, "read the version list")

    def moving(self, timeout: float | None = None):
        """Hold ``MOVE`` exclusively while chunks of raw_data move or are freed.

        Raises
        ------
        FileBusyError
            Readers kept reading chunk bytes past ``timeout`` seconds (default
            :data:`WRITE_TIMEOUT`).
        """
        timeout = lock_timeout(WRITE_TIMEOUT) if timeout is None else timeout
        return self._held(_MOVE, True, timeout, "move chunks")

    def reading_bytes(self, timeout: float | None = None):
        """Hold ``MOVE`` shared while reading chunk bytes at addresses resolved earlier.

        Raises
        ------
        FileBusyError
            Chunks were being moved past ``timeout`` seconds (default :data:`READ_TIMEOUT`).
        """
        timeout = lock_timeout(READ_TIMEOUT) if timeout is None else timeout
        return self._held(_MOVE, False, timeout, "read chunks")


_REGISTRY: dict[tuple[int, int], FileLocks] = {}
_REGISTRY_LOCK = threading.Lock()
#: The last answer of :func:`file_locks` for each path string, with the file's (device, inode).
_LAST: dict[str, tuple[tuple[int, int], FileLocks]] = {}


def file_locks(path: str | os.PathLike) -> FileLocks:
    """The :class:`FileLocks` of the file at ``path``, one per file in the process.

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    """
    path = os.path.abspath(path)  # a relative path names another file after a chdir
    st = os.stat(path)
    key = (st.st_dev, st.st_ino)
    known = _LAST.get(path)
    if known is not None and known[0] == key:
        return known[1]  # the same file at the same path as last time (one stat, no realpath)
    real = os.path.realpath(path)
    with _REGISTRY_LOCK:
        locks = _REGISTRY.get(key)
        if locks is not None and locks.path != real and not path_names(locks.path, key):
            # The inode of a deleted file, reused by this one while the old file's locks are
            # still held (a reader left open): they are not this file's. Its holders keep them.
            locks = None
        if locks is None:
            locks = _REGISTRY[key] = FileLocks(real)
        elif locks.path != real:  # another link to the same file
            with locks._cond:
                if locks._idle():
                    locks.path = real
        if locks.path == real:
            _LAST[path] = (key, locks)
        return locks


def path_names(path: str, key: tuple[int, int]) -> bool:
    """Whether ``path`` still names the file ``key``, its ``(st_dev, st_ino)`` (False if it names none).

    A file replaced at its path (``vhdf5 repack``, a copy moved over it) has
    another inode: locks or handles of the old one must not serve the new.
    """
    try:
        st = os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == key


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    _LAST.clear()
    for locks in _REGISTRY.values():
        locks._cond = threading.Condition()
        locks._fork_reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
