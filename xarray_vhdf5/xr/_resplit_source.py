"""Committing a dask array on the resplit engine: each dask block computed once, one at a time.

:class:`ResplitChunkSource` is the commit's chunk-source protocol (see
:mod:`xarray_vhdf5._versions.commit`, "lazy data") over a
:class:`~xarray_vhdf5.resplit.ResplitPlan` from the array's dask blocks (input
chunks, irregular grids allowed) to the dataset's HDF5 chunks, within
``max_mem`` bytes. Blocks are computed one at a time in this process
(``scheduler="synchronous"``): the right engine when a block is a file to read
(``vhdf5 merge``, ``open_mfdataset``) and memory must stay bounded; for arrays
worth computing in parallel (or on a ``dask.distributed`` cluster) the default
:class:`~xarray_vhdf5.xr._streaming.DaskChunkSource` computes batches of blocks at
once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .._backend.raw_data import is_fill_chunk
from ..resplit import AxisGrid, ResplitCounters, ResplitPlan, iter_resplit, plan_resplit
from ._streaming import DaskChunkSource

__all__ = ["ResplitBudget", "ResplitChunkSource"]


@dataclass
class ResplitBudget:
    """A ``max_mem`` for the commit that also collects the sources it made (to read their plans).

    Pass it where a commit takes ``max_mem``; ``sources`` then lists the
    :class:`ResplitChunkSource` of every variable streamed, in order.
    """

    max_mem: int | str
    sources: list = field(default_factory=list)


class ResplitChunkSource(DaskChunkSource):
    """A dask array staged for commit, resplit block by block (each block computed exactly once).

    Parameters
    ----------
    array : dask.array.Array
        The (CF-encoded) points of the variable, ``ndim >= 1``.
    max_mem : int or str
        Bytes the resplit may hold at once (``"512MB"``); see
        :func:`~xarray_vhdf5.resplit.plan_resplit`.
    progress : bool or None
        A tqdm progress bar over the buffers; None: only when stderr is a terminal.
    name : str, optional
        Label of the progress bar.

    Attributes
    ----------
    plan : ResplitPlan or None
        The plan of the last :meth:`iter_hashed_chunks`.
    counters : ResplitCounters
        What the last :meth:`iter_hashed_chunks` did (block computes are ``input_reads``).
    """

    def __init__(self, array, *, max_mem, progress: bool | None = None, name: str | None = None):
        super().__init__(array, progress=progress, name=name)
        self.max_mem = max_mem
        self.plan: ResplitPlan | None = None  # type: ignore[assignment]
        self.counters = ResplitCounters()

    def iter_hashed_chunks(
        self, chunks: tuple[int, ...], fillvalue
    ) -> Iterator[tuple[tuple[int, ...], np.ndarray | None, bytes | None]]:
        """Yield ``(chunk_index, chunk or None, None)`` once per output chunk (hashed by the commit).

        Raises
        ------
        MemoryBudgetError
            ``max_mem`` below one dask block plus one HDF5 chunk.
        """
        in_grids = tuple(AxisGrid.from_sizes(c) for c in self.array.chunks)
        dtype = self.dtype
        self.plan = plan = plan_resplit(self.shape, in_grids, chunks, max(dtype.itemsize, 1), self.max_mem)
        self.counters = ResplitCounters()
        blocks = self.array.blocks

        def read_chunk(index: tuple[int, ...]) -> np.ndarray:
            return np.asarray(blocks[index].compute(scheduler="synchronous"))

        desc = f"committing {self.name}" if self.name else "committing"
        for w in iter_resplit(plan, read_chunk, dtype, counters=self.counters, progress=self.progress, desc=desc):
            if is_fill_chunk(w.data, fillvalue):
                yield w.chunk, None, None
            else:
                yield w.chunk, np.array(w.data), None  # the writer queues it: not a view of a buffer
