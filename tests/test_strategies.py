"""The contracts of the shared strategies in :mod:`xarray_vhdf5.testing.strategies`.

Each test draws from one strategy and checks what its docstring promises:
chunks within their bounds and covering the shape, indices valid for their
shape (numpy and h5py as the judges), values that fit their dtype, edits valid
in the order they come.
"""

from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xarray_vhdf5.testing import strategies as vst

CHUNKED_SHAPES_KWARGS = [
    {},
    {"min_ndim": 1, "max_ndim": 2, "max_points": None, "max_side": 6, "max_chunk": 3, "chunk_overhang": None},
    {"min_ndim": 1, "max_ndim": 3, "max_points": None, "min_side": 1, "max_side": 24, "max_chunk": None,
     "chunk_overhang": 0},
    {"min_ndim": 2, "max_ndim": 2, "max_points": None, "min_side": 1, "max_side": 14, "max_chunk": 5,
     "chunk_overhang": None},
    {"max_ndim": 3, "max_points": 27},
]  # fmt: skip


@pytest.mark.parametrize("kwargs", CHUNKED_SHAPES_KWARGS, ids=str)
@given(data=st.data())
def test_chunked_shapes_stay_in_bounds_and_chunks_tile_the_shape(kwargs, data):
    shape, chunks = data.draw(vst.chunked_shapes(**kwargs))
    assert isinstance(shape, tuple) and isinstance(chunks, tuple) and len(shape) == len(chunks)
    assert kwargs.get("min_ndim", 0) <= len(shape) <= kwargs.get("max_ndim", 4)
    min_side, max_side = kwargs.get("min_side", 0), kwargs.get("max_side", 13)
    max_chunk, overhang = kwargs.get("max_chunk", 6), kwargs.get("chunk_overhang", 2)
    max_points = kwargs.get("max_points", 600)
    for n, c in zip(shape, chunks):
        assert type(n) is int and type(c) is int
        assert min_side <= n <= max_side
        assert c >= 1
        if max_chunk is not None:
            assert c <= max_chunk
        if overhang is not None:
            assert c <= max(1, n + overhang)
        if n:  # the chunk grid covers the axis; the edge chunk holds 1 to c points
            grid = -(-n // c)
            edge = n - (grid - 1) * c
            assert (grid - 1) * c + edge == n and 1 <= edge <= c
    if max_points is not None and min_side == 0:
        assert math.prod(shape) <= max_points


@settings(max_examples=1)
@given(data=st.data())
def test_chunked_shapes_needs_a_chunk_bound(data):
    with pytest.raises(ValueError, match="max_chunk or chunk_overhang"):
        data.draw(vst.chunked_shapes(max_chunk=None, chunk_overhang=None))


@given(dtype=vst.dtypes(object_dtype=True), data=st.data())
def test_fill_values_fit_their_dtype(dtype, data):
    fill = data.draw(vst.fill_values(dtype))
    stored = np.array([fill], dtype=dtype)
    if dtype.kind in "fc" and np.isnan(fill):
        assert np.isnan(stored[0])
    else:
        assert stored[0] == fill  # no overflow, no truncation


@given(dtype=vst.numeric_dtypes())
def test_numeric_dtypes(dtype):
    assert dtype in vst.NUMERIC_DTYPES and dtype.kind in "fiu" and dtype.isnative


@given(
    rng=vst.rngs(),
    shape=st.lists(st.integers(0, 5), max_size=3).map(tuple),
    dtype=vst.dtypes(object_dtype=True),
    with_fill=st.booleans(),
    data=st.data(),
)
def test_data_for_small_values_are_exact(rng, shape, dtype, with_fill, data):
    fill = data.draw(vst.fill_values(dtype)) if with_fill else None
    out = vst.data_for(rng, shape, dtype, fill)
    assert out.shape == shape and out.dtype == dtype and out.flags.c_contiguous and out.flags.writeable
    values = out.ravel()
    if fill is not None:
        is_fill = np.isnan(values) if dtype.kind in "fc" and np.isnan(fill) else values == fill
        values = values[~np.asarray(is_fill, dtype=bool)]
    if dtype.kind in "iu":
        assert ((values >= 0) & (values < 100)).all()
    elif dtype.kind in "fc":
        assert (np.imag(values) == 0).all()
        halves = 2 * np.real(values)
        assert ((halves == np.round(halves)) & (halves >= -20) & (halves < 20)).all()
    elif dtype.kind in "SO":
        assert set(values.tolist()) <= {b"", b"a", b"bc", b"d"}


FULL_RANGE_DTYPES = ["i2", ">i4", "u1", "u8", "f4", "f8", "S5", "?", [("a", "<i4"), ("b", "<f8"), ("c", "S3")]]


@pytest.mark.parametrize("dtype", FULL_RANGE_DTYPES, ids=str)
@given(rng=vst.rngs(), shape=st.lists(st.integers(0, 4), max_size=3).map(tuple))
def test_data_for_full_range_fills_every_field(dtype, rng, shape):
    dtype = np.dtype(dtype)
    out = vst.data_for(rng, shape, dtype, full_range=True)
    assert out.shape == shape and out.dtype == dtype and out.flags.c_contiguous
    for name in dtype.names or [None]:
        field = out[name] if name else out
        if field.dtype.kind == "S":  # every byte a lowercase letter: full width
            raw = np.frombuffer(field.tobytes(), np.uint8)
            assert ((raw >= 97) & (raw < 123)).all()
        if field.dtype.kind == "f":
            assert np.isfinite(field).all()


@pytest.mark.parametrize("dtype", ["i2", "u8", ">i4"])
def test_data_for_full_range_reaches_both_ends(dtype):
    """Not small values: over 4096 points both halves of the range occur."""
    dtype = np.dtype(dtype)
    out = vst.data_for(np.random.default_rng(0), (4096,), dtype, full_range=True).astype(float)
    info = np.iinfo(dtype)
    middle = (float(info.min) + float(info.max)) / 2
    assert out.min() < middle < out.max()
    assert out.max() > 100  # beyond what the small values reach


@given(shape=st.lists(st.integers(0, 6), max_size=4).map(tuple), data=st.data())
def test_indices_are_valid_numpy_indices(shape, data):
    x = np.arange(math.prod(shape)).reshape(shape)
    idx = data.draw(vst.indices(shape))
    x[idx] = x[idx]  # neither raises
    basic = data.draw(vst.basic_indices(shape))
    elems = basic if isinstance(basic, tuple) else (basic,)
    assert all(e is Ellipsis or isinstance(e, (int, slice)) for e in elems)
    x[basic] = x[basic]


@given(n=st.integers(0, 9), data=st.data())
def test_array_indices_are_in_bounds(n, data):
    a = data.draw(vst.array_indices(n))
    assert a.ndim == 1
    if a.dtype == bool:
        assert len(a) == n
    else:
        assert a.dtype == np.intp and ((a >= -n) & (a < n)).all()


@given(shape=st.lists(st.integers(0, 6), max_size=4).map(tuple), data=st.data())
def test_outer_indices_one_valid_entry_per_axis(shape, data):
    key = data.draw(vst.outer_indices(shape))
    assert isinstance(key, tuple) and len(key) == len(shape)
    assert sum(isinstance(k, np.ndarray) for k in key) <= 1
    for k, n in zip(key, shape):
        if isinstance(k, np.ndarray):
            assert k.ndim == 1 and k.dtype == np.intp and len(k) <= 2 * n
            assert ((k >= -n) & (k < n)).all()
        elif isinstance(k, slice):
            assert k.step is None or k.step != 0
        else:
            assert type(k) is int and -n <= k < n
        np.arange(n)[k]  # valid on its own axis
    x = np.arange(math.prod(shape)).reshape(shape)
    x[key]  # and as a whole (at most one array: outer = numpy's)


@settings(max_examples=60)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple), data=st.data())
def test_h5py_indices_write_and_read_in_h5py_like_numpy(shape, data):
    index = data.draw(vst.h5py_indices(shape))
    assert isinstance(index, tuple) and len(index) == len(shape)
    assert sum(isinstance(k, np.ndarray) for k in index) <= 1
    per_axis = []  # the outer selection, axis by axis, as positions
    for k, n in zip(index, shape):
        if isinstance(k, slice):
            assert 0 <= k.start < k.stop <= n and 1 <= k.step <= 2
            per_axis.append(np.arange(n)[k])
        elif isinstance(k, np.ndarray) and k.dtype == bool:
            assert len(k) == n and k.any()
            per_axis.append(np.flatnonzero(k))
        elif isinstance(k, np.ndarray):
            assert len(k) and (np.diff(k) > 0).all() and 0 <= k[0] and k[-1] < n
            per_axis.append(k)
        else:
            assert type(k) is int and -n <= k < n
            per_axis.append(np.array([k % n]))
    kept = [not isinstance(k, int) for k in index]
    out_shape = tuple(len(p) for p, keep in zip(per_axis, kept) if keep)
    value = -np.arange(1, math.prod(out_shape) + 1).reshape(out_shape)
    expected = np.zeros(shape, dtype=np.int64)
    expected[np.ix_(*per_axis)] = value.reshape([len(p) for p in per_axis])
    with h5py.File("strategies.h5", "w", driver="core", backing_store=False) as f:
        ds = f.create_dataset("x", shape=shape, dtype=np.int64, fillvalue=0)
        ds[index] = value
        np.testing.assert_array_equal(ds[()], expected)
        np.testing.assert_array_equal(ds[index], value)


@settings(max_examples=1)
@given(data=st.data())
def test_h5py_indices_refuse_empty_axes(data):
    with pytest.raises(ValueError, match="at least 1 long"):
        data.draw(vst.h5py_indices((3, 0)))


@given(target=st.lists(st.integers(0, 5), max_size=3).map(tuple), rng=vst.rngs(), data=st.data())
def test_setitem_values_broadcast_into_the_target(target, rng, data):
    value = data.draw(vst.setitem_values(rng, target, np.dtype("i2")))
    shape = np.shape(value)
    if len(shape) > len(target):
        assert shape == (1, *target)
    else:  # the target's shape, a trailing part of it, some axes 1, or a scalar
        assert all(a in (1, b) for a, b in zip(shape[::-1], target[::-1]))
    out = np.zeros(target, dtype="i2")
    out[...] = value  # numpy broadcasts it


@given(shape=st.lists(st.integers(0, 13), max_size=4).map(tuple), data=st.data())
def test_resize_shapes_keep_ndim_and_the_point_budget(shape, data):
    new = data.draw(vst.resize_shapes(shape, max_points=900))
    assert len(new) == len(shape) and all(type(n) is int and n >= 0 for n in new)
    assert math.prod(new) <= 900


@given(n=st.integers(1, 20), min_size=st.integers(0, 3), data=st.data())
def test_point_edits_are_in_bounds(n, min_size, data):
    pool = [-1.0, 2.0, 3.5]
    edits = data.draw(vst.point_edits(n, pool, min_size=min(min_size, n), max_size=5))
    assert min(min_size, n) <= len(edits) <= 5
    assert all(0 <= i < n for i in edits) and all(v in pool for v in edits.values())
    as_strategy = data.draw(vst.point_edits(n, st.sampled_from(pool), max_size=2))
    assert len(as_strategy) <= 2 and set(as_strategy.values()) <= set(pool)


EDIT_KWARGS = [
    {},
    {"max_width": 5, "resize_axes": (0,), "max_side": 24, "max_growth": 6},
    {"resize_one_in": 0, "max_edits": 6},
]


@pytest.mark.parametrize("kwargs", EDIT_KWARGS, ids=str)
@given(
    shapes=st.dictionaries(
        st.sampled_from(["a", "b"]), st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple), min_size=1
    ),
    data=st.data(),
)
def test_edit_sequences_are_valid_in_order(kwargs, shapes, data):
    values = {"a": [1.0, np.nan], "b": [0, 7]}
    edits = data.draw(vst.edit_sequences(shapes, values, **kwargs))
    assert len(edits) <= kwargs.get("max_edits", 4)
    model = {k: np.zeros(v) for k, v in shapes.items()}
    for edit in edits:
        if edit[0] == "resize":
            _, name, new = edit
            assert kwargs.get("resize_one_in", 5)
            old = model[name].shape
            axes = kwargs.get("resize_axes", range(len(old)))
            assert len(new) == len(old)
            for a, (m, n) in enumerate(zip(old, new)):
                if a not in axes:
                    assert n == m
                else:
                    assert 0 <= n <= kwargs.get("max_side", 7)
                    if "max_growth" in kwargs:
                        assert n <= m + kwargs["max_growth"]
            model[name] = np.zeros(new)
        else:
            _, name, region, value = edit
            assert len(region) == model[name].ndim
            for s, n in zip(region, model[name].shape):
                assert s.step is None and 0 <= s.start < s.stop <= n
                assert s.stop - s.start <= kwargs.get("max_width", 3)
            assert value in values[name] or np.isnan(value)
            model[name][region] = value  # in bounds: every point of the region exists
            assert model[name][region].size == math.prod(s.stop - s.start for s in region)


DATASET_KWARGS = [
    {},
    {"max_points": 120, "min_first_side": 1, "dtype": vst.numeric_dtypes(), "fill_value": False, "chunk_key": "chunks"},
]


@pytest.mark.parametrize("kwargs", DATASET_KWARGS, ids=["netcdf", "zarr"])
@settings(max_examples=50)
@given(data=st.data())
def test_datasets_have_chunked_variables_on_their_own_dimensions(kwargs, data):
    ds, encoding = data.draw(vst.datasets(**kwargs))
    chunk_key = kwargs.get("chunk_key", "chunksizes")
    allowed = vst.NUMERIC_DTYPES if "dtype" in kwargs else vst.DTYPES
    assert 1 <= len(ds.data_vars) <= 3 and set(encoding) == set(ds.data_vars)
    assert ds.attrs == {"title": "drawn", "drawn": 1}
    all_dims = [d for v in ds.data_vars.values() for d in v.dims]
    assert len(all_dims) == len(set(all_dims)) == len(ds.sizes)  # no variable shares a dimension
    assert not set(all_dims) & set(ds.data_vars)
    for i, (name, var) in enumerate(ds.data_vars.items()):
        assert name == f"v{i}" and var.attrs == {"units": f"u{i}"} and var.dtype in allowed
        enc = encoding[name]
        if var.ndim:
            chunks = enc[chunk_key]
            assert len(chunks) == var.ndim and all(c >= 1 for c in chunks)
            assert var.shape[0] >= kwargs.get("min_first_side", 0)
        else:
            assert chunk_key not in enc
        assert var.size <= kwargs.get("max_points", 200)
        if "_FillValue" in enc:
            assert kwargs.get("fill_value", True) and var.dtype.kind in "fiu"
            fill = enc["_FillValue"]
            assert np.array(fill, var.dtype) == fill or np.isnan(fill)
        else:
            assert not kwargs.get("fill_value", True) or var.dtype.kind not in "fiu"
