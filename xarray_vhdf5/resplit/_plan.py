"""The keep-strategy planner: buffers, their order and the remainders kept, under a memory budget.

Resplitting reads an array stored in *input chunks* and writes it in *output
chunks* of another shape. Following Guédon, Hayot-Sasson and Glatard, *Dask IO
for sequentially splitting, merging and resplitting multidimensional arrays*
(the "keep" algorithm; see ``docs/rechunk.md``):

- the array is cut into **buffers**, runs of whole input chunks (``m[x]`` of them
  along axis ``x``), visited in storage (C) order; each input chunk belongs to
  exactly one buffer, so it is read exactly once;
- the ideal buffer is the **input aggregate** Λ, the fewest input chunks covering
  one output chunk (the first one) along each axis. From one input chunk, the
  buffer is *stretched* one axis at a time in storage order (the last, fastest
  axis first), through powers of two up to Λ, keeping the candidate with the
  fewest writes that fits the budget;
- an output chunk inside one buffer is written at once. One that straddles
  buffers is completed by later buffers: its pieces (the *remainders*) are
  **kept** in memory until its last piece arrives, and it is then written once.
  When memory runs out, an output chunk is **spilled** instead: each piece is
  written as it comes (a partial write: one more seek each).

Memory model (bytes): the executor holds one buffer (allocated once and
reused), one input chunk being read into it, one output chunk being assembled
(also reused) and the kept pieces::

    peak = buffer + input chunk + output chunk + kept

The input chunk and the assembled output chunk are counted whole even when not
held, because the consumer may still hold the previous write (a view of the
buffer or of the assembly array) while the next input chunk is read. The least
budget is a buffer of one input chunk: ``2 * input chunk + output chunk``
(:func:`minimum_memory`).

An output chunk that straddles buffers is *reserved* all its bytes but its last
piece from the buffer that starts it through the buffer that completes it; the
planner keeps outputs first come, first served (in buffer order) while the
reservations fit ``max_mem - buffer - input chunk - output chunk``. The kept bytes never
exceed the reservations, so the predicted peak bounds what the executor holds.
The paper's closed form, ``Σ = G1 + n (G2 + G3) + N (G4 + ... + G7) + B``,
counts the same remainders volume by volume; here they are summed over the
actual grid (irregular grids and partly needed arrays included).

Seeks are counted as the paper counts them, each file (chunk) stored in C order:
one per input chunk read, and per write one per contiguous run of the chunk it
fills (a whole chunk: one). :func:`naive_seeks` is the paper's baseline
(Algorithm 2: one input chunk at a time, no cache) in the same measure.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import MemoryBudgetError
from ._grid import AxisGrid, parse_bytes

__all__ = ["DEFAULT_MAX_MEM", "ResplitPlan", "default_budget", "minimum_memory", "naive_seeks", "plan_resplit"]

#: The budget of a resplit when the caller gives none, bytes (raised to the minimum: :func:`default_budget`).
DEFAULT_MAX_MEM = 256 * 2**20


def minimum_memory(in_chunks, out_chunks, itemsize: int) -> int:
    """The least ``max_mem`` of a resplit, bytes: a buffer of one input chunk, one being read, one output chunk.

    Parameters
    ----------
    in_chunks, out_chunks : sequence of int
        The largest input and output chunk shapes, points.
    itemsize : int
        Bytes per point.
    """
    return (2 * math.prod(int(c) for c in in_chunks) + math.prod(int(c) for c in out_chunks)) * int(itemsize)


def default_budget(in_chunks, out_chunks, itemsize: int) -> int:
    """:data:`DEFAULT_MAX_MEM`, or the resplit's :func:`minimum_memory` when that is larger (bytes)."""
    return max(DEFAULT_MAX_MEM, minimum_memory(in_chunks, out_chunks, itemsize))


def _along(vector: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``vector`` shaped to broadcast along ``axis`` of an ``ndim``-d grid."""
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(vector).reshape(shape)


def _outer_prod(vectors: Sequence[np.ndarray]) -> np.ndarray:
    out = np.ones((), dtype=np.int64)
    for x, v in enumerate(vectors):
        out = out * _along(v.astype(np.int64), x, len(vectors))
    return out


def _runs(ext: Sequence[np.ndarray], count: Sequence[np.ndarray]) -> np.ndarray:
    """Contiguous runs written to fill each output chunk from cells, per output (broadcast).

    Along axis ``x`` an output chunk of ``ext[x]`` points is cut into ``count[x]``
    cells. A cell is one run of the chunk (C order) per point of its extent over
    the axes before the last axis ``p`` the cell does not span whole; a cell
    whole along every axis after the first is one run (the paper's Algorithm 2).
    """
    d = len(ext)
    full = [c == 1 for c in count]
    total = np.zeros((), dtype=np.int64)
    for p in range(1, d):
        term = _along((count[p] - full[p]).astype(np.int64), p, d)
        for x in range(p):
            term = term * _along(ext[x].astype(np.int64), x, d)
        for x in range(p + 1, d):
            term = term * _along(full[x].astype(np.int64), x, d)
        total = total + term
    term = _along(count[0].astype(np.int64), 0, d)
    for x in range(1, d):
        term = term * _along(full[x].astype(np.int64), x, d)
    return total + term


def _dilate(mask: np.ndarray, out_grids: Sequence[AxisGrid], in_grids: Sequence[AxisGrid]) -> np.ndarray:
    """The input chunks overlapping at least one output chunk set in ``mask`` (over the output grid)."""
    need = mask.astype(np.int64)
    for x, (og, ig) in enumerate(zip(out_grids, in_grids, strict=True)):
        lo, hi = og.locate_chunks(ig)
        moved = np.moveaxis(need, x, 0)
        diff = np.zeros((ig.n + 1, *moved.shape[1:]), dtype=np.int64)
        np.add.at(diff, lo, moved)
        np.add.at(diff, hi + 1, -moved)
        need = np.moveaxis(np.cumsum(diff[:-1], axis=0) > 0, 0, x).astype(np.int64)
    return need.astype(bool)


@dataclass
class _Evaluation:
    m: tuple[int, ...]
    buf_grids: tuple[AxisGrid, ...]
    buffer_bytes: int
    base_bytes: int
    feasible: bool
    keep: np.ndarray | None = None
    straddle: np.ndarray | None = None
    kept_bytes: int = 0
    whole_writes: int = 0
    piece_writes: int = 0
    seeks: int = 0
    spilled: int = 0

    @property
    def writes(self) -> int:
        return self.whole_writes + self.piece_writes


def _evaluate(
    in_grids: tuple[AxisGrid, ...],
    out_grids: tuple[AxisGrid, ...],
    m: tuple[int, ...],
    itemsize: int,
    max_mem: int,
    needed: np.ndarray,
    reads: int,
) -> _Evaluation:
    d = len(in_grids)
    buf_grids = tuple(g.group(k) for g, k in zip(in_grids, m, strict=True))
    buffer_bytes = math.prod(int(g.sizes.max()) for g in buf_grids) * itemsize
    in_bytes = math.prod(int(g.sizes.max()) for g in in_grids) * itemsize
    out_bytes = math.prod(int(g.sizes.max()) for g in out_grids) * itemsize
    base = buffer_bytes + in_bytes + out_bytes
    ev = _Evaluation(m, buf_grids, buffer_bytes, base, base <= max_mem)
    if not ev.feasible:
        return ev
    lo, hi, last, ext = [], [], [], []
    for og, bg in zip(out_grids, buf_grids, strict=True):
        a, b = og.locate_chunks(bg)
        lo.append(a)
        hi.append(b)
        ext.append(og.sizes)
        last.append(og.edges[1:] - np.maximum(og.edges[:-1], bg.edges[b]))
    straddle = np.zeros(needed.shape, dtype=bool)
    t_first = np.zeros((), dtype=np.int64)
    t_last = np.zeros((), dtype=np.int64)
    stride = 1
    for x in reversed(range(d)):
        straddle = straddle | _along(lo[x] != hi[x], x, d)
        t_first = t_first + _along(lo[x] * stride, x, d)
        t_last = t_last + _along(hi[x] * stride, x, d)
        stride *= buf_grids[x].n
    t_first = np.broadcast_to(t_first, needed.shape)
    t_last = np.broadcast_to(t_last, needed.shape)
    candidates = straddle & needed
    reserve = np.where(candidates, (_outer_prod(ext) - _outer_prod(last)) * itemsize, 0)
    budget = max_mem - base
    diff = np.zeros(stride + 1, dtype=np.int64)
    np.add.at(diff, t_first[candidates], reserve[candidates])
    np.add.at(diff, t_last[candidates] + 1, -reserve[candidates])
    peak_reserved = int(np.cumsum(diff).max(initial=0))
    if peak_reserved <= budget:
        keep = candidates
    else:
        keep, peak_reserved = _greedy_keep(candidates, t_first, t_last, reserve, budget)
    spilled = candidates & ~keep
    ev.keep, ev.straddle, ev.kept_bytes = keep, straddle, peak_reserved
    ev.whole_writes = int(np.count_nonzero(needed & ~spilled))
    ev.spilled = int(np.count_nonzero(spilled))
    counts = [b - a + 1 for a, b in zip(lo, hi, strict=True)]
    if ev.spilled:
        ev.piece_writes = int(_outer_prod(counts)[spilled].sum()) if d else 0
        ev.seeks = reads + ev.whole_writes + int(np.broadcast_to(_runs(ext, counts), needed.shape)[spilled].sum())
    else:
        ev.seeks = reads + ev.whole_writes
    return ev


def _greedy_keep(candidates, t_first, t_last, reserve, budget) -> tuple[np.ndarray, int]:
    """Keep straddling outputs first come, first served while their reservations fit ``budget``."""
    flat = np.flatnonzero(candidates)
    order = flat[np.lexsort((flat, t_first.ravel()[flat]))]
    tf, tl, rs = t_first.ravel(), t_last.ravel(), reserve.ravel()
    keep = np.zeros(candidates.size, dtype=bool)
    active: list[tuple[int, int]] = []  # (last buffer, reserved bytes) of kept outputs
    held = peak = 0
    for k in order.tolist():
        start = int(tf[k])
        while active and active[0][0] < start:
            held -= heapq.heappop(active)[1]
        r = int(rs[k])
        if held + r <= budget:
            keep[k] = True
            held += r
            peak = max(peak, held)
            heapq.heappush(active, (int(tl[k]), r))
    return keep.reshape(candidates.shape), peak


def _powers(limit: int) -> list[int]:
    out, k = [], 1
    while k < limit:
        out.append(k)
        k *= 2
    return sorted({*out, limit})


def _grids(shape, chunks, what: str) -> tuple[AxisGrid, ...]:
    if len(chunks) != len(shape):
        raise ValueError(f"{what} need one entry per axis of the shape {tuple(shape)}, got {chunks!r}")
    grids = []
    for s, c in zip(shape, chunks, strict=True):
        if isinstance(c, AxisGrid):
            g = c
        elif isinstance(c, (int, np.integer)):
            if c < 1:
                raise ValueError(f"{what} must be positive, got {tuple(chunks)!r}")
            g = AxisGrid.regular(s, min(int(c), s))
        else:
            g = AxisGrid.from_sizes(c)
        if g.size != s:
            raise ValueError(f"{what} cover {g.size} points where the axis has {s}")
        grids.append(g)
    return tuple(grids)


@dataclass(repr=False)
class ResplitPlan:
    """How an array in input chunks is rewritten in output chunks: an inspectable plan.

    Made by :func:`plan_resplit`; run by :func:`~xarray_vhdf5.resplit.iter_resplit`.
    Sizes are in points (``shape``, ``*_chunks``, ``buffer_shape``) or bytes
    (``*_bytes``, ``max_mem``), as named.

    Attributes
    ----------
    shape : tuple of int
        The array's shape.
    itemsize : int
        Bytes per point.
    max_mem : int
        The budget, bytes.
    in_grids, out_grids, buffer_grids : tuple of AxisGrid
        Input chunks, output chunks and buffers along each axis.
    buffer_chunks : tuple of int
        Input chunks per buffer along each axis (``m``).
    aggregate_chunks : tuple of int
        The input aggregate Λ, in input chunks along each axis.
    needed : numpy.ndarray of bool
        Over the output chunk grid: the output chunks to write.
    keep : numpy.ndarray of bool
        Over the output chunk grid: straddling output chunks whose remainders are
        kept in memory (the others straddling buffers are spilled).
    input_reads : int
        Input chunks read (each once).
    whole_writes, piece_writes : int
        Output chunks written whole, and pieces written to spilled ones.
    kept_bytes : int
        The most bytes reserved for kept remainders at once.
    predicted_peak : int
        ``buffer_bytes + input chunk bytes + output chunk bytes + kept_bytes``:
        bounds the bytes the executor holds at once.
    minimum : int
        The least budget for this resplit (:func:`minimum_memory`).
    seeks, naive_seeks : int
        Seeks of this plan, and of the paper's baseline (one input chunk at a
        time), counted as :func:`naive_seeks` counts them.
    candidates : list of tuple
        ``(buffer_chunks, writes, predicted peak)`` of every buffer tried.
    """

    shape: tuple[int, ...]
    itemsize: int
    max_mem: int
    in_grids: tuple[AxisGrid, ...]
    out_grids: tuple[AxisGrid, ...]
    buffer_grids: tuple[AxisGrid, ...]
    buffer_chunks: tuple[int, ...]
    aggregate_chunks: tuple[int, ...]
    needed: np.ndarray
    needed_inputs: np.ndarray
    keep: np.ndarray
    straddle: np.ndarray
    input_reads: int
    whole_writes: int
    piece_writes: int
    spilled_outputs: int
    buffer_bytes: int
    kept_bytes: int
    predicted_peak: int
    minimum: int
    seeks: int
    naive_seeks: int
    candidates: list = field(default_factory=list)

    @property
    def buffer_shape(self) -> tuple[int, ...]:
        """The largest buffer, points along each axis."""
        return tuple(int(g.sizes.max()) for g in self.buffer_grids)

    @property
    def aggregate_shape(self) -> tuple[int, ...]:
        """The input aggregate Λ, in points (the first ``aggregate_chunks`` input chunks)."""
        return tuple(int(g.edges[min(k, g.n)]) for g, k in zip(self.in_grids, self.aggregate_chunks, strict=True))

    @property
    def output_writes(self) -> int:
        """Write operations: whole output chunks plus pieces of spilled ones."""
        return self.whole_writes + self.piece_writes

    @property
    def n_buffers(self) -> int:
        return math.prod(g.n for g in self.buffer_grids)

    @property
    def spilled(self) -> np.ndarray:
        """Over the output grid: output chunks written piece by piece."""
        return self.needed & self.straddle & ~self.keep

    def __repr__(self) -> str:
        return (
            f"<ResplitPlan shape {self.shape}, {self.itemsize} B/point: buffer {self.buffer_shape} "
            f"(Λ {self.aggregate_shape}), {self.n_buffers} buffers; reads {self.input_reads}, "
            f"writes {self.output_writes} ({self.whole_writes} whole, {self.piece_writes} pieces of "
            f"{self.spilled_outputs} spilled), seeks {self.seeks} (naive {self.naive_seeks}); kept "
            f"{_human(self.kept_bytes)}, predicted peak {_human(self.predicted_peak)} of max_mem "
            f"{_human(self.max_mem)}>"
        )


def _human(n: int) -> str:
    """Bytes with a binary unit: ``"512 B"``, ``"1.5 KiB"``, ``"488.3 MiB"``."""
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def naive_seeks(
    shape: Sequence[int],
    in_chunks: Sequence[int | Sequence[int] | AxisGrid],
    out_chunks: Sequence[int | Sequence[int] | AxisGrid],
    needed: np.ndarray | None = None,
) -> int:
    """Seeks of the baseline resplit: one input chunk at a time, no cache (the paper's Algorithm 2).

    Each input chunk is one seek to read; each of its overlaps with an output
    chunk is written at once, one seek per contiguous run of the output chunk
    (stored in C order) it covers.

    Parameters
    ----------
    shape : sequence of int
        The array's shape, points.
    in_chunks, out_chunks : sequence
        Per axis a chunk size (int), the chunk sizes (sequence), or an :class:`AxisGrid`.
    needed : numpy.ndarray of bool, optional
        Over the output chunk grid: the output chunks written (default all).
    """
    shape = tuple(int(s) for s in shape)
    ig, og = _grids(shape, in_chunks, "input chunks"), _grids(shape, out_chunks, "output chunks")
    mask = np.ones(tuple(g.n for g in og), dtype=bool) if needed is None else np.asarray(needed, dtype=bool)
    reads = int(np.count_nonzero(_dilate(mask, og, ig)))
    counts = [hi - lo + 1 for lo, hi in (g.locate_chunks(i) for g, i in zip(og, ig, strict=True))]
    runs = np.broadcast_to(_runs([g.sizes for g in og], counts), mask.shape)
    return reads + int(runs[mask].sum())


def plan_resplit(
    shape: Sequence[int],
    in_chunks: Sequence[int | Sequence[int] | AxisGrid],
    out_chunks: Sequence[int | Sequence[int] | AxisGrid],
    itemsize: int,
    max_mem: int | str,
    *,
    needed: np.ndarray | None = None,
    buffer_chunks: Sequence[int] | None = None,
) -> ResplitPlan:
    """Plan a resplit of an array from input chunks to output chunks within ``max_mem`` bytes.

    Parameters
    ----------
    shape : sequence of int
        The array's shape, in points; at least one axis, none empty.
    in_chunks, out_chunks : sequence
        Per axis, the chunk size in points (int, the last chunk trimmed, as HDF5
        and Zarr chunk), the sizes of each chunk (a sequence, as dask's
        ``chunks``), or an :class:`AxisGrid`.
    itemsize : int
        Bytes per point.
    max_mem : int or str
        Bytes the executor may hold at once for buffers, remainders and one
        chunk being assembled (``"512MB"``, ``"2GiB"`` or an int). Memory the
        reader and writer use besides (decompression, HDF5 caches) is not in it.
    needed : numpy.ndarray of bool, optional
        Over the output chunk grid: the output chunks to produce (default: all).
        Input chunks overlapping none of them are not read.
    buffer_chunks : sequence of int, optional
        Force the buffer: input chunks per buffer along each axis (default:
        stretched as described in the module docs).

    Returns
    -------
    ResplitPlan

    Raises
    ------
    MemoryBudgetError
        ``max_mem`` below the plan's minimum (:func:`minimum_memory`) or, with
        ``buffer_chunks``, below that buffer's least need; the
        message and ``error.minimum`` say the minimum in bytes.
    ValueError
        Chunks that do not match the shape, non-positive sizes, a bad ``needed`` mask.
    """
    shape = tuple(int(s) for s in shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"resplitting needs a shape of at least one axis and no empty axis, got {shape}")
    itemsize = int(itemsize)
    if itemsize < 1:
        raise ValueError(f"itemsize must be a positive number of bytes, got {itemsize}")
    budget = parse_bytes(max_mem)
    in_grids = _grids(shape, in_chunks, "input chunks")
    out_grids = _grids(shape, out_chunks, "output chunks")
    grid_shape = tuple(g.n for g in out_grids)
    if needed is None:
        needed = np.ones(grid_shape, dtype=bool)
    else:
        needed = np.asarray(needed, dtype=bool)
        if needed.shape != grid_shape:
            raise ValueError(f"needed must have the output chunk grid's shape {grid_shape}, got {needed.shape}")
    needed_inputs = _dilate(needed, out_grids, in_grids)
    reads = int(np.count_nonzero(needed_inputs))
    in_bytes = math.prod(int(g.sizes.max()) for g in in_grids) * itemsize
    out_bytes = math.prod(int(g.sizes.max()) for g in out_grids) * itemsize
    minimum = 2 * in_bytes + out_bytes
    aggregate = tuple(
        int(hi[0] - lo[0] + 1) for lo, hi in (og.locate_chunks(ig) for og, ig in zip(out_grids, in_grids, strict=True))
    )
    evals: list[_Evaluation] = []

    def run(m):
        ev = _evaluate(in_grids, out_grids, tuple(m), itemsize, budget, needed, reads)
        evals.append(ev)
        return ev

    def key(ev: _Evaluation):
        return (ev.writes, math.prod(g.n for g in ev.buf_grids), ev.base_bytes + ev.kept_bytes)

    if buffer_chunks is not None:
        forced = tuple(int(k) for k in buffer_chunks)
        if len(forced) != len(shape) or min(forced) < 1:
            raise ValueError(f"buffer_chunks must be one positive int per axis, got {buffer_chunks!r}")
        forced = tuple(min(k, g.n) for k, g in zip(forced, in_grids, strict=True))
        best = run(forced)
        if not best.feasible:
            raise MemoryBudgetError(
                f"max_mem {budget} B cannot hold the buffer of {forced} input chunks: it needs at least "
                f"{best.base_bytes} B (buffer {best.buffer_bytes} B, one input and one output chunk)",
                best.base_bytes,
            )
    else:
        if budget < minimum:
            raise MemoryBudgetError(
                f"max_mem {budget} B is below the minimum of this resplit, {minimum} B: a buffer of one "
                f"input chunk, one being read ({in_bytes} B each) and one output chunk ({out_bytes} B)",
                minimum,
            )
        m: list[int] = [1] * len(shape)
        best = run(m)
        for x in reversed(range(len(shape))):
            axis_best = None
            for k in _powers(min(aggregate[x], in_grids[x].n)):
                ev = best if k == m[x] else run([*m[:x], k, *m[x + 1 :]])
                if not ev.feasible:
                    break
                if axis_best is None or key(ev) <= key(axis_best):
                    axis_best = ev
            if axis_best is not None:  # k == m[x] (the current best) is the first candidate
                best = axis_best
                m = list(best.m)
    assert best.keep is not None and best.straddle is not None
    return ResplitPlan(
        shape=shape,
        itemsize=itemsize,
        max_mem=budget,
        in_grids=in_grids,
        out_grids=out_grids,
        buffer_grids=best.buf_grids,
        buffer_chunks=best.m,
        aggregate_chunks=aggregate,
        needed=needed,
        needed_inputs=needed_inputs,
        keep=best.keep,
        straddle=best.straddle,
        input_reads=reads,
        whole_writes=best.whole_writes,
        piece_writes=best.piece_writes,
        spilled_outputs=best.spilled,
        buffer_bytes=best.buffer_bytes,
        kept_bytes=best.kept_bytes,
        predicted_peak=best.base_bytes + best.kept_bytes,
        minimum=minimum if buffer_chunks is None else best.base_bytes,
        seeks=best.seeks,
        naive_seeks=naive_seeks(shape, in_grids, out_grids, needed),
        candidates=[(e.m, e.writes if e.feasible else None, e.base_bytes + e.kept_bytes) for e in evals],
    )
