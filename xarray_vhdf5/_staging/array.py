"""``StagedChangesArray``: a writeable, numpy-like array staging its changes in memory.

The design is versioned-hdf5's ``staged_changes.rst`` ("Staging changes in memory"): the data
lives in *slabs*, array-likes holding chunks concatenated along axis 0::

    slabs[0]                 the full slab: one read-only chunk of the fill value
                             (a broadcast view: no memory); never dropped
    slabs[1:1 + n_base]      base slabs: read-only array-likes, typically the
                             dataset's raw_data h5py.Dataset
    slabs[1 + n_base:]       staged slabs: writeable numpy arrays created by the
                             array itself whenever a chunk must change

and two arrays with one point per chunk say where each chunk lives:
``slab_indices`` (``numpy.intp``, an index in ``slabs``) and ``slab_offsets``
(``numpy.uint64``, "hsize_t": the chunk's first row along axis 0 of its
slab, in points).  Every method builds a plan
(:mod:`xarray_vhdf5._staging._plan_base`) and executes it; the ``_*_plan()``
methods return the plan without executing it.

Slabs that no chunk references any more are replaced by None (staged *and*
base slabs; counting references is free here); the full slab stays.

``copy()``, ``astype()`` and ``refill()`` are copy-on-write: staged slabs and
the metadata arrays become read-only views shared by both arrays, and the
first write on either side replaces the view it touches with a private copy.
``astype()`` and ``refill()`` also defer converting each staged slab until it
is first read or written.

Not thread-safe: like a numpy array being written to, an instance must not
be used by several threads at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..errors import IncompatibleDataError
from . import kernels
from ._map_index import IndexMapping, map_index
from .attributes import ArrayAttributes
from .casting import cast_for_storage
from .changes import ChangedChunk, ChangesPlan
from .cow import CopyOnWriteSlabs
from .item_plans import GetItemPlan, SetItemPlan
from .layout import (
    BaseState,
    as_shape,
    check_base_slabs,
    check_chunking,
    column_slabs,
    default_dtype,
    fill_array,
    grid_of,
    metadata_arrays,
    packed_slab,
    readonly,
    same_fill,
)
from .shape_plans import LoadPlan, ResizePlan
from .transfer_plan import VALUE, direct_copy_kernel, move

__all__ = ["StagedChangesArray"]


class StagedChangesArray(CopyOnWriteSlabs, ArrayAttributes):
    """A numpy-like array over read-only base slabs, holding every change in memory.

    Parameters
    ----------
    shape : sequence of int
        Shape of the array, in points; any number of dimensions (0-d: one
        chunk, 0-d slabs), zero-length axes allowed.
    chunk_size : sequence of int
        Shape of a chunk, in points, all ``>= 1``; same length as ``shape``.
    base_slabs : sequence of array-like
        Read-only array-likes (numpy arrays, ``h5py.Dataset``, anything with
        ``shape``, ``dtype`` and numpy slicing) holding chunks concatenated
        along axis 0, typically of shape ``(n * chunk_size[0],
        *chunk_size[1:])`` (may be shorter where they only hold edge
        chunks).  They become ``slabs[1:]``; nothing ever writes to them.
    slab_indices : array_like of int, shape ``ceil(shape / chunk_size)``
        0 for a chunk entirely of the fill value, ``i + 1`` for a chunk on
        ``base_slabs[i]``.  Copied.
    slab_offsets : array_like of int, same shape
        First row of each chunk along axis 0 of its base slab, in points; 0
        where ``slab_indices`` is 0.  Copied.
    fill_value : scalar, optional
        Value of the points never written.  Default: 0 (``b""`` for h5py
        variable-length strings, ``None`` for other object dtypes).
    dtype : numpy.dtype, optional
        Default: the dtype of the first base slab, else of ``fill_value``,
        else float64.  numpy base slabs must have exactly this dtype; h5py
        datasets are converted by libhdf5 on read.

    Raises
    ------
    TypeError
        ``shape`` / ``chunk_size`` are not integers; a base slab has no
        ``shape`` / ``dtype``.
    xarray_vhdf5.errors.IncompatibleDataError
        Inconsistent shapes, chunk sizes, metadata arrays or slabs
        (versioned-hdf5's ``staged_changes.rst``, the ``slab_indices`` / ``slab_offsets``
        layout): a slab index out of range, a nonzero offset on the full
        slab, a chunk reaching beyond its base slab, a numpy base slab of
        another dtype, a fill value the dtype cannot hold.  Checked here
        because the transfers trust the metadata (no bounds checks in C).

    See Also
    --------
    from_array, full
    """

    # -- construction ------------------------------------------------------

    def __init__(
        self,
        shape: Sequence[int],
        chunk_size: Sequence[int],
        base_slabs: Sequence[Any],
        slab_indices: Any,
        slab_offsets: Any,
        fill_value: Any = None,
        *,
        dtype: Any = None,
    ):
        shape = as_shape(shape, "shape")
        chunk_size = as_shape(chunk_size, "chunk_size")
        check_chunking(shape, chunk_size)
        base_slabs = list(base_slabs)
        for i, slab in enumerate(base_slabs):
            if not (hasattr(slab, "shape") and hasattr(slab, "dtype")):
                raise TypeError(
                    f"base_slabs[{i}] must be an array-like with shape and dtype, got {type(slab).__name__}"
                )
        dtype = default_dtype(dtype, base_slabs, fill_value)
        si, so = metadata_arrays(slab_indices, slab_offsets, shape, chunk_size)
        fill = fill_array(fill_value, dtype)
        check_base_slabs(shape, chunk_size, dtype, base_slabs, si, so)
        self._setup(shape, chunk_size, dtype, fill, base_slabs, si, so)

    @classmethod
    def _over_dataset(
        cls,
        shape: tuple[int, ...],
        chunk_size: tuple[int, ...],
        dataset: Any,
        slab_indices: np.ndarray,
        slab_offsets: np.ndarray,
        fill_value: Any,
        dtype: np.dtype,
    ) -> StagedChangesArray:
        """The array over one h5py dataset (the only base slab), from its own chunk map.

        For the wrappers, whose ``slab_indices`` / ``slab_offsets`` come from
        the previous version's virtual mapping into that dataset (read back,
        or kept by the commit that wrote it: ``backend.chunkmap_cache``). Skips the
        check that every chunk lies inside the base slab, which asks h5py for
        the dataset's shape and walks the chunks: the reads of
        an h5py dataset go through libhdf5, which refuses a selection beyond
        the extent (an ``HDF5Error``; the reference kernels raise
        ``IndexError`` first), so a wrong map cannot read out of bounds.
        Everything else is checked as by the constructor.

        Parameters
        ----------
        shape, chunk_size : tuple of int
            In points, as for the constructor.
        dataset : h5py.Dataset
            The base slab (``slabs[1]``): chunks along axis 0 at ``slab_offsets``.
        slab_indices : numpy.ndarray of int, shape ``ceil(shape / chunk_size)``
            0 (fill value) or 1 (on ``dataset``).
        slab_offsets : numpy.ndarray of uint64, same shape
            First row of each chunk in ``dataset``, in points; 0 where
            ``slab_indices`` is 0.
        fill_value : scalar
            As for the constructor.
        dtype : numpy.dtype
            The array's dtype (libhdf5 converts ``dataset``'s on read).

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            Metadata arrays of the wrong grid shape, a slab index other than
            0 or 1, a nonzero offset on the fill slab, a fill value the dtype
            cannot hold.
        """
        shape = as_shape(shape, "shape")
        chunk_size = as_shape(chunk_size, "chunk_size")
        check_chunking(shape, chunk_size)
        dtype = np.dtype(dtype)
        si, so = metadata_arrays(slab_indices, slab_offsets, shape, chunk_size)
        if (si.size and (si.min() < 0 or si.max() > 1)) or np.any(so[si == 0]):
            check_base_slabs(shape, chunk_size, dtype, [dataset], si, so)  # raises, saying why
        self = cls.__new__(cls)
        self._setup(shape, chunk_size, dtype, fill_array(fill_value, dtype), [dataset], si, so)
        return self

    def _setup(self, shape, chunk_size, dtype, fill, base_slabs, si, so) -> None:
        """Set the state of a new array from checked arguments."""
        self._shape = shape
        self._chunk_size = chunk_size
        self._dtype = dtype
        self._fill = fill
        self._n_base = len(base_slabs)
        self._slabs = [np.broadcast_to(fill, chunk_size), *base_slabs]
        self._lazy = [None] * len(self._slabs)
        self._slab_indices = si
        self._slab_offsets = so
        self._refcounts = np.bincount(si.reshape(-1), minlength=len(self._slabs)).astype(np.intp)
        for i in range(1, len(self._slabs)):
            if not self._refcounts[i]:
                self._slabs[i] = None  # unreferenced from the start
        self._base = BaseState(shape, readonly(si.copy()), readonly(so.copy()), dtype, fill)

    @classmethod
    def from_array(
        cls,
        arr: Any,
        chunk_size: Sequence[int],
        fill_value: Any = None,
        as_base_slabs: bool = True,
    ) -> StagedChangesArray:
        """A staged array holding the data of ``arr``.

        Parameters
        ----------
        arr : array_like
            The data (converted with :func:`numpy.asarray`).
        chunk_size : sequence of int
            In points, ``>= 1``, one per axis.
        fill_value : scalar, optional
            See :class:`StagedChangesArray`.
        as_base_slabs : bool
            True (default): no copy; one read-only base slab per column of
            chunks (``arr[:, j1*c1:(j1+1)*c1, ...]``, trimmed at the edges),
            with chunk ``(i, j...)`` at offset ``i * chunk_size[0]``.  False:
            the data is copied into one staged slab, chunks in C order; the
            array starts with changes (:attr:`has_changes`).

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            ``chunk_size`` does not match ``arr``.
        """
        arr = np.asarray(arr)
        chunk_size = as_shape(chunk_size, "chunk_size")
        check_chunking(arr.shape, chunk_size)
        if as_base_slabs:
            slabs, si, so = column_slabs(arr, chunk_size)
            return cls(arr.shape, chunk_size, slabs, si, so, fill_value, dtype=arr.dtype)
        out = cls.full(arr.shape, chunk_size, fill_value, arr.dtype)
        grid = grid_of(arr.shape, chunk_size)
        n_chunks = int(np.prod(grid, dtype=np.intp))
        if not n_chunks:
            return out
        slab, so = packed_slab(arr, chunk_size)
        out._slabs.append(slab)
        out._lazy.append(None)
        out._slab_indices = np.ones(grid, dtype=np.intp)
        out._slab_offsets = so
        out._refcounts = np.array([0, n_chunks], dtype=np.intp)
        return out

    @classmethod
    def full(
        cls,
        shape: Sequence[int],
        chunk_size: Sequence[int],
        fill_value: Any = None,
        dtype: Any = None,
    ) -> StagedChangesArray:
        """An array entirely of ``fill_value``, using no memory until written.

        Parameters
        ----------
        shape, chunk_size : sequence of int
            In points.
        fill_value : scalar, optional
        dtype : numpy.dtype, optional
            Default: the dtype of ``fill_value``, else float64.

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            See :class:`StagedChangesArray`.
        """
        shape = as_shape(shape, "shape")
        chunk_size = as_shape(chunk_size, "chunk_size")
        check_chunking(shape, chunk_size)
        zeros = np.zeros(grid_of(shape, chunk_size), dtype=np.intp)
        return cls(shape, chunk_size, [], zeros, zeros.astype(np.uint64), fill_value, dtype=dtype)

    def _execute(self, plan: Any, value: np.ndarray | None = None) -> None:
        n0 = len(self._slabs)
        try:
            for shape in plan.appends:
                self._slabs.append(np.empty(shape, dtype=self._dtype))
                self._lazy.append(None)
            for t in plan.transfers:
                src = value if t.src == VALUE else self._source(t.src)
                move(src, self._writeable(t.dst), t.arrays)
        except BaseException:
            del self._slabs[n0:]
            del self._lazy[n0:]
            raise
        if isinstance(plan, ResizePlan):
            self._slab_indices = plan.slab_indices
            self._slab_offsets = plan.slab_offsets
            self._shape = plan.new_shape
        elif plan.updates:
            self._writeable_metadata()
            plan.apply_updates(self._slab_indices, self._slab_offsets)
        self._refcounts = plan.refcounts
        for s in plan.drops:
            self._slabs[s] = None
            self._lazy[s] = None

    # -- plans -------------------------------------------------------------------

    def _getitem_plan(self, idx: Any, mapping: IndexMapping | None = None) -> GetItemPlan:
        """The :class:`GetItemPlan` of ``self[idx]``, not executed (``mapping``: of ``idx``)."""
        if mapping is None:
            mapping = map_index(idx, self._shape, self._chunk_size)
        return GetItemPlan(mapping, self._slab_indices, self._slab_offsets, len(self._slabs))

    def _setitem_plan(self, idx: Any, mapping: IndexMapping | None = None) -> SetItemPlan:
        """The :class:`SetItemPlan` of ``self[idx] = value``, not executed."""
        if mapping is None:
            mapping = map_index(idx, self._shape, self._chunk_size)
        return SetItemPlan(
            mapping,
            self._slab_indices,
            self._slab_offsets,
            self._chunk_size,
            len(self._slabs),
            self._n_base,
            self._refcounts,
        )

    def _resize_plan(self, shape: Sequence[int]) -> ResizePlan:
        """The :class:`ResizePlan` of ``self.resize(shape)``, not executed."""
        shape = as_shape(shape, "shape")
        if len(shape) != len(self._shape) or any(n < 0 for n in shape):
            raise IncompatibleDataError(
                f"cannot resize an array of shape {self._shape} to {shape}: the number of "
                "dimensions must stay the same and lengths be >= 0"
            )
        return ResizePlan(
            self._shape,
            shape,
            self._chunk_size,
            self._slab_indices,
            self._slab_offsets,
            len(self._slabs),
            self._n_base,
            self._refcounts,
        )

    def _load_plan(self) -> LoadPlan:
        """The :class:`LoadPlan` of ``self.load()``, not executed."""
        return LoadPlan(
            self._shape,
            self._chunk_size,
            self._slab_indices,
            self._slab_offsets,
            len(self._slabs),
            self._n_base,
            self._refcounts,
        )

    def _changes_plan(self) -> ChangesPlan:
        """The :class:`ChangesPlan`: which chunks differ from the base state, and where."""
        base = self._base
        return ChangesPlan(
            self._shape,
            self._chunk_size,
            self._slab_indices,
            self._slab_offsets,
            self._n_base,
            base.slab_indices,
            base.slab_offsets,
            fill_value_changed=not same_fill(self._fill, base.fill_value) or self._dtype != base.dtype,
        )

    # -- numpy-like operations ----------------------------------------------------

    def __getitem__(self, idx: Any) -> Any:
        """``numpy``'s ``arr[idx]`` (a new array, or a numpy scalar).

        versioned-hdf5's ``staged_changes.rst``, "``__getitem__`` algorithm": a
        :class:`~xarray_vhdf5._staging.item_plans.GetItemPlan`, then one
        ``read_many_slices`` per slab into a new array.  Nothing is cached and
        the array's state never changes.

        Raises
        ------
        IndexError, TypeError, ValueError
            Where numpy raises them (out of bounds, invalid index types).
        xarray_vhdf5.errors.UnsupportedError
            Valid numpy indices this engine does not support: the plans map
            every axis independently (versioned-hdf5's ``staged_changes.rst``, "General plans
            algorithm", step 1), so at most one array index, no newaxis
            (:func:`~xarray_vhdf5._staging._map_index.map_index`).
        xarray_vhdf5.errors.ClosedFileError
            A base slab's file was closed.
        xarray_vhdf5.errors.HDF5Error
            libhdf5 failed reading a base slab.
        """
        fused = kernels.active().read_basic
        if fused is not None:
            # The hot path: a basic index over in-memory chunks, in one kernel call.
            out = fused(
                idx,
                self._shape,
                self._chunk_size,
                self._slab_indices,
                self._slab_offsets,
                self._slabs,
                self._lazy,
                self._dtype,
            )
            if out is not None:
                return out
        return self._getitem_general(idx)

    def _getitem_general(self, idx: Any) -> Any:
        """``self[idx]`` through a :class:`GetItemPlan` (every index, every slab)."""
        mapping = map_index(idx, self._shape, self._chunk_size)
        plan = self._getitem_plan(idx, mapping)
        out = np.empty(plan.output_shape, dtype=self._dtype)
        slabs, lazy, arrays = self._slabs, self._lazy, plan.arrays
        groups = plan.groups
        direct = direct_copy_kernel(out)  # None unless numpy slabs can go straight to C
        for slab, a, b in groups:
            src = slabs[slab] if lazy[slab] is None else self._materialize(slab)
            part = arrays if len(groups) == 1 else [x[a:b] for x in arrays]
            if direct is not None and type(src) is np.ndarray and src.dtype == out.dtype:
                direct(src, out, *part)  # the fast path of move(): same checks, inlined
            else:
                move(src, out, part, True)
        return mapping.to_result(out)

    def _normalised_value(self, value: Any, mapping: Any) -> np.ndarray:
        if self._dtype.kind == "O":
            arr = np.asarray(value, dtype=self._dtype)
        else:  # refuses what the dtype cannot hold (numpy would cast arrays silently)
            arr = cast_for_storage(value, self._dtype)
        target = mapping.shape
        if arr.shape != target:
            original = arr.shape
            while arr.ndim > len(target) and arr.shape[0] == 1:
                arr = arr[0]
            try:
                arr = np.broadcast_to(arr, target)
            except ValueError:
                raise ValueError(f"could not broadcast input array from shape {original} into shape {target}") from None
        return mapping.to_normalised(arr)

    def __setitem__(self, idx: Any, value: Any) -> None:
        """``numpy``'s ``arr[idx] = value``: broadcast, cast, staged in memory.

        versioned-hdf5's ``staged_changes.rst``, "``__setitem__`` algorithm": chunks partially
        selected on the full or a base slab are first copied to a new staged
        slab, wholly selected ones get a new slab without being read, and the
        value is then written into the staged chunks.  Base slabs are never
        written.  For duplicate integers in an index array the last value
        wins, as in numpy.

        Raises
        ------
        IndexError, ValueError
            Where numpy raises them (bad index; value that cannot be
            broadcast to the selection).
        ValueOverflowError, ValueTypeError, ValueCastError, StringTooLongError
            (from :mod:`xarray_vhdf5.errors`) A value the dtype cannot hold (numpy's ``OverflowError`` /
            ``TypeError`` / ``ValueError`` for such a scalar; also for arrays
            of another dtype, which numpy casts silently):
            :func:`~xarray_vhdf5._staging.casting.cast_for_storage`. Nothing is
            written.
        xarray_vhdf5.errors.UnsupportedError
            See :meth:`__getitem__`.
        xarray_vhdf5.errors.ClosedFileError, xarray_vhdf5.errors.HDF5Error
            Reading a partially selected chunk from a base slab failed; the
            array is left unchanged.
        """
        mapping = map_index(idx, self._shape, self._chunk_size)
        value = self._normalised_value(value, mapping)
        plan = self._setitem_plan(idx, mapping)
        self._execute(plan, value)

    def resize(self, shape: Sequence[int]) -> None:
        """Change the shape in place; new points get the fill value.

        versioned-hdf5's ``staged_changes.rst``, "``resize()`` algorithm": shrinking moves no
        data; new chunks lie on the full slab; edge chunks that grow and do
        not lie on the full slab are moved off the base slabs and their new
        area is filled from the full slab.

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            A different number of dimensions, or a negative length.
        xarray_vhdf5.errors.ClosedFileError, xarray_vhdf5.errors.HDF5Error
            Reading a growing edge chunk from a base slab failed; the array is
            left unchanged.
        """
        self._execute(self._resize_plan(shape))

    def load(self) -> None:
        """Copy every chunk still on a base slab into memory (one new staged slab).

        versioned-hdf5's ``staged_changes.rst``, "``load()`` algorithm".  Afterwards no base slab
        is referenced (all are dropped, "Reclaiming memory").

        Raises
        ------
        xarray_vhdf5.errors.ClosedFileError, xarray_vhdf5.errors.HDF5Error
            Reading a base slab failed; the array is left unchanged.
        """
        self._execute(self._load_plan())

    def changed_chunks(self, plan: ChangesPlan | None = None) -> Iterator[tuple[ChangedChunk, np.ndarray]]:
        """The chunks that differ from the base state, with their data.

        ``plan``: this array's current changes plan, when the caller already
        built it (``_changes_plan()``; the array must not have changed since).

        Yields
        ------
        chunk : ChangedChunk
            See :class:`~xarray_vhdf5._staging.changes.ChangesPlan`.
        data : numpy.ndarray
            Read-only view of the chunk's points (trimmed at the edges);
            for chunks on the full slab, a broadcast of the fill value.
        """
        for c in plan if plan is not None else self._changes_plan():
            slab = self._source(c.slab)
            yield c, readonly(np.asarray(slab[(*c.in_slab, Ellipsis)]))
