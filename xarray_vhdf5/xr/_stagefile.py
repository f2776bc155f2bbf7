"""The read-only file handle a stage owns (:class:`StageFile`), and raw_data rows read through it (:class:`RawRows`).

File handles: the base slab of each staged array is the raw_data
``h5py.Dataset`` of a read-only handle owned by the stage (:class:`StageFile`),
registered with the engine's handles so that
:func:`~xarray_vhdf5.xr._reading.close_read_handles` closes it before a commit
opens the file for writing (libhdf5 refuses a read-write open while the
process holds a read-only one). Before closing, each array swaps its base slab
for a :class:`RawRows` (same rows, read through the stage's handle, which
reopens the file); the next read swaps the reopened ``h5py.Dataset`` back in
(:meth:`~xarray_vhdf5._staging.StagedChangesArray.astype` with
``base_slabs``, "Hot-swapping the base slabs"), so staged changes survive and
reads stay on the compiled path.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Iterator
from typing import Protocol

import h5py
import numpy as np

from .._backend.signature import open_for_reading
from .._versions import generation
from .._versions.locking import file_locks
from ..errors import StaleVersionError

__all__ = ["RawRows", "StageFile"]


class StagedArray(Protocol):
    """What a :class:`StageFile` asks of the arrays registered with it (``StagedVariableArray``)."""

    @property
    def base_key(self) -> tuple: ...

    def check_base(self, f: h5py.File, states: dict | None = None) -> None: ...

    def detach(self) -> None: ...


class StageFile:
    """The read-only handle a stage owns on its file, shared by its arrays.

    :meth:`close` (called by :func:`~xarray_vhdf5.xr._reading.close_read_handles`
    before a commit, and by the staged Dataset's ``close()``) first detaches
    every array from the handle (their base slab becomes a :class:`RawRows`,
    which reopens the file when read), so staged changes survive it.

    Parameters
    ----------
    path : str
        Real path of the file.
    """

    def __init__(self, path: str):
        self.path = path
        self._file: h5py.File | None = None
        self.arrays: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        #: Bases found stale when the file was last opened: ``base_key`` -> message.
        self._stale: dict[tuple, str] = {}
        #: What the handle's libhdf5 caches reflect: the file's counters (or stat) at its opening.
        self._opened_at: tuple | None = None

    def _state(self, f: h5py.File | None = None) -> tuple:
        """The file's write counters (read as bytes), or its (mtime, size) when it has none."""
        if f is not None:
            self._offset = generation.locate(f)
        offset: int | None = getattr(self, "_offset", None)
        if offset is None:
            st = os.stat(self.path)
            return ("stat", st.st_mtime_ns, st.st_size)
        return tuple(generation.read_at_bytes(file_locks(self.path).pread(16, offset).ljust(16, b"\0")))

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the file's ``WRITE`` lock shared while the stage reads through its handle.

        A commit of another process rewrites libhdf5's metadata in place: a
        read meanwhile, or through a cache that predates it, is torn. So reads
        wait for a running commit, and a handle opened before a commit is
        closed first (the arrays keep their rows:
        :meth:`~xarray_vhdf5.xr._staged_array.StagedVariableArray.detach`) and
        opened again, checked, by :meth:`acquire`.

        Raises
        ------
        FileBusyError
            A writer held the file past the reader's timeout.
        """
        with file_locks(self.path).resolving():
            if self._file is not None and self._file.id.valid and self._state() != self._opened_at:
                self.close()
            yield

    def acquire(self, base: tuple | None = None) -> h5py.File:
        """The open file (opened read-only if needed).

        On reopening, every registered array is checked
        (:meth:`~xarray_vhdf5.xr._staged_array.StagedVariableArray.check_base`); the stale ones are only
        recorded, so the others stay readable.

        Parameters
        ----------
        base : tuple, optional
            ``(raw_path, base_table_state)`` of the array about to read
            (:attr:`~xarray_vhdf5.xr._staged_array.StagedVariableArray.base_key`); refused if that base was
            found stale.

        Raises
        ------
        StaleVersionError
            ``base`` was rewritten by another writer meanwhile (its raw_data
            rows moved: versions deleted, or ``modify_metadata``).
        """
        if self._file is None or not self._file.id.valid:
            # Holding no flock: the stage never blocks a writer (a commit of this
            # process holds libhdf5's lock on its own handle while it reads the stage).
            f = open_for_reading(self.path, held=True)
            states: dict = {}  # each hash table's state read once (arrays share raw_data)
            stale: dict[tuple, str] = {}
            try:
                for array in list(self.arrays.values()):
                    try:
                        array.check_base(f, states)
                    except StaleVersionError as err:
                        stale[array.base_key] = str(err)
            except BaseException:
                f.close()
                raise
            self._file, self._stale = f, stale
            self._opened_at = self._state(f)
        if base is not None and base in self._stale:
            raise StaleVersionError(self._stale[base])
        return self._file

    def register(self, array: StagedArray) -> None:
        self.arrays[id(array)] = array

    def close(self) -> None:
        """Detach the arrays, then close the handle (it reopens on the next read)."""
        for array in list(self.arrays.values()):
            array.detach()
        if self._file is not None and self._file.id.valid:
            self._file.close()
        self._file = None


class RawRows:
    """A raw_data read through a :class:`StageFile`: a base slab that survives closing the file.

    Also stands for the first rows of a raw_data that grew since it was
    staged (another commit appended to it): staged chunks only address rows
    below ``shape[0]``, which commits never change. Deleting versions and
    ``modify_metadata`` rewrite raw_data; the file is then refused when
    reopened (:meth:`StageFile.acquire`).
    Read-only array-like (``shape``, ``dtype``, numpy slicing).
    """

    def __init__(
        self,
        handle: StageFile,
        raw_path: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        table_state: tuple[int, bytes] | None = None,
    ):
        self.handle = handle
        self.raw_path = raw_path
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        #: The hash-table state the rows were mapped under (``StagedVariableArray.base_table_state``).
        self.table_state = table_state

    def __getitem__(self, key):
        return self.handle.acquire((self.raw_path, self.table_state))[self.raw_path][key]
