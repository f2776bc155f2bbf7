"""Lazy arrays of the read engine, one per variable (xarray backend guide, "BackendArray").

Nothing is read until the array is indexed, and then only the chunks the
selection touches.

- :class:`ManifestBackendArray` (files opened by path): the chunk addresses
  resolved once from the version's virtual dataset and raw_data
  (:mod:`~xarray_vhdf5.backend.manifest`), then bytes read and decoded
  without libhdf5.
- :class:`HandleBackendArray` (variable-length strings, filters without a
  decoder here): a fresh libhdf5 handle per read, under the file's lock.
- :class:`VersionedBackendArray` (binary file objects): through the
  version's virtual dataset on a ``CachingFileManager``'s handle (HDF5
  Virtual Dataset documentation).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import h5py
import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from ..backend.layout import versions_path
from ..backend.manifest import resolve_manifest
from ..backend.signature import open_h5file
from ..errors import VersionNotFoundError
from ..versions import generation
from ..versions.locking import file_locks

__all__ = ["HandleBackendArray", "ManifestBackendArray", "PathSource", "VersionedBackendArray", "version_dataset"]


class VersionedBackendArray(BackendArray):
    """A variable of one version, read lazily through a ``CachingFileManager``.

    Parameters
    ----------
    manager : xarray.backends.CachingFileManager
        Opens the ``h5py.File`` (read-only); it pickles, so the array can be
        sent to dask workers, which reopen the file themselves.
    path : str
        Absolute HDF5 path of the variable's virtual dataset.
    shape : tuple of int
        Shape, in points.
    dtype : numpy.dtype
        dtype of the returned arrays (``object`` holding ``str`` for UTF-8
        variable-length strings).

    Notes
    -----
    Declares ``IndexingSupport.OUTER_1VECTOR``: slices with any step plus one
    integer array (any order, duplicates allowed; it is sorted and made unique
    for HDF5 and the result reordered). xarray applies any further vectorized
    indexing in memory.
    """

    def __init__(self, manager, path: str, shape: tuple[int, ...], dtype: np.dtype, as_str: bool):
        self.manager = manager
        self.path = path
        self.shape = shape
        self.dtype = dtype
        self.as_str = as_str

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem
        )

    def _getitem(self, key: tuple) -> np.ndarray:
        with self.manager.acquire_context() as f:
            ds = f[self.path]
            source = ds.asstr() if self.as_str else ds
            if self.shape == ():  # a scalar variable, stored as one point (see writer)
                return np.asarray(source[()]).reshape(())
            return _read_outer(source, key, self.shape)


def _read_outer(source, key: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """Read ``source[key]`` where ``key`` holds slices, ints and at most one int array."""
    key = tuple(key) + (slice(None),) * (len(shape) - len(key))
    hdf5_key = []
    reorder = None
    for axis, k in enumerate(key):
        if isinstance(k, np.ndarray) and k.ndim == 1 and k.dtype.kind in "iu":
            k = np.where(k < 0, k + shape[axis], k)
            unique, inverse = np.unique(k, return_inverse=True)
            if unique.size == 0:
                hdf5_key.append(slice(0, 0))
            elif unique.size == 1 or np.all(np.diff(unique) == 1):
                hdf5_key.append(slice(int(unique[0]), int(unique[-1]) + 1))
            else:
                hdf5_key.append(unique)
            reorder = (axis, inverse)
        elif isinstance(k, slice) and k.step is not None and k.step < 0:
            # HDF5 selections step forward: read forward, then reverse in memory.
            start, stop, step = k.indices(shape[axis])
            idx = np.arange(start, stop, step)
            if idx.size == 0:
                hdf5_key.append(slice(0, 0))
            else:
                hdf5_key.append(slice(int(idx[-1]), int(idx[0]) + 1, -step))
        else:
            hdf5_key.append(k)
    out = source[tuple(hdf5_key)]
    out = np.asarray(out)
    # Undo the forward reading of negative steps, then the unique-sorting of the vector.
    result_axis = 0
    for axis, k in enumerate(key):
        if isinstance(k, (int, np.integer)):
            continue
        if isinstance(k, slice) and k.step is not None and k.step < 0:
            out = np.flip(out, axis=result_axis)
        if reorder is not None and reorder[0] == axis:
            out = np.take(out, reorder[1], axis=result_axis)
        result_axis += 1
    return out


class PathSource:
    """A versioned file read by path: fresh read-only handles under the ``WRITE`` lock, shared.

    The engine holds no HDF5 handle between reads. It resolves a version once,
    under the file's lock (:meth:`open`), into one
    :class:`~xarray_vhdf5.backend.manifest.ChunkManifest` per variable, and reads
    chunk bytes afterwards without libhdf5, so a writer updating the file's
    metadata in place never breaks a reader and a reader never blocks a
    commit (:mod:`~xarray_vhdf5.versions.locking`). Pickles by value: dask
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

    @contextlib.contextmanager
    def open(self, hint: str = "") -> Iterator[h5py.File]:
        """A fresh read-only handle (libhdf5's locking off) while the ``WRITE`` lock is held shared.

        Raises
        ------
        FileBusyError
            A writer held the file past the reader's timeout.
        NotHDF5Error, OSError
            As :func:`~xarray_vhdf5.backend.signature.open_h5file`.
        """
        locks = file_locks(self.path)
        with locks.resolving():
            f = open_h5file(self.path, "r", hint=hint, locking=False)
            try:
                self.offset = generation.locate(f)
                self.moves = self._moves(locks)
                if self.offset is None:
                    st = os.stat(self.path)
                    self.stat = (st.st_mtime_ns, st.st_size)
                yield f
            finally:
                f.close()

    def _moves(self, locks) -> int:
        if self.offset is None:
            return 0
        return generation.read_at_bytes(locks.pread(16, self.offset).ljust(16, b"\0")).moves

    def current(self, locks) -> bool:
        """True while chunk addresses resolved by :meth:`open` are still valid (no chunk moved since)."""
        if self.offset is None:
            st = os.stat(self.path)  # counters created since? (a file we never wrote)
            return (st.st_mtime_ns, st.st_size) == self.stat
        return self._moves(locks) == self.moves

    def close(self) -> None:
        """Nothing is held between reads: nothing to close."""

    def __getstate__(self) -> dict:
        return dict(self.__dict__)


class ManifestBackendArray(BackendArray):
    """A variable of one version, read from its chunk manifest without libhdf5.

    Parameters
    ----------
    source : PathSource
        The file; resolves the version again when chunks moved (a deletion or
        ``modify_metadata`` since), under the file's lock.
    version : str
        The version's name.
    path : str
        Absolute HDF5 path of the variable's virtual dataset.
    manifest : ChunkManifest
        The chunk addresses and filters of the variable in that version.
    shape : tuple of int
        Shape, in points (``()`` for a scalar, stored as one point).

    Notes
    -----
    ``IndexingSupport.OUTER_1VECTOR``, as :class:`VersionedBackendArray`. A
    read takes the ``MOVE`` lock shared, checks the file's moves counter and
    reads bytes; when chunks have moved it releases the lock, resolves the
    version again and retries. A version deleted meanwhile raises
    :class:`~xarray_vhdf5.errors.VersionNotFoundError`.
    """

    def __init__(self, source: PathSource, version: str, path: str, manifest, shape: tuple[int, ...]):
        self.source = source
        self.version = version
        self.path = path
        self.manifest = manifest
        self.shape = shape
        self.dtype = manifest.dtype
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem
        )

    def _getitem(self, key: tuple) -> np.ndarray:
        locks = file_locks(self.source.path)
        while True:
            manifest = self.manifest
            with locks.reading_bytes():
                if self.source.current(locks):
                    if self.shape == ():
                        return manifest.read((0,))
                    return manifest.read(key)
            self._resolve_again()

    def _resolve_again(self) -> None:
        with self._lock:
            with self.source.open() as f:
                vds = version_dataset(f, self.version, self.path)
                self.manifest = resolve_manifest(vds, verify=self.source.verify)


class HandleBackendArray(BackendArray):
    """A variable read through libhdf5 with a fresh handle per read (no manifest possible).

    For variable-length strings (their chunks hold global-heap references) and
    filters no codec library here decodes
    (:attr:`~xarray_vhdf5.backend.manifest.ChunkManifest.supported`). Each read
    opens the file under the ``WRITE`` lock shared (:meth:`PathSource.open`), so
    it never sees a commit half written; a commit waits for it.
    """

    def __init__(self, source: PathSource, version: str, path: str, shape, dtype, as_str: bool):
        self.source = source
        self.version = version
        self.path = path
        self.shape = shape
        self.dtype = dtype
        self.as_str = as_str

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            key, self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem
        )

    def _getitem(self, key: tuple) -> np.ndarray:
        with self.source.open() as f:
            ds = version_dataset(f, self.version, self.path)
            source = ds.asstr() if self.as_str else ds
            if self.shape == ():
                return np.asarray(source[()]).reshape(())
            return _read_outer(source, key, self.shape)


def version_dataset(f: h5py.File, version: str, path: str) -> h5py.Dataset:
    """The dataset at ``path`` of ``f``, which must still be in ``version``.

    Raises
    ------
    VersionNotFoundError
        The version was deleted since the Dataset was opened.
    """
    versions = f.get(versions_path())
    if versions is None or version not in versions or path not in f:
        raise VersionNotFoundError(
            f"{f.filename!r}: version {version!r} was deleted while a Dataset read from it was open; "
            "open another version"
        )
    return f[path]
