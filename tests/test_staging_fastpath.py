"""The fused ``__getitem__`` fast path agrees with the general path and with numpy.

``StagedChangesArray.__getitem__`` first tries the compiled ``read_basic``
kernel (:mod:`xarray_vhdf5._ext.readtools`): a basic index (one slice or
integer per axis) whose chunks all lie on up-to-date numpy slabs is copied in
one call.  Everything else goes through a
:class:`~xarray_vhdf5._staging.item_plans.GetItemPlan`
(``StagedChangesArray._getitem_general``).  Here, on random arrays, chunkings,
dtypes, basic indices and edit histories:

- the compiled kernel and its pure-Python reference
  (:func:`~xarray_vhdf5._staging.read_basic.read_basic_reference`) both decline
  (None) or both return numpy's result;
- ``arr[idx]`` equals ``arr._getitem_general(idx)`` and numpy's ``ref[idx]``
  (value, shape, dtype, scalar vs array);
- the fast path is really taken when every chunk is in memory, and declines
  where it must (chunks on an h5py slab, a pending ``refill``/``astype``,
  object dtypes, non-basic indices, 0-d arrays).
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5._ext import readtools
from xarray_vhdf5._staging import StagedChangesArray
from xarray_vhdf5._staging.kernels import read_basic_reference
from xarray_vhdf5.testing.strategies import (
    basic_indices,
    chunked_shapes,
    data_for,
    dtypes,
    rngs,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fused_args(arr: StagedChangesArray, idx: Any) -> tuple:
    return (
        idx,
        arr.shape,
        arr.chunk_size,
        arr._slab_indices,
        arr._slab_offsets,
        arr._slabs,
        arr._lazy,
        arr.dtype,
    )


def assert_same(actual: Any, expected: Any) -> None:
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), type(actual)
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert actual.flags.writeable
    else:
        assert isinstance(actual, np.generic) and not isinstance(actual, np.ndarray)
        assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected), strict=True)


@st.composite
def edited_arrays(draw):
    """A staged array (numpy slabs only), its numpy model and a basic index."""
    shape, chunks = draw(chunked_shapes(min_ndim=1))
    dtype = draw(dtypes())
    rng = draw(rngs())
    data = data_for(rng, shape, dtype)
    base = draw(st.sampled_from(["copy", "base_slabs", "full"]))
    if base == "full":
        arr = StagedChangesArray.full(shape, chunks, data_for(rng, (), dtype)[()], dtype=dtype)
        ref = np.full(shape, arr.fill_value, dtype=dtype)
    else:
        arr = StagedChangesArray.from_array(data, chunks, as_base_slabs=base == "base_slabs")
        ref = data.copy()
    for _ in range(draw(st.integers(0, 3))):  # a few edits: staged slabs of all kinds
        idx = draw(basic_indices(shape))
        value = data_for(rng, ref[idx].shape, dtype)
        arr[idx] = value
        ref[idx] = value
    if draw(st.booleans()):
        arr.resize(shape)  # no-op resize keeps numpy slabs; exercises the plan
    return arr, ref, draw(basic_indices(shape))


@SETTINGS
@given(edited_arrays())
def test_fast_path_agrees_with_general_path_and_numpy(case):
    arr, ref, idx = case
    compiled = readtools.read_basic(*fused_args(arr, idx))
    reference = read_basic_reference(*fused_args(arr, idx))
    assert (compiled is None) == (reference is None)
    expected = ref[idx]
    if compiled is not None:
        assert_same(compiled, expected)
        assert_same(reference, expected)
    assert_same(arr[idx], expected)
    assert_same(arr._getitem_general(idx), expected)


@SETTINGS
@given(edited_arrays())
def test_fast_path_taken_for_one_index_per_axis(case):
    """Every chunk is on a numpy slab: a tuple of one int/slice per axis is fused."""
    arr, ref, _ = case
    idx = tuple(slice(None, None, -1) if n % 2 else slice(0, n) for n in arr.shape)
    out = readtools.read_basic(*fused_args(arr, idx))
    assert out is not None
    assert_same(out, ref[idx])
    if all(arr.shape):
        point = tuple(n - 1 for n in arr.shape)
        assert_same(readtools.read_basic(*fused_args(arr, point)), ref[point])


def test_declines_chunks_on_an_h5py_slab(tmp_path):
    data = np.arange(60.0).reshape(6, 10)
    with h5py.File(tmp_path / "f.h5", "w") as f:
        raw = f.create_dataset("raw", data=data[:, :5].reshape(6, 5))
        arr = StagedChangesArray((6, 5), (3, 5), [raw], [[1], [1]], [[0], [3]])
        assert readtools.read_basic(*fused_args(arr, (slice(0, 4), 1))) is None
        np.testing.assert_array_equal(arr[0:4, 1], data[:4, 1])
        arr[0:3, :] = -1.0  # chunk 0 staged (whole), chunk 1 still on the file
        assert readtools.read_basic(*fused_args(arr, (slice(0, 3), slice(None)))) is not None
        assert readtools.read_basic(*fused_args(arr, (slice(2, 4), slice(None)))) is None
        np.testing.assert_array_equal(arr[2:4], [[-1.0] * 5, data[3, :5]])


def test_declines_pending_conversions():
    data = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 5.0]])
    arr = StagedChangesArray.from_array(data, (1, 2), as_base_slabs=False)
    refilled = arr.refill(9.0)  # staged slab rewritten lazily: 0.0 -> 9.0
    assert readtools.read_basic(*fused_args(refilled, (slice(None), slice(None)))) is None
    np.testing.assert_array_equal(refilled[:, :], np.where(data == 0.0, 9.0, data))
    converted = arr.astype("i4")
    assert readtools.read_basic(*fused_args(converted, (0, slice(None)))) is None
    assert_same(converted[0, :], data[0].astype("i4"))
    # Once materialised, the fast path serves them again.
    assert readtools.read_basic(*fused_args(converted, (0, slice(None)))) is not None


@pytest.mark.parametrize(
    ("dtype", "idx"),
    [
        (np.dtype("O"), (slice(None), slice(None))),  # Python objects: never raw copies
        (np.dtype("f8"), (slice(None), [0, 1])),  # an integer array
        (np.dtype("f8"), (Ellipsis, 0)),  # an Ellipsis
        (np.dtype("f8"), (0,)),  # fewer indices than axes
        (np.dtype("f8"), (np.bool_(True), 0)),  # a boolean is not an integer
        (np.dtype("f8"), (5, 0)),  # out of bounds: the general path raises
    ],
)
def test_declines_what_it_does_not_handle(dtype, idx):
    data = np.arange(6).reshape(2, 3).astype(dtype)
    arr = StagedChangesArray.from_array(data, (1, 2), as_base_slabs=False)
    assert readtools.read_basic(*fused_args(arr, idx)) is None
    assert read_basic_reference(*fused_args(arr, idx)) is None


def test_declines_0d_and_answers_like_numpy():
    arr = StagedChangesArray.from_array(np.array(4.5), (), as_base_slabs=False)
    assert readtools.read_basic(*fused_args(arr, ())) is None
    assert_same(arr[()], np.array(4.5)[()])


def test_slab_too_short_for_the_metadata_declines():
    """Metadata reaching beyond a slab is never read by the kernel."""
    arr = StagedChangesArray.from_array(np.arange(8.0).reshape(4, 2), (2, 2), as_base_slabs=False)
    arr._slabs[1] = arr._slabs[1][:3]  # corrupt: chunk 1 needs rows 2-3
    assert readtools.read_basic(*fused_args(arr, (slice(0, 4), 0))) is None
    assert read_basic_reference(*fused_args(arr, (slice(0, 4), 0))) is None
    assert readtools.read_basic(*fused_args(arr, (slice(0, 2), 0))) is not None
