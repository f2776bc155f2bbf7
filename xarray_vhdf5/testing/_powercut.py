"""Simulated crashes for the journal's tests: power cuts and kills at chosen system calls.

:class:`PowerCutIO` is an :class:`~xarray_vhdf5._versions.journal.OsIO` that
writes through to the real files (so the process goes on as usual) while it
keeps, per file, the image a disk would hold after a power cut: the bytes as
of the last ``fsync`` of that file, plus the writes, truncations and the
journal's deletion made since (pending). :meth:`PowerCutIO.cut` writes such an
image to another folder: the synced state plus a random subset of the
pending operations, applied in any order of their own (a disk may persist any
subset of unsynced writes before it loses power; each write lands whole or
not at all). :meth:`PowerCutIO.snapshots` is called after every system call,
so a test can cut power at every instant of a mutation. Its system calls and
cuts are serialized by a lock, so the model stays exact when a mutation makes
them from two threads (the in-place rewrite's side copy).

:class:`KillAtIO` kills its own process (SIGKILL) at the n-th write of the
file or its journal: deterministic crash points for a child process.

Both are used through :func:`xarray_vhdf5._versions.mutation.open_file` (its
``io`` argument).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from .._versions.journal import JOURNAL_SUFFIX, OsIO

__all__ = ["KillAtIO", "PowerCutIO", "in_forked_child"]


@dataclass
class _Image:
    """What the disk holds durably of one file, and what is pending since its last sync."""

    synced: bytearray | None  # None: the file does not exist durably
    pending: list[tuple] = field(default_factory=list)  # ("write", off, bytes) | ("truncate", n) | ("unlink",)


def _serialized(method):
    """Run ``method`` under the instance's lock: each system call and its bookkeeping, one at a time."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class PowerCutIO(OsIO):
    """Write-through system calls that also model what a power cut would keep.

    Parameters
    ----------
    after_call : callable, optional
        Called with the name of every system call once it is done (a test
        cuts power there: :meth:`cut`).
    """

    def __init__(self, after_call: Callable[[str], None] | None = None):
        self.after_call = after_call
        self._paths: dict[int, str] = {}
        self._images: dict[str, _Image] = {}
        self.calls = 0
        self._lock = threading.RLock()  # re-entered: a cut is taken inside the call it follows

    # -- bookkeeping ---------------------------------------------------------------------
    def _image(self, path: str) -> _Image:
        image = self._images.get(path)
        if image is None:
            with open(path, "rb") as fh:  # a file present before: durable as it is
                image = self._images[path] = _Image(bytearray(fh.read()))
        return image

    def _done(self, name: str) -> None:
        self.calls += 1
        if self.after_call is not None:
            self.after_call(name)

    # -- OsIO ----------------------------------------------------------------------------
    @_serialized
    def open(self, path: str, create: bool = False) -> int:
        path = os.path.abspath(path)
        if create:
            image = self._images.get(path)
            if image is None or image.synced is None:
                self._images[path] = _Image(None, [("create",)])
            else:
                image.pending.append(("truncate", 0))
        else:
            self._image(path)
        fd = super().open(path, create)
        self._paths[fd] = path
        self._done("open")
        return fd

    @_serialized
    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        super().close(fd)

    @_serialized
    def pwrite(self, fd: int, data, offset: int) -> int:
        n = super().pwrite(fd, data, offset)
        self._images[self._paths[fd]].pending.append(("write", offset, bytes(memoryview(data)[:n])))
        self._done("pwrite")
        return n

    @_serialized
    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        self._images[self._paths[fd]].pending.append(("truncate", size))
        self._done("truncate")

    def copy_range(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """Through :meth:`pwrite`, so that the model sees (and a cut can drop) every piece written."""
        self.copy_by_pwrite(src, dst, length, src_offset, dst_offset)

    @_serialized
    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        path = self._paths[fd]
        image = self._images[path]
        image.synced = bytearray(_read(path))
        image.pending = []
        self._done("fsync")

    @_serialized
    def unlink(self, path: str) -> None:
        path = os.path.abspath(path)
        super().unlink(path)
        self._image_or_none(path).pending.append(("unlink",))
        self._done("unlink")

    @_serialized
    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        folder = os.path.dirname(os.path.abspath(path))
        for name, image in list(self._images.items()):
            if os.path.dirname(name) != folder:
                continue
            # The directory entry is durable now: creation and deletion are settled.
            if any(op[0] == "unlink" for op in image.pending):
                image.synced, image.pending = None, []
            elif image.synced is None:
                image.synced = bytearray()
                image.pending = [op for op in image.pending if op[0] != "create"]
        self._done("fsync_dir")

    def _image_or_none(self, path: str) -> _Image:
        image = self._images.get(path)
        if image is None:
            image = self._images[path] = _Image(None)
        return image

    # -- the cut -------------------------------------------------------------------------
    @_serialized
    def cut(self, into: str, rng: random.Random, keep: float = 0.5) -> dict[str, str | None]:
        """Write what the disk would hold after a power cut now into folder ``into``.

        Each pending operation survives with probability ``keep``, in an order
        of its own (a random subset, applied in issue order: a later write over
        the same bytes wins, as on a disk that kept both).

        Returns
        -------
        dict of str to str or None
            For every file followed, the path of its image in ``into``, or
            None when it would not exist after the cut.
        """
        os.makedirs(into, exist_ok=True)
        out: dict[str, str | None] = {}
        for path, image in self._images.items():
            data = None if image.synced is None else bytearray(image.synced)
            exists = image.synced is not None
            for op in image.pending:
                if rng.random() >= keep:
                    continue
                if op[0] == "create":
                    exists, data = True, bytearray()
                elif op[0] == "unlink":
                    exists, data = False, None
                elif data is None:  # (exists is False: the file is not there)
                    continue
                elif op[0] == "write":
                    _, offset, chunk = op
                    if len(data) < offset:
                        data.extend(b"\0" * (offset - len(data)))
                    data[offset : offset + len(chunk)] = chunk
                else:
                    del data[op[1] :]
            target = os.path.join(into, os.path.basename(path))
            if exists and data is not None:
                with open(target, "wb") as fh:
                    fh.write(data)
                out[path] = target
            else:
                if os.path.exists(target):
                    os.unlink(target)
                out[path] = None
        return out

    @_serialized
    def follow(self, path: str) -> None:
        """Start following ``path`` (as it is on disk now: synced) and its journal."""
        path = os.path.abspath(path)
        self._images[path] = _Image(bytearray(_read(path)))
        journal = path + JOURNAL_SUFFIX
        self._images.setdefault(journal, _Image(bytearray(_read(journal)) if os.path.exists(journal) else None))


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


class KillAtIO(OsIO):
    """System calls that SIGKILL the process at the ``n``-th write (or truncation) they make.

    Parameters
    ----------
    n : int
        1 for the first write since :meth:`arm`.
    """

    def __init__(self, n: int):
        self.n = n
        self.count = 0
        self.armed = False

    def arm(self) -> None:
        """Count writes from now on."""
        self.armed, self.count = True, 0

    def _tick(self) -> None:
        if self.armed:
            self.count += 1
            if self.count >= self.n:
                os.kill(os.getpid(), signal.SIGKILL)

    def pwrite(self, fd: int, data, offset: int) -> int:
        self._tick()
        return super().pwrite(fd, data, offset)

    def truncate(self, fd: int, size: int) -> None:
        self._tick()
        super().truncate(fd, size)

    def copy_range(self, src: int, dst: int, length: int, src_offset: int, dst_offset: int) -> None:
        """Through :meth:`pwrite`: each piece written is a place to be killed."""
        self.copy_by_pwrite(src, dst, length, src_offset, dst_offset)

    def unlink(self, path: str) -> None:
        self._tick()
        super().unlink(path)


def copy_with_journal(path: str, into: str) -> str:
    """Copy ``path`` and its journal (if any) into folder ``into``; returns the copy's path."""
    os.makedirs(into, exist_ok=True)
    target = os.path.join(into, os.path.basename(path))
    shutil.copyfile(path, target)
    if os.path.exists(path + JOURNAL_SUFFIX):
        shutil.copyfile(path + JOURNAL_SUFFIX, target + JOURNAL_SUFFIX)
    return target


def in_forked_child(work: Callable[[], object]) -> int:
    """Run ``work()`` in a forked child process and wait for it; return its wait status.

    The child exits with 0 when ``work`` returned and 3 when it raised (the
    traceback on stderr), through ``os._exit``, so that nothing of the parent
    (pytest, hypothesis) runs in it; a child killed by a signal (``KillAtIO``)
    shows in ``os.WIFSIGNALED(status)``.

    Returns
    -------
    int
        The status ``os.waitpid`` gives.
    """
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            work()
            code = 0
        except BaseException:  # noqa: BLE001 the child exits with a code whatever went wrong
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1]
