"""The plans of :class:`~xarray_vhdf5.staging.array.StagedChangesArray`.

``staged_changes.rst``, "Plans" and "General plans algorithm".

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

The commit's view, :class:`~xarray_vhdf5.staging.changes.ChangesPlan`, lives in
:mod:`xarray_vhdf5.staging.changes`.

Shapes and offsets are in points (array elements), never bytes.  A slab
holding ``n`` chunks has shape ``(n * chunk_size[0], *chunk_size[1:])``
(:func:`slab_shape`); the chunk at offset ``o`` is ``slab[o:o + chunk_size[0]]``,
trimmed at the array's edges.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .index_mapper import IndexChunkMapper, IndexMapping
from .kernels import SIDE_SLAB, SIDE_VALUE, Gathered, active, expand_slices, gather_chunks
from .transfer_plan import OUT, VALUE, Transfer, TransferPlan

__all__ = [
    "GetItemPlan",
    "LoadPlan",
    "ResizePlan",
    "SetItemPlan",
    "slab_shape",
]


def slab_shape(n_chunks: int, chunk_size: Sequence[int]) -> tuple[int, ...]:
    """Shape of a slab holding ``n_chunks`` chunks: ``(n * chunk_size[0], *chunk_size[1:])``.

    A 0-dimensional array has exactly one chunk; its slabs are 0-d.
    """
    if not chunk_size:
        return ()
    return (n_chunks * chunk_size[0], *chunk_size[1:])


def _rows_per_chunk(chunk_size: Sequence[int]) -> np.uint64:
    """Rows a chunk takes along axis 0 of a slab (0 for 0-d arrays: one chunk a slab)."""
    return np.uint64(chunk_size[0] if chunk_size else 0)


def _transfer(
    src: int,
    dst: int,
    pos: np.ndarray,
    rows: tuple[np.ndarray, ...],
    row_ptrs: tuple[np.ndarray, ...],
    src_side: int,
    dst_side: int,
    src_offset: np.ndarray | None = None,
    dst_offset: np.ndarray | None = None,
) -> Transfer:
    return Transfer(
        src,
        dst,
        *expand_slices(pos, rows, row_ptrs, src_side, dst_side, src_offset, dst_offset)[:5],
    )


def _split(
    groups: list[list[int]], arrays: list[np.ndarray], src: int | None, dst: int | None
) -> list[Transfer]:
    """One Transfer per ``(slab, first, stop)`` group of slice pairs sorted by slab."""
    if not groups:
        return []
    if len(groups) == 1 and groups[0][1] == 0 and groups[0][2] == len(arrays[0]):
        slab = groups[0][0]
        return [Transfer(slab if src is None else src, slab if dst is None else dst, *arrays)]
    ss, ds, cnt, sst, dst_ = arrays
    return [
        Transfer(
            slab if src is None else src,
            slab if dst is None else dst,
            ss[a:b],
            ds[a:b],
            cnt[a:b],
            sst[a:b],
            dst_[a:b],
        )
        for slab, a, b in groups
    ]


def _per_group(
    groups: list[list[int]],
    expanded: tuple[np.ndarray, ...],
    src: int | None,
    dst: int | None,
) -> list[Transfer]:
    """Split one expansion of chunks sorted by slab into one Transfer per slab.

    ``groups`` are ``(slab, first, stop)`` rows over the chunks; ``src`` /
    ``dst`` fixed (:data:`OUT`, :data:`VALUE`) or None for "the group's slab".
    """
    ss, ds, cnt, sst, dst_ = expanded[:5]
    ends = expanded[5].tolist()
    out = []
    for slab, a, b in groups:
        lo = ends[a - 1] if a else 0
        hi = ends[b - 1]
        out.append(
            Transfer(
                slab if src is None else src,
                slab if dst is None else dst,
                ss[lo:hi],
                ds[lo:hi],
                cnt[lo:hi],
                sst[lo:hi],
                dst_[lo:hi],
            )
        )
    return out


def _tables(mappers: Sequence[IndexChunkMapper]) -> tuple[tuple, tuple, tuple]:
    return (
        tuple(m.chunk_indices for m in mappers),
        tuple(m.rows for m in mappers),
        tuple(m.ptr for m in mappers),
    )


def _whole_tables(mappers: Sequence[IndexChunkMapper]) -> tuple[tuple, tuple]:
    ptrs, rows = zip(*(m.whole_chunk_rows() for m in mappers)) if mappers else ((), ())
    return tuple(rows), tuple(ptrs)


def _runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """``(value, first, stop)`` for each run of equal values of a sorted array."""
    if not len(values):
        return []
    cut = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cut.tolist(), len(values)]
    return [(int(values[a]), a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def _full_mappers(shape: Sequence[int], chunk_size: Sequence[int]) -> list[IndexChunkMapper]:
    return [
        IndexChunkMapper.from_slice(0, 1, n, n, c) for n, c in zip(shape, chunk_size)
    ]


def _box_mappers(
    box: Sequence[tuple[int, int]], shape: Sequence[int], chunk_size: Sequence[int]
) -> list[IndexChunkMapper]:
    return [
        IndexChunkMapper.from_slice(a, 1, b - a, n, c)
        for (a, b), n, c in zip(box, shape, chunk_size)
    ]


class _MutatingPlan:
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

    def _drop_unreferenced(self, candidates: Sequence[int]) -> None:
        self.drops = sorted(
            int(s) for s in set(candidates) if s > 0 and self.refcounts[s] == 0
        )

    @property
    def slab_indices(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    @property
    def slab_offsets(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _header_fields(self) -> list[str]:
        return []

    def __repr__(self) -> str:
        fields = self._header_fields() + [
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


class _UpdatingPlan(_MutatingPlan):
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


# ---------------------------------------------------------------------------
# GetItemPlan
# ---------------------------------------------------------------------------


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
            starts, steps, counts, _ = mapping.basic
            shape, chunk_size = mapping.chunking
            groups, *arrays = k.basic_slices(
                starts, steps, counts, chunk_size, shape, slab_indices, slab_offsets, n_slabs,
                SIDE_SLAB, SIDE_VALUE,
            )
            self.groups = groups.tolist()
            self.arrays = arrays
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
        # Chunk groups -> slice-pair groups (a chunk may have several pairs).
        ends = [0, *expanded[5].tolist()]
        self.groups = [[s, ends[a], ends[b]] for s, a, b in groups.tolist() if ends[b] > ends[a]]
        self.arrays = tuple(expanded[:5])

    @property
    def transfers(self) -> TransferPlan:
        """The transfers, from each slab to :data:`OUT` (one per slab, ascending)."""
        if self._transfers is None:
            transfers = _split(self.groups, list(self.arrays), None, OUT)
            self._transfers = TransferPlan(transfers, checked=True)
        return self._transfers

    def __repr__(self) -> str:
        header = (
            f"GetItemPlan<output_shape={self.output_shape}, "
            f"output_view={self.mapping.format_view('getitem')}, {self.transfers.summary()}>"
        )
        return "\n".join([header] + ["  " + line for line in self.transfers.lines()])


# ---------------------------------------------------------------------------
# SetItemPlan
# ---------------------------------------------------------------------------


class SetItemPlan(_UpdatingPlan):
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
            starts, steps, counts, _ = mapping.basic
            shape, _ = mapping.chunking
            groups, *arrays = kern.basic_slices(
                starts, steps, counts, chunk_size, shape, slab_indices, slab_offsets, n_slabs,
                SIDE_VALUE, SIDE_SLAB,
            )
            groups = groups.tolist()
            if not groups or groups[0][0] >= first_staged:
                # Every selected chunk is already staged: write the value, nothing moves.
                self.transfers = TransferPlan(_split(groups, arrays, VALUE, None), checked=True)
                return
        mappers = mapping.mappers
        chunk_indices, rows, ptrs = _tables(mappers)
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
                new_off = np.arange(partial.size, dtype=np.uint64) * _rows_per_chunk(chunk_size)
                w_rows, w_ptrs = _whole_tables(mappers)
                src_slabs = g.slab[partial]
                for s, a, b in _runs(src_slabs):
                    self.transfers.append(
                        _transfer(
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
                new_off = np.arange(wholly.size, dtype=np.uint64) * _rows_per_chunk(chunk_size)
                self.transfers.append(
                    _transfer(
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
            for t in _per_group(groups, expanded, VALUE, None):
                self.transfers.append(t)
        if partial_transfer is not None:
            dest, pos, new_off = partial_transfer
            self.transfers.append(
                _transfer(VALUE, dest, pos, rows, ptrs, SIDE_VALUE, SIDE_SLAB, dst_offset=new_off)
            )

    def _header_fields(self) -> list[str]:
        return [
            f"value_shape={self.value_shape}",
            f"value_view={self.mapping.format_view('setitem')}",
        ]


# ---------------------------------------------------------------------------
# LoadPlan
# ---------------------------------------------------------------------------


class LoadPlan(_UpdatingPlan):
    """``load()``: move every chunk that lies on a base slab to one new staged slab.

    Afterwards every chunk is on the full slab or a staged slab, and every
    base slab is dropped (none is referenced any more).

    Parameters
    ----------
    shape, chunk_size : tuple of int
    slab_indices, slab_offsets : numpy.ndarray
    n_slabs, n_base_slabs : int
    refcounts : numpy.ndarray of intp
    """

    _name = "LoadPlan"

    def __init__(
        self,
        shape: tuple[int, ...],
        chunk_size: tuple[int, ...],
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_slabs: int,
        n_base_slabs: int,
        refcounts: np.ndarray,
    ):
        super().__init__(slab_indices, slab_offsets, n_slabs, refcounts)
        first_staged = 1 + n_base_slabs
        if not refcounts[1:first_staged].any():
            return  # nothing on the base slabs
        mappers = _full_mappers(shape, chunk_size)
        chunk_indices, rows, ptrs = _tables(mappers)
        g = gather_chunks(slab_indices, slab_offsets, chunk_indices, n_slabs)
        lo = int(np.searchsorted(g.slab, 1))
        hi = int(np.searchsorted(g.slab, first_staged))
        n = hi - lo
        dest = self._append(slab_shape(n, chunk_size))
        new_off = np.arange(n, dtype=np.uint64) * _rows_per_chunk(chunk_size)
        for s, a, b in g.groups.tolist():
            if 1 <= s < first_staged:
                self.transfers.append(
                    _transfer(
                        s, dest, g.pos[a:b], rows, ptrs, SIDE_SLAB, SIDE_SLAB,
                        src_offset=g.offset[a:b], dst_offset=new_off[a - lo : b - lo],
                    )
                )
        self._move(g.flat[lo:hi], dest, new_off)
        self.refcounts = np.concatenate([refcounts, [n]]).astype(np.intp)
        self.refcounts[1:first_staged] = 0
        self._drop_unreferenced(np.flatnonzero(refcounts[1:first_staged]) + 1)


# ---------------------------------------------------------------------------
# ResizePlan
# ---------------------------------------------------------------------------


class ResizePlan(_MutatingPlan):
    """``resize()``: change the shape; fill the new points with the fill value.

    - Chunks beyond the new shape disappear; slabs left unreferenced are
      dropped.  Shrinking never touches data: whatever lies beyond the new
      edge of an edge chunk is from now on uninitialised.
    - New chunks lie on the full slab (``slab_indices`` and ``slab_offsets`` 0).
    - Edge chunks enlarged along an axis (old size not a multiple of the
      chunk size) that do not lie on the full slab must have their new area
      filled: those on a base slab are first copied (their valid area) to a
      new staged slab, then the full slab is transferred into the new area.
      The area is split into disjoint boxes, one per enlarged axis ``a``:
      ``x_a`` in ``[old_a, new_a)``, ``x_b < min(old_b, new_b)`` for ``b < a``,
      ``x_b < new_b`` for ``b > a``.

    Parameters
    ----------
    old_shape, new_shape, chunk_size : tuple of int
    slab_indices, slab_offsets : numpy.ndarray
        Metadata for ``old_shape``.
    n_slabs, n_base_slabs : int
    refcounts : numpy.ndarray of intp

    Attributes
    ----------
    new_shape : tuple of int
    slab_indices, slab_offsets : numpy.ndarray
        The new metadata (new arrays, shape ``ceil(new_shape / chunk_size)``).
    """

    _name = "ResizePlan"

    def __init__(
        self,
        old_shape: tuple[int, ...],
        new_shape: tuple[int, ...],
        chunk_size: tuple[int, ...],
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_slabs: int,
        n_base_slabs: int,
        refcounts: np.ndarray,
    ):
        super().__init__(n_slabs, refcounts)
        self.old_shape = old_shape
        self.new_shape = new_shape
        ndim = len(new_shape)
        new_grid = tuple(-(-n // c) for n, c in zip(new_shape, chunk_size))
        si = np.zeros(new_grid, dtype=np.intp)
        so = np.zeros(new_grid, dtype=np.uint64)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(slab_indices.shape, new_grid))
        si[overlap] = slab_indices[overlap]
        so[overlap] = slab_offsets[overlap]
        self._slab_indices = si
        self._slab_offsets = so
        valid = tuple(min(a, b) for a, b in zip(old_shape, new_shape))

        boxes = []
        for a in range(ndim):
            cs = chunk_size[a]
            if new_shape[a] > old_shape[a] and old_shape[a] % cs:
                edge_stop = min(new_shape[a], (old_shape[a] // cs + 1) * cs)
                box = [(0, valid[b]) for b in range(a)]
                box.append((old_shape[a], edge_stop))
                box.extend((0, new_shape[b]) for b in range(a + 1, ndim))
                if all(hi > lo for lo, hi in box):
                    boxes.append(_box_mappers(box, new_shape, chunk_size))

        first_staged = 1 + n_base_slabs
        if boxes:
            # Chunks to fill that lie on a base slab: copy their valid area first.
            on_base = []
            for mappers in boxes:
                g = gather_chunks(si, so, _tables(mappers)[0], n_slabs)
                lo = int(np.searchsorted(g.slab, 1))
                hi = int(np.searchsorted(g.slab, first_staged))
                on_base.append((g.flat[lo:hi], g.slab[lo:hi], g.offset[lo:hi]))
            flat = np.concatenate([f for f, _, _ in on_base])
            if flat.size:
                flat, first = np.unique(flat, return_index=True)
                src = np.concatenate([s for _, s, _ in on_base])[first]
                src_off = np.concatenate([o for _, _, o in on_base])[first]
                order = np.argsort(src, kind="stable")
                flat, src, src_off = flat[order], src[order], src_off[order]
                dest = self._append(slab_shape(flat.size, chunk_size))
                new_off = np.arange(flat.size, dtype=np.uint64) * _rows_per_chunk(chunk_size)
                valid_mappers = _box_mappers([(0, v) for v in valid], new_shape, chunk_size)
                _, rows, ptrs = _tables(valid_mappers)
                # The valid box starts at chunk 0 on every axis: positions are chunk indices.
                pos = np.ascontiguousarray(
                    np.stack(np.unravel_index(flat, new_grid), axis=1), dtype=np.intp
                ).reshape(flat.size, ndim)
                for s, a, b in _runs(src):
                    self.transfers.append(
                        _transfer(
                            s, dest, pos[a:b], rows, ptrs, SIDE_SLAB, SIDE_SLAB,
                            src_offset=src_off[a:b], dst_offset=new_off[a:b],
                        )
                    )
                si.reshape(-1)[flat] = dest
                so.reshape(-1)[flat] = new_off
            # Fill the new area of every edge chunk that is not on the full slab.
            n_total = n_slabs + len(self.appends)
            for mappers in boxes:
                chunk_indices, rows, ptrs = _tables(mappers)
                g = gather_chunks(si, so, chunk_indices, n_total)
                for s, a, b in g.groups.tolist():
                    if s == 0:
                        continue
                    zeros = np.zeros(b - a, dtype=np.uint64)
                    self.transfers.append(
                        _transfer(
                            0, s, g.pos[a:b], rows, ptrs, SIDE_SLAB, SIDE_SLAB,
                            src_offset=zeros, dst_offset=g.offset[a:b],
                        )
                    )
        n_total = n_slabs + len(self.appends)
        self.refcounts = np.bincount(si.reshape(-1), minlength=n_total).astype(np.intp)
        self._drop_unreferenced(np.flatnonzero(refcounts).tolist())

    @property
    def slab_indices(self) -> np.ndarray:
        return self._slab_indices

    @property
    def slab_offsets(self) -> np.ndarray:
        return self._slab_offsets

    def _header_fields(self) -> list[str]:
        return [f"old_shape={self.old_shape}", f"new_shape={self.new_shape}"]
