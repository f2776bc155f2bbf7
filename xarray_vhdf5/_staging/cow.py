"""Copy-on-write and lazy conversions of :class:`~xarray_vhdf5._staging.array.StagedChangesArray`.

versioned-hdf5's ``staged_changes.rst``, "Copy-on-Write (CoW) mechanics" and "Hot-swapping
the base slabs": ``copy()``, ``astype()`` and ``refill()`` share the staged
slabs and the metadata arrays as read-only views; the first write on either
side replaces the view it touches with a private copy (:meth:`_writeable`,
:meth:`_writeable_metadata`).  ``astype()`` and ``refill()`` also defer
converting each staged slab: ``_lazy[i]`` holds the pending steps, applied on
first access (:meth:`_materialize`).  A mixin: the state is set by
``StagedChangesArray.__init__``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ..errors import IncompatibleDataError
from .layout import ArrayState, fill_array, fill_mask, readonly, same_fill

__all__ = ["CopyOnWriteSlabs"]

#: numpy's casting rules.
Casting = Literal["no", "equiv", "safe", "same_kind", "unsafe"]


class CopyOnWriteSlabs(ArrayState):
    """Slab access with copy-on-write and lazy conversions (a mixin of ``StagedChangesArray``)."""

    # -- slab access (lazy conversions, copy-on-write) -------------------------

    def _materialize(self, i: int) -> np.ndarray:
        slab = self._slabs[i]
        for step in self._lazy[i] or ():
            if step[0] == "astype":
                with np.errstate(all="ignore"):  # uninitialised areas may hold anything
                    slab = slab.astype(step[1], casting=step[2])
            else:  # ("refill", old, new)
                slab = np.array(slab, copy=True)
                # copyto keeps Python objects as they are (no detour through bytes_ / str_);
                # uninitialised areas may hold signalling NaNs: no warnings.
                with np.errstate(all="ignore"):
                    np.copyto(slab, step[2], where=fill_mask(slab, step[1]))
        self._slabs[i] = slab
        self._lazy[i] = None
        return slab

    def _source(self, i: int) -> Any:
        if self._lazy[i] is not None:
            return self._materialize(i)
        return self._slabs[i]

    def _writeable(self, i: int) -> np.ndarray:
        if self._lazy[i] is not None:
            return self._materialize(i)  # a fresh array
        slab = self._slabs[i]
        if not slab.flags.writeable:  # shared with a copy: copy on write
            slab = slab.copy()
            self._slabs[i] = slab
        return slab

    def _writeable_metadata(self) -> None:
        if not self._slab_indices.flags.writeable:
            self._slab_indices = self._slab_indices.copy()
        if not self._slab_offsets.flags.writeable:
            self._slab_offsets = self._slab_offsets.copy()

    def copy(self) -> Any:
        """A copy-on-write copy: no data is copied until either side writes.

        versioned-hdf5's ``staged_changes.rst``, "Copy-on-Write (CoW) mechanics": staged slabs
        and the metadata arrays become read-only views on both sides; the
        first write to one of them, on either side, replaces that view with a
        private writeable copy.  Base and full slabs are never copied.
        """
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        first_staged = 1 + self._n_base
        for i in range(first_staged, len(self._slabs)):
            slab = self._slabs[i]
            if slab is not None and self._lazy[i] is None:
                self._slabs[i] = readonly(slab)
        new._slabs = list(self._slabs)
        new._lazy = list(self._lazy)
        self._slab_indices = readonly(self._slab_indices)
        self._slab_offsets = readonly(self._slab_offsets)
        new._slab_indices = self._slab_indices
        new._slab_offsets = self._slab_offsets
        new._refcounts = self._refcounts.copy()
        return new

    def astype(self, dtype: Any, casting: Casting = "unsafe", base_slabs: Sequence[Any] | None = None) -> Any:
        """A copy of another dtype; staged slabs are converted on first access.

        versioned-hdf5's ``staged_changes.rst``, "Copy-on-Write (CoW) mechanics" and
        "Hot-swapping the base slabs".  Conversions run with numpy's floating
        point warnings silenced (slabs hold uninitialised areas).

        Parameters
        ----------
        dtype : numpy.dtype
        casting : {"no", "equiv", "safe", "same_kind", "unsafe"}
            As in :meth:`numpy.ndarray.astype`.
        base_slabs : sequence of array-like, optional
            Replacements for the base slabs, of the new dtype and the same
            shapes (e.g. ``[raw_data.astype(dtype)]``: libhdf5 converts on
            read), or longer along axis 0 only (a raw_data other commits
            appended rows to: the chunks read lie below the old length).
            Without it, every chunk on a base slab is loaded into memory now
            (:meth:`load`) and converted later with numpy.

        Raises
        ------
        TypeError
            numpy does not allow the cast under ``casting``.
        xarray_vhdf5.errors.IncompatibleDataError
            ``base_slabs`` does not match the current base slabs.
        """
        dtype = np.dtype(dtype)
        if not np.can_cast(self._dtype, dtype, casting=casting):
            raise TypeError(
                f"Cannot cast array data from {self._dtype!r} to {dtype!r} according to the rule {casting!r}"
            )
        new = self.copy()
        if base_slabs is None:
            if dtype == self._dtype:
                return new
            new.load()
        else:
            base_slabs = list(base_slabs)
            if len(base_slabs) != self._n_base:
                raise IncompatibleDataError(f"astype() needs {self._n_base} base slabs, got {len(base_slabs)}")
            for i, (old, repl) in enumerate(zip(self._slabs[1 : 1 + self._n_base], base_slabs)):
                if old is None:
                    continue
                shape = tuple(getattr(repl, "shape", ()))
                same = shape == tuple(old.shape) or (
                    len(shape) == len(old.shape) > 0 and shape[1:] == tuple(old.shape[1:]) and shape[0] >= old.shape[0]
                )
                if not same or np.dtype(getattr(repl, "dtype", None)) != dtype:
                    raise IncompatibleDataError(
                        f"base_slabs[{i}] must have shape {tuple(old.shape)} (or more rows) and dtype {dtype}; "
                        f"got {getattr(repl, 'shape', None)} and {getattr(repl, 'dtype', None)}"
                    )
                new._slabs[1 + i] = repl
        if dtype != self._dtype:
            with np.errstate(all="ignore"):
                new._fill = np.asarray(self._fill).astype(dtype, casting=casting).reshape(())
            new._dtype = dtype
            new._slabs[0] = np.broadcast_to(new._fill, self._chunk_size)
            step = ("astype", dtype, casting)
            for i in range(1 + self._n_base, len(new._slabs)):
                if new._slabs[i] is not None:
                    new._lazy[i] = (*(new._lazy[i] or ()), step)
        return new

    def refill(self, fill_value: Any) -> Any:
        """A copy with another fill value: every point equal to the old one changes too.

        Chunks still on base slabs are loaded into memory first; staged slabs
        are rewritten on first access.

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            ``fill_value`` cannot be stored in :attr:`dtype`.
        """
        fill = fill_array(fill_value, self._dtype)
        new = self.copy()
        if same_fill(fill, self._fill):
            return new
        new.load()
        step = ("refill", self._fill, fill)
        for i in range(1 + self._n_base, len(new._slabs)):
            if new._slabs[i] is not None:
                new._lazy[i] = (*(new._lazy[i] or ()), step)
        new._fill = fill
        new._slabs[0] = np.broadcast_to(fill, self._chunk_size)
        return new
