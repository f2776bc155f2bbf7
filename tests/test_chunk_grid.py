"""The chunk-grid arithmetic of ``_backend/chunks.py`` against a point-by-point numpy oracle.

Every point ``p`` of an array lies in chunk ``p // chunks``; the oracle labels each point
with its chunk and reads grids, regions and intersections off the labels. Edge chunks,
zero-length axes and chunks larger than the array are all drawn.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from xarray_vhdf5._backend.chunks import (
    chunk_extents,
    chunk_grid_shape,
    chunk_slices,
    chunks_meeting,
    iter_chunks,
    padded_shape,
)


@st.composite
def grids(draw, min_length: int = 0):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(min_length, 11), min_size=ndim, max_size=ndim)))
    chunks = tuple(draw(st.lists(st.integers(1, 5), min_size=ndim, max_size=ndim)))
    return shape, chunks


def _labels(shape, chunks) -> tuple[np.ndarray, ...]:
    """Per axis, the chunk coordinate of every point (the oracle)."""
    return tuple(np.indices(shape)[a] // c for a, c in enumerate(chunks))


def _oracle_chunks(shape, chunks) -> list[tuple[int, ...]]:
    """The chunks holding at least one point, in C order."""
    if 0 in shape:
        return []
    labels = _labels(shape, chunks)
    return sorted({tuple(int(lab[p]) for lab in labels) for p in np.ndindex(*shape)})


@given(grids())
def test_grid_shape_and_padding(grid):
    shape, chunks = grid
    want = _oracle_chunks(shape, chunks)
    got = chunk_grid_shape(shape, chunks)
    assert int(np.prod(got)) == len(want)
    if want:
        assert got == tuple(m + 1 for m in np.max(want, axis=0))
    assert padded_shape(shape, chunks) == tuple(g * c for g, c in zip(got, chunks))
    assert all(p >= n and p - n < c for p, n, c in zip(padded_shape(shape, chunks), shape, chunks))


@given(grids(), st.booleans())
def test_iter_chunks_covers_each_point_once(grid, axis0_fastest):
    shape, chunks = grid
    seen = np.zeros(shape, dtype=int)
    labels = _labels(shape, chunks)
    indices = []
    for index, region in iter_chunks(shape, chunks, axis0_fastest=axis0_fastest):
        assert region == chunk_slices(index, shape, chunks)
        assert all(s.step is None for s in region)
        for a, lab in enumerate(labels):
            assert np.all(lab[region] == index[a])
        seen[region] += 1
        indices.append(index)
    assert np.all(seen == 1)
    want = _oracle_chunks(shape, chunks)
    if axis0_fastest:
        want = sorted(want, key=lambda i: (*i[1:], i[0]))
    assert indices == want


@given(grids(min_length=1), st.data())
def test_chunk_extents_match_the_regions(grid, data):
    shape, chunks = grid
    grid_shape = chunk_grid_shape(shape, chunks)
    mask = np.asarray(data.draw(st.lists(st.booleans(), min_size=int(np.prod(grid_shape)))))[: np.prod(grid_shape)]
    coords = np.nonzero(mask.reshape(grid_shape))
    extents = chunk_extents(coords, shape, chunks)
    for j, index in enumerate(zip(*coords)):
        region = chunk_slices(tuple(int(i) for i in index), shape, chunks)
        assert tuple(int(e[j]) for e in extents) == tuple(s.stop - s.start for s in region)


@given(grids(min_length=1), st.data())
def test_chunks_meeting_a_region(grid, data):
    shape, chunks = grid
    region = []
    for n in shape:
        start = data.draw(st.integers(0, n - 1))
        region.append(slice(start, data.draw(st.integers(start + 1, n))))
    got = list(chunks_meeting(region, shape, chunks))
    # the oracle: the chunks of the points inside the region, each clipped to the region
    labels = _labels(shape, chunks)
    inside = np.zeros(shape, dtype=bool)
    inside[tuple(region)] = True
    want = []
    for index in _oracle_chunks(shape, chunks):
        mine = inside & np.logical_and.reduce([lab == i for lab, i in zip(labels, index)])
        if mine.any():
            where = np.nonzero(mine)
            want.append(tuple(slice(int(w.min()), int(w.max()) + 1, 1) for w in where))
    assert got == want


def test_zero_length_axis_has_no_chunk():
    assert chunk_grid_shape((5, 0), (2, 3)) == (3, 0)
    assert list(iter_chunks((5, 0), (2, 3))) == []
    assert list(iter_chunks((0,), (4,), axis0_fastest=True)) == []
    assert list(chunks_meeting((slice(0, 0),), (0,), (4,))) == []
