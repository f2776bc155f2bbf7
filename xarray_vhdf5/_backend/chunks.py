"""The chunk grid of a dataset: choosing chunk shapes and walking chunks.

All shapes and counts here are in points (array elements), never bytes. The one home
of the regular-grid arithmetic (grid shape, a chunk's points, edge chunks trimmed,
zero-length axes holding no chunk); the layers above call it rather than redo it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
from ndindex import ChunkSize

from ..errors import IncompatibleDataError, UnsupportedError
from .layout import DEFAULT_CHUNKS_1D

__all__ = [
    "RECORD_CHUNK_MIN_BYTES",
    "chunk_extents",
    "chunk_grid_shape",
    "chunk_slices",
    "chunks_meeting",
    "guess_chunks_h5py",
    "guess_chunks_record",
    "iter_chunks",
    "normalize_chunks",
    "padded_shape",
]

#: Upper bound of a chunk chosen by ``guess_chunks_record``, in bytes.
_RECORD_CHUNK_BYTES = 1024 * 1024
#: Smallest chunk ``guess_chunks_record`` makes of small records, in bytes.
RECORD_CHUNK_MIN_BYTES = 8 * 1024


def normalize_chunks(
    chunks: tuple[int, ...] | int | bool | None,
    shape: tuple[int, ...],
    dtype: np.dtype,
) -> tuple[int, ...]:
    """Return the chunk shape a new dataset gets, in points.

    Parameters
    ----------
    chunks : tuple of int, int, True or None
        What the user passed to ``create_dataset(chunks=...)``. ``None``/``True``
        choose: ``(4096,)`` for 1-d data (versioned-hdf5's default), otherwise
        :func:`guess_chunks_h5py`. (A staged ``create_dataset`` refuses n-d
        data without chunks before calling this, as versioned-hdf5 2.6 does.)
    shape : tuple of int
        Shape of the dataset, in points.
    dtype : numpy.dtype
        Its dtype (only ``itemsize`` is used).

    Returns
    -------
    tuple of int
        One positive int per axis.

    Raises
    ------
    UnsupportedError
        ``shape`` is 0-d (versioned-hdf5 stores no scalar datasets) or ``chunks`` is False.
    IncompatibleDataError
        ``chunks`` has the wrong length or a non-positive entry.
    """
    ndim = len(shape)
    if ndim == 0:
        raise UnsupportedError("Scalar (0-d) datasets are not supported by the versioned format")
    if chunks is False:
        raise UnsupportedError("versioned datasets are always chunked; chunks=False is not supported")
    if chunks is None or chunks is True:
        if ndim == 1:
            return DEFAULT_CHUNKS_1D
        return guess_chunks_h5py(shape, np.dtype(dtype).itemsize)
    if isinstance(chunks, (int, np.integer)):
        chunks = (int(chunks),)
    chunks = tuple(int(c) for c in chunks)
    if len(chunks) != ndim:
        raise IncompatibleDataError(
            f"chunks {chunks} has {len(chunks)} axes but the dataset has shape {shape} ({ndim} axes)"
        )
    if any(c <= 0 for c in chunks):
        raise IncompatibleDataError(f"chunk sizes must be positive, got {chunks}")
    return chunks


def guess_chunks_h5py(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Chunk shape chosen the way h5py (after PyTables) chooses one, in points.

    The target chunk size grows with the dataset: 16 KiB times
    ``2 ** log10(dataset MiB)``, clipped to [8 KiB, 1 MiB]. Axes are halved in
    turn, starting with axis 0, until the chunk is below the target or within
    50% of it (and below 1 MiB). ``group[name] = array`` uses it, as h5py and
    versioned-hdf5 do, so both libraries pick the same chunks for the same data.
    """
    base, low, high = 16 * 1024, 8 * 1024, 1024 * 1024
    chunks = [float(s) if s else 1024.0 for s in shape]
    total = math.prod(chunks) * itemsize
    target = min(max(base * 2 ** math.log10(total / (1024 * 1024)), low), high) if total else low
    axis = 0
    while True:
        nbytes = math.prod(chunks) * itemsize
        small_enough = nbytes < target or abs(nbytes - target) / target < 0.5
        if (small_enough and nbytes < high) or math.prod(chunks) == 1:
            break
        chunks[axis % len(chunks)] = math.ceil(chunks[axis % len(chunks)] / 2)
        axis += 1
    return tuple(int(c) for c in chunks)


def guess_chunks_record(shape: tuple[int, ...], itemsize: int, *, growing: bool = False) -> tuple[int, ...]:
    """Chunk shape for a variable with a record (time) dimension first, in points.

    Keeps the trailing axes whole, and along the record axis as many records
    as make a chunk of at least :data:`RECORD_CHUNK_MIN_BYTES` (8 KiB), so
    that appending a record writes one new chunk and older chunks are shared;
    records larger than 1 MiB are split along their leading axes. Used by the
    xarray writer when a variable has no ``encoding["chunks"]``.

    Why several records a chunk: every version maps each of its chunks once
    (a virtual-dataset mapping, about 110 bytes in the file), so a history of
    ``T`` daily appends of one record each holds ``T**2 / 2 / r`` mappings
    with ``r`` records a chunk, while each append stores its edge chunk anew,
    ``r`` records padded (less with compression: the padding is fill value).
    One record a chunk of 520 bytes made 1000 daily versions a 55 MB file,
    almost all mappings; 16 records a chunk (8 KiB) make it about 12 MB
    uncompressed. Records of 8 KiB or more keep one record a chunk.

    Parameters
    ----------
    shape : tuple of int
        The variable's shape, in points; axis 0 is the record axis.
    itemsize : int
        Bytes per point.
    growing : bool
        The record axis will grow (a netCDF unlimited dimension,
        ``encoding["unlimited_dims"]``): the chunk may hold more records than
        the variable has yet. Otherwise it holds at most ``shape[0]``.

    Returns
    -------
    tuple of int
        One positive int per axis.
    """
    chunks = [max(int(s), 1) for s in shape]
    if len(chunks) > 1:
        record_bytes = math.prod(chunks[1:]) * itemsize
        records = max(1, math.ceil(RECORD_CHUNK_MIN_BYTES / record_bytes))
        chunks[0] = records if growing else min(records, chunks[0])
    axis = 0
    while math.prod(chunks) * itemsize > _RECORD_CHUNK_BYTES and any(c > 1 for c in chunks):
        if chunks[axis] > 1:
            chunks[axis] = math.ceil(chunks[axis] / 2)
        else:
            axis += 1
    return tuple(chunks)


def chunk_grid_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """Number of chunks along each axis, edge chunks included: ``ceil(shape / chunks)``.

    A zero-length axis has no chunks (``ndindex.ChunkSize.num_chunks`` counts one there,
    so it is not used). ``shape`` and ``chunks`` in points, one entry per axis each.
    """
    return tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))


def padded_shape(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """Shape of the whole grid of chunks, edge chunks padded to full size, in points."""
    return tuple(g * c for g, c in zip(chunk_grid_shape(shape, chunks), chunks))


def chunk_slices(index: Sequence[int], shape: Sequence[int], chunks: Sequence[int]) -> tuple[slice, ...]:
    """The points of chunk ``index`` (in chunk coordinates): ``slice(start, stop)`` per axis, trimmed at the edges."""
    return tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, chunks, shape, strict=True))


def chunk_extents(coords: Sequence[np.ndarray], shape: Sequence[int], chunks: Sequence[int]) -> tuple[np.ndarray, ...]:
    """Lengths of many chunks along each axis, trimmed at the edges, in points (vectorised).

    Parameters
    ----------
    coords : sequence of numpy.ndarray of int
        One array per axis: the chunk coordinates along that axis (``numpy.nonzero``
        of a per-chunk mask gives them).
    shape, chunks : sequence of int
        In points.

    Returns
    -------
    tuple of numpy.ndarray
        Per axis, ``min(chunks[a], shape[a] - coords[a] * chunks[a])``, of the dtype of ``coords[a]``.
    """
    return tuple(np.minimum(c, n - k * c) for k, n, c in zip(coords, shape, chunks, strict=True))


def iter_chunks(
    shape: tuple[int, ...], chunks: tuple[int, ...], *, axis0_fastest: bool = False
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """Yield ``(chunk_index, region)`` for every chunk, in C order by default.

    ``region`` is :func:`chunk_slices` of the chunk; an array with a zero-length axis
    has no chunk. Plain Python, not ``ndindex.ChunkSize.indices``: a commit walks every
    chunk, and on 10,000 chunks ndindex took 26 ms against 11 ms here (it also yields
    one empty chunk for a zero-length axis).

    Parameters
    ----------
    shape : tuple of int
        Shape of the dataset, in points.
    chunks : tuple of int
        Chunk shape, in points.
    axis0_fastest : bool
        Let axis 0 vary fastest, the other axes in C order. versioned-hdf5 2.6
        appends the chunks of a new dataset to raw_data in this order, so both
        libraries write the same raw_data, and runs of chunks along axis 0 land
        on consecutive rows of raw_data.
    """
    grid = chunk_grid_shape(shape, chunks)
    if axis0_fastest and len(grid) > 1:
        for rest in np.ndindex(*grid[1:]):
            for i in range(grid[0]):
                index = (i, *rest)
                yield index, chunk_slices(index, shape, chunks)
        return
    for index in np.ndindex(*grid):
        yield index, chunk_slices(index, shape, chunks)


def chunks_meeting(region: Sequence[slice], shape: Sequence[int], chunks: Sequence[int]) -> Iterator[tuple[slice, ...]]:
    """For each chunk meeting ``region``, in C order, the points they share: ``slice(start, stop, 1)`` per axis.

    What h5py's ``Dataset.iter_chunks`` yields. Built on ``ndindex.ChunkSize.as_subchunks``
    (used only by ``iter_chunks``, a convenience no hot path calls).

    Parameters
    ----------
    region : sequence of slice
        One ``slice(start, stop)`` per axis, step 1, ``0 <= start <= stop <= shape``, in points.
    shape, chunks : sequence of int
        In points.
    """
    if any(s.stop <= s.start for s in region):
        return iter(())
    bounds = [(s.start, s.stop) for s in region]
    subchunks = ChunkSize(tuple(chunks)).as_subchunks(tuple(region), tuple(shape))
    return (
        tuple(slice(max(c.start, a), min(c.stop, b), 1) for c, (a, b) in zip(chunk.args, bounds)) for chunk in subchunks
    )
