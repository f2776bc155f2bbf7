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
  pass through this process; on 2.2 GB of uncompressed chunks it took 1.4-2.0 s
  where ``H5Ocopy`` took 3.4-3.9 s (``docs/benchmarks.md``, "Rechunking").
- ``H5Ocopy`` of the whole raw_data into an HDF5 side file (the caller's
  fallback), read back through libhdf5. It is needed where the rewrite reads
  the old chunks through HDF5's conversion (a new dtype) or with its own
  hyperslab machinery (chunks kept), or where a filter has no decoder here
  (:data:`~xarray_vhdf5._backend.decoders.DECODED_FILTERS`).

:func:`side_manifest` says which applies; the extents returned are what
:meth:`~.journal.JournaledFile.refer` registers.
"""

from __future__ import annotations

import h5py
import numpy as np

from .._backend.chunks import chunk_grid_shape
from .._backend.manifest import ChunkManifest
from .._backend.manifest_resolve import manifest_from_starts
from .journal import SIDE_USERBLOCK

__all__ = ["copy_chunks_aside", "side_manifest"]


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
    if np.dtype(dtype) != raw.dtype or raw.dtype.hasobject or raw.chunks is None:
        return None
    stored = _stored_chunks(raw)
    sizes = stored[:, 2]
    side_at = SIDE_USERBLOCK + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
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
                out[k] = (side_at[i], sizes[i], stored[i, 3])
        return out

    fill = np.asarray(raw.fillvalue, raw.dtype)
    manifest = manifest_from_starts(
        raw.name, raw, tuple(raw.shape), chunks, raw.dtype, fill, starts, addresses=addresses, path=side_path
    )
    if not manifest.supported:
        return None
    return manifest, np.stack([stored[:, 1], sizes, side_at], axis=1)


def copy_chunks_aside(io, fd: int, side_fd: int, plan: np.ndarray) -> list[tuple[int, int, int]]:
    """Copy the chunks ``plan`` lists from the file to the side file; return them as journal extents.

    Parameters
    ----------
    io : xarray_vhdf5._versions.journal.OsIO
        The journal's system calls (a test's simulated disk sees every write).
    fd, side_fd : int
        Descriptors of the file (read) and of the side file (written).
    plan : numpy.ndarray of int64, shape ``(n, 3)``
        (offset in the file, size, offset in the side file) in bytes, from :func:`side_manifest`.

    Returns
    -------
    list of (int, int, int)
        The same triples, for :meth:`~.journal.JournaledFile.refer`.

    Raises
    ------
    OSError
        A read or write fails, or the file ends inside a chunk.
    """
    extents = [(int(at), int(n), int(side_at)) for at, n, side_at in plan.tolist()]
    for at, n, side_at in extents:
        io.copy_range(fd, side_fd, n, at, side_at)
    return extents
