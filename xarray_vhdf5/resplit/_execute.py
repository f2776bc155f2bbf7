"""Running a :class:`~xarray_vhdf5.resplit.ResplitPlan`: each input chunk read once, output chunks written.

:func:`iter_resplit` walks the plan's buffers in storage order. For each buffer
it reads the buffer's needed input chunks (one ``read_chunk`` call each: the
only reads of the run), then hands out the output chunks the buffer touches, as
:class:`OutputWrite` events:

- an output chunk inside the buffer: the whole chunk (a view of the buffer);
- a *kept* straddling one: its piece is copied into the cache; the whole chunk
  is assembled and handed out with the buffer holding its last piece;
- a *spilled* one: each piece is handed out as it comes (``pieces=True``, for a
  target that takes partial writes: an HDF5 or Zarr array), or written into a
  scratch file in the chunk's own layout and read back whole, in one read, with
  its last piece (``pieces=False``, for a consumer that needs whole chunks: the
  hash-and-store of a version's raw_data).

The buffer and the array output chunks are assembled in are allocated once and
reused: the ``data`` of a write is valid only until the next one is asked for.
The executor counts what it does (:class:`ResplitCounters`) and the bytes it
holds at once (buffer, input chunk being read, assembly array, kept pieces):
``peak_buffer_bytes`` is measured from the arrays actually held, and never
exceeds the plan's ``predicted_peak``.
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import h5py
import numpy as np

from .._backend.encode import ChunkEncoder
from ._grid import AxisGrid
from ._plan import ResplitPlan
from ._zarr_target import ZarrChunkWriter

__all__ = ["OutputWrite", "ResplitCounters", "iter_resplit", "resplit_into"]


@dataclass
class ResplitCounters:
    """What a resplit did. Bytes are of decoded points (``itemsize`` each).

    Attributes
    ----------
    input_reads : int
        ``read_chunk`` calls: input chunks read.
    bytes_read : int
        Bytes of the input chunks read.
    chunk_writes : int
        Output chunks handed out whole.
    piece_writes : int
        Pieces of spilled output chunks handed out (``pieces=True``), or written to the
        spill file (all but the last piece of each, which completes it in memory).
    bytes_written : int
        Bytes handed out (whole chunks and pieces).
    spill_bytes : int
        Bytes written to the spill file.
    peak_buffer_bytes : int
        The most bytes of buffer, input chunk being copied, kept pieces and output
        chunk being assembled held at once.
    peak_kept_bytes : int
        The most bytes of kept pieces held at once.
    buffers : int
        Buffers processed (those holding a needed input chunk).
    seconds : float
        Wall time of the run.
    """

    input_reads: int = 0
    bytes_read: int = 0
    chunk_writes: int = 0
    piece_writes: int = 0
    bytes_written: int = 0
    spill_bytes: int = 0
    peak_buffer_bytes: int = 0
    peak_kept_bytes: int = 0
    buffers: int = 0
    seconds: float = 0.0

    @property
    def output_writes(self) -> int:
        """Write operations: whole output chunks plus pieces."""
        return self.chunk_writes + self.piece_writes


class OutputWrite(NamedTuple):
    """One write handed out by :func:`iter_resplit`.

    Attributes
    ----------
    chunk : tuple of int
        The output chunk's index in the output chunk grid.
    region : tuple of slice
        Where ``data`` goes in the array (points).
    data : numpy.ndarray
        The points; may be a view of the executor's buffer, valid until the next event.
    whole : bool
        ``region`` is the whole output chunk.
    last : bool
        No more writes to this output chunk follow (always True when ``whole``).
    """

    chunk: tuple[int, ...]
    region: tuple[slice, ...]
    data: np.ndarray
    whole: bool
    last: bool


#: A spill slot's size is a multiple of this, so that each slot can be mapped on its own.
_GRANULE = mmap.ALLOCATIONGRANULARITY


class _Spill:
    """Spilled output chunks, each in a slot of a scratch file laid out as the chunk (C order)."""

    def __init__(self, chunk_shape: tuple[int, ...], dtype: np.dtype, directory: str | None):
        self.dtype = dtype
        self.slot_bytes = -(-math.prod(chunk_shape) * dtype.itemsize // _GRANULE) * _GRANULE
        self.file = tempfile.TemporaryFile(prefix="vhdf5-resplit-", dir=directory)
        self.slots: dict[tuple[int, ...], int] = {}
        self.free: list[int] = []
        self.size = 0

    def put(self, index: tuple[int, ...], shape: tuple[int, ...], where: tuple[slice, ...], data: np.ndarray) -> None:
        slot = self.slots.get(index)
        if slot is None:
            slot = self.slots[index] = self.free.pop() if self.free else self.size // self.slot_bytes
            if (slot + 1) * self.slot_bytes > self.size:
                self.size = (slot + 1) * self.slot_bytes
                os.ftruncate(self.file.fileno(), self.size)
        # A map of the slot only for this write: its pages leave the process with the unmap.
        mm = np.memmap(self.file, self.dtype, mode="r+", offset=slot * self.slot_bytes, shape=shape)
        mm[where] = data
        mm.flush()
        del mm

    def take(self, index: tuple[int, ...], out: np.ndarray) -> None:
        slot = self.slots.pop(index)
        view = out.data.cast("B")
        got = os.preadv(self.file.fileno(), [view], slot * self.slot_bytes)
        if got != out.nbytes:  # pragma: no cover - the scratch file is ours and sized above
            raise OSError(f"the resplit spill file returned {got} of {out.nbytes} bytes")
        self.free.append(slot)

    def close(self) -> None:
        self.file.close()


def _slices(grids, index) -> tuple[slice, ...]:
    return tuple(slice(int(g.edges[i]), int(g.edges[i + 1])) for g, i in zip(grids, index, strict=True))


def iter_resplit(
    plan: ResplitPlan,
    read_chunk: Callable[[tuple[int, ...]], Any],
    dtype,
    *,
    pieces: bool = False,
    spill_dir: str | None = None,
    counters: ResplitCounters | None = None,
    progress: bool = False,
    desc: str | None = None,
    before_reuse: Callable[[], None] | None = None,
) -> Iterator[OutputWrite]:
    """Run ``plan``, reading input chunks with ``read_chunk``; yield the output writes.

    Parameters
    ----------
    plan : ResplitPlan
        From :func:`~xarray_vhdf5.resplit.plan_resplit`.
    read_chunk : callable
        ``read_chunk(index)`` returns input chunk ``index`` (its index in the input
        chunk grid) as an array of its (edge-trimmed) shape. Called once per
        needed input chunk, in buffer order. If it has a ``read_into``
        attribute, ``read_chunk.read_into(index, out)`` is tried first, with
        ``out`` the chunk's place in the buffer (a view, C-contiguous or not):
        True when it filled ``out`` (no array made, no copy), False to have
        ``read_chunk(index)`` called instead.
    dtype : numpy dtype
        The points' dtype (``itemsize`` should be the plan's).
    pieces : bool
        Hand out pieces of spilled output chunks as they come (``whole`` False);
        otherwise spill them to a scratch file and hand the chunk out whole.
    spill_dir : str, optional
        Folder of the scratch file (default: the system's temporary folder).
    counters : ResplitCounters, optional
        Filled while running (pass one to read it after the loop).
    progress : bool
        A tqdm progress bar over the buffers.
    desc : str, optional
        Its label.
    before_reuse : callable, optional
        Called with no argument right before the buffer or the assembly array
        that earlier writes' ``data`` view is overwritten: a consumer that copies
        ``data`` later (in other threads) waits there for its copies.

    Yields
    ------
    OutputWrite
        Use (or copy) ``data`` before asking for the next write (or, with
        ``before_reuse``, before returning from it): it is a view of the reused
        buffer or assembly array.

    Raises
    ------
    ValueError
        ``read_chunk`` returned an array of another shape than the input chunk's.
    """
    dtype = np.dtype(dtype)
    c = counters if counters is not None else ResplitCounters()
    read_into = getattr(read_chunk, "read_into", None)
    t0 = time.perf_counter()
    ig, og, bg = plan.in_grids, plan.out_grids, plan.buffer_grids
    m = plan.buffer_chunks
    single = all(k == 1 for k in m)
    # Per axis: the outputs each buffer touches, and the buffer holding each output's last piece.
    touch = [b.locate_chunks(o) for b, o in zip(bg, og, strict=True)]
    last_buffer = [o.locate_chunks(b)[1] for o, b in zip(og, bg, strict=True)]
    out_shape = tuple(int(g.sizes.max()) for g in og)
    spill = None if pieces or plan.spilled_outputs == 0 else _Spill(out_shape, dtype, spill_dir)
    cache: dict[tuple[int, ...], list[tuple[tuple[slice, ...], np.ndarray]]] = {}
    kept = 0
    # Reused for every buffer and every assembled chunk (flat, so that each view is contiguous).
    store = None if single else np.empty(math.prod(plan.buffer_shape), dtype=dtype)
    scratch: np.ndarray | None = None
    held = 0 if store is None else store.nbytes
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=plan.n_buffers, unit="buffer", desc=desc or "resplit", leave=False)

    def note(extra: int) -> None:
        c.peak_buffer_bytes = max(c.peak_buffer_bytes, held + kept + extra)

    def assembly(shape: tuple[int, ...]) -> np.ndarray:
        nonlocal scratch, held
        if before_reuse is not None:
            before_reuse()
        if scratch is None:
            scratch = np.empty(math.prod(out_shape), dtype=dtype)
            held += scratch.nbytes
        return scratch[: math.prod(shape)].reshape(shape)

    try:
        for bidx in itertools.product(*(range(g.n) for g in bg)):
            if bar is not None:
                bar.update(1)
            in_ranges = [range(b * k, min((b + 1) * k, g.n)) for b, k, g in zip(bidx, m, ig, strict=True)]
            need = plan.needed_inputs[tuple(slice(r.start, r.stop) for r in in_ranges)]
            if not need.any():
                continue
            c.buffers += 1
            region = _slices(bg, bidx)
            origin = tuple(s.start for s in region)
            bshape = tuple(s.stop - s.start for s in region)
            if before_reuse is not None:
                before_reuse()
            if store is None:  # the buffer is one input chunk: the array read
                buffer = np.asarray(read_chunk(bidx))
                if buffer.shape != bshape:
                    raise ValueError(f"read_chunk({bidx}) returned shape {buffer.shape}, expected {bshape}")
                c.input_reads += 1
                c.bytes_read += buffer.nbytes
                note(2 * buffer.nbytes)  # and the previous one, which the consumer may still hold
            else:
                buffer = store[: math.prod(bshape)].reshape(bshape)
                for local in zip(*np.nonzero(need), strict=True):
                    index = tuple(r.start + int(i) for r, i in zip(in_ranges, local, strict=True))
                    where = _slices(ig, index)
                    place = buffer[tuple(slice(s.start - o, s.stop - o) for s, o in zip(where, origin, strict=True))]
                    c.input_reads += 1
                    if read_into is not None and read_into(index, place):
                        c.bytes_read += place.nbytes
                        continue
                    data = np.asarray(read_chunk(index))
                    if data.shape != place.shape:
                        raise ValueError(f"read_chunk({index}) returned shape {data.shape}, expected {place.shape}")
                    c.bytes_read += data.nbytes
                    note(data.nbytes)
                    place[...] = data
                    del data
                note(0)  # the buffer, however its chunks came in (read_into leaves no other trace)
            ranges = [range(int(lo[b]), int(hi[b]) + 1) for (lo, hi), b in zip(touch, bidx, strict=True)]
            for oidx in itertools.product(*ranges):
                if not plan.needed[oidx]:
                    continue
                oregion = _slices(og, oidx)
                lo = [max(a.start, b.start) for a, b in zip(oregion, region, strict=True)]
                hi = [min(a.stop, b.stop) for a, b in zip(oregion, region, strict=True)]
                piece = buffer[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, origin, strict=True))]
                if not plan.straddle[oidx]:
                    c.chunk_writes += 1
                    c.bytes_written += piece.nbytes
                    yield OutputWrite(oidx, oregion, piece, True, True)
                    continue
                where = tuple(slice(a - s.start, b - s.start) for a, b, s in zip(lo, hi, oregion, strict=True))
                last = all(int(lb[i]) == b for lb, i, b in zip(last_buffer, oidx, bidx, strict=True))
                cshape = tuple(s.stop - s.start for s in oregion)
                if plan.keep[oidx]:
                    if not last:
                        cache.setdefault(oidx, []).append((where, piece.copy()))
                        kept += piece.nbytes
                        c.peak_kept_bytes = max(c.peak_kept_bytes, kept)
                        note(0)
                        continue
                    whole = assembly(cshape)
                    note(0)
                    whole[where] = piece
                    for w, kept_piece in cache.pop(oidx):
                        whole[w] = kept_piece
                        kept -= kept_piece.nbytes
                    c.chunk_writes += 1
                    c.bytes_written += whole.nbytes
                    yield OutputWrite(oidx, oregion, whole, True, True)
                elif spill is None:
                    c.piece_writes += 1
                    c.bytes_written += piece.nbytes
                    yield OutputWrite(oidx, tuple(slice(a, b) for a, b in zip(lo, hi, strict=True)), piece, False, last)
                else:
                    if not last:
                        c.piece_writes += 1
                        spill.put(oidx, cshape, where, piece)
                        c.spill_bytes += piece.nbytes
                        continue
                    whole = assembly(cshape)
                    note(0)
                    spill.take(oidx, whole)
                    whole[where] = piece
                    c.chunk_writes += 1
                    c.bytes_written += whole.nbytes
                    yield OutputWrite(oidx, oregion, whole, True, True)
            del buffer, piece
        if cache:  # pragma: no cover - every point of a kept chunk lies in some buffer
            raise AssertionError(f"{len(cache)} kept output chunks were left incomplete")
    finally:
        if spill is not None:
            spill.close()
        if bar is not None:
            bar.close()
        c.seconds += time.perf_counter() - t0


def resplit_into(
    plan: ResplitPlan,
    read_chunk: Callable[[tuple[int, ...]], Any],
    target,
    *,
    threads: int | None = None,
    progress: bool = False,
    desc: str | None = None,
) -> ResplitCounters:
    """Run ``plan`` into an array-like ``target`` (numpy, h5py or zarr array) of the plan's shape.

    Whole output chunks are assigned in one ``target[region] = data`` each; pieces
    of spilled ones in one assignment each (a partial chunk write for HDF5 and Zarr).

    Parameters
    ----------
    plan, read_chunk
        As for :func:`iter_resplit`.
    target : array-like
        Supports ``target[tuple of slices] = array`` and has ``dtype``.
    threads : int, optional
        Assignments run in this many threads (Zarr encodes and stores outside the
        GIL), each on a copy of its points; writes to one output chunk stay in
        order. Default: up to 4 (the CPUs) when the copies in flight (two per
        thread, one output chunk each) fit in what the plan leaves of
        ``max_mem``, else 1. Always 1 for a Zarr array whose shards (or
        chunks) hold points of several output chunks. An HDF5 dataset (h5py, h5netcdf) takes one call at a
        time; when its chunks are the output chunks and its filters can be applied
        outside libhdf5, whole chunks are encoded in the threads and stored with
        ``write_direct_chunk`` (:mod:`xarray_vhdf5._backend.encode`). A Zarr
        array whose chunks are the output chunks gets its whole chunks encoded
        with its own codecs in the threads and put into its store by key
        (:mod:`xarray_vhdf5.resplit._zarr_target`: the bytes ``target[...] = data``
        stores, empty chunks skipped alike); pieces, and arrays that path does
        not cover (sharded, other stores...), go through ``target[region] = data``.
    progress, desc
        As for :func:`iter_resplit`.

    Returns
    -------
    ResplitCounters
    """
    counters = ResplitCounters()
    zarr_writer = _zarr_writer(plan, target)
    if zarr_writer is not None:
        workers = _writer_threads(plan, target, threads)
        copies = _PendingCopies()
        events = iter_resplit(
            plan,
            read_chunk,
            target.dtype,
            pieces=True,
            counters=counters,
            progress=progress,
            desc=desc,
            before_reuse=copies.wait if workers > 1 else None,
        )
        _store_into(events, zarr_writer, target, workers, copies)
        return counters
    events = iter_resplit(plan, read_chunk, target.dtype, pieces=True, counters=counters, progress=progress, desc=desc)
    direct = _direct_target(plan, target)
    if direct is not None and threads != 1:
        workers = threads or _spare_threads(plan)
        if workers > 1:
            _encode_into(events, direct, workers)
            return counters
    workers = _writer_threads(plan, target, threads)
    if workers == 1:
        for w in events:
            target[w.region] = w.data
        return counters
    from concurrent.futures import Future, ThreadPoolExecutor

    def assign(region: tuple[slice, ...], data: np.ndarray) -> None:
        target[region] = data

    pending: dict[tuple[int, ...], Future] = {}  # the last write to each output chunk still running
    inflight: list[Future] = []
    with ThreadPoolExecutor(workers, thread_name_prefix="vhdf5-resplit") as pool:
        for w in events:
            before = pending.get(w.chunk)
            if before is not None:
                before.result()  # a piece of the same chunk: its read-modify-write must come after
            while len(inflight) >= 2 * workers:
                inflight.pop(0).result()
            future = pool.submit(assign, w.region, np.array(w.data))
            inflight.append(future)
            if w.whole or w.last:
                pending.pop(w.chunk, None)
            else:
                pending[w.chunk] = future
        for future in inflight:
            future.result()
    return counters


def _direct_target(plan: ResplitPlan, target) -> tuple[h5py.Dataset, ChunkEncoder] | None:
    """An HDF5 dataset (h5py, or an h5netcdf variable's) whose chunks are the plan's and whose
    filters :class:`~xarray_vhdf5._backend.encode.ChunkEncoder` applies, with its encoder."""
    ds = target if isinstance(target, h5py.Dataset) else getattr(target, "_h5ds", None)
    if not isinstance(ds, h5py.Dataset) or ds.chunks is None:
        return None
    chunks = tuple(int(c) for c in ds.chunks)
    grids = tuple(AxisGrid.regular(s, c) for s, c in zip(plan.shape, chunks, strict=True))
    if ds.shape != plan.shape or grids != plan.out_grids or ds.dtype != target.dtype:
        return None
    encoder = ChunkEncoder.of(ds)
    return None if encoder is None else (ds, encoder)


def _zarr_writer(plan: ResplitPlan, target) -> ZarrChunkWriter | None:
    """A writer of whole chunks for a Zarr ``target`` whose chunk grid is the plan's output grid."""
    if not type(target).__module__.startswith("zarr."):
        return None
    chunks = tuple(int(g.sizes[0]) for g in plan.out_grids)
    grids = tuple(AxisGrid.regular(s, c) for s, c in zip(plan.shape, chunks, strict=True))
    if tuple(target.shape) != plan.shape or grids != plan.out_grids:
        return None
    return ZarrChunkWriter.of(target, chunks)


class _PendingCopies:
    """Threads' copies of handed-out views not made yet; :meth:`wait` until they are."""

    def __init__(self) -> None:
        self.events: list[threading.Event] = []

    def add(self) -> threading.Event:
        event = threading.Event()
        self.events.append(event)
        return event

    def wait(self) -> None:
        for event in self.events:
            event.wait()
        self.events.clear()


def _store_into(
    events: Iterator[OutputWrite], writer: ZarrChunkWriter, target, workers: int, copies: _PendingCopies
) -> None:
    """Whole output chunks copied, encoded and stored by ``writer`` in ``workers`` threads; pieces assigned.

    A thread copies its chunk (padded at the array's edges) out of the
    executor's buffer, then encodes and stores it; the executor waits for the
    copies before it overwrites the buffer (``before_reuse``, given
    ``copies.wait``), so the thread handing out chunks does no copying. At most
    ``2 * workers`` chunks are in flight. Pieces of a spilled chunk are zarr's
    read-modify-writes, made here one after the other; no whole-chunk write
    touches their chunks.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    if workers == 1:
        for w in events:
            if w.whole:
                writer.write(w.chunk, writer.prepare(w.data))
            else:
                target[w.region] = w.data
        return

    def copy_and_store(chunk: tuple[int, ...], view: np.ndarray, copied: threading.Event) -> None:
        try:
            data = writer.prepare(view)
        finally:
            copied.set()
        del view
        writer.write(chunk, data)

    inflight: deque[Future] = deque()
    with ThreadPoolExecutor(workers, thread_name_prefix="vhdf5-zarr") as pool:
        for w in events:
            if not w.whole:
                target[w.region] = w.data
                continue
            while len(inflight) >= 2 * workers:
                inflight.popleft().result()
            inflight.append(pool.submit(copy_and_store, w.chunk, w.data, copies.add()))
            del w
        while inflight:
            inflight.popleft().result()


def _spare_threads(plan: ResplitPlan) -> int:
    """Threads whose copies in flight (two each, one output chunk) fit what the plan leaves of max_mem."""
    out_bytes = math.prod(int(g.sizes.max()) for g in plan.out_grids) * plan.itemsize
    workers = min(4, os.cpu_count() or 1)
    while workers > 1 and 2 * workers * out_bytes > plan.max_mem - plan.predicted_peak:
        workers -= 1
    return workers


def _encode_into(events: Iterator[OutputWrite], direct: tuple[h5py.Dataset, ChunkEncoder], workers: int) -> None:
    """Whole output chunks encoded in threads and stored with ``write_direct_chunk``, in order; pieces assigned.

    libhdf5 compresses one chunk at a time; here the chunks' filters run in
    ``workers`` threads (see :mod:`xarray_vhdf5._backend.encode`, which pads edge
    chunks with the fill value) and libhdf5 only stores the bytes.
    """
    from collections import deque
    from concurrent.futures import Future, ThreadPoolExecutor

    ds, encoder = direct
    queue: deque[tuple[tuple[int, ...], Future]] = deque()
    dsid = ds.id

    def store_first() -> None:
        offset, future = queue.popleft()
        dsid.write_direct_chunk(offset, future.result(), 0)

    with ThreadPoolExecutor(workers, thread_name_prefix="vhdf5-encode") as pool:
        for w in events:
            if not w.whole:
                ds[w.region] = w.data  # a piece of a spilled chunk: libhdf5's read-modify-write
                continue
            while len(queue) >= 2 * workers:
                store_first()
            offset = tuple(r.start for r in w.region)
            if not encoder.filters:  # nothing to encode: the chunk's bytes (padded at the edges), now
                dsid.write_direct_chunk(offset, encoder.encode(w.data), 0)
                continue
            queue.append((offset, pool.submit(encoder.encode, np.array(w.data))))
        while queue:
            store_first()


def _writer_threads(plan: ResplitPlan, target, threads: int | None) -> int:
    """Threads for :func:`resplit_into` (see its ``threads``)."""
    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be a positive int, got {threads!r}")
    module = type(target).__module__.split(".")[0]
    if module == "zarr" and not _whole_units(plan, target):
        return 1  # even when asked for more: concurrent writes into one shard or chunk lose points
    if threads is not None:
        return int(threads)
    if module in ("h5py", "h5netcdf", "numpy"):
        return 1
    return _spare_threads(plan)


def _whole_units(plan: ResplitPlan, target) -> bool:
    """Each of the Zarr ``target``'s stored objects (shards, else chunks) lies in one output chunk.

    Otherwise two output chunks share a stored object, and their writes, each a
    read-modify-write of it, must not run at once.
    """
    unit = getattr(target, "shards", None) or getattr(target, "chunks", None)
    if unit is None or len(unit) != len(plan.out_grids):
        return False
    return all(not np.any(g.edges[1:-1] % int(u)) for g, u in zip(plan.out_grids, unit, strict=True))
