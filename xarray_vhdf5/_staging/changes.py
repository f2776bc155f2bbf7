"""What a commit needs from a staged array: the chunks that differ from its base state.

versioned-hdf5's ``staged_changes.rst`` ("Plans", ``ChangesPlan``): a read-only plan listing
every chunk whose ``(slab index, slab offset)`` is not the one it had when the
array was built, with where its data lives, and every unchanged chunk on a
base slab with its offset (for a version's dataset: its row in ``raw_data``,
to be mapped again as is).  Like the other plans it never touches data;
:meth:`~xarray_vhdf5._staging.array.StagedChangesArray.changed_chunks` yields
the data next to it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

__all__ = ["ChangedChunk", "ChangesPlan"]


class ChangedChunk(NamedTuple):
    """One chunk that differs from the base state, and where its data lives.

    Attributes
    ----------
    chunk : tuple of int
        Index of the chunk in the chunk grid.
    virtual : tuple of slice
        Its points in the array (trimmed at the edges).
    slab : int
        ``slab_indices`` of the chunk: 0 (all fill value) or a staged slab.
    offset : int
        ``slab_offsets`` of the chunk, in points along axis 0.
    in_slab : tuple of slice
        Its points in ``slabs[slab]`` (``offset`` added on axis 0; for the
        full slab the offset is always 0).
    """

    chunk: tuple[int, ...]
    virtual: tuple[slice, ...]
    slab: int
    offset: int
    in_slab: tuple[slice, ...]


class ChangesPlan:
    """What a commit needs: the chunks that differ from the base state.

    A chunk *differs* when its ``(slab index, slab offset)`` is not the one
    it had in the base state (the metadata the array was built with): it
    was written (it lies on a staged slab), or it is new or was re-created by
    ``resize()`` (it lies on the full slab where the base had none or had
    data), or it lies on the full slab and the fill value changed
    (``refill()``).  Every other chunk is unchanged and lies where the base
    state put it: on a base slab (the committer reuses its ``raw_data``
    offset) or on the full slab in both.

    Parameters
    ----------
    shape, chunk_size : tuple of int
    slab_indices, slab_offsets : numpy.ndarray
        Current metadata.
    n_base_slabs : int
    base_slab_indices, base_slab_offsets : numpy.ndarray
        Metadata of the base state (its own grid shape).
    fill_value_changed : bool
        The fill value differs from the base state's.

    Attributes
    ----------
    changed : numpy.ndarray of intp, shape (nchanged, ndim)
        Chunk indices of the changed chunks, C order.
    changed_slab_indices, changed_slab_offsets : numpy.ndarray
        Their slab index (0 or staged) and offset.
    unchanged : numpy.ndarray of intp, shape (nunchanged, ndim)
        Chunk indices of the unchanged chunks lying on base slabs.
    unchanged_slab_indices, unchanged_slab_offsets : numpy.ndarray
        Their base slab index and offset (e.g. the row in ``raw_data``).

    Iterating yields a :class:`ChangedChunk` per changed chunk.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        chunk_size: tuple[int, ...],
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        n_base_slabs: int,
        base_slab_indices: np.ndarray,
        base_slab_offsets: np.ndarray,
        fill_value_changed: bool = False,
    ):
        self.shape = shape
        self.chunk_size = chunk_size
        changed = np.ones(slab_indices.shape, dtype=bool)
        overlap = tuple(slice(0, min(a, b)) for a, b in zip(slab_indices.shape, base_slab_indices.shape))
        changed[overlap] = (slab_indices[overlap] != base_slab_indices[overlap]) | (
            slab_offsets[overlap] != base_slab_offsets[overlap]
        )
        if fill_value_changed:
            changed |= slab_indices == 0
        on_base = (slab_indices >= 1) & (slab_indices <= n_base_slabs)
        self.changed = np.argwhere(changed).astype(np.intp)
        self.changed_slab_indices = slab_indices[changed]
        self.changed_slab_offsets = slab_offsets[changed]
        unchanged = ~changed & on_base
        self.unchanged = np.argwhere(unchanged).astype(np.intp)
        self.unchanged_slab_indices = slab_indices[unchanged]
        self.unchanged_slab_offsets = slab_offsets[unchanged]

    def __len__(self) -> int:
        return len(self.changed)

    def only(self, keep: np.ndarray) -> ChangesPlan:
        """A copy whose changed chunks are those where ``keep`` (a bool array, one per changed chunk) is True."""
        out = copy.copy(self)
        out.changed = self.changed[keep]
        out.changed_slab_indices = self.changed_slab_indices[keep]
        out.changed_slab_offsets = self.changed_slab_offsets[keep]
        return out

    def __iter__(self) -> Iterator[ChangedChunk]:
        cs = self.chunk_size
        for chunk, slab, offset in zip(
            self.changed.tolist(),
            self.changed_slab_indices.tolist(),
            self.changed_slab_offsets.tolist(),
        ):
            virtual = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(chunk, cs, self.shape))
            extents = [s.stop - s.start for s in virtual]
            in_slab = tuple(
                slice((offset if a == 0 else 0), (offset if a == 0 else 0) + e) for a, e in enumerate(extents)
            )
            yield ChangedChunk(tuple(chunk), virtual, slab, offset, in_slab)

    def __repr__(self) -> str:
        n_full = int(np.count_nonzero(self.changed_slab_indices == 0))
        lines = [
            f"ChangesPlan<shape={self.shape}, {len(self.changed)} changed chunks "
            f"({len(self.changed) - n_full} staged, {n_full} full), "
            f"{len(self.unchanged)} unchanged chunks on base slabs>"
        ]
        for c in self:
            lines.append(
                f"  chunk {c.chunk}: virtual{_fmt_slices(c.virtual)} <- slabs[{c.slab}]{_fmt_slices(c.in_slab)}"
            )
        for chunk, slab, off in zip(
            self.unchanged.tolist(),
            self.unchanged_slab_indices.tolist(),
            self.unchanged_slab_offsets.tolist(),
        ):
            lines.append(f"  chunk {tuple(chunk)}: unchanged on slabs[{slab}] at offset {off}")
        return "\n".join(lines)


def _fmt_slices(slices: tuple[slice, ...]) -> str:
    if not slices:
        return "[()]"
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in slices) + "]"
