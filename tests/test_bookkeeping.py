"""This package's bookkeeping group at the root (``/__vhdf5__``), and files that kept it in ``_version_data``.

See :mod:`xarray_vhdf5._versions.bookkeeping`. Files written before the move kept
the same group, with the same members, at ``/_version_data/__vhdf5_version_index__``;
the fixture :func:`legacy` makes such a file by moving the group back there (a
link move: the bytes, the counters' offset included, stay where a writer of
that time put them). Oracles: versioned-hdf5 2.6 (what it lists and reads), the
counters read as bytes at their offset, and :func:`~xarray_vhdf5._versions.check.check_file`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5._versions import bookkeeping, generation
from xarray_vhdf5._versions.caches import COMMIT_TOKEN
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5._versions.registry import VersionRegistry

versioned_hdf5 = pytest.importorskip("versioned_hdf5")

NEW, OLD = bookkeeping.PATH, bookkeeping.LEGACY_PATH


def _make(path, n=3):
    with h5py.File(path, "w") as f:
        vf = VersionedHDF5File(f)
        for i in range(n):
            with vf.stage_version(f"v{i}") as g:
                if i == 0:
                    g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
                else:
                    g["x"][i] = -i


def _counters(path, offset):
    fd = os.open(path, os.O_RDONLY)
    try:
        return generation.read_at(fd, offset)
    finally:
        os.close(fd)


@pytest.fixture
def legacy(tmp_path):
    """A file laid out as before the move: the group at ``/_version_data/__vhdf5_version_index__``."""
    path = str(tmp_path / "old.h5")
    _make(path)
    with h5py.File(path, "r+") as f:
        f.move(NEW, OLD)
        assert NEW not in f and "__vhdf5_version_index__" in f["_version_data"]
    return path


# -- where the group is --------------------------------------------------------------


def test_new_files_keep_version_data_as_versioned_hdf5_writes_it(tmp_path):
    """versioned-hdf5 and our writer leave the same children in _version_data; ours adds /__vhdf5__ only."""
    ours, theirs = str(tmp_path / "ours.h5"), str(tmp_path / "theirs.h5")
    _make(ours)
    with h5py.File(theirs, "w") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=np.arange(100.0), chunks=(10,))
    with h5py.File(ours, "r") as a, h5py.File(theirs, "r") as b:
        assert sorted(a["_version_data"]) == sorted(b["_version_data"]) == ["versions", "x"]
        assert sorted(a) == ["__vhdf5__", "_version_data"] and sorted(b) == ["_version_data"]
        assert sorted(a[NEW]) == ["addresses", "generation", "log", "names", "rows", "small_map_log"]
        assert COMMIT_TOKEN in a[NEW].attrs
    # versioned-hdf5 opens, reads and commits our file
    with h5py.File(ours, "r+") as f:
        vf = versioned_hdf5.VersionedHDF5File(f)
        assert vf["v2"]["x"][2] == -2
        with vf.stage_version("w") as g:
            g["x"][50] = 0.5
        assert sorted(f["_version_data"]) == ["versions", "x"]


def test_netcdf_root_variables_are_the_current_versions(tmp_path):
    """xarray's netcdf4 and h5netcdf engines on the root: the current version's variables, nothing else."""
    pytest.importorskip("netCDF4")
    pytest.importorskip("h5netcdf")
    path = str(tmp_path / "nc.h5")
    xr.Dataset({"v": ("t", np.arange(3.0))}, coords={"t": np.arange(3.0)}).vhdf5.commit("A", path=path)
    want = xr.Dataset({"v": ("t", np.arange(3.0) * 2)}, coords={"t": np.arange(3.0)})
    want.vhdf5.commit("B", path=path)
    for engine in ("netcdf4", "h5netcdf"):
        with xr.open_dataset(path, engine=engine) as got:
            assert set(got.variables) == {"v", "t"}, engine
            np.testing.assert_array_equal(got["v"].values, want["v"].values)
    with xr.open_dataset(path, engine="vhdf5") as got:
        xr.testing.assert_identical(got.drop_encoding(), want) if hasattr(got, "drop_encoding") else None
    tree = xr.open_datatree(path, engine="vhdf5")
    assert set(tree.children) == set() and set(tree.ds.data_vars) == {"v"}


def test_bookkeeping_name_is_reserved_at_a_versions_root(tmp_path):
    """The root view links a version's members at the root: none may take the bookkeeping group's name."""
    with h5py.File(tmp_path / "r.h5", "w") as f:
        with pytest.raises(ValueError, match="reserved"):
            with VersionedHDF5File(f).stage_version("v0") as g:
                g.create_dataset("__vhdf5__", data=np.arange(3.0))


# -- files written before the move -----------------------------------------------------


def test_legacy_file_is_read_where_it_keeps_the_index(legacy):
    before = Path(legacy).read_bytes()
    with h5py.File(legacy, "r") as f:
        reg = VersionRegistry(f)
        assert reg.loaded_from_index  # read from /_version_data/__vhdf5_version_index__
        vf = VersionedHDF5File(f)
        assert vf.versions == ["v0", "v1", "v2"] and vf["v1"]["x"][1] == -1
        assert generation.locate(f) == f[f"{OLD}/generation"].id.get_offset()
    assert Path(legacy).read_bytes() == before  # a read-only open writes nothing


def test_next_write_moves_the_group_and_keeps_the_counters_offset(legacy):
    with h5py.File(legacy, "r") as f:
        offset = generation.locate(f)
        token = f[OLD].attrs[COMMIT_TOKEN]
    assert _counters(legacy, offset).writes == 3
    with h5py.File(legacy, "r+") as f:
        with VersionedHDF5File(f).stage_version("v3") as g:
            g["x"][3] = -3
    with h5py.File(legacy, "r") as f:
        assert NEW in f and sorted(f["_version_data"]) == ["versions", "x"]
        assert generation.locate(f) == offset == f[f"{NEW}/generation"].id.get_offset()
        assert f[NEW].attrs[COMMIT_TOKEN] == token  # moved along: the commit caches stay shareable
        reg = VersionRegistry(f)
        assert reg.loaded_from_index and reg.names() == ["v0", "v1", "v2", "v3"]
    assert _counters(legacy, offset).writes == 4
    assert check_file(legacy).ok


@pytest.mark.parametrize("how", ["delete", "modify_metadata", "xarray"])
def test_every_mutation_moves_the_group(legacy, how):
    if how == "delete":
        with h5py.File(legacy, "r+") as f:
            xv.delete_versions(f, ["v1"])
    elif how == "modify_metadata":
        with h5py.File(legacy, "r+") as f:
            xv.modify_metadata(f, "x", fillvalue=-9.0)
    else:
        with xr.open_dataset(legacy, engine="vhdf5") as ds:
            ds = ds.load()
        ds["x"][0] = 42.0
        ds.vhdf5.commit("w", path=legacy)
    with h5py.File(legacy, "r") as f:
        assert NEW in f and "__vhdf5_version_index__" not in f["_version_data"]
        assert VersionRegistry(f).loaded_from_index
    assert check_file(legacy).ok


def test_versioned_hdf5_write_to_a_legacy_file_then_ours(legacy):
    with h5py.File(legacy, "r+") as f:
        with versioned_hdf5.VersionedHDF5File(f).stage_version("theirs") as g:
            g["x"][7] = 7.5
    with h5py.File(legacy, "r+") as f:
        vf = VersionedHDF5File(f)
        assert vf.versions[-1] == "theirs" and vf["theirs"]["x"][7] == 7.5
        with vf.stage_version("ours") as g:
            g["x"][8] = 8.5
    with h5py.File(legacy, "r") as f:
        assert NEW in f and sorted(f["_version_data"]) == ["versions", "x"]
    assert check_file(legacy).ok


def test_both_places_taken_the_root_one_is_used_and_the_other_left(legacy):
    with h5py.File(legacy, "r+") as f:
        f.copy(OLD, NEW)  # e.g. a user's copy: the group at the root is the one read and written
        del f[f"{NEW}/rows"]  # no index there: it is rebuilt at the root, not read from _version_data
        offset = f[f"{NEW}/generation"].id.get_offset()
    with h5py.File(legacy, "r+") as f:
        assert generation.locate(f) == offset
        with VersionedHDF5File(f).stage_version("v3") as g:
            g["x"][3] = -3
    with h5py.File(legacy, "r") as f:
        assert "rows" in f[NEW] and "__vhdf5_version_index__" in f["_version_data"]
        assert VersionRegistry(f).names() == ["v0", "v1", "v2", "v3"]
    assert _counters(legacy, offset).writes == 4


_HELD = """
import sys, h5py, numpy as np
from xarray_vhdf5 import VersionedHDF5File
from xarray_vhdf5.errors import StaleVersionError
from xarray_vhdf5._versions import generation
from xarray_vhdf5._versions.mutation import _OFFSETS, check_fresh
path = sys.argv[1]
# Read-only: a stale *writable* handle would write its stale superblock when closed (see
# tests/test_concurrency.py::test_a_stale_handle_is_refused_not_written).
f = h5py.File(path, "r", locking=False)
vf = VersionedHDF5File(f)
assert vf.versions == ["v0", "v1", "v2"]
print("offset", _OFFSETS[f.id.fileno], flush=True)  # located and cached at the legacy place
sys.stdin.readline()  # the other process commits (and moves the group) meanwhile
try:
    check_fresh(f)  # one pread at the cached offset, as before every read and commit
    print("fresh", flush=True)
except StaleVersionError:
    print("stale", flush=True)
f.close()
with h5py.File(path, "a", locking=False) as f:  # a fresh handle finds the group at its new place
    vf = VersionedHDF5File(f)
    with vf.stage_version("again") as g:
        g["x"][9] = 9.0
    print("again", generation.locate(f), flush=True)
"""


def test_a_process_that_cached_the_legacy_offset_sees_the_move_and_writes_the_live_counters(legacy):
    """Process A locates the counters at the legacy place; B commits and moves the group; A must
    see B's write at its cached offset (its handle is refused as stale), then commit on a fresh one."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HELD, legacy], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        word, cached = child.stdout.readline().split()
        assert word == "offset"
        with h5py.File(legacy, "a", locking=False) as f:
            with VersionedHDF5File(f).stage_version("mine") as g:
                g["x"][5] = 5.5
            assert NEW in f and "__vhdf5_version_index__" not in f["_version_data"]
            offset = generation.locate(f)
        assert offset == int(cached)
        out, _ = child.communicate("\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0
    lines = out.split("\n")
    assert lines[0] == "stale"  # A read B's write at the offset it cached before the move
    assert lines[1] == f"again {offset}"
    assert _counters(legacy, offset).writes == 5  # 3 + mine + again: one counter, never two
    with h5py.File(legacy, "r") as f:
        assert VersionedHDF5File(f).versions == ["v0", "v1", "v2", "mine", "again"]
        assert "generation" not in f["_version_data"]
        assert sorted(f[NEW]) == ["addresses", "generation", "log", "names", "rows", "small_map_log"]
    assert check_file(legacy).ok
