"""Damage an interrupted flush leaves, repaired by the next opener of this package (``versions.openrepair``).

A writer holding a plain ``h5py.File`` killed while libhdf5 flushes can tear
the versions group, or leave ``current_version`` naming a version that never
reached the file (or was left ``committed=False``). These tests make each
state by hand and check that this package's readers and writers repair it on
open (with :class:`~xarray_vhdf5.errors.RepairedFileWarning`), that every
version committed before reads the same after, that the next commit works,
that a read-only handle says what to do, and that a healthy file is neither
written nor warned about.
"""

from __future__ import annotations

import os
import warnings

import h5py
import numpy as np
import pytest
import versioned_hdf5
import xarray as xr

import xarray_vhdf5 as xv
from xarray_vhdf5._versions.openrepair import interrupted_damage, torn_versions
from xarray_vhdf5.errors import CorruptFileError, RepairedFileWarning, VersionNotFoundError

from .test_relink import VERSIONS, data, read_versions, tear_versions_group, write


def current_never_written(path) -> None:
    """``current_version`` names ``v13``, whose group is not in the file."""
    with h5py.File(path, "a") as f:
        f[VERSIONS].attrs["current_version"] = "v13"


def current_uncommitted(path) -> None:
    """``current_version`` names ``v13``, a group left with ``committed=False``."""
    with h5py.File(path, "a") as f:
        g = f[VERSIONS].create_group("v13")
        g.attrs["prev_version"] = "v12"
        g.attrs["committed"] = False
        g.attrs["timestamp"] = "2030-01-01 00:00:00.000000+0000"
        f[VERSIONS].attrs["current_version"] = "v13"


DAMAGE = {"torn": tear_versions_group, "never_written": current_never_written, "uncommitted": current_uncommitted}


@pytest.fixture
def history(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    return path, read_versions(path)


def assert_whole(path, before) -> None:
    after = read_versions(path)
    assert list(after) == list(before)
    for v, values in before.items():
        np.testing.assert_array_equal(after[v], values)
    with h5py.File(path, "r") as f:
        assert interrupted_damage(f) is None
        assert f[VERSIONS].attrs["current_version"] == "v12"
        np.testing.assert_array_equal(versioned_hdf5.VersionedHDF5File(f)["v5"]["x"][()], data(5))


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_the_reader_repairs_on_its_first_open(history, kind):
    path, before = history
    DAMAGE[kind](path)
    with h5py.File(path, "r") as f:
        assert interrupted_damage(f) is not None
    with pytest.warns(RepairedFileWarning, match="Repaired on open") as caught:
        with xv.VersionedHDF5File.open(path) as reader:
            assert reader.current_version == "v12"
            np.testing.assert_array_equal(reader[None]["x"][()], data(12))
    assert caught[0].message.path == os.fspath(path)
    assert_whole(path, before)


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_xarray_reads_then_commits_after_the_repair(history, kind):
    path, _ = history
    DAMAGE[kind](path)
    with pytest.warns(RepairedFileWarning):
        with xr.open_dataset(path, engine="vhdf5") as ds:
            np.testing.assert_array_equal(ds["x"].values, data(12))
            assert ds.encoding["vhdf5_version"] == "v12"
            staged = ds.vhdf5.stage()
    staged["x"][:8] = -1.0
    staged.vhdf5.commit("v13b")
    staged.close()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.encoding["vhdf5_version"] == "v13b"
        assert ds["x"].values[:9].tolist() == [-1.0] * 8 + [8 * 12.0]
    with h5py.File(path, "r") as f:
        assert f[VERSIONS]["v13b"].attrs["prev_version"] == "v12"


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_writable_plain_handle_repairs_then_commits(history, kind):
    path, before = history
    DAMAGE[kind](path)
    with h5py.File(path, "a") as f:
        with pytest.warns(RepairedFileWarning):
            vf = xv.VersionedHDF5File(f)
        assert vf.current_version == "v12"
        with vf.stage_version("v13b") as g:
            g["x"][:8] = -1.0
        assert vf["v13b"]["x"][:8].tolist() == [-1.0] * 8
    after = read_versions(path)
    for v, values in before.items():
        np.testing.assert_array_equal(after[v], values)
    with h5py.File(path, "r") as f:
        assert "v13" not in f[VERSIONS]  # the interrupted commit's leftover is gone
        assert f[VERSIONS]["v13b"].attrs["prev_version"] == "v12"


def test_a_read_only_handle_on_a_torn_versions_group_says_how_to_repair(history):
    path, before = history
    tear_versions_group(path)
    with h5py.File(path, "r") as f:
        assert torn_versions(interrupted_damage(f))
        with pytest.raises(CorruptFileError, match="read-only and cannot repair") as err:
            xv.VersionedHDF5File(f)
    assert isinstance(err.value, OSError) and "vhdf5 check --repair" in str(err.value)
    with pytest.warns(RepairedFileWarning):
        xv.VersionedHDF5File.open(path).close()
    assert_whole(path, before)


def test_a_read_only_handle_on_a_missing_current_version_lists_the_others(history):
    path, _ = history
    current_never_written(path)
    with h5py.File(path, "r") as f:
        vf = xv.VersionedHDF5File(f)
        np.testing.assert_array_equal(vf["v7"]["x"][()], data(7))
        with pytest.raises(VersionNotFoundError, match="never committed"):
            vf[None]


def test_a_reader_that_may_not_write_says_so(history, monkeypatch):
    path, _ = history
    current_never_written(path)
    from xarray_vhdf5._versions import mutation

    def refused(*args, **kwargs):  # what opening a file without write permission raises
        raise PermissionError(13, "Permission denied", os.fspath(path))

    monkeypatch.setattr(mutation, "open_for_writing", refused)
    with pytest.raises(CorruptFileError, match="may not write the file to repair it") as err:
        xv.VersionedHDF5File.open(path)
    assert "never reached the file" in str(err.value)
    with h5py.File(path, "r") as f:
        assert f[VERSIONS].attrs["current_version"] == "v13"  # nothing was changed


def test_a_healthy_file_is_not_written_and_nothing_is_said(history):
    path, _ = history
    with h5py.File(path, "r") as f:
        assert interrupted_damage(f) is None
    stamp = os.stat(path).st_mtime_ns, os.path.getsize(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RepairedFileWarning)
        with xv.VersionedHDF5File.open(path) as reader:
            reader[None]["x"][()]
        with xr.open_dataset(path, engine="vhdf5") as ds:
            ds.load()
        with h5py.File(path, "r") as f:
            xv.VersionedHDF5File(f)
    assert (os.stat(path).st_mtime_ns, os.path.getsize(path)) == stamp


def test_a_current_version_that_cannot_be_read_is_damage(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 3)
    with h5py.File(path, "r") as f:
        assert interrupted_damage(f) is None
        assert interrupted_damage(f["_version_data"]) is None  # not the group holding it: nothing said
    from .test_relink import tear

    tear(path, f"{VERSIONS}/v3")
    with h5py.File(path, "r") as f:
        why = interrupted_damage(f)
    assert why is not None and "'v3' cannot be read" in why and not torn_versions(why)
    with pytest.warns(RepairedFileWarning, match="current version v2") as caught:
        with xv.VersionedHDF5File.open(path) as reader:
            assert reader.current_version == "v2"
            assert reader.versions == ["v1", "v2"]  # v3's own header is torn: it is said, not kept
            np.testing.assert_array_equal(reader["v1"]["x"][()], data(1))
    assert "not relinked: v3" in str(caught[0].message)


def test_a_torn_hash_table_is_written_again_when_a_commit_meets_it(history):
    path, before = history
    from .test_relink import tear

    tear(path, "_version_data/x/hash_table")
    with h5py.File(path, "a") as f:
        vf = xv.VersionedHDF5File(f)  # the open does not read hash tables
        with pytest.warns(RepairedFileWarning, match="hash table of 'x'"):
            with pytest.raises(CorruptFileError, match="cannot be read") as err:
                with vf.stage_version("v13") as g:
                    g["x"][:8] = -1.0  # staging reads the table's state: refused, nothing committed
        assert isinstance(err.value, OSError) and err.value.repaired
        assert "stage the version again" in err.value.__notes__[0]
        assert vf.versions == list(before)
        with vf.stage_version("v13") as g:  # staged again: commits
            g["x"][:8] = -1.0
    assert read_versions(path)["v13"][:9].tolist() == [-1.0] * 8 + [8 * 12.0]
    assert_whole_after_more(path, before)


def test_an_xarray_commit_that_meets_a_torn_hash_table_commits_after_writing_it_again(history):
    path, before = history
    from .test_relink import tear

    with xr.open_dataset(path, engine="vhdf5") as ds:
        staged = ds.vhdf5.stage()
    tear(path, "_version_data/x/hash_table")
    staged["x"][:8] = -1.0
    with pytest.warns(RepairedFileWarning, match="hash table of 'x'"):
        staged.vhdf5.commit("v13")  # refused once inside, written again, committed on the retry
    staged.close()
    with xr.open_dataset(path, engine="vhdf5") as ds:
        assert ds.encoding["vhdf5_version"] == "v13"
        assert ds["x"].values[:9].tolist() == [-1.0] * 8 + [8 * 12.0]
    assert_whole_after_more(path, before)


def assert_whole_after_more(path, before) -> None:
    """Every version of ``before`` reads the same, and the file checks out (chunks re-hashed)."""
    from xarray_vhdf5._versions.check import check_file

    after = read_versions(path)
    for v, values in before.items():
        np.testing.assert_array_equal(after[v], values)
    assert check_file(path, rehash=True).ok


def test_a_torn_swap_left_in_the_scratch_group_does_not_free_the_versions_object(tmp_path):
    """A move into place torn by a kill: linked in the scratch group and in its version, counted once.

    As a plain-handle ``modify_metadata`` killed inside libhdf5's flush left
    it (seed 98, #87 of ``run_kills``): finishing the run deleted the scratch
    group, which freed six versions' datasets. The recovery counts the second
    link first.
    """
    import ctypes
    import json

    from xarray_vhdf5._backend._libhdf5 import libhdf5_function
    from xarray_vhdf5._versions.check import check_file
    from xarray_vhdf5._versions.scratch import Scratch

    decr = libhdf5_function("H5Odecr_refcount", [ctypes.c_int64])
    path = tmp_path / "f.h5"
    write(path, 3)
    before = read_versions(path)
    with h5py.File(path, "a") as f:
        scratch = f.create_group("_version_data/__vhdf5_scratch__")
        scratch["pending2"] = f[f"{VERSIONS}/v2/x"]  # the swap done, the scratch link left
        scratch.attrs["journal"] = json.dumps([["pending2", f"/{VERSIONS}/v2/x"]])
        with h5py._objects.phil:
            assert decr(scratch["pending2"].id.id) >= 0  # the header counting one link, as torn
        assert h5py.h5o.get_info(scratch["pending2"].id).rc == 1
    with h5py.File(path, "a") as f:
        assert Scratch.recover(f)
        assert h5py.h5o.get_info(f[f"{VERSIONS}/v2/x"].id).rc == 1
    assert check_file(path, rehash=True).ok
    after = read_versions(path)
    for v, values in before.items():
        np.testing.assert_array_equal(after[v], values)
