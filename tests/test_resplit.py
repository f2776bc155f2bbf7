"""The keep-strategy planner and executor against numpy, over random shapes, chunkings and budgets.

Properties (issue 22): the result equals the source; each input chunk is read
exactly once whenever ``max_mem`` is at least the plan's minimum; the plan's
predicted peak bounds the bytes the executor holds (its own count and
``tracemalloc``'s, an independent measure); a budget below the minimum raises
:class:`MemoryBudgetError` saying the minimum.
"""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5.errors import MemoryBudgetError
from xarray_vhdf5.resplit import (
    AxisGrid,
    ResplitCounters,
    iter_resplit,
    naive_seeks,
    parse_bytes,
    plan_resplit,
    resplit_into,
)
from xarray_vhdf5.testing.strategies import chunked_shapes


@st.composite
def problems(draw, max_ndim=3, max_side=24):
    shape, in_chunks = draw(
        chunked_shapes(
            min_ndim=1,
            max_ndim=max_ndim,
            max_points=None,
            min_side=1,
            max_side=max_side,
            max_chunk=None,
            chunk_overhang=0,
        )
    )
    out_chunks = tuple(draw(st.integers(1, s)) for s in shape)
    itemsize = 4
    least = (2 * math.prod(in_chunks) + math.prod(out_chunks)) * itemsize
    total = math.prod(shape) * itemsize
    max_mem = draw(st.integers(least, max(least, 3 * total + least)))
    needed = None
    if draw(st.booleans()):
        grid = tuple(-(-s // c) for s, c in zip(shape, out_chunks))
        bits = draw(st.lists(st.booleans(), min_size=math.prod(grid), max_size=math.prod(grid)))
        needed = np.array(bits, dtype=bool).reshape(grid)
    return shape, in_chunks, out_chunks, max_mem, needed


def _needed_points(shape, out_chunks, needed) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    grid = tuple(-(-s // c) for s, c in zip(shape, out_chunks))
    for index in np.ndindex(*grid):
        if needed is None or needed[index]:
            mask[tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, out_chunks, shape))] = True
    return mask


def _counting_reader(a: np.ndarray, in_chunks, into: bool = False):
    """A chunk reader of ``a`` counting its reads; ``into``: with the ``read_into`` route too."""
    reads: dict[tuple[int, ...], int] = {}

    def where(index):
        return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, in_chunks, a.shape))

    def read_chunk(index):
        reads[index] = reads.get(index, 0) + 1
        return a[where(index)].copy()

    if into:

        def read_into(index, out) -> bool:
            reads[index] = reads.get(index, 0) + 1
            out[...] = a[where(index)]
            return True

        read_chunk.read_into = read_into  # type: ignore[attr-defined]
    return read_chunk, reads


def _least_held(plan, counters: ResplitCounters, itemsize: int) -> float:
    """Bytes the executor holds at least once it reads: its reused buffer, or, when each buffer is
    one input chunk, that chunk (at least the mean chunk read)."""
    if all(k == 1 for k in plan.buffer_chunks):
        return counters.bytes_read / counters.input_reads
    return math.prod(plan.buffer_shape) * itemsize


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.booleans(), st.booleans())
def test_resplit_equals_numpy_reads_once_and_stays_in_budget(problem, pieces, into):
    shape, in_chunks, out_chunks, max_mem, needed = problem
    a = np.random.default_rng(0).random(shape).astype("f4")
    plan = plan_resplit(shape, in_chunks, out_chunks, 4, max_mem, needed=needed)
    assert plan.minimum <= max_mem and plan.predicted_peak <= max_mem
    out = np.full(shape, np.nan, dtype="f4")
    read_chunk, reads = _counting_reader(a, in_chunks, into)
    counters = ResplitCounters()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for w in iter_resplit(plan, read_chunk, "f4", pieces=pieces, counters=counters):
            assert w.whole or pieces
            out[w.region] = w.data
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    mask = _needed_points(shape, out_chunks, needed)
    np.testing.assert_array_equal(out[mask], a[mask])
    assert np.isnan(out[~mask]).all()  # nothing written outside the needed output chunks
    assert set(reads.values()) <= {1}  # each input chunk read exactly once
    assert len(reads) == plan.input_reads == counters.input_reads
    assert counters.peak_buffer_bytes <= plan.predicted_peak
    if plan.input_reads:  # the peak counts what was held, by either read route
        assert counters.peak_buffer_bytes >= _least_held(plan, counters, 4)
    # tracemalloc also sees Python objects (the spill file's, the generator's): a little besides
    assert peak <= plan.predicted_peak + 256 * 1024
    if pieces:
        assert counters.output_writes == plan.output_writes
    else:
        assert counters.chunk_writes == plan.whole_writes + plan.spilled_outputs
        assert counters.piece_writes == plan.piece_writes - plan.spilled_outputs


@settings(max_examples=60, deadline=None)
@given(problems())
def test_a_budget_below_the_minimum_says_the_minimum(problem):
    shape, in_chunks, out_chunks, _, needed = problem
    least = (2 * math.prod(in_chunks) + math.prod(out_chunks)) * 4
    with pytest.raises(MemoryBudgetError, match=f"minimum of this resplit, {least} B") as info:
        plan_resplit(shape, in_chunks, out_chunks, 4, least - 1, needed=needed)
    assert info.value.minimum == least
    assert isinstance(info.value, ValueError)
    plan_resplit(shape, in_chunks, out_chunks, 4, least, needed=needed)  # the minimum itself plans


def test_the_input_aggregate_is_the_buffer_when_it_fits():
    """The paper's ideal case: B = Λ, every remainder kept, n_i + n_o seeks."""
    plan = plan_resplit((40, 30, 20), (1, 30, 20), (10, 7, 7), 4, "1MB")
    assert plan.aggregate_shape == (10, 30, 20)
    assert plan.buffer_shape == (10, 30, 20)
    n_i, n_o = 40, 4 * 5 * 3
    assert plan.input_reads == n_i and plan.output_writes == n_o
    assert plan.seeks == n_i + n_o < plan.naive_seeks
    assert "buffer (10, 30, 20)" in repr(plan) and "seeks 100" in repr(plan)


def test_a_tight_budget_spills_and_still_reads_each_input_once():
    shape, i, o = (64, 32, 32), (1, 32, 32), (64, 8, 8)
    plan = plan_resplit(shape, i, o, 4, 200_000)  # Λ (64 slabs, 256 KiB) does not fit
    assert plan.spilled_outputs > 0 and plan.piece_writes > 0
    a = np.arange(math.prod(shape), dtype="f4").reshape(shape)
    out = np.zeros_like(a)
    read_chunk, reads = _counting_reader(a, i)
    counters = resplit_into(plan, read_chunk, out)
    np.testing.assert_array_equal(out, a)
    assert set(reads.values()) == {1} and len(reads) == 64
    assert counters.peak_buffer_bytes <= plan.predicted_peak <= 200_000


@pytest.mark.parametrize("pieces", [True, False])
def test_tracemalloc_peak_stays_under_the_predicted_peak_on_megabytes(pieces):
    """An independent measure of what the executor allocates, where Python's own objects are noise."""
    shape, i, o = (96, 128, 128), (1, 128, 128), (96, 16, 16)
    a = np.random.default_rng(2).random(shape).astype("f4")  # 6 MiB
    plan = plan_resplit(shape, i, o, 4, "2MiB")
    assert plan.spilled_outputs > 0 and plan.keep.any()  # both paths exercised
    out = np.zeros_like(a)
    read_chunk, _ = _counting_reader(a, i)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for w in iter_resplit(plan, read_chunk, "f4", pieces=pieces):
            out[w.region] = w.data
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, a)
    assert plan.predicted_peak <= 2 * 2**20
    assert peak <= plan.predicted_peak + 256 * 1024, (peak, plan)


def test_forced_buffer_and_its_minimum():
    plan = plan_resplit((12, 12), (2, 3), (4, 4), 8, "1MB", buffer_chunks=(2, 4))
    assert plan.buffer_shape == (4, 12) and plan.buffer_chunks == (2, 4)
    with pytest.raises(MemoryBudgetError, match="cannot hold the buffer"):
        plan_resplit((12, 12), (2, 3), (4, 4), 8, 100, buffer_chunks=(6, 4))


def test_irregular_input_grids_such_as_files_of_months():
    days = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    shape = (365, 6)
    a = np.random.default_rng(1).random(shape)
    plan = plan_resplit(shape, (days, (6,)), (100, 3), 8, "64kB")
    assert plan.in_grids[0] == AxisGrid.from_sizes(days)
    out = np.zeros_like(a)
    edges = np.concatenate([[0], np.cumsum(days)])
    counters = resplit_into(plan, lambda idx: a[edges[idx[0]] : edges[idx[0] + 1]], out)
    np.testing.assert_array_equal(out, a)
    assert counters.input_reads == 12


def test_naive_seeks_follow_the_papers_algorithm_2():
    # one input chunk at a time: a cell whole along the last two axes of its output is one seek,
    # whole along the last axis only one seek per row, otherwise one per column (I_k < O_k: always)
    assert naive_seeks((4, 4, 4), (4, 4, 4), (4, 4, 4)) == 1 + 1
    assert naive_seeks((4, 4, 4), (4, 2, 4), (4, 4, 4)) == 2 + 2 * 4  # L_j != O_j: L_i runs a cell
    assert naive_seeks((4, 4, 4), (4, 4, 2), (4, 4, 4)) == 2 + 2 * 16  # L_k != O_k: L_i * L_j runs
    assert naive_seeks((4, 4, 4), (2, 4, 4), (4, 4, 4)) == 2 + 2 * 1  # split only along i: one run each


@pytest.mark.parametrize(
    ("text", "expected"),
    [("512MB", 512 * 10**6), ("2GiB", 2 * 2**30), ("1.5 KiB", 1536), ("300k", 300_000), (1000, 1000), ("7", 7)],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["lots", "-1MB", "12 parsecs", ""])
def test_parse_bytes_refuses_what_is_not_a_size(bad):
    with pytest.raises(ValueError, match="size in bytes"):
        parse_bytes(bad)


@pytest.mark.parametrize("budget", ["64kB", "2MB"])
def test_threaded_writes_into_zarr_keep_pieces_of_a_chunk_in_order(budget):
    """Pieces of a spilled output chunk are read-modify-writes: in flight together they would clobber."""
    zarr = pytest.importorskip("zarr")
    shape, i, o = (48, 40, 40), (1, 40, 40), (48, 8, 8)
    a = np.random.default_rng(3).random(shape).astype("f4")
    plan = plan_resplit(shape, i, o, 4, budget)
    target = zarr.create_array(store={}, shape=shape, chunks=o, dtype="f4")
    counters = resplit_into(plan, _counting_reader(a, i)[0], target, threads=4)
    np.testing.assert_array_equal(target[:], a)
    assert counters.output_writes == plan.output_writes
    if budget == "64kB":
        assert plan.piece_writes > plan.spilled_outputs > 0  # several pieces per spilled chunk


def test_whole_chunks_stored_as_they_are_in_an_unfiltered_hdf5_dataset(tmp_path, monkeypatch):
    """Chunks of at least DIRECT_MIN_BYTES and no filter: stored with write_direct_chunk, edge chunks padded."""
    h5py = pytest.importorskip("h5py")
    from xarray_vhdf5.resplit import _execute

    shape, i, o = (40, 70, 70), (1, 70, 70), (40, 32, 32)  # 160 KiB output chunks, edges of 6 points
    a = np.random.default_rng(5).random(shape).astype("f4")
    plan = plan_resplit(shape, i, o, 4, "8MB")
    direct = []
    real = _execute._direct_target

    def spy(plan, target):
        found = real(plan, target)
        direct.append(found is not None and found[1].filters == ())
        return found

    monkeypatch.setattr(_execute, "_direct_target", spy)
    with h5py.File(tmp_path / "t.h5", "w") as f:
        ds = f.create_dataset("x", shape=shape, chunks=o, dtype="f4", fillvalue=-1)
        resplit_into(plan, _counting_reader(a, i)[0], ds)
        assert direct == [True]
        info = ds.id.get_chunk_info_by_coord((0, 64, 64))  # an edge chunk: stored whole, padded
        assert info.size == 40 * 32 * 32 * 4
    with h5py.File(tmp_path / "t.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], a)


@pytest.mark.parametrize("budget", ["64kB", "2MB"])
def test_encoded_writes_into_a_compressed_hdf5_dataset(tmp_path, budget):
    """Whole chunks encoded in threads and stored directly; pieces through libhdf5; edge chunks padded."""
    h5py = pytest.importorskip("h5py")
    shape, i, o = (50, 41, 37), (1, 41, 37), (50, 8, 8)
    a = np.random.default_rng(4).random(shape).astype("f4")
    plan = plan_resplit(shape, i, o, 4, budget)
    with h5py.File(tmp_path / "t.h5", "w") as f:
        ds = f.create_dataset("x", shape=shape, chunks=o, dtype="f4", compression="gzip", shuffle=True, fillvalue=-1)
        counters = resplit_into(plan, _counting_reader(a, i)[0], ds, threads=3)
        assert counters.output_writes == plan.output_writes
    with h5py.File(tmp_path / "t.h5", "r") as f:
        np.testing.assert_array_equal(f["x"][()], a)
