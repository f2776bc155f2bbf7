"""Helpers of the multi-process tests: process starts, ledgers, lock timing, summaries.

Shared by the stress runs (:mod:`.stress`), the racing writers (:mod:`.race`),
the crash harness (:mod:`.crash`) and the loops (:mod:`.loops`):

- :func:`process_context`: a ``forkserver`` context whose children share no
  HDF5 state with the driving process;
- :class:`Ledger`: an append-only JSON-lines record of what a child did,
  readable while it is written (and after the child was killed);
- :func:`instrument_locks` / :class:`LockWaits`: how long each of the
  :class:`~xarray_vhdf5._versions.locking.FileLocks` context managers waited;
- :func:`describe_error` and :func:`write_json`: a child's summary.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Ledger", "LockWaits", "describe_error", "instrument_locks", "process_context", "write_json"]


def process_context(
    preload: tuple[str, ...] = (
        "h5py",
        "xarray",
        "xarray_vhdf5",
        "xarray_vhdf5.xr._accessor",
        "xarray_vhdf5.xr._reading",
    ),
):
    """A ``forkserver`` multiprocessing context whose server has imported ``preload``.

    Children fork from a process that imported the libraries but opened no
    file, so they start in tens of milliseconds and share no HDF5 state with
    the caller. Falls back to ``spawn`` where ``forkserver`` is unavailable.

    Parameters
    ----------
    preload : tuple of str
        Modules the server imports (its children inherit them).

    Returns
    -------
    multiprocessing.context.BaseContext
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    return ctx


class Ledger:
    """An append-only JSON-lines file: one record per line, readable while it is written.

    Parameters
    ----------
    path : str or os.PathLike
        The file (created on the first :meth:`append`).

    Notes
    -----
    Each record is written with one ``write`` of a whole line on an
    ``O_APPEND`` descriptor; :meth:`read` returns only whole lines, so a reader
    never sees half a record, and a process killed while appending leaves at
    most one partial last line, which is ignored.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._fd: int | None = None
        self._offset = 0
        self._buffer = b""
        self._records: list[dict] = []

    def append(self, record: dict, fsync: bool = True) -> None:
        """Append ``record`` (JSON-serialisable) as one line; ``fsync`` it before returning."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(self._fd, (json.dumps(record) + "\n").encode())
        if fsync:
            os.fsync(self._fd)

    def read(self) -> list[dict]:
        """Every whole record written so far (read incrementally; the list is shared, do not modify)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return self._records
        self._offset += len(data)
        data = self._buffer + data
        *lines, self._buffer = data.split(b"\n")
        self._records.extend(json.loads(line) for line in lines if line)
        return self._records

    def close(self) -> None:
        """Close the descriptor used by :meth:`append`."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class LockWaits:
    """Time each lock took to enter in this process, by lock (``writing``, ``moving``, ...).

    Attributes
    ----------
    waits : dict of str to list of float
        Seconds each acquisition waited.
    holds : dict of str to list of float
        Seconds each acquisition held the lock (from entering to leaving).
    """

    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    holds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    def max_ms(self, *names: str) -> float:
        """Longest wait among the locks ``names`` (all when none given), in ms; 0 without any."""
        names = names or tuple(self.waits)
        values = [w for n in names for w in self.waits.get(n, ())]
        return 1e3 * max(values, default=0.0)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per lock: ``count``; the waits' ``max_ms``, ``p99_ms``, ``median_ms``, ``over_100ms`` (a count);
        the holdings' ``held_max_ms`` and ``held_median_ms``."""
        out = {}
        for name, values in self.waits.items():
            arr = np.asarray(values)
            held = np.asarray(self.holds.get(name, ()))
            out[name] = {
                "count": int(arr.size),
                "max_ms": float(1e3 * arr.max()) if arr.size else 0.0,
                "p99_ms": float(1e3 * np.quantile(arr, 0.99)) if arr.size else 0.0,
                "median_ms": float(1e3 * np.median(arr)) if arr.size else 0.0,
                "over_100ms": int((arr > 0.1).sum()),
                "held_max_ms": float(1e3 * held.max()) if held.size else 0.0,
                "held_median_ms": float(1e3 * np.median(held)) if held.size else 0.0,
            }
        return out


class _TimedLock:
    def __init__(self, manager, waits: list[float], holds: list[float]):
        self._manager = manager
        self._waits = waits
        self._holds = holds
        self._entered = 0.0

    def __enter__(self):
        start = time.perf_counter()
        try:
            value = self._manager.__enter__()
        except BaseException:  # a timeout (FileBusyError): the wait counts too
            self._waits.append(time.perf_counter() - start)
            raise
        self._entered = time.perf_counter()
        self._waits.append(self._entered - start)
        return value

    def __exit__(self, *exc):
        try:
            return self._manager.__exit__(*exc)
        finally:
            self._holds.append(time.perf_counter() - self._entered)


def instrument_locks() -> LockWaits:
    """Time every lock acquisition of this process from now on (patches ``FileLocks``' methods).

    Each of ``FileLocks.writing``, ``resolving``, ``moving`` and
    ``reading_bytes`` is wrapped so that the time its context manager takes to
    enter (the wait for other processes and threads, plus the system calls) is
    recorded, also when it gives up (``FileBusyError``), and how long the lock
    was held. Re-entrant acquisitions are recorded too (they take microseconds).
    Meant for child processes of a stress run; calling it twice in one
    process records each acquisition once per call.

    Returns
    -------
    LockWaits
        Filled in as locks are taken.
    """
    from .._versions.locking import FileLocks

    timing = LockWaits()
    for name in ("writing", "resolving", "moving", "reading_bytes"):
        original = getattr(FileLocks, name)

        def wrapper(self, *args, _original=original, _name=name, **kwargs):
            return _TimedLock(_original(self, *args, **kwargs), timing.waits[_name], timing.holds[_name])

        wrapper.__doc__ = original.__doc__
        setattr(FileLocks, name, wrapper)
    return timing


def describe_error(exc: BaseException, where: bool = False) -> str:
    """``"Type: message"`` (the message cut at 300 characters); ``where``: and the package frames it passed."""
    text = f"{type(exc).__name__}: {str(exc)[:300]}"
    if where:
        frames = [
            f"{os.path.basename(f.filename)}:{f.name}"
            for f in traceback.extract_tb(exc.__traceback__)
            if "xarray_vhdf5" in f.filename and "testing" not in f.filename
        ]
        text += f" (in {' -> '.join(frames)})"
    return text


def write_json(path: str, value: Any) -> None:
    """Write ``value`` as JSON to ``path`` whole: to a temporary file, then renamed over it."""
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(value, fh)
    os.replace(tmp, path)
