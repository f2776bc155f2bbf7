"""The plans of :class:`~xarray_vhdf5._staging.array.StagedChangesArray`: what they share.

versioned-hdf5's ``staged_changes.rst``, "Plans" and "General plans algorithm".

Each plan decides everything an operation will do - which slabs to append,
which slice pairs to transfer between which slabs, how ``slab_indices`` and
``slab_offsets`` change, which slabs to drop - from shapes, chunks and
indices alone.  Plans never touch data; the array executes them.  They
pretty-print their instructions (``repr``) for debugging::

    SetItemPlan<value_shape=(3, 3), value_view=[:, :], append 2 empty slabs,
    7 slice transfers among 3 slab pairs, drop 0 slabs>
      slabs.append(np.empty((6, 2)))  # slabs[2]
      slabs.append(np.empty((2, 2)))  # slabs[3]
      # 3 transfers from slabs[1] to slabs[2]
      slabs[2][0:2, 0:2] = slabs[1][10:12, 0:2]
      ...

==============  ==================================================================
GetItemPlan     ``__getitem__``: every selected chunk -> ``out``.
SetItemPlan     ``__setitem__``: partially selected chunks on the full / base slabs
                are copied to a new staged slab; wholly selected ones get a fresh
                slab; then the value is written into the staged chunks.
ResizePlan      ``resize()``: new chunks on the full slab; enlarged edge chunks
                moved off the base slabs and their new area filled from the full
                slab.
LoadPlan        ``load()``: every chunk on a base slab -> one new staged slab.
==============  ==================================================================

The first two are in :mod:`~xarray_vhdf5._staging.item_plans`, the last two in
:mod:`~xarray_vhdf5._staging.shape_plans`, all four re-exported by
:mod:`xarray_vhdf5._staging`; the commit's view,
:class:`~xarray_vhdf5._staging.changes.ChangesPlan`, is in
:mod:`xarray_vhdf5._staging.changes`.

This module holds what they share: helpers that turn per-axis selections into
:class:`~xarray_vhdf5._staging.transfer_plan.Transfer` objects, and the base
classes of the plans that change the array (:class:`MutatingPlan`: appends,
transfers, drops; :class:`UpdatingPlan`: plus point updates of
``slab_indices`` / ``slab_offsets``).  Nothing here touches data.

Shapes and offsets are in points (array elements), never bytes.  A slab
holding ``n`` chunks has shape ``(n * chunk_size[0], *chunk_size[1:])``
(:func:`slab_shape`); the chunk at offset ``o`` is ``slab[o:o + chunk_size[0]]``,
trimmed at the array's edges.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np

from ._map_index import IndexChunkMapper, IndexMapping
from .kernels import KernelSet, expand_slices
from .transfer_plan import Transfer, TransferPlan

__all__ = [
    "MutatingPlan",
    "UpdatingPlan",
    "axis_tables",
    "basic_groups",
    "box_mappers",
    "chunk_group_transfers",
    "chunk_transfer",
    "full_mappers",
    "group_transfers",
    "pair_groups",
    "rows_per_chunk",
    "runs",
    "slab_shape",
    "whole_tables",
]


def slab_shape(n_chunks: int, chunk_size: Sequence[int]) -> tuple[int, ...]:
    """Shape of a slab holding ``n_chunks`` chunks: ``(n * chunk_size[0], *chunk_size[1:])``.

    A 0-dimensional array has exactly one chunk; its slabs are 0-d.
    """
    if not chunk_size:
        return ()
    return (n_chunks * chunk_size[0], *chunk_size[1:])


def rows_per_chunk(chunk_size: Sequence[int]) -> np.uint64:
    """Rows a chunk takes along axis 0 of a slab (0 for 0-d arrays: one chunk a slab)."""
    return np.uint64(chunk_size[0] if chunk_size else 0)


def chunk_transfer(src: int, dst: int, *expand_args, **expand_kwargs) -> Transfer:
    """The :class:`Transfer` from ``src`` to ``dst`` of the slice pairs of some chunks.

    The other arguments are those of
    :func:`~xarray_vhdf5._staging.kernels.expand_slices`.
    """
    return Transfer(src, dst, *expand_slices(*expand_args, **expand_kwargs)[:5])


def group_transfers(
    groups: list[list[int]], arrays: Sequence[np.ndarray], src: int | None, dst: int | None
) -> list[Transfer]:
    """One Transfer per ``(slab, first, stop)`` group of slice pairs sorted by slab.

    ``arrays`` are ``src_start, dst_start, count, src_stride, dst_stride``;
    ``src`` / ``dst`` fixed (:data:`OUT`, :data:`VALUE`) or None for "the
    group's slab".
    """
    if len(groups) == 1 and groups[0][1] == 0 and groups[0][2] == len(arrays[0]):
        parts = [tuple(arrays)]  # the common case: no slicing
    else:
        parts = [tuple(x[a:b] for x in arrays) for _, a, b in groups]
    return [
        Transfer(slab if src is None else src, slab if dst is None else dst, *part)
        for (slab, _, _), part in zip(groups, parts)
    ]


def pair_groups(groups: Sequence[Sequence[int]], point_end: np.ndarray) -> list[list[int]]:
    """Chunk groups ``(slab, first, stop)`` -> the same groups over the chunks' slice pairs.

    ``point_end`` is :func:`~xarray_vhdf5._staging.kernels.expand_slices`'s
    last output (a chunk may have several slice pairs, or none: empty groups
    are dropped).
    """
    ends = [0, *point_end.tolist()]
    return [[s, ends[a], ends[b]] for s, a, b in groups if ends[b] > ends[a]]


def chunk_group_transfers(
    groups: list[list[int]],
    expanded: tuple[np.ndarray, ...],
    src: int | None,
    dst: int | None,
) -> list[Transfer]:
    """:func:`group_transfers` of one expansion of chunks sorted by slab.

    ``groups`` are ``(slab, first, stop)`` rows over the chunks.
    """
    return group_transfers(pair_groups(groups, expanded[5]), expanded[:5], src, dst)


def basic_groups(
    kern: KernelSet,
    mapping: IndexMapping,
    slab_indices: np.ndarray,
    slab_offsets: np.ndarray,
    n_slabs: int,
    src_side: int,
    dst_side: int,
) -> tuple[list[list[int]], list[np.ndarray]]:
    """Steps 2-7 of a basic index (``mapping.basic``) in one kernel call.

    Returns ``(groups, arrays)``: ``[slab, first, stop]`` rows and the slice
    pairs (``src_start, dst_start, count, src_stride, dst_stride``) of
    :func:`~xarray_vhdf5._staging.kernels.basic_slices`.
    """
    assert mapping.basic is not None and mapping.chunking is not None, "a basic index"
    starts, steps, counts, _ = mapping.basic
    shape, chunk_size = mapping.chunking
    groups, *arrays = kern.basic_slices(
        starts,
        steps,
        counts,
        chunk_size,
        shape,
        slab_indices,
        slab_offsets,
        n_slabs,
        src_side,
        dst_side,
    )
    return groups.tolist(), arrays


def axis_tables(mappers: Sequence[IndexChunkMapper]) -> tuple[tuple, tuple, tuple]:
    return (
        tuple(m.chunk_indices for m in mappers),
        tuple(m.rows for m in mappers),
        tuple(m.ptr for m in mappers),
    )


def whole_tables(mappers: Sequence[IndexChunkMapper]) -> tuple[tuple, tuple]:
    ptrs, rows = zip(*(m.whole_chunk_rows() for m in mappers)) if mappers else ((), ())
    return tuple(rows), tuple(ptrs)


def runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """``(value, first, stop)`` for each run of equal values of a sorted array."""
    if not len(values):
        return []
    cut = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cut.tolist(), len(values)]
    return [(int(values[a]), a, b) for a, b in itertools.pairwise(bounds)]


def full_mappers(shape: Sequence[int], chunk_size: Sequence[int]) -> list[IndexChunkMapper]:
    return [IndexChunkMapper.from_slice(0, 1, n, n, c) for n, c in zip(shape, chunk_size)]


def box_mappers(
    box: Sequence[tuple[int, int]], shape: Sequence[int], chunk_size: Sequence[int]
) -> list[IndexChunkMapper]:
    return [IndexChunkMapper.from_slice(a, 1, b - a, n, c) for (a, b), n, c in zip(box, shape, chunk_size)]


class MutatingPlan:
    """Common state of the plans that change the array: appends, transfers, updates, drops.

    Attributes
    ----------
    n_slabs : int
        ``len(slabs)`` before the plan.
    appends : list of tuple of int
        Shapes of the empty slabs to append, in order; the first becomes
        ``slabs[n_slabs]``.
    transfers : TransferPlan
    drops : list of int
        Slabs no chunk references after the plan, to be replaced by None.
    refcounts : numpy.ndarray of intp
        Chunks referencing each slab after the plan (``len(slabs)`` after
        the appends).
    """

    _name = "Plan"

    def __init__(self, n_slabs: int, refcounts: np.ndarray):
        self.n_slabs = n_slabs
        self.appends: list[tuple[int, ...]] = []
        self.transfers = TransferPlan()
        self.drops: list[int] = []
        self.refcounts = refcounts

    def _append(self, shape: tuple[int, ...]) -> int:
        self.appends.append(shape)
        return self.n_slabs + len(self.appends) - 1

    def _drop_unreferenced(self, candidates: Iterable[int]) -> None:
        self.drops = sorted(int(s) for s in set(candidates) if s > 0 and self.refcounts[s] == 0)

    @property
    def slab_indices(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def slab_offsets(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _header_fields(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        fields = [
            *self._header_fields(),
            f"append {len(self.appends)} empty slabs",
            self.transfers.summary(),
            f"drop {len(self.drops)} slabs",
        ]
        lines = [f"{self._name}<{', '.join(fields)}>"]
        for i, shape in enumerate(self.appends):
            lines.append(f"  slabs.append(np.empty({shape}))  # slabs[{self.n_slabs + i}]")
        lines.extend("  " + line for line in self.transfers.lines())
        lines.extend(f"  slabs[{s}] = None" for s in self.drops)
        lines.append("slab_indices:")
        lines.append(str(self.slab_indices))
        lines.append("slab_offsets:")
        lines.append(str(self.slab_offsets))
        return "\n".join(lines)


class UpdatingPlan(MutatingPlan):
    """A mutating plan that moves chunks without changing the grid: point updates."""

    def __init__(
        self,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_slabs: int,
        refcounts: np.ndarray,
    ):
        super().__init__(n_slabs, refcounts)
        self._old_indices = slab_indices
        self._old_offsets = slab_offsets
        self._upd_flat: list[np.ndarray] = []
        self._upd_slab: list[int] = []
        self._upd_offset: list[np.ndarray] = []

    def _move(self, flat: np.ndarray, slab: int, offsets: np.ndarray) -> None:
        self._upd_flat.append(flat)
        self._upd_slab.append(slab)
        self._upd_offset.append(offsets)

    @property
    def updates(self) -> list[tuple[np.ndarray, int, np.ndarray]]:
        """``(flat chunk indices, new slab index, new slab offsets)`` per destination slab."""
        return list(zip(self._upd_flat, self._upd_slab, self._upd_offset))

    def apply_updates(self, slab_indices: np.ndarray, slab_offsets: np.ndarray) -> None:
        """Write the moves into the (writeable, C-contiguous) metadata arrays, in place."""
        si = slab_indices.reshape(-1)
        so = slab_offsets.reshape(-1)
        for flat, slab, offsets in self.updates:
            si[flat] = slab
            so[flat] = offsets

    @property
    def slab_indices(self) -> np.ndarray:
        """``slab_indices`` after the plan (a new array)."""
        si, so = self._old_indices.copy(), self._old_offsets.copy()
        self.apply_updates(si, so)
        return si

    @property
    def slab_offsets(self) -> np.ndarray:
        """``slab_offsets`` after the plan (a new array)."""
        si, so = self._old_indices.copy(), self._old_offsets.copy()
        self.apply_updates(si, so)
        return so
