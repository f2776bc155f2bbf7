"""The plans of ``__getitem__`` and ``__setitem__`` (versioned-hdf5's ``staged_changes.rst``, "Plans").

:class:`GetItemPlan` transfers every selected chunk into a new ``out``
array; :class:`SetItemPlan` stages the selected chunks (copying partially
selected ones off the full / base slabs) and writes the value into them.
Both start from an :class:`~xarray_vhdf5._staging._normalised_index.IndexMapping`
and never touch data.
"""

from __future__ import annotations

import numpy as np

from ._map_index import IndexMapping
from ._plan_base import (
    UpdatingPlan,
    axis_tables,
    basic_groups,
    chunk_group_transfers,
    chunk_transfer,
    group_transfers,
    pair_groups,
    rows_per_chunk,
    runs,
    slab_shape,
    whole_tables,
)
from .kernels import SIDE_SLAB, SIDE_VALUE, Gathered, active
from .transfer_plan import OUT, VALUE, Transfer, TransferPlan

__all__ = ["SMALL_PLAN_CHUNKS", "GetItemPlan", "SetItemPlan"]

#: Chunks not yet staged up to which ``SetItemPlan`` plans a basic index in Python
#: integers (:meth:`SetItemPlan._plan_small`); beyond, through numpy over per-axis mappers.
SMALL_PLAN_CHUNKS = 16


class GetItemPlan:
    """``__getitem__``: transfer every selected chunk into a new ``out`` array.

    No masking, no distinction between full, base and staged slabs; never
    changes the array's state and caches nothing (versioned-hdf5's ``staged_changes.rst``,
    "``__getitem__`` algorithm").  For a basic index (``mapping.basic``) steps
    2-7 are one call of :func:`~xarray_vhdf5._staging.kernels.basic_slices`;
    otherwise :func:`~xarray_vhdf5._staging.kernels.gather_chunks` and
    :func:`~xarray_vhdf5._staging.kernels.expand_slices` over the mappers.

    Parameters
    ----------
    mapping : IndexMapping
        The normalised index (:func:`~xarray_vhdf5._staging._map_index.map_index`).
    slab_indices : numpy.ndarray of intp
        C-contiguous chunk grid.
    slab_offsets : numpy.ndarray of uint64
        Same shape, in points along axis 0.
    n_slabs : int
        ``len(slabs)``.

    Attributes
    ----------
    mapping : IndexMapping
    output_shape : tuple of int
        Shape of ``out``, the normalised result (``mapping.norm_shape``);
        ``mapping.to_result(out)`` is numpy's result.
    groups : list of [int, int, int]
        ``[slab, first, stop]``: slice pairs ``first:stop`` of :attr:`arrays`
        read from ``slabs[slab]``; ascending slabs.
    arrays : tuple of numpy.ndarray
        ``src_start, dst_start, count, src_stride, dst_stride`` of every
        slice pair, uint64 ``(nslices, ndim)``, sorted by slab.
    transfers : TransferPlan
        The same, one :class:`Transfer` per slab (built on first access).
    """

    __slots__ = ("_transfers", "arrays", "groups", "mapping", "output_shape")

    def __init__(
        self,
        mapping: IndexMapping,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_slabs: int,
    ):
        self.mapping = mapping
        self.output_shape = mapping.norm_shape
        self._transfers: TransferPlan | None = None
        k = active()
        if mapping.basic is not None:
            self.groups, self.arrays = basic_groups(
                k, mapping, slab_indices, slab_offsets, n_slabs, SIDE_SLAB, SIDE_VALUE
            )
            return
        mappers = mapping.mappers
        pos, _, _, offset, groups = k.gather_chunks(
            slab_indices, slab_offsets, tuple([m.chunk_indices for m in mappers]), n_slabs
        )
        expanded = k.expand_slices(
            pos,
            tuple([m.rows for m in mappers]),
            tuple([m.ptr for m in mappers]),
            SIDE_SLAB,
            SIDE_VALUE,
            offset,
        )
        self.groups = pair_groups(groups.tolist(), expanded[5])
        self.arrays = list(expanded[:5])

    @property
    def transfers(self) -> TransferPlan:
        """The transfers, from each slab to :data:`OUT` (one per slab, ascending)."""
        if self._transfers is None:
            transfers = group_transfers(self.groups, self.arrays, None, OUT)
            self._transfers = TransferPlan(transfers, checked=True)
        return self._transfers

    def __repr__(self) -> str:
        header = (
            f"GetItemPlan<output_shape={self.output_shape}, "
            f"output_view={self.mapping.format_view('getitem')}, {self.transfers.summary()}>"
        )
        return "\n".join([header] + ["  " + line for line in self.transfers.lines()])


class SetItemPlan(UpdatingPlan):
    """``__setitem__``: stage the selected chunks, then write the value into them.

    The two passes of versioned-hdf5's ``staged_changes.rst`` ("``__setitem__`` algorithm"):

    1. chunks on the full or a base slab that the index covers *partially*
       are copied, whole, to a new staged slab; chunks it covers *wholly* get
       a new, empty staged slab (their old content is never read);
    2. the value is written into every selected chunk, now all staged.

    Transfers, in order: full / base slabs -> new partial-chunk slab; value ->
    new whole-chunk slab; value -> the pre-existing staged slabs (ascending);
    value -> the new partial-chunk slab.

    Hot path: for a basic index (``mapping.basic``) whose chunks are all
    staged already, steps 2-7 are one call of
    :func:`~xarray_vhdf5._staging.kernels.basic_slices` and nothing moves.

    Parameters
    ----------
    mapping : IndexMapping
    slab_indices, slab_offsets : numpy.ndarray
        The current chunk grid (intp, uint64), C-contiguous.
    chunk_size : tuple of int
    n_slabs, n_base_slabs : int
    refcounts : numpy.ndarray of intp
        Chunks referencing each slab (``len(slabs)``).

    Attributes
    ----------
    value_shape : tuple of int
        Shape of the normalised value the transfers read (``mapping.norm_shape``).
    """

    _name = "SetItemPlan"

    def __init__(
        self,
        mapping: IndexMapping,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        chunk_size: tuple[int, ...],
        n_slabs: int,
        n_base_slabs: int,
        refcounts: np.ndarray,
    ):
        super().__init__(slab_indices, slab_offsets, n_slabs, refcounts)
        self.mapping = mapping
        self.value_shape = mapping.norm_shape
        kern = active()
        first_staged = 1 + n_base_slabs
        if mapping.basic is not None:
            groups, arrays = basic_groups(kern, mapping, slab_indices, slab_offsets, n_slabs, SIDE_VALUE, SIDE_SLAB)
            if not groups or groups[0][0] >= first_staged:
                # Every selected chunk is already staged: write the value, nothing moves.
                transfers = group_transfers(groups, arrays, VALUE, None)
                self.transfers = TransferPlan(transfers, checked=True)
                return
            k = 0  # slice pairs (one per chunk) on the full or a base slab come first
            for slab, _, stop in groups:
                if slab >= first_staged:
                    break
                k = stop
            if slab_indices.ndim and k <= SMALL_PLAN_CHUNKS:
                self._plan_small(mapping, groups, arrays, k, slab_indices, slab_offsets, chunk_size, first_staged)
                return
        mappers = mapping.mappers
        chunk_indices, rows, ptrs = axis_tables(mappers)
        g = Gathered(*kern.gather_chunks(slab_indices, slab_offsets, chunk_indices, n_slabs))
        # Sorted by slab: the chunks not yet staged come first.
        k = 0
        if len(g.slab) and g.slab[0] < first_staged:
            k = int(np.searchsorted(g.slab, first_staged))
        partial_transfer = None
        if k:
            whole = np.ones(k, dtype=bool)
            for a, m in enumerate(mappers):
                whole &= m.whole[g.pos[:k, a]]
            partial = np.flatnonzero(~whole)
            wholly = np.flatnonzero(whole)
            moved = np.bincount(g.slab[:k], minlength=first_staged)
            self.refcounts = refcounts.copy()
            self.refcounts[:first_staged] -= moved[:first_staged]
            added = []
            if partial.size:
                dest = self._append(slab_shape(partial.size, chunk_size))
                pos = np.ascontiguousarray(g.pos[partial])
                new_off = np.arange(partial.size, dtype=np.uint64) * rows_per_chunk(chunk_size)
                w_rows, w_ptrs = whole_tables(mappers)
                src_slabs = g.slab[partial]
                for s, a, b in runs(src_slabs):
                    self.transfers.append(
                        chunk_transfer(
                            s,
                            dest,
                            pos[a:b],
                            w_rows,
                            w_ptrs,
                            SIDE_SLAB,
                            SIDE_SLAB,
                            src_offset=g.offset[partial[a:b]],
                            dst_offset=new_off[a:b],
                        )
                    )
                self._move(g.flat[partial], dest, new_off)
                added.append(partial.size)
                partial_transfer = (dest, pos, new_off)
            if wholly.size:
                dest = self._append(slab_shape(wholly.size, chunk_size))
                pos = np.ascontiguousarray(g.pos[wholly])
                new_off = np.arange(wholly.size, dtype=np.uint64) * rows_per_chunk(chunk_size)
                self.transfers.append(
                    chunk_transfer(VALUE, dest, pos, rows, ptrs, SIDE_VALUE, SIDE_SLAB, dst_offset=new_off)
                )
                self._move(g.flat[wholly], dest, new_off)
                added.append(wholly.size)
            self.refcounts = np.concatenate([self.refcounts, np.array(added, dtype=np.intp)])
            self._drop_unreferenced(np.flatnonzero(moved).tolist())
        if k < len(g.slab):  # chunks already on staged slabs: one expansion for all
            groups = [[s, a - k, b - k] for s, a, b in g.groups.tolist() if s >= first_staged]
            expanded = kern.expand_slices(g.pos[k:], rows, ptrs, SIDE_VALUE, SIDE_SLAB, None, g.offset[k:])
            for t in chunk_group_transfers(groups, expanded, VALUE, None):
                self.transfers.append(t)
        if partial_transfer is not None:
            dest, pos, new_off = partial_transfer
            self.transfers.append(
                chunk_transfer(VALUE, dest, pos, rows, ptrs, SIDE_VALUE, SIDE_SLAB, dst_offset=new_off)
            )

    def _plan_small(
        self,
        mapping: IndexMapping,
        groups: list[list[int]],
        arrays: list[np.ndarray],
        k: int,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        chunk_size: tuple[int, ...],
        first_staged: int,
    ) -> None:
        """The plan of a basic index touching a few chunks, ``k`` of them not staged yet.

        The same appends, transfers, moves and drops as the general path
        (``tests/test_staging_plans.py`` compares them), from the slice pairs
        :func:`basic_groups` already made (one per selected chunk, sorted by
        slab) instead of per-axis mappers, in Python integers: on arrays of a
        few elements every numpy call costs more than the work (a one-point
        edit plans in half the time here: ``docs/benchmarks.md``). A chunk's
        place in the grid follows from its first selected point,
        ``start + value_start * step`` on each axis.
        """
        src_start, dst_start, count, value_stride, slab_stride = arrays
        assert mapping.basic is not None and mapping.chunking is not None, "a basic index"
        starts, steps = mapping.basic[0], mapping.basic[1]
        shape, _ = mapping.chunking
        grid = slab_indices.shape
        si, so = slab_indices.reshape(-1), slab_offsets.reshape(-1)
        step0 = chunk_size[0]
        counts = count[:k].tolist()
        flats, old_slab, old_offset, extents = [], [], [], []
        partial: list[int] = []
        wholly: list[int] = []
        for r, value_start in enumerate(src_start[:k].tolist()):
            flat = 0
            extent = []
            for v, a, st, c, n, g in zip(value_start, starts, steps, chunk_size, shape, grid):
                p = (a + v * st) // c
                flat = flat * g + p
                extent.append(min(c, n - p * c))
            flats.append(flat)
            old_slab.append(int(si[flat]))
            old_offset.append(int(so[flat]))
            extents.append(extent)
            (wholly if counts[r] == extent else partial).append(r)
        refcounts = self.refcounts.copy()
        for slab in old_slab:
            refcounts[slab] -= 1
        added = []
        ndim = len(chunk_size)

        def moved_to(rows: list[int], dest: int) -> np.ndarray:
            # The value's slice pairs of ``rows``, their slab side moved onto the new slab.
            dst = dst_start[rows]
            new_offset = np.arange(0, len(rows) * step0, step0, dtype=np.uint64)
            dst[:, 0] += new_offset - np.array([old_offset[r] for r in rows], dtype=np.uint64)
            self._move(np.array([flats[r] for r in rows], dtype=np.intp), dest, new_offset)
            added.append(len(rows))
            return dst

        partial_transfer = None
        if partial:  # whole chunks off their slabs first, the value into them last
            dest = self._append(slab_shape(len(partial), chunk_size))
            dst = moved_to(partial, dest)
            rest = [0] * (ndim - 1)
            a = 0
            while a < len(partial):
                b = a + 1
                while b < len(partial) and old_slab[partial[b]] == old_slab[partial[a]]:
                    b += 1
                rows = partial[a:b]
                n = b - a
                ones = np.ones((n, ndim), dtype=np.uint64)
                self.transfers.append(
                    Transfer(
                        old_slab[rows[0]],
                        dest,
                        np.array([[old_offset[r], *rest] for r in rows], dtype=np.uint64),
                        np.array([[i * step0, *rest] for i in range(a, b)], dtype=np.uint64),
                        np.array([extents[r] for r in rows], dtype=np.uint64),
                        ones,
                        ones.copy(),
                    )
                )
                a = b
            partial_transfer = Transfer(
                VALUE, dest, src_start[partial], dst, count[partial], value_stride[partial], slab_stride[partial]
            )
        if wholly:
            dest = self._append(slab_shape(len(wholly), chunk_size))
            dst = moved_to(wholly, dest)
            self.transfers.append(
                Transfer(VALUE, dest, src_start[wholly], dst, count[wholly], value_stride[wholly], slab_stride[wholly])
            )
        self.refcounts = np.concatenate([refcounts, np.array(added, dtype=np.intp)])
        self._drop_unreferenced(set(old_slab))
        staged = [[s, a, b] for s, a, b in groups if s >= first_staged]
        for t in group_transfers(staged, arrays, VALUE, None):
            self.transfers.append(t)
        if partial_transfer is not None:
            self.transfers.append(partial_transfer)

    def _header_fields(self) -> list[str]:
        return [
            f"value_shape={self.value_shape}",
            f"value_view={self.mapping.format_view('setitem')}",
        ]
