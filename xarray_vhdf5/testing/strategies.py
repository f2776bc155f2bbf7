"""Hypothesis strategies for shapes, chunkings, dtypes, indices, values, edits and Datasets.

Shipped with the package (like ``zarr.testing``) so that every test module
and downstream project draws from the same distributions.  They favour the
cases that break chunked code: zero-length axes, edge chunks (shapes not
divisible by the chunk size), chunk size 1, negative steps, unsorted integer
arrays with duplicates, empty selections.

Data is drawn from a seeded numpy generator (``st.integers`` -> seed)
rather than element by element: hypothesis still shrinks the structure
(shapes, indices, operations) and examples stay fast.

``tests/test_strategies.py`` checks the contract each strategy states here
(chunks within their bounds, indices valid for their shape, values that fit
their dtype, edits valid in order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from hypothesis import strategies as st

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "DTYPES",
    "NUMERIC_DTYPES",
    "SAFE_CASTS",
    "array_indices",
    "basic_indices",
    "chunked_shapes",
    "data_for",
    "datasets",
    "dtypes",
    "edit_sequences",
    "fill_values",
    "h5py_indices",
    "indices",
    "numeric_dtypes",
    "outer_indices",
    "point_edits",
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

#: Numeric dtypes every reader and writer (zarr, netCDF, versioned-hdf5) stores alike.
NUMERIC_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(d) for d in ("f4", "f8", "i2", "i4", "i8", "u1"))

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


def numeric_dtypes() -> st.SearchStrategy[np.dtype]:
    """One of :data:`NUMERIC_DTYPES` (native byte order: floats, signed and unsigned integers)."""
    return st.sampled_from(NUMERIC_DTYPES)


def rngs() -> st.SearchStrategy[np.random.Generator]:
    """A seeded :class:`numpy.random.Generator`."""
    return st.integers(0, 2**32 - 1).map(np.random.default_rng)


def _iroot(x: int, k: int) -> int:
    """The largest integer ``r`` with ``r**k <= x`` (``x >= 0``, ``k >= 1``), exact for any size."""
    r = round(x ** (1 / k))
    while r > 0 and r**k > x:
        r -= 1
    while (r + 1) ** k <= x:
        r += 1
    return r


@st.composite
def chunked_shapes(
    draw: st.DrawFn,
    *,
    min_ndim: int = 0,
    max_ndim: int = 4,
    max_points: int | None = 600,
    min_side: int = 0,
    max_side: int = 13,
    max_chunk: int | None = 6,
    chunk_overhang: int | None = 2,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(shape, chunk_size)``: zero-length axes, edge chunks, chunk size 1.

    Parameters
    ----------
    min_ndim, max_ndim : int
        Bounds on the number of axes (0-4 by default).
    max_points : int or None
        Each axis is kept short enough that the total number of points
        stays at most ``max_points`` (unless ``min_side`` forces more);
        ``None``: no bound but ``max_side``.
    min_side, max_side : int
        Bounds on each axis's length, in points.
    max_chunk : int or None
        Bound on each chunk's length, in points (``None``: none).
    chunk_overhang : int or None
        How far a chunk may be longer than its axis: the chunk length is at
        most ``side + chunk_overhang`` (0: chunks within the axis, the
        h5py rule for fixed-size datasets; ``None``: no such bound).
        ``max_chunk`` and ``chunk_overhang`` cannot both be ``None``.

    Returns
    -------
    tuple of tuple of int
        ``shape`` and ``chunk_size``, both of the same length, every chunk
        length at least 1 (also on zero-length axes).

    Raises
    ------
    ValueError
        When drawn, if ``max_chunk`` and ``chunk_overhang`` are both ``None``.
    """
    if max_chunk is None and chunk_overhang is None:
        raise ValueError("chunked_shapes: give max_chunk or chunk_overhang (or both), else chunks are unbounded")
    ndim = draw(st.integers(min_ndim, max_ndim))
    shape: list[int] = []
    chunks: list[int] = []
    budget = max_points
    for _ in range(ndim):
        side_max = max_side
        if budget is not None:
            side_max = max(1, min(max_side, _iroot(budget, max(1, ndim - len(shape)))))
        n = draw(st.integers(min_side, max(min_side, side_max)))
        bounds = [b for b in (max_chunk, None if chunk_overhang is None else n + chunk_overhang) if b is not None]
        c = draw(st.integers(1, max(1, min(bounds))))
        shape.append(n)
        chunks.append(c)
        if budget is not None:
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


def data_for(
    rng: np.random.Generator,
    shape: Sequence[int],
    dtype: np.dtype,
    fill_value: Any = None,
    *,
    full_range: bool = False,
) -> np.ndarray:
    """Random data of ``shape`` and ``dtype``; about 1 point in 4 equals ``fill_value``.

    Parameters
    ----------
    rng : numpy.random.Generator
        Where the values come from (see :func:`rngs`).
    shape : sequence of int
        The shape of the result.
    dtype : numpy.dtype
        Booleans, integers, floats, complex, fixed-width bytes (``S``),
        ``object`` (bytes) or a structured dtype of these (each field drawn
        on its own).
    fill_value : scalar, optional
        If given, about a quarter of the points are set to it.
    full_range : bool
        ``False`` (default): small values exact in every dtype and every
        conversion: integers in ``[0, 100)``, floats are halves in
        ``[-10, 10)``, bytes one of ``b"", b"a", b"bc", b"d"``.  ``True``:
        values that exercise every byte: integers over the whole range of
        ``dtype`` (``numpy.iinfo``), standard-normal floats, bytes of
        ``itemsize`` random lowercase letters.

    Returns
    -------
    numpy.ndarray
        ``shape``, ``dtype``, C-contiguous, writeable; every value fits
        ``dtype`` (no overflow, no truncation).
    """
    shape = tuple(shape)
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.intp))
    if dtype.names:
        out = np.empty(shape, dtype)
        for name in dtype.names:
            out[name] = data_for(rng, shape, dtype[name], full_range=full_range)
    else:
        out = np.asarray(_flat_values(rng, size, dtype, full_range), dtype=dtype).reshape(shape)
    if fill_value is not None and size:
        out[rng.random(shape) < 0.25] = fill_value
    return out


def _flat_values(rng: np.random.Generator, size: int, dtype: np.dtype, full_range: bool) -> np.ndarray:
    if dtype.kind in "fc":
        if full_range:
            return rng.standard_normal(size).astype(dtype)
        return (rng.integers(-20, 20, size=size) / 2).astype(dtype)
    if dtype.kind in "iu":
        if full_range:
            info = np.iinfo(dtype)
            return rng.integers(info.min, info.max, size=size, endpoint=True, dtype=dtype.newbyteorder("="))
        return rng.integers(0, 100, size=size).astype(dtype)
    if dtype.kind == "b":
        return rng.random(size) < 0.5
    if dtype.kind == "S" and full_range:
        return rng.integers(97, 123, size=(size, dtype.itemsize), dtype=np.uint8).view(dtype).reshape(size)
    if dtype.kind == "S" or dtype.hasobject:
        letters = np.array([b"", b"a", b"bc", b"d"], dtype=object)
        return letters[rng.integers(0, len(letters), size=size)].astype(dtype)
    raise NotImplementedError(dtype)


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
def outer_indices(draw: st.DrawFn, shape: Sequence[int]) -> tuple:
    """An outer index of ``shape`` with at most one integer array (xarray's ``OUTER_1VECTOR``).

    Parameters
    ----------
    shape : sequence of int
        The shape indexed; zero-length axes get slices or empty arrays only.

    Returns
    -------
    tuple
        One element per axis: an ``int`` in ``[-n, n)``, a ``slice`` of any
        step (bounds up to 2 points beyond the axis, either sign) or, on at
        most one axis, a 1-d ``numpy.intp`` array of up to ``2 * n``
        elements in ``[-n, n)``, either unsorted with duplicates or sorted
        and unique (in ``[0, n)``, the form libhdf5 reads).
    """
    vector = draw(st.none() | st.integers(0, len(shape) - 1)) if len(shape) else None
    key: list[Any] = []
    for axis, n in enumerate(shape):
        if axis == vector and not n:
            key.append(np.array([], np.intp))
        elif axis == vector:
            sorted_unique = draw(st.booleans())
            values = np.array(draw(st.lists(st.integers(-n, n - 1), max_size=2 * n)), np.intp)
            key.append(np.unique(values % n) if sorted_unique else values)
        elif n and draw(st.integers(0, 3)) == 0:
            key.append(draw(_integers(n)))
        else:
            key.append(draw(_slices(n)))
    return tuple(key)


@st.composite
def h5py_indices(draw: st.DrawFn, shape: Sequence[int], *, max_step: int = 2) -> tuple:
    """A non-empty selection of ``shape`` that h5py reads and writes alike (no negative steps).

    Parameters
    ----------
    shape : sequence of int
        The shape indexed; every axis must be at least 1 long.
    max_step : int
        Slices step by 1 to ``max_step``.

    Returns
    -------
    tuple
        One element per axis: an ``int`` in ``[-n, n)`` (one time in four),
        a ``slice(lo, hi, step)`` with ``0 <= lo < hi <= n``, or, on at most
        one axis, a boolean mask of length ``n`` or a strictly increasing
        ``numpy.intp`` array in ``[0, n)``, either selecting at least one
        point.

    Raises
    ------
    ValueError
        If an axis of ``shape`` is 0 long (nothing to select).
    """
    if not all(shape):
        raise ValueError(f"h5py_indices: every axis of shape {tuple(shape)} must be at least 1 long")
    fancy_axis = draw(st.integers(-1, len(shape) - 1))
    index: list[Any] = []
    for axis, n in enumerate(shape):
        if axis == fancy_axis:
            mask = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            if not mask.any():
                mask[draw(st.integers(0, n - 1))] = True
            index.append(mask if draw(st.booleans()) else np.flatnonzero(mask).astype(np.intp))
        elif draw(st.integers(0, 3)) == 0:
            index.append(draw(_integers(n)))
        else:
            lo = draw(st.integers(0, n - 1))
            hi = draw(st.integers(lo + 1, n))
            index.append(slice(lo, hi, draw(st.integers(1, max_step))))
    return tuple(index)


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


def point_edits(
    n: int, values: Sequence[Any] | st.SearchStrategy[Any], *, min_size: int = 0, max_size: int = 8
) -> st.SearchStrategy[dict[int, Any]]:
    """Point writes into a 1-d array of ``n`` points: ``{position: value}``.

    Parameters
    ----------
    n : int
        The array's length; positions are in ``[0, n)``, each at most once.
    values : sequence or strategy
        The values written (a sequence is sampled from).
    min_size, max_size : int
        Bounds on the number of points written.
    """
    elements = values if isinstance(values, st.SearchStrategy) else st.sampled_from(list(values))
    return st.dictionaries(st.integers(0, n - 1), elements, min_size=min_size, max_size=max_size)


@st.composite
def edit_sequences(
    draw: st.DrawFn,
    shapes: Mapping[str, Sequence[int]],
    values: Sequence[Any] | Mapping[str, Sequence[Any]],
    *,
    max_edits: int = 4,
    max_width: int = 3,
    resize_one_in: int = 5,
    resize_axes: Sequence[int] | None = None,
    max_side: int = 7,
    max_growth: int | None = None,
) -> list[tuple]:
    """Edits of named arrays, each valid on the shapes the edits before it leave.

    Parameters
    ----------
    shapes : mapping of str to sequence of int
        The arrays edited, by name, and their shapes before the first edit.
    values : sequence, or mapping of str to sequence
        The values written (per array name if a mapping), sampled from.
    max_edits : int
        Between 0 and ``max_edits`` edits are drawn; a write drawn while
        the chosen array has a zero-length axis is dropped, so fewer may
        come back.
    max_width : int
        A write covers 1 to ``max_width`` points along each axis, within
        the array's current shape (one chunk or several).
    resize_one_in : int
        About one edit in ``resize_one_in`` is a resize; 0: none.
    resize_axes : sequence of int, optional
        The axes a resize changes (default: all); the others keep their length.
    max_side : int
        A resized axis gets a length in ``[0, max_side]`` ...
    max_growth : int, optional
        ... and, if given, at most ``max_growth`` more than it had.

    Returns
    -------
    list of tuple
        ``("set", name, region, value)`` with ``region`` a tuple of
        ``slice(lo, hi)`` (``0 <= lo < hi <= n``, step ``None``), or
        ``("resize", name, new_shape)`` with ``new_shape`` a tuple of int.
    """
    current = {k: tuple(v) for k, v in shapes.items()}
    edits: list[tuple] = []
    for _ in range(draw(st.integers(0, max_edits))):
        name = draw(st.sampled_from(sorted(current)))
        shape = current[name]
        if resize_one_in and draw(st.integers(0, resize_one_in - 1)) == 0:
            axes = range(len(shape)) if resize_axes is None else resize_axes
            new = list(shape)
            for a in axes:
                top = max_side if max_growth is None else min(max_side, shape[a] + max_growth)
                new[a] = draw(st.integers(0, max(0, top)))
            current[name] = tuple(new)
            edits.append(("resize", name, current[name]))
            continue
        if 0 in shape:
            continue
        region = []
        for n in shape:
            lo = draw(st.integers(0, n - 1))
            hi = draw(st.integers(lo + 1, min(n, lo + max_width)))
            region.append(slice(lo, hi))
        pool = values[name] if isinstance(values, Mapping) else values
        edits.append(("set", name, tuple(region), draw(st.sampled_from(list(pool)))))
    return edits


@st.composite
def datasets(
    draw: st.DrawFn,
    *,
    max_vars: int = 3,
    min_ndim: int = 0,
    max_ndim: int = 3,
    max_points: int = 200,
    min_first_side: int = 0,
    dtype: st.SearchStrategy[np.dtype] | None = None,
    fill_value: bool = True,
    chunk_key: str = "chunksizes",
) -> tuple[xr.Dataset, dict[str, dict[str, Any]]]:
    """An ``xarray.Dataset`` of 1 to ``max_vars`` chunked variables, and its encoding.

    Dimension names come from :func:`xarray.testing.strategies.names`
    (letters and digits, not only ASCII), unique over the Dataset, so no
    two variables share a dimension; variables are ``v0``, ``v1`` ... and
    have a ``units`` attribute; the Dataset has ``title`` (str) and
    ``drawn`` (int) attributes.

    Parameters
    ----------
    max_vars : int
        At most this many variables (at least one).
    min_ndim, max_ndim, max_points : int
        Each variable's shape and chunks, as :func:`chunked_shapes` draws
        them (edge chunks, zero-length axes, chunk size 1).
    min_first_side : int
        Every variable's first axis is at least this long (1: something to
        append along); variables get at least one axis then.
    dtype : strategy of numpy.dtype, optional
        Each variable's dtype (default :func:`dtypes`).
    fill_value : bool
        Whether variables of integer and float dtypes get a ``_FillValue``
        (:func:`fill_values`) in their encoding, which about a quarter of
        their points equal.
    chunk_key : str
        The encoding key the chunks go under: ``"chunksizes"`` (netCDF,
        our engine) or ``"chunks"`` (zarr).  0-d variables get none.

    Returns
    -------
    dataset : xarray.Dataset
        Values from :func:`data_for` (small, exact in every dtype).
    encoding : dict of str to dict
        Per variable: the chunks and maybe ``_FillValue``, to pass as
        ``encoding=`` or to put into each variable's ``.encoding``.
    """
    import xarray as xr
    from xarray.testing.strategies import dimension_names, names

    dtype = dtypes() if dtype is None else dtype
    min_ndim = max(min_ndim, 1 if min_first_side else 0)
    layouts = draw(
        st.lists(
            chunked_shapes(min_ndim=min_ndim, max_ndim=max_ndim, max_points=max_points).filter(
                lambda sc: not sc[0] or sc[0][0] >= min_first_side
            ),
            min_size=1,
            max_size=max_vars,
        )
    )
    n_dims = sum(len(shape) for shape, _ in layouts)
    not_a_variable = names().filter(lambda s: not (s[0] == "v" and s[1:].isdigit()))
    dims = iter(draw(dimension_names(name_strategy=not_a_variable, min_dims=n_dims, max_dims=n_dims)))
    variables: dict[str, Any] = {}
    encoding: dict[str, dict[str, Any]] = {}
    for i, (shape, chunks) in enumerate(layouts):
        name = f"v{i}"
        dt = draw(dtype)
        fill = draw(fill_values(dt)) if fill_value and dt.kind in "fiu" else None
        data = data_for(draw(rngs()), shape, dt, fill)
        variables[name] = (tuple(next(dims) for _ in shape), data, {"units": f"u{i}"})
        encoding[name] = {chunk_key: chunks} if shape else {}
        if fill is not None:
            encoding[name]["_FillValue"] = fill
    return xr.Dataset(variables, attrs={"title": "drawn", "drawn": 1}), encoding
