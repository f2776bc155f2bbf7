"""Every version read right by netCDF-C (ncdump, netCDF4-python), h5netcdf and h5dump; the root view.

Oracle: the Datasets committed. Each version group must read back as the
Dataset committed as it, whatever the versions around it (growing, shrinking,
edited histories), in every netCDF tool, and the file's root group must show
the current version (``_versions/rootview.py``). ``ncdump`` and ``h5dump`` are
used when on PATH (Debian's ``netcdf-bin`` and ``hdf5-tools``), else skipped.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._versions import rootview
from xarray_vhdf5._versions.rootview import disable_root_view, enable_root_view, root_view_enabled

netCDF4 = pytest.importorskip("netCDF4")

VERSIONS = "/_version_data/versions"


def _ds(n: int, edit: float | None = None) -> xr.Dataset:
    """``n`` times of a variable on (time, station); ``station`` has no coordinate (a phony scale)."""
    v = np.arange(n * 3, dtype="f8").reshape(n, 3)
    if edit is not None:
        v[0, 0] = edit
    return xr.Dataset(
        {"v": (("time", "station"), v), "flag": ("station", np.array([1, 2, 3], dtype="i4"))},
        coords={"time": ("time", np.arange(n, dtype="f8") * 10)},
        attrs={"title": f"{n} times"},
    )


#: A growing, shrinking and edited history: version name -> Dataset committed.
HISTORY = {"A10": _ds(10), "B5": _ds(5), "C12": _ds(12), "D12": _ds(12, edit=-7.0)}


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "hist.h5"
    for name, ds in HISTORY.items():
        ds.vhdf5.commit(name, path=path)
    return path


def _check(got_v, got_time, want: xr.Dataset, where: str) -> None:
    np.testing.assert_array_equal(np.asarray(got_time), want["time"].values, err_msg=where)
    np.testing.assert_array_equal(np.asarray(got_v), want["v"].values, err_msg=where)


def _tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        pytest.skip(f"{name} not on PATH (Debian: netcdf-bin / hdf5-tools)")
    return exe


# -- every version, every reader -------------------------------------------------


def test_netcdf4_python_reads_every_version(history):
    with netCDF4.Dataset(history) as nc:
        for name, want in HISTORY.items():
            g = nc[f"{VERSIONS}/{name}"]
            assert {k: len(d) for k, d in g.dimensions.items()} == {"time": want.sizes["time"], "station": 3}, name
            assert g["v"].dimensions == ("time", "station")
            _check(g["v"][:], g["time"][:], want, name)


@pytest.mark.parametrize("engine", ["netcdf4", "h5netcdf"])
def test_xarray_netcdf_engines_read_every_version(history, engine):
    for name, want in HISTORY.items():
        with xr.open_dataset(history, engine=engine, group=f"{VERSIONS}/{name}") as got:
            assert dict(got.sizes) == {"time": want.sizes["time"], "station": 3}, name
            _check(got["v"].values, got["time"].values, want, name)
            assert got.attrs["title"] == want.attrs["title"]


def _ncdump_values(exe: str, path, group: str, var: str) -> np.ndarray:
    out = subprocess.run([exe, "-g", group, "-v", var, str(path)], capture_output=True, text=True, check=True).stdout
    block = out[out.index(f"group: {group} {{") : out.index(f"}} // group {group}")]
    dims = dict(re.findall(r"^\s*(\w+) = (\d+) ;", block[: block.index("variables:")], flags=re.M))
    data = block[block.index("data:") :]
    values = re.search(rf"\b{var} =([^;]*);", data).group(1)
    return np.array([float(x) for x in values.replace("\n", " ").split(",")]), {k: int(n) for k, n in dims.items()}


def test_ncdump_reads_every_version(history):
    exe = _tool("ncdump")
    for name, want in HISTORY.items():
        v, dims = _ncdump_values(exe, history, name, "v")
        t, _ = _ncdump_values(exe, history, name, "time")
        assert dims == {"time": want.sizes["time"], "station": 3}, name
        _check(v.reshape(-1, 3), t, want, name)


def test_h5dump_reads_every_version_and_the_whole_file(history):
    exe = _tool("h5dump")
    whole = subprocess.run([exe, str(history)], capture_output=True, text=True)
    assert whole.returncode == 0 and "error" not in whole.stdout + whole.stderr, whole.stderr[-2000:]
    for name, want in HISTORY.items():
        out = subprocess.run(
            [exe, "-y", "-w", "0", "-d", f"{VERSIONS}/{name}/v", str(history)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        start = out.index("DATA {") + 6
        data = out[start : out.index("}", start)]
        got = np.array([float(x) for x in data.replace(",", " ").split()])
        np.testing.assert_array_equal(got, want["v"].values.ravel(), err_msg=name)


def test_whole_file_ncdump_works(history):
    exe = _tool("ncdump")
    run = subprocess.run([exe, str(history)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]


# -- bookkeeping datasets every tool can read ----------------------------------------


def test_bookkeeping_datasets_are_unfiltered(history):
    """Hash tables and the version index: no filter (lzf is h5py's own; deflate leaked space)."""
    seen = {}

    def visit(name, obj):
        if (
            isinstance(obj, h5py.Dataset)
            and not obj.is_virtual
            and name.rsplit("/", 1)[-1] in ("hash_table", "rows", "names")
        ):
            seen[name] = obj.compression

    with h5py.File(history) as f:
        f.visititems(visit)
    assert {n.rsplit("/", 1)[-1] for n in seen} == {"hash_table", "rows", "names"}
    assert set(seen.values()) == {None}, seen


def test_versioned_hdf5_reads_and_commits_into_our_file(history):
    vh = pytest.importorskip("versioned_hdf5")
    with h5py.File(history, "a") as f:
        vf = vh.VersionedHDF5File(f)
        for name, want in HISTORY.items():
            np.testing.assert_array_equal(vf[name]["v"][:], want["v"].values)
            np.testing.assert_array_equal(vf[name]["time"][:], want["time"].values)
        with vf.stage_version("E") as g:
            g["v"][1, 1] = 99.0
    want = HISTORY["D12"]["v"].values.copy()
    want[1, 1] = 99.0
    with xr.open_dataset(history, engine="vhdf5", version="E") as got:
        np.testing.assert_array_equal(got["v"].values, want)


def test_files_versioned_hdf5_made_keep_their_lzf_tables(tmp_path):
    vh = pytest.importorskip("versioned_hdf5")
    path = tmp_path / "vh.h5"
    with h5py.File(path, "w") as f:
        with vh.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(10.0), chunks=(4,))
    with h5py.File(path, "a") as f:
        with xv.VersionedHDF5File(f).stage_version("v2") as g:
            g["x"][0] = -1.0
        assert f["_version_data/x/hash_table"].compression == "lzf"  # appended to as it was
        np.testing.assert_array_equal(vh.VersionedHDF5File(f)["v2"]["x"][:3], [-1.0, 1.0, 2.0])


# -- files written before, and versions committed by versioned-hdf5 -------------------------


def _number_dimids_per_version(path) -> None:
    """Make the file as this package wrote it before: ``_Netcdf4Dimid`` from 0 in each version."""
    with h5py.File(path, "a") as f:
        for name in HISTORY:
            ids = iter(range(100))
            for obj in f[f"{VERSIONS}/{name}"].values():
                if h5py.h5ds.is_scale(obj.id):
                    obj.attrs.create("_Netcdf4Dimid", next(ids), dtype="<i4")
        del f["_version_data/__netcdf_dimensions__"].attrs["netcdf_dimids_forgotten"]


def test_files_written_before_are_repaired_by_the_next_commit(history):
    _number_dimids_per_version(history)
    with netCDF4.Dataset(history) as nc:  # the defect, as such files show it
        assert len(nc[f"{VERSIONS}/A10"].dimensions["time"]) != 10
    for name, want in HISTORY.items():  # our engine reads them all the same
        with xr.open_dataset(history, engine="vhdf5", version=name) as got:
            _check(got["v"].values, got["time"].values, want, name)
    more = _ds(3)
    more.vhdf5.commit("F3", path=history)
    with netCDF4.Dataset(history) as nc:
        for name, want in {**HISTORY, "F3": more}.items():
            g = nc[f"{VERSIONS}/{name}"]
            assert len(g.dimensions["time"]) == want.sizes["time"], name
            _check(g["v"][:], g["time"][:], want, name)


def test_a_versioned_hdf5_commit_is_repaired_by_our_next_commit(history):
    vh = pytest.importorskip("versioned_hdf5")
    with h5py.File(history, "a") as f:
        with vh.VersionedHDF5File(f).stage_version("E") as g:  # copies DIMENSION_LIST into D12's scales
            g["v"][0, 1] = 50.0
        with xv.VersionedHDF5File(f).stage_version("F") as g:  # an h5py-level commit of ours
            g["v"][0, 2] = 60.0
    e = HISTORY["D12"].copy(deep=True)
    e["v"][0, 1] = 50.0
    fv = e.copy(deep=True)
    fv["v"][0, 2] = 60.0
    with netCDF4.Dataset(history) as nc:
        for name, want in {**HISTORY, "E": e, "F": fv}.items():
            g = nc[f"{VERSIONS}/{name}"]
            assert g["v"].dimensions == ("time", "station"), name
            _check(g["v"][:], g["time"][:], want, name)


# -- the root view ------------------------------------------------------------------


@pytest.mark.parametrize("engine", [None, "netcdf4", "h5netcdf"])
def test_open_dataset_without_our_engine_shows_the_current_version(history, engine):
    with xr.open_dataset(history, engine=engine) as got:
        want = HISTORY["D12"]
        assert dict(got.sizes) == {"time": 12, "station": 3}
        _check(got["v"].values, got["time"].values, want, "root")
        np.testing.assert_array_equal(got["flag"].values, want["flag"].values)
        assert got.attrs["title"] == want.attrs["title"]


def test_root_view_follows_commits_and_deletions(history):
    with h5py.File(history, "a") as f:
        with xv.VersionedHDF5File(f).stage_version("E") as g:  # h5py level
            g["v"][0, 0] = 1000.0
    with xr.open_dataset(history, engine="netcdf4") as got:
        assert got["v"].values[0, 0] == 1000.0
    with h5py.File(history, "a") as f:
        xv.delete_versions(f, ["E", "D12"])  # the current version and its parent
    with xr.open_dataset(history, engine="h5netcdf") as got:
        _check(got["v"].values, got["time"].values, HISTORY["C12"], "after delete")
    with netCDF4.Dataset(history) as nc:
        _check(nc["v"][:], nc["time"][:], HISTORY["C12"], "netCDF-C after delete")
    HISTORY["B5"].vhdf5.commit("G", path=history)  # shrinks: the view's time is 5 long
    with netCDF4.Dataset(history) as nc:
        assert len(nc.dimensions["time"]) == 5
        _check(nc["v"][:], nc["time"][:], HISTORY["B5"], "netCDF-C after shrink")


def test_ncdump_shows_the_current_version_at_the_root(history):
    exe = _tool("ncdump")
    out = subprocess.run([exe, "-v", "time", str(history)], capture_output=True, text=True, check=True).stdout
    head = out[: out.index("group: _version_data")]
    assert re.search(r"time = 12 ;", head) and re.search(r"double v\(time, station\)", head)
    assert "time = 0, 10, 20" in head


def test_root_view_is_invisible_to_our_engine_and_versioned_hdf5(history):
    vh = pytest.importorskip("versioned_hdf5")
    with h5py.File(history) as f:
        assert sorted(f) == ["__vhdf5__", "_version_data", "flag", "station", "time", "v"]
        assert isinstance(f.get("v", getlink=True), h5py.SoftLink)
        assert xv.VersionedHDF5File(f).versions == list(HISTORY)
        assert vh.VersionedHDF5File(f).current_version == "D12"
    assert xv.VHDF5BackendEntrypoint().guess_can_open(history)
    tree = xr.open_datatree(history, engine="vhdf5")
    assert set(tree.children) == set() and set(tree.ds.data_vars) == {"v", "flag"}


def test_root_view_off_for_h5py_level_files_and_can_be_turned_off(tmp_path, history):
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        with xv.VersionedHDF5File(f).stage_version("v1") as g:
            g.create_dataset("x", data=np.arange(4.0))
        # as versioned-hdf5 leaves it, but for this package's bookkeeping group (_versions/bookkeeping.py)
        assert sorted(f) == ["__vhdf5__", "_version_data"] and not root_view_enabled(f)
        enable_root_view(f)
        np.testing.assert_array_equal(f["x"][:], np.arange(4.0))
    with h5py.File(history, "a") as f:
        disable_root_view(f)
        assert sorted(f) == ["__vhdf5__", "_version_data"] and "title" not in f.attrs
        with xv.VersionedHDF5File(f).stage_version("E") as g:
            g["v"][0, 0] = 5.0
        assert sorted(f) == ["__vhdf5__", "_version_data"]


def test_root_view_links_end_the_same_whatever_the_view_held_before(tmp_path):
    path = tmp_path / "view.nc"
    a = xr.Dataset({"x": ("t", np.arange(3.0)), "y": ("t", np.ones(3))}, attrs={"title": "a", "keep": 1})
    a.vhdf5.commit("A", path=path)
    b = xr.Dataset({"x": ("t", np.arange(4.0))}, attrs={"keep": 1})
    with h5py.File(path, "a") as f:
        f["stale"] = h5py.SoftLink("/_version_data/versions/A/y")  # a link of an older view
        f["mine"] = h5py.SoftLink("/elsewhere")  # the user's own links and objects are left alone
        f.attrs["own"] = "user"
    b.vhdf5.commit("B", path=path)
    with h5py.File(path, "r") as f:
        links = {k: f.get(k, getlink=True) for k in f if k not in ("__vhdf5__", "_version_data")}
        assert {k: getattr(v, "path", None) for k, v in links.items()} == {
            "x": "/_version_data/versions/B/x",
            "t": "/_version_data/versions/B/t",
            "mine": "/elsewhere",
        }
        assert dict(f.attrs) == {"keep": 1, "own": "user"}  # "title" went with version A
        state = f["_version_data/__netcdf_dimensions__"].attrs
        assert state["root_view"] == "B" and list(state["root_view_attrs"]) == ["keep"]
        kept = f.get("x", getlink=True)
    with h5py.File(path, "a") as f:
        rootview.update_root_view(f, "A")  # back to A: every link re-pointed, title back
        assert f.get("y", getlink=True).path == "/_version_data/versions/A/y"
        assert f.get("x", getlink=True).path == "/_version_data/versions/A/x"
        assert f.attrs["title"] == "a" and f.attrs["own"] == "user"
        rootview.update_root_view(f, "A")  # again: the same end state
        assert sorted(k for k in f) == ["__vhdf5__", "_version_data", "mine", "t", "x", "y"]
        rootview.update_root_view(f, "nonesuch")  # a name no version has: an empty view
        assert sorted(f) == ["__vhdf5__", "_version_data", "mine"] and dict(f.attrs) == {"own": "user"}
    assert kept.path == "/_version_data/versions/B/x"
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got, b)
