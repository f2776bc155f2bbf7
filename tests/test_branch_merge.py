"""Merging branches and cherry-picking (_versions/branchmerge.py), against a numpy model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5.errors import ConflictError, NothingToCommitError
from xarray_vhdf5.testing.strategies import point_edits

N, CHUNK = 60, 10


def _start(path, data=None):
    f = open_file(path)
    vf = VersionedHDF5File(f)
    with vf.stage_version("base") as g:
        g.create_dataset("x", data=np.arange(N, dtype="f8") if data is None else data, chunks=(CHUNK,))
        g.create_dataset("keep", data=np.zeros(5), chunks=(5,))
    vf.create_branch("qc")
    return f, vf


def _edit(vf, name, branch, edits):
    with vf.stage_version(name, branch=branch) as g:
        for i, v in edits.items():
            g["x"][i] = v


def test_disjoint_edits_merge_and_record_the_merge_parent(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        _edit(vf, "q1", "qc", {3: -3.0, 41: -41.0})
        _edit(vf, "m1", "main", {4: 4.5, 59: 59.5})
        report = vf.merge("qc", version="merged", message="bring QC in")
        assert report.version == "merged" and report.base == "base" and not report.fast_forward
        assert report.datasets == {"x": "merged"}  # 'keep' untouched by the source: not even looked at
        expected = np.arange(N, dtype="f8")
        expected[[3, 41, 4, 59]] = [-3.0, -41.0, 4.5, 59.5]
        np.testing.assert_array_equal(vf["merged"]["x"][:], expected)
        assert vf.current_version == "merged" and vf.list_branches()["qc"] == "q1"
        group = f["_version_data/versions/merged"]
        assert group.attrs["prev_version"] == "m1" and group.attrs["_vhdf5_merge_parent"] == "q1"
        assert group.attrs["_vhdf5_message"] == "bring QC in"
        # merging again starts from the last merge: nothing new
        with pytest.raises(NothingToCommitError, match="already merged"):
            vf.merge("qc")
        # the merge shares its chunks with both sides: chunks changed on one side only are not copied
        # base 6, q1's chunks 0 and 4, m1's chunks 0 and 5, and the merge only its chunk 0 (the one
        # both sides changed); chunks 4 and 5 are mapped from q1 and m1, not written again
        assert f["_version_data/x/hash_table"].attrs["largest_index"] == 6 + 2 + 2 + 1


def test_conflicts_raise_and_resolvers_settle_them(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        _edit(vf, "q1", "qc", {7: 1.0, 8: 8.0, 30: 3.0})
        _edit(vf, "m1", "main", {7: 2.0, 9: 9.0, 30: 3.0})  # 30: the same value on both sides
        with pytest.raises(ConflictError, match=r"'x': 1 point: \(7,\)") as info:
            vf.merge("qc", version="bad")
        np.testing.assert_array_equal(info.value.points["x"], [[7]])
        assert "bad" not in vf.versions and vf.current_version == "m1"
        for resolve, want in (("ours", 2.0), ("theirs", 1.0), (lambda p, pts, b, o, t: b + o + t, 7.0 + 3.0)):
            vf.reset_branch("main", "m1")
            name = f"r{len(vf.versions)}"
            report = vf.merge("qc", version=name, resolve=resolve)
            assert report.resolved == {"x": 1}
            got = vf[name]["x"][:]
            assert got[7] == want and got[8] == 8.0 and got[9] == 9.0 and got[30] == 3.0


def test_both_sides_append_is_a_shape_conflict(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        with vf.stage_version("q1", branch="qc") as g:
            g["x"].resize((N + 5,))
            g["x"][N:] = 1.0
        with vf.stage_version("m1", branch="main") as g:
            g["x"].resize((N + 3,))
            g["x"][N:] = 2.0
        with pytest.raises(ConflictError, match="resized on both sides"):
            vf.merge("qc", resolve="theirs")
        # an append on one side only merges like any change
        vf.create_branch("solo", "base")
        with vf.stage_version("s1", branch="solo") as g:
            g["x"][0] = -1.0
        report = vf.merge("solo", version="ok")
        assert vf["ok"]["x"].shape == (N + 3,) and vf["ok"]["x"][0] == -1.0 and report.datasets["x"] == "merged"


def test_added_and_deleted_datasets_and_attributes(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        with vf.stage_version("q1", branch="qc") as g:
            g.create_dataset("new", data=np.arange(4.0))
            del g["keep"]
            g["x"].attrs["units"] = "K"
            g.attrs["title"] = "qc"
        with vf.stage_version("m1", branch="main") as g:
            g["x"].attrs["long_name"] = "x"
        report = vf.merge("qc", version="merged")
        assert report.datasets["new"] == "added" and report.datasets["keep"] == "deleted"
        merged = vf["merged"]
        assert sorted(merged) == ["new", "x"]
        assert merged["x"].attrs["units"] == "K" and merged["x"].attrs["long_name"] == "x"
        assert merged.attrs["title"] == "qc"
        np.testing.assert_array_equal(merged["new"][:], np.arange(4.0))
        with vf.stage_version("q2", branch="qc") as g:
            g["x"].attrs["units"] = "degC"
        with vf.stage_version("m2", branch="main") as g:
            g["x"].attrs["units"] = "degF"
        with pytest.raises(ConflictError, match="attributes \\['units'\\]"):
            vf.merge("qc")
        vf.merge("qc", version="m3", resolve="theirs")
        assert vf["m3"]["x"].attrs["units"] == "degC"


def test_cherry_pick_takes_one_versions_changes(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        _edit(vf, "q1", "qc", {1: 100.0})
        _edit(vf, "q2", "qc", {2: 200.0})  # only this one is picked
        _edit(vf, "m1", "main", {3: 300.0})
        report = vf.cherry_pick("q2", version="picked")
        assert report.base == "q1" and report.source == "q2"
        got = vf["picked"]["x"][:]
        assert got[1] == 1.0 and got[2] == 200.0 and got[3] == 300.0
        assert "_vhdf5_merge_parent" not in f["_version_data/versions/picked"].attrs


def test_fast_forward(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        _edit(vf, "q1", "qc", {1: 5.0})
        report = vf.merge("qc")
        assert report.fast_forward and report.version == "q1" and vf.current_version == "q1"
        assert vf.versions == ["base", "q1"]


edit_sets = point_edits(N, st.integers(-5, 5).map(float), max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ours=edit_sets, theirs=edit_sets, resolve=st.sampled_from([None, "ours", "theirs"]))
def test_merge_matches_a_numpy_model(tmp_path_factory, ours, theirs, resolve):
    """Edits on main (ours) and qc (theirs) from one base: the merge is the numpy three-way merge."""
    path = tmp_path_factory.mktemp("model") / "m.h5"
    base = np.arange(N, dtype="f8") * 10.0  # no edit value equals a base value but 0.0 at 0
    f, vf = _start(path, base)
    with f:
        if theirs:
            _edit(vf, "q1", "qc", theirs)
        if ours:
            _edit(vf, "m1", "main", ours)
        model = base.copy()
        conflicts = []
        for i in sorted(set(ours) | set(theirs)):
            o = ours.get(i, base[i])
            t = theirs.get(i, base[i])
            if o == t or t == base[i]:
                model[i] = o
            elif o == base[i]:
                model[i] = t
            else:
                conflicts.append(i)
                model[i] = {"ours": o, "theirs": t}.get(resolve, np.nan)
        if not theirs:
            with pytest.raises(NothingToCommitError):
                vf.merge("qc", resolve=resolve)
            return
        if conflicts and resolve is None:
            with pytest.raises(ConflictError) as info:
                vf.merge("qc", resolve=resolve)
            np.testing.assert_array_equal(info.value.points["x"].ravel(), conflicts)
            return
        report = vf.merge("qc", version="merged", resolve=resolve)
        name = report.version
        np.testing.assert_array_equal(vf[name]["x"][:], model)
        np.testing.assert_array_equal(vf["base"]["x"][:], base)  # every earlier version unchanged
        if theirs:
            expected_theirs = base.copy()
            expected_theirs[list(theirs)] = list(theirs.values())
            np.testing.assert_array_equal(vf["q1"]["x"][:], expected_theirs)


def test_a_dataset_changed_on_the_source_only_is_taken_as_mapped(tmp_path):
    f, vf = _start(tmp_path / "m.h5")
    with f:
        _edit(vf, "q1", "qc", {12: -12.0})
        with vf.stage_version("m1", branch="main") as g:
            g["keep"][0] = 1.0
        raw_rows = f["_version_data/x/raw_data"].shape[0]
        report = vf.merge("qc", version="merged")
        assert report.datasets == {"x": "theirs"}
        got = vf["merged"]["x"][:]
        assert got[12] == -12.0 and vf["merged"]["keep"][0] == 1.0
        assert f["_version_data/x/raw_data"].shape[0] == raw_rows  # q1's chunk is mapped, not copied
