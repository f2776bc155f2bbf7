"""Parity with versioned-hdf5 2.6.0: ``get_diff``, ``rebuild_hashtables`` and
``rebuild_object_dtype_hashtables`` on the same files give the same results.

A history with edits, a resize that grows and one that shrinks (edge chunks
re-trimmed), a chunk back to the fill value, nested groups and variable-length
strings is written by each library; each library's ``get_diff`` and rebuild then
run on both files (and on copies), and the results are compared with
versioned-hdf5's own.
"""

from __future__ import annotations

import shutil

import h5py
import ndindex
import numpy as np
import pytest
import versioned_hdf5 as vh

import xarray_vhdf5 as xv
from xarray_vhdf5._versions import forget_shared_caches
from xarray_vhdf5._versions.rebuild import placeholder_digest
from xarray_vhdf5.errors import ReadOnlyError, VersionNotFoundError

LIBS = {"versioned_hdf5": vh, "xarray_vhdf5": xv}


def _history(lib, path):
    rng = np.random.default_rng(4)
    with h5py.File(path, "w") as f:
        vf = lib.VersionedHDF5File(f)
        with vf.stage_version("a") as g:
            g.create_dataset("x", data=rng.random((25, 10)), chunks=(10, 4), fillvalue=-1.0)
            g.create_dataset("grp/i", data=np.arange(40, dtype="i4"), chunks=(6,))
            g.create_dataset(
                "s",
                data=np.array([b"a", b"bb", b"ccc"] * 4, dtype=object),
                dtype=h5py.string_dtype("ascii"),
                chunks=(5,),
            )
        with vf.stage_version("b") as g:
            g["x"][3, 3] = -5.0
            g["x"].resize((30, 10))  # grows: new edge chunks
            g["x"][25:, :] = 2.0
            g["grp/i"][6:12] = 0  # a whole chunk of the fill value
            g["s"][7] = b"dd"
        with vf.stage_version("c") as g:
            g["x"].resize((17, 10))  # shrinks: edge chunks re-trimmed
            g["x"][0, 0] = 9.0
            g["grp/i"][0] = 1000
        with vf.stage_version("d") as g:  # same data as c for grp/i and s
            g["x"][16, 9] = 4.0


def _same_diff(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for key in want:
        for g, w in zip(got[key], want[key]):
            if w is None:
                assert g is None, key
            else:
                assert g.dtype == w.dtype and g.shape == w.shape, key
                np.testing.assert_array_equal(g, w)


PAIRS = [
    ("a", "b", "x"),
    ("b", "c", "x"),
    ("c", "d", "x"),
    ("a", "d", "x"),
    ("d", "a", "x"),
    ("a", "b", "grp/i"),
    ("b", "c", "grp/i"),
    ("c", "d", "grp/i"),
    ("a", "b", "s"),
    ("c", "d", "s"),
]


@pytest.mark.parametrize("writer", list(LIBS))
def test_get_diff_equals_versioned_hdf5(tmp_path, writer):
    path = tmp_path / "h.h5"
    _history(LIBS[writer], path)
    with h5py.File(path, "r") as f:
        ref, ours = vh.VersionedHDF5File(f), xv.VersionedHDF5File(f)
        nonempty = 0
        for v1, v2, name in PAIRS:
            want = ref.get_diff(name, v1, v2)
            _same_diff(ours.get_diff(name, v1, v2), want)
            nonempty += bool(want)
        assert nonempty >= 8
        assert ours.get_diff("x", "c", "c") == {}


def _a_then_b(f, n: int = 10, edited: int = 0, also=None) -> xv.VersionedHDF5File:
    """Versions a (``x`` = arange(n) float64, chunks (5,)) and b (``x[edited] = -1``, then ``also(g)``)."""
    vf = xv.VersionedHDF5File(f)
    with vf.stage_version("a") as g:
        g.create_dataset("x", data=np.arange(float(n)), chunks=(5,))
    with vf.stage_version("b") as g:
        g["x"][edited] = -1.0
        if also is not None:
            also(g)
    return vf


def test_get_diff_needs_no_reopen_and_says_what_is_missing(tmp_path):
    """versioned-hdf5 asks to reopen the file after committing; the same handle works here."""
    path = tmp_path / "h.h5"
    with h5py.File(path, "w") as f:
        vf = _a_then_b(f, 20, 7, also=lambda g: g.create_dataset("y", data=np.zeros(3), chunks=(3,)))
        diff = vf.get_diff("x", "a", "b")
        ((region, (old, new)),) = diff.items()
        assert region.raw == (slice(5, 10, 1),)
        np.testing.assert_array_equal(old, np.arange(5.0, 10.0))
        np.testing.assert_array_equal(new, [5.0, 6.0, -1.0, 8.0, 9.0])
        _same_diff(vf.get_diff("x", -1, None), diff)  # version keys as vf[...] takes them
        with pytest.raises(KeyError, match="no dataset 'y' in version 'a'"):
            vf.get_diff("y", "a", "b")
        with pytest.raises(VersionNotFoundError):
            vf.get_diff("x", "a", "nope")


def _tables(path) -> dict:
    """Each dataset's hash table as {digest: (start, stop)}, and its row order."""
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and name.endswith("/hash_table") and "versions" not in name:
                rows = obj[: int(obj.attrs["largest_index"])]
                out[name] = [(bytes(r["hash"]), tuple(int(v) for v in r["shape"])) for r in rows]

        f["_version_data"].visititems(visit)
    return out


@pytest.mark.parametrize("writer", list(LIBS))
def test_rebuild_hashtables_equals_versioned_hdf5(tmp_path, writer):
    """The same rows in the same order, then both libraries commit on the rebuilt file and reuse its chunks."""
    path = tmp_path / "h.h5"
    _history(LIBS[writer], path)
    before = _tables(path)
    with h5py.File(path, "r+") as f:  # a corrupted row: a rebuild that did nothing would keep it
        table = f["_version_data/x/hash_table"]
        table[0] = np.zeros(1, table.dtype)[0]
    for lib in LIBS:
        shutil.copy(path, tmp_path / f"{lib}.h5")
        with h5py.File(tmp_path / f"{lib}.h5", "r+") as f:
            LIBS[lib].VersionedHDF5File(f).rebuild_hashtables()
    ours, ref = _tables(tmp_path / "xarray_vhdf5.h5"), _tables(tmp_path / "versioned_hdf5.h5")
    assert ours == ref
    assert set(ours) == set(before)
    assert all(sorted(ours[k]) == sorted(before[k]) for k in before)  # every row rebuilt as it was
    for lib in LIBS:  # both go on with each rebuilt table: a chunk equal to version a's is found in it
        with h5py.File(tmp_path / f"{lib}.h5", "r+") as f:
            table = f["_version_data/x/hash_table"]
            rows = int(table.attrs["largest_index"])
            vf = LIBS[lib].VersionedHDF5File(f)
            old = vf["a"]["x"][0:10, 0:4]
            with vf.stage_version(f"back_{lib}") as g:
                g["x"][0:10, 0:4] = old
            assert int(f["_version_data/x/hash_table"].attrs["largest_index"]) == rows  # deduplicated
            np.testing.assert_array_equal(vf[f"back_{lib}"]["x"][0:10, 0:4], old)


def test_rebuild_replaces_a_wrong_table_and_keeps_the_data(tmp_path):
    path = tmp_path / "h.h5"
    _history(xv, path)
    with h5py.File(path, "r+") as f:
        vf = xv.VersionedHDF5File(f)
        data = {v: vf[v]["x"][()] for v in vf.versions}
        table = f["_version_data/x/hash_table"]
        lost = bytes(table[0]["hash"])
        table[0] = np.zeros(1, table.dtype)[0]  # a corrupted row
        counts = vf.rebuild_hashtables()
        assert set(counts) == {"x", "grp/i", "s"} and counts["x"] > 0
        assert "__vhdf5_scratch__" not in f["_version_data"]
        rows = f["_version_data/x/hash_table"][: counts["x"]]
        assert lost in {bytes(r) for r in rows["hash"]}  # the digest is back
        assert {v: vf[v]["x"][()].tolist() for v in vf.versions} == {k: d.tolist() for k, d in data.items()}
        with vf.stage_version("e") as g:  # commits go on with the rebuilt table
            g["x"][1, 1] = 0.5
        assert vf["e"]["x"][1, 1] == 0.5


@pytest.mark.parametrize("committer", list(LIBS))
def test_a_chunk_stored_twice_is_not_overwritten_by_the_next_commit(tmp_path, committer):
    """The same chunk in two raw_data slots, the higher one mapped by a version: a table listing
    only the first slot would end below it, and the next commit would write over it (versioned-hdf5
    2.6's own rebuild does). The rebuilt table also lists that slot, with a placeholder digest."""
    path = tmp_path / "twice.h5"
    with h5py.File(path, "w") as f:
        vf = _a_then_b(f)
        table = f["_version_data/x/hash_table"]
        table[0] = np.zeros(1, table.dtype)[0]  # chunk 0 of a forgotten...
    forget_shared_caches()  # (the process's cached table still knows it)
    with h5py.File(path, "a") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("c") as g:
            g["x"][0] = 0.0  # ...so a's chunk 0 is stored again, in the highest slot
        assert f["_version_data/x/raw_data"].shape[0] == 20
        counts = vf.rebuild_hashtables()
        rows = f["_version_data/x/hash_table"][: counts["x"]]
        assert rows["shape"].tolist() == [[0, 5], [5, 10], [10, 15], [15, 20]]
        assert bytes(rows["hash"][3]) == placeholder_digest(3)  # the slot c maps, named by no digest
        expected = vf["c"]["x"][()]
    with h5py.File(path, "a") as f:
        vf = LIBS[committer].VersionedHDF5File(f)
        with vf.stage_version("d") as g:
            g["x"][5:10] = 7.0
        np.testing.assert_array_equal(vf["c"]["x"][()], expected)
        np.testing.assert_array_equal(vf["d"]["x"][()], np.r_[np.arange(5.0), np.full(5, 7.0)])


def test_rebuild_object_dtype_hashtables_equals_versioned_hdf5(tmp_path):
    """Only the string datasets' tables are rebuilt (and as versioned-hdf5 rebuilds them)."""
    path = tmp_path / "h.h5"
    _history(vh, path)
    want = _tables(path)
    for lib in LIBS:
        shutil.copy(path, tmp_path / f"{lib}.h5")
        with h5py.File(tmp_path / f"{lib}.h5", "r+") as f:
            f["_version_data/versions"].attrs["data_version"] = 1  # before 4, not one it refuses
            for name in ("s", "x"):
                table = f[f"_version_data/{name}/hash_table"]
                table[0] = np.zeros(1, table.dtype)[0]
            LIBS[lib].VersionedHDF5File(f).rebuild_object_dtype_hashtables()
            assert f["_version_data/versions"].attrs["data_version"] == 4
    ours = _tables(tmp_path / "xarray_vhdf5.h5")
    assert ours == _tables(tmp_path / "versioned_hdf5.h5")
    assert ours["s/hash_table"] == want["s/hash_table"]  # repaired
    assert ours["x/hash_table"] != want["x/hash_table"]  # not a string dataset: left as it was


def test_rebuild_refuses_a_read_only_file(tmp_path):
    path = tmp_path / "h.h5"
    _history(xv, path)
    with h5py.File(path, "r") as f:
        with pytest.raises(ReadOnlyError):
            xv.VersionedHDF5File(f).rebuild_hashtables()


def test_rebuilt_table_reaches_a_slot_above_an_unmapped_one(tmp_path):
    """A raw_data slot no version maps, below a mapped one: the table still reaches the top slot
    (versioned-hdf5 appends at largest_index * chunks[0]), naming the free slot with a placeholder digest."""
    from xarray_vhdf5._versions.rebuild import table_rows

    with h5py.File(tmp_path / "gap.h5", "w") as f:
        _a_then_b(f)  # a: slots 0 and 1; b: slot 2
        del f["_version_data/versions/a"]  # unlinked by hand: slot 0 mapped by no version
        rows = table_rows(f, "x")
        assert rows["shape"].tolist() == [[10, 15], [5, 10], [0, 5]]
        assert rows["hash"][:2, :24].any(axis=1).all() and bytes(rows["hash"][2]) == placeholder_digest(0)


def test_chunk_diff_of_datasets_over_two_raw_data_compares_no_rows(tmp_path):
    """Two datasets whose chunks sit at the same rows of their own raw_data: equal row numbers say
    nothing, every stored region is reported."""
    from xarray_vhdf5._versions.rebuild import chunk_diff

    with h5py.File(tmp_path / "two.h5", "w") as f:
        vf = _a_then_b(f)
        with vf.stage_version("c") as g:
            g.create_dataset("y", data=np.arange(10.0) + 100, chunks=(5,))
        x, y = (f[f"_version_data/versions/c/{n}"] for n in ("x", "y"))
        diff = chunk_diff(x, y)
        assert sorted(r.raw for r in diff) == [(slice(0, 5, 1),), (slice(5, 10, 1),)]
        np.testing.assert_array_equal(diff[ndindex.Tuple(slice(5, 10, 1))][1], np.arange(105.0, 110.0))
