"""Where a resplit reads its input chunks: an array-like, or a committed version straight from raw_data."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import h5py
import numpy as np

from .._backend.manifest_resolve import resolve_manifest
from ._grid import AxisGrid

__all__ = ["array_chunk_reader", "version_chunk_reader"]


def _region(grids: Sequence[AxisGrid], index: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(int(g.edges[i]), int(g.edges[i + 1])) for g, i in zip(grids, index, strict=True))


def array_chunk_reader(array, grids: Sequence[AxisGrid]) -> Callable[[tuple[int, ...]], np.ndarray]:
    """``read_chunk`` for an array-like (numpy, h5py, zarr, dask) cut along ``grids``.

    Parameters
    ----------
    array : array-like
        Indexable with a tuple of slices; ``numpy.asarray`` of the result is an input chunk.
    grids : sequence of AxisGrid
        The input chunks along each axis (the plan's ``in_grids``).
    """
    grids = tuple(grids)

    def read_chunk(index: tuple[int, ...]) -> np.ndarray:
        return np.asarray(array[_region(grids, index)])

    return read_chunk


def version_chunk_reader(vds: h5py.Dataset) -> tuple[Callable[[tuple[int, ...]], np.ndarray], tuple[int, ...]]:
    """``read_chunk`` over one version's dataset, one stored chunk per call, and its chunk shape.

    Each call reads and decodes one raw_data chunk through the dataset's
    :class:`~xarray_vhdf5._backend.manifest.ChunkManifest` (``os.pread`` of its
    byte range, no libhdf5 call); an unmapped chunk is the fill value, with no
    read. A dataset the manifest cannot decode (variable-length strings, a
    filter without a decoder) is read through h5py, one chunk's hyperslab per
    call (one raw_data chunk, through the virtual dataset).

    Parameters
    ----------
    vds : h5py.Dataset
        A committed version's virtual dataset (``_version_data/versions/<v>/<name>``).

    Returns
    -------
    (callable, tuple of int)
        ``read_chunk(index)`` returning the edge-trimmed chunk at ``index`` of the
        dataset's chunk grid, and the chunk shape in points (the input chunks).
    """
    manifest = resolve_manifest(vds)
    shape, chunks = tuple(vds.shape), tuple(int(c) for c in manifest.chunks)

    def trimmed(index: tuple[int, ...]) -> tuple[slice, ...]:
        return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunks, shape, strict=True))

    if manifest.supported:

        def read_chunk(index: tuple[int, ...]) -> np.ndarray:
            region = trimmed(index)
            data = manifest.decoded_chunk(index)
            return data[tuple(slice(0, r.stop - r.start) for r in region)]

    else:

        def read_chunk(index: tuple[int, ...]) -> np.ndarray:
            return np.asarray(vds[trimmed(index)])

    return read_chunk, chunks
