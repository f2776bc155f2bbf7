"""A raw_data chunk index libhdf5 cannot read, rebuilt by ``vhdf5 check --repair`` (``_versions/reindex.py``).

A plain-handle commit killed inside libhdf5's flush tore a node of raw_data's
chunk B-tree (once in 400 kills, ``docs/benchmarks.md``): libhdf5 then cannot
read the versions mapping chunks under it, although every chunk is whole. The
tests tear that node on purpose (its signature zeroed) and check what the
repair gives back, against the values each version was committed with.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import versioned_hdf5
from click.testing import CliRunner

import xarray_vhdf5 as xv
from xarray_vhdf5._backend.h5objects import object_address
from xarray_vhdf5._versions.check import check_file
from xarray_vhdf5._versions.reindex import reindex, unindexed
from xarray_vhdf5.cli._main import cli

RAW = "/_version_data/x/raw_data"


def _build(path) -> dict[str, np.ndarray]:
    """x: 100 chunks of 3 points; v1-v3 each rewrite 30 others: raw_data holds 190 chunks (2 B-tree leaves)."""
    model = {}
    data = np.arange(300.0)
    with h5py.File(path, "w") as f:
        vf = xv.VersionedHDF5File(f)
        with vf.stage_version("v0") as g:
            g.create_dataset("x", data=data, chunks=(3,))
            g.create_dataset("y", data=np.arange(10), chunks=(5,))
        model["v0"] = data.copy()
        for i in (1, 2, 3):
            new = -np.arange(90.0) - 1000 * i  # no chunk like another: none deduplicated
            with vf.stage_version(f"v{i}") as g:
                g["x"][(i - 1) * 90 : i * 90] = new
            data[(i - 1) * 90 : i * 90] = new
            model[f"v{i}"] = data.copy()
    return model


def _tear_newest_leaf(path) -> None:
    """Zero the signature of the leaf of x's raw_data chunk B-tree (v1) that holds its newest chunks.

    A v1 B-tree node: ``TREE``, node type (1: chunks), level (0: leaf), entries
    used (2 bytes), two sibling addresses, then keys (chunk size, filter mask,
    ``ndim + 1`` offsets) between child addresses (``H5B`` in the HDF5 file format).
    """
    with h5py.File(path, "r") as f:
        raw = f[RAW]
        addresses: set[int] = set()
        raw.id.chunk_iter(lambda info: addresses.add(info.byte_offset))
        key = 8 + 8 * (raw.ndim + 1)
    blob = bytearray(path.read_bytes())
    leaves = []
    at = blob.find(b"TREE")
    while at >= 0:
        if blob[at + 4] == 1 and blob[at + 5] == 0:
            child = int.from_bytes(blob[at + 24 + key : at + 32 + key], "little")
            first_row = int.from_bytes(blob[at + 32 : at + 40], "little")
            if child in addresses:
                leaves.append((first_row, at))
        at = blob.find(b"TREE", at + 1)
    assert len(leaves) >= 2, leaves
    at = max(leaves)[1]
    blob[at : at + 4] = b"\0\0\0\0"
    path.write_bytes(bytes(blob))


def _assert_versions(path, model, names) -> None:
    """Each of ``names`` reads its model's values through h5py, versioned-hdf5 and this package's reader."""
    with h5py.File(path, "r") as f:
        theirs = versioned_hdf5.VersionedHDF5File(f)
        for v in names:
            np.testing.assert_array_equal(f[f"/_version_data/versions/{v}/x"][()], model[v], err_msg=v)
            np.testing.assert_array_equal(theirs[v]["x"][()], model[v], err_msg=v)
    with xv.VersionedHDF5File.open(path) as reader:
        for v in names:
            np.testing.assert_array_equal(reader[v]["x"][()], model[v], err_msg=v)


def _next_commit_goes_on(path, model) -> None:
    """Commit v4 (one point of x changed) through the journaled opener; the file then checks clean and every
    version, v4 included, reads its model's values."""
    with xv.open_file(path, "r+") as f:
        with xv.VersionedHDF5File(f).stage_version("v4") as g:
            g["x"][0] = 1234.0
    model["v4"] = model["v3"].copy()
    model["v4"][0] = 1234.0
    assert check_file(path, rehash=True).ok
    _assert_versions(path, model, list(model))


def test_repair_rebuilds_a_torn_chunk_index_and_keeps_every_version(tmp_path):
    path = tmp_path / "torn.h5"
    model = _build(path)
    _tear_newest_leaf(path)
    with h5py.File(path, "r") as f, pytest.raises(OSError, match="B-tree"):
        f["/_version_data/versions/v3/x"][()]
    report = check_file(path)
    assert any("chunk index cannot be read" in p.what for p in report.errors), str(report)
    with xv.VersionedHDF5File.open(path) as reader:  # the address table still reaches every chunk
        np.testing.assert_array_equal(reader["v3"]["x"][()], model["v3"])

    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])  # exit code 1: damage was found
    assert "raw_data chunk index rebuilt: x: 190 chunks" in result.output, result.output
    assert "after repair:" in result.output and "no problems found" in result.output.split("after repair:")[1]
    with h5py.File(path, "r") as f:
        assert unindexed(f) == []
        assert "damaged_datasets" in f["__vhdf5__"]  # the old raw_data kept, not freed
    after = check_file(path, rehash=True)
    assert after.ok and after.chunks_rehashed > 0, str(after)
    _assert_versions(path, model, ["v0", "v1", "v2", "v3"])

    _next_commit_goes_on(path, model)


def test_a_commit_into_a_torn_chunk_index_says_what_to_run(tmp_path):
    """libhdf5 cannot add a chunk under a torn node: the commit raises CorruptFileError (not libhdf5's bare
    RuntimeError) naming `vhdf5 check --repair`, commits nothing, and commits after the repair."""
    path = tmp_path / "torn.h5"
    model = _build(path)
    _tear_newest_leaf(path)
    with xv.open_file(path, "r+") as f, pytest.raises(xv.CorruptFileError, match="check --repair") as err:
        with xv.VersionedHDF5File(f).stage_version("v4") as g:
            g["x"][0] = 1234.0
    assert "B-tree" in str(err.value) and isinstance(err.value, OSError)
    with h5py.File(path, "r") as f:
        assert "v4" not in f["/_version_data/versions"]
    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert "raw_data chunk index rebuilt" in result.output and "no problems found" in result.output, result.output
    _next_commit_goes_on(path, model)


def test_without_the_address_table_the_versions_needing_lost_chunks_are_rolled_back(tmp_path):
    path = tmp_path / "torn.h5"
    model = _build(path)
    with h5py.File(path, "r+") as f:
        del f["__vhdf5__/chunk_addresses"]  # as versioned-hdf5's commits leave a file: no byte ranges kept
    _tear_newest_leaf(path)
    with xv.open_file(path, "r+") as f:
        rebuilt = reindex(f, unindexed(f))
    assert len(rebuilt) == 1 and rebuilt[0].missing and rebuilt[0].from_table == 0
    assert rebuilt[0].from_index + len(rebuilt[0].missing) == rebuilt[0].chunks == 190
    result = CliRunner().invoke(cli, ["check", "--repair", str(path)])
    assert "deleted damaged versions" in result.output, result.output
    assert check_file(path, rehash=True).ok
    with h5py.File(path, "r") as f:
        left = sorted(v for v in f["/_version_data/versions"] if v != "__first_version__")
    assert "v0" in left and "v3" not in left
    _assert_versions(path, model, left)  # no surviving version reads a fill value it did not hold


def test_reindexing_a_whole_index_copies_every_chunk_and_changes_no_value(tmp_path):
    path = tmp_path / "whole.h5"
    model = _build(path)
    with h5py.File(path, "r") as f:
        assert unindexed(f) == []
        before = object_address(f[RAW].id)
    with xv.open_file(path, "r+") as f:
        (done,) = reindex(f, ["x"])
    assert (done.from_index, done.from_table, done.missing) == (190, 0, [])
    with h5py.File(path, "r") as f:
        assert object_address(f[RAW].id) != before
        assert dict(f[RAW].attrs) == dict(f[done.parked].attrs)
        assert f[RAW].compression == f[done.parked].compression and f[RAW].fillvalue == f[done.parked].fillvalue
    assert check_file(path, rehash=True).ok
    _assert_versions(path, model, list(model))


@pytest.mark.parametrize("torn", ["group", "dataset"])
def test_a_deletion_parks_a_torn_chunk_map_group_instead_of_failing(tmp_path, torn):
    """A torn group under the bookkeeping caches (a killed commit's chunk map), or a torn header of a
    map in it, made libhdf5 fail the unlink halfway, and then refuse to move it aside too: the
    deletion that drops the caches failed."""
    path = tmp_path / "maps.h5"
    model = _build(path)
    with h5py.File(path, "r") as f:
        target = object_address(f["__vhdf5__/chunk_maps/v3/x"].id)
    blob = bytearray(path.read_bytes())
    if torn == "group":  # the symbol table node listing chunk_maps/v3's members
        at = blob.find(b"SNOD")
        while at >= 0 and int.from_bytes(blob[at + 16 : at + 24], "little") != target:
            at = blob.find(b"SNOD", at + 1)
        assert at >= 0
        blob[at : at + 4] = b"\0\0\0\0"
    elif blob[target : target + 4] == b"OHDR":  # the map's header (version 2): its checksum fails
        blob[target + 6] ^= 0xFF
    else:  # version 1: the first message's size past the header's end
        blob[target + 18 : target + 20] = b"\xff\xff"
    path.write_bytes(bytes(blob))
    with h5py.File(path, "r") as f, pytest.raises((KeyError, RuntimeError, OSError)):
        [f["__vhdf5__/chunk_maps/v3"][k].shape for k in f["__vhdf5__/chunk_maps/v3"]]

    with xv.open_file(path, "r+") as f:
        xv.delete_versions(f, ["v1"])
    with h5py.File(path, "r") as f:
        assert "chunk_maps" not in f["__vhdf5__"] or "v3" not in f["__vhdf5__/chunk_maps"]
        assert "damaged_caches" in f["__vhdf5__"]
    assert check_file(path, rehash=True).ok
    _assert_versions(path, model, ["v0", "v2", "v3"])
