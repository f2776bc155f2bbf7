"""Resplitting arrays between chunkings with the keep strategy: each input chunk read once.

- :func:`plan_resplit` makes a :class:`ResplitPlan` (buffers, their order, the
  remainders kept, predicted peak memory; its ``repr`` shows them);
- :func:`iter_resplit` runs it, handing out :class:`OutputWrite` events and
  filling :class:`ResplitCounters`; :func:`resplit_into` writes into an array;
- :func:`naive_seeks` counts the baseline's seeks (one input chunk at a time).

The method and its memory model are described in ``docs/rechunk.md``. This
layer sits over ``backend`` (it reads committed chunks through the manifest)
and under ``versions``, ``xr`` and ``cli``, which use it for ``rechunk``,
``modify_metadata(chunks=)``, ``export``, split and merge.
"""

from ._execute import OutputWrite, ResplitCounters, iter_resplit, resplit_into
from ._grid import AxisGrid, parse_bytes
from ._plan import DEFAULT_MAX_MEM, ResplitPlan, default_budget, minimum_memory, naive_seeks, plan_resplit
from ._sources import array_chunk_reader, version_chunk_reader

__all__ = [
    "DEFAULT_MAX_MEM",
    "AxisGrid",
    "OutputWrite",
    "ResplitCounters",
    "ResplitPlan",
    "array_chunk_reader",
    "default_budget",
    "iter_resplit",
    "minimum_memory",
    "naive_seeks",
    "parse_bytes",
    "plan_resplit",
    "resplit_into",
    "version_chunk_reader",
]
