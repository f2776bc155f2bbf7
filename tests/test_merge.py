"""Three-way merge of versions (issue 17): versions.merge, stage_version(rebase=True), commit(rebase=True).

The point merge is checked against a pure numpy model of the three-way merge
(every point present or absent on each side, NaN equal to NaN, other values
bit for bit): the merged points equal the model's, and the conflicts equal
the model's conflict set exactly. Arrays are mapped over an in-memory
raw_data that counts its reads, to check that chunks changed on one side only
are mapped, not read.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

import h5py
import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._staging import StagedChangesArray
from xarray_vhdf5._versions.merge import DELETED, merge_attrs, merge_points, same_points
from xarray_vhdf5.errors import ConflictError, StaleVersionError
from xarray_vhdf5.testing.strategies import chunked_shapes, edit_sequences
from xarray_vhdf5.xr._staged_array import StagedVariableArray

NAN2 = np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0]  # another NaN payload
POOL = [0.0, -0.0, 1.0, 2.0, np.nan, NAN2]


# -- an in-memory raw_data -----------------------------------------------------------------


class CountingRows:
    """A raw_data stand-in: numpy rows, every read recorded."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows
        self.shape = rows.shape
        self.dtype = rows.dtype
        self.reads = 0

    def __getitem__(self, key):
        self.reads += 1
        return self.rows[key]


class Store:
    """Distinct chunks stored once (by bytes), as a commit stores them; chunks of the fill value are not."""

    def __init__(self, chunks, fill):
        self.chunks = tuple(chunks)
        self.fill = np.float64(fill)
        self.blocks: list[np.ndarray] = []
        self.rows: dict[tuple, int] = {}

    def map(self, data: np.ndarray):
        grid = tuple(-(-n // c) for n, c in zip(data.shape, self.chunks))
        si = np.zeros(grid, np.intp)
        so = np.zeros(grid, np.uint64)
        for index in np.ndindex(*grid):
            region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(index, self.chunks, data.shape))
            chunk = data[region]
            if chunk.tobytes() == np.full(chunk.shape, self.fill).tobytes():
                continue
            key = (chunk.shape, chunk.tobytes())
            if key not in self.rows:
                block = np.full(self.chunks, self.fill)
                block[tuple(slice(0, e) for e in chunk.shape)] = chunk
                self.rows[key] = len(self.blocks)
                self.blocks.append(block)
            si[index] = 1
            so[index] = self.rows[key] * self.chunks[0]
        return data.shape, si, so

    def raw(self) -> CountingRows:
        rows = np.concatenate(self.blocks) if self.blocks else np.zeros((0, *self.chunks[1:]))
        return CountingRows(rows)


def mapped(raw, fill, chunks, m):
    shape, si, so = m
    return StagedChangesArray(shape, chunks, [raw], si, so, fill_value=fill)


# -- the model -----------------------------------------------------------------------------


def same(a, b):
    """Independent of the module: bit for bit, or both NaN."""
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def padded(x, union):
    present = np.zeros(union, bool)
    values = np.zeros(union)
    if x is not None:
        region = tuple(slice(0, n) for n in x.shape)
        present[region] = True
        values[region] = x
    return present, values


def model(b, t, o):
    """The three-way merge of numpy arrays: (merged array, conflict points, shape conflict)."""
    union = tuple(max(n) for n in zip(*(x.shape for x in (b, t, o) if x is not None)))
    pb, vb = padded(b, union)
    pt, vt = padded(t, union)
    po, vo = padded(o, union)
    ch_t = (pt != pb) | (pt & pb & ~same(vt, vb))
    ch_o = (po != pb) | (po & pb & ~same(vo, vb))
    agree = (pt == po) & (~pt | same(vt, vo))
    conflict = ch_t & ch_o & ~agree
    s_b = b.shape if b is not None else None
    resized_t, resized_o = t.shape != s_b, o.shape != s_b
    shape_conflict = resized_t and resized_o and t.shape != o.shape
    if shape_conflict:
        conflict |= pt ^ po
    points = np.argwhere(conflict)
    if len(points) or shape_conflict:
        return None, points, shape_conflict
    shape = o.shape if not resized_t else t.shape
    merged = np.where(ch_o, vo, vt)[tuple(slice(0, n) for n in shape)]
    return merged, points, False


# -- edits ---------------------------------------------------------------------------------


def resized(x, shape, fill):
    out = np.full(shape, fill)
    common = tuple(slice(0, min(a, b)) for a, b in zip(x.shape, shape))
    out[common] = x[common]
    return out


def draw_edits(data, shape, n_max=4):
    """A list of edits: ("resize", shape) or ("set", index, value), valid in order."""
    edits = data.draw(edit_sequences({"a": shape}, POOL, max_edits=n_max, max_width=3, max_side=7))
    return [(kind, *rest) for kind, _, *rest in edits]


def apply(edits, x, fill, arr=None):
    for edit in edits:
        if edit[0] == "resize":
            x = resized(x, edit[1], fill)
            if arr is not None:
                arr.resize(edit[1])
        else:
            x = x.copy()
            x[edit[1]] = edit[2]
            if arr is not None:
                arr[edit[1]] = edit[2]
    return x


@settings(max_examples=300)
@given(st.data())
def test_merge_points_against_model(data):
    shape, chunks = data.draw(
        chunked_shapes(min_ndim=1, max_ndim=2, max_points=None, max_side=6, max_chunk=3, chunk_overhang=None)
    )
    fill = data.draw(st.sampled_from([0.0, np.nan]))
    base = np.array(
        data.draw(st.lists(st.sampled_from(POOL), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))))
    ).reshape(shape)
    theirs_np = apply(draw_edits(data, shape), base, fill)
    ours_edits = draw_edits(data, shape)
    ours_np = apply(ours_edits, base, fill)
    plain = data.draw(st.booleans())

    store = Store(chunks, fill)
    m_b, m_t = store.map(base), store.map(theirs_np)
    raw = store.raw()
    b_arr, t_arr = mapped(raw, fill, chunks, m_b), mapped(raw, fill, chunks, m_t)
    if plain:
        ours = ours_np
    else:
        ours = mapped(raw, fill, chunks, m_b)
        apply(ours_edits, base, fill, ours)
        assert same(np.asarray(ours[...]).ravel(), ours_np.ravel()).all()
    raw.reads = 0
    r = merge_points(b_arr, t_arr, ours, ours_shares_rows=not plain)
    reads = raw.reads

    expected, points, shape_conflict = model(base, theirs_np, ours_np)
    if expected is None:
        assert r.result == "conflict"
        assert r.conflicts.tolist() == points.tolist()
        assert (r.shape_conflict is not None) == shape_conflict
        return
    assert r.result in ("theirs", "ours", "merged"), r
    got = {"theirs": t_arr, "ours": ours, "merged": r.array}[r.result]
    got = np.asarray(got[...])
    assert got.shape == expected.shape == r.shape
    assert same(got.ravel(), expected.ravel()).all()
    if r.both_chunks == 0 and shape == theirs_np.shape == ours_np.shape and not plain:
        assert reads == 0  # chunks changed on one side are mapped or copied from memory
    if r.result == "merged" and shape == theirs_np.shape == ours_np.shape:
        assert len(r.array._changes_plan()) <= r.ours_chunks + r.both_chunks  # theirs' chunks keep their rows


def _edit_staged(edits, ds):
    for edit in edits:
        if edit[0] == "resize":
            ds.resize(edit[1])
        else:
            ds[edit[1]] = edit[2]


@settings(max_examples=40)
@given(st.data())
def test_stage_version_rebase_against_model(data):
    """End to end through a file: the committed merge (or the refusal) is the model's."""
    shape, chunks = data.draw(
        chunked_shapes(
            min_ndim=1, max_ndim=2, max_points=None, min_side=1, max_side=6, max_chunk=3, chunk_overhang=None
        )
    )
    ndim = len(shape)
    size = int(np.prod(shape))
    base = np.array(data.draw(st.lists(st.sampled_from(POOL), min_size=size, max_size=size))).reshape(shape)
    theirs_edits = draw_edits(data, shape)
    ours_edits = draw_edits(data, shape)
    expected, points, _ = model(base, apply(theirs_edits, base, 0.0), apply(ours_edits, base, 0.0))
    with tempfile.TemporaryDirectory() as tmp, h5py.File(f"{tmp}/h.h5", "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("a", data=base, chunks=chunks, fillvalue=0.0)
        _commit(vf, "v2", lambda g: _edit_staged(theirs_edits, g["a"]))
        try:
            _commit(vf, "v3", lambda g: _edit_staged(ours_edits, g["a"]), rebase=True)
        except ConflictError as err:
            assert expected is None
            assert err.points.get("a", np.zeros((0, ndim))).tolist() == points.tolist()
            assert vf.versions == ["v1", "v2"]
            return
        assert expected is not None
        got = vf["v3"]["a"][()]
        assert got.shape == expected.shape and same(got.ravel(), expected.ravel()).all()
        assert vf.version_info("v3").prev_version == "v2"


def _one_chunk_per_side(n_chunks=4, chunk=5, fill=0.0):
    base = np.arange(n_chunks * chunk, dtype=float)
    store = Store((chunk,), fill)
    m_b = store.map(base)
    return base, store, m_b


def test_disjoint_chunks_merge_without_reading():
    base, store, m_b = _one_chunk_per_side()
    theirs = base.copy()
    theirs[1] = -1.0  # chunk 0
    m_t = store.map(theirs)
    raw = store.raw()
    b_arr, t_arr = mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t)
    ours = mapped(raw, 0.0, (5,), m_b)
    ours[10:15] = 7.0  # chunk 2, whole: not read
    raw.reads = 0
    r = merge_points(b_arr, t_arr, ours, ours_shares_rows=True)
    assert (r.result, r.theirs_chunks, r.ours_chunks, r.both_chunks) == ("merged", 1, 1, 0)
    assert raw.reads == 0
    expected = theirs.copy()
    expected[10:15] = 7.0
    assert np.array_equal(r.array[...], expected)
    plan = r.array._changes_plan()
    assert plan.changed.tolist() == [[2]]  # theirs' chunk 0 keeps its raw_data row


def test_same_chunk_disjoint_points_reads_that_chunk_only():
    base, store, m_b = _one_chunk_per_side()
    theirs = base.copy()
    theirs[6] = -1.0
    m_t = store.map(theirs)
    raw = store.raw()
    ours = mapped(raw, 0.0, (5,), m_b)
    ours[8] = 9.0  # reads chunk 1 (a partial write)
    raw.reads = 0
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t), ours, ours_shares_rows=True)
    assert (r.result, r.both_chunks) == ("merged", 1)
    assert raw.reads == 2  # the chunk on the base and on theirs; ours is in memory
    expected = theirs.copy()
    expected[8] = 9.0
    assert np.array_equal(r.array[...], expected)


def test_same_point_conflicts_and_same_value_merges():
    base, store, m_b = _one_chunk_per_side()
    theirs = base.copy()
    theirs[[3, 6]] = [-1.0, 5.5]
    m_t = store.map(theirs)
    raw = store.raw()
    ours = mapped(raw, 0.0, (5,), m_b)
    ours[3] = -2.0  # conflict
    ours[6] = 5.5  # same value: fine
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t), ours, ours_shares_rows=True)
    assert r.result == "conflict" and r.conflicts.tolist() == [[3]] and r.conflicts.dtype == np.int64
    ours[3] = -1.0  # now ours made exactly theirs' changes: theirs' chunks stay mapped
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t), ours, ours_shares_rows=True)
    assert (r.result, r.both_chunks, r.array) == ("theirs", 2, None)
    ours[9] = -9.0
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t), ours, ours_shares_rows=True)
    expected = theirs.copy()
    expected[9] = -9.0
    assert r.result == "merged" and np.array_equal(r.array[...], expected)
    assert r.array._changes_plan().changed.tolist() == [[1]]  # chunk 0 is theirs' as mapped


def test_nan_and_signed_zero():
    a = np.array([np.nan, 0.0, 1.0, NAN2])
    b = np.array([NAN2, -0.0, 1.0, np.nan])
    assert same_points(a, b).tolist() == [True, False, True, True]
    c = np.array([complex(np.nan, 1), complex(1, np.nan)])
    d = np.array([complex(NAN2, 1), complex(1, 2)])
    assert same_points(c, d).tolist() == [True, False]
    assert same_points(np.array([b"ab", "c"], dtype=object), np.array(["ab", b"d"], dtype=object)).tolist() == [
        True,
        False,
    ]


def test_deleted_on_one_side():
    base, store, m_b = _one_chunk_per_side()
    theirs = np.concatenate([base, [100.0, 101.0]])  # grew
    theirs[:3] = base[:3]
    m_t = store.map(theirs)
    raw = store.raw()
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_t), None)
    assert r.result == "conflict" and r.conflicts.tolist() == [[20], [21]]  # the points theirs added
    r = merge_points(mapped(raw, 0.0, (5,), m_b), mapped(raw, 0.0, (5,), m_b), None)
    assert r.result == "deleted"
    ours = base.copy()
    ours[4] = 1.5
    r = merge_points(mapped(raw, 0.0, (5,), m_b), None, ours)
    assert r.result == "conflict" and r.conflicts.tolist() == [[4]]
    with pytest.raises(ValueError, match="a dataset only one side has"):
        merge_points(None, None, ours)


def test_both_added():
    store = Store((4,), 0.0)
    theirs = np.arange(6.0)
    m_t = store.map(theirs)
    raw = store.raw()
    r = merge_points(None, mapped(raw, 0.0, (4,), m_t), theirs.copy())
    assert r.result == "theirs"
    ours = theirs.copy()
    ours[5] = -1
    r = merge_points(None, mapped(raw, 0.0, (4,), m_t), ours)
    assert r.result == "conflict" and r.conflicts.tolist() == [[5]]
    r = merge_points(None, mapped(raw, 0.0, (4,), m_t), theirs[:4])
    assert r.result == "conflict" and r.shape_conflict == ((6,), (4,)) and r.conflicts.tolist() == [[4], [5]]


def test_merge_attrs():
    base = {"a": 1, "b": "x", "c": np.nan, "d": [1, 2]}
    theirs = {"a": 2, "b": "x", "c": np.nan, "e": 5}  # a changed, d deleted, e added
    ours = {"a": 1, "b": b"y", "c": np.nan, "d": [1, 2], "f": 6}  # b changed, f added
    edits, clash = merge_attrs(base, theirs, ours)
    assert clash == [] and edits == {"b": b"y", "f": 6}
    edits, clash = merge_attrs(base, theirs, {**ours, "a": 3, "e": 5, "d": [1, 3]})
    assert clash == ["a", "d"]
    edits, clash = merge_attrs(base, theirs, {**ours, "a": 2})  # same change on both sides
    assert clash == []
    edits, clash = merge_attrs(base, {**theirs, "NAME": "t"}, {**ours, "NAME": "o"})  # bookkeeping: ours wins
    assert clash == [] and edits["NAME"] == "o"
    edits, clash = merge_attrs({"m": "b"}, {"m": "t"}, {}, always_ours=["m"])
    assert clash == [] and edits == {"m": DELETED}


# -- stage_version(rebase=True) ----------------------------------------------------------------


@pytest.fixture
def vfile(tmp_path):
    path = tmp_path / "m.h5"
    with h5py.File(path, "a") as f:
        vf = VersionedHDF5File(f)
        with vf.stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(20.0), chunks=(5,))
            g.create_dataset("y", data=np.arange(12.0).reshape(3, 4), chunks=(2, 2))
            g.create_group("grp").create_dataset("z", data=np.arange(4), chunks=(2,))
            g["x"].attrs["units"] = "m"
            g.attrs["title"] = "t"
        yield f, vf


def _commit(vf, name, edit, prev="v1", rebase=False):
    with vf.stage_version(name, prev_version=prev, rebase=rebase) as g:
        edit(g)


def test_stage_version_rebase_merges_disjoint_chunks(vfile):
    _f, vf = vfile
    _commit(vf, "v2", lambda g: g["x"].__setitem__(slice(0, 5), -1.0))
    _commit(vf, "v3", lambda g: g["x"].__setitem__(slice(15, 20), -2.0), rebase=True)
    assert vf.version_info("v3").prev_version == "v2"
    assert vf.last_rebase.chunks["x"] == (1, 1, 0)  # nothing read point by point
    assert vf.last_commit.datasets["x"].new_chunks == 1  # theirs' chunk mapped as it is
    expected = np.arange(20.0)
    expected[:5], expected[15:] = -1.0, -2.0
    assert np.array_equal(vf["v3"]["x"][:], expected)
    assert np.array_equal(vf["v3"]["y"][:], vf["v1"]["y"][:])


def test_stage_version_rebase_conflict_commits_nothing(vfile):
    _f, vf = vfile
    _commit(vf, "v2", lambda g: g["y"].__setitem__((slice(None), 1), [10.0, 11.0, 12.0]))

    def ours(g):
        g["y"][0, 1] = 10.0  # same value: fine
        g["y"][1, 1] = -11.0  # conflict
        g["y"][2, 1] = -12.0  # conflict
        g["y"][2, 3] = 5.0  # merges
        g["x"][0] = 4.0  # merges

    with pytest.raises(ConflictError, match=r"'y': 2 points: \(1, 1\), \(2, 1\)") as info:
        _commit(vf, "v3", ours, rebase=True)
    assert isinstance(info.value, StaleVersionError)
    assert list(info.value.points) == ["y"] and info.value.points["y"].tolist() == [[1, 1], [2, 1]]
    assert info.value.points["y"].dtype == np.int64
    assert vf.versions == ["v1", "v2"] and vf.current_version == "v2"


def test_stage_version_rebase_nan_and_same_values(vfile):
    _f, vf = vfile
    _commit(vf, "v2", lambda g: g["x"].__setitem__(slice(2, 4), [np.nan, 7.0]))

    def ours(g):
        g["x"][2] = NAN2  # both NaN: the same value
        g["x"][3] = 7.0
        g["x"][4] = np.nan

    _commit(vf, "v3", ours, rebase=True)
    got = vf["v3"]["x"][:5]
    assert np.isnan(got[2]) and got[3] == 7.0 and np.isnan(got[4])


def test_stage_version_rebase_append_on_one_side(vfile):
    _f, vf = vfile

    def append(g):
        n = g["x"].shape[0]
        g["x"].resize((n + 3,))
        g["x"][n:] = np.arange(n, n + 3.0)

    _commit(vf, "v2", append)  # theirs appends
    _commit(vf, "v3", lambda g: g["x"].__setitem__(1, -1.0), rebase=True)
    expected = np.arange(23.0)
    expected[1] = -1.0
    assert np.array_equal(vf["v3"]["x"][:], expected)
    _commit(vf, "v4", lambda g: g["x"].__setitem__(22, -2.0), prev="v3")  # theirs edits the last chunk
    _commit(vf, "v5", append, prev="v3", rebase=True)  # ours appends after it
    expected[22] = -2.0
    assert np.array_equal(vf["v5"]["x"][:], np.r_[expected, 23.0, 24.0, 25.0])
    assert vf.last_rebase.datasets["x"] == "merged"


def test_stage_version_rebase_shrink_against_edit(vfile):
    _f, vf = vfile
    _commit(vf, "v2", lambda g: g["x"].__setitem__(17, -1.0))
    with pytest.raises(ConflictError) as info:
        _commit(vf, "v3", lambda g: g["x"].resize((15,)), rebase=True)
    assert info.value.points["x"].tolist() == [[17]]
    _commit(vf, "v3", lambda g: g["x"].resize((18,)), rebase=True)  # point 17 survives the shrink
    assert np.array_equal(vf["v3"]["x"][:], np.r_[np.arange(17.0), -1.0])


def test_stage_version_rebase_attrs_and_datasets(vfile):
    _f, vf = vfile

    def theirs(g):
        g["x"].attrs["units"] = "km"
        g["x"].attrs["long_name"] = "ex"
        g.create_dataset("new_t", data=np.ones(3), chunks=(2,))
        del g["grp/z"]
        g.attrs["source"] = "theirs"

    _commit(vf, "v2", theirs)

    def ours(g):
        g["x"].attrs["comment"] = "ours"
        g.create_dataset("new_o", data=np.zeros(3), chunks=(2,))
        del g["y"]
        g.attrs["history"] = "ours"

    _commit(vf, "v3", ours, rebase=True)
    v3 = vf["v3"]
    assert {k: v3["x"].attrs[k] for k in ("units", "long_name", "comment")} == {
        "units": "km",
        "long_name": "ex",
        "comment": "ours",
    }
    assert sorted(v3) == ["grp", "new_o", "new_t", "x"]
    assert v3.attrs["source"] == "theirs" and v3.attrs["history"] == "ours" and v3.attrs["title"] == "t"
    assert vf.last_rebase.datasets["new_o"] == "added" and vf.last_rebase.datasets["y"] == "deleted"

    with pytest.raises(ConflictError) as info:
        _commit(vf, "v4", lambda g: g["x"].attrs.__setitem__("units", "cm"), rebase=True)
    assert info.value.attributes == {"x": ["units"]} and info.value.points == {}
    with pytest.raises(ConflictError, match="new_t"):  # both added new_t, other points
        _commit(vf, "v4", lambda g: g.create_dataset("new_t", data=np.zeros(3), chunks=(2,)), rebase=True)
    _commit(vf, "v4", lambda g: g.create_dataset("new_t", data=np.ones(3), chunks=(2,)), rebase=True)
    with pytest.raises(ConflictError) as info:  # deleted by ours, changed by theirs
        _commit(vf, "v5", lambda g: g.__delitem__("x"), rebase=True)
    assert info.value.attributes["x"] == ["comment", "long_name", "units"]


def test_stage_version_rebase_without_other_commit(vfile):
    _f, vf = vfile
    _commit(vf, "v2", lambda g: g["x"].__setitem__(0, 1.0), prev=None, rebase=True)
    assert vf.last_rebase is None and vf.version_info("v2").prev_version == "v1"


# -- commit(rebase=True) from xarray ----------------------------------------------------------


@pytest.fixture
def xfile(tmp_path):
    path = tmp_path / "x.h5"
    ds = xr.Dataset(
        {"sst": (("t", "x"), np.arange(40.0).reshape(4, 10)), "flag": (("t",), np.zeros(4, "i4"))},
        coords={"t": np.arange(4), "x": np.arange(10)},
        attrs={"title": "sst"},
    )
    ds["sst"].encoding["chunks"] = (2, 5)
    ds.vhdf5.commit("v1", path=path)
    return path


def _stage(path):
    return xr.open_dataset(path, engine="vhdf5").vhdf5.stage()


def test_commit_rebase_merges_points_of_one_chunk(xfile):
    a, b = _stage(xfile), _stage(xfile)
    b["sst"][0, 0] = -1.0
    b.attrs["who"] = "theirs"
    b.vhdf5.commit("v2")
    a["sst"][0, 1] = -2.0  # the same chunk as theirs' point
    a["sst"][3, 9] = -3.0  # another chunk
    a["sst"].attrs["units"] = "K"
    with pytest.raises(StaleVersionError, match="rebase=True"):
        a.vhdf5.commit("v3")
    assert a.vhdf5.commit("v3", rebase=True, message="ours") == "v3"
    with xr.open_dataset(xfile, engine="vhdf5", version="v3") as out:
        expected = np.arange(40.0).reshape(4, 10)
        expected[0, 0], expected[0, 1], expected[3, 9] = -1.0, -2.0, -3.0
        assert np.array_equal(out["sst"].values, expected)
        assert out.attrs == {"title": "sst", "who": "theirs"} and out["sst"].attrs["units"] == "K"
    assert a.vhdf5.version == "v3" and a.attrs["who"] == "theirs"  # staged again from v3
    assert isinstance(a["sst"].variable._data, StagedVariableArray)
    assert np.array_equal(a["sst"].values, expected)
    a["sst"][1, 1] = 0.5  # keep editing: the next commit is an ordinary one
    assert a.vhdf5.commit("v4") == "v4"
    assert VersionedHDF5File(h5py.File(xfile, "r"))["v4"].attrs["prev_version"] == "v3"


def test_commit_rebase_conflict_writes_nothing(xfile):
    a, b = _stage(xfile), _stage(xfile)
    b["sst"][2, 3:5] = 100.0
    b.vhdf5.commit("v2")
    a["sst"][2, 4] = -100.0
    a["sst"][2, 5] = 5.0
    with pytest.raises(ConflictError) as info:
        a.vhdf5.commit("v3", rebase=True)
    assert info.value.points["sst"].tolist() == [[2, 4]]
    with h5py.File(xfile, "r") as f:
        assert VersionedHDF5File(f).versions == ["v1", "v2"]
    a["sst"][2, 4] = 100.0  # resolved: theirs' value
    a.vhdf5.commit("v3", rebase=True)
    with xr.open_dataset(xfile, engine="vhdf5", version="v3") as out:
        assert out["sst"].values[2, 3:6].tolist() == [100.0, 100.0, 5.0]


def test_commit_rebase_after_append(xfile):
    a, b = _stage(xfile), _stage(xfile)
    day = xr.Dataset(
        {"sst": (("t", "x"), np.full((1, 10), 99.0)), "flag": (("t",), np.ones(1, "i4"))},
        coords={"t": [4], "x": np.arange(10)},
    )
    b.vhdf5.append(day, dim="t").vhdf5.commit("v2")
    a["sst"][0, 9] = -1.0
    a.vhdf5.commit("v3", rebase=True)
    assert dict(a.sizes) == {"t": 5, "x": 10}
    with xr.open_dataset(xfile, engine="vhdf5", version="v3") as out:
        assert out["sst"].values[4].tolist() == [99.0] * 10 and out["sst"].values[0, 9] == -1.0
        assert out["t"].values.tolist() == [0, 1, 2, 3, 4] and out["flag"].values.tolist() == [0, 0, 0, 0, 1]
    c, d = _stage(xfile), _stage(xfile)
    c.vhdf5.append(day.assign_coords(t=[5]), dim="t").vhdf5.commit("v4")
    two = xr.concat([day.assign_coords(t=[5]), day.assign_coords(t=[6])], dim="t")
    with pytest.raises(ConflictError, match="resized on both sides"):
        d.vhdf5.append(two, dim="t").vhdf5.commit("v5", rebase=True)


def test_commit_rebase_variables_added_and_deleted(xfile):
    # Every xarray commit rewrites the dimension scales' object references: they never conflict.
    a, b = _stage(xfile), _stage(xfile)
    b["sst"][0, 0] = 5.0
    b["extra"] = ("x", np.ones(10))
    b.vhdf5.commit("v2")
    del a["flag"]
    a["mine"] = ("t", np.arange(4.0))
    a.vhdf5.commit("v3", rebase=True)
    with xr.open_dataset(xfile, engine="vhdf5", version="v3") as out:
        assert sorted(out.data_vars) == ["extra", "mine", "sst"] and out["sst"].values[0, 0] == 5.0
    c, d = _stage(xfile), _stage(xfile)
    c["mine"][1] = -1.0
    c.vhdf5.commit("v4")
    del d["mine"]
    with pytest.raises(ConflictError) as info:  # deleted by ours, a point changed by theirs
        d.vhdf5.commit("v5", rebase=True)
    assert list(info.value.points) == ["mine"] and info.value.points["mine"].tolist() == [[1]]


def test_commit_rebase_arguments(xfile):
    a = _stage(xfile)
    with pytest.raises(ValueError, match="choose one"):
        a.vhdf5.commit("v2", force=True, rebase=True)
    plain = xr.open_dataset(xfile, engine="vhdf5").load()
    with pytest.raises(ValueError, match="not staged"):
        plain.vhdf5.commit("v2", path=xfile, rebase=True)
    assert a.vhdf5.commit("v2", rebase=True, allow_empty=True) == "v2"  # nothing moved: an ordinary commit


_OTHER_PROCESS = """
import sys
import xarray as xr
import xarray_vhdf5  # noqa: F401
path = sys.argv[1]
staged = xr.open_dataset(path, engine="vhdf5").vhdf5.stage()
staged["sst"][0, 2] = -7.0
staged["sst"][1, 8] = -8.0
print(staged.vhdf5.commit("theirs"))
"""


def test_commit_rebase_across_processes(xfile):
    ours = _stage(xfile)
    ours["sst"][0, 3] = 3.5  # chunk (0, 0), as theirs' point (0, 2)
    ours["sst"][3, 0] = 4.5
    run = subprocess.run(
        [sys.executable, "-c", _OTHER_PROCESS, str(xfile)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "theirs"
    assert ours.vhdf5.commit("ours", rebase=True) == "ours"
    with xr.open_dataset(xfile, engine="vhdf5", version="ours") as out:
        got = out["sst"].values
    assert (got[0, 2], got[1, 8], got[0, 3], got[3, 0]) == (-7.0, -8.0, 3.5, 4.5)
    with h5py.File(xfile, "r") as f:
        assert VersionedHDF5File(f).version_info("ours").prev_version == "theirs"
