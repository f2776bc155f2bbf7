"""The DataTree accessor's versioning verbs: dt.vhdf5.stage(), staged commit, dt.vhdf5.diff()."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.manifest import ChunkManifest


def _tree() -> xr.DataTree:
    rng = np.random.default_rng(7)
    return xr.DataTree.from_dict(
        {
            "/": xr.Dataset(
                {"co2": ((), 415.0)},
                coords={"time": ("time", np.datetime64("2020-01-01", "ns") + np.arange(6) * np.timedelta64(1, "D"))},
                attrs={"title": "run"},
            ),
            "/ocean": xr.Dataset({"sst": (("time", "cell"), rng.normal(size=(6, 40)).astype("f4"), {"units": "degC"})}),
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


def _count_reads(monkeypatch) -> list:
    reads = []
    original = ChunkManifest._chunk

    def counting(self, slot, where):
        reads.append((self.name, int(self.rows[slot])))
        return original(self, slot, where)

    monkeypatch.setattr(ChunkManifest, "_chunk", counting)
    return reads


def test_stage_edit_commit_in_one_version(path):
    with xr.open_datatree(path, engine="vhdf5") as tree:
        staged = tree.vhdf5.stage()
    staged["ocean/sst"][1, 3] = 99.0
    staged["ocean/bottom/temp"][0, 0] = -1.0
    assert staged.vhdf5.commit("v2", message="two groups") == "v2"
    assert staged["ocean"].encoding["vhdf5_version"] == "v2"
    expected = _tree()
    expected["ocean/sst"][1, 3] = 99.0
    expected["ocean/bottom/temp"][0, 0] = -1.0
    with xr.open_datatree(path, engine="vhdf5") as again:
        assert again.vhdf5.version == "v2"
        xr.testing.assert_identical(again.load(), expected)
    log = xv.xr.version_log_frame(path)
    assert log.loc["v2", "parent"] == "v1" and log.loc["v2", "message"] == "two groups"
    assert log.loc["v2", "new_chunks"] == 2  # one chunk of sst, one of temp
    # the staged tree goes on: a second edit commits on top of v2
    staged["ocean/sst"][5, 39] = 7.0
    assert staged.vhdf5.commit("v3") == "v3"
    with xr.open_datatree(path, engine="vhdf5", version="v3") as v3:
        assert float(v3["ocean/sst"][5, 39]) == 7.0 and float(v3["ocean/sst"][1, 3]) == 99.0


def test_staged_commit_refusals(path):
    with xr.open_datatree(path, engine="vhdf5") as tree:
        staged = tree.vhdf5.stage()
    with pytest.raises(xv.errors.NothingToCommitError):
        staged.vhdf5.commit("empty")
    with xr.open_datatree(path, engine="vhdf5") as tree:
        other = tree.vhdf5.stage()
    other["ocean/sst"][0, 0] = 1.0
    other.vhdf5.commit("other")
    staged["ocean/sst"][0, 1] = 2.0
    with pytest.raises(xv.StaleVersionError, match="staged from version 'v1'"):
        staged.vhdf5.commit("late")
    assert staged.vhdf5.commit("late", force=True) == "late"
    log = xv.xr.version_log_frame(path)
    assert log.loc["late", "parent"] == "v1"
    with pytest.raises(ValueError, match="opened with xr.open_datatree"):
        _tree().vhdf5.stage()


def test_stage_on_a_branch_commits_on_it(path):
    xv.create_branch(path, "qc", at="v1")
    with xr.open_datatree(path, engine="vhdf5", version="qc") as tree:
        staged = tree.vhdf5.stage()
    assert staged.vhdf5.branch == "qc"
    staged["ocean/sst"][0, 0] = 5.0
    name = staged.vhdf5.commit("qc1")
    assert xv.list_branches(path)["qc"] == name
    with xr.open_datatree(path, engine="vhdf5") as current:  # main did not move
        assert current.vhdf5.version == "v1"


def test_diff_per_group(path, monkeypatch):
    with xr.open_datatree(path, engine="vhdf5") as tree:
        staged = tree.vhdf5.stage()
    staged["ocean/sst"][1, 3] += 1.0
    staged.vhdf5.commit("v2")
    with xr.open_datatree(path, engine="vhdf5", version="v2") as tree:
        diff = tree.vhdf5.diff("v1")
    assert isinstance(diff, xr.DataTree)
    assert sorted(node.path for node in diff.subtree) == ["/", "/ocean", "/ocean/bottom"]
    assert diff["ocean"].attrs["modified"] == ["sst"]
    assert diff["ocean/bottom"].attrs["unchanged"] == ["temp"] and sorted(diff["/"].attrs["unchanged"]) == [
        "co2",
        "time",
    ]
    assert int(diff["ocean/sst_changed"].sum()) == 1
    assert float(diff["ocean/sst_diff"].max()) == pytest.approx(1.0)
    # each node equals the Dataset accessor's diff of that group
    with xr.open_dataset(path, engine="vhdf5", version="v2", group="ocean") as ocean:
        xr.testing.assert_identical(diff["ocean"].to_dataset(inherit=False), ocean.vhdf5.diff("v1"))
    # lazy: dask arrays, read when computed
    with xr.open_datatree(path, engine="vhdf5", version="v2", chunks={}) as chunked:
        reads = _count_reads(monkeypatch)
        lazy = chunked.vhdf5.diff("v1")
        assert not [n for n, _ in reads if "sst" in n or "temp" in n]  # nothing read to build it
    assert lazy["ocean/sst_changed"].chunks is not None
    assert int(lazy["ocean/sst_changed"].sum()) == 1
    assert sorted(n.split("/")[-3] for n, _ in reads if "sst" in n) == ["v1", "v2"]  # the one remapped chunk


def test_diff_of_a_group_added(path):
    with xr.open_datatree(path, engine="vhdf5") as tree:
        grown = tree.to_dict()
    grown = {k: v.copy() for k, v in grown.items()}
    grown["/ice"] = xr.Dataset({"thick": ("time", np.arange(6.0))})
    xr.DataTree.from_dict(grown).vhdf5.commit("v2", path=path, prev_version="v1")
    with xr.open_datatree(path, engine="vhdf5", version="v2") as tree:
        diff = tree.vhdf5.diff("v1")
    assert diff["ice"].attrs["added"] == ["thick"]
    with xr.open_datatree(path, engine="vhdf5", version="v1") as tree:
        back = tree.vhdf5.diff("v2")
    assert back["ice"].attrs["removed"] == ["thick"]
