"""Torn object headers: a versions group rebuilt from the version index's addresses, a hash table rebuilt.

A kill while libhdf5 flushes a plain h5py handle held open across commits can
tear ``_version_data/versions`` (its header's checksum no longer matches): no
version can then be listed or opened although every version group is intact.
These tests tear it by hand (bytes of its header overwritten) and check that
``vhdf5 check`` says so, that ``vhdf5 check --repair`` (and ``repair``) relink
every version from the index, and that what cannot be relinked is said, never
guessed; and that a hash table whose header is torn is written again from the
versions by the same command.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import versioned_hdf5
from click.testing import CliRunner

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.h5objects import object_address, open_by_address
from xarray_vhdf5._versions import index as version_index
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5._versions.relink import relink_versions, versions_readable
from xarray_vhdf5._versions.repair import repair
from xarray_vhdf5.cli._main import cli
from xarray_vhdf5.errors import CorruptFileError

VERSIONS = "_version_data/versions"


def data(k: int) -> np.ndarray:
    return np.arange(40.0) * k


def write(path, n: int = 12) -> None:
    """``v1``..``vn`` (12: the versions group's links then live in its dense storage)."""
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        for k in range(1, n + 1):
            with vf.stage_version(f"v{k}") as g:
                if k == 1:
                    g.create_dataset("x", data=data(k), chunks=(8,))
                else:
                    g["x"][...] = data(k)


def tear_versions_group(path) -> None:
    """Overwrite 16 bytes inside the versions group's object header (its checksum then fails)."""
    with h5py.File(path, "r") as f:
        addr = object_address(f[VERSIONS].id)
    with open(path, "r+b") as fh:
        fh.seek(addr + 8)
        fh.write(b"\xa5" * 16)


def read_versions(path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        vf = xv.VersionedHDF5File(f)
        return {v: vf[v]["x"][()] for v in vf.versions}


def test_open_by_address_opens_the_object_and_refuses_a_wrong_address(tmp_path):
    with h5py.File(tmp_path / "a.h5", "w") as f:
        g = f.create_group("a/b")
        g.attrs["k"] = 7
        obj = open_by_address(f.id, object_address(g.id))
        assert h5py.Group(obj).attrs["k"] == 7
        with pytest.raises(KeyError, match="no object can be opened at address 3"):
            open_by_address(f.id, 3)


def test_commits_record_each_version_group_address(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 5)
    with h5py.File(path, "r") as f:
        entries, addresses = version_index.read_addresses(f["_version_data"])
        names = entries.names
        expect = [object_address(f[VERSIONS][n].id) for n in names]
    assert names == [f"v{k}" for k in range(1, 6)]
    assert entries.parents[1:] == names[:-1]
    assert entries.committed.all()
    assert addresses.tolist() == expect


def test_an_index_written_before_addresses_gets_them_at_the_next_commit(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 4)
    with h5py.File(path, "a") as f:  # as an index written by an earlier release of this package
        del f["__vhdf5__/addresses"]
    with h5py.File(path, "a") as f:
        with xv.VersionedHDF5File(f).stage_version("v5") as g:
            g["x"][...] = data(5)
    with h5py.File(path, "r") as f:
        entries, addresses = version_index.read_addresses(f["_version_data"])
        names = entries.names
        assert addresses.tolist() == [object_address(f[VERSIONS][n].id) for n in names]
    assert len(names) == 5


def test_a_torn_versions_group_is_reported_and_relinked_by_check_repair(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    before = read_versions(path)
    tear_versions_group(path)
    with h5py.File(path, "r") as f:
        assert not versions_readable(f["_version_data"])
    report = check_file(path)
    assert not report.ok
    assert any("rebuilds it from the version index" in str(p) for p in report.errors)

    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert result.exit_code == 1, result.output  # the file was damaged when checked
    assert "12 versions relinked" in result.output
    assert "after repair" in result.output
    assert check_file(path).ok
    after = read_versions(path)
    assert list(after) == list(before)
    for v in before:
        np.testing.assert_array_equal(after[v], before[v])
    with h5py.File(path, "r") as f:
        assert f[VERSIONS].attrs["current_version"] == "v12"
        assert "damaged_version_data" in f["__vhdf5__"]
        # versioned-hdf5 2.6 reads the relinked file, and the next commit works
        vh = versioned_hdf5.VersionedHDF5File(f)
        np.testing.assert_array_equal(vh["v7"]["x"][()], data(7))
    with h5py.File(path, "a") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v13") as g:
            g["x"][:8] = -1
        assert vf.current_version == "v13"
        assert f[VERSIONS]["v13"].attrs["prev_version"] == "v12"
    assert read_versions(path)["v13"][:8].tolist() == [-1.0] * 8


def test_repair_relinks_then_rolls_back_an_interrupted_commit(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    with h5py.File(path, "a") as f:  # an interrupted commit: a group left with committed=False
        g = f[VERSIONS].create_group("v13")
        g.attrs["prev_version"] = "v12"
        g.attrs["committed"] = False
        g.attrs["timestamp"] = "2030-01-01 00:00:00.000000+0000"
    with h5py.File(path, "a") as f:
        xv.VersionedHDF5File(f)  # the index rebuilt by a scan (with the leftover, uncommitted)
    tear_versions_group(path)
    report = check_file(path)
    with h5py.File(path, "a") as f:
        done = repair(f, report)
    assert done.relinked is not None
    assert "v13" in done.relinked.lost and "interrupted" in done.relinked.lost["v13"]
    assert len(done.relinked.relinked) == 12
    assert check_file(path).ok
    assert sorted(read_versions(path)) == sorted(f"v{k}" for k in range(1, 13))


def test_without_addresses_nothing_is_guessed(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 3)
    with h5py.File(path, "a") as f:
        del f["__vhdf5__/addresses"]
    tear_versions_group(path)
    with h5py.File(path, "a") as f, pytest.raises(CorruptFileError, match="reaches no version") as info:
        relink_versions(f)
    assert isinstance(info.value, OSError)
    assert "no address" in str(info.value)


def test_a_readable_versions_group_is_left_alone(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 3)
    with h5py.File(path, "a") as f:
        assert relink_versions(f) is None
        assert "damaged_version_data" not in f.get("__vhdf5__", {})


def test_relink_through_a_journaled_handle(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    before = read_versions(path)
    tear_versions_group(path)
    with xv.open_file(path) as f:
        done = relink_versions(f)
    assert done is not None and len(done.relinked) == 12
    assert not (tmp_path / "f.h5-journal").exists()
    after = read_versions(path)
    assert list(after) == list(before)
    assert all(np.array_equal(after[v], before[v]) for v in before)


def test_relink_of_a_file_keeping_its_bookkeeping_at_the_legacy_place(tmp_path):
    path = tmp_path / "f.h5"
    write(path)
    before = read_versions(path)
    with h5py.File(path, "r+") as f:  # as files written before 2026-11 keep it
        f.move("/__vhdf5__", "/_version_data/__vhdf5_version_index__")
    tear_versions_group(path)
    with h5py.File(path, "a") as f:
        done = relink_versions(f)
        assert done is not None and done.moved_to == "/__vhdf5__/damaged_version_data"
        assert sorted(f["_version_data"]) == ["versions", "x"]  # versioned-hdf5's layout, nothing of ours
    after = read_versions(path)
    assert list(after) == list(before)
    assert check_file(path).ok


def tear(path, obj_path: str) -> None:
    """Overwrite 16 bytes inside the object header at ``obj_path`` (its checksum then fails)."""
    with h5py.File(path, "r") as f:
        addr = object_address(f[obj_path].id)
    with open(path, "r+b") as fh:
        fh.seek(addr + 8)
        fh.write(b"\xa5" * 16)


def test_a_torn_hash_table_is_written_again_by_check_repair(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 6)
    before = read_versions(path)
    tear(path, "_version_data/x/hash_table")
    # (a commit meeting it writes it again itself: tests/test_openrepair.py)
    assert not check_file(path).ok
    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert "hash tables that could not be read written again from the versions: x" in result.output
    assert check_file(path, rehash=True).ok
    after = read_versions(path)
    assert all(np.array_equal(after[v], before[v]) for v in before)
    with h5py.File(path, "r") as f:
        assert "x" in f["__vhdf5__/damaged_datasets"]  # parked, never deleted (deleting reads the header)
        assert sorted(f["_version_data"]) == ["versions", "x"]
    with h5py.File(path, "a") as f:  # the next commit deduplicates against the rebuilt table
        table = f["_version_data/x/hash_table"]
        rows_before = int(table.attrs["largest_index"])
        with xv.VersionedHDF5File(f).stage_version("v7") as g:
            g["x"][...] = data(3)  # every chunk already stored (version v3's)
        assert int(f["_version_data/x/hash_table"].attrs["largest_index"]) == rows_before
    with h5py.File(path, "r+") as f:  # versioned-hdf5 2.6 commits to the repaired file too
        with versioned_hdf5.VersionedHDF5File(f).stage_version("w8") as g:
            g["x"][:8] = -2
    assert read_versions(path)["w8"][:8].tolist() == [-2.0] * 8


def test_repack_leaves_the_parked_groups_out(tmp_path):
    path = tmp_path / "f.h5"
    write(path, 14)
    before = read_versions(path)
    tear(path, "_version_data/x/hash_table")
    tear_versions_group(path)
    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert "14 versions relinked" in result.output and "written again from the versions: x" in result.output
    with h5py.File(path, "r") as f:
        assert sorted(k for k in f["__vhdf5__"] if k.startswith("damaged_")) == [
            "damaged_datasets",
            "damaged_version_data",
        ]
    xv.repack(path)
    with h5py.File(path, "r") as f:
        assert not [k for k in f["__vhdf5__"] if k.startswith("damaged_")]
    assert check_file(path, rehash=True).ok
    after = read_versions(path)
    assert list(after) == list(before) and all(np.array_equal(after[v], before[v]) for v in before)


def test_a_relink_killed_between_its_link_moves_is_finished_by_the_repair(tmp_path):
    """Through a plain handle, a kill after the old ``_version_data`` was parked leaves the new one aside."""
    path = tmp_path / "f.h5"
    write(path, 4)
    before = read_versions(path)
    with h5py.File(path, "a") as f:  # the state between relink's two moves
        f.move("/_version_data", "/__vhdf5_relinking__")
    report = check_file(path)
    assert [p.what for p in report.errors] == [
        "a relink of the versions group was interrupted: /_version_data is at /__vhdf5_relinking__; "
        "--repair moves it back"
    ]
    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert "no problems found" in result.output, result.output
    after = read_versions(path)
    assert list(after) == list(before) and all(np.array_equal(after[v], before[v]) for v in before)
    with h5py.File(path, "r") as f:
        assert f[VERSIONS].attrs["current_version"] == "v4"  # not rolled back by the stale report
