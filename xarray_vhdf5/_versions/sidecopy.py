"""The in-place rewrite's side copy, made in the kernel: raw_data's stored chunks as flat byte ranges.

``modify_metadata`` through a journaled handle rewrites a dataset into the
bytes of its old raw_data (see :func:`~xarray_vhdf5._versions.metadata`'s
``_modify_in_place``). Before freeing them it copies the old chunks, as
stored, into the journal's side file (``<file>.vhdf5-modify``); the journal
then refers to those copies instead of copying the overwritten bytes again,
and the rewrite reads the old chunks from there.

Two ways to make that copy:

- :func:`copy_chunks_aside` (this module): each stored chunk's byte range is
  copied with ``copy_file_range`` (:meth:`~.journal.OsIO.copy_range`), back to
  back after the side file's stamp, and read back through a
  :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` over the side file
  (the decoders of :mod:`xarray_vhdf5._backend.decoders`). The bytes never
  pass through this process, and the copy runs in a thread
  (:class:`SideCopy`) while the rewrite begins: the rewrite's reads wait only
  for the chunks they read, and the first overwrite of an old chunk's bytes
  waits for the whole copy (:meth:`~.journal.JournaledFile.refer_when_copied`).
  Costs beside ``H5Ocopy``: ``docs/benchmarks.md``, "Rechunking".
- ``H5Ocopy`` of the whole raw_data into an HDF5 side file (the caller's
  fallback), read back through libhdf5, before the rewrite starts. It is
  needed where the rewrite reads the old chunks through HDF5's conversion (a
  new dtype) or with its own hyperslab machinery (chunks kept), or where a
  filter has no decoder here
  (:data:`~xarray_vhdf5._backend.decoders.DECODED_FILTERS`).

:func:`side_manifest` says which applies; the extents returned are what
:meth:`~.journal.JournaledFile.refer` registers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import h5py
import numpy as np

from .._backend.chunks import chunk_grid_shape
from .._backend.manifest import ChunkManifest
from .._backend.manifest_resolve import manifest_from_starts
from .journal import SIDE_USERBLOCK

__all__ = ["SideCopy", "copy_chunks_aside", "file_manifest", "side_manifest"]


def _stored_chunks(raw: h5py.Dataset) -> np.ndarray:
    """raw_data's stored chunks, in file order: int64 ``(n, 4)`` of (first row, offset, size, filter mask)."""
    found: list[tuple[int, int, int, int]] = []

    def visit(info) -> None:
        if info.byte_offset is not None and info.size:
            found.append((info.chunk_offset[0], info.byte_offset, info.size, info.filter_mask))

    raw.id.chunk_iter(visit)
    table = np.array(found, np.int64).reshape(-1, 4)
    return table[np.argsort(table[:, 1], kind="stable")]


def side_manifest(raw: h5py.Dataset, side_path: str, dtype: np.dtype) -> tuple[ChunkManifest, np.ndarray] | None:
    """A manifest of raw_data's chunks as :func:`copy_chunks_aside` will lay them out in ``side_path``.

    Parameters
    ----------
    raw : h5py.Dataset
        The old raw_data, shape ``(rows, *chunks[1:])``, chunked along its rows.
    side_path : str
        The side file (created, possibly still empty: nothing is read here).
    dtype : numpy.dtype
        The dtype the rewrite reads the old chunks as.

    Returns
    -------
    (ChunkManifest, numpy.ndarray) or None
        The manifest (one "version" mapping every raw_data chunk in row order)
        and the copy plan, int64 ``(n, 3)`` of (offset in the file, size, offset in
        the side file), in file order; None when the chunks cannot be read back
        without libhdf5 (a filter without a decoder, variable-length data, no fill
        value) or only through HDF5's conversion (``dtype`` differs): copy them
        with ``H5Ocopy`` then.
    """
    if not _readable(raw, dtype):
        return None
    stored = _stored_chunks(raw)
    sizes = stored[:, 2]
    side_at = SIDE_USERBLOCK + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    manifest = _manifest_at(raw, stored, side_at, side_path)
    if manifest is None:
        return None
    return manifest, np.stack([stored[:, 1], sizes, side_at], axis=1)


def file_manifest(raw: h5py.Dataset, path: str, dtype: np.dtype) -> ChunkManifest | None:
    """A manifest of raw_data's chunks where they are, in the file at ``path``: read without libhdf5.

    For a rewrite that leaves the old raw_data's bytes alone until it ends (the
    new raw_data written after them): its reads then take no lock of h5py's and
    overlap the new chunks' writes. The file must be flushed first (the chunks'
    bytes on disk are the ones read).

    Parameters
    ----------
    raw : h5py.Dataset
        The old raw_data, shape ``(rows, *chunks[1:])``, chunked along its rows.
    path : str
        The file's path on disk.
    dtype : numpy.dtype
        The dtype the rewrite reads the old chunks as.

    Returns
    -------
    ChunkManifest or None
        None in the cases :func:`side_manifest` returns None (read through
        libhdf5 then).
    """
    if not _readable(raw, dtype):
        return None
    stored = _stored_chunks(raw)
    return _manifest_at(raw, stored, stored[:, 1], path)


def _readable(raw: h5py.Dataset, dtype: np.dtype) -> bool:
    """Whether raw_data's chunks can be read as ``dtype`` without libhdf5's conversion."""
    return np.dtype(dtype) == raw.dtype and not raw.dtype.hasobject and raw.chunks is not None


def _manifest_at(raw: h5py.Dataset, stored: np.ndarray, offsets: np.ndarray, path: str) -> ChunkManifest | None:
    """The manifest of raw_data's ``stored`` chunks (:func:`_stored_chunks`) at ``offsets`` of ``path``."""
    sizes = stored[:, 2]
    by_row = {int(r): i for i, r in enumerate(stored[:, 0].tolist())}
    chunks = tuple(int(c) for c in raw.chunks)
    grid = chunk_grid_shape(raw.shape, chunks)
    starts = (np.arange(grid[0], dtype=np.int64) * chunks[0]).reshape(grid[:1] + (1,) * (len(grid) - 1))
    starts = np.broadcast_to(starts, grid).copy()

    def addresses(rows: np.ndarray) -> np.ndarray:
        out = np.zeros((rows.size, 3), np.uint64)  # unallocated: size 0, read as raw_data's fill value
        for k, row in enumerate(rows.tolist()):
            i = by_row.get(int(row))
            if i is not None:
                out[k] = (offsets[i], sizes[i], stored[i, 3])
        return out

    fill = np.asarray(raw.fillvalue, raw.dtype)
    manifest = manifest_from_starts(
        raw.name, raw, tuple(raw.shape), chunks, raw.dtype, fill, starts, addresses=addresses, path=path
    )
    return manifest if manifest.supported else None


def copy_chunks_aside(
    io, fd: int, side_fd: int, plan: np.ndarray, done: Callable[[int], None] | None = None
) -> list[tuple[int, int, int]]:
    """Copy the chunks ``plan`` lists from the file to the side file; return them as journal extents.

    Parameters
    ----------
    io : xarray_vhdf5._versions.journal.OsIO
        The journal's system calls (a test's simulated disk sees every write).
    fd, side_fd : int
        Descriptors of the file (read) and of the side file (written).
    plan : numpy.ndarray of int64, shape ``(n, 3)``
        (offset in the file, size, offset in the side file) in bytes, from :func:`side_manifest`.
    done : callable, optional
        Called with the side file offset just past each chunk once it is copied
        (bytes; :class:`SideCopy`'s progress mark).

    Returns
    -------
    list of (int, int, int)
        The same triples, for :meth:`~.journal.JournaledFile.refer`.

    Raises
    ------
    OSError
        A read or write fails, or the file ends inside a chunk.
    """
    extents = _extents(plan)
    for at, n, side_at in extents:
        io.copy_range(fd, side_fd, n, at, side_at)
        if done is not None:
            done(side_at + n)
    return extents


def _extents(plan: np.ndarray) -> list[tuple[int, int, int]]:
    return [(int(at), int(n), int(side_at)) for at, n, side_at in plan.tolist()]


class SideCopy:
    """:func:`copy_chunks_aside` in a thread, while the rewrite starts reading.

    The chunks are copied in the order of ``plan`` (file order; their offsets
    in the side file grow with it), so the side file is whole up to a mark
    that only moves forward. A reader of the side file waits at
    :meth:`wait_copied` for the bytes it reads (a
    :class:`~xarray_vhdf5._backend.manifest.ChunkManifest`'s ``gate``); the
    journal waits at :meth:`join` before the first overwrite of a copied range
    (:meth:`~.journal.JournaledFile.refer_when_copied`): until then the old
    chunks' bytes are still in the file, and the copy reads them there.

    Parameters
    ----------
    io : xarray_vhdf5._versions.journal.OsIO
        The journal's system calls (thread-safe: one system call each).
    fd : int
        Descriptor of the file (read).
    side : xarray_vhdf5._versions.journal.SideFile
        The side file, open; closed by the copy when it ends.
    plan : numpy.ndarray of int64, shape ``(n, 3)``
        As :func:`copy_chunks_aside`'s.
    """

    def __init__(self, io, fd: int, side, plan: np.ndarray):
        self.extents = _extents(plan)
        self._io, self._fd, self._side, self._plan = io, fd, side, plan
        self._copied_to = 0  # bytes of the side file whole: every extent ending at or before it copied
        self._end = max((s + n for _, n, s in self.extents), default=0)
        self._error: Exception | None = None
        self._finished = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="vhdf5-side-copy", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            copy_chunks_aside(self._io, self._fd, self._side.fileno(), self._plan, done=self._advance)
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits: join or wait_copied re-raises it
            self._error = exc
        finally:
            try:
                self._side.close()
            except OSError as exc:
                self._error = self._error or exc
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _advance(self, copied_to: int) -> None:
        with self._cond:
            self._copied_to = copied_to
            self._cond.notify_all()

    def wait_copied(self, start: int, stop: int) -> None:
        """Return once bytes ``[start, stop)`` of the side file are copied (``start`` unused: copies are in order).

        Raises
        ------
        Exception
            What made the copy fail (an ``OSError`` of a read or write, or the
            file ending inside a chunk), if it failed before reaching ``stop``.
        """
        stop = min(stop, self._end)
        with self._cond:
            while self._copied_to < stop and not self._finished:
                self._cond.wait()
        if self._copied_to < stop and self._error is not None:
            raise self._error

    def join(self) -> list[tuple[int, int, int]]:
        """Wait for the whole copy; return its extents, for :meth:`~.journal.JournaledFile.refer`.

        Raises
        ------
        Exception
            What made the copy fail (an ``OSError`` of a read or write, or the
            file ending inside a chunk).
        """
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.extents
