"""Plan kernels: compiled ``_ext/plantools`` == pure-Python references.

Random inputs (hypothesis) for the three kernels of
:mod:`xarray_vhdf5._staging.kernels`; each compiled result must equal the
reference exactly (values, dtypes, shapes, C-contiguity).  The references are
themselves checked against brute-force definitions: every point of a slice
lands in exactly one row; the gathered chunks are the cartesian product,
stably sorted by slab; the expanded slices are the product of the rows.
Malformed inputs that would make the compiled kernels read out of bounds
raise instead.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from xarray_vhdf5._backend.transfer import kernel_backend
from xarray_vhdf5._ext import plantools, readtools
from xarray_vhdf5._staging import kernels
from xarray_vhdf5._staging.kernels import (
    KIND_REVERSE,
    KIND_SCALAR,
    SIDE_SLAB,
    SIDE_VALUE,
    basic_slices_reference,
    expand_slices_reference,
    gather_chunks_reference,
    parse_basic_reference,
    slice_rows_reference,
)
from xarray_vhdf5.testing.strategies import basic_indices, chunked_shapes, rngs

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_identical(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        assert x.flags.c_contiguous
        np.testing.assert_array_equal(x, y)


@st.composite
def slices(draw):
    chunk = draw(st.integers(1, 7))
    size = draw(st.integers(0, 40))
    if size == 0:
        return 0, 1, 0, chunk, size
    start = draw(st.integers(0, size - 1))
    step = draw(st.integers(1, 9))
    count = draw(st.integers(0, (size - 1 - start) // step + 1))
    return start, step, count, chunk, size


@given(slices())
@SETTINGS
def test_slice_rows(args):
    start, step, count, chunk, size = args
    ref = slice_rows_reference(*args)
    assert_identical(plantools.slice_rows(*args), ref)
    chunk_indices, whole, rows = ref
    assert len(rows) == len(chunk_indices)  # one row per selected chunk
    # Brute force: every point in exactly one row, in order.
    points = start + step * np.arange(count)
    seen = []
    for i, c in enumerate(chunk_indices.tolist()):
        cs, vs, n, stride = rows[i].tolist()
        got = [c * chunk + cs + stride * j for j in range(n)]
        assert got == points[vs : vs + n].tolist()
        seen.extend(got)
        extent = min(chunk, size - c * chunk)
        assert whole[i] == (n == extent)
    assert seen == points.tolist()


@st.composite
def grids(draw):
    grid = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    n_slabs = draw(st.integers(1, 5))
    rng = draw(rngs())
    si = rng.integers(0, n_slabs, size=grid).astype(np.intp)
    so = rng.integers(0, 100, size=grid).astype(np.uint64)
    sel = tuple(np.array(draw(st.lists(st.integers(0, n - 1), max_size=4)) if n else [], dtype=np.intp) for n in grid)
    return si, so, sel, n_slabs


@given(grids())
@SETTINGS
def test_gather_chunks(args):
    si, so, sel, n_slabs = args
    ref = gather_chunks_reference(si, so, sel, n_slabs)
    assert_identical(plantools.gather_chunks(si, so, sel, n_slabs), ref)
    # Brute force: the C-order product, stably sorted by slab index.
    product = list(itertools.product(*[range(len(s)) for s in sel]))
    coords = [tuple(int(s[p]) for s, p in zip(sel, pos)) for pos in product]
    expected = sorted(zip(product, coords), key=lambda pc: int(si[pc[1]]))
    assert [tuple(p) for p in ref.pos.tolist()] == [p for p, _ in expected]
    assert ref.slab.tolist() == [int(si[c]) for _, c in expected]
    assert ref.offset.tolist() == [int(so[c]) for _, c in expected]
    for s, a, b in ref.groups.tolist():
        assert set(ref.slab[a:b].tolist()) == {s}
    assert sum(b - a for _, a, b in ref.groups.tolist()) == len(product)


@st.composite
def expansions(draw):
    ndim = draw(st.integers(0, 3))
    rows, ptrs = [], []
    for _ in range(ndim):
        nsel = draw(st.integers(1, 4))
        counts = draw(st.lists(st.integers(0, 3), min_size=nsel, max_size=nsel))
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.intp)
        n = int(ptr[-1])
        table = np.array(
            draw(
                st.lists(
                    st.tuples(*[st.integers(0, 50)] * 2, st.integers(1, 5), st.integers(1, 4)), min_size=n, max_size=n
                )
            ),
            dtype=np.uint64,
        ).reshape(n, 4)
        rows.append(table)
        # One row per chunk may also be given as an implicit row_ptr (None).
        implicit = set(counts) == {1} and draw(st.booleans())
        ptrs.append(None if implicit else ptr)
    npoints = draw(st.integers(0, 5))
    nsel = [len(r) if p is None else len(p) - 1 for r, p in zip(rows, ptrs)]
    pos = np.array([[draw(st.integers(0, n - 1)) for n in nsel] for _ in range(npoints)], dtype=np.intp).reshape(
        npoints, ndim
    )
    src_side = draw(st.sampled_from([SIDE_SLAB, SIDE_VALUE]))
    dst_side = draw(st.sampled_from([SIDE_SLAB, SIDE_VALUE]))
    offsets = [np.arange(npoints, dtype=np.uint64) * 10, np.arange(npoints, dtype=np.uint64) * 100 + 3]
    return pos, tuple(rows), tuple(ptrs), src_side, dst_side, offsets[0], offsets[1]


@given(expansions())
@SETTINGS
def test_expand_slices(args):
    pos, rows, ptrs, src_side, dst_side, soff, doff = args
    ref = expand_slices_reference(*args)
    assert_identical(plantools.expand_slices(*args), ref)
    # Brute force: the product of each chunk's rows, chunk after chunk.
    ptrs = tuple(np.arange(len(r) + 1) if p is None else p for r, p in zip(rows, ptrs))
    n_expected = sum(int(np.prod([ptrs[a][q + 1] - ptrs[a][q] for a, q in enumerate(p)])) for p in pos.tolist())
    assert ref[0].shape == (n_expected, pos.shape[1])
    line = 0
    for k, p in enumerate(pos.tolist()):
        per_axis = [rows[a][ptrs[a][q] : ptrs[a][q + 1]].tolist() for a, q in enumerate(p)]
        for combo in itertools.product(*per_axis):
            for a, (cs, vs, n, stride) in enumerate(combo):
                src = (cs + (int(soff[k]) if a == 0 else 0), stride) if src_side == SIDE_SLAB else (vs, 1)
                dst = (cs + (int(doff[k]) if a == 0 else 0), stride) if dst_side == SIDE_SLAB else (vs, 1)
                assert (ref[0][line, a], ref[3][line, a]) == src
                assert (ref[1][line, a], ref[4][line, a]) == dst
                assert ref[2][line, a] == n
            line += 1
    assert line == n_expected


@given(st.data())
@SETTINGS
def test_parse_basic(data):
    shape, _ = data.draw(chunked_shapes())

    def numpy_ints(idx):
        if not isinstance(idx, tuple):
            return np.int32(idx) if type(idx) is int else idx
        return tuple(np.int32(e) if type(e) is int else e for e in idx)

    numpy_ints = basic_indices(shape).map(numpy_ints)
    idx = data.draw(st.one_of(basic_indices(shape), numpy_ints, st.just(Ellipsis)))
    ref = parse_basic_reference(idx, shape)
    assert readtools.parse_basic(idx, shape) == ref
    if ref is None:
        return
    starts, steps, counts, kinds = ref
    x = np.arange(int(np.prod(shape))).reshape(shape)
    expected = x[idx]
    # The normalised selection, with the reversals and dropped axes undone, is numpy's.
    norm = x[tuple(slice(a, a + s * (n - 1) + 1 if n else a, s) for a, s, n in zip(starts, steps, counts))]
    norm = norm[tuple(slice(None, None, -1) if k == KIND_REVERSE else slice(None) for k in kinds)]
    norm = norm.reshape([n for n, k in zip(counts, kinds) if k != KIND_SCALAR])
    np.testing.assert_array_equal(norm, expected)
    assert all(s >= 1 for s in steps)


def test_parse_basic_falls_back_and_raises_like_slices():
    for idx in [
        (0, 0, 0),
        (5,),
        (np.uint64(2**63),),
        (Ellipsis,),
        ([0],),
        (True,),
        (None,),
        2**70,
        np.bool_(True),
        np.array(1),
    ]:
        assert readtools.parse_basic(idx, (5,)) is None
        assert parse_basic_reference(idx, (5,)) is None
    for bad, exc in [(slice(1.0, 2), TypeError), (slice(None, None, 0), ValueError)]:
        for fn in (readtools.parse_basic, parse_basic_reference):
            with pytest.raises(exc):
                fn(bad, (5,))


@given(st.data())
@SETTINGS
def test_basic_slices(data):
    shape, chunks = data.draw(chunked_shapes())
    idx = data.draw(basic_indices(shape))
    parsed = parse_basic_reference(idx, shape)
    if parsed is None:
        return
    rng = data.draw(rngs())
    n_slabs = data.draw(st.integers(1, 4))
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
    si = np.asarray(rng.integers(0, n_slabs, size=grid), dtype=np.intp)
    so = np.asarray(rng.integers(0, 50, size=grid) * 7, dtype=np.uint64)
    sides = data.draw(st.sampled_from([(SIDE_SLAB, SIDE_VALUE), (SIDE_VALUE, SIDE_SLAB)]))
    args = (*parsed[:3], chunks, shape, si, so, n_slabs, *sides)
    ref = basic_slices_reference(*args)
    assert_identical(plantools.basic_slices(*args), ref)


def test_dispatch_follows_kernel_backend(monkeypatch):
    calls = []
    monkeypatch.setattr(kernels, "slice_rows_reference", lambda *a: calls.append(a) or slice_rows_reference(*a))
    with kernel_backend("python"):
        kernels.slice_rows(0, 1, 3, 2, 3)
    with kernel_backend("cython"):
        kernels.slice_rows(0, 1, 3, 2, 3)
    assert len(calls) == 1


def test_kernels_reject_out_of_bounds_inputs():
    si = np.zeros((2, 2), dtype=np.intp)
    so = np.zeros((2, 2), dtype=np.uint64)
    with pytest.raises(IndexError):
        plantools.gather_chunks(si, so, (np.array([2]), np.array([0])), 1)
    with pytest.raises(ValueError, match="slab index"):
        plantools.gather_chunks(si + 3, so, (np.array([0]), np.array([0])), 2)
    with pytest.raises(TypeError):
        plantools.gather_chunks(si.astype(np.int32), so, (np.array([0]), np.array([0])), 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        plantools.gather_chunks(np.zeros((2, 4), np.intp)[:, ::2], so, (np.array([0]), np.array([0])), 1)
    rows = (np.zeros((1, 4), np.uint64),)
    ptrs = (np.array([0, 1], np.intp),)
    with pytest.raises(IndexError):
        plantools.expand_slices(np.array([[1]], np.intp), rows, ptrs, SIDE_VALUE, SIDE_VALUE)
    with pytest.raises(ValueError, match="does not fit"):
        plantools.expand_slices(np.array([[0]], np.intp), rows, (np.array([0, 2], np.intp),), SIDE_VALUE, SIDE_VALUE)
    with pytest.raises(ValueError, match="required"):
        plantools.expand_slices(np.array([[0]], np.intp), rows, ptrs, SIDE_SLAB, SIDE_VALUE)
    with pytest.raises(ValueError, match="beyond"):
        plantools.slice_rows(0, 2, 3, 2, 4)
    with pytest.raises(ValueError):
        plantools.slice_rows(-1, 1, 1, 2, 4)
