"""``raw_data``: the unique chunks of one dataset, concatenated along axis 0.

Each stored chunk occupies ``chunks[0]`` whole rows (edge chunks padded with
the fill value), so chunk ``k`` of raw_data is rows ``k*chunks[0]`` to
``(k+1)*chunks[0]``; its other axes are one chunk wide (``docs/format.md``, "Layout").
Chunks are only ever appended, never rewritten (outside version deletion).
"""

from __future__ import annotations

import bisect
import contextlib
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
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

__all__ = [
    "ChunkWriter",
    "Filters",
    "WriteStats",
    "bytes_appended",
    "create_raw_data",
    "is_fill_chunk",
    "place_by_size",
    "reported_fillvalue",
]

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
    if chunk.size and chunk[(slice(0, 1),) * chunk.ndim].view(bits).reshape(-1)[0] != fill.view(bits):
        return False  # the first point decides most chunks without a pass over the rest
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
    best_fit : bool, keyword-only
        Let :meth:`flush` place the encoded chunks of a compressed raw_data
        over leftover slots (rows past ``largest_index`` still allocated, see
        ``delete_keeping_space``) by stored size, so that a chunk goes where
        its bytes fit and libhdf5 need not allocate new file space (see
        :func:`place_by_size`). The rows :meth:`add` returned may then move:
        read them from ``stats.chunk_rows`` after the flush.
    """

    def __init__(
        self, raw_data: h5py.Dataset, hash_table: HashTable, chunks=None, fillvalue=_READ, *, best_fit: bool = False
    ):
        self.raw_data = raw_data
        self.best_fit = best_fit
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
        self._behind: ThreadPoolExecutor | None = None  # see writing_behind
        self._in_flight: Future | None = None

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
        self._wait_written()
        self.hash_table.flush()

    @contextlib.contextmanager
    def writing_behind(self) -> Iterator[None]:
        """Within the block, queued chunks are written by a thread of this writer while the caller goes on.

        One batch (:attr:`max_queued_bytes`) is written while the next is
        queued: a caller that reads its chunks without libhdf5 (a
        :class:`~xarray_vhdf5._backend.manifest.ChunkManifest`) reads the next
        ones while libhdf5 writes these, where otherwise the two take turns.
        Writes keep their order, and every libhdf5 call stays under h5py's lock;
        between :meth:`flush` calls the caller makes no other libhdf5 call on
        raw_data. A failed write is raised by the next :meth:`add` that writes,
        by :meth:`flush`, or on leaving the block. Leaving the block, by an
        exception too, waits for the batch in flight, so no write of this
        writer happens after it (a journal rolled back next sees them all).

        Raises
        ------
        ValueError
            With ``best_fit`` (its placement moves rows that :meth:`add` returned).
        """
        if self.best_fit:
            raise ValueError("writing_behind cannot place chunks by size (best_fit)")
        self._behind = ThreadPoolExecutor(1, thread_name_prefix="vhdf5-write")
        try:
            yield
            self._wait_written()
        finally:
            behind, self._behind = self._behind, None
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None:
                in_flight.exception()  # waits; an error here yields to the one already raised
            behind.shutdown(wait=True)

    def _wait_written(self) -> None:
        """Wait for the batch being written behind, if any; raise its error."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            in_flight.result()

    def _write_queue(self) -> None:
        if not self._queue:
            return
        queue, next_row = self._queue, self._next_row
        self._queue = []
        self._queued_bytes = 0
        if self._behind is None:
            self._write_batch(queue, next_row)
            return
        self._wait_written()
        self._in_flight = self._behind.submit(self._write_batch, queue, next_row)

    def _write_batch(self, queue: list[tuple[int, np.ndarray]], next_row: int) -> None:
        """Write ``queue``'s chunks at their rows, raw_data first grown to ``next_row`` rows."""
        first = queue[0][0]
        dsid = self.raw_data.id
        allocated = dataset_shape(dsid)[0]  # rows at and past largest_index may hold leftover slots
        if allocated < next_row:
            dsid.set_extent((next_row, *self.chunks[1:]))  # h5py's resize() without its checks
        if self.encoder is not None and all(c.dtype == self.raw_data.dtype for _, c in queue):
            chunks = [c for _, c in queue]
            # with no filter, encoding is a view (or the edge's padding): not worth a thread
            encoded = (
                [self.encoder.encode(c) for c in chunks]
                if not self.encoder.filters
                else list(encoder_pool().map(self.encoder.encode, chunks))
            )
            starts = [start for start, _ in queue]
            if self.best_fit and starts[0] < allocated:
                moves, order = _fit_leftover_slots(dsid, starts, encoded, allocated)
                encoded = [encoded[i] for i in order]
                starts = [starts[i] for i in order]
                if moves:
                    self.hash_table.relocate(moves)
                    span = set(starts)
                    self.stats.chunk_rows = [
                        (i, moves.get(a, a), moves.get(a, a) + b - a) if a in span else (i, a, b)
                        for i, a, b in self.stats.chunk_rows
                    ]
                    starts = [moves.get(a, a) for a in starts]
            _write_direct(dsid, starts, encoded)
        else:
            _write_slab(self.raw_data, first, queue, self.chunks, self.fillvalue)


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


def _write_direct(dsid: h5py.h5d.DatasetID, starts: Sequence[int], encoded: Sequence[bytes | np.ndarray]) -> None:
    """Store encoded chunks at their first rows with ``write_direct_chunk`` (filter mask 0)."""
    rest = (0,) * (dsid.rank - 1)
    for start, data in zip(starts, encoded, strict=True):
        dsid.write_direct_chunk((start, *rest), data, 0)


def place_by_size(sizes: Sequence[int], capacities: Sequence[int], offsets: Sequence[int | None]) -> list[int]:
    """Which slot each chunk goes to, so that the chunks fit in the bytes the slots free.

    Parameters
    ----------
    sizes : sequence of int
        Stored (encoded) size of each chunk, in bytes.
    capacities : sequence of int
        Bytes allocated to each slot, as many slots as chunks (0 for a slot
        holding no chunk).
    offsets : sequence of int or None
        Address in the file of each slot's bytes (None for a slot holding no
        chunk).

    Returns
    -------
    list of int
        ``slot[i]``, the slot of chunk ``i``: a permutation of
        ``range(len(sizes))``; the identity when no slot holds bytes, or when
        the given order grows the file no more (:func:`bytes_appended`).

    Raises
    ------
    ValueError
        ``sizes``, ``capacities`` and ``offsets`` differ in length.

    Notes
    -----
    Written in address order over a run of adjacent slots, the chunks pack
    one after the other into the run's bytes (:func:`bytes_appended`). Slot
    by slot, a slot inside a run gets the smallest chunk left that fits in
    its bytes plus the free bytes before it, keeping room for the next ones;
    the last slot of a run gets the largest that fits, since what it leaves
    free is lost when the file closes. A chunk of exactly the slot's size is
    not chosen while bytes before the slot are free (libhdf5 would leave it
    in place and those bytes out). When none fits, the largest chunk left
    goes there (to the end of the file), and the slot's bytes stay free for
    the next slot. Slots holding no bytes take the chunks left.
    """
    n = len(sizes)
    if not (len(capacities) == len(offsets) == n):
        raise ValueError(f"{n} chunks for {len(capacities)} capacities and {len(offsets)} offsets")
    held = sorted((off, j) for j, off in enumerate(offsets) if off is not None and capacities[j] > 0)
    if not held:
        return list(range(n))
    left = sorted(range(n), key=lambda i: (sizes[i], i))  # chunks not placed, smallest first
    left_sizes = [sizes[i] for i in left]
    slot = [-1] * n
    free = 0  # free bytes just before the slot, merged with its bytes when it is freed
    for k, (off, j) in enumerate(held):
        cap = capacities[j]
        if k == 0 or off != held[k - 1][0] + capacities[held[k - 1][1]]:
            free = 0
        room = free + cap
        last_of_run = k + 1 == len(held) or held[k + 1][0] != off + cap
        fit = bisect.bisect_right(left_sizes, room)  # left[:fit] fit in the room
        # chunks of exactly the slot's size, left out while bytes before it are free
        same = (bisect.bisect_left(left_sizes, cap), bisect.bisect_right(left_sizes, cap)) if free else (0, 0)
        m = fit - 1 if last_of_run else 0
        if same[0] <= m < same[1]:
            m = same[0] - 1 if last_of_run else same[1]
        if not 0 <= m < fit:  # nothing fits: the largest chunk goes to the end of the file
            slot[left.pop()] = j
            left_sizes.pop()
            free = room
            continue
        i = left.pop(m)
        del left_sizes[m]
        slot[i] = j
        free = 0 if sizes[i] == cap else room - sizes[i]
    for i, j in zip(left, [j for j in range(n) if offsets[j] is None or capacities[j] == 0], strict=True):
        slot[i] = j
    placed = [0] * n
    for i, j in enumerate(slot):
        placed[j] = sizes[i]
    if bytes_appended(placed, capacities, offsets) >= bytes_appended(sizes, capacities, offsets):
        return list(range(n))
    return slot


def bytes_appended(sizes: Sequence[int], capacities: Sequence[int], offsets: Sequence[int | None]) -> int:
    """Bytes libhdf5 allocates at the end of the file to write chunk ``k`` over slot ``k``, in address order.

    Parameters
    ----------
    sizes, capacities, offsets : sequence
        As in :func:`place_by_size`, with chunk ``k`` written over slot ``k``.

    Returns
    -------
    int
        Bytes; the slots holding no bytes add their chunks' sizes.

    Notes
    -----
    A model of libhdf5's chunk allocation (``H5D__chunk_file_alloc`` and the
    file's free-space manager, HDF5 User Guide, "File Space Management"): a
    chunk of its slot's exact stored size is rewritten in place; otherwise the
    slot's bytes are freed and merged with the free bytes just before them,
    and the chunk goes at the start of that free block when it fits, else at
    the end of the file. tests/test_reuse_by_size.py checks it against
    libhdf5.
    """
    grown, free, end = 0, 0, None
    for k in sorted(range(len(sizes)), key=lambda k: (offsets[k] is None or capacities[k] == 0, offsets[k] or 0)):
        size, cap, off = sizes[k], capacities[k], offsets[k]
        if off is None or cap == 0:
            grown += size
            continue
        if off != end:
            free = 0
        end = off + cap
        if size == cap:
            free = 0
        elif size <= free + cap:
            free += cap - size
        else:
            grown += size
            free += cap
    return grown


def _fit_leftover_slots(
    dsid: h5py.h5d.DatasetID, starts: list[int], encoded: Sequence[bytes | np.ndarray], allocated: int
) -> tuple[dict[int, int], list[int]]:
    """Place ``encoded`` over the slots at ``starts`` (:func:`place_by_size`).

    Returns ``{first row: new first row}`` of the chunks that move, and the
    order (indices into ``encoded``) to write them in: slots holding bytes in
    address order, then the others. A slot past ``allocated`` rows, or one
    libhdf5 has no chunk for, holds no bytes.
    """
    rest = (0,) * (dsid.rank - 1)
    capacities: list[int] = []
    offsets: list[int | None] = []
    for start in starts:
        info = dsid.get_chunk_info_by_coord((start, *rest)) if start < allocated else None
        if info is None or info.byte_offset is None:
            offsets.append(None)
            capacities.append(0)
        else:
            offsets.append(int(info.byte_offset))
            capacities.append(int(info.size))
    slot = place_by_size([len(e) for e in encoded], capacities, offsets)
    moves = {starts[i]: starts[j] for i, j in enumerate(slot) if i != j}
    by_slot = {j: i for i, j in enumerate(slot)}
    address = [(offsets[j] if offsets[j] is not None else math.inf, j) for j in range(len(starts))]
    order = [by_slot[j] for _, j in sorted(address)]
    return moves, order


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
