"""``StagedChangesArray``: a writeable, numpy-like array staging its changes in memory.

The design is ``staged_changes.rst`` ("Staging changes in memory"): the data
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
(:mod:`xarray_vhdf5.staging.plans`) and executes it; the ``_*_plan()``
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

import operator
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import h5py
import numpy as np

from ..errors import IncompatibleDataError
from . import kernels
from .index_mapper import map_index
from .changes import ChangedChunk, ChangesPlan
from .plans import (
    GetItemPlan,
    LoadPlan,
    ResizePlan,
    SetItemPlan,
    slab_shape,
)
from .transfer_plan import VALUE, direct_copy_kernel, move

__all__ = ["StagedChangesArray"]


class _BaseState(NamedTuple):
    """The state the array was built with, against which changes are measured."""

    shape: tuple[int, ...]
    slab_indices: np.ndarray  # read-only
    slab_offsets: np.ndarray  # read-only
    dtype: np.dtype
    fill_value: np.ndarray  # 0-d


def _readonly(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def _as_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, got {shape!r}") from None
    return out


def _default_fill(dtype: np.dtype) -> np.ndarray:
    if dtype.hasobject:
        info = h5py.check_string_dtype(dtype)
        return np.array(b"" if info is not None else None, dtype=dtype)
    return np.zeros((), dtype=dtype)


def _fill_array(fill_value: Any, dtype: np.dtype) -> np.ndarray:
    if fill_value is None:
        return _default_fill(dtype)
    try:
        return np.array(fill_value, dtype=dtype).reshape(())
    except (TypeError, ValueError, OverflowError) as exc:
        raise IncompatibleDataError(
            f"fill_value {fill_value!r} cannot be stored as {dtype}: {exc}"
        ) from None


def _same_fill(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(a == b or (np.isnan(a) and np.isnan(b)))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a.tobytes() == b.tobytes()


def _fill_mask(slab: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """Points of ``slab`` equal to ``fill`` (NaN matches NaN)."""
    mask = np.asarray(slab == fill[()])
    if mask.shape != slab.shape:  # comparison not elementwise (exotic object)
        mask = np.zeros(slab.shape, dtype=bool)
    if slab.dtype.kind in "fc" and np.isnan(fill):
        mask = np.isnan(slab)
    return mask


class StagedChangesArray:
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
        (``staged_changes.rst``, the ``slab_indices`` / ``slab_offsets``
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
        shape = _as_shape(shape, "shape")
        chunk_size = _as_shape(chunk_size, "chunk_size")
        if len(chunk_size) != len(shape):
            raise IncompatibleDataError(
                f"chunk_size {chunk_size} must have one entry per axis of shape {shape}"
            )
        if any(n < 0 for n in shape):
            raise IncompatibleDataError(f"shape {shape} has negative lengths")
        if any(c < 1 for c in chunk_size):
            raise IncompatibleDataError(f"chunk_size {chunk_size} must be >= 1 on every axis")
        base_slabs = list(base_slabs)
        for i, slab in enumerate(base_slabs):
            if not (hasattr(slab, "shape") and hasattr(slab, "dtype")):
                raise TypeError(
                    f"base_slabs[{i}] must be an array-like with shape and dtype, "
                    f"got {type(slab).__name__}"
                )
        if dtype is not None:
            dtype = np.dtype(dtype)
        elif base_slabs:
            dtype = np.dtype(base_slabs[0].dtype)
        elif fill_value is not None:
            dtype = np.asarray(fill_value).dtype
        else:
            dtype = np.dtype(np.float64)
        grid = tuple(-(-n // c) for n, c in zip(shape, chunk_size))
        try:
            si = np.array(slab_indices, dtype=np.intp, order="C", copy=True)
            so = np.array(slab_offsets, dtype=np.uint64, order="C", copy=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise IncompatibleDataError(
                f"slab_indices / slab_offsets must be arrays of non-negative integers: {exc}"
            ) from None
        if si.shape != grid or so.shape != grid:
            raise IncompatibleDataError(
                f"slab_indices and slab_offsets must have one point per chunk, shape {grid} "
                f"for shape {shape} and chunk_size {chunk_size}; got {si.shape} and {so.shape}"
            )
        fill = _fill_array(fill_value, dtype)
        self._check_base_slabs(shape, chunk_size, dtype, base_slabs, si, so)

        self._shape = shape
        self._chunk_size = chunk_size
        self._dtype = dtype
        self._fill = fill
        self._n_base = len(base_slabs)
        self._slabs: list[Any] = [np.broadcast_to(fill, chunk_size), *base_slabs]
        self._lazy: list[tuple | None] = [None] * len(self._slabs)
        self._slab_indices = si
        self._slab_offsets = so
        self._refcounts = np.bincount(si.reshape(-1), minlength=len(self._slabs)).astype(np.intp)
        for i in range(1, len(self._slabs)):
            if not self._refcounts[i]:
                self._slabs[i] = None  # unreferenced from the start
        self._base = _BaseState(shape, _readonly(si.copy()), _readonly(so.copy()), dtype, fill)

    @staticmethod
    def _check_base_slabs(
        shape: tuple[int, ...],
        chunk_size: tuple[int, ...],
        dtype: np.dtype,
        base_slabs: list[Any],
        si: np.ndarray,
        so: np.ndarray,
    ) -> None:
        n_slabs = 1 + len(base_slabs)
        if si.size and (si.min() < 0 or si.max() >= n_slabs):
            raise IncompatibleDataError(
                f"slab_indices must be in [0, {n_slabs}) (0 = fill value, i + 1 = base_slabs[i]); "
                f"got values in [{si.min()}, {si.max()}]"
            )
        if np.any(so[si == 0]):
            raise IncompatibleDataError("slab_offsets must be 0 where slab_indices is 0")
        ndim = len(shape)
        for i, slab in enumerate(base_slabs, start=1):
            sshape = tuple(slab.shape)
            if len(sshape) != ndim:
                raise IncompatibleDataError(
                    f"base_slabs[{i - 1}] has shape {sshape}, expected {ndim} dimensions"
                )
            if isinstance(slab, np.ndarray) and slab.dtype != dtype:
                raise IncompatibleDataError(
                    f"base_slabs[{i - 1}] has dtype {slab.dtype}, expected {dtype}; "
                    "convert it first, or pass an h5py dataset (converted on read)"
                )
            on = si == i
            if not on.any() or ndim == 0:
                continue
            # Every chunk on this slab must fit in it (its extent, trimmed at the edges).
            coords = np.nonzero(on)
            for a in range(ndim):
                ext = np.minimum(chunk_size[a], shape[a] - coords[a] * chunk_size[a])
                end = ext + (so[on].astype(np.int64) if a == 0 else 0)
                if end.max() > sshape[a]:
                    j = int(end.argmax())
                    chunk = tuple(int(c[j]) for c in coords)
                    raise IncompatibleDataError(
                        f"chunk {chunk} reaches beyond base_slabs[{i - 1}] (shape {sshape}) "
                        f"along axis {a}: it needs {int(end[j])} points"
                    )

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
        shape = arr.shape
        chunk_size = _as_shape(chunk_size, "chunk_size")
        if len(chunk_size) != arr.ndim or any(c < 1 for c in chunk_size):
            raise IncompatibleDataError(
                f"chunk_size {chunk_size} must be one integer >= 1 per axis of shape {shape}"
            )
        grid = tuple(-(-n // c) for n, c in zip(shape, chunk_size))
        n_chunks = int(np.prod(grid, dtype=np.intp))
        if as_base_slabs:
            si = np.zeros(grid, dtype=np.intp)
            so = np.zeros(grid, dtype=np.uint64)
            slabs = []
            if n_chunks:
                if arr.ndim == 0:
                    slabs.append(_readonly(arr))
                    si[()] = 1
                else:
                    rows = (np.arange(grid[0], dtype=np.uint64) * np.uint64(chunk_size[0]))
                    for col, j in enumerate(np.ndindex(*grid[1:]), start=1):
                        view = arr[
                            (slice(None),)
                            + tuple(slice(k * c, (k + 1) * c) for k, c in zip(j, chunk_size[1:]))
                        ]
                        slabs.append(_readonly(view))
                        si[(slice(None), *j)] = col
                        so[(slice(None), *j)] = rows
            return cls(shape, chunk_size, slabs, si, so, fill_value, dtype=arr.dtype)

        out = cls.full(shape, chunk_size, fill_value, arr.dtype)
        if not n_chunks:
            return out
        if arr.ndim == 0:
            slab = np.array(arr, copy=True)
            so = np.zeros((), dtype=np.uint64)
        else:
            padded_shape = tuple(g * c for g, c in zip(grid, chunk_size))
            if padded_shape == shape:
                padded = arr
            else:
                padded = np.empty(padded_shape, dtype=arr.dtype)
                padded[tuple(slice(0, n) for n in shape)] = arr
            split = [x for g, c in zip(grid, chunk_size) for x in (g, c)]
            ndim = arr.ndim
            order = list(range(0, 2 * ndim, 2)) + list(range(1, 2 * ndim, 2))
            chunks = padded.reshape(split).transpose(order)
            slab = np.ascontiguousarray(chunks).reshape(slab_shape(n_chunks, chunk_size))
            so = (np.arange(n_chunks, dtype=np.uint64) * np.uint64(chunk_size[0])).reshape(grid)
        out._slabs.append(slab)
        out._lazy.append(None)
        out._slab_indices = np.ones(grid, dtype=np.intp)
        out._slab_offsets = np.array(so, dtype=np.uint64, order="C")
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
        shape = _as_shape(shape, "shape")
        chunk_size = _as_shape(chunk_size, "chunk_size")
        if len(chunk_size) != len(shape):
            raise IncompatibleDataError(
                f"chunk_size {chunk_size} must have one entry per axis of shape {shape}"
            )
        grid = tuple(-(-n // max(c, 1)) for n, c in zip(shape, chunk_size))
        zeros = np.zeros(grid, dtype=np.intp)
        return cls(shape, chunk_size, [], zeros, zeros.astype(np.uint64), fill_value, dtype=dtype)

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
            raise ValueError(
                "a StagedChangesArray cannot be converted to a numpy array without a copy"
            )
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
        return _readonly(self._slab_indices)

    @property
    def slab_offsets(self) -> np.ndarray:
        """Offset of every chunk along axis 0 of its slab (uint64, points, read-only view)."""
        return _readonly(self._slab_offsets)

    @property
    def has_changes(self) -> bool:
        """Whether anything differs from the base state: chunks, shape, dtype or fill value."""
        base = self._base
        if (
            self._shape != base.shape
            or self._dtype != base.dtype
            or not _same_fill(self._fill, base.fill_value)
        ):
            return True
        return not (
            np.array_equal(self._slab_indices, base.slab_indices)
            and np.array_equal(self._slab_offsets, base.slab_offsets)
        )

    # -- slab access (lazy conversions, copy-on-write) -------------------------

    def _materialize(self, i: int) -> np.ndarray:
        slab = self._slabs[i]
        for step in self._lazy[i]:
            if step[0] == "astype":
                with np.errstate(all="ignore"):  # uninitialised areas may hold anything
                    slab = slab.astype(step[1], casting=step[2])
            else:  # ("refill", old, new)
                slab = np.array(slab, copy=True)
                # copyto keeps Python objects as they are (no detour through bytes_ / str_);
                # uninitialised areas may hold signalling NaNs: no warnings.
                with np.errstate(all="ignore"):
                    np.copyto(slab, step[2], where=_fill_mask(slab, step[1]))
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

    def _getitem_plan(self, idx: Any) -> GetItemPlan:
        """The :class:`GetItemPlan` of ``self[idx]``, not executed."""
        mapping = map_index(idx, self._shape, self._chunk_size)
        return GetItemPlan(mapping, self._slab_indices, self._slab_offsets, len(self._slabs))

    def _setitem_plan(self, idx: Any) -> SetItemPlan:
        """The :class:`SetItemPlan` of ``self[idx] = value``, not executed."""
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
        shape = _as_shape(shape, "shape")
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
            fill_value_changed=not _same_fill(self._fill, base.fill_value)
            or self._dtype != base.dtype,
        )

    # -- numpy-like operations ----------------------------------------------------

    def __getitem__(self, idx: Any) -> Any:
        """``numpy``'s ``arr[idx]`` (a new array, or a numpy scalar).

        ``staged_changes.rst``, "``__getitem__`` algorithm": a
        :class:`~xarray_vhdf5.staging.plans.GetItemPlan`, then one
        ``read_many_slices`` per slab into a new array.  Nothing is cached and
        the array's state never changes.

        Raises
        ------
        IndexError, TypeError, ValueError
            Where numpy raises them (out of bounds, invalid index types).
        xarray_vhdf5.errors.UnsupportedError
            Valid numpy indices this engine does not support: the plans map
            every axis independently (``staged_changes.rst``, "General plans
            algorithm", step 1), so at most one array index, no newaxis
            (:func:`~xarray_vhdf5.staging.index_mapper.map_index`).
        xarray_vhdf5.errors.ClosedFileError
            A base slab's file was closed.
        xarray_vhdf5.errors.HDF5Error
            libhdf5 failed reading a base slab.
        """
        fused = kernels.active().read_basic
        if fused is not None:
            # The hot path: a basic index over in-memory chunks, in one kernel call.
            out = fused(
                idx, self._shape, self._chunk_size, self._slab_indices, self._slab_offsets,
                self._slabs, self._lazy, self._dtype,
            )
            if out is not None:
                return out
        return self._getitem_general(idx)

    def _getitem_general(self, idx: Any) -> Any:
        """``self[idx]`` through a :class:`GetItemPlan` (every index, every slab)."""
        mapping = map_index(idx, self._shape, self._chunk_size)
        plan = GetItemPlan(mapping, self._slab_indices, self._slab_offsets, len(self._slabs))
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
        try:
            arr = np.asarray(value, dtype=self._dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            raise type(exc)(
                f"cannot store {type(value).__name__} as {self._dtype}: {exc}"
            ) from None
        target = mapping.shape
        if arr.shape != target:
            original = arr.shape
            while arr.ndim > len(target) and arr.shape[0] == 1:
                arr = arr[0]
            try:
                arr = np.broadcast_to(arr, target)
            except ValueError:
                raise ValueError(
                    f"could not broadcast input array from shape {original} into shape {target}"
                ) from None
        return mapping.to_normalised(arr)

    def __setitem__(self, idx: Any, value: Any) -> None:
        """``numpy``'s ``arr[idx] = value``: broadcast, cast, staged in memory.

        ``staged_changes.rst``, "``__setitem__`` algorithm": chunks partially
        selected on the full or a base slab are first copied to a new staged
        slab, wholly selected ones get a new slab without being read, and the
        value is then written into the staged chunks.  Base slabs are never
        written.  For duplicate integers in an index array the last value
        wins, as in numpy.

        Raises
        ------
        IndexError, TypeError, ValueError, OverflowError
            Where numpy raises them (bad index; value that cannot be cast or
            broadcast to the selection).
        xarray_vhdf5.errors.UnsupportedError
            See :meth:`__getitem__`.
        xarray_vhdf5.errors.ClosedFileError, xarray_vhdf5.errors.HDF5Error
            Reading a partially selected chunk from a base slab failed; the
            array is left unchanged.
        """
        mapping = map_index(idx, self._shape, self._chunk_size)
        value = self._normalised_value(value, mapping)
        plan = SetItemPlan(
            mapping,
            self._slab_indices,
            self._slab_offsets,
            self._chunk_size,
            len(self._slabs),
            self._n_base,
            self._refcounts,
        )
        self._execute(plan, value)

    def resize(self, shape: Sequence[int]) -> None:
        """Change the shape in place; new points get the fill value.

        ``staged_changes.rst``, "``resize()`` algorithm": shrinking moves no
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

        ``staged_changes.rst``, "``load()`` algorithm".  Afterwards no base slab
        is referenced (all are dropped, "Reclaiming memory").

        Raises
        ------
        xarray_vhdf5.errors.ClosedFileError, xarray_vhdf5.errors.HDF5Error
            Reading a base slab failed; the array is left unchanged.
        """
        self._execute(self._load_plan())

    def copy(self) -> StagedChangesArray:
        """A copy-on-write copy: no data is copied until either side writes.

        ``staged_changes.rst``, "Copy-on-Write (CoW) mechanics": staged slabs
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
                self._slabs[i] = _readonly(slab)
        new._slabs = list(self._slabs)
        new._lazy = list(self._lazy)
        self._slab_indices = _readonly(self._slab_indices)
        self._slab_offsets = _readonly(self._slab_offsets)
        new._slab_indices = self._slab_indices
        new._slab_offsets = self._slab_offsets
        new._refcounts = self._refcounts.copy()
        return new

    def astype(
        self, dtype: Any, casting: str = "unsafe", base_slabs: Sequence[Any] | None = None
    ) -> StagedChangesArray:
        """A copy of another dtype; staged slabs are converted on first access.

        ``staged_changes.rst``, "Copy-on-Write (CoW) mechanics" and
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
            read).  Without it, every chunk on a base slab is loaded into
            memory now (:meth:`load`) and converted later with numpy.

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
                f"Cannot cast array data from {self._dtype!r} to {dtype!r} according to the "
                f"rule {casting!r}"
            )
        new = self.copy()
        if base_slabs is None:
            if dtype == self._dtype:
                return new
            new.load()
        else:
            base_slabs = list(base_slabs)
            if len(base_slabs) != self._n_base:
                raise IncompatibleDataError(
                    f"astype() needs {self._n_base} base slabs, got {len(base_slabs)}"
                )
            for i, (old, repl) in enumerate(zip(self._slabs[1 : 1 + self._n_base], base_slabs)):
                if old is None:
                    continue
                if tuple(getattr(repl, "shape", ())) != tuple(old.shape) or np.dtype(
                    getattr(repl, "dtype", None)
                ) != dtype:
                    raise IncompatibleDataError(
                        f"base_slabs[{i}] must have shape {tuple(old.shape)} and dtype {dtype}; "
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

    def refill(self, fill_value: Any) -> StagedChangesArray:
        """A copy with another fill value: every point equal to the old one changes too.

        Chunks still on base slabs are loaded into memory first; staged slabs
        are rewritten on first access.

        Raises
        ------
        xarray_vhdf5.errors.IncompatibleDataError
            ``fill_value`` cannot be stored in :attr:`dtype`.
        """
        fill = _fill_array(fill_value, self._dtype)
        new = self.copy()
        if _same_fill(fill, self._fill):
            return new
        new.load()
        step = ("refill", self._fill, fill)
        for i in range(1 + self._n_base, len(new._slabs)):
            if new._slabs[i] is not None:
                new._lazy[i] = (*(new._lazy[i] or ()), step)
        new._fill = fill
        new._slabs[0] = np.broadcast_to(fill, self._chunk_size)
        return new

    def changed_chunks(self) -> Iterator[tuple[ChangedChunk, np.ndarray]]:
        """The chunks that differ from the base state, with their data.

        Yields
        ------
        chunk : ChangedChunk
            See :class:`~xarray_vhdf5.staging.plans.ChangesPlan`.
        data : numpy.ndarray
            Read-only view of the chunk's points (trimmed at the edges);
            for chunks on the full slab, a broadcast of the fill value.
        """
        for c in self._changes_plan():
            slab = self._source(c.slab)
            yield c, _readonly(np.asarray(slab[c.in_slab + (Ellipsis,)]))
