"""``dt.vhdf5.commit(rebase=True)``: a staged tree merged onto versions committed since it was staged.

Same rules as a staged Dataset's rebase (``xarray_vhdf5._versions.merge``): changes on
disjoint points merge, the same points changed to different values conflict, and
nothing is written then. Checked against numpy on the same edits.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv


def _tree() -> xr.DataTree:
    rng = np.random.default_rng(11)
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset({"co2": ((), 415.0)}, attrs={"title": "run"}),
            "/ocean": xr.Dataset({"sst": (("time", "cell"), rng.normal(size=(6, 40)).astype("f4"))}),
            "/ocean/bottom": xr.Dataset({"temp": (("time", "cell"), rng.normal(size=(6, 40)))}),
        }
    )


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "tree.h5"
    tree = _tree()
    tree["ocean"]["sst"].encoding["chunks"] = (2, 20)
    tree.vhdf5.commit("v1", path=path)
    return path


def _stage(path) -> xr.DataTree:
    with xr.open_datatree(path, engine="vhdf5") as tree:
        return tree.vhdf5.stage()


def _versions(path) -> list[str]:
    with xv.VersionedHDF5File.open(path) as vf:
        return sorted(vf.versions)


def test_disjoint_changes_merge_and_the_tree_shows_both(path):
    mine, theirs = _stage(path), _stage(path)
    theirs["ocean/sst"][0, :5] = 1.0  # the same chunk as mine, other points
    theirs["ocean/bottom/temp"][5, 39] = 2.0
    assert theirs.vhdf5.commit("theirs") == "theirs"
    mine["ocean/sst"][1, :5] = -1.0
    mine["ocean/bottom/temp"][0, 0] = -2.0
    with pytest.raises(xv.StaleVersionError, match=r"commit\(rebase=True\)"):
        mine.vhdf5.commit("refused")
    assert mine.vhdf5.commit("mine", rebase=True) == "mine"

    expected = _tree()
    sst = expected["ocean/sst"].values.copy()
    sst[0, :5], sst[1, :5] = 1.0, -1.0
    temp = expected["ocean/bottom/temp"].values.copy()
    temp[5, 39], temp[0, 0] = 2.0, -2.0
    with xr.open_datatree(path, engine="vhdf5") as now:
        assert now.vhdf5.version == "mine"
        np.testing.assert_array_equal(now["ocean/sst"].values, sst)
        np.testing.assert_array_equal(now["ocean/bottom/temp"].values, temp)
    with h5py.File(path, "r") as f:  # committed onto the other writer's version
        assert f["_version_data/versions/mine"].attrs["prev_version"] == "theirs"
    # the tree object itself was staged again from the merged version
    assert mine["ocean"].encoding["vhdf5_version"] == "mine"
    np.testing.assert_array_equal(mine["ocean/sst"].values, sst)
    np.testing.assert_array_equal(mine["ocean/bottom/temp"].values, temp)
    # and it commits on again without a rebase
    mine["ocean/sst"][5, 0] = 7.0
    assert mine.vhdf5.commit("next") == "next"
    with xr.open_datatree(path, engine="vhdf5", version="next") as nxt:
        assert float(nxt["ocean/sst"][5, 0]) == 7.0
        assert float(nxt["ocean/sst"][0, 0]) == 1.0


def test_conflicting_points_raise_and_nothing_is_written(path):
    mine, theirs = _stage(path), _stage(path)
    theirs["ocean/sst"][2, 7] = 5.0
    theirs.vhdf5.commit("theirs")
    mine["ocean/sst"][2, 7] = 6.0
    with pytest.raises(xv.ConflictError) as info:
        mine.vhdf5.commit("mine", rebase=True)
    assert "ocean/sst" in str(info.value)
    assert _versions(path) == ["theirs", "v1"]
    assert mine["ocean"].encoding["vhdf5_version"] == "v1"
    assert float(mine["ocean/sst"][2, 7]) == 6.0  # the staged edit is kept, to be resolved


def test_rebase_refusals(path):
    with h5py.File(path, "a") as f:
        xv.create_branch(f, "qc", "v1")
    mine = _stage(path)
    mine["ocean/sst"][0, 0] = 3.0
    with pytest.raises(ValueError, match="choose one"):
        mine.vhdf5.commit("x", force=True, rebase=True)
    with xr.open_datatree(path, engine="vhdf5", version="qc") as tree:
        on_branch = tree.vhdf5.stage()
    on_branch["ocean/sst"][0, 0] = 4.0
    with pytest.raises(xv.UnsupportedError, match="merge the branches"):
        on_branch.vhdf5.commit("y", rebase=True)
    # nothing moved: a rebase with nothing to merge is a plain commit
    assert mine.vhdf5.commit("plain", rebase=True) == "plain"
    assert _versions(path) == ["plain", "v1"]
