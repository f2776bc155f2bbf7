"""Build base slabs laid out like versioned-hdf5's ``raw_data``, for tests and benchmarks.

``raw_data`` holds a dataset's chunks concatenated along axis 0, each padded
to the full chunk shape, in no particular order; a version maps each chunk
of the array to one of those rows (several chunks with equal data may share
one: deduplication), or to nothing when the chunk is entirely the fill
value.  :func:`raw_data_layout` builds exactly that from a numpy array, with
shuffled chunk order, deduplicated equal chunks, unmapped all-fill chunks,
unused rows and garbage in the padding of edge chunks, so that a reader
which looks anywhere it should not gets caught.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from .._backend.chunks import chunk_grid_shape, chunk_slices, iter_chunks

__all__ = ["chunk_slices", "raw_data_layout", "write_raw_data"]


def raw_data_layout(
    data: np.ndarray,
    chunk_size: Sequence[int],
    fill_value: Any,
    rng: np.random.Generator,
    *,
    shuffle: bool = True,
    spare_rows: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split ``data`` into a raw_data-like slab and the slab metadata.

    Parameters
    ----------
    data : numpy.ndarray
        The array, at least 1-d.
    chunk_size : sequence of int
        In points.
    fill_value : scalar
        Chunks entirely equal to it are left unmapped (slab index 0).
    rng : numpy.random.Generator
        Shuffles the rows and fills the garbage.
    shuffle : bool
        Store the chunks in random order (default) or in C order.
    spare_rows : int
        Extra unreferenced chunk rows of garbage.

    Returns
    -------
    raw : numpy.ndarray, shape (n * chunk_size[0], *chunk_size[1:])
        The chunks, padded with garbage at the edges.
    slab_indices : numpy.ndarray of intp
        1 for a mapped chunk, 0 for an all-fill one.
    slab_offsets : numpy.ndarray of uint64
        Row of each mapped chunk in ``raw``, in points.
    """
    shape = data.shape
    grid = chunk_grid_shape(shape, chunk_size)
    slab_indices = np.zeros(grid, dtype=np.intp)
    slab_offsets = np.zeros(grid, dtype=np.uint64)
    fill = np.array(fill_value, dtype=data.dtype)
    unique: dict[bytes, int] = {}
    blocks: list[np.ndarray] = []
    owners: list[list[tuple[int, ...]]] = []
    for chunk, region in iter_chunks(shape, tuple(chunk_size)):
        block = data[region]
        if block.size and bool(np.all(block == fill)):
            continue
        key = block.tobytes() + str(block.shape).encode() if not data.dtype.hasobject else None
        if key is not None and key in unique:
            owners[unique[key]].append(chunk)  # deduplicated
            continue
        if key is not None:
            unique[key] = len(blocks)
        blocks.append(block)
        owners.append([chunk])
    n_rows = len(blocks) + spare_rows
    order = rng.permutation(n_rows) if shuffle else np.arange(n_rows)
    raw = _garbage((n_rows * chunk_size[0], *chunk_size[1:]), data.dtype, rng)
    for j, (block, chunks) in enumerate(zip(blocks, owners)):
        row = int(order[j]) * chunk_size[0]
        where = (slice(row, row + block.shape[0]), *(slice(0, n) for n in block.shape[1:]))
        raw[where] = block
        for chunk in chunks:
            slab_indices[chunk] = 1
            slab_offsets[chunk] = row
    return raw, slab_indices, slab_offsets


def _garbage(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    if dtype.hasobject:
        out[...] = b"<garbage>"
    elif dtype.kind == "b":
        out[...] = rng.random(shape) < 0.5
    else:
        raw = rng.integers(0, 256, size=out.nbytes, dtype=np.uint8)
        out = raw.view(dtype).reshape(shape) if out.nbytes else out
        if dtype.kind in "fc":
            out = np.nan_to_num(out, nan=-7.0, posinf=-8.0, neginf=-9.0)
    return out


def write_raw_data(
    path: Path | str,
    name: str,
    raw: np.ndarray,
    chunk_size: Sequence[int],
    *,
    compression: str | None = None,
) -> h5py.Dataset:
    """Store ``raw`` as a chunked HDF5 dataset like versioned-hdf5's ``raw_data``.

    Chunked with ``chunk_size``, resizable along axis 0, optionally
    compressed.  The file is opened in append mode and stays open: the
    returned dataset keeps it alive (close it with ``dset.file.close()``).
    Object arrays are stored as variable-length byte strings.
    """
    f = h5py.File(path, "a")
    dtype = h5py.string_dtype("ascii") if raw.dtype.hasobject else raw.dtype
    dset = f.create_dataset(
        name,
        shape=raw.shape,
        dtype=dtype,
        chunks=tuple(chunk_size),
        maxshape=(None, *raw.shape[1:]),
        compression=compression,
    )
    if raw.size:
        dset[...] = raw
    return dset
