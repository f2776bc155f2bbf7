"""Hypothesis strategies for array shapes, chunkings, dtypes, indices and values.

Shipped with the package (like ``zarr.testing``) so that every test module
and downstream project draws from the same distributions.  They favour the
cases that break chunked code: zero-length axes, edge chunks (shapes not
divisible by the chunk size), chunk size 1, negative steps, unsorted integer
arrays with duplicates, empty selections.

Data is drawn from a seeded numpy generator (``st.integers`` -> seed)
rather than element by element: hypothesis still shrinks the structure
(shapes, indices, operations) and examples stay fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = [
    "DTYPES",
    "SAFE_CASTS",
    "array_indices",
    "basic_indices",
    "chunked_shapes",
    "data_for",
    "dtypes",
    "fill_values",
    "indices",
    "resize_shapes",
    "rngs",
    "setitem_values",
]

#: Fixed-size dtypes exercised by default (all storable in HDF5).
DTYPES: tuple[np.dtype, ...] = (
    np.dtype("f8"),
    np.dtype("f4"),
    np.dtype("i2"),
    np.dtype("u1"),
    np.dtype(bool),
    np.dtype("S3"),
    np.dtype("c16"),
)

#: ``astype`` targets whose conversion numpy and libhdf5 agree on for the
#: values drawn by :func:`data_for` (safe casts).
SAFE_CASTS: dict[np.dtype, tuple[np.dtype, ...]] = {
    np.dtype("f8"): (np.dtype("f4"),),
    np.dtype("f4"): (np.dtype("f8"),),
    np.dtype("i2"): (np.dtype("i4"), np.dtype("f8")),
    np.dtype("u1"): (np.dtype("i2"), np.dtype("f4")),
    np.dtype(bool): (np.dtype("u1"),),
    np.dtype("S3"): (np.dtype("S5"),),
    np.dtype("c16"): (),
    np.dtype("O"): (),
}


def dtypes(*, object_dtype: bool = False) -> st.SearchStrategy[np.dtype]:
    """One of :data:`DTYPES`, or also ``object`` (byte strings) if ``object_dtype``."""
    choices = list(DTYPES) + ([np.dtype("O")] if object_dtype else [])
    return st.sampled_from(choices)


def rngs() -> st.SearchStrategy[np.random.Generator]:
    """A seeded :class:`numpy.random.Generator`."""
    return st.integers(0, 2**32 - 1).map(np.random.default_rng)


@st.composite
def chunked_shapes(
    draw: st.DrawFn,
    *,
    min_ndim: int = 0,
    max_ndim: int = 4,
    max_points: int = 600,
    max_side: int = 13,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(shape, chunk_size)``: 0-4 axes, zero-length axes, edge chunks, chunk size 1.

    The total number of points stays below ``max_points``.
    """
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape: list[int] = []
    chunks: list[int] = []
    budget = max_points
    for _ in range(ndim):
        side_max = max(1, min(max_side, int(budget ** (1 / max(1, ndim - len(shape))))))
        n = draw(st.integers(0, side_max))
        c = draw(st.integers(1, max(1, min(n + 2, 6))))
        shape.append(n)
        chunks.append(c)
        budget = max(1, budget // max(1, n))
    return tuple(shape), tuple(chunks)


def fill_values(dtype: np.dtype) -> st.SearchStrategy[Any]:
    """A fill value of ``dtype`` (a small distinct set, so that it also occurs in data)."""
    if dtype.kind == "f" or dtype.kind == "c":
        return st.sampled_from([0.0, 1.5, -3.0, float("nan")]).map(lambda v: np.array(v, dtype)[()])
    if dtype.kind in "iu":
        return st.sampled_from([0, 1, 7]).map(lambda v: np.array(v, dtype)[()])
    if dtype.kind == "b":
        return st.sampled_from([False, True]).map(np.bool_)
    if dtype.kind == "S":
        return st.sampled_from([b"", b"x", b"ab"]).map(lambda v: np.array(v, dtype)[()])
    if dtype.hasobject:
        return st.sampled_from([b"", b"fill"])
    raise NotImplementedError(dtype)


def data_for(rng: np.random.Generator, shape: Sequence[int], dtype: np.dtype, fill_value: Any = None) -> np.ndarray:
    """Random data of ``shape`` and ``dtype``; about 1 point in 4 equals ``fill_value``.

    Floats are small integers and halves (exact in every float dtype and in
    HDF5 conversions); strings are short random letters.
    """
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.intp))
    if dtype.kind in "fc":
        flat = (rng.integers(-20, 20, size=size) / 2).astype(dtype)
    elif dtype.kind in "iu":
        flat = rng.integers(0, 100, size=size).astype(dtype)
    elif dtype.kind == "b":
        flat = rng.random(size) < 0.5
    elif dtype.kind == "S" or dtype.hasobject:
        letters = np.array([b"", b"a", b"bc", b"d"], dtype=object)
        flat = letters[rng.integers(0, len(letters), size=size)].astype(dtype)
    else:
        raise NotImplementedError(dtype)
    out = np.asarray(flat, dtype=dtype).reshape(shape)
    if fill_value is not None and size:
        out[rng.random(shape) < 0.25] = fill_value
    return out


def _slices(n: int) -> st.SearchStrategy[slice]:
    bound = st.one_of(st.none(), st.integers(-n - 2, n + 2))
    step = st.one_of(st.none(), st.integers(-4, 4).filter(bool))
    return st.builds(slice, bound, bound, step)


def _integers(n: int) -> st.SearchStrategy[int]:
    return st.integers(-n, n - 1)


@st.composite
def array_indices(draw: st.DrawFn, n: int) -> np.ndarray:
    """For an axis of ``n``: a 1-d integer array (unsorted, duplicates, negatives) or a mask."""
    if draw(st.booleans()):
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if n == 0:
        return np.array([], dtype=np.intp)
    values = draw(st.lists(st.integers(-n, n - 1), max_size=6))
    return np.array(values, dtype=np.intp)


@st.composite
def basic_indices(draw: st.DrawFn, shape: Sequence[int]) -> tuple:
    """A tuple of integers and slices (any step), maybe with one Ellipsis, maybe short."""
    return draw(indices(shape, arrays=False))


@st.composite
def indices(draw: st.DrawFn, shape: Sequence[int], *, arrays: bool = True) -> Any:
    """Any index :func:`~xarray_vhdf5._staging.map_index` supports, valid for ``shape``.

    Per axis an integer, a slice or (on at most one axis, if ``arrays``) an
    integer / boolean array; sometimes one Ellipsis, sometimes fewer
    elements than axes, sometimes not a tuple.
    """
    ndim = len(shape)
    array_axis = draw(st.integers(-1, ndim - 1)) if arrays and ndim else -1
    elems: list[Any] = []
    for a, n in enumerate(shape):
        if a == array_axis:
            elems.append(draw(array_indices(n)))
        elif n and draw(st.integers(0, 3)) == 0:
            elems.append(draw(_integers(n)))
        else:
            elems.append(draw(_slices(n)))
    style = draw(st.integers(0, 4))
    if style == 1 and ndim:
        # Replace a run of full slices by an Ellipsis.
        lo = draw(st.integers(0, ndim))
        hi = draw(st.integers(lo, ndim))
        if all(isinstance(e, slice) and e == slice(None) for e in elems[lo:hi]) or lo == hi:
            elems = [*elems[:lo], Ellipsis, *elems[hi:]]
    elif style == 2:
        # Drop trailing full slices.
        while elems and isinstance(elems[-1], slice) and elems[-1] == slice(None):
            elems.pop()
    if len(elems) == 1 and draw(st.booleans()):
        return elems[0]
    return tuple(elems)


@st.composite
def setitem_values(
    draw: st.DrawFn,
    rng: np.random.Generator,
    target_shape: Sequence[int],
    dtype: np.dtype,
    fill_value: Any = None,
) -> Any:
    """A value numpy broadcasts into a selection of ``target_shape``.

    The full shape, a trailing sub-shape, unit axes, an extra leading unit
    axis, or a scalar.
    """
    target_shape = tuple(target_shape)
    kind = draw(st.integers(0, 4))
    if kind == 0 or not target_shape:
        shape = target_shape
    elif kind == 1:
        shape = ()
    elif kind == 2:
        k = draw(st.integers(0, len(target_shape)))
        shape = target_shape[k:]
    elif kind == 3:
        shape = tuple(1 if draw(st.booleans()) else n for n in target_shape)
    else:
        shape = (1, *target_shape)
    value = data_for(rng, shape, dtype, fill_value)
    if not shape and draw(st.booleans()):
        return value[()]
    return value


@st.composite
def resize_shapes(
    draw: st.DrawFn, shape: Sequence[int], *, max_side: int = 13, max_points: int = 900
) -> tuple[int, ...]:
    """A new shape of the same ndim: each axis kept, shrunk (maybe to 0) or enlarged."""
    out = []
    for n in shape:
        near = st.sampled_from([n, 0, max(0, n - 1), n + 1, n + 3])
        out.append(draw(near | st.integers(0, max_side)))
    while out and int(np.prod(out)) > max_points:
        i = int(np.argmax(out))
        out[i] //= 2
    return tuple(out)
