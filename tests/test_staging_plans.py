"""Plans of ``StagedChangesArray``: what they print, move, drop, share and allocate.

- The example of versioned-hdf5's ``staged_changes.rst``: ``dset[2:5, 3:6] = 42`` on an
  8x8 array of 2x2 chunks, all on one base slab, prints exactly that
  document's plan and leaves exactly its ``slab_indices`` / ``slab_offsets``.
- ``ChangesPlan`` lists exactly the chunks that differ from the base state.
- ``resize()``: shrinking moves nothing, enlarging edge chunks moves them off
  the base slabs and fills the new area, new chunks are on the full slab.
- Slabs nobody references are dropped (None); the full slab never is.
- Copy-on-write: ``copy()``, ``astype()``, ``refill()`` share until written.
- Memory: staging an edit of one chunk of a 400 MB HDF5 base allocates
  about one chunk (``tracemalloc``).
"""

from __future__ import annotations

import tracemalloc

import h5py
import numpy as np
import pytest

from xarray_vhdf5._backend.transfer import get_kernel_backend, kernel_backend
from xarray_vhdf5._staging import (
    ChangesPlan,
    GetItemPlan,
    LoadPlan,
    ResizePlan,
    SetItemPlan,
    StagedChangesArray,
)
from xarray_vhdf5.errors import ClosedFileError, HDF5Error, IncompatibleDataError
from xarray_vhdf5.testing.layouts import raw_data_layout, write_raw_data

# The plan's repr is one long line by design (the first line below).
SEED_PLAN = """\
SetItemPlan<value_shape=(3, 3), value_view=[:, :], append 2 empty slabs, 7 slice transfers among 3 slab pairs, drop 0 slabs>
  slabs.append(np.empty((6, 2)))  # slabs[2]
  slabs.append(np.empty((2, 2)))  # slabs[3]
  # 3 transfers from slabs[1] to slabs[2]
  slabs[2][0:2, 0:2] = slabs[1][10:12, 0:2]
  slabs[2][2:4, 0:2] = slabs[1][18:20, 0:2]
  slabs[2][4:6, 0:2] = slabs[1][20:22, 0:2]
  # 1 transfers from value to slabs[3]
  slabs[3][0:2, 0:2] = value[0:2, 1:3]
  # 3 transfers from value to slabs[2]
  slabs[2][0:2, 1:2] = value[0:2, 0:1]
  slabs[2][2:3, 1:2] = value[2:3, 0:1]
  slabs[2][4:5, 0:2] = value[2:3, 1:3]
slab_indices:
[[1 1 1 1]
 [1 2 3 1]
 [1 2 2 1]
 [1 1 1 1]]
slab_offsets:
[[ 0  2  4  6]
 [ 8  0  0 14]
 [16  2  4 22]
 [24 26 28 30]]"""  # noqa: E501


def seed_array(base=None) -> tuple[StagedChangesArray, np.ndarray]:
    """The example's state: 8x8, chunks 2x2, every chunk on slabs[1] in C order."""
    data = np.arange(64.0).reshape(8, 8)
    raw = data.reshape(4, 2, 4, 2).transpose(0, 2, 1, 3).reshape(32, 2) if base is None else base
    si = np.ones((4, 4), dtype=np.intp)
    so = (np.arange(16) * 2).reshape(4, 4)
    return StagedChangesArray((8, 8), (2, 2), [raw], si, so), data


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_seed_setitem_plan(backend):
    arr, data = seed_array()
    with kernel_backend(backend):
        plan = arr._setitem_plan((slice(2, 5), slice(3, 6)))
        assert isinstance(plan, SetItemPlan)
        assert repr(plan) == SEED_PLAN
        # Before: untouched.  After: the plan's metadata, and the data.
        assert (arr.slab_indices == 1).all()
        arr[2:5, 3:6] = 42
    np.testing.assert_array_equal(arr.slab_indices, plan.slab_indices)
    np.testing.assert_array_equal(arr.slab_offsets, plan.slab_offsets)
    data[2:5, 3:6] = 42
    np.testing.assert_array_equal(arr[:], data)
    assert [s.shape for s in arr.staged_slabs] == [(6, 2), (2, 2)]


def test_seed_getitem_plan_and_same_plan_on_h5py(tmp_path):
    arr, data = seed_array()
    plan = arr._getitem_plan((slice(2, 5), slice(3, 6)))
    assert isinstance(plan, GetItemPlan)
    assert repr(plan).splitlines() == [
        "GetItemPlan<output_shape=(3, 3), output_view=[:, :], 4 slice transfers among 1 slab pairs>",
        "  # 4 transfers from slabs[1] to out",
        "  out[0:2, 0:1] = slabs[1][10:12, 1:2]",
        "  out[0:2, 1:3] = slabs[1][12:14, 0:2]",
        "  out[2:3, 0:1] = slabs[1][18:19, 1:2]",
        "  out[2:3, 1:3] = slabs[1][20:21, 0:2]",
    ]
    dset = write_raw_data(tmp_path / "seed.h5", "raw", np.asarray(arr.slabs[1]), (2, 2))
    h5arr, _ = seed_array(dset)
    assert repr(h5arr._setitem_plan((slice(2, 5), slice(3, 6)))) == SEED_PLAN
    h5arr[2:5, 3:6] = 42
    data[2:5, 3:6] = 42
    np.testing.assert_array_equal(h5arr[:], data)


def test_views_are_printed():
    arr, _ = seed_array()
    assert "output_view=[::-1, 0]" in repr(arr._getitem_plan((slice(None, None, -1), 3)))
    assert "output_view=[:, array([1, 0, 0])]" in repr(arr._getitem_plan((slice(None), [3, 1, 1])))
    assert "value_view=[:, array([0, 2])]" in repr(arr._setitem_plan((slice(None), [1, 3, 3])))


def test_whole_chunks_on_the_full_slab_are_never_read():
    arr = StagedChangesArray.full((4, 4), (2, 2), 7.0)
    plan = arr._setitem_plan((slice(0, 2), slice(None)))
    text = repr(plan)
    assert "slabs[0]" not in text.split("slab_indices")[0]  # no transfer from the full slab
    assert "append 1 empty slabs" in text
    plan = arr._setitem_plan((0, 0))  # partial: copied from the full slab first
    assert "# 1 transfers from slabs[0] to slabs[1]" in repr(plan)


class _Spy:
    """Notes whether ``cls.name`` was called (and still calls it)."""

    def __init__(self, cls, name, monkeypatch):
        self.called = False
        original = getattr(cls, name)

        def spy(*args, **kwargs):
            self.called = True
            return original(*args, **kwargs)

        monkeypatch.setattr(cls, name, spy)


def _plan_facts(plan: SetItemPlan) -> tuple:
    """Everything a SetItemPlan decides, without its printed index views."""
    return (
        plan.appends,
        plan.transfers.lines(),
        plan.drops,
        plan.refcounts.tolist(),
        plan.slab_indices.tolist(),
        plan.slab_offsets.tolist(),
    )


@pytest.mark.parametrize("backend", ["cython", "python"])
def test_basic_setitem_plan_equals_the_general_plan(backend, monkeypatch):
    """A basic index (ints and slices) plans from its slice pairs alone
    (``SetItemPlan._plan_small``): the same appends, transfers, drops and moves
    as the per-axis mappers of the general path, on arrays in many states."""
    from xarray_vhdf5._staging._map_index import map_index, map_index_general

    rng = np.random.default_rng(7)
    shape, chunks = (9, 7, 5), (2, 3, 2)

    def basic_index():
        idx = []
        for n in shape:
            kind = rng.integers(0, 4)
            if kind == 0:
                idx.append(int(rng.integers(-n, n)))
            else:
                a, b = sorted(int(v) for v in rng.integers(0, n + 1, size=2))
                if kind == 3:  # a negative step: the same points, reversed
                    idx.append(slice(b - 1, a - 1 if a else None, -int(rng.integers(1, 4))))
                else:
                    idx.append(slice(a, b, int(rng.integers(1, 4)) if kind == 2 else None))
        return tuple(idx)

    compared = small_plans = 0
    small = _Spy(SetItemPlan, "_plan_small", monkeypatch)
    with kernel_backend(backend):
        for trial in range(40):
            base = rng.standard_normal(shape)
            base[:4, :3] = 0.0  # chunks equal to the fill value: on the full slab, beside base-slab ones
            arr = StagedChangesArray.full(shape, chunks, 0.0) if trial % 4 == 0 else None
            if arr is None:
                raw, si, so = raw_data_layout(base, chunks, 0.0, rng)
                arr = StagedChangesArray(shape, chunks, [raw], si, so)
            expected = base if trial % 4 else np.zeros(shape)
            expected = expected.copy()
            for _ in range(6):
                idx = basic_index()
                fast = map_index(idx, shape, chunks)
                general = map_index_general(idx, shape, chunks)
                assert fast.basic is not None and general.basic is None
                args = (
                    arr._slab_indices,
                    arr._slab_offsets,
                    arr._chunk_size,
                    len(arr._slabs),
                    arr._n_base,
                    arr._refcounts,
                )
                assert _plan_facts(SetItemPlan(fast, *args)) == _plan_facts(SetItemPlan(general, *args))
                small_plans += small.called
                small.called = False
                compared += 1
                value = rng.standard_normal(expected[idx].shape)
                arr[idx] = value
                expected[idx] = value
                np.testing.assert_array_equal(arr[:], expected)
    assert compared == 240
    assert small_plans > 100  # most went through SetItemPlan._plan_small
    # The base slab's last chunks moved off: it is dropped.
    arr = StagedChangesArray((4,), (2,), [np.arange(4.0)], np.array([1, 1]), np.array([0, 2]))
    args = (arr._slab_indices, arr._slab_offsets, arr._chunk_size, len(arr._slabs), arr._n_base, arr._refcounts)
    plan = SetItemPlan(map_index(slice(1, 3), (4,), (2,)), *args)
    assert plan.drops == [1]
    assert _plan_facts(plan) == _plan_facts(SetItemPlan(map_index_general(slice(1, 3), (4,), (2,)), *args))


# ---------------------------------------------------------------------------
# ChangesPlan
# ---------------------------------------------------------------------------


def test_changes_plan_lists_exactly_the_changed_chunks():
    rng = np.random.default_rng(1)
    data = rng.integers(1, 9, size=(7, 9))  # never the fill value 0
    raw, si, so = raw_data_layout(data, (3, 4), 0, rng)
    arr = StagedChangesArray((7, 9), (3, 4), [raw], si, so, 0)
    plan = arr._changes_plan()
    assert isinstance(plan, ChangesPlan) and len(plan) == 0 and not arr.has_changes
    assert len(plan.unchanged) == 9

    arr[0, 0] = 5  # chunk (0, 0)
    arr[3:6, 4:8] = 1  # chunk (1, 1), wholly
    arr[6, 8] = 2  # chunk (2, 2), an edge chunk
    plan = arr._changes_plan()
    assert [c.chunk for c in plan] == [(0, 0), (1, 1), (2, 2)]
    assert {tuple(c) for c in plan.unchanged.tolist()} == {(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)}
    for c in plan.unchanged.tolist():
        assert arr.slab_offsets[tuple(c)] == so[tuple(c)]
    changed = list(arr.changed_chunks())
    assert arr.has_changes

    # Shrinking keeps the surviving chunks; re-enlarging creates full-slab chunks
    # where the base had data: they differ from the base too.
    arr.resize((3, 9))
    arr.resize((7, 9))
    plan = arr._changes_plan()
    by_chunk = {c.chunk: c for c in plan}
    assert set(by_chunk) == {(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)}
    assert all(by_chunk[c].slab == 0 for c in [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)])
    for c, data_ in arr.changed_chunks():
        np.testing.assert_array_equal(data_, arr[c.virtual])
    assert changed  # the first plan's data views stayed valid


def test_changes_plan_of_full_and_refilled_arrays():
    arr = StagedChangesArray.full((5, 5), (2, 2), 1.5)
    assert len(arr._changes_plan()) == 0 and not arr.has_changes
    arr.resize((6, 6))  # same chunk grid: the edge chunks grow but stay on the full slab
    assert len(arr._changes_plan()) == 0 and arr.has_changes  # the shape changed
    arr.resize((7, 7))  # new chunks: new to the base
    plan = arr._changes_plan()
    assert {c.chunk for c in plan} == {(i, 3) for i in range(4)} | {(3, j) for j in range(4)}
    assert all(c.slab == 0 for c in plan)
    refilled = StagedChangesArray.full((4,), (2,), 0.0).refill(3.0)
    assert len(refilled._changes_plan()) == 2 and refilled.has_changes


# ---------------------------------------------------------------------------
# resize()
# ---------------------------------------------------------------------------


def test_resize_shrink_moves_nothing_enlarge_fills_edges():
    data = np.arange(1.0, 31.0).reshape(5, 6)
    arr = StagedChangesArray.from_array(data, (2, 4), fill_value=-1.0)
    plan = arr._resize_plan((3, 5))
    assert isinstance(plan, ResizePlan)
    assert len(plan.transfers) == 0 and not plan.appends
    arr.resize((3, 5))
    np.testing.assert_array_equal(arr[:], data[:3, :5])

    # Enlarging: chunk (1, 1) (rows 2-3, cols 4-7) was an edge chunk on both axes.
    plan = arr._resize_plan((4, 9))
    text = repr(plan)
    assert "append 1 empty slabs" in text
    assert "from slabs[0]" in text  # the new area is filled from the full slab
    arr.resize((4, 9))
    expected = np.full((4, 9), -1.0)
    expected[:3, :5] = data[:3, :5]
    np.testing.assert_array_equal(arr[:], expected)
    assert arr.slab_indices[0, 2] == 0 and arr.slab_indices[1, 2] == 0  # new chunks: full slab
    for s in arr.base_slabs:
        assert s is None or isinstance(s, np.ndarray)


def test_resize_to_zero_and_back():
    arr = StagedChangesArray.from_array(np.arange(10), (3,), fill_value=9)
    arr[4] = 100
    arr.resize((0,))
    assert arr.slab_indices.shape == (0,)
    assert arr.slabs[0] is not None
    assert all(s is None for s in arr.slabs[1:])  # everything unreferenced is dropped
    arr.resize((5,))
    np.testing.assert_array_equal(arr[:], [9] * 5)


def test_resize_staged_edge_chunk_shared_with_a_copy():
    arr = StagedChangesArray.full((5,), (4,), 0)
    arr[:] = [1, 2, 3, 4, 5]
    other = arr.copy()
    arr.resize((8,))  # fills chunk 1 (on a staged slab shared with `other`)
    np.testing.assert_array_equal(arr[:], [1, 2, 3, 4, 5, 0, 0, 0])
    np.testing.assert_array_equal(other[:], [1, 2, 3, 4, 5])
    other.resize((3,))
    other.resize((6,))
    np.testing.assert_array_equal(other[:], [1, 2, 3, 0, 0, 0])


# ---------------------------------------------------------------------------
# Dropping slabs
# ---------------------------------------------------------------------------


def test_slabs_are_dropped_when_unreferenced_but_never_the_full_slab():
    data = np.arange(16.0).reshape(4, 4)
    arr = StagedChangesArray.from_array(data, (2, 2))  # two base slabs (columns)
    assert arr.n_base_slabs == 2
    arr[:, 2:] = 0  # column 1 wholly overwritten: base slab 2 unreferenced
    assert arr.slabs[2] is None and arr.slabs[1] is not None
    plan = arr._setitem_plan((slice(None), slice(0, 2)))
    assert "drop 1 slabs" in repr(plan) and "slabs[1] = None" in repr(plan)
    arr[:, :2] = 1
    assert arr.slabs[1] is None
    staged = len(arr.slabs)
    arr[:] = 5  # every chunk is staged already: written in place, nothing dropped
    assert len(arr.slabs) == staged
    arr.resize((0, 4))
    assert arr.slabs[0] is not None
    assert all(s is None for s in arr.slabs[1:])
    arr.resize((3, 3))
    np.testing.assert_array_equal(arr[:], np.zeros((3, 3)))


def test_load_moves_every_base_chunk_and_drops_the_base(tmp_path):
    rng = np.random.default_rng(2)
    data = rng.integers(1, 100, size=(9, 7)).astype("i4")
    raw, si, so = raw_data_layout(data, (4, 3), 0, rng)
    dset = write_raw_data(tmp_path / "f.h5", "raw", raw, (4, 3), compression="gzip")
    arr = StagedChangesArray((9, 7), (4, 3), [dset], si, so)
    plan = arr._load_plan()
    assert isinstance(plan, LoadPlan)
    assert repr(plan).startswith("LoadPlan<append 1 empty slabs, 9 slice transfers among 1 slab pairs, drop 1 slabs>")
    arr.load()
    assert arr.slabs[1] is None
    dset.file.close()
    np.testing.assert_array_equal(arr[:], data)  # all in memory now


def test_closed_base_raises(tmp_path):
    dset = write_raw_data(tmp_path / "f.h5", "raw", np.arange(8.0).reshape(4, 2), (2, 2))
    arr = StagedChangesArray((4, 2), (2, 2), [dset], [[1], [1]], [[0], [2]])
    dset.file.close()
    with pytest.raises(ClosedFileError):
        arr[0, 0]
    with pytest.raises(ClosedFileError):
        arr[0, 0] = 1.0


# ---------------------------------------------------------------------------
# Copy-on-write
# ---------------------------------------------------------------------------


def test_copy_on_write_both_directions():
    arr = StagedChangesArray.from_array(np.arange(12.0).reshape(3, 4), (2, 2), as_base_slabs=False)
    before = arr[:]
    staged = arr.slabs[1]
    other = arr.copy()
    assert other.slabs[1].base is staged or other.slabs[1].base is staged.base  # shared
    assert not other.slabs[1].flags.writeable
    other[0, 0] = -1
    np.testing.assert_array_equal(arr[:], before)
    arr[2, 3] = -2
    assert other[2, 3] == 11.0 and other[0, 0] == -1
    assert arr[0, 0] == 0.0
    third = other.copy()
    third.resize((1, 1))
    assert other.shape == (3, 4) and other[0, 0] == -1


def test_astype_converts_staged_slabs_lazily():
    arr = StagedChangesArray.from_array(np.arange(6, dtype="i2").reshape(2, 3), (1, 2), as_base_slabs=False)
    f = arr.astype("f8")
    assert f.dtype == np.float64
    assert f._slabs[1].dtype == np.dtype("i2")  # not converted yet
    assert f[1, 2] == 5.0 and isinstance(f[1, 2], np.float64)
    assert f._slabs[1].dtype == np.float64  # converted on first read, whole slab
    assert arr._slabs[1].dtype == np.dtype("i2")  # the original is untouched
    with pytest.raises(TypeError, match="according to the rule 'safe'"):
        arr.astype("i1", casting="safe")


def test_astype_hot_swaps_h5py_base_slabs(tmp_path):
    data = np.arange(20, dtype="i2").reshape(4, 5)
    raw, si, so = raw_data_layout(data, (2, 2), -1, np.random.default_rng(3), spare_rows=0)
    dset = write_raw_data(tmp_path / "f.h5", "raw", raw, (2, 2))
    arr = StagedChangesArray((4, 5), (2, 2), [dset], si, so, -1)
    arr[0, 0] = 100
    f = arr.astype("f4", base_slabs=[dset.astype("f4")])
    assert f.n_base_slabs == 1 and f.slabs[1] is not dset  # swapped, not loaded
    expected = data.astype("f4")
    expected[0, 0] = 100
    np.testing.assert_array_equal(f[:], expected)
    assert f[:].dtype == np.float32
    with pytest.raises(IncompatibleDataError):
        arr.astype("f4", base_slabs=[np.zeros((3, 3), "f4")])


def test_astype_takes_a_base_slab_with_more_rows_only():
    """A raw_data that other commits appended rows to replaces the base slab; nothing else does."""
    data = np.arange(20.0).reshape(4, 5)
    raw, si, so = raw_data_layout(data, (2, 2), -1.0, np.random.default_rng(4), spare_rows=0)
    arr = StagedChangesArray((4, 5), (2, 2), [raw], si, so, -1.0)
    grown = np.concatenate([raw, np.full((6, 2), 123.0)])
    swapped = arr.astype(arr.dtype, base_slabs=[grown])
    assert swapped.slabs[1] is grown
    np.testing.assert_array_equal(swapped[:], data)
    for bad in (raw[:-2], np.zeros((raw.shape[0], 3)), np.zeros(raw.shape[0] * 2)):
        with pytest.raises(IncompatibleDataError, match="or more rows"):
            arr.astype(arr.dtype, base_slabs=[bad])


def test_refill_replaces_the_old_fill_value_everywhere():
    arr = StagedChangesArray.from_array(np.array([0, 1, 0, 2, 0]), (2,), fill_value=0)
    arr.resize((7,))
    r = arr.refill(9)
    np.testing.assert_array_equal(r[:], [9, 1, 9, 2, 9, 9, 9])
    np.testing.assert_array_equal(arr[:], [0, 1, 0, 2, 0, 0, 0])
    assert r.fill_value == 9
    nan = StagedChangesArray.full((3,), (2,), np.nan)
    nan[1] = 1.0
    np.testing.assert_array_equal(nan.refill(0.0)[:], [0.0, 1.0, 0.0])


# ---------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------


def test_variable_length_strings_from_hdf5(tmp_path):
    data = np.array([[b"a", b"bb", b""], [b"ccc", b"", b"d"]], dtype=object)
    raw, si, so = raw_data_layout(data, (1, 2), b"", np.random.default_rng(4))
    dset = write_raw_data(tmp_path / "s.h5", "raw", raw, (1, 2))
    arr = StagedChangesArray((2, 3), (1, 2), [dset], si, so)
    assert arr.dtype.hasobject and arr.fill_value == b""
    np.testing.assert_array_equal(arr[:], data)
    arr[1, ::2] = [b"x", b"yy"]
    arr.resize((3, 3))
    data = np.concatenate([data, np.full((1, 3), b"", dtype=object)])
    data[1, ::2] = [b"x", b"yy"]
    np.testing.assert_array_equal(arr[:], data)


def test_numpy_string_dtype():
    sdt = np.dtypes.StringDType()
    arr = StagedChangesArray.from_array(np.array(["a", "bb", "ccc"], dtype=sdt), (2,), fill_value="")
    arr[1:] = ["x", "a longer string than any fixed width"]
    arr.resize((5,))
    assert arr[:].tolist() == ["a", "x", "a longer string than any fixed width", "", ""]
    assert arr.copy().refill("?")[3] == "?"


# ---------------------------------------------------------------------------
# Construction errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"slab_indices": [[2]]}, "slab_indices must be in"),
        ({"slab_offsets": [[3]]}, "reaches beyond"),
        ({"slab_indices": [[0]], "slab_offsets": [[2]]}, "must be 0 where"),
        ({"slab_indices": [[1, 1]]}, "one point per chunk"),
        ({"chunk_size": (2,)}, "one entry per axis"),
        ({"chunk_size": (0, 2)}, ">= 1"),
        ({"base_slabs": [np.zeros((4, 2), "i4")], "dtype": "f8"}, "dtype"),
    ],
)
def test_constructor_rejects_inconsistent_metadata(kwargs, match):
    args = {
        "shape": (2, 2),
        "chunk_size": (2, 2),
        "base_slabs": [np.zeros((4, 2))],
        "slab_indices": [[1]],
        "slab_offsets": [[2]],
        "dtype": None,
    }
    args.update(kwargs)
    with pytest.raises(IncompatibleDataError, match=match):
        StagedChangesArray(**args)


def test_over_dataset_behaves_as_the_constructor(tmp_path):
    """The wrappers' constructor (a chunk map of their own) gives the same array, and still checks
    what it can without asking h5py for the dataset's shape."""
    rng = np.random.default_rng(5)
    data = rng.integers(1, 100, size=(9, 7)).astype("i4")
    raw, si, so = raw_data_layout(data, (4, 3), 0, rng)
    dset = write_raw_data(tmp_path / "f.h5", "raw", raw, (4, 3))
    checked = StagedChangesArray((9, 7), (4, 3), [dset], si, so, fill_value=0, dtype="i4")
    fast = StagedChangesArray._over_dataset((9, 7), (4, 3), dset, si, so, 0, np.dtype("i4"))
    for arr in (checked, fast):
        arr[3:6, 2:5] = -1
    np.testing.assert_array_equal(fast[:], checked[:])
    np.testing.assert_array_equal(
        fast._changes_plan().changed_slab_indices, checked._changes_plan().changed_slab_indices
    )
    with pytest.raises(IncompatibleDataError, match="slab_indices must be in"):
        StagedChangesArray._over_dataset((9, 7), (4, 3), dset, si + 1, so, 0, np.dtype("i4"))
    with pytest.raises(IncompatibleDataError, match="one point per chunk"):
        StagedChangesArray._over_dataset((9, 7), (4, 3), dset, si[:1], so[:1], 0, np.dtype("i4"))
    # A map reaching beyond the dataset: libhdf5 refuses the read (the reference kernels
    # check first), nothing is read out of bounds.
    far = so.copy()
    far[0, 0] = dset.shape[0]
    bad = StagedChangesArray._over_dataset((9, 7), (4, 3), dset, si, far, 0, np.dtype("i4"))
    with pytest.raises(HDF5Error if get_kernel_backend() == "cython" else IndexError):
        bad[0, 0]
    dset.file.close()


# ---------------------------------------------------------------------------
# Memory
# ---------------------------------------------------------------------------


@pytest.mark.skipif(
    get_kernel_backend() != "cython",
    reason=(
        "the bound is the compiled kernels'; the reference kernels read through h5py, "
        "which allocates the selection again"
    ),
)
def test_staging_one_chunk_of_a_large_base_allocates_one_chunk(tmp_path):
    """A 400 MB HDF5 base of 8 MB chunks: editing one point allocates ~one chunk."""
    chunks = (1000, 1000)
    shape = (10_000, 5_000)
    n = (shape[0] // chunks[0]) * (shape[1] // chunks[1])
    with h5py.File(tmp_path / "big.h5", "w") as f:
        raw = f.create_dataset("raw", shape=(n * chunks[0], chunks[1]), dtype="f8", chunks=chunks)
        block = np.ones((10 * chunks[0], chunks[1]))
        for i in range(0, n, 10):  # a few big writes
            raw[i * chunks[0] : (i + 10) * chunks[0]] = block
    chunk_bytes = chunks[0] * chunks[1] * 8
    with h5py.File(tmp_path / "big.h5", "r") as f:
        raw = f["raw"]
        si = np.ones((10, 5), dtype=np.intp)
        so = np.arange(n, dtype=np.uint64).reshape(10, 5) * chunks[0]
        arr = StagedChangesArray(shape, chunks, [raw], si, so)
        tracemalloc.start()
        try:

            def allocated(op) -> int:
                """Peak of the memory traced while ``op`` runs, above what was live before."""
                before, _ = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
                op()
                return tracemalloc.get_traced_memory()[1] - before

            def edit_point():
                arr[4321, 1234] = 42.0  # partial: one chunk read from disk into a new slab

            def edit_chunk():
                arr[:1000, :1000] = 7.0  # whole chunk: a new chunk; the base is not read

            def read_points():
                assert arr[4321, 1234] == 42.0 and arr[999, 999] == 7.0 and arr[5000, 10] == 1.0

            assert allocated(edit_point) < 1.1 * chunk_bytes
            assert allocated(edit_chunk) < 1.1 * chunk_bytes
            assert allocated(read_points) < 0.01 * chunk_bytes
        finally:
            tracemalloc.stop()
        assert [s.shape for s in arr.staged_slabs] == [(1000, 1000), (1000, 1000)]
