"""The plans of ``load()`` and ``resize()`` (versioned-hdf5's ``staged_changes.rst``, "Plans").

:class:`LoadPlan` moves every chunk still on a base slab to one new staged
slab; :class:`ResizePlan` changes the chunk grid, filling the new area of
enlarged edge chunks from the full slab.  Neither touches data.
"""

from __future__ import annotations

import numpy as np

from .._backend.chunks import chunk_grid_shape
from ._plan_base import (
    MutatingPlan,
    UpdatingPlan,
    axis_tables,
    box_mappers,
    chunk_transfer,
    full_mappers,
    rows_per_chunk,
    runs,
    slab_shape,
)
from .kernels import SIDE_SLAB, gather_chunks

__all__ = ["LoadPlan", "ResizePlan"]


class LoadPlan(UpdatingPlan):
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
        mappers = full_mappers(shape, chunk_size)
        chunk_indices, rows, ptrs = axis_tables(mappers)
        g = gather_chunks(slab_indices, slab_offsets, chunk_indices, n_slabs)
        lo = int(np.searchsorted(g.slab, 1))
        hi = int(np.searchsorted(g.slab, first_staged))
        n = hi - lo
        dest = self._append(slab_shape(n, chunk_size))
        new_off = np.arange(n, dtype=np.uint64) * rows_per_chunk(chunk_size)
        for s, a, b in g.groups.tolist():
            if 1 <= s < first_staged:
                self.transfers.append(
                    chunk_transfer(
                        s,
                        dest,
                        g.pos[a:b],
                        rows,
                        ptrs,
                        SIDE_SLAB,
                        SIDE_SLAB,
                        src_offset=g.offset[a:b],
                        dst_offset=new_off[a - lo : b - lo],
                    )
                )
        self._move(g.flat[lo:hi], dest, new_off)
        self.refcounts = np.concatenate([refcounts, [n]]).astype(np.intp)
        self.refcounts[1:first_staged] = 0
        self._drop_unreferenced(np.flatnonzero(refcounts[1:first_staged]) + 1)


class ResizePlan(MutatingPlan):
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
        new_grid = chunk_grid_shape(new_shape, chunk_size)
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
                    boxes.append(box_mappers(box, new_shape, chunk_size))

        first_staged = 1 + n_base_slabs
        if boxes:
            # Chunks to fill that lie on a base slab: copy their valid area first.
            on_base = []
            for mappers in boxes:
                g = gather_chunks(si, so, axis_tables(mappers)[0], n_slabs)
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
                new_off = np.arange(flat.size, dtype=np.uint64) * rows_per_chunk(chunk_size)
                valid_mappers = box_mappers([(0, v) for v in valid], new_shape, chunk_size)
                _, rows, ptrs = axis_tables(valid_mappers)
                # The valid box starts at chunk 0 on every axis: positions are chunk indices.
                pos = np.ascontiguousarray(np.stack(np.unravel_index(flat, new_grid), axis=1), dtype=np.intp).reshape(
                    flat.size, ndim
                )
                for s, a, b in runs(src):
                    self.transfers.append(
                        chunk_transfer(
                            s,
                            dest,
                            pos[a:b],
                            rows,
                            ptrs,
                            SIDE_SLAB,
                            SIDE_SLAB,
                            src_offset=src_off[a:b],
                            dst_offset=new_off[a:b],
                        )
                    )
                si.reshape(-1)[flat] = dest
                so.reshape(-1)[flat] = new_off
            # Fill the new area of every edge chunk that is not on the full slab.
            n_total = n_slabs + len(self.appends)
            for mappers in boxes:
                chunk_indices, rows, ptrs = axis_tables(mappers)
                g = gather_chunks(si, so, chunk_indices, n_total)
                for s, a, b in g.groups.tolist():
                    if s == 0:
                        continue
                    zeros = np.zeros(b - a, dtype=np.uint64)
                    self.transfers.append(
                        chunk_transfer(
                            0,
                            s,
                            g.pos[a:b],
                            rows,
                            ptrs,
                            SIDE_SLAB,
                            SIDE_SLAB,
                            src_offset=zeros,
                            dst_offset=g.offset[a:b],
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
