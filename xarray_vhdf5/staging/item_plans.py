"""The plans of ``__getitem__`` and ``__setitem__`` (``staged_changes.rst``, "Plans").

:class:`GetItemPlan` transfers every selected chunk into a new ``out``
array; :class:`SetItemPlan` stages the selected chunks (copying partially
selected ones off the full / base slabs) and writes the value into them.
Both start from an :class:`~xarray_vhdf5.staging.index_mapper.IndexMapping`
and never touch data.
"""

from __future__ import annotations

import numpy as np

from .index_mapper import IndexMapping
from .kernels import SIDE_SLAB, SIDE_VALUE, Gathered, active
from .plan_common import (
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
from .transfer_plan import OUT, VALUE, TransferPlan

__all__ = ["GetItemPlan", "SetItemPlan"]


class GetItemPlan:
    """``__getitem__``: transfer every selected chunk into a new ``out`` array.

    No masking, no distinction between full, base and staged slabs; never
    changes the array's state and caches nothing (``staged_changes.rst``,
    "``__getitem__`` algorithm").  For a basic index (``mapping.basic``) steps
    2-7 are one call of :func:`~xarray_vhdf5.staging.kernels.basic_slices`;
    otherwise :func:`~xarray_vhdf5.staging.kernels.gather_chunks` and
    :func:`~xarray_vhdf5.staging.kernels.expand_slices` over the mappers.

    Parameters
    ----------
    mapping : IndexMapping
        The normalised index (:func:`~xarray_vhdf5.staging.index_mapper.map_index`).
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

    __slots__ = ("mapping", "output_shape", "groups", "arrays", "_transfers")

    def __init__(
        self,
        mapping: IndexMapping,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_slabs: int,
    ):
        self.mapping = mapping
        self.output_shape = mapping.norm_shape
        self._transfers = None
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
        self.arrays = tuple(expanded[:5])

    @property
    def transfers(self) -> TransferPlan:
        """The transfers, from each slab to :data:`OUT` (one per slab, ascending)."""
        if self._transfers is None:
            transfers = group_transfers(self.groups, list(self.arrays), None, OUT)
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

    The two passes of ``staged_changes.rst`` ("``__setitem__`` algorithm"):

    1. chunks on the full or a base slab that the index covers *partially*
       are copied, whole, to a new staged slab; chunks it covers *wholly* get
       a new, empty staged slab (their old content is never read);
    2. the value is written into every selected chunk, now all staged.

    Transfers, in order: full / base slabs -> new partial-chunk slab; value ->
    new whole-chunk slab; value -> the pre-existing staged slabs (ascending);
    value -> the new partial-chunk slab.

    Hot path: for a basic index (``mapping.basic``) whose chunks are all
    staged already, steps 2-7 are one call of
    :func:`~xarray_vhdf5.staging.kernels.basic_slices` and nothing moves.

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
            groups, arrays = basic_groups(
                kern, mapping, slab_indices, slab_offsets, n_slabs, SIDE_VALUE, SIDE_SLAB
            )
            if not groups or groups[0][0] >= first_staged:
                # Every selected chunk is already staged: write the value, nothing moves.
                transfers = group_transfers(groups, arrays, VALUE, None)
                self.transfers = TransferPlan(transfers, checked=True)
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
                            s, dest, pos[a:b], w_rows, w_ptrs, SIDE_SLAB, SIDE_SLAB,
                            src_offset=g.offset[partial[a:b]], dst_offset=new_off[a:b],
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
                    chunk_transfer(
                        VALUE, dest, pos, rows, ptrs, SIDE_VALUE, SIDE_SLAB, dst_offset=new_off
                    )
                )
                self._move(g.flat[wholly], dest, new_off)
                added.append(wholly.size)
            self.refcounts = np.concatenate([self.refcounts, np.array(added, dtype=np.intp)])
            self._drop_unreferenced(np.flatnonzero(moved).tolist())
        if k < len(g.slab):  # chunks already on staged slabs: one expansion for all
            groups = [[s, a - k, b - k] for s, a, b in g.groups.tolist() if s >= first_staged]
            expanded = kern.expand_slices(
                g.pos[k:], rows, ptrs, SIDE_VALUE, SIDE_SLAB, None, g.offset[k:]
            )
            for t in chunk_group_transfers(groups, expanded, VALUE, None):
                self.transfers.append(t)
        if partial_transfer is not None:
            dest, pos, new_off = partial_transfer
            self.transfers.append(
                chunk_transfer(
                    VALUE, dest, pos, rows, ptrs, SIDE_VALUE, SIDE_SLAB, dst_offset=new_off
                )
            )

    def _header_fields(self) -> list[str]:
        return [
            f"value_shape={self.value_shape}",
            f"value_view={self.mapping.format_view('setitem')}",
        ]
