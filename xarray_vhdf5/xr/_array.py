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
from typing import TYPE_CHECKING

import numpy as np
from xarray.backends import BackendArray
from xarray.core import indexing

from .._versions.sharing import SharedFile, version_dataset

__all__ = ["HandleBackendArray", "ManifestBackendArray", "VersionedBackendArray"]


class _OuterBackendArray(BackendArray):
    """A lazy array that reads outer keys of at most one integer array (``IndexingSupport.OUTER_1VECTOR``).

    As xarray's h5netcdf backend: xarray's ``explicit_indexing_adapter`` splits
    every key into one libhdf5 can select (non-negative ints, slices of positive
    step, one sorted unique int array) and the rest, which it applies in memory
    (negative steps, order and repeats of the array, other arrays, vectorized
    and boolean keys). Subclasses read the first part in ``_getitem``.
    """

    def __init__(self, path: str, shape: tuple[int, ...], dtype) -> None:
        self.path = path  # of the variable's virtual dataset in the version
        self.shape = shape
        self.dtype = np.dtype(dtype)

    if TYPE_CHECKING:

        def _getitem(self, key: tuple) -> np.ndarray: ...

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(
            _empty_reversed_as_empty(key, self.shape), self.shape, indexing.IndexingSupport.OUTER_1VECTOR, self._getitem
        )


def _empty_reversed_as_empty(key: indexing.ExplicitIndexer, shape: tuple[int, ...]) -> indexing.ExplicitIndexer:
    """``key`` with every slice of negative step that selects nothing made ``slice(0, 0)``.

    xarray's decomposition (``_decompose_slice``, xarray 2026.9) raises ``IndexError``
    on such a slice (``da[2:5:-1]``, ``da[:-1:-1]``), where numpy selects nothing.
    """
    parts = key.tuple
    if not any(isinstance(k, slice) and k.step is not None and k.step < 0 for k in parts):
        return key
    return type(key)(
        tuple(
            slice(0, 0)
            if isinstance(k, slice) and k.step is not None and k.step < 0 and not range(*k.indices(n))
            else k
            for k, n in zip(parts, shape, strict=True)
        )
    )


class VersionedBackendArray(_OuterBackendArray):
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
    ``IndexingSupport.OUTER_1VECTOR`` (see :class:`_OuterBackendArray`).
    """

    def __init__(self, manager, path: str, shape: tuple[int, ...], dtype: np.dtype, as_str: bool):
        super().__init__(path, shape, dtype)
        self.manager = manager
        self.as_str = as_str

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
    for k, n in zip(key, shape, strict=True):
        if isinstance(k, slice):
            out.append(len(range(*k.indices(n))))
        elif isinstance(k, np.ndarray):
            out.append(k.size)
    return tuple(out)


def _read_outer(source, key: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """Read ``source[key]``, ``key`` as xarray's ``OUTER_1VECTOR`` decomposition leaves it.

    ``key`` holds one entry per axis: non-negative ints, slices of positive step
    and at most one sorted, unique, non-empty 1-d int array (see
    :class:`_OuterBackendArray`). Two things remain, both libhdf5's:

    - a key selecting no point reads nothing: libhdf5 2.0 fails such a read of
      a virtual dataset with many mappings (``unable to get selection bounds``);
    - an array of consecutive points is read as a slice: h5py selects a list
      point by point (10,000 consecutive points of a chunked dataset: 5.9 ms
      as a list, 0.03 ms as a slice).

    The result has ``source.dtype``: ``object`` for strings read with ``asstr()``,
    whose single points h5py returns as ``str``.
    """
    selected = _selected_shape(key, shape)
    if 0 in selected:
        return np.zeros(selected, dtype=source.dtype)
    return np.asarray(source[tuple(_as_run(k) for k in key)], dtype=source.dtype)


def _as_run(k):
    """``k``, or for a sorted unique int array of consecutive points, the slice of them."""
    if isinstance(k, np.ndarray) and k.size and int(k[-1]) - int(k[0]) + 1 == k.size:
        return slice(int(k[0]), int(k[-1]) + 1)
    return k


class ManifestBackendArray(_OuterBackendArray):
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
        super().__init__(path, shape, dtype)
        self.source = source
        self.version = version
        self.timestamp = timestamp  # of the version, to tell it from a later one of the same name
        self.manifest = manifest
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _getitem(self, key: tuple) -> np.ndarray:
        return self.source.read(self, (0,) if self.shape == () else key)

    def read_through(self, vds, key: tuple) -> np.ndarray:
        """Read ``key`` through libhdf5 (``vds`` open under the lock): chunks without a decoder here."""
        return _read_dataset(vds, () if self.shape == () else key, self.shape, False)


class HandleBackendArray(_OuterBackendArray):
    """A variable read through libhdf5 with a fresh handle per read (no manifest possible).

    For variable-length strings (their chunks hold global-heap references) and
    filters no codec library here decodes
    (:attr:`~xarray_vhdf5._backend.manifest.ChunkManifest.supported`). Each read
    opens the file under the ``WRITE`` lock shared (:meth:`SharedFile.open`), so
    it never sees a commit half written; a commit waits for it.
    """

    def __init__(self, source: SharedFile, version: str, path: str, shape, dtype, as_str: bool, timestamp=None):
        super().__init__(path, shape, dtype)
        self.source = source
        self.version = version
        self.timestamp = timestamp
        self.as_str = as_str

    def _getitem(self, key: tuple) -> np.ndarray:
        with self.source.open() as f:
            ds = version_dataset(f, self.version, self.path, self.timestamp)
            return _read_dataset(ds, key, self.shape, self.as_str)
