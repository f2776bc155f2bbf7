"""Construction of a :class:`~xarray_vhdf5._staging.array.StagedChangesArray`: layouts and checks.

versioned-hdf5's ``staged_changes.rst``, "Staging changes in memory": the metadata arrays
``slab_indices`` (``numpy.intp``) and ``slab_offsets`` (``numpy.uint64``,
points along axis 0) hold one point per chunk; slab 0 is the full slab, base
slabs follow.  The transfers trust this metadata (no bounds checks in C), so
everything is validated here, once, when an array is built:

- :func:`as_shape`, :func:`check_chunking`: shapes and chunk sizes;
- :func:`metadata_arrays`, :func:`check_base_slabs`: the metadata against the
  chunk grid and the base slabs;
- :func:`fill_array` and friends: the fill value as a 0-d array of the dtype;
- :func:`column_slabs`, :func:`packed_slab`: the layouts of
  :meth:`~xarray_vhdf5._staging.array.StagedChangesArray.from_array`.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, NamedTuple

import h5py
import numpy as np

from .._backend.chunks import chunk_extents, chunk_slices, padded_shape
from .._backend.chunks import chunk_grid_shape as grid_of
from ..errors import IncompatibleDataError
from ._plan_base import slab_shape

__all__ = [
    "ArrayState",
    "BaseState",
    "as_shape",
    "check_base_slabs",
    "check_chunking",
    "column_slabs",
    "default_dtype",
    "fill_array",
    "fill_mask",
    "grid_of",
    "metadata_arrays",
    "packed_slab",
    "readonly",
    "same_fill",
]


class BaseState(NamedTuple):
    """The state the array was built with, against which changes are measured."""

    shape: tuple[int, ...]
    slab_indices: np.ndarray  # read-only
    slab_offsets: np.ndarray  # read-only
    dtype: np.dtype
    fill_value: np.ndarray  # 0-d


class ArrayState:
    """The state of a ``StagedChangesArray``, declared for its mixins.

    Annotations only: ``StagedChangesArray._setup`` sets every attribute; the
    mixins (:mod:`.attributes`, :mod:`.cow`) read and replace them, and call
    the methods declared under ``TYPE_CHECKING``, which other classes of the
    array define.
    """

    _shape: tuple[int, ...]
    _chunk_size: tuple[int, ...]
    _dtype: np.dtype
    _fill: np.ndarray  # 0-d, of _dtype
    _n_base: int  # base slabs are _slabs[1 : 1 + _n_base]
    _slabs: list[Any]  # full, base, staged; None where dropped
    _lazy: list[tuple | None]  # pending conversions of each slab
    _slab_indices: np.ndarray  # intp, shape n_chunks
    _slab_offsets: np.ndarray  # intp, shape n_chunks, in points along axis 0
    _refcounts: np.ndarray  # intp, one per slab
    _base: BaseState

    if TYPE_CHECKING:

        def __getitem__(self, idx: Any) -> Any: ...

        def load(self) -> None: ...

        def _materialize(self, i: int) -> np.ndarray: ...


def readonly(arr: np.ndarray) -> np.ndarray:
    view = arr.view()
    view.flags.writeable = False
    return view


def as_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers, got {shape!r}") from None
    return out


def default_fill(dtype: np.dtype) -> np.ndarray:
    if dtype.hasobject:
        info = h5py.check_string_dtype(dtype)
        return np.array(b"" if info is not None else None, dtype=dtype)
    return np.zeros((), dtype=dtype)


def fill_array(fill_value: Any, dtype: np.dtype) -> np.ndarray:
    if fill_value is None:
        return default_fill(dtype)
    try:
        return np.array(fill_value, dtype=dtype).reshape(())
    except (TypeError, ValueError, OverflowError) as exc:
        raise IncompatibleDataError(f"fill_value {fill_value!r} cannot be stored as {dtype}: {exc}") from None


def same_fill(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(a == b or (np.isnan(a) and np.isnan(b)))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a.tobytes() == b.tobytes()


def fill_mask(slab: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """Points of ``slab`` equal to ``fill`` (NaN matches NaN)."""
    mask = np.asarray(slab == fill[()])
    if mask.shape != slab.shape:  # comparison not elementwise (exotic object)
        mask = np.zeros(slab.shape, dtype=bool)
    if slab.dtype.kind in "fc" and np.isnan(fill):
        mask = np.isnan(slab)
    return mask


def check_chunking(shape: tuple[int, ...], chunk_size: tuple[int, ...]) -> None:
    """Raise :class:`IncompatibleDataError` unless ``chunk_size`` fits ``shape``.

    One chunk length ``>= 1`` per axis; lengths of ``shape`` ``>= 0``.
    """
    if len(chunk_size) != len(shape):
        raise IncompatibleDataError(f"chunk_size {chunk_size} must have one entry per axis of shape {shape}")
    if any(n < 0 for n in shape):
        raise IncompatibleDataError(f"shape {shape} has negative lengths")
    if any(c < 1 for c in chunk_size):
        raise IncompatibleDataError(f"chunk_size {chunk_size} must be >= 1 on every axis")


def default_dtype(dtype: Any, base_slabs: list[Any], fill_value: Any) -> np.dtype:
    """``dtype``, else that of the first base slab, else of ``fill_value``, else float64."""
    if dtype is not None:
        return np.dtype(dtype)
    if base_slabs:
        return np.dtype(base_slabs[0].dtype)
    if fill_value is not None:
        return np.asarray(fill_value).dtype
    return np.dtype(np.float64)


def metadata_arrays(
    slab_indices: Any, slab_offsets: Any, shape: tuple[int, ...], chunk_size: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """C-contiguous copies of ``slab_indices`` (intp) and ``slab_offsets`` (uint64).

    Raises
    ------
    xarray_vhdf5.errors.IncompatibleDataError
        Not integers, or not one point per chunk.
    """
    grid = grid_of(shape, chunk_size)
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
    return si, so


def check_base_slabs(
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
            raise IncompatibleDataError(f"base_slabs[{i - 1}] has shape {sshape}, expected {ndim} dimensions")
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
        for a, ext in enumerate(chunk_extents(coords, shape, chunk_size)):
            end = ext + (so[on].astype(np.int64) if a == 0 else 0)
            if end.max() > sshape[a]:
                j = int(end.argmax())
                chunk = tuple(int(c[j]) for c in coords)
                raise IncompatibleDataError(
                    f"chunk {chunk} reaches beyond base_slabs[{i - 1}] (shape {sshape}) "
                    f"along axis {a}: it needs {int(end[j])} points"
                )


def column_slabs(arr: np.ndarray, chunk_size: tuple[int, ...]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """``arr`` as read-only base slabs, one per column of chunks, without copying.

    Column ``j`` (a chunk index along axes 1 and up) is the view
    ``arr[:, j1*c1:(j1+1)*c1, ...]`` (trimmed at the edges); chunk ``(i, j)``
    lies at offset ``i * chunk_size[0]`` of it.  Returns ``(slabs,
    slab_indices, slab_offsets)``; no slab for an array without chunks.
    """
    grid = grid_of(arr.shape, chunk_size)
    si = np.zeros(grid, dtype=np.intp)
    so = np.zeros(grid, dtype=np.uint64)
    slabs: list[np.ndarray] = []
    if not all(grid):
        return slabs, si, so
    if arr.ndim == 0:
        si[()] = 1
        return [readonly(arr)], si, so
    rows = np.arange(grid[0], dtype=np.uint64) * np.uint64(chunk_size[0])
    for col, j in enumerate(np.ndindex(*grid[1:]), start=1):
        view = arr[(slice(None), *chunk_slices(j, arr.shape[1:], chunk_size[1:]))]
        slabs.append(readonly(view))
        si[(slice(None), *j)] = col
        so[(slice(None), *j)] = rows
    return slabs, si, so


def packed_slab(arr: np.ndarray, chunk_size: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A copy of ``arr`` as one slab of all its chunks in C order, and their offsets.

    Edge chunks are padded (uninitialised points).  Returns ``(slab,
    slab_offsets)``; for a 0-d array the slab is a 0-d copy.
    """
    if arr.ndim == 0:
        return np.array(arr, copy=True), np.zeros((), dtype=np.uint64)
    grid = grid_of(arr.shape, chunk_size)
    n_chunks = int(np.prod(grid, dtype=np.intp))
    full = padded_shape(arr.shape, chunk_size)
    if full == arr.shape:
        padded = arr
    else:
        padded = np.empty(full, dtype=arr.dtype)
        padded[tuple(slice(0, n) for n in arr.shape)] = arr
    split = [x for g, c in zip(grid, chunk_size) for x in (g, c)]
    ndim = arr.ndim
    order = list(range(0, 2 * ndim, 2)) + list(range(1, 2 * ndim, 2))
    chunks = padded.reshape(split).transpose(order)
    slab = np.ascontiguousarray(chunks).reshape(slab_shape(n_chunks, chunk_size))
    so = (np.arange(n_chunks, dtype=np.uint64) * np.uint64(chunk_size[0])).reshape(grid)
    return slab, np.ascontiguousarray(so)
