"""Lazy arrays of the read engine, one per variable (xarray backend guide, "BackendArray").

Nothing is read until the array is indexed, and then only the chunks the
selection touches.

- :class:`ManifestBackendArray` (files opened by path): the chunk addresses
  resolved once from the version's virtual dataset and raw_data
  (:mod:`~xarray_vhdf5._backend.manifest`), then bytes read and decoded
  without libhdf5.
- :class:`HandleBackendArray` (variable-length strings, filters without a
  decoder here): a fresh libhdf5 handle per read, under the file's lock.
- :class:`VersionedBackendArray` (binary file objects): through the
  version's virtual dataset on a ``CachingFileManager``'s handle (HDF5
  Virtual Dataset documentation).
"""

from __future__ import annotations

import threading

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from .._versions.sharing import SharedFile, version_dataset

__all__ = ["HandleBackendArray", "ManifestBackendArray", "VersionedBackendArray"]


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
            return _read_dataset(f[self.path], key, self.shape, self.as_str)


def _read_dataset(ds, key: tuple, shape: tuple[int, ...], as_str: bool) -> np.ndarray:
    """``ds[key]`` through libhdf5: strings decoded when ``as_str``; a scalar stored as one point (see writer)."""
    source = ds.asstr() if as_str else ds
    if shape == ():
        return np.asarray(source[()]).reshape(())
    return _read_outer(source, key, shape)


def _selected_shape(key: tuple, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of ``array[key]`` for an outer ``key`` (slices, ints, 1-d int arrays), in points."""
    out = []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            out.append(len(range(*k.indices(n))))
        elif isinstance(k, np.ndarray):
            out.append(k.size)
    return tuple(out)


def _read_outer(source, key: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """Read ``source[key]`` where ``key`` holds slices, ints and at most one int array.

    A key selecting no point reads nothing: libhdf5 2.0 fails such a read of
    a virtual dataset with many mappings (``unable to get selection bounds``).
    """
    key = tuple(key) + (slice(None),) * (len(shape) - len(key))
    selected = _selected_shape(key, shape)
    if 0 in selected:
        return np.zeros(selected, dtype=source.dtype)
    hdf5_key: list[slice | np.ndarray] = []
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


class ManifestBackendArray(BackendArray):
    """A variable of one version, read from its chunk manifest without libhdf5.

    Parameters
    ----------
    source : SharedFile
        The file; resolves the version (on the first read, and again when
        chunks moved: a deletion or ``modify_metadata`` since) under the
        file's lock.
    version : str
        The version's name.
    path : str
        Absolute HDF5 path of the variable's virtual dataset.
    shape : tuple of int
        Shape, in points (``()`` for a scalar, stored as one point).
    dtype : numpy.dtype
        dtype of the points.
    timestamp : optional
        The version's ``timestamp`` attribute (tells it from a later version
        of the same name).
    manifest : ChunkManifest, optional
        Resolved when the Dataset was opened (the engine does: a read while
        this process commits then needs no lock); None: on the first read.

    Notes
    -----
    ``IndexingSupport.OUTER_1VECTOR``, as :class:`VersionedBackendArray`. A read
    takes the ``MOVE`` lock shared, checks the file's
    moves counter and reads bytes; when chunks have moved it releases the
    lock, resolves the version again and retries. A version deleted
    meanwhile raises :class:`~xarray_vhdf5.errors.VersionNotFoundError`. A
    dataset whose chunks no decoder here reads (a filter such as scaleoffset)
    is read through libhdf5 under the lock instead.
    """

    def __init__(
        self, source: SharedFile, version: str, path: str, shape: tuple[int, ...], dtype, timestamp=None, manifest=None
    ):
        self.source = source
        self.version = version
        self.timestamp = timestamp  # of the version, to tell it from a later one of the same name
        self.path = path
        self.manifest = manifest
        self.shape = shape
        self.dtype = np.dtype(dtype)
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
        return self.source.read(self, (0,) if self.shape == () else key)

    def read_through(self, vds, key: tuple) -> np.ndarray:
        """Read ``key`` through libhdf5 (``vds`` open under the lock): chunks without a decoder here."""
        return _read_dataset(vds, () if self.shape == () else key, self.shape, False)


class HandleBackendArray(BackendArray):
    """A variable read through libhdf5 with a fresh handle per read (no manifest possible).

    For variable-length strings (their chunks hold global-heap references) and
    filters no codec library here decodes
    (:attr:`~xarray_vhdf5._backend.manifest.ChunkManifest.supported`). Each read
    opens the file under the ``WRITE`` lock shared (:meth:`SharedFile.open`), so
    it never sees a commit half written; a commit waits for it.
    """

    def __init__(self, source: SharedFile, version: str, path: str, shape, dtype, as_str: bool, timestamp=None):
        self.source = source
        self.version = version
        self.timestamp = timestamp
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
            ds = version_dataset(f, self.version, self.path, self.timestamp)
            return _read_dataset(ds, key, self.shape, self.as_str)
