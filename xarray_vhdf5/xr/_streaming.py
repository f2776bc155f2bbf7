"""Committing dask arrays larger than memory: rechunk to the HDF5 chunk grid, stream, hash on workers.

The commit stores a variable chunk by chunk on its HDF5 chunk grid (the unit of
deduplication). A dask array's blocks ("input blocks") rarely match that grid
("output chunks"). Computing each output chunk as ``x[chunk].compute()`` would
compute every input block it touches again for every output chunk touching it;
``x.rechunk(chunks)`` computed batch by batch does the same across batches. This
module follows the "keep" strategy of Guédon, Hayot-Sasson & Glatard, *Dask IO
for sequentially splitting, merging and resplitting multidimensional arrays*
(the project's ``seeds/dask_io_resplit_paper.md``):

- the array is cut into **buffers** whose edges are input-block edges, so each
  input block is computed exactly once;
- output chunks entirely inside a buffer are cut out of its input blocks
  (never concatenated into one buffer array), checked against the fill value
  and hashed right where the blocks were computed (a dask worker under
  ``dask.distributed``, a thread otherwise);
- the pieces of output chunks that straddle buffers (the *remainders*) are
  **kept** in memory until their last piece arrives, then hashed here;
- buffers are visited in storage (C) order, so remainders along the fastest
  axes complete soonest. Per axis (:func:`plan_buffers`) the buffer edges are:
  ``"aligned"``: only points that are both input and output edges (no
  remainder crosses them); ``"keep"``: every input edge (remainders kept);
  ``"reread"``: output edges only, when the remainders of a slow axis would
  not fit in the memory budget: input blocks cut by such an edge are computed
  twice. (The paper writes the remainders it cannot keep straight into their
  output files; a content-addressed chunk can only be hashed whole, so here
  they are recomputed instead.)

Buffers are computed in batches of at most ``max_bytes`` (several buffers per
``dask.compute`` call, for parallelism); only the client process writes
raw_data. Memory in the client: about one batch of input blocks and of cut
chunks, the kept remainders and the commit's 16 MiB write queue (plus what
dask needs to make a block). ``tests/test_dask_scale.py`` measures it on a
1.5 GB array: about 200 MiB of peak RSS growth.

New chunks are appended to raw_data in the order they complete (C order of
the buffers), not in versioned-hdf5's axis-0-fastest order: the digests, the
mappings and every version's points are the same; only the rows differ.
"""

from __future__ import annotations

import bisect
import itertools
import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .._backend.chunks import chunk_grid_shape, chunk_slices
from .._backend.hashing import chunk_hash
from .._backend.raw_data import is_fill_chunk

if TYPE_CHECKING:
    from ._resplit_source import ResplitBudget

__all__ = [
    "DEFAULT_MAX_BYTES",
    "BufferPlan",
    "DaskChunkSource",
    "is_dask_array",
    "plan_buffers",
    "show_progress",
    "stage_lazy_dataset",
]

#: Default bytes of array data computed per batch (and budget of kept remainders).
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def is_dask_array(data) -> bool:
    """True for a dask array (without importing dask when it is not loaded)."""
    if "dask.array" not in sys.modules:
        return False
    import dask.array as da

    return isinstance(data, da.Array)


def show_progress(progress: bool | None) -> bool:
    """Resolve a ``progress=`` argument: None means "when stderr is a terminal"."""
    if progress is None:
        stream = sys.stderr
        return bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())
    return bool(progress)


# -- the plan ------------------------------------------------------------------


@dataclass(frozen=True)
class BufferPlan:
    """How an array of input blocks is cut into buffers for an output chunk grid.

    Attributes
    ----------
    shape : tuple of int
        The array's shape, in points.
    chunks : tuple of int
        The output (HDF5) chunk shape, in points.
    edges : tuple of tuple of int
        Per axis, the buffer edges in points, from 0 to ``shape[axis]``.
    modes : tuple of str
        Per axis, ``"aligned"``, ``"keep"`` or ``"reread"`` (see the module docstring).
    buffer_bytes : int
        Bytes of the largest buffer.
    input_bytes : int
        Bytes of the input blocks computed for the largest buffer (more than
        ``buffer_bytes`` on ``"reread"`` axes).
    kept_bytes : int
        Estimated bytes of the largest set of kept remainders (output chunks
        allocated whole, edge-trimmed).
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    edges: tuple[tuple[int, ...], ...]
    modes: tuple[str, ...]
    buffer_bytes: int
    input_bytes: int
    kept_bytes: int

    @property
    def n_buffers(self) -> int:
        return math.prod(len(e) - 1 for e in self.edges)

    def buffers(self) -> Iterator[tuple[slice, ...]]:
        """Every buffer's region, in C order of the buffer grid."""
        spans = [list(itertools.pairwise(e)) for e in self.edges]
        for combo in itertools.product(*spans):
            yield tuple(slice(a, b) for a, b in combo)

    @property
    def rereads(self) -> bool:
        """True when some input blocks are computed more than once."""
        return "reread" in self.modes


def _axis_edges(in_sizes: Sequence[int], chunk: int, size: int) -> dict[str, tuple[int, ...]]:
    in_edges = tuple(dict.fromkeys([0, *itertools.accumulate(in_sizes)]))
    out_edges = sorted({*range(0, size, chunk), size})
    aligned = tuple(sorted(set(in_edges) & set(out_edges)))
    # reread: output edges, grouped into spans of about one input block (at least one chunk)
    target = max(max(in_sizes, default=chunk), chunk)
    reread, previous = [0], 0
    for edge in out_edges[1:]:
        if edge - reread[-1] > target and previous > reread[-1]:
            reread.append(previous)
        previous = edge
    if reread[-1] != size:
        reread.append(size)
    return {"aligned": aligned, "keep": in_edges, "reread": tuple(reread)}


def _span(edges: Sequence[int], in_edges: Sequence[int]) -> int:
    """Largest extent of whole input blocks a buffer between ``edges`` touches, in points."""
    worst = 0
    for a, b in itertools.pairwise(edges):
        lo = in_edges[bisect.bisect_right(in_edges, a) - 1]
        hi = in_edges[bisect.bisect_left(in_edges, b)]
        worst = max(worst, hi - lo)
    return worst


def _estimate(options, modes, shape, chunks, itemsize) -> tuple[int, int, int]:
    """(input bytes computed for one buffer, bytes of one buffer, kept bytes) of a plan."""
    chosen = [options[k][m] for k, m in enumerate(modes)]
    widths = [max((b - a for a, b in itertools.pairwise(e)), default=0) for e in chosen]
    spans = [_span(e, options[k]["keep"]) for k, e in enumerate(chosen)]
    chunk_bytes = math.prod(chunks) * itemsize
    grid = chunk_grid_shape(shape, chunks)
    kept = 0
    for k, mode in enumerate(modes):
        if mode != "keep" or set(options[k]["keep"]) <= set(options[k]["aligned"]):
            continue
        n = 1
        for j in range(len(shape)):
            if j < k:
                n *= math.ceil(widths[j] / chunks[j]) + 1
            elif j > k:
                n *= grid[j]
        kept += n * chunk_bytes
    return math.prod(spans) * itemsize, math.prod(widths) * itemsize, kept


def plan_buffers(
    in_chunks: Sequence[Sequence[int]],
    chunks: Sequence[int],
    shape: Sequence[int],
    itemsize: int,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> BufferPlan:
    """Choose buffer edges per axis for resplitting ``in_chunks`` into ``chunks``.

    Memory of a plan: the input blocks one buffer touches, plus the buffer's
    output chunks cut from them, plus the kept remainders. It starts from
    ``"aligned"`` edges on every axis (no remainder, no input block computed
    twice). While over ``max_bytes``, axes switch to ``"keep"`` from the
    fastest (last) axis to the slowest, where remainders are cheapest
    ("stretch in storage order"); if still over, axes switch to ``"reread"``
    from the slowest, but only where that fits the budget or halves the memory.

    Parameters
    ----------
    in_chunks : sequence of sequence of int
        The dask array's ``chunks`` (block lengths per axis, in points).
    chunks : sequence of int
        The output chunk shape, in points.
    shape : sequence of int
        The array's shape, in points.
    itemsize : int
        Bytes per point.
    max_bytes : int
        Memory budget for one buffer plus the kept remainders, in bytes; raised
        to twice the largest input block (a buffer holds whole blocks).

    Returns
    -------
    BufferPlan

    Raises
    ------
    ValueError
        ``in_chunks`` do not add up to ``shape`` or ``chunks`` are not positive.
    """
    shape = tuple(int(s) for s in shape)
    chunks = tuple(int(c) for c in chunks)
    in_chunks = tuple(tuple(int(c) for c in axis) for axis in in_chunks)
    if len(in_chunks) != len(shape) or any(sum(a) != s for a, s in zip(in_chunks, shape)):
        raise ValueError(f"input chunks {in_chunks} do not tile shape {shape}")
    if len(chunks) != len(shape) or any(c <= 0 for c in chunks):
        raise ValueError(f"chunks {chunks} must be {len(shape)} positive integers")
    options = [_axis_edges(a, c, s) for a, c, s in zip(in_chunks, chunks, shape)]
    modes = ["aligned"] * len(shape)
    # A buffer holds whole input blocks: the budget cannot go below about two of them.
    block_bytes = math.prod(max(a, default=0) for a in in_chunks) * itemsize
    max_bytes = max(int(max_bytes), 2 * block_bytes)

    def total(m) -> int:
        return sum(_estimate(options, m, shape, chunks, itemsize))

    for k in reversed(range(len(shape))):
        if total(modes) <= max_bytes:
            break
        trial = [*modes[:k], "keep", *modes[k + 1 :]]
        if total(trial) < total(modes):
            modes = trial
    for k in range(len(shape)):
        if total(modes) <= max_bytes:
            break
        # Recomputing inputs only pays when it brings memory within budget or halves it.
        trial = [*modes[:k], "reread", *modes[k + 1 :]]
        if total(trial) <= max_bytes or 2 * total(trial) < total(modes):
            modes = trial
    inputs, buffer_bytes, kept = _estimate(options, modes, shape, chunks, itemsize)
    edges = tuple(options[k][m] for k, m in enumerate(modes))
    return BufferPlan(shape, chunks, edges, tuple(modes), buffer_bytes, inputs, kept)


# -- the work on a buffer (runs where the buffer was computed) ------------------


def cut_blocks(
    blocks: list[np.ndarray],
    origins: list[tuple[int, ...]],
    region: tuple[slice, ...],
    chunks: tuple[int, ...],
    shape: tuple[int, ...],
    fillvalue,
) -> tuple[list, list]:
    """Cut one buffer, given as the pieces of input blocks it covers, into output chunks.

    The pieces are not concatenated: each output chunk is sliced from the one
    piece holding it, or assembled from the pieces it spans. Runs where dask
    computed the pieces (a worker under ``dask.distributed``).

    Parameters
    ----------
    blocks : list of numpy.ndarray
        The pieces; together they tile ``region``.
    origins : list of tuple of int
        Position of each piece's first point in the array, in points.
    region : tuple of slice
        The buffer, in points.
    chunks, shape : tuple of int
        Output chunk shape and array shape, in points.
    fillvalue : scalar or None
        The dataset's fill value (chunks entirely of it are not stored).

    Returns
    -------
    whole : list of (chunk_index, chunk or None, digest or None)
        Output chunks inside the buffer: a None chunk when all fill value,
        else the points and their :func:`~xarray_vhdf5._backend.hashing.chunk_hash`.
    pieces : list of (chunk_index, region inside the chunk, points)
        Parts of output chunks that straddle the buffer's edges (remainders).
    """
    whole: list[tuple[tuple[int, ...], np.ndarray | None, bytes | None]] = []
    remainders: list[tuple[tuple[int, ...], tuple[slice, ...], np.ndarray]] = []
    ranges = [range(r.start // c, -(-r.stop // c)) for r, c in zip(region, chunks)]
    for index in itertools.product(*ranges):
        target = chunk_slices(index, shape, chunks)
        lo = tuple(max(t.start, r.start) for t, r in zip(target, region))
        hi = tuple(min(t.stop, r.stop) for t, r in zip(target, region))
        points = _gather(blocks, origins, lo, hi)
        if all(a == t.start and b == t.stop for a, b, t in zip(lo, hi, target)):
            if is_fill_chunk(points, fillvalue):
                whole.append((index, None, None))
            else:
                whole.append((index, points, chunk_hash(points)))
        else:
            inner = tuple(slice(a - t.start, b - t.start) for a, b, t in zip(lo, hi, target))
            remainders.append((index, inner, points))
    return whole, remainders


def _gather(blocks, origins, lo, hi) -> np.ndarray:
    """The points ``[lo, hi)`` of the array from the pieces that hold them (C-contiguous)."""
    found = []
    for block, origin in zip(blocks, origins):
        a = tuple(max(x, o) for x, o in zip(lo, origin))
        b = tuple(min(h, o + n) for h, o, n in zip(hi, origin, block.shape))
        if all(x < y for x, y in zip(a, b)):
            found.append((block, origin, a, b))
    if len(found) == 1:
        block, origin, a, b = found[0]
        return np.ascontiguousarray(block[tuple(slice(x - o, y - o) for x, y, o in zip(a, b, origin))])
    out = np.empty(tuple(h - a for a, h in zip(lo, hi)), dtype=blocks[0].dtype)
    for block, origin, a, b in found:
        out[tuple(slice(x - s, y - s) for x, y, s in zip(a, b, lo))] = block[
            tuple(slice(x - o, y - o) for x, y, o in zip(a, b, origin))
        ]
    return out


def _pieces(array, region: tuple[slice, ...]) -> tuple[list, list[tuple[int, ...]]]:
    """The dask pieces of ``array`` covering ``region``: one per input block it touches."""
    edges = [[0, *itertools.accumulate(c)] for c in array.chunks]
    spans = []
    for r, e in zip(region, edges):
        first = bisect.bisect_right(e, r.start) - 1
        last = bisect.bisect_left(e, r.stop)
        spans.append([(i, max(r.start, e[i]), min(r.stop, e[i + 1])) for i in range(first, last)])
    pieces, origins = [], []
    for combo in itertools.product(*spans):
        block = array.blocks[tuple(i for i, _, _ in combo)]
        local = tuple(slice(a - e[i], b - e[i]) for (i, a, b), e in zip(combo, edges))
        if any(s.start != 0 or s.stop != n for s, n in zip(local, block.shape)):
            block = block[local]
        pieces.append(block)
        origins.append(tuple(a for _, a, _ in combo))
    return pieces, origins


# -- the source the commit iterates --------------------------------------------


class DaskChunkSource:
    """A dask array staged for commit, streamed chunk by chunk (the commit's chunk-source protocol).

    Parameters
    ----------
    array : dask.array.Array
        The (CF-encoded) points of the variable; any dask chunking.
    max_bytes : int
        Bytes of array data computed per batch, and budget for the kept
        remainders (see :func:`plan_buffers`).
    progress : bool or None
        Show a tqdm progress bar (bytes); None: only when stderr is a terminal.
    name : str, optional
        Label of the progress bar.

    Notes
    -----
    Chunks are computed, checked against the fill value and hashed
    (:func:`~xarray_vhdf5._backend.hashing.chunk_hash`) where dask runs the
    task: on the workers with a ``dask.distributed`` client, in threads
    otherwise. ``versions.commit`` then writes them from this process alone.
    """

    def __init__(
        self, array, *, max_bytes: int = DEFAULT_MAX_BYTES, progress: bool | None = None, name: str | None = None
    ):
        self.array = array
        self.max_bytes = int(max_bytes)
        self.progress = show_progress(progress)
        self.name = name
        #: The plan of the last :meth:`iter_hashed_chunks` (for inspection and tests).
        self.plan: BufferPlan | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.array.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index) -> np.ndarray:
        return np.asarray(self.array[index])

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.array)
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"<DaskChunkSource shape {self.shape}, dtype {self.dtype}, dask chunks {self.array.chunksize}>"

    def iter_hashed_chunks(
        self, chunks: tuple[int, ...], fillvalue
    ) -> Iterator[tuple[tuple[int, ...], np.ndarray | None, bytes | None]]:
        """Yield ``(chunk_index, chunk or None, digest or None)`` once per output chunk.

        Parameters
        ----------
        chunks : tuple of int
            The HDF5 chunk shape, in points.
        fillvalue : scalar or None
            The dataset's fill value.
        """
        import dask

        shape, itemsize = self.shape, self.dtype.itemsize
        plan = plan_buffers(self.array.chunks, chunks, shape, itemsize, self.max_bytes)
        self.plan = plan
        kept: dict[tuple[int, ...], list] = {}
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(
                total=math.prod(shape) * itemsize,
                unit="B",
                unit_scale=True,
                desc=f"committing {self.name}" if self.name else "committing",
                leave=False,
            )
        try:
            for batch in _batches(plan, itemsize, self.max_bytes):
                tasks = []
                for region in batch:
                    pieces, origins = _pieces(self.array, region)
                    tasks.append(dask.delayed(cut_blocks, pure=True)(pieces, origins, region, chunks, shape, fillvalue))
                results = dask.compute(*tasks)
                del tasks
                for whole, remainders in results:
                    yield from whole
                    for index, inner, piece in remainders:
                        done = _keep(kept, index, inner, piece, shape, chunks)
                        if done is not None:
                            yield index, *_finish(done, fillvalue)
                if bar is not None:
                    bar.update(sum(math.prod(s.stop - s.start for s in r) for r in batch) * itemsize)
                del results
        finally:
            if bar is not None:
                bar.close()
        if kept:  # every point of a kept chunk belongs to some buffer
            raise AssertionError(f"{len(kept)} output chunks were left incomplete")  # pragma: no cover


def _batches(plan: BufferPlan, itemsize: int, max_bytes: int) -> Iterator[list[tuple[slice, ...]]]:
    batch: list[tuple[slice, ...]] = []
    size = 0
    for region in plan.buffers():
        nbytes = math.prod(s.stop - s.start for s in region) * itemsize
        if batch and size + nbytes > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(region)
        size += nbytes
    if batch:
        yield batch


def _keep(kept: dict, index, inner, piece, shape, chunks) -> np.ndarray | None:
    """Add a remainder to its output chunk; return the chunk once complete."""
    entry = kept.get(index)
    if entry is None:
        region = chunk_slices(index, shape, chunks)
        entry = kept[index] = [np.empty(tuple(r.stop - r.start for r in region), piece.dtype), 0]
    entry[0][inner] = piece
    entry[1] += piece.size
    if entry[1] == entry[0].size:
        del kept[index]
        return entry[0]
    return None


def _finish(chunk: np.ndarray, fillvalue) -> tuple[np.ndarray | None, bytes | None]:
    if is_fill_chunk(chunk, fillvalue):
        return None, None
    return chunk, chunk_hash(chunk)


def stage_lazy_dataset(
    group,
    name: str,
    array,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: bool | None = None,
    max_mem: int | str | ResplitBudget | None = None,
    **create_kwargs,
):
    """Stage a dask array in ``group`` (an ``InMemoryGroup``) without computing it.

    The dataset is created through ``group.create_dataset`` (which validates
    chunks, fill value and filters) with an empty placeholder of the same
    dtype, whose points are then replaced by a :class:`DaskChunkSource`: the
    commit streams it (``versions.commit``, "lazy data").

    Parameters
    ----------
    group : InMemoryGroup
        The staged group.
    name : str
        The dataset's name in ``group``.
    array : dask.array.Array
        Its points, ``ndim >= 1``.
    max_bytes, progress
        See :class:`DaskChunkSource`.
    max_mem : int or str, optional
        Stream on the resplit engine within this many bytes instead
        (:class:`~xarray_vhdf5.xr._resplit_source.ResplitChunkSource`).
    **create_kwargs
        ``chunks``, ``fillvalue``, compression... for ``create_dataset``.

    Returns
    -------
    InMemoryArrayDataset
        The staged dataset, ``shape == array.shape``.
    """
    placeholder = np.empty((0,) * array.ndim, dtype=array.dtype)
    ds = group.create_dataset(name, data=placeholder, **create_kwargs)
    # The staging wrappers keep a dataset's points in ``_data``; the commit asks
    # ``_loaded()`` for them and streams any object with ``iter_hashed_chunks``.
    if max_mem is not None:
        from ._resplit_source import ResplitBudget, ResplitChunkSource

        budget = max_mem if isinstance(max_mem, ResplitBudget) else ResplitBudget(max_mem)
        ds._data = ResplitChunkSource(array, max_mem=budget.max_mem, progress=progress, name=name)
        budget.sources.append(ds._data)
    else:
        ds._data = DaskChunkSource(array, max_bytes=max_bytes, progress=progress, name=name)
    return ds
