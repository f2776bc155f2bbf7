"""``raw_data``: the unique chunks of one dataset, concatenated along axis 0.

Each stored chunk occupies ``chunks[0]`` whole rows (edge chunks padded with
the fill value), so chunk ``k`` of raw_data is rows ``k*chunks[0]`` to
``(k+1)*chunks[0]``; its other axes are one chunk wide (``docs/format.md``, "Layout").
Chunks are only ever appended, never rewritten (outside version deletion).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import h5py
import numpy as np

from ..errors import IncompatibleDataError
from .encode import ChunkEncoder, encoder_pool
from .h5attrs import read_attr
from .hashing import chunk_hash, is_vlen_string_dtype
from .hashtable import HashTable
from .rows import dataset_shape, write_rows

__all__ = ["ChunkWriter", "Filters", "WriteStats", "create_raw_data", "is_fill_chunk", "reported_fillvalue"]

_READ = object()  # ChunkWriter: read the fill value from raw_data


def reported_fillvalue(dtype: np.dtype, storage_fill: Any) -> Any:
    """The fill value a dataset reports, h5py's ``Dataset.fillvalue``, from the one raw_data stores.

    Parameters
    ----------
    dtype : numpy.dtype
        The dataset's dtype.
    storage_fill : scalar or None
        Its raw_data's fill value; None for variable-length strings, which are
        stored without one (``docs/format.md``, "Layout").

    Returns
    -------
    scalar
        ``storage_fill``, or ``b""`` for variable-length strings: what h5py
        reports for any variable-length string dataset, and versioned-hdf5 2.6
        for its staged and committed ones. Chunks of nothing but empty strings
        are not stored (the commit's fill-chunk rule, both libraries).
    """
    if storage_fill is None and is_vlen_string_dtype(dtype):
        return b""
    return storage_fill


@dataclass(frozen=True)
class Filters:
    """HDF5 filter settings of a dataset, as ``create_dataset`` keyword arguments.

    Fixed by the first version of a dataset; later versions must not change them
    (versioned-hdf5 rule; ``modify_metadata`` is the way to change them).
    """

    compression: Any = None
    compression_opts: Any = None
    shuffle: bool = False
    fletcher32: bool = False
    scaleoffset: int | None = None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``h5py.Group.create_dataset``."""
        kw: dict[str, Any] = {}
        if self.compression is not None:
            kw["compression"] = self.compression
            if self.compression_opts is not None:
                kw["compression_opts"] = self.compression_opts
        if self.shuffle:
            kw["shuffle"] = True
        if self.fletcher32:
            kw["fletcher32"] = True
        if self.scaleoffset is not None:
            kw["scaleoffset"] = self.scaleoffset
        return kw

    @classmethod
    def of(cls, dataset: h5py.Dataset) -> Filters:
        """The filters of an existing (raw_data) dataset."""
        return cls(
            compression=dataset.compression,
            compression_opts=dataset.compression_opts,
            shuffle=bool(dataset.shuffle),
            fletcher32=bool(dataset.fletcher32),
            scaleoffset=dataset.scaleoffset,
        )


def create_raw_data(
    group: h5py.Group,
    dtype: np.dtype,
    chunks: tuple[int, ...],
    fillvalue: Any,
    filters: Filters,
) -> h5py.Dataset:
    """Create an empty ``raw_data`` dataset in ``group`` (shape ``(0, *chunks[1:])``).

    Raises
    ------
    IncompatibleDataError
        A non-empty fill value for a variable-length string dtype (HDF5 virtual
        datasets cannot carry one; versioned-hdf5 refuses it too).
    """
    h5dtype = dtype
    if is_vlen_string_dtype(dtype):
        if fillvalue not in (None, 0, "", b""):
            raise IncompatibleDataError(f"variable-length string datasets cannot have a fill value, got {fillvalue!r}")
        fillvalue = None
        h5dtype = dtype if h5py.check_string_dtype(dtype) is not None else h5py.string_dtype()
    ds = group.create_dataset(
        "raw_data",
        shape=(0, *chunks[1:]),
        chunks=chunks,
        maxshape=(None, *chunks[1:]),
        dtype=h5dtype,
        fillvalue=fillvalue,
        **filters.kwargs(),
    )
    ds.attrs["chunks"] = np.asarray(chunks, dtype=np.int64)
    return ds


def is_fill_chunk(chunk: np.ndarray, fillvalue: Any) -> bool:
    """True when every point of ``chunk`` has the bits of the fill value.

    Such chunks are never stored: the virtual dataset's fill value supplies them,
    so the comparison is bitwise, as versioned-hdf5's: a NaN fill value matches
    the same NaN, while ``-0.0`` is not ``0.0`` and a NaN of another sign or
    payload is not the fill NaN (storing those keeps them bit-for-bit).
    Variable-length strings have no HDF5 fill value; a chunk of only empty
    strings (``b""`` or ``""``, which hash alike) is not stored, as
    versioned-hdf5 2.6 does not store it (``b""`` is the fill value of its
    staging engine): an unmapped chunk of a virtual dataset of variable-length
    strings reads as empty strings.
    """
    if chunk.dtype.kind == "T":
        return bool(chunk.size) and bool(np.all(chunk == ""))
    if chunk.dtype.kind == "O":
        return bool(chunk.size) and bool(np.all((chunk == b"") | (chunk == "")))
    if fillvalue is None:
        return False
    fill = np.asarray(fillvalue, dtype=chunk.dtype)
    itemsize = chunk.dtype.itemsize
    bits = np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else np.dtype((np.void, itemsize))
    return bool(np.all(chunk.view(bits) == fill.view(bits)))


@dataclass
class WriteStats:
    """What a commit wrote for one dataset (chunk counts; bytes uncompressed)."""

    new_chunks: int = 0
    reused_chunks: int = 0
    fill_chunks: int = 0
    new_bytes: int = 0
    chunk_rows: list[tuple[tuple[int, ...], int, int]] = field(default_factory=list)


class ChunkWriter:
    """Deduplicating writer of chunks into one dataset's raw_data and hash_table.

    Chunks go through :meth:`add` (hash, look up, queue if new); :meth:`flush`
    grows raw_data once and writes all queued chunks, then appends their
    hash-table rows and finally updates ``largest_index``, the commit point.

    Parameters
    ----------
    raw_data : h5py.Dataset
        The dataset's raw_data.
    hash_table : HashTable
        Its hash table.
    chunks : tuple of int, optional
        Its chunk shape in points, when the caller already read it (the
        ``chunks`` attribute of raw_data, read here otherwise).
    fillvalue : scalar, optional
        Its fill value, when the caller already read it (None for
        variable-length strings).
    """

    def __init__(self, raw_data: h5py.Dataset, hash_table: HashTable, chunks=None, fillvalue=_READ):
        self.raw_data = raw_data
        self.hash_table = hash_table
        if chunks is None:
            chunks = read_attr(raw_data.id, "chunks", expect="int")
        self.chunks = tuple(int(c) for c in chunks)
        if fillvalue is _READ:
            fillvalue = None if raw_data.dtype.kind == "O" else raw_data.fillvalue
        self.fillvalue = fillvalue
        c0 = self.chunks[0]
        # New chunks go after every chunk the table knows, rounded to whole chunk slabs,
        # and never below largest_index * chunks[0] (where versioned-hdf5 appends).
        end = max(hash_table.end_row(), len(hash_table) * c0)
        self._next_row = math.ceil(end / c0) * c0
        self._queue: list[tuple[int, np.ndarray]] = []
        self._queued_bytes = 0
        self.stats = WriteStats()
        #: Encodes chunks in threads when raw_data's filters allow it (see :mod:`.encode`), else None.
        self.encoder = ChunkEncoder.of(raw_data)

    #: Queued chunk data is written out when it reaches this many bytes, so a
    #: commit of a dataset larger than memory holds at most this much.
    max_queued_bytes = 64 * 1024 * 1024

    def add(self, index: tuple[int, ...], chunk: np.ndarray, digest: bytes | None = None) -> tuple[int, int] | None:
        """Store (or find) one edge-trimmed chunk; return its rows ``(start, stop)`` or None.

        Parameters
        ----------
        index : tuple of int
            The chunk's index in the chunk grid.
        chunk : numpy.ndarray
            Its points, edge-trimmed (shape at most ``chunks``), raw_data's dtype.
        digest : bytes, optional
            Its 32-byte :func:`~xarray_vhdf5._backend.hashing.chunk_hash`, when
            already computed (e.g. on dask workers); the fill test is then
            skipped too (the caller decided the chunk is not all fill value).

        Returns
        -------
        (int, int) or None
            Rows of raw_data along axis 0; None when the chunk is all fill value
            and is not stored.
        """
        if digest is None:
            if is_fill_chunk(chunk, self.fillvalue):
                self.stats.fill_chunks += 1
                return None
            digest = chunk_hash(chunk)
        found = self.hash_table.lookup(digest)
        if found is not None:
            self.stats.reused_chunks += 1
            rows = found
        else:
            start = self._next_row
            rows = (start, start + chunk.shape[0])
            self._next_row += self.chunks[0]
            self.hash_table.add(digest, *rows)
            self._queue.append((start, chunk))
            self._queued_bytes += chunk.nbytes
            self.stats.new_chunks += 1
            self.stats.new_bytes += chunk.nbytes
            if self._queued_bytes >= self.max_queued_bytes:
                self._write_queue()
        self.stats.chunk_rows.append((index, *rows))
        return rows

    def flush(self) -> None:
        """Write queued chunks to raw_data, then their hash-table rows (commit point last)."""
        self._write_queue()
        self.hash_table.flush()

    def _write_queue(self) -> None:
        if not self._queue:
            return
        first = self._queue[0][0]
        dsid = self.raw_data.id
        if dataset_shape(dsid)[0] < self._next_row:
            dsid.set_extent((self._next_row, *self.chunks[1:]))  # h5py's resize() without its checks
        if self.encoder is not None and all(c.dtype == self.raw_data.dtype for _, c in self._queue):
            _write_encoded(self.raw_data, self._queue, self.encoder)
        else:
            _write_slab(self.raw_data, first, self._queue, self.chunks, self.fillvalue)
        self._queue = []
        self._queued_bytes = 0


def _write_slab(
    raw_data: h5py.Dataset,
    first: int,
    queue: Sequence[tuple[int, np.ndarray]],
    chunks: tuple[int, ...],
    fillvalue: Any,
) -> None:
    """Write consecutive queued chunks with one ``raw_data[...] = slab`` call."""
    c0 = chunks[0]
    dtype = raw_data.dtype
    n = len(queue)
    if n == 1:  # no slab to assemble: write the (edge-trimmed) chunk where it goes
        _write_rows(raw_data, first, queue[0][1])
        return
    slab = np.empty((n * c0, *chunks[1:]), dtype=dtype)
    if dtype.kind == "O":
        slab[...] = b""
    elif fillvalue is not None:
        slab[...] = fillvalue
    for k, (_, chunk) in enumerate(queue):
        region = (slice(k * c0, k * c0 + chunk.shape[0]), *(slice(0, s) for s in chunk.shape[1:]))
        slab[region] = chunk
    _write_rows(raw_data, first, slab)


def _write_encoded(raw_data: h5py.Dataset, queue: Sequence[tuple[int, np.ndarray]], encoder: ChunkEncoder) -> None:
    """Encode queued chunks in the encoding threads, then store each with ``write_direct_chunk``."""
    rest = (0,) * (raw_data.ndim - 1)
    dsid = raw_data.id
    for (start, _), data in zip(queue, encoder_pool().map(encoder.encode, [c for _, c in queue]), strict=True):
        dsid.write_direct_chunk((start, *rest), data, 0)


def _write_rows(raw_data: h5py.Dataset, first: int, data: np.ndarray) -> None:
    """``raw_data[first : first + len(data), :n1, ...] = data`` (points from the origin on other axes).

    Numbers and bools of raw_data's dtype go through :func:`.rows.write_rows`
    (the compiled row kernel: the high-level assignment builds selections and
    types in Python); anything else through h5py's
    assignment, which converts.
    """
    if data.dtype != raw_data.dtype or data.dtype.kind not in "biufc":
        raw_data[(slice(first, first + data.shape[0]), *(slice(0, s) for s in data.shape[1:]))] = data
        return
    write_rows(raw_data.id, first, data)
