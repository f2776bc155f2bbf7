"""The read-only side of :class:`~xarray_vhdf5._staging.array.StagedChangesArray`.

numpy-like attributes (``shape``, ``dtype``, ``size``, ``__array__``...) and
the slab and metadata views (``slabs``, ``base_slabs``, ``slab_indices``,
``slab_offsets``, ``has_changes``) of versioned-hdf5's ``staged_changes.rst``, "Staging
changes in memory".  A mixin: the state (``_shape``, ``_slabs``...) is set by
``StagedChangesArray.__init__``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .layout import ArrayState, readonly, same_fill

__all__ = ["ArrayAttributes"]


class ArrayAttributes(ArrayState):
    """numpy-like attributes and slab views (a mixin of ``StagedChangesArray``)."""

    # -- numpy-like attributes ---------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the array, in points."""
        return self._shape

    @property
    def chunk_size(self) -> tuple[int, ...]:
        """Shape of a chunk, in points."""
        return self._chunk_size

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def fill_value(self) -> Any:
        """The fill value, as a numpy scalar of :attr:`dtype`."""
        return self._fill[()]

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of points."""
        return int(np.prod(self._shape, dtype=np.intp))

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of the array as a numpy array (not the memory of the slabs)."""
        return self.size * self._dtype.itemsize

    @property
    def n_chunks(self) -> tuple[int, ...]:
        """Chunks along each axis: the shape of :attr:`slab_indices`."""
        return self._slab_indices.shape

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of unsized object")
        return self._shape[0]

    def __iter__(self) -> Iterator[Any]:
        if not self._shape:
            raise TypeError("iteration over a 0-d array")
        for i in range(self._shape[0]):
            yield self[i]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a StagedChangesArray cannot be converted to a numpy array without a copy")
        out = self[...]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        n_staged = sum(s is not None for s in self._slabs[1 + self._n_base :])
        n_base = sum(s is not None for s in self._slabs[1 : 1 + self._n_base])
        return (
            f"StagedChangesArray<shape={self._shape}, chunk_size={self._chunk_size}, "
            f"dtype={self._dtype}, fill_value={self.fill_value!r}, {len(self._slabs)} slabs "
            f"(1 full, {n_base} base, {n_staged} staged)>"
        )

    # -- slabs and metadata --------------------------------------------------

    @property
    def slabs(self) -> list[Any]:
        """All the slabs (a new list): full, base, staged; None where dropped.

        Pending lazy conversions (``astype``, ``refill``) are applied first.
        """
        for i in range(len(self._slabs)):
            if self._lazy[i] is not None:
                self._materialize(i)
        return list(self._slabs)

    @property
    def n_slabs(self) -> int:
        return len(self._slabs)

    @property
    def n_base_slabs(self) -> int:
        """Number of base slabs (``slabs[1:1 + n_base_slabs]``), dropped ones included."""
        return self._n_base

    @property
    def full_slab(self) -> np.ndarray:
        """``slabs[0]``: one read-only chunk of the fill value (a broadcast view)."""
        return self._slabs[0]

    @property
    def base_slabs(self) -> list[Any]:
        """``slabs[1:1 + n_base_slabs]`` (None where dropped)."""
        return self._slabs[1 : 1 + self._n_base]

    @property
    def staged_slabs(self) -> list[np.ndarray | None]:
        """``slabs[1 + n_base_slabs:]`` (None where dropped), lazy conversions applied."""
        return self.slabs[1 + self._n_base :]

    @property
    def slab_indices(self) -> np.ndarray:
        """Index in :attr:`slabs` of every chunk (intp, read-only view)."""
        return readonly(self._slab_indices)

    @property
    def slab_offsets(self) -> np.ndarray:
        """Offset of every chunk along axis 0 of its slab (uint64, points, read-only view)."""
        return readonly(self._slab_offsets)

    @property
    def has_changes(self) -> bool:
        """Whether anything differs from the base state: chunks, shape, dtype or fill value."""
        base = self._base
        if self._shape != base.shape or self._dtype != base.dtype or not same_fill(self._fill, base.fill_value):
            return True
        return not (
            np.array_equal(self._slab_indices, base.slab_indices)
            and np.array_equal(self._slab_offsets, base.slab_offsets)
        )
