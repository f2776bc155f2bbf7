"""``map_index`` / ``IndexChunkMapper`` against numpy, for every index kind.

The oracle is numpy indexing of ``arange(size).reshape(shape)``.  The
per-axis mappers are checked on their own, without plans or slabs: their
selected chunks, whole chunks and per-chunk slice pairs rebuild exactly
numpy's ``x[idx]`` (through ``to_result``) and numpy's ``x[idx] = value``
(through ``to_normalised``).  Invalid indices raise what numpy raises (type
and message); indices numpy accepts but the engine does not raise
``UnsupportedError``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5._backend.transfer import kernel_backend
from xarray_vhdf5._staging import IndexChunkMapper, StagedChangesArray, map_index
from xarray_vhdf5.errors import UnsupportedError
from xarray_vhdf5.testing.strategies import chunked_shapes, indices

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _pairs(m: IndexChunkMapper, i: int):
    """(global slice in the axis, slice in the normalised value) of chunk i's rows."""
    c0 = int(m.chunk_indices[i]) * m.chunk_size
    for in_chunk, in_value in m.chunk_slices(i):
        yield slice(in_chunk.start + c0, in_chunk.stop + c0, in_chunk.step), in_value


def gather_normalised(x: np.ndarray, mapping) -> np.ndarray:
    out = np.full(mapping.norm_shape, -1, dtype=x.dtype)
    per_axis = [range(len(m.chunk_indices)) for m in mapping.mappers]
    for combo in itertools.product(*per_axis):
        for pairs in itertools.product(*(_pairs(m, i) for m, i in zip(mapping.mappers, combo))):
            src = tuple(p[0] for p in pairs)
            dst = tuple(p[1] for p in pairs)
            out[dst] = x[src]
    return out


def scatter_normalised(x: np.ndarray, mapping, value: np.ndarray) -> None:
    per_axis = [range(len(m.chunk_indices)) for m in mapping.mappers]
    for combo in itertools.product(*per_axis):
        for pairs in itertools.product(*(_pairs(m, i) for m, i in zip(mapping.mappers, combo))):
            x[tuple(p[0] for p in pairs)] = value[tuple(p[1] for p in pairs)]


def check_mapper_invariants(m: IndexChunkMapper, points: np.ndarray) -> None:
    """Selected / whole chunks and rows agree with the set of selected points."""
    selected = np.zeros(m.axis_size, dtype=bool)
    selected[points] = True
    chunks = np.unique(points // m.chunk_size) if points.size else np.empty(0, np.intp)
    np.testing.assert_array_equal(m.chunk_indices, chunks)
    for i, c in enumerate(m.chunk_indices.tolist()):
        in_chunk = selected[c * m.chunk_size : (c + 1) * m.chunk_size]
        assert m.whole[i] == in_chunk.all()
        covered = np.zeros_like(in_chunk)
        for sl, _ in m.chunk_slices(i):
            assert sl.step >= 1 and sl.start >= 0 and sl.stop <= m.chunk_size + sl.step
            assert not covered[sl].any(), "rows overlap"
            covered[sl] = True
        np.testing.assert_array_equal(covered, in_chunk)
    assert m.count == int(selected.sum())
    assert len(m.rows) == m.row_ptr[-1]


@given(st.data())
@SETTINGS
def test_getitem_and_setitem_match_numpy(data):
    shape, chunks = data.draw(chunked_shapes(max_points=300))
    idx = data.draw(indices(shape))
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    expected = x[idx]
    backend = data.draw(st.sampled_from(["cython", "python"]))
    with kernel_backend(backend):
        mapping = map_index(idx, shape, chunks)
    assert mapping.shape == np.shape(expected)
    for a, m in enumerate(mapping.mappers):
        assert (m.axis_size, m.chunk_size) == (shape[a], chunks[a])
    got = mapping.to_result(gather_normalised(x, mapping))
    assert type(got) is type(expected)
    np.testing.assert_array_equal(got, expected, strict=True)

    # The set of selected points per axis: slicing an axis-tagged array.
    for a, m in enumerate(mapping.mappers):
        tagged = np.broadcast_to(np.arange(shape[a]).reshape([-1 if b == a else 1 for b in range(len(shape))]), shape)
        points = np.unique(np.asarray(tagged[idx]))
        if not np.asarray(x[idx]).size:
            continue  # another axis is empty: this one's points are not observable
        check_mapper_invariants(m, points)

    value = -np.arange(1, np.asarray(expected).size + 1, dtype=np.int64).reshape(np.shape(expected))
    want = x.copy()
    want[idx] = value
    got_x = x.copy()
    scatter_normalised(got_x, mapping, mapping.to_normalised(value))
    np.testing.assert_array_equal(got_x, want)


@pytest.mark.parametrize(
    ("size", "chunk", "idx"),
    [
        (10, 3, slice(None)),
        (10, 3, slice(None, None, -1)),
        (10, 3, slice(8, 1, -3)),
        (10, 4, slice(1, 10, 5)),  # step > chunk: chunks skipped
        (10, 3, slice(20, 30)),  # empty, out of range
        (0, 3, slice(None)),
        (10, 3, -1),
        (10, 3, np.int32(4)),
        (10, 3, np.array(4)),
        (10, 3, [3, 1, 1, 9, -1]),
        (10, 3, np.array([0, 2, 4, 6, 8])),  # one progression per chunk
        (10, 3, np.array([0, 1, 2, 5, 6, 9])),
        (10, 3, [True, False] * 5),
        (10, 3, []),
        (10, 3, np.array([], dtype=bool).reshape(0).tolist() or np.zeros(10, dtype=bool)),
    ],
)
def test_one_axis_kinds(size, chunk, idx):
    x = np.arange(size)
    mapping = map_index(idx, (size,), (chunk,))
    got = mapping.to_result(gather_normalised(x, mapping))
    np.testing.assert_array_equal(got, x[idx], strict=True)
    assert type(got) is type(x[idx])


def test_numpy_advanced_axis_placement():
    x = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    for idx in [
        (0, slice(None), [1, 2]),  # separated: the array's axis goes first
        (slice(None), 0, [1, 2]),  # adjacent: in place
        ([2, 0], slice(None), 0),
        (0, [3, 1, 1]),
        (slice(None), [True, False, True, True], Ellipsis, 0),
        (0, Ellipsis, [4, 0]),
        (slice(None), [1], Ellipsis, 0),  # a zero-length Ellipsis still separates
    ]:
        mapping = map_index(idx, x.shape, (2, 3, 2))
        np.testing.assert_array_equal(mapping.to_result(gather_normalised(x, mapping)), x[idx], strict=True)


def test_whole_and_selected_chunks():
    m = map_index(np.s_[2:9], (10,), (3,)).mappers[0]
    assert m.chunk_indices.tolist() == [0, 1, 2]
    assert m.whole_chunks.tolist() == [1, 2]
    m = map_index(np.s_[6:], (10,), (3,)).mappers[0]
    assert m.whole_chunks.tolist() == [2, 3]  # the edge chunk (1 point) is whole
    m = map_index(np.s_[::2], (10,), (1,)).mappers[0]
    assert m.whole_chunks.tolist() == [0, 2, 4, 6, 8]
    m = map_index([5, 3, 4, 4], (10,), (3,)).mappers[0]
    assert m.chunk_indices.tolist() == [1]
    assert m.whole_chunks.tolist() == [1]
    assert m.chunk_slices(0) == [(slice(0, 3, 1), slice(0, 3, 1))]
    m = map_index(np.s_[9:0:-4], (10,), (4,)).mappers[0]  # points 1, 5, 9
    assert [m.chunk_slices(i) for i in range(3)] == [
        [(slice(1, 2, 1), slice(0, 1, 1))],
        [(slice(1, 2, 1), slice(1, 2, 1))],
        [(slice(1, 2, 1), slice(2, 3, 1))],
    ]


NUMPY_ERRORS = [
    10,
    -11,
    (0, 0, 0),
    (Ellipsis, Ellipsis),
    1.0,
    "a",
    [1.5],
    [10],
    [-11, 0],
    [True, False],
    (slice(None), [True] * 6),
    slice(1.0, 2),
    slice(None, None, 0),
    (slice(None), 7),
    {1: 2},
]


@pytest.mark.parametrize("idx", NUMPY_ERRORS, ids=repr)
def test_errors_match_numpy(idx):
    x = np.zeros((10, 5))
    with pytest.raises(Exception) as np_exc:
        x[idx]
    with pytest.raises(type(np_exc.value)) as exc:
        map_index(idx, x.shape, (3, 2))
    if isinstance(np_exc.value, IndexError):
        assert str(exc.value).split(" (got")[0] == str(np_exc.value)
    assert not isinstance(exc.value, UnsupportedError)


UNSUPPORTED = [
    None,
    (slice(None), None),
    ([0, 1], [1, 2]),
    ([0, 1], [True, False, True, False, False]),
    [[0, 1], [2, 3]],
    np.ones((10, 5), dtype=bool),
    True,
    np.bool_(False),
    np.array(True),
]


@pytest.mark.parametrize("idx", UNSUPPORTED, ids=repr)
def test_valid_numpy_but_unsupported(idx):
    x = np.zeros((10, 5))
    x[idx]  # numpy accepts it
    with pytest.raises(UnsupportedError) as exc:
        map_index(idx, x.shape, (3, 2))
    assert isinstance(exc.value, NotImplementedError)
    arr = StagedChangesArray.from_array(x, (3, 2))
    with pytest.raises(UnsupportedError):
        arr[idx]
    with pytest.raises(UnsupportedError):
        arr[idx] = 1


def test_array_errors_through_the_array():
    x = np.arange(12.0).reshape(3, 4)
    arr = StagedChangesArray.from_array(x, (2, 3))
    with pytest.raises(IndexError, match="index 4 is out of bounds for axis 1 with size 4"):
        arr[0, [0, 4]]
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
        arr[3] = 1
    with pytest.raises(ValueError, match=r"could not broadcast input array from shape \(3,\) into shape \(2,\)"):
        arr[0, :2] = [1, 2, 3]
    with pytest.raises(TypeError):
        len(StagedChangesArray.full((), (), 0.0))
