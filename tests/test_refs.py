"""Branches and tags (_versions/refs.py): storage, resolution, commits on branches, interop."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5 import VersionedHDF5File, open_file
from xarray_vhdf5.errors import (
    ReadOnlyError,
    RefExistsError,
    RefNotFoundError,
    StaleVersionError,
    VersionExistsError,
    VersionNotFoundError,
)


def _ds(values) -> xr.Dataset:
    values = np.asarray(values, dtype="f8")
    return xr.Dataset({"x": (("t",), values)}, coords={"t": np.arange(values.size)})


@pytest.fixture
def path(tmp_path):
    """v1 (x = 0..5) <- v2 (x[0] = 10): main at v2."""
    p = tmp_path / "refs.h5"
    _ds(np.arange(6.0)).vhdf5.commit("v1", path=p)
    staged = xr.open_dataset(p, engine="vhdf5").vhdf5.stage()
    staged["x"][0] = 10.0
    staged.vhdf5.commit("v2")
    return p


def _x(path, version) -> np.ndarray:
    with xr.open_dataset(path, engine="vhdf5", version=version) as ds:
        return ds["x"].values


def test_main_is_the_current_version_and_refs_resolve_everywhere(path):
    assert xv.list_branches(path) == {"main": "v2"}
    assert xv.create_branch(path, "qc", at="v1") == "v1"
    assert xv.create_tag(path, "paper") == "v2"
    assert xv.list_branches(path) == {"main": "v2", "qc": "v1"}
    assert xv.list_tags(path) == {"paper": "v2"}
    np.testing.assert_array_equal(_x(path, "qc"), np.arange(6.0))
    np.testing.assert_array_equal(_x(path, "paper")[0], 10.0)
    assert xr.open_dataset(path, engine="vhdf5", version="main").encoding["vhdf5_version"] == "v2"
    reader = VersionedHDF5File.open(path)
    assert reader.lookup("qc") == "v1" and reader.list_tags() == {"paper": "v2"}
    reader.close()
    assert xv.VersionStore(path, version="qc")._ensure_state().version == "v1"


def test_commits_on_a_branch_move_it_and_not_main(path):
    xv.create_branch(path, "qc", at="v1")
    staged = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    staged["x"][1] = -1.0
    assert staged.vhdf5.commit("qc1") == "qc1"
    staged["x"][2] = -2.0
    staged.vhdf5.commit("qc2")
    assert xv.list_branches(path) == {"main": "v2", "qc": "qc2"}
    np.testing.assert_array_equal(_x(path, "qc"), [0, -1, -2, 3, 4, 5])
    np.testing.assert_array_equal(_x(path, None), [10, 1, 2, 3, 4, 5])  # main untouched
    with h5py.File(path, "r") as f:
        assert f["_version_data/versions/qc1"].attrs["prev_version"] == "v1"
        assert f["_version_data/versions/qc2"].attrs["prev_version"] == "qc1"


def test_a_stale_branch_commit_is_refused(path):
    xv.create_branch(path, "qc", at="v1")
    a = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    b = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    a["x"][0] = 1.5
    a.vhdf5.commit("a")
    b["x"][1] = 2.5
    with pytest.raises(StaleVersionError, match="the branch now points to 'a'"):
        b.vhdf5.commit("b")
    assert xv.list_branches(path)["qc"] == "a"
    # force: committed on top of its parent, the branch does not move
    b.vhdf5.commit("b", force=True)
    assert xv.list_branches(path)["qc"] == "a"


def test_h5py_level_stage_version_on_a_branch(path):
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        vf.create_branch("dev", "v1")
        with vf.stage_version("d1", branch="dev") as g:
            g["x"][3] = 33.0
        assert vf.list_branches() == {"main": "v2", "dev": "d1"}
        assert vf.current_version == "v2"
        with vf.stage_version("m3", branch="main") as g:
            g["x"][4] = 44.0
        assert vf.current_version == "m3"
        with pytest.raises(ValueError, match="is not the version of branch 'dev'"):
            with vf.stage_version("d2", prev_version="v2", branch="dev"):
                pass
        with pytest.raises(RefNotFoundError, match="no branch 'nope'"):
            with vf.stage_version("d2", branch="nope"):
                pass
        # another handle moves the branch while this one stages on it: refused, nothing committed
        with pytest.raises(StaleVersionError, match="branch 'dev' moved"):
            with vf.stage_version("d2", branch="dev") as g:
                g["x"][0] = 0.5
                vf.reset_branch("dev", "v2")
        assert "d2" not in vf.versions
    np.testing.assert_array_equal(_x(path, "dev"), [10, 1, 2, 3, 4, 5])


def test_bad_names_and_collisions(path):
    xv.create_branch(path, "qc")
    with pytest.raises(RefExistsError, match="branch 'qc' already exists"):
        xv.create_tag(path, "qc")
    with pytest.raises(RefExistsError, match="names a version"):
        xv.create_branch(path, "v1")
    with pytest.raises(VersionExistsError):  # the builtin-compatible parent
        xv.create_branch(path, "main")
    for bad in ("", "a/b", "..", 3):
        with pytest.raises(ValueError, match="invalid branch name"):
            xv.create_branch(path, bad)
    with pytest.raises(VersionNotFoundError, match="no version, tag or branch named 'zz'"):
        xv.create_tag(path, "t", at="zz")
    with pytest.raises(RefNotFoundError, match="no branch 'zz'"):
        xv.reset_branch(path, "zz", "v1")
    xv.create_tag(path, "t")
    with pytest.raises(RefNotFoundError, match="tags never move"):
        xv.reset_branch(path, "t", "v1")
    with pytest.raises(ValueError, match="cannot be deleted"):
        xv.delete_branch(path, "main")
    with pytest.raises(RefNotFoundError):
        xv.delete_tag(path, "qc")  # a branch, not a tag
    with pytest.raises(VersionNotFoundError, match="no branch or tag of that name"):
        xr.open_dataset(path, engine="vhdf5", version="nothing")


def test_read_only_handles_refuse_ref_changes(path):
    with h5py.File(path, "r") as f:
        vf = VersionedHDF5File(f)
        assert vf.list_branches() == {"main": "v2"}
        with pytest.raises(ReadOnlyError):
            vf.create_tag("t")


def test_deleting_versions_moves_branches_and_spares_tags(path):
    xv.create_branch(path, "qc", at="v2")
    xv.create_tag(path, "first", at="v1")
    with open_file(path) as f:
        vf = VersionedHDF5File(f)
        with pytest.raises(ReadOnlyError, match="tag 'first'"):
            vf.delete_versions(["v1"])
        vf.delete_versions(["v2"])  # main and qc move to v1
        assert vf.list_branches() == {"main": "v1", "qc": "v1"}
    xv.delete_tag(path, "first")
    xv.reset_branch(path, "qc", "v1")
    assert xv.list_tags(path) == {}


def test_versioned_hdf5_reads_commits_and_deletes_a_file_with_refs(path):
    versioned_hdf5 = pytest.importorskip("versioned_hdf5")
    xv.create_branch(path, "qc", at="v1")
    xv.create_tag(path, "paper", at="v2")
    with h5py.File(path, "r+") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        assert set(vf._versions) >= {"v1", "v2"}
        np.testing.assert_array_equal(vf["v1"]["x"][:], np.arange(6.0))
        with vf.stage_version("vh3") as g:
            g["x"][5] = 55.0
        assert vf.current_version == "vh3"
    assert xv.list_branches(path) == {"main": "vh3", "qc": "v1"}  # main followed versioned-hdf5
    with h5py.File(path, "r+") as f:
        versioned_hdf5.delete_versions(f, ["v1"])
    with pytest.raises(RefNotFoundError, match="branch 'qc' .* points to version 'v1', which was deleted"):
        xr.open_dataset(path, engine="vhdf5", version="qc")
    np.testing.assert_array_equal(_x(path, "paper")[0], 10.0)
    xv.reset_branch(path, "qc", "paper")
    assert xv.list_branches(path)["qc"] == "v2"


def test_accessor_verbs(path):
    ds = xr.open_dataset(path, engine="vhdf5", version="v1")
    assert ds.vhdf5.create_branch("qc") == "v1"
    assert ds.vhdf5.create_tag("first") == "v1"
    frame = ds.vhdf5.refs
    assert frame.loc["qc", "kind"] == "branch" and frame.loc["first", "version"] == "v1"
    assert frame.loc["main", "version"] == "v2"
    assert ds.vhdf5.branch is None
    assert xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.branch == "qc"
    tree = xr.open_datatree(path, engine="vhdf5", version="v1")
    assert list(tree.vhdf5.refs.index) == ["main", "qc", "first"]
    assert list(tree.vhdf5.versions.index) == ["v1", "v2"]
    with pytest.raises(ValueError, match="needs a Dataset opened"):
        _ds([1.0]).vhdf5.create_branch("x")


def test_cli_branch_tag_and_graph(path):
    from click.testing import CliRunner

    from xarray_vhdf5.cli._main import cli

    run = CliRunner().invoke
    assert run(cli, ["branch", str(path), "qc", "--at", "v1"]).output == "created branch qc at v1\n"
    assert run(cli, ["tag", str(path), "paper"]).output == "tagged v2 as paper\n"
    listing = run(cli, ["branch", str(path)]).output.splitlines()
    assert listing == ["* main  v2", "  qc    v1"]
    staged = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    staged["x"][1] = 5.0
    staged.vhdf5.commit("q1", message="qc fix")
    graph = run(cli, ["log", str(path), "--graph"]).output.splitlines()
    assert graph[0].startswith("*") and "q1 (qc)" in graph[0] and "qc fix" in graph[0]
    assert graph[1].startswith("| *") and "v2 (main, tag: paper)" in graph[1]
    assert graph[2] == "|/" and graph[3].startswith("*") and "v1" in graph[3]
    result = run(cli, ["branch", str(path), "qc", "--reset", "nope"])
    assert result.exit_code == 1 and "no version, tag or branch named 'nope'" in result.output
    assert run(cli, ["branch", str(path), "qc", "-d"]).output == "deleted branch qc (was at q1)\n"
    assert run(cli, ["tag", str(path), "paper", "-d"]).output == "deleted tag paper (was v2)\n"
    assert run(cli, ["tag", str(path)]).output == ""


def test_cli_merge_and_cherry_pick(path):
    from click.testing import CliRunner

    from xarray_vhdf5.cli._main import cli

    run = CliRunner().invoke
    xv.create_branch(path, "qc", at="v1")
    for name, i, value in (("q1", 1, -1.0), ("q2", 2, -2.0)):
        staged = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
        staged["x"][i] = value
        staged.vhdf5.commit(name)
    out = run(cli, ["cherry-pick", str(path), "q2", "--version", "p"]).output
    assert out.splitlines() == ["committed p on branch main (base q1)", "  x: merged"]
    np.testing.assert_array_equal(_x(path, "p"), [10, 1, -2, 3, 4, 5])
    staged = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    staged["x"][0] = 99.0
    staged.vhdf5.commit("q3")
    result = run(cli, ["merge", str(path), "qc", "--version", "m"])
    assert result.exit_code == 1 and "1 conflicting point" in result.output and "(0,)" in result.output
    out = run(cli, ["merge", str(path), "qc", "--version", "m", "--resolve", "theirs"]).output
    assert "committed m on branch main" in out and "1 conflicting points resolved" in out
    np.testing.assert_array_equal(_x(path, "m"), [99, -1, -2, 3, 4, 5])


def test_as_of_stays_on_the_branch(path):
    import datetime as dt

    xv.create_branch(path, "qc", at="v1")
    with h5py.File(path, "r") as f:
        t_v2 = dt.datetime.fromisoformat(
            f["_version_data/versions/v2"].attrs["timestamp"].decode()
            if isinstance(f["_version_data/versions/v2"].attrs["timestamp"], bytes)
            else f["_version_data/versions/v2"].attrs["timestamp"]
        )
    staged = xr.open_dataset(path, engine="vhdf5", version="qc").vhdf5.stage()
    staged["x"][5] = 50.0
    staged.vhdf5.commit("q1")
    later = dt.datetime.now(dt.UTC)

    def opened(**kw):
        with xr.open_dataset(path, engine="vhdf5", **kw) as ds:
            return ds.encoding["vhdf5_version"]

    # at v2's time, branch qc was still at v1 (v2 is on main): as_of stays on the branch
    assert opened(version="qc", as_of=t_v2) == "v1"
    assert opened(version=t_v2) == "v2"  # a time as version=: the file's last version then
    assert opened(version="qc", as_of=later) == "q1"
    assert opened(as_of=later) == "v2" and opened(version="main", as_of=str(later.isoformat())) == "v2"
    with pytest.raises(VersionNotFoundError, match="no version of 'qc' at 2000"):
        opened(version="qc", as_of="2000-01-01")
