"""Behaviours versioned-hdf5 2.6's own API tests check, run against both libraries.

Each test here was a failure of ``benchmarks/peer_suite.py`` (the versioned-hdf5 test
named in its docstring). Oracle: the real versioned-hdf5 2.6, run side by side with
this package on the same operations.
"""

from __future__ import annotations

import datetime

import h5py
import numpy as np
import pytest

import xarray_vhdf5

versioned_hdf5 = pytest.importorskip("versioned_hdf5")

LIBS = {"versioned_hdf5": versioned_hdf5, "xarray_vhdf5": xarray_vhdf5}


@pytest.fixture(params=sorted(LIBS))
def vfile(request, tmp_path):
    with h5py.File(tmp_path / f"{request.param}.h5", "w") as f:
        yield LIBS[request.param].VersionedHDF5File(f)


def test_listing_version_data_shows_only_the_format(vfile):
    """test_replay.py::test_delete_version(s), test_modify_metadata_*: they list ``_version_data``."""
    with vfile.stage_version("v0") as g:
        g.create_dataset("x", data=np.arange(10.0), chunks=(4,))
        g.create_dataset("grp/y", data=np.arange(3), chunks=(2,))
    with vfile.stage_version("v1") as g:
        g["x"][0] = -1.0
    assert sorted(vfile.f["_version_data"]) == ["grp", "versions", "x"]


def test_top_level_versions_name_is_forbidden(vfile):
    """test_api.py::test_top_level_versions_dataset_name_rejected: the message names it forbidden.

    versioned-hdf5 raises when the version is committed, this package when the
    dataset is created; either way the stage_version block raises and nothing is committed.
    """
    with pytest.raises(ValueError, match="forbidden dataset or group name"):
        with vfile.stage_version("v1") as g:
            g.create_dataset("versions/x", data=np.arange(7), chunks=(3,))
    assert "v1" not in vfile


@pytest.mark.parametrize("how", ["setitem", "data", "0-d array", "shape"])
def test_scalar_datasets_are_not_implemented(vfile, how):
    """test_api.py::test_scalar_dataset: NotImplementedError whose message starts with "Scalar"."""
    with vfile.stage_version("v1") as g:
        with pytest.raises(NotImplementedError, match="Scalar"):
            if how == "setitem":
                g["x"] = 123
            elif how == "data":
                g.create_dataset("x", data=123)
            elif how == "0-d array":
                g.create_dataset("x", data=np.asarray(123))
            else:
                g.create_dataset("x", shape=())


def test_maxshape_warns_as_ignored(vfile):
    """test_api.py::test_create_dataset_warns_for_ignored_kwargs: a maxshape other than all
    None warns "... parameter is currently ignored for versioned datasets" (it is not stored)."""
    with vfile.stage_version("v1") as g:
        with pytest.warns(UserWarning, match="maxshape parameter is currently ignored for versioned datasets"):
            g.create_dataset("d", data=[1, 2], maxshape=(3,))
        g.create_dataset("e", data=[1, 2], maxshape=(None,))  # quietly: filterwarnings is "error"
    assert vfile["v1"]["d"].shape == (2,)


def test_contains_takes_absolute_paths_inside_the_version_only(vfile):
    """test_api.py::test_group_contains: an absolute path in a committed version's group is
    looked up inside that group; another version's path is not a member."""
    for name in ("version1", "version2"):
        with vfile.stage_version(name) as g:
            g.create_dataset(f"{name}_grp/x", data=np.arange(3), chunks=(2,))
    v1, v2 = vfile["version1"], vfile["version2"]
    prefix = "/_version_data/versions/version1"
    assert prefix in v1 and prefix + "/" in v1
    assert prefix + "/version1_grp" in v1 and prefix + "/version1_grp/x/" in v1
    assert prefix + "/nothing" not in v1
    assert prefix not in v2 and prefix + "/" not in v2
    assert prefix + "/version1_grp" not in v2  # version2 has the group too, at its own path
    assert "/_version_data/versions/version2/version1_grp/x" in v2
    assert "version1_grp/x" in v2


def test_committed_staged_group_repr(vfile):
    """test_api.py::test_check_committed: a staged group kept past its commit shows the
    version group it became."""
    with vfile.stage_version("version1") as g:
        g.create_dataset("grp/x", data=np.arange(3), chunks=(2,))
        sub = g["grp"]
    assert repr(g) == '<Committed InMemoryGroup "/_version_data/versions/version1">'
    assert repr(sub) == '<Committed InMemoryGroup "/_version_data/versions/version1/grp">'


def test_time_lookup_refuses_the_version_being_staged(vfile):
    """test_api.py::test_no_recursive_version_group_access: inside a stage_version block, a
    lookup by a time after staging began would be the staged version's: ValueError."""
    t1 = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    with vfile.stage_version("version1", timestamp=t1) as g:
        g.create_dataset("x", data=[1, 2, 3])
    with vfile.stage_version("version2") as g:
        vfile["version1"]
        with pytest.raises(ValueError):
            vfile["version2"]
        assert vfile[t1]["x"][0] == 1
        later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=1)
        with pytest.raises(ValueError):
            vfile[later]
        with pytest.raises(ValueError):
            vfile[np.datetime64(later.replace(tzinfo=None))]
        g["x"][0] = 5
    assert vfile[later]["x"][0] == 5  # committed (its timestamp is before ``later``): found


def test_modify_metadata_vlen_to_fixed_string_takes_empty_as_the_old_fill(tmp_path):
    """test_replay.py::test_modify_metadata_to_fixed_string_fillvalue[vlen]: made fixed-width with
    a fill value, a variable-length string dataset's b"" points (stored or not) become the new fill."""
    out = {}
    for name, lib in LIBS.items():
        path = tmp_path / f"{name}.h5"
        data = np.array(["a", "", "", "", "b", "b"], dtype=object)
        with h5py.File(path, "w") as f, lib.VersionedHDF5File(f).stage_version("r0") as sv:
            sv.create_dataset("d", data=data, dtype=h5py.string_dtype(), chunks=(2,))
        with h5py.File(path, "r+") as f:
            lib.modify_metadata(f, "d", dtype="S8", fillvalue=b"x")
        with h5py.File(path, "r") as f:
            ds = lib.VersionedHDF5File(f)["r0"]["d"]
            out[name] = (ds.fillvalue, ds[:].tolist(), f["_version_data/d/raw_data"].shape)
    assert out["xarray_vhdf5"] == out["versioned_hdf5"] == (b"x", [b"a", b"x", b"x", b"x", b"b", b"b"], (4,))


@pytest.mark.parametrize(
    ("chunks", "match"),
    [
        (1000, "chunks must be a tuple"),
        (False, "chunks must be a tuple"),
        ([10], "chunks must be a tuple"),
        ((500, 500), "shape and chunk_size must have the same dimensionality"),
        ((), "shape and chunk_size must have the same dimensionality"),
    ],
)
def test_modify_metadata_bad_chunks_messages(vfile, chunks, match):
    """test_replay.py::test_modify_metadata_sparse_rechunk_bad_chunks: versioned-hdf5's messages
    (a ValueError), an int for 1-d included (h5py would take it; versioned-hdf5 does not)."""
    with vfile.stage_version("v0") as sv:
        sv.create_dataset("x", shape=(5,), chunks=(2,))
    modify = (
        versioned_hdf5.modify_metadata
        if isinstance(vfile, versioned_hdf5.VersionedHDF5File)
        else xarray_vhdf5.modify_metadata
    )
    with pytest.raises(ValueError, match=match):
        modify(vfile, "x", chunks=chunks)
    assert vfile["v0"]["x"].chunks == (2,)


def test_modify_metadata_chunks_true_is_1d_only(vfile):
    """test_replay.py::test_modify_metadata_sparse_rechunk_true_nd: chunks=True on an n-d dataset
    raises NotImplementedError "chunks must be specified for multi-dimensional datasets"; nothing
    changes."""
    with vfile.stage_version("v0") as sv:
        sv.create_dataset("x", shape=(5, 5), chunks=(2, 2))
        sv["x"][1, :] = 3.0
    modify = (
        versioned_hdf5.modify_metadata
        if isinstance(vfile, versioned_hdf5.VersionedHDF5File)
        else xarray_vhdf5.modify_metadata
    )
    with pytest.raises(NotImplementedError, match="chunks must be specified for multi-dimensional datasets"):
        modify(vfile, "x", chunks=True)
    assert vfile["v0"]["x"].chunks == (2, 2)
    assert vfile["v0"]["x"][1, :].tolist() == [3.0] * 5


@pytest.mark.parametrize("path", ["x", "a/versions/x"])
@pytest.mark.parametrize("how", ["setitem", "create_dataset"])
def test_recreated_dataset_takes_its_raw_data_chunks_and_fill(vfile, path, how):
    """test_api.py::test_resize_after_delete_and_recreate, ..._recreating_in_versions_subgroup:
    a dataset deleted in an earlier version and set again (``sv[name] = array``) takes its
    raw_data's chunks and fill value while staged, so a resize pads with the fill value it
    keeps. ``create_dataset`` without chunks/fillvalue does too here; versioned-hdf5 2.6
    pads with 0 and refuses the commit (the documented difference of docs/format.md)."""
    with vfile.stage_version("v0") as sv:
        sv.create_dataset(path, data=np.arange(10.0), chunks=(4,), fillvalue=3.0)
    with vfile.stage_version("v1") as sv:
        del sv[path]
    expected = np.full(12, 3.0)
    expected[:7] = np.arange(7.0)
    theirs = isinstance(vfile, versioned_hdf5.VersionedHDF5File)
    if how == "create_dataset" and theirs:
        with pytest.raises(ValueError, match="chunk size"):
            with vfile.stage_version("v2") as sv:
                sv.create_dataset(path, data=np.arange(7.0))
        return
    with vfile.stage_version("v2") as sv:
        if how == "setitem":
            sv[path] = np.arange(7.0)
        else:
            sv.create_dataset(path, data=np.arange(7.0))
        assert sv[path].fillvalue == 3.0
        sv[path].resize((12,))
        assert sv[path].chunks == (4,)
        np.testing.assert_array_equal(sv[path][:], expected)
    assert vfile["v2"][path].chunks == (4,)
    assert vfile["v2"][path].fillvalue == 3.0
    np.testing.assert_array_equal(vfile["v2"][path][:], expected)
    np.testing.assert_array_equal(vfile["v0"][path][:], np.arange(10.0))


def test_staged_group_reads_its_committed_version_after_the_commit(vfile):
    """test_api.py::test_nested_group, test_groups: a staged group kept past its ``with`` block
    reads the committed version (members, listing, ``in``); edits still raise ValueError."""
    with vfile.stage_version("1") as sv:
        sv.create_dataset("bar/baz", data=np.array([1, 1]))
        sub = sv["bar"]
    np.testing.assert_array_equal(sv["bar/baz"][:], [1, 1])
    np.testing.assert_array_equal(sub["baz"][:], [1, 1])
    assert "bar/baz" in sv and "nothing" not in sv
    assert list(sv) == ["bar"] and list(sub) == ["baz"]
    with pytest.raises(ValueError, match="committed"):
        sv["bar/baz"][0] = 5
    with pytest.raises(ValueError, match="committed"):
        sv.create_dataset("late", data=[1])
    np.testing.assert_array_equal(vfile["1"]["bar/baz"][:], [1, 1])


def test_absolute_paths_are_refused_in_staged_groups(vfile):
    """test_api.py::test_groups: create_dataset/create_group with an absolute path raise ValueError."""
    with vfile.stage_version("v1") as g:
        with pytest.raises(ValueError):
            g.create_dataset("/group1/test_data", data=np.arange(3))
        with pytest.raises(ValueError):
            g.create_group("/group1")
        g.create_dataset("ok", data=np.arange(3))
    assert list(vfile["v1"]) == ["ok"]


def test_stage_version_takes_utc_timestamps_only(vfile):
    """test_api.py::test_timestamp_manual: an aware UTC datetime is stored as given; a naive
    one or one in another zone raises ValueError "timestamp must be in UTC", a string
    TypeError; nothing is committed for them."""
    utc = datetime.datetime(2020, 6, 29, 20, 12, 56, tzinfo=datetime.UTC)
    with vfile.stage_version("v1", timestamp=utc) as g:
        g["x"] = np.ones(4)
    assert vfile["v1"].attrs["timestamp"] == "2020-06-29 20:12:56.000000+0000"
    plus_two = datetime.timezone(datetime.timedelta(hours=2))
    for bad in (utc.replace(tzinfo=None), utc.astimezone(plus_two)):
        with pytest.raises(ValueError, match="timestamp must be in UTC"):
            with vfile.stage_version("v2", timestamp=bad) as g:
                g["x"][0] = 2.0
    with pytest.raises(TypeError):
        with vfile.stage_version("v3", timestamp="2020-6-29") as g:
            g["x"][0] = 3.0
    with vfile.stage_version("v4", timestamp=np.datetime64("2020-06-30T01:02:03")) as g:
        g["x"][0] = 4.0
    assert vfile["v4"].attrs["timestamp"] == "2020-06-30 01:02:03.000000+0000"
    assert "v2" not in vfile and "v3" not in vfile


@pytest.mark.parametrize("then", ["commit", "resize"])
def test_nd_array_assigned_without_chunks_is_refused_at_commit(vfile, then):
    """test_api.py::test_resize_multidim_after_new_dataset_assignment: ``group[name] = array``
    of n-d data leaves its chunks unspecified; committing it raises NotImplementedError
    "chunks must be specified" and nothing is committed. 1-d data gets a guess."""
    with pytest.raises(NotImplementedError, match="chunks must be specified for multi-dimensional datasets"):
        with vfile.stage_version("v0") as sv:
            sv["y"] = np.arange(3.0)
            sv["x"] = np.ones((4, 5))
            if then == "resize":
                sv["x"].resize((8, 5))
    assert "v0" not in vfile
    with vfile.stage_version("v0") as sv:
        sv["y"] = np.arange(3.0)
        sv["x"] = np.ones((4, 5))
        del sv["x"]  # never committed: no chunks needed
    assert list(vfile["v0"]) == ["y"]


def test_nd_create_dataset_needs_chunks(vfile):
    """versioned-hdf5 2.6's create_dataset refuses n-d data or shape without chunks (or with
    chunks=True) at once: NotImplementedError "chunks must be specified"."""
    with vfile.stage_version("v0") as sv:
        for kwargs in ({"data": np.ones((4, 5))}, {"shape": (4, 5)}, {"shape": (4, 5), "chunks": True}):
            with pytest.raises(NotImplementedError, match="chunks must be specified for multi-dimensional datasets"):
                sv.create_dataset("x", **kwargs)
        sv.create_dataset("x", data=np.ones((4, 5)), chunks=(2, 5))
        sv.create_dataset("z", shape=(10,))
    assert vfile["v0"]["x"].chunks == (2, 5)
    assert vfile["v0"]["z"].chunks == (4096,)


def test_nd_array_assigned_takes_the_pinned_chunks(vfile):
    """``group[name] = array`` where the dataset's raw_data exists (the dataset deleted in an
    earlier version) takes that raw_data's chunks: no "chunks must be specified"."""
    with vfile.stage_version("v0") as sv:
        sv.create_dataset("x", data=np.ones((4, 5)), chunks=(2, 3))
    with vfile.stage_version("v1") as sv:
        del sv["x"]
    with vfile.stage_version("v2") as sv:
        sv["x"] = np.zeros((6, 5))
    # (versioned-hdf5's wrapper of its in-session staged array says chunks None)
    assert tuple(vfile.f["_version_data/x/raw_data"].attrs["chunks"]) == (2, 3)
    assert vfile["v2"]["x"][:].tolist() == np.zeros((6, 5)).tolist()
    assert vfile.f["_version_data/versions/v2/x"].shape == (6, 5)
